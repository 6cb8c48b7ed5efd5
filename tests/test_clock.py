"""A wall clock that jumps (NTP stepping a fresh node's clock back, a suspended VM) changes no duration a run keeps:
training seconds, SPS and the progress lines come from a monotonic clock (abs_utils.Run), so a stop under such a
clock checkpoints a positive train_seconds and its --resume goes on to the end. The wall clock only labels (the
default run name, TensorBoard's event wall times)."""
import json
import os
import subprocess
import sys

from scripts import CPU, ROOT, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

S = SCRIPTS["abs_pqn_minatar.py"]
# Every reading of time.time() two hours before the one before it: the worst a stepped-back clock can do.
BACKWARDS = ("import itertools, runpy, sys, time\n"
             "real, calls = time.time(), itertools.count()\n"
             "time.time = lambda: real - 7200.0 * next(calls)\n"
             "sys.argv = sys.argv[1:]\n"
             "sys.path.insert(0, __import__('os').path.dirname(sys.argv[0]))  # the script's folder, as python does\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_a_clock_running_backwards_keeps_durations_positive_and_the_run_resumable(tmp_path):
    wrapper = tmp_path / "backwards.py"
    wrapper.write_text(BACKWARDS)
    flags = [*S.adaptive, *CPU, "--total-timesteps", "1200", "--output-dir", str(tmp_path), "--run-name", "r"]
    p = subprocess.run([sys.executable, str(wrapper), S.path, *flags, "--stop-at-step", "600"], capture_output=True,
                       text=True, timeout=600, cwd=ROOT, env=ENV)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    prefix = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert not prefix["complete"] and prefix["train_seconds"] > 0
    sps = [int(line.split("| SPS ")[1].split(" ")[0]) for line in p.stdout.splitlines() if line.startswith("step ")]
    assert sps and all(s > 0 for s in sps)  # a progress line for every iteration (--log-every-seconds 0)
    p = subprocess.run([sys.executable, str(wrapper), S.path, "--resume", str(tmp_path / "r" / "checkpoint.pt")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=ENV)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    final = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert final["complete"] and final["global_step"] >= 1200 and final["train_seconds"] > prefix["train_seconds"]
