#!/usr/bin/env python
"""Run the paper's experiment grids, on this machine or on a Slurm cluster.

    python reproduce/sweep.py run atari10-batches [--games Pong] [--seeds 1] [--scale 0.001]
                                  [--workers N] [--slurm --partition P ...] [--dry-run]
    python reproduce/sweep.py status atari10-batches [--scale 0.001]
    python reproduce/sweep.py report atari10-batches [--scale 0.001] [--out DIR] [--reference LABEL]

The experiments are data: reproduce/experiments.toml (and --config FILE for your own). Every run
has the directory <root>/<experiment>/<label>/<game>__<seed> (the scripts' --output-dir and
--run-name) and the log <root>/<experiment>/<label>/logs/<game>__<seed>.log, to which every
attempt appends its output between a "[sweep] ... start: <command>" and a "[sweep] ... exit N"
line. The root is runs/sweeps, or runs/sweeps-scale<S> for --scale S other than 1, so that a mini run
never stands in for a full one. A run is done when its eval_results.json has the run's total_timesteps;
a run is skipped when done, resumed when it has a checkpoint.pt; `report` reports only the runs of the
experiment's length.
Locally, runs go to a thread pool of --workers that each run one script as a subprocess; with
--slurm, submitit submits them as a job array: a job gets submitit's signal slurm_signal_delay_s
seconds before its time limit, stops its script with SIGTERM (the script checkpoints and exits
143) and is requeued by submitit, and the requeued job resumes from the checkpoint. A preemption
(SIGTERM without that earlier signal) also ends in a checkpoint and a requeue, at most --max-requeues
times, but not when Slurm says the job was cancelled (scancel sends the same SIGTERM) or cannot say. The Slurm job id of
every submitted run is kept beside its log (<game>__<seed>.slurm): `status` shows queued and running
jobs (Slurm's sacct, through submitit), and `run` (local, --slurm or --dry-run) does not start a run whose job
is queued or running.
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILTIN_CONFIG = Path(__file__).resolve().parent / "experiments.toml"
RESULT, CHECKPOINT = "eval_results.json", "checkpoint.pt"
DEFAULT_ROOT = "runs/sweeps"
EXPERIMENT_KEYS = {"description", "script", "games", "seeds", "total_timesteps", "checkpoint_every",
                   "env_suffix", "benchmark", "flags", "labels", "reference", "comparisons", "stop_at_step"}
STATES = ("done", "running", "interrupted", "failed", "missing", "queued", "other-length")
# Slurm job states: waiting for a node, and holding one
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED",
          "RESIZING"}
ACTIVE = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
START, EXIT = re.compile(r"^\[sweep\] \S+ start"), re.compile(r"^\[sweep\] \S+ exit (-?\d+)")
INTERRUPTED = (130, 143)  # SIGINT / SIGTERM: the script wrote a checkpoint; a rerun resumes it
# The flags the sweep gives every command itself (Run.command): neither --extra-args nor an experiment's flags may
# set them, or a run would not be the one its directory, log and status stand for.
SWEEP_FLAGS = ("--env-id", "--seed", "--total-timesteps", "--output-dir", "--run-name", "--checkpoint-every",
               "--resume", "--stop-at-step")
# The scripts' thread-count flags, which the sweep sets (cores / workers) unless the user's flags set them.
THREAD_FLAGS = ("--torch-threads", "--env-threads")
# Seeds are below this: envpool takes signed 32-bit seeds, and the scripts evaluate on seed + 10,000 (abs_utils.py).
SEED_LIMIT = 2 ** 31 - 10000
MAX_STEPS = 2 ** 63 - 1  # total_timesteps must fit the scripts' (and TensorBoard's) 64-bit step counters


class SweepError(Exception):
    """Bad experiment definition or command line: printed as one line, exit code 2."""


@dataclasses.dataclass(frozen=True)
class Run:
    experiment: str
    label: str
    script: str
    env_id: str
    seed: int
    total_timesteps: int
    checkpoint_every: int
    flags: tuple[str, ...]
    label_dir: Path  # the scripts' --output-dir
    stop_at_step: int | None = None  # a prefix run: it trains to this step of its total_timesteps' schedules
    threads: int | None = None  # --torch-threads / --env-threads for the scripts that have them (see with_threads)

    @property
    def name(self) -> str:
        return f"{self.env_id}__{self.seed}"

    @property
    def dir(self) -> Path:
        return self.label_dir / self.name

    @property
    def log(self) -> Path:
        return self.label_dir / "logs" / f"{self.name}.log"

    @property
    def job_file(self) -> Path:
        """The Slurm job id of the run's latest submission."""
        return self.label_dir / "logs" / f"{self.name}.slurm"

    @property
    def requeue_file(self) -> Path:
        """How often the run's latest Slurm job requeued itself after a preemption."""
        return self.label_dir / "logs" / f"{self.name}.requeues"

    def _result(self, key: str) -> int | None:
        try:
            return int(json.loads((self.dir / RESULT).read_text())[key])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def result_timesteps(self) -> int | None:
        """total_timesteps of the run's eval_results.json; None when there is none (or it is unreadable)."""
        return self._result("total_timesteps")

    def result_steps(self) -> tuple[int, int] | None:
        """(total_timesteps, global_step) of the run's eval_results.json, or None: global_step < total_timesteps
        for a prefix run (--stop-at-step)."""
        total, reached = self.result_timesteps(), self._result("global_step")
        return None if total is None or reached is None else (total, reached)

    @property
    def target_step(self) -> int:
        """The step the run trains to: its stop_at_step (a prefix run), else its total_timesteps."""
        return self.total_timesteps if self.stop_at_step is None else self.stop_at_step

    def done(self) -> bool:
        """Finished with this run's length, up to its target step: a result of another --total-timesteps (a mini run)
        does not count, nor a prefix result for a run that goes further (a full run, or a later stop)."""
        steps = self.result_steps()
        return steps is not None and steps[0] == self.total_timesteps and steps[1] >= self.target_step

    def command(self) -> list[str]:
        """The command line, starting with "python"; it runs from the repository root."""
        cmd = ["python", self.script, "--env-id", self.env_id, "--seed", str(self.seed),
               "--total-timesteps", str(self.total_timesteps), "--output-dir", str(self.label_dir),
               "--run-name", self.name, "--checkpoint-every", str(self.checkpoint_every), *self.flags]
        if self.stop_at_step is not None:
            cmd += ["--stop-at-step", str(self.stop_at_step)]
        if self.threads is not None:  # only the thread flags the script has and the user's flags do not set
            given = {t.split("=", 1)[0].replace("_", "-") for t in self.flags if t.startswith("--")}
            cmd += [x for flag in THREAD_FLAGS if flag in script_flags(self.script) and flag not in given
                    for x in (flag, str(self.threads))]
        if (self.dir / CHECKPOINT).exists():
            cmd += ["--resume", str(self.dir / CHECKPOINT)]
        return cmd


def script_flags(script: str) -> frozenset[str]:
    """The --flags of a training script's `Args` dataclass, read from its source (nothing is imported)."""
    path = Path(script) if Path(script).is_absolute() else REPO / script
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    return frozenset("--" + node.target.id.replace("_", "-") for cls in tree.body
                     if isinstance(cls, ast.ClassDef) and cls.name == "Args" for node in cls.body
                     if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name))


def with_threads(runs: list[Run], threads: int) -> list[Run]:
    """The runs with `threads` CPU threads each (torch's and envpool's), so that runs side by side do not
    oversubscribe the cores; a thread flag in the user's flags wins."""
    return [dataclasses.replace(r, threads=threads) for r in runs]


def cores() -> int:
    """The CPU cores this process may use (its affinity mask: a Slurm allocation or taskset), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ----------------------------------------------------------------------------- experiments
def load_config(extra: str | Path | None = None) -> tuple[dict, dict]:
    """(game lists, experiments) of the built-in file, updated by the user's --config file."""
    files = [BUILTIN_CONFIG] + ([Path(extra)] if extra else [])
    games, experiments = {}, {}
    for path in files:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SweepError(f"--config {path}: {e}") from e
        games.update(data.get("games", {}))
        experiments.update(data.get("experiments", {}))
    return games, experiments


def sweep_flag(tokens) -> str | None:
    """The first of tokens that sets a flag the sweep sets itself (SWEEP_FLAGS), in any spelling the scripts' parser
    (tyro) takes: `--run-name x`, `--run-name=x`, `--run_name x`; None when there is none."""
    for token in tokens:
        if token.startswith("--") and token.split("=", 1)[0].replace("_", "-") in SWEEP_FLAGS:
            return token
    return None


def check_flags(tokens, where: str) -> tuple[str, ...]:
    """tokens, unless one sets a flag the sweep sets itself (SweepError naming it)."""
    token = sweep_flag(tokens)
    if token is not None:
        raise SweepError(f"{where}: {token.split('=', 1)[0]} is set by the sweep itself for every run ("
                         f"{', '.join(SWEEP_FLAGS)}); use the sweep's --games, --seeds, --scale, --checkpoint-every "
                         "or --root instead")
    return tuple(tokens)


def _flags(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            return check_flags(shlex.split(value), where)
        except ValueError as e:  # an unclosed quote
            raise SweepError(f"{where}: flags {value!r}: {e}") from e
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return check_flags(value, where)
    raise SweepError(f"{where}: flags must be a string or a list of strings")


def check_seeds(seeds, where: str) -> list[int]:
    """Seeds as integers in [0, SEED_LIMIT), each once (SweepError otherwise)."""
    out = []
    for seed in seeds:
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_LIMIT:
            raise SweepError(f"{where}: seed {seed!r} is not an integer in [0, 2^31 - 10000 = {SEED_LIMIT})")
        if seed in out:
            raise SweepError(f"{where}: seed {seed} is given twice")
        out.append(seed)
    return out


def normalize_game(game: str, suffix: str) -> str:
    """'Pong' -> 'Pong-v5' when the experiment's env_suffix is '-v5'; full ids are kept."""
    return game if re.search(r"-v\d+$", game) else game + suffix


def expand(name: str, experiments: dict, game_lists: dict, root: str | Path, *, games=None,
           seeds=None, labels=None, scale: float = 1.0, extra_args=(), checkpoint_every=None) -> list[Run]:
    """All runs of one experiment, seed-major (seed 1 of every game and label comes first)."""
    if name not in experiments:
        raise SweepError(f"unknown experiment {name!r}; known: {', '.join(experiments)}")
    exp = experiments[name]
    unknown = set(exp) - EXPERIMENT_KEYS
    missing = {"script", "games", "seeds", "total_timesteps", "labels"} - set(exp)
    if unknown or missing:
        raise SweepError(f"experiment {name}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    exp_games = exp["games"]
    if isinstance(exp_games, str):
        if exp_games not in game_lists:
            raise SweepError(f"experiment {name}: no game list named {exp_games!r}")
        exp_games = game_lists[exp_games]
    suffix = exp.get("env_suffix", "")
    where = "--games" if games else f"experiment {name}"
    games = [normalize_game(g, suffix) for g in games] if games else list(exp_games)
    twice = next((g for i, g in enumerate(games) if g in games[:i]), None)
    if twice is not None:  # two runs in one directory
        raise SweepError(f"{where}: {twice} is given twice")
    seeds = check_seeds(seeds, "--seeds") if seeds else check_seeds(exp["seeds"], f"experiment {name}")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise SweepError(f"--scale {scale}: must be a finite number > 0")
    total = exp["total_timesteps"]
    if not isinstance(total, int) or isinstance(total, bool) or total < 1:
        raise SweepError(f"experiment {name}: total_timesteps {total!r} is not an integer >= 1")
    if not total * scale <= MAX_STEPS:
        raise SweepError(f"--scale {scale:g}: {total:,} x {scale:g} total timesteps is more than a 64-bit step "
                         "counter holds")
    steps = max(1, round(total * scale))
    stop = exp.get("stop_at_step")
    if stop is not None:
        if not isinstance(stop, int) or isinstance(stop, bool) or not 1 <= stop <= total:
            raise SweepError(f"experiment {name}: stop_at_step {stop!r} is not an integer in [1, total_timesteps "
                             f"= {total}]")
        stop = min(steps, max(1, round(stop * scale)))
    ckpt = exp.get("checkpoint_every", 0) if checkpoint_every is None else checkpoint_every
    if not isinstance(ckpt, int) or isinstance(ckpt, bool) or ckpt < 0:
        raise SweepError(f"{'--checkpoint-every' if checkpoint_every is not None else f'experiment {name}'}: "
                         f"checkpoint_every {ckpt!r} is not an integer >= 0")
    common = _flags(exp.get("flags", ""), f"experiment {name}")
    extra_args = check_flags(extra_args, "--extra-args")
    label_specs = exp["labels"]
    reference_and_comparisons(name, exp)
    for label in labels or []:
        if label not in label_specs:
            raise SweepError(f"experiment {name} has no label {label!r}; labels: {', '.join(label_specs)}")
    runs = []
    for seed in seeds:
        for game in games:
            for label, spec in label_specs.items():
                if labels and label not in labels:
                    continue
                if not LABEL_RE.match(label):
                    raise SweepError(f"experiment {name}: label {label!r} is not a valid directory name")
                if isinstance(spec, dict):
                    if set(spec) - {"script", "flags"}:
                        raise SweepError(f"experiment {name}, label {label}: only 'script' and 'flags' allowed")
                    script, flags = spec.get("script", exp["script"]), spec.get("flags", "")
                else:
                    script, flags = exp["script"], spec
                runs.append(Run(name, label, script, game, seed, steps, ckpt,
                                common + _flags(flags, f"experiment {name}, label {label}") + extra_args,
                                Path(root).resolve() / name / label, stop))
    return runs


def reference_and_comparisons(name: str, exp: dict) -> tuple[str, list[tuple[str, str]]]:
    """The experiment's reference label (default: its first) and its comparisons, a list of [A, B] label pairs
    (A against the baseline B; default: the reference against every other label)."""
    labels = list(exp["labels"])
    ref = exp.get("reference", labels[0])
    if ref not in labels:
        raise SweepError(f"experiment {name}: reference {ref!r} is not one of its labels {labels}")
    pairs = exp.get("comparisons")
    if pairs is None:
        return ref, [(ref, lb) for lb in labels if lb != ref]
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and all(x in labels for x in p)
                                              for p in pairs):
        raise SweepError(f"experiment {name}: comparisons must be a list of [label, label] pairs of {labels}")
    return ref, [tuple(p) for p in pairs]


def default_root(scale: float) -> str:
    """runs/sweeps, or runs/sweeps-scale<S> for a --scale S other than 1: runs of another length never share a
    directory with the full ones."""
    return DEFAULT_ROOT if scale == 1 else f"{DEFAULT_ROOT}-scale{scale:g}"


# ----------------------------------------------------------------------------- one run
def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def execute(run: Run, gpu: str | None = None, popen_kwargs: dict | None = None, on_start=None) -> int | None:
    """Run one script to its end, appending its output to run.log; None when it was already done."""
    if run.done():
        return None
    cmd = run.command()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    run.log.parent.mkdir(parents=True, exist_ok=True)
    with open(run.log, "a") as log:
        log.write(f"[sweep] {_now()} start on {socket.gethostname()}: {shlex.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, *cmd[1:]], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, **(popen_kwargs or {}))
        if on_start:
            on_start(proc, log)
        rc = _shell_rc(proc.wait())
        log.write(f"\n[sweep] {_now()} exit {rc}\n")
    return rc


def _shell_rc(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as a shell reports it


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def state(run: Run, slurm: dict | None = None) -> str:
    """done | running | interrupted | failed | missing | queued | other-length, from the result, the Slurm job
    state (slurm: job id -> Slurm state), the checkpoint and the log."""
    if run.done():
        return "done"
    steps = run.result_timesteps()
    if steps is not None and steps != run.total_timesteps:
        return "other-length"  # (a prefix result of this length goes on: a resumable run, as a checkpoint says)
    job = slurm.get(job_id(run)) if slurm else None
    if job in QUEUED:
        return "queued"
    if job in ACTIVE:
        return "running"
    started, rc = False, None
    if run.log.exists():
        for line in run.log.read_text(errors="replace").splitlines():
            if START.match(line):
                started, rc = True, None
            elif m := EXIT.match(line):
                rc = int(m.group(1))
    if not started:
        return "interrupted" if (run.dir / CHECKPOINT).exists() else "missing"
    if rc is None:
        return "running"  # (or killed without a trace: SIGKILL, node failure)
    return "interrupted" if rc in INTERRUPTED else "failed"


def job_id(run: Run) -> str | None:
    try:
        return run.job_file.read_text().split()[0]
    except (OSError, IndexError):
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


# ----------------------------------------------------------------------------- local pool
def run_local(runs: list[Run], workers: int, gpus: list[str] | None = None) -> int:
    """Run on this machine with a pool of `workers` threads, each running one script at a time."""
    free_gpus: queue.SimpleQueue = queue.SimpleQueue()
    for g in gpus or []:
        free_gpus.put(g)
    live, stopping = [], []

    def on_signal(signum, frame):  # forward SIGINT / SIGTERM once to each script, start no new run
        stopping.append(signum)
        print(f"\nsignal {signum}: passing it to the running scripts (they checkpoint); starting no new run",
              flush=True)
        for proc in live:
            if proc.poll() is None:
                proc.send_signal(signum)

    def job(run):
        if stopping:
            return "not started"
        gpu = free_gpus.get() if gpus else None
        started = time.time()
        try:
            # own session: a Ctrl-C reaches the scripts once, through on_signal
            return execute(run, gpu, {"start_new_session": True}, lambda p, _: live.append(p))
        finally:
            seconds[run.dir] = time.time() - started  # the run's own time, not its wait in the queue
            if gpus:
                free_gpus.put(gpu)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    failed, seconds, t0 = [], {}, time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(job, run): run for run in runs}
            for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                run, rc = futures[fut], fut.result()
                if rc == "not started":
                    continue
                ok = run.done()  # (rc is None when another sweep finished it meanwhile)
                print(f"[{i}/{len(runs)}] {'ok    ' if ok else 'FAILED'} {run.label} {run.name} "
                      f"({'already done' if rc is None else f'exit {rc}'} after {seconds[run.dir]:.0f} s; "
                      f"{time.time() - t0:.0f} s since the sweep started)", flush=True)
                if not ok:
                    failed.append(run)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    for run in failed:
        print(f"\n==> FAILED {run.label} {run.name} ({state(run)}); last lines of {run.log}:\n{tail(run.log)}")
    ok = sum(r.done() for r in runs)
    print(f"\n{ok} of {len(runs)} runs finished, {len(failed)} failed, {len(runs) - ok - len(failed)} not started")
    if stopping:
        return 128 + stopping[0]
    return 1 if failed else 0


# ----------------------------------------------------------------------------- submitit / Slurm
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
                     self._started)
        if rc in INTERRUPTED and not self._signalled and (self.run.dir / CHECKPOINT).exists():
            self._requeue_preempted(rc)
        if rc not in (0, None) or not self.run.done():
            raise RuntimeError(f"{self.run.label} {self.run.name}: exit {rc}; end of {self.run.log}:\n"
                               + tail(self.run.log))
        return 0

    def _note(self, text: str) -> None:
        """One line in the run's log (and on the job's stderr)."""
        with open(self.run.log, "a") as log:
            log.write(f"[sweep] {_now()} {text}\n")
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
                    self._log.write(f"\n[sweep] {_now()} exit {_shell_rc(proc.returncode)} (stopped by the "
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
    module = sys.modules[RunJob.__module__]
    if module.__name__ != "__main__":
        cloudpickle.register_pickle_by_value(module)
    with executor.batch():
        jobs = [executor.submit(RunJob(run, grace_s, max_requeues)) for run in runs]
    for run, job in zip(runs, jobs):  # recorded so that status and a second `run --slurm` see queued jobs
        run.job_file.parent.mkdir(parents=True, exist_ok=True)
        run.job_file.write_text(f"{job.job_id}\n")
        run.requeue_file.unlink(missing_ok=True)  # a new job: its preemption requeues are counted afresh
    return jobs


# ----------------------------------------------------------------------------- commands
def _on_disk(label_dir: Path) -> set[tuple[str, int]]:
    """(env id, seed) of every run directory or log under a label directory."""
    names = [p.name for p in label_dir.glob("*__*") if p.is_dir()] + [p.stem for p in label_dir.glob("logs/*.log")]
    found = set()
    for name in names:
        game, _, seed = name.rpartition("__")
        if game and seed.isdigit():
            found.add((game, int(seed)))
    return found


def _runs(args, discover: bool = False) -> list[Run]:
    """The runs selected on the command line; with discover (status, report) also every run of the
    experiment's labels found on disk outside that grid, e.g. those of a `run --games Pong`."""
    game_lists, experiments = load_config(args.config)
    select = dict(games=args.games, seeds=args.seeds, labels=args.labels)
    if not discover:
        return expand(args.experiment, experiments, game_lists, args.root, **select, scale=args.scale,
                      extra_args=args.extra_flags, checkpoint_every=args.checkpoint_every)
    runs = expand(args.experiment, experiments, game_lists, args.root, **select, scale=args.scale)
    known = {(r.label, r.env_id, r.seed) for r in runs}
    for label, label_dir in sorted({(r.label, r.label_dir) for r in runs}):
        for game, seed in sorted(_on_disk(label_dir)):
            if (label, game, seed) not in known:
                runs += expand(args.experiment, experiments, game_lists, args.root, games=[game], seeds=[seed],
                               labels=[label], scale=args.scale)
    return runs


def cmd_run(args) -> int:
    runs = _runs(args)
    other = [r for r in runs if r.result_timesteps() not in (None, r.total_timesteps)]
    todo = [r for r in runs if not r.done() and r.result_timesteps() in (None, r.total_timesteps)]
    if other:
        print(f"# skipping {len(other)} run(s) whose directory holds a result of another length (not "
              f"{other[0].total_timesteps:,} steps), e.g. {other[0].dir}: move them away or use another --root")
    # A run with a recorded Slurm job that is queued or running is left to that job, whether this run is local,
    # on Slurm or a dry run: two writers on one run directory would corrupt it.
    jobs = slurm_states(todo)
    busy = [r for r in todo if jobs.get(job_id(r)) in QUEUED | ACTIVE]
    if busy:
        print(f"{'# ' if args.dry_run else ''}skipping {len(busy)} run(s) whose Slurm job is queued or running: "
              + ", ".join(f"{r.label}/{r.name} (job {job_id(r)} {jobs[job_id(r)]})" for r in busy))
        todo = [r for r in todo if r not in busy]
    absent = sorted({r.script for r in todo if not (REPO / r.script).exists()})
    gpus = args.gpus.split(",") if args.gpus else None
    workers = args.workers or (len(gpus) if gpus else 1)
    # Each run gets its share of the cores (a Slurm job: its own --cpus-per-job), or N runs with the libraries'
    # default thread counts (all cores each) would oversubscribe the machine N times (docs/running.md).
    todo = with_threads(todo, args.cpus_per_job if args.slurm else max(1, cores() // workers))
    if args.dry_run:
        print(f"# {args.experiment}: {len(runs)} runs, commands run from {REPO}")
        if absent:
            print(f"# warning: script(s) not found: {', '.join(absent)}")
        for r in todo:
            print(shlex.join(r.command()))
        steps = sum(r.target_step for r in runs)
        print(f"# total: {len(runs)} runs, {steps:,} environment steps; {sum(r.done() for r in runs)} done, "
              f"{len(todo)} to run ({sum(r.target_step for r in todo):,} steps), "
              f"{sum((r.dir / CHECKPOINT).exists() for r in todo)} of them resumed"
              + (f"; {len(busy)} left to their queued or running Slurm jobs" if busy else ""))
        return 0
    if absent:
        raise SweepError(f"script(s) not found: {', '.join(absent)} (--labels runs a subset)")
    print(f"{args.experiment}: {len(runs)} runs, {sum(r.done() for r in runs)} already done, {len(todo)} to run")
    if not todo:
        return 0
    if args.slurm:
        folder = Path(args.root).resolve() / args.experiment / "submitit"
        jobs = submit(slurm_executor(args, folder), todo, grace_s=max(10, args.signal_delay_s - 30),
                      max_requeues=args.max_requeues)
        print(f"submitted {len(jobs)} jobs ({jobs[0].job_id} ... {jobs[-1].job_id}); submitit files in {folder}")
        print(f"follow with: python reproduce/sweep.py status {args.experiment}"
              + (f" --config {args.config}" if args.config else ""))
        return 0
    return run_local(todo, workers, gpus)


def cmd_status(args) -> int:
    runs = _runs(args, discover=True)
    states, slurm = list(STATES), slurm_states(runs)
    labels, games = list(dict.fromkeys(r.label for r in runs)), list(dict.fromkeys(r.env_id for r in runs))
    rows: dict = {}
    for r in sorted(runs, key=lambda r: (labels.index(r.label), games.index(r.env_id))):
        rows.setdefault((r.label, r.env_id), {s: 0 for s in states})[state(r, slurm)] += 1
    rows[("total", "")] = {s: sum(c[s] for c in rows.values()) for s in states}
    wl, wg = max(len(k[0]) for k in rows), max([4] + [len(k[1]) for k in rows])
    print(f"{'label':<{wl}}  {'game':<{wg}}  " + "  ".join(states))
    for (label, game), counts in rows.items():
        print(f"{label:<{wl}}  {game:<{wg}}  " + "  ".join(f"{counts[s]:>{len(s)}}" for s in states))
    for r in runs:
        st = state(r, slurm)
        if st == "failed":
            print(f"\n==> failed: {r.label} {r.name}; last lines of {r.log}:\n{tail(r.log, 5)}")
        elif st == "other-length":
            print(f"\n==> other length: {r.dir} holds a result of {r.result_timesteps():,} steps, not "
                  f"{r.total_timesteps:,} (use --scale to address it, or another --root)")
    return 0


def _shown(path: Path) -> Path:
    """A path below the working directory relative to it, so that a report written from the repository root
    names its run directories the same on every machine (results/ is regenerated by a test)."""
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def cmd_report(args) -> int:
    runs = _runs(args, discover=True)
    game_lists, experiments = load_config(args.config)
    exp = experiments[args.experiment]
    finished_dirs = {r.label: r.label_dir for r in runs if r.done()}
    label_dirs = {lb: finished_dirs[lb] for lb in exp["labels"] if lb in finished_dirs}
    if not label_dirs:
        other = sum(r.result_timesteps() not in (None, r.total_timesteps) for r in runs)
        raise SweepError(f"no finished run of {args.experiment} with {runs[0].total_timesteps:,} steps under "
                         f"{Path(args.root).resolve()}" + (f" ({other} run(s) of another length: use the --scale "
                                                           "they were run with)" if other else ""))
    ref, pairs = reference_and_comparisons(args.experiment, exp)
    if args.reference:
        if args.reference not in exp["labels"]:
            raise SweepError(f"--reference: {args.reference!r} is not one of the labels {list(exp['labels'])}")
        ref, pairs = args.reference, [(args.reference, lb) for lb in exp["labels"] if lb != args.reference]
    out = Path(args.out) if args.out else Path(args.root).resolve() / args.experiment / "report"
    # only the runs of this grid's length: a label directory may also hold runs of another --scale
    cmd = [sys.executable, str(REPO / "reproduce" / "report.py"), "--runs",
           *[f"{label}={_shown(d)}" for label, d in label_dirs.items()], "--out", str(out),
           "--total-timesteps", str(runs[0].total_timesteps)]
    if ref in label_dirs:
        cmd += ["--reference", ref]
    else:
        print(f"(the reference {ref} has no finished run: the report lists {next(iter(label_dirs))} first)")
    for a, b in pairs:  # a pair without runs of both labels is listed as skipped, never replaced by another
        cmd += ["--compare" if a in label_dirs and b in label_dirs else "--skip-compare", a, b]
    benchmark = args.benchmark or experiments[args.experiment].get("benchmark")
    finished = {r.env_id for r in runs if r.done()}
    if benchmark and (args.benchmark or finished <= set(game_lists.get(benchmark, finished))):
        cmd += ["--benchmark", benchmark]
    elif benchmark:
        print(f"(not passing --benchmark {benchmark}: finished games {sorted(finished)} are outside it)")
    print(shlex.join(cmd), flush=True)
    return subprocess.call(cmd)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors (an unknown option, a value of the wrong type) on one line of stderr, exit 2."""

    def error(self, message):
        self.exit(2, f"error: {message} ({self.prog} --help for the options)\n")


def check_numbers(args) -> None:
    """The numeric options in their domains, and --extra-args and --gpus well-formed; SweepError names the first
    that is not."""
    if not (math.isfinite(args.scale) and args.scale > 0):
        raise SweepError(f"--scale {args.scale}: must be a finite number > 0")
    if args.seeds:
        check_seeds(args.seeds, "--seeds")
    if args.command != "run":
        return
    if args.gpus is not None:
        gpus = args.gpus.split(",")
        if not all(g.strip() for g in gpus) or len(set(gpus)) < len(gpus):
            raise SweepError(f"--gpus {args.gpus!r}: must be distinct, comma-separated GPU ids (e.g. 0,1,2)")
    for flag, value, low in (("--workers", args.workers, 1), ("--checkpoint-every", args.checkpoint_every, 0),
                             ("--gpus-per-job", args.gpus_per_job, 0), ("--cpus-per-job", args.cpus_per_job, 1),
                             ("--time-min", args.time_min, 1), ("--signal-delay-s", args.signal_delay_s, 0),
                             ("--max-requeues", args.max_requeues, 0)):
        if value is not None and value < low:
            raise SweepError(f"{flag} {value}: must be at least {low}")
    if args.mem_gb is not None and not (math.isfinite(args.mem_gb) and args.mem_gb > 0):
        raise SweepError(f"--mem-gb {args.mem_gb}: must be a finite number > 0")
    if args.signal_delay_s >= 60 * args.time_min:
        raise SweepError(f"--signal-delay-s {args.signal_delay_s}: must be shorter than the time limit, --time-min "
                         f"{args.time_min} ({60 * args.time_min} s)")
    if any("=" not in kv or not kv.split("=", 1)[0] for kv in args.slurm_arg):
        raise SweepError("--slurm-arg takes KEY=VALUE")
    try:
        args.extra_flags = check_flags(shlex.split(args.extra_args), "--extra-args")
    except ValueError as e:  # an unclosed quote
        raise SweepError(f"--extra-args {args.extra_args!r}: {e}") from e


def parse_args(argv=None):
    """The command line; SweepError (one line, exit 2 in main) for a value outside its domain."""
    common = _Parser(add_help=False)
    common.add_argument("experiment")
    common.add_argument("--config", help="your own experiments TOML, added to reproduce/experiments.toml")
    common.add_argument("--root", help="runs go to ROOT/EXPERIMENT/LABEL/GAME__SEED (default: runs/sweeps, "
                        "or runs/sweeps-scale<S> with --scale S)")
    common.add_argument("--scale", type=float, default=1.0, help="multiply every run's total timesteps (run); "
                        "status and report need the same --scale to find and judge those runs")
    common.add_argument("--games", nargs="+", help="env ids or names ('Pong' = 'Pong-v5'); default: the experiment's")
    common.add_argument("--seeds", nargs="+", type=int, help="default: the experiment's")
    common.add_argument("--labels", nargs="+", help="a subset of the experiment's labels")
    p = _Parser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", parents=[common], help="run (or submit) every run that has no result")
    r.add_argument("--workers", type=int, help="local: parallel runs (default: 1, or one per --gpus entry); "
                   "Slurm: most array jobs running at once")
    r.add_argument("--gpus", help="local: comma-separated GPU ids; each run gets one (CUDA_VISIBLE_DEVICES)")
    r.add_argument("--extra-args", default="", help="flags appended to every command (quoted)")
    r.add_argument("--checkpoint-every", type=int, help="override the experiment's checkpoint_every")
    r.add_argument("--dry-run", action="store_true", help="print the commands and total environment steps")
    s = r.add_argument_group("Slurm (through submitit)")
    s.add_argument("--slurm", action="store_true", help="submit a job array instead of running here")
    s.add_argument("--partition")
    s.add_argument("--gpus-per-job", type=int, default=1)
    s.add_argument("--cpus-per-job", type=int, default=8)
    s.add_argument("--time-min", type=int, default=24 * 60, help="time limit of one job, minutes")
    s.add_argument("--mem-gb", type=float)
    s.add_argument("--signal-delay-s", type=int, default=180,
                   help="a job is stopped (script checkpoints) and requeued this long before its time limit")
    s.add_argument("--max-requeues", type=int, default=20,
                   help="requeues per job after time-outs, and (counted apart) after preemptions")
    s.add_argument("--slurm-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="any other sbatch option, e.g. --slurm-arg account=abc --slurm-arg qos=high")
    sub.add_parser("status", parents=[common], help="done / running / interrupted / failed / missing")
    rep = sub.add_parser("report", parents=[common], help="run reproduce/report.py on the finished runs")
    rep.add_argument("--out", help="default: ROOT/EXPERIMENT/report")
    rep.add_argument("--benchmark", help="default: the experiment's")
    rep.add_argument("--reference", help="compare this label with every other (default: the experiment's "
                     "reference and comparisons)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--extra-args" in argv[:-1]:  # let its value start with "-": --extra-args "--no-cuda"
        i = argv.index("--extra-args")
        argv[i:i + 2] = [f"--extra-args={argv[i + 1]}"]
    args = p.parse_args(argv)
    check_numbers(args)
    if args.root is None:
        args.root = default_root(args.scale)
    return args


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        return {"run": cmd_run, "status": cmd_status, "report": cmd_report}[args.command](args)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
