"""tests/preloaded.py runs a training script as `python script.py` would: the same output and exit status, a real
process that signals and timeouts reach; other commands go to subprocess."""
import os
import signal
import subprocess
import sys

import pytest

import preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "abs_ppo_mujoco.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("argv", [["--help"], ["--num-envs", "0"]])
def test_a_served_script_prints_and_exits_as_a_fresh_interpreter_does(argv, tmp_path):
    fresh = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                           timeout=120)
    served = preloaded.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                           timeout=120)
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == (0 if argv == ["--help"] else 2)
    assert any(s.proc.poll() is None for s in preloaded._SERVERS.values())  # it was served, by a live server
    assert os.listdir(tmp_path) == []  # the working directory was the one asked for, and nothing was written in it


def test_signals_and_timeouts_reach_the_served_process_and_other_commands_go_to_subprocess(tmp_path):
    long_run = [sys.executable, SCRIPT, "--env-id", "Hopper-v4", "--num-envs", "1", "--num-steps", "64",
                "--num-minibatches", "2", "--total-timesteps", "10000000", "--no-cuda", "--output-dir", str(tmp_path)]
    with pytest.raises(subprocess.TimeoutExpired):
        preloaded.run(long_run + ["--run-name", "timeout"], capture_output=True, text=True, env=ENV, timeout=1)
    proc = preloaded.Popen(long_run + ["--run-name", "killed"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=ENV)
    assert isinstance(proc, preloaded._Process) and proc.poll() is None and proc.pid != os.getpid()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    other = preloaded.run([sys.executable, "-c", "import os, sys; print(os.getppid())"], capture_output=True,
                          text=True)
    assert other.stdout.strip() == str(os.getpid())  # started by this process: subprocess, not the server
