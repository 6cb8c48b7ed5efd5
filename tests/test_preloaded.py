"""tests/preloaded.py runs a script as `python script.py` would: the same output, interleaving and exit status,
tracebacks that start at the script, a real process that signals and timeouts reach; other commands go to
subprocess."""
import os
import signal
import subprocess
import sys

import pytest

import preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PRELOADED_TEST": "x"}
# What a script can see of how it was started, then an ending chosen by its argument.
TOY = """import os, signal, sys, time
print("argv", sys.argv, "file", __file__, "name", __name__, "spec", __spec__)
print("cwd", os.getcwd(), "path0", sys.path[0], "env", os.environ.get("PRELOADED_TEST"))
for s in (sys.stdin, sys.stdout, sys.stderr):
    print(s.name, s.encoding, s.errors, s.line_buffering, s.write_through, repr(s._CHUNK_SIZE), s.buffer.__class__)
print("signals", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
for i in range(3):
    print("out", i)
    print("err", i, file=sys.stderr)
how = sys.argv[1]
if how == "raise":
    def inner():
        raise ValueError("boom")
    inner()
if how == "interrupt":
    raise KeyboardInterrupt
if how == "sleep":
    print("waiting", flush=True)
    time.sleep(60)
sys.exit(3)
"""


def default_stop_signals():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    path = tmp_path / "toy.py"
    path.write_text(TOY)
    monkeypatch.setattr(preloaded, "SCRIPTS", preloaded.SCRIPTS | {str(path)})
    return path


@pytest.mark.parametrize("how, unbuffered", [("raise", False), ("raise", True), ("interrupt", False),
                                             ("exit", True)])
def test_a_served_script_prints_fails_and_exits_as_a_fresh_interpreter_does(toy, tmp_path, how, unbuffered):
    """Each run of a script whose interpreter has torch loaded takes about a second to exit (the interpreter's
    finalisation, as for a fresh one): one output setting per case, the others in the first case."""
    env = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"} | ({"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    ways = [(str(toy), {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT})]  # the interleaving of both streams
    if how == "raise" and not unbuffered:  # a path relative to the working directory; the streams apart
        ways.append(("toy.py", {"capture_output": True}))
    for script, outputs in ways:
        # The reference is `python toy.py` from an interactive shell, SIGINT and SIGTERM at their defaults. A child of
        # these tests inherits an ignored SIGINT (exec keeps SIG_IGN) when pytest was started as a background job
        # of a non-interactive shell (`cmd &` in a script: POSIX shells ignore SIGINT there). A served run starts
        # at the defaults.
        fresh = subprocess.run([sys.executable, script, how], text=True, env=env, cwd=tmp_path, timeout=60,
                               preexec_fn=default_stop_signals, **outputs)
        served = preloaded.run([sys.executable, script, how], text=True, env=env, cwd=tmp_path, timeout=60,
                               **outputs)
        assert (served.stdout, served.stderr, served.returncode) == (fresh.stdout, fresh.stderr, fresh.returncode)
    assert fresh.returncode == {"raise": 1, "interrupt": -signal.SIGINT, "exit": 3}[how]
    assert "signals True True" in served.stdout  # SIGINT raises KeyboardInterrupt, SIGTERM ends the process
    proc = preloaded.Popen([sys.executable, str(toy), "exit"], stdout=subprocess.DEVNULL, env=env)
    assert isinstance(proc, preloaded._Process) and proc.wait(timeout=60) == 3  # it was served


def test_served_runs_draw_fresh_random_seeds(toy, tmp_path):
    code = toy.read_text().replace("how = sys.argv[1]", "import numpy, torch\nprint(numpy.random.random(), "
                                   "torch.initial_seed(), __import__('random').random())\nhow = sys.argv[1]")
    toy.write_text(code)
    seeds = {preloaded.run([sys.executable, str(toy), "exit"], capture_output=True, text=True, env=ENV).stdout
             for _ in range(2)}
    assert len(seeds) == 2


def test_timeouts_signals_and_a_finished_process_behave_as_subprocesss(toy, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired) as e:
        preloaded.run([sys.executable, str(toy), "sleep"], capture_output=True, text=True, env=ENV, timeout=2)
    assert "waiting" in e.value.stdout  # what it printed before the timeout, read after the kill

    proc = preloaded.Popen([sys.executable, str(toy), "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=ENV)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)  # the output read before the timeout is kept
    assert proc.returncode == -signal.SIGTERM and "waiting" in out and "err 2" in err

    proc = preloaded.Popen([sys.executable, str(toy), "exit"], stdout=subprocess.DEVNULL, env=ENV)
    assert proc.wait(timeout=30) == 3
    proc.kill()  # a finished process: nothing happens, as with subprocess

    other = preloaded.run([sys.executable, "-c", "import os; print(os.getppid())"], capture_output=True, text=True)
    assert other.stdout.strip() == str(os.getpid())  # not a script: started by this process, through subprocess


@pytest.mark.parametrize("argv", [["--help"], ["--num-envs", "0"]])
def test_a_training_script_served_prints_and_exits_as_when_fresh(argv, tmp_path):
    script = os.path.join(ROOT, "abs_ppo_mujoco.py")
    fresh = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                           timeout=120)
    served = preloaded.run([sys.executable, script, *argv], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                           timeout=120)
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == (0 if argv == ["--help"] else 2)
    assert os.listdir(tmp_path) == []  # the working directory was the one asked for, and nothing was written in it
