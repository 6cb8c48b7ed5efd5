#!/usr/bin/env bash
# Downloads the Python packages the GPU machine lacks, as wheels, into bench/gpu/wheelhouse/<tag>/ (git-ignored),
# so that bench/gpu/check.sh can install them there without a network.
#
#   bench/gpu/make_wheelhouse.sh            # CPython 3.12, manylinux x86_64: the GPU machine (wheelhouse/cp312)
#   bench/gpu/make_wheelhouse.sh --local    # this machine's python3, for `check.sh --rehearse` (wheelhouse/cp3XX)
#
# The GPU machine already has torch (its own CUDA build), numpy, tensorboard, pytest, matplotlib, pandas, pillow,
# packaging, typing-extensions, absl-py, attrs, wrapt and cloudpickle; what the PQN, GNS and BTR scripts need beyond
# that is envpool and tyro and what they import: the closure below, one pinned version each (the versions the
# project is tested with). Left out on purpose: ale-py (envpool brings its own emulator; nothing imports ale_py),
# glfw (envpool imports it only for MuJoCo rendering on Windows), types-protobuf (type stubs), and envpool's asset
# packages (62 MB and more: MuJoCo, VizDoom, football). Of those assets only the Atari ROMs are needed; they are
# taken from envpool-assets into wheelhouse/<tag>/envpool-assets/ and found through ENVPOOL_ASSETS_PATH.
set -euo pipefail

PINS=(envpool==1.2.5 dm-env==1.6 dm-tree==0.1.10 optree==0.20.0 gymnasium==1.4.0 farama-notifications==0.0.6
      tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1)
ASSETS=envpool-assets==0.3.0
LIMIT_MB=60

case "${1:-}" in
  "") PYVER=3.12 ;;
  --local) PYVER=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') ;;
  *) echo "error: unknown argument '$1'; use no argument (CPython 3.12, the GPU machine) or --local" >&2; exit 2 ;;
esac
TAG=cp${PYVER/./}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$HERE/wheelhouse/$TAG
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rm -rf "$OUT"
mkdir -p "$OUT"

# pip matches manylinux tags exactly: list the ones these wheels are published under (glibc 2.17 to 2.28).
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  PLATFORMS+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT" "${PINS[@]}"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$TMP" "$ASSETS"

# The Atari ROMs alone, laid out as envpool expects under ENVPOOL_ASSETS_PATH; envpool's VizDoom registration
# lists vizdoom/maps at import, so it gets an empty folder.
mkdir -p "$OUT/envpool-assets/vizdoom/maps"
python3 - "$TMP"/envpool_assets-*.whl "$OUT/envpool-assets" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1:3]
with zipfile.ZipFile(wheel) as z:
    roms = [n for n in z.namelist() if n.startswith("envpool_assets/atari/roms/") and n.endswith(".bin")]
    assert len(roms) > 50, f"no Atari ROMs in {wheel}"
    for n in roms:
        z.extract(n, dest + "/..tmp")
import os, shutil
os.makedirs(dest + "/atari", exist_ok=True)
shutil.move(dest + "/..tmp/envpool_assets/atari/roms", dest + "/atari/roms")
shutil.rmtree(dest + "/..tmp")
print(f"{len(roms)} Atari ROMs")
PY

# One wheel per distribution: two versions of one package would stop the install.
dups=$(ls "$OUT"/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then echo "error: more than one wheel of: $dups" >&2; exit 1; fi
ls -l "$OUT"/*.whl | awk '{printf "%10d  %s\n", $5, $9}'
bytes=$(du -sb "$OUT" | cut -f1)
mb=$(python3 -c "print(f'{$bytes / 1e6:.1f}')")
echo "wheelhouse $OUT: $(ls "$OUT"/*.whl | wc -l) wheels + Atari ROMs, $mb MB in all"
if [ "$bytes" -gt $((LIMIT_MB * 1000000)) ]; then echo "error: over $LIMIT_MB MB" >&2; exit 1; fi
