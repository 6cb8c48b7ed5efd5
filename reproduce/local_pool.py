"""The sweep's local pool (sweep.py run without --slurm): --workers threads that each run one script at a time as a
subprocess in a session of its own, each script at the sweep's niceness, and SIGINT / SIGTERM passed to the running
scripts once, after which no new run starts.
"""
from __future__ import annotations

import concurrent.futures
import os
import queue
import signal
import time

from .execution import ELSEWHERE, INTERRUPTED, RUN_LOCK, execute, lock_held
from .experiments import Run


def cores() -> int:
    """The CPU cores this process may use (its affinity mask: a Slurm allocation or taskset), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def share_niceness(pid: int) -> None:
    """Give the run `pid` the sweep's own niceness where `nice` alone does not reach it. A run starts in a session
    of its own (so that a Ctrl-C reaches it once, through the sweep), and on Linux with autogroup scheduling a new
    session is a new scheduling group, whose weight `nice` does not lower: `nice -n 19 sweep.py run ...` would
    still take the cores at full weight from the user's shell. Its group's niceness is set to the sweep's
    (/proc/<pid>/autogroup; nothing where there is no such file or the sweep runs at niceness 0 or below)."""
    niceness = os.nice(0)
    if niceness <= 0:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(niceness))
    except OSError:  # not Linux, autogroup off, or the run already ended
        pass


def run_local(runs: list[Run], workers: int, gpus: list[str] | None = None) -> int | None:
    """Run on this machine with a pool of `workers` threads, each running one script at a time, printing a line as
    each ends; the signal that stopped the sweep, None when none did (sweep.summary then says what became of the
    runs)."""
    free_gpus: queue.SimpleQueue = queue.SimpleQueue()
    for g in gpus or []:
        free_gpus.put(g)
    procs, stopping = [], []

    def on_signal(signum, frame):  # forward SIGINT / SIGTERM once to each script, start no new run
        stopping.append(signum)
        print(f"\nsignal {signum}: passing it to the running scripts (they checkpoint); starting no new run",
              flush=True)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    def job(run):
        if stopping:
            return "not started"
        gpu = free_gpus.get() if gpus else None
        started = time.time()
        try:
            # own session: a Ctrl-C reaches the scripts once, through on_signal
            return execute(run, gpu, {"start_new_session": True},
                           lambda p, _: (procs.append(p), share_niceness(p.pid)))
        finally:
            seconds[run.dir] = time.time() - started  # the run's own time, not its wait in the queue
            if gpus:
                free_gpus.put(gpu)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    seconds, t0 = {}, time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(job, run): run for run in runs}
            for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                run, rc = futures[fut], fut.result()
                if rc == "not started":
                    continue
                times = f"after {seconds[run.dir]:.0f} s; {time.time() - t0:.0f} s since the sweep started"
                if rc == ELSEWHERE or (not run.done() and rc not in INTERRUPTED and lock_held(run.dir / RUN_LOCK)):
                    # (the second: its script found the run locked by a script that had not locked it yet when this
                    # sweep claimed the run, one left behind by a sweep killed seconds after starting it)
                    what = "another process holds its lock" if rc == ELSEWHERE else f"exit {rc}: its lock is held"
                    print(f"[{i}/{len(runs)}] {ELSEWHERE} {run.label} {run.name} ({what}: left to that process; "
                          f"{times})", flush=True)
                    continue
                ok = run.done()  # (rc is None when another sweep finished it meanwhile)
                print(f"[{i}/{len(runs)}] {'ok    ' if ok else 'interrupted' if rc in INTERRUPTED else 'FAILED'} "
                      f"{run.label} {run.name} ({'already done' if rc is None else f'exit {rc}'} {times})",
                      flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return stopping[0] if stopping else None
