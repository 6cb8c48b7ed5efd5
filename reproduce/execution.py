"""One run's execution: who runs it (its claim and the locks), its log and its script (execute).

Every attempt appends its output to the run's log between a "[sweep] ... start: <command>" line, followed by
"[sweep] source: commit <sha>" (the code it ran from), and a "[sweep] ... exit N" line (experiments.START and EXIT
read them). An attempt is made only by the process that claims the run (claim): no other process is running it, so
that two sweeps of one grid never write one log or start one run twice.
"""
from __future__ import annotations

import datetime
import fcntl
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from .experiment_file import SweepError
from .experiments import REPO, Run

INTERRUPTED = (130, 143)  # SIGINT / SIGTERM: the script wrote a checkpoint; a rerun resumes it
ELSEWHERE = "running elsewhere"  # what execute returns for a run that another process runs (claim)
RUN_LOCK = ".lock"  # the training scripts' lock in their run directory (docs/CONVENTIONS.md)


def now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def source_version(repo: Path = REPO) -> str:
    """The commit the scripts run from, for each run's log: runs of one grid made at different commits can then be
    checked to train alike (reproduce/train_alike.py)."""
    def git(*argv):
        return subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True, timeout=60)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return "unknown (not a git checkout)"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({type(e).__name__})"
    return f"commit {head.stdout.strip()}" + (" with uncommitted changes to tracked files" if dirty else "")


# Who runs a run. Two processes may be asked to run one: two sweeps of one grid on one --root (the same command in
# two terminals, a resubmitted Slurm array), or a sweep started again while the scripts of a killed one go on (they
# run in sessions of their own). The scripts lock their run directory (RUN_LOCK, an flock that the OS drops when the
# process ends, however it ends), and a second script on it exits 2; but the sweep writes the run's log around its
# script (the start and exit lines, and the script's output), so the log needs an owner of its own. That is the
# sweep that holds the run's claim_file (logs/<game>__<seed>.lock) for the whole attempt: the sweep cannot hold the
# run's own lock, which the script it starts must take. A sweep claims the run, then checks that no process holds
# the run's lock (a killed sweep's script, or one started by hand), and only then opens the log and starts the
# script; otherwise the run is another process's, "running elsewhere", and the sweep writes nothing.
def lock_held(path: Path) -> bool:
    """Whether a process holds an flock on `path`: a non-blocking shared lock, released at once, fails. A file that
    does not exist, or cannot be locked (a file system without flock), is not held."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:  # shared: probes do not exclude each other, and it needs no write access (NFS)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # (and with it the probe's lock)


def live(run: Run) -> bool:
    """Whether a process runs the run now: a sweep holds its claim, or a script its run directory's lock. The claim is
    probed first, and the run's lock only when no sweep holds it, so that a probe never meets the lock attempt of a
    script a sweep is starting."""
    return lock_held(run.claim_file) or lock_held(run.dir / RUN_LOCK)


def claim(run: Run):
    """The run's claim_file, open and locked by this process, when no other process runs the run; else None. The
    lock is released when the file is closed or this process ends."""
    run.log.parent.mkdir(parents=True, exist_ok=True)
    f = open(run.claim_file, "a")
    try:
        for _ in range(10):  # a probe (lock_held from `status`, another sweep) holds it for microseconds
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.02)
        else:
            f.close()
            return None
    except OSError as e:
        f.close()
        raise SweepError(f"cannot lock {run.claim_file} ({e.strerror}): the sweep and the training scripts need "
                         "flock on the file system of --root") from e
    if lock_held(run.dir / RUN_LOCK):
        f.close()
        return None
    return f


def execute(run: Run, gpu: str | None = None, popen_kwargs: dict | None = None, on_start=None,
            on_exit=None) -> int | str | None:
    """Run one script to its end, appending its output to run.log: its exit code; None when the run was done;
    ELSEWHERE (nothing started or written) when another process runs it. on_start(proc, log) is called once the
    script is started, on_exit(rc) when it has ended, while this process still owns the run and its log."""
    if run.done():
        return None
    claimed = claim(run)
    if claimed is None:
        return ELSEWHERE
    with claimed:
        if run.done():  # finished by another process between the first check and the claim
            return None
        cmd = run.command()  # (now: --resume of the checkpoint as it is once the run is this process's)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        with open(run.log, "a") as log:
            log.write(f"[sweep] {now()} start on {socket.gethostname()}: {shlex.join(cmd)}\n")
            log.write(f"[sweep] source: {source_version()}\n")
            log.flush()
            proc = subprocess.Popen([sys.executable, *cmd[1:]], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, **(popen_kwargs or {}))
            if on_start:
                on_start(proc, log)
            rc = shell_rc(proc.wait())
            log.write(f"\n[sweep] {now()} exit {rc}\n")
        if on_exit:
            on_exit(rc)
    return rc


def shell_rc(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as a shell reports it


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
