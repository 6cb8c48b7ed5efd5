#!/usr/bin/env bash
# One prepared call on the GPU machine: installs the wheelhouse, runs the device tests, then the paper-setting
# benchmarks, within CHECK_BUDGET_S seconds (default 420; a benchmark run stopped at the end of its share may add up
# to 2 minutes, so the call ends inside a 9-minute limit), and writes at most 8 files into OUTDIR:
#   summary.md (the verdicts and the key numbers), results.md / results.json (bench/throughput.py's table and data),
#   tests.log / tests.xml (pytest), bench.log, env.txt (machine, GPU, versions), logs.tar.gz (every run's output).
#
#   bench/gpu/check.sh OUTDIR              # on the GPU machine (python3 there holds its own CUDA torch)
#   bench/gpu/check.sh OUTDIR --rehearse   # here, on the CPU: a fresh venv, tiny sizes, the same steps
#
# The wheelhouse comes from bench/gpu/make_wheelhouse.sh (GPU) or make_wheelhouse.sh --local (rehearsal).
set -uo pipefail
usage="usage: bench/gpu/check.sh OUTDIR [--rehearse]"
if [ $# -lt 1 ] || [ $# -gt 2 ] || { [ $# -eq 2 ] && [ "$2" != --rehearse ]; }; then echo "$usage" >&2; exit 2; fi
START=$(date +%s)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1" && OUT=$(cd "$1" && pwd)
REHEARSE=$([ "${2:-}" = --rehearse ] && echo 1 || echo 0)
BUDGET=${CHECK_BUDGET_S:-420}
WORK=$(mktemp -d)
cd "$ROOT"
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "[check $(elapsed) s] $*"; }

if [ "$REHEARSE" = 1 ]; then
  # A stand-in for the GPU machine: a fresh venv holding only what that machine has of what the scripts import.
  PYVER=$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
  TAG=cp$PYVER DEVICE=cpu SIZE=--quick TESTS_S=${CHECK_TESTS_S:-600} WORKERS=2
  VENV=${REHEARSE_VENV:-$WORK/venv}
  say "rehearsal: fresh venv $VENV"
  python3 -m venv "$VENV" || exit 1
  # (envpool imports matplotlib at import time, for Jumanji's rendering; the GPU machine has it)
  "$VENV/bin/python" -m pip install -q torch==2.13.0 'numpy>=1.26,<3' tensorboard pytest pytest-xdist matplotlib seaborn pandas \
    pillow absl-py attrs wrapt cloudpickle packaging typing-extensions >"$WORK/pip.log" 2>&1 \
    || { cat "$WORK/pip.log"; exit 1; }
  PY=$VENV/bin/python
  export OMP_NUM_THREADS=1  # on a small shared CPU more torch threads spin against envpool's (as in the tests)
else
  TAG=cp312 DEVICE=cuda SIZE= TESTS_S=${CHECK_TESTS_S:-210} WORKERS=4  # 16 cores; one GPU shared by the workers
  PY=python3
fi
WH=$ROOT/bench/gpu/wheelhouse/$TAG
if ! ls "$WH"/*.whl >/dev/null 2>&1; then
  echo "error: no wheels in $WH; run bench/gpu/make_wheelhouse.sh$([ "$REHEARSE" = 1 ] && echo ' --local') first" >&2
  exit 2
fi
say "installing $(ls "$WH"/*.whl | wc -l) wheels from $WH"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$WH"/*.whl || exit 1
export PYTHONPATH=$WORK/site ENVPOOL_ASSETS_PATH=$WH/envpool-assets PYTHONUNBUFFERED=1

{
  date -u; uname -a; echo "cores: $(getconf _NPROCESSORS_ONLN)"; free -g 2>/dev/null | head -2
  nvidia-smi 2>/dev/null || echo "no nvidia-smi"
  "$PY" - <<'PY'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "numpy", "envpool", "ale_py", "gymnasium", "tyro", "typeguard", "typing_extensions", "optree",
             "dm_env", "tensorboard", "pytest", "xdist"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')} {m.__file__}")
    except Exception as e:
        print(f"{name}: IMPORT FAILED {type(e).__name__}: {e}")
import torch
print("cuda available:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("cudnn.allow_tf32:", torch.backends.cudnn.allow_tf32, "matmul.allow_tf32:", torch.backends.cuda.matmul.allow_tf32)
PY
} >"$OUT/env.txt" 2>&1
say "environment: $(grep -E '^(torch|envpool|cuda available)' "$OUT/env.txt" | tr '\n' ';')"

say "(a) device tests on $DEVICE, $WORKERS workers (at most $TESTS_S s)"
ABS_TEST_DEVICE=$DEVICE timeout -k 10 "$TESTS_S" "$PY" -m pytest tests/test_cuda.py -m cuda -n "$WORKERS" -v -rA \
  -p no:cacheprovider --junitxml="$OUT/tests.xml" 2>&1 | tee "$OUT/tests.log"
TESTS_RC=${PIPESTATUS[0]}
say "tests exit $TESTS_RC"

# The GPU call gives the benchmarks what the tests left of the budget; the rehearsal a fixed few minutes.
LEFT=$(( BUDGET - $(elapsed) - 25 ))
[ "$LEFT" -lt 120 ] && LEFT=120
[ "$REHEARSE" = 1 ] && LEFT=${CHECK_BENCH_S:-240}
say "(b) benchmarks, budget $LEFT s"
"$PY" bench/throughput.py $SIZE --groups pqn-gpu btr-gpu --rounds 2 --budget "$LEFT" --out "$OUT" \
  --keep-logs "$WORK/runs" 2>&1 | tee "$OUT/bench.log"
BENCH_RC=${PIPESTATUS[0]}
say "benchmarks exit $BENCH_RC"

"$PY" "$ROOT/bench/gpu/summary.py" "$OUT" --tests-rc "$TESTS_RC" --bench-rc "$BENCH_RC" --seconds "$(elapsed)" \
  --mode "$([ "$REHEARSE" = 1 ] && echo "rehearsal on the CPU" || echo GPU)" >"$OUT/summary.md"
tar czf "$OUT/logs.tar.gz" -C "$WORK" runs 2>/dev/null || true
rm -rf "$WORK"
cat "$OUT/summary.md"
say "done; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
[ "$TESTS_RC" = 0 ] && [ "$BENCH_RC" = 0 ]
