"""Stop signals outside the training loop: before it starts, during the evaluation and after the result.

Each script's first statement is `U.catch_signals()`, so that a script run as a program catches SIGINT/SIGTERM
before torch's and envpool's imports, the slow first second (the package imports nothing else until a name of
another file is used). The training loop checkpoints on a signal (`Run.checkpoint`); outside it
there is nothing to save, or it is saved (training is checkpointed at its end, before the evaluation), so the
process ends at once, with one line.
"""
import os
import signal
import sys

_OUTSIDE_LOOP = {"when": "before training started", "then": "nothing was saved; run the same command again"}
_exit = os._exit  # not sys.exit: unwinding with envpool's evaluation threads alive can crash the interpreter


def _end_helpers() -> None:
    """Ends the processes this one started and still has. A library may start a helper while it is imported (glfw,
    which MuJoCo imports, probes its library's version in a `python -c` child that reads the path from a pipe); left
    behind, it would outlive this process and print a traceback into the same stderr. Linux only (/proc)."""
    me = os.getpid()
    try:
        threads = os.listdir(f"/proc/{me}/task")
    except OSError:
        return
    for tid in threads:
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                children = [int(pid) for pid in f.read().split()]
        except OSError:  # the thread ended meanwhile, or a kernel without this file
            continue
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # it ended meanwhile
                pass


def _stop_outside_loop(signum, frame):
    _end_helpers()
    print(f"stopped by signal {signum} {_OUTSIDE_LOOP['when']}: {_OUTSIDE_LOOP['then']}", flush=True)
    sys.stderr.flush()
    _exit(128 + signum)


def stop_outside_loop(when: str, then: str) -> None:
    """From now on SIGINT/SIGTERM print 'stopped by signal <n> <when>: <then>' and exit 128 + n (130, 143) at once."""
    _OUTSIDE_LOOP.update(when=when, then=then)
    signal.signal(signal.SIGINT, _stop_outside_loop)
    signal.signal(signal.SIGTERM, _stop_outside_loop)


def catch_signals() -> None:
    """A script's first statement: from here until its training loop, SIGINT/SIGTERM end it at once with one line
    (`stopped by signal <n> before training started: nothing was saved; ...`), also during its slow imports."""
    stop_outside_loop("before training started", "nothing was saved; run the same command again")
