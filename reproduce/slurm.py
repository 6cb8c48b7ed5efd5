"""Runs on a Slurm cluster through submitit: one job array per submission, each job running one script (RunJob),
its time-limit signal and preemptions ending in a checkpoint and a requeue, and the Slurm states of the recorded
jobs (job_id, slurm_states).

A job gets submitit's signal slurm_signal_delay_s seconds before its time limit, stops its script with SIGTERM (the
script checkpoints and exits 143) and is requeued by submitit; the requeued job resumes from the checkpoint. A
preemption (SIGTERM without that earlier signal) also ends in a checkpoint and a requeue, at most --max-requeues
times, but not when Slurm says the job was cancelled (scancel sends the same SIGTERM) or cannot say.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from .execution import ELSEWHERE, INTERRUPTED, execute, now, shell_rc, tail
from .experiments import CHECKPOINT, Run

HERE = Path(__file__).resolve().parent

# Slurm job states: waiting for a node, and holding one
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED",
          "RESIZING"}
ACTIVE = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}


def job_id(run: Run) -> str | None:
    try:
        return run.job_file.read_text().split()[0]
    except (OSError, ValueError, IndexError):  # (ValueError: not UTF-8 text)
        return None


def slurm_job_state(job: str, timeout: float = 30) -> str | None:
    """The JobState `scontrol show job` gives a job (RUNNING, CANCELLED, PREEMPTED, ...); None when scontrol fails,
    times out or gives none."""
    try:
        out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=timeout,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\bJobState=(\S+)", out)
    return m.group(1).upper() if m else None


def slurm_states(runs: list[Run]) -> dict[str, str]:
    """job id -> Slurm state (sacct, through submitit's watcher) of the runs' recorded jobs; {} when no run has a
    job. A job Slurm does not know (any more) is UNKNOWN, and the run's state then comes from its files."""
    ids = sorted({j for j in map(job_id, runs) if j})
    if not ids:
        return {}
    from submitit.slurm.slurm import SlurmJob
    watcher = SlurmJob.watcher
    for j in ids:
        watcher.register_job(j)
    watcher.update()
    return {j: watcher.get_state(j, mode="cache").split()[0].upper() for j in ids}


class RunJob:
    """A submitit job: runs one script. On submitit's timeout/preemption signal, checkpoint() stops
    the script with SIGTERM (it writes checkpoint.pt) and hands submitit a fresh job to requeue;
    that job finds the checkpoint and resumes."""

    def __init__(self, run: Run, grace_s: float = 120.0, max_requeues: int = 20):
        self.run, self.grace_s, self.max_requeues = run, grace_s, max_requeues
        self._proc, self._log, self._signalled = None, None, False

    def __getstate__(self):
        return {"run": self.run, "grace_s": self.grace_s, "max_requeues": self.max_requeues}

    def __setstate__(self, d):
        self.__init__(d["run"], d["grace_s"], d.get("max_requeues", 20))

    def _started(self, proc, log):
        self._proc, self._log = proc, log

    def __call__(self) -> int:
        from submitit.core.job_environment import JobEnvironment
        usr_sig = JobEnvironment._usr_sig()
        # Slurm's --signal reaches every process of the step: the script must ignore it (SIG_IGN
        # survives exec) and leave it to submitit's handler in this process.
        rc = execute(self.run, None, {"preexec_fn": lambda: signal.signal(usr_sig, signal.SIG_IGN)},
                     self._started, self._ended)
        if rc == ELSEWHERE:  # (a second submission of the run, or a local sweep of it): left to that process
            print(f"{self.run.label} {self.run.name}: running elsewhere (another process holds its lock); "
                  "this job leaves it to that process", file=sys.stderr, flush=True)
            return 0
        if rc not in (0, None) or not self.run.done():
            raise RuntimeError(f"{self.run.label} {self.run.name}: exit {rc}; end of {self.run.log}:\n"
                               + tail(self.run.log))
        return 0

    def _ended(self, rc: int) -> None:
        """The script ended, and this job still owns the run and its log (execute): a preemption requeues it."""
        if rc in INTERRUPTED and not self._signalled and (self.run.dir / CHECKPOINT).exists():
            self._requeue_preempted(rc)

    def _note(self, text: str) -> None:
        """One line in the run's log (and on the job's stderr)."""
        with open(self.run.log, "a") as log:
            log.write(f"[sweep] {now()} {text}\n")
        print(text, file=sys.stderr, flush=True)

    def _requeue_preempted(self, rc: int) -> None:
        """The script was stopped by SIGTERM without submitit's time-limit signal, and wrote its checkpoint: a
        preemption, or a user's scancel (Slurm sends both the same SIGTERM). Requeue this job as submitit does
        after that signal (the requeued job resumes), unless
        - Slurm's JobState of the job (scontrol show job $SLURM_JOB_ID) is CANCELLED: a scancel is not undone;
        - scontrol gives no JobState (it fails or times out): whether the job was cancelled is unknown, and it
          is not requeued rather than risk undoing a scancel; `sweep.py run --slurm` resumes the run;
        - the job was requeued --max-requeues times after preemptions already (counted in the run's .requeues
          file beside its .slurm file; a new submission starts the count again).
        Returns when the job is not requeued (it then ends as failed, the run interrupted); ends it otherwise."""
        from submitit.core.job_environment import JobEnvironment
        env = JobEnvironment()
        what = f"stopped (exit {rc}) without the time-limit signal"
        try:
            count = int(self.run.requeue_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            count = 0
        if count >= self.max_requeues:
            return self._note(f"{what}; not requeued: requeued {count} time(s) after preemptions already "
                              f"(--max-requeues {self.max_requeues})")
        if env.cluster == "slurm":
            job = os.environ.get("SLURM_JOB_ID") or env.job_id
            job_state = slurm_job_state(job)
            if job_state is None:
                return self._note(f"{what}; not requeued: `scontrol show job {job}` gave no JobState, so a "
                                  "cancellation cannot be ruled out (`sweep.py run --slurm` resumes the run)")
            if job_state.startswith("CANCELLED"):
                return self._note(f"{what}; not requeued: job {job} was cancelled (JobState={job_state})")
        self.run.requeue_file.write_text(f"{count + 1}\n")
        what += f" (preemption); requeue {count + 1} of at most {self.max_requeues}"
        if env.cluster != "slurm":  # submitit's local executor requeues by ending this process: note it first
            self._note(f"{what}: requeued")
        try:
            env._requeue(0)  # Slurm: scontrol requeue (60 s timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            return self._note(f"{what}: failed ({type(e).__name__}: {e}); not requeued, unless Slurm requeued "
                              "the job itself (`sweep.py run --slurm` resumes the run)")
        self._note(f"{what}: requeued")
        sys.exit(-1)  # what submitit does after a requeue: the job ends without a result

    def checkpoint(self, *args, **kwargs):
        import submitit
        self._signalled = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
            deadline = time.time() + self.grace_s
            while time.time() < deadline:  # os.waitpid: Popen.wait may hold its lock in this thread
                try:
                    pid, status = os.waitpid(proc.pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    self._log.write(f"\n[sweep] {now()} exit {shell_rc(proc.returncode)} (stopped by the "
                                    "time-limit/preemption signal; requeued)\n")
                    self._log.flush()
                    break
                time.sleep(0.2)
        return submitit.helpers.DelayedSubmission(RunJob(self.run, self.grace_s, self.max_requeues))


def slurm_executor(args, folder: Path):
    import submitit
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=args.max_requeues)
    extra = dict(kv.split("=", 1) for kv in args.slurm_arg)
    params = dict(name=f"sweep-{args.experiment}", timeout_min=args.time_min, nodes=1, tasks_per_node=1,
                  gpus_per_node=args.gpus_per_job, cpus_per_task=args.cpus_per_job, mem_gb=args.mem_gb,
                  slurm_partition=args.partition, slurm_signal_delay_s=args.signal_delay_s,
                  slurm_array_parallelism=args.workers or 256, slurm_additional_parameters=extra or None)
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return ex


def submit(executor, runs: list[Run], grace_s: float, max_requeues: int = 20) -> list:
    """Submit the runs as one job array; the job code travels by value (cloudpickle). Each job requeues itself
    at most max_requeues times after preemptions."""
    import cloudpickle
    for module in list(sys.modules.values()):  # this file and its siblings: a job's Python may not find them
        path = getattr(module, "__file__", None)
        if path and Path(path).resolve().parent == HERE and module.__name__ != "__main__":
            cloudpickle.register_pickle_by_value(module)
    with executor.batch():
        jobs = [executor.submit(RunJob(run, grace_s, max_requeues)) for run in runs]
    for run, job in zip(runs, jobs):  # recorded so that status and a second `run --slurm` see queued jobs
        run.job_file.parent.mkdir(parents=True, exist_ok=True)
        run.job_file.write_text(f"{job.job_id}\n")
        run.requeue_file.unlink(missing_ok=True)  # a new job: its preemption requeues are counted afresh
    return jobs
