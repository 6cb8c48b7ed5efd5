"""Two resumes of one checkpoint: the second, delayed between reading the checkpoint and taking the run directory's
lock while the first trains to the end, finds under the lock that the file changed and stops with one line, exit 2,
writing nothing; it does not train the same steps again. (abs_utils.Run checks the file again once it holds the
lock: unchanged_since_read.)"""
import json
import os
import subprocess
import sys
import time

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, GENERIC, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

S = SCRIPTS[GENERIC]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# The script, with the lock taken only once the file `go` exists (after writing `waiting`).
DELAYED = ("import os, runpy, sys, time\n"
           "sys.argv = sys.argv[1:]\n"
           "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
           "import abs_utils.run as R\n"
           "lock = R.lock_run_directory\n"
           "def delayed(*a, **k):\n"
           "    open('waiting', 'w').close()\n"
           "    while not os.path.exists('go'):\n"
           "        time.sleep(0.05)\n"
           "    return lock(*a, **k)\n"
           "R.lock_run_directory = delayed\n"
           "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def files_of(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_resume_delayed_before_the_lock_refuses_a_checkpoint_another_resume_replaced(tmp_path):
    first_run = [*S.fixed, *CPU, "--total-timesteps", "128", "--stop-at-step", "64", "--eval-episodes", "1",
                 "--output-dir", str(tmp_path), "--run-name", "r"]
    p = preloaded.run([sys.executable, S.path, *first_run], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                      env=ENV)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    ckpt = tmp_path / "r" / "checkpoint.pt"
    (tmp_path / "delayed.py").write_text(DELAYED)
    second = subprocess.Popen([sys.executable, str(tmp_path / "delayed.py"), S.path, "--resume", str(ckpt)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
    try:
        deadline = time.time() + 300
        while not (tmp_path / "waiting").exists():  # the second has read the checkpoint and waits for the lock
            assert second.poll() is None and time.time() < deadline, second.communicate()
            time.sleep(0.05)
        first = preloaded.run([sys.executable, S.path, "--resume", str(ckpt)], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path, env=ENV)
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        finished = json.loads((tmp_path / "r" / "eval_results.json").read_text())
        assert finished["complete"] and finished["global_step"] >= 128
        before = files_of(tmp_path / "r")
        (tmp_path / "go").touch()
        out, err = second.communicate(timeout=300)
    finally:
        if second.poll() is None:
            second.kill()
    lines = err.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1, out[-2000:] + err[-2000:]
    assert lines[0].startswith(f"error: --resume: {ckpt} changed after it was read"), lines[0]
    assert files_of(tmp_path / "r") == before  # nothing trained twice, no second result
