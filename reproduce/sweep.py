"""Run the paper's experiment grids, on this machine or on a Slurm cluster.

    python -m reproduce.sweep run atari10-batches [--games Pong] [--seeds 1] [--scale 0.001]
                                  [--workers N] [--slurm --partition P ...] [--dry-run]
    python -m reproduce.sweep status atari10-batches [--scale 0.001]
    python -m reproduce.sweep report atari10-batches [--scale 0.001] [--out DIR] [--reference LABEL]
    python -m reproduce.sweep publish atari10-batches --out results/NAME [--scale 0.001] [--games ...]

The experiments are data: reproduce/experiments.toml (and --config FILE for your own), read and checked by
experiment_file.py and expanded into runs by experiments.py, which also gives each run its directory, log and
command; execution.py runs one. The root is runs/sweeps, or runs/sweeps-scale<S> for --scale S other than 1, so
that a mini run never stands in for a full one. A run is done when its eval_results.json has the run's
total_timesteps; a run is skipped when done, resumed when it has a checkpoint.pt; `report` reports only the runs
of the experiment's length.
Locally (local_pool.py), runs go to a thread pool of --workers that each run one script as a subprocess, with
cores / workers threads each; with --slurm, submitit submits them as a job array that requeues itself at its
time limit and after preemptions (slurm.py). The Slurm job id of every submitted run is kept beside its log
(<game>__<seed>.slurm): `status` shows queued and running jobs (Slurm's sacct, through submitit), and `run`
(local, --slurm or --dry-run) does not start a run whose job is queued or running.
A run that another process is running (a second sweep of the grid, the script of a killed sweep: its locks are
held, execution.claim) is left to it, "running elsewhere", and its log is not touched. `run` ends with a line that
counts each of its runs once, in the state `status` gives it; exit 0 when all are done, 1 when one failed or is not
done, 75 when the runs it did not finish are running elsewhere, 128 + N after signal N, 2 for bad input, 4 when the
file system refused a write of the sweep's own (one line saying what it is; docs/running.md#faults).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from .cli import Parser
from .execution import ELSEWHERE, INTERRUPTED, live, tail
from .experiment_file import (GAME_RE, SweepError, check_flags, check_seeds, load_config,
                             reference_and_comparisons)
from .experiments import CHECKPOINT, EXIT, REPO, START, Run, Selection, default_root, expand, with_threads
from .local_pool import cores, run_local
from .runs import reference_pairs
from .slurm import ACTIVE, QUEUED, job_id, slurm_executor, slurm_states, submit

STATES = ("done", "running", "interrupted", "failed", "missing", "queued", "other-length")
RUNNING_ELSEWHERE = 75  # `run`'s exit code when every run it did not finish is another process's (EX_TEMPFAIL)


def state(run: Run, slurm: dict | None = None) -> str:
    """done | running | interrupted | failed | missing | queued | other-length, from the result, the Slurm job
    state (slurm: job id -> Slurm state), the locks of a live run (execution.live), the checkpoint and the log."""
    if run.done():
        return "done"
    steps = run.result_timesteps()
    if steps is not None and steps != run.total_timesteps:
        return "other-length"  # (a prefix result of this length goes on: a resumable run, as a checkpoint says)
    job = slurm.get(job_id(run)) if slurm else None
    if job in QUEUED:
        return "queued"
    if job in ACTIVE or live(run):
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
    if rc is None:  # started, never ended, and no process runs it: killed without a trace (SIGKILL, a node failure)
        return "interrupted"
    return "interrupted" if rc in INTERRUPTED else "failed"


def summary(runs: list[Run], signum: int | None = None) -> int:
    """Print what became of the runs a sweep was given, each counted once in the state `status` gives it now, and
    return the sweep's exit code: 0 when all are done, 128 + signum when a signal stopped the sweep, 1 when a run
    is failed (its log's end is printed), interrupted or missing, else (the others are running elsewhere, or queued
    on Slurm) 75."""
    slurm = slurm_states(runs)
    states = {run: state(run, slurm) for run in runs}
    for run, st in states.items():
        if st == "failed":
            print(f"\n==> FAILED {run.label} {run.name}; last lines of {run.log}:\n{tail(run.log)}")
    counts = {st: sum(s == st for s in states.values()) for st in STATES}
    words = {"failed": "failed", "running": ELSEWHERE, "interrupted": "interrupted", "missing": "not started"}
    print(f"\n{counts['done']} of {len(runs)} runs finished, " + ", ".join(
        [f"{counts[st]} {word}" for st, word in words.items()]
        + [f"{counts[st]} {st}" for st in ("queued", "other-length") if counts[st]]))  # (submitted, run meanwhile)
    if signum is not None:
        return 128 + signum
    if counts["done"] == len(runs):
        return 0
    return RUNNING_ELSEWHERE if counts["done"] + counts["running"] + counts["queued"] == len(runs) else 1


# ----------------------------------------------------------------------------- commands
def _on_disk(label_dir: Path) -> set[tuple[str, int]]:
    """(env id, seed) of every run directory or log under a label directory."""
    names = [p.name for p in label_dir.glob("*__*") if p.is_dir()] + [p.stem for p in label_dir.glob("logs/*.log")]
    found = set()
    for name in names:
        game, _, seed = name.rpartition("__")
        if GAME_RE.match(game) and seed.isdigit():  # (a stray file such as .x__1 is no run)
            found.add((game, int(seed)))
    return found


def _runs(args, discover: bool = False) -> list[Run]:
    """The runs selected on the command line; with discover (status, report) also every run of the
    experiment's labels found on disk outside that grid, e.g. those of a `run --games Pong`."""
    game_lists, experiments = load_config(args.config)
    select = Selection(games=args.games, seeds=args.seeds, labels=args.labels, scale=args.scale)
    if not discover:
        select = dataclasses.replace(select, extra_args=getattr(args, "extra_flags", ()),
                                     checkpoint_every=getattr(args, "checkpoint_every", None))
        return expand(args.experiment, experiments, game_lists, args.root, select)
    runs = expand(args.experiment, experiments, game_lists, args.root, select)
    known = {(r.label, r.env_id, r.seed) for r in runs}
    for label, label_dir in sorted({(r.label, r.label_dir) for r in runs}):
        for game, seed in sorted(_on_disk(label_dir)):
            if (label, game, seed) not in known:
                runs += expand(args.experiment, experiments, game_lists, args.root,
                               Selection(games=[game], seeds=[seed], labels=[label], scale=args.scale))
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
        elsewhere = [r for r in todo if live(r)]  # (a real run finds them as it goes: execution.claim)
        if elsewhere:
            print(f"# skipping {len(elsewhere)} run(s) {ELSEWHERE} (a process holds their lock): "
                  + ", ".join(f"{r.label}/{r.name}" for r in elsewhere))
            todo = [r for r in todo if r not in elsewhere]
        print(f"# {args.experiment}: {len(runs)} runs, commands run from {REPO}")
        if absent:
            print(f"# warning: script(s) not found: {', '.join(absent)}")
        for r in todo:
            print(shlex.join(r.command()))
        steps = sum(r.target_step for r in runs)
        print(f"# total: {len(runs)} runs, {steps:,} environment steps; {sum(r.done() for r in runs)} done, "
              f"{len(todo)} to run ({sum(r.target_step for r in todo):,} steps), "
              f"{sum((r.dir / CHECKPOINT).exists() for r in todo)} of them resumed"
              + (f"; {len(busy)} left to their queued or running Slurm jobs" if busy else "")
              + (f"; {len(elsewhere)} {ELSEWHERE}" if elsewhere else ""))
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
        print(f"follow with: python -m reproduce.sweep status {args.experiment}"
              + (f" --config {args.config}" if args.config else ""))
        return 0
    return summary(todo, run_local(todo, workers, gpus))


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
        ref, pairs = args.reference, reference_pairs(args.reference, exp["labels"])
    out = Path(args.out) if args.out else Path(args.root).resolve() / args.experiment / "report"
    # only the runs of this grid's length: a label directory may also hold runs of another --scale
    cmd = [sys.executable, "-m", "reproduce.report", "--runs",
           *[f"{label}={_shown(d)}" for label, d in label_dirs.items()], "--out", str(out),
           "--total-timesteps", str(runs[0].total_timesteps)]
    if ref in label_dirs:
        cmd += ["--reference", ref]
    else:
        print(f"(the reference {ref} has no finished run: the report lists {next(iter(label_dirs))} first)")
    for a, b in pairs:  # a pair without runs of both labels is listed as skipped, never replaced by another
        cmd += ["--compare" if a in label_dirs and b in label_dirs else "--skip-compare", a, b]
    if args.games:  # the label directories hold every game and seed: the report reads only the chosen ones
        cmd += ["--games", *args.games]
    if args.seeds:
        cmd += ["--seeds", *map(str, args.seeds)]
    benchmark = args.benchmark or experiments[args.experiment].get("benchmark")
    finished = {r.env_id for r in runs if r.done()}
    if benchmark and (args.benchmark or finished <= set(game_lists.get(benchmark, finished))):
        cmd += ["--benchmark", benchmark]
    elif benchmark:
        print(f"(not passing --benchmark {benchmark}: finished games {sorted(finished)} are outside it)")
    print(shlex.join(cmd), flush=True)
    # the package from wherever this one was imported, whatever the working directory (--out may be relative to it)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.call(cmd, env={**os.environ, "PYTHONPATH": path})


# A published run keeps its records and nothing that only a resume needs: the checkpoint (and any other .pt), the lock.
PUBLISHED = ("eval_results*.json", "events.out.tfevents.*")


def cmd_publish(args) -> int:
    """Copy the selected runs that are done into OUT/runs/EXPERIMENT/LABEL/ (each run's results, event files and log;
    no checkpoints), then write the report of every run published there in OUT, as `report --root OUT/runs` with
    their labels, games and seeds would."""
    runs = _runs(args)
    done, not_done = [r for r in runs if r.done()], [r for r in runs if not r.done()]
    if not done:
        raise SweepError(f"no finished run of {args.experiment} with {runs[0].total_timesteps:,} steps among the "
                         f"{len(runs)} selected under {Path(args.root).resolve()}")
    out = Path(args.out)
    dest_root = out / "runs"
    if dest_root.resolve() == Path(args.root).resolve():
        raise SweepError(f"--out {args.out}: its runs/ is the --root itself; publish to another directory")
    for r in done:
        dest = dest_root / r.experiment / r.label / r.name
        if dest.exists():  # published before: replaced whole, so that no stale event file stays beside the new ones
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        files = sorted({f for pattern in PUBLISHED for f in r.dir.glob(pattern) if f.is_file()})
        for f in files:
            shutil.copy2(f, dest / f.name)
        if r.log.is_file():
            (dest.parent / "logs").mkdir(exist_ok=True)
            shutil.copy2(r.log, dest.parent / "logs" / r.log.name)
        print(f"published {r.label}/{r.name}: {len(files)} file(s)" + ("" if r.log.is_file() else ", no log"))
    for r in not_done:  # a run published before (from another root, e.g. an earlier machine) stays as it is
        kept = dataclasses.replace(r, label_dir=dest_root / r.experiment / r.label).done()
        print(f"{'kept, published before' if kept else 'not published (not done)'}: {r.label}/{r.name}")
    # the report covers every run published to OUT so far (every label, game and seed there, not only this
    # selection), so that a grid published a game or a label at a time always has the report of all of it
    args.root, args.out = str(dest_root), str(out)
    args.games = args.seeds = args.labels = None
    published = [r for r in _runs(args, discover=True) if r.done()]
    labels = {r.label for r in published}
    args.labels = [lb for lb in load_config(args.config)[1][args.experiment]["labels"] if lb in labels]
    args.games, args.seeds = sorted({r.env_id for r in published}), sorted({r.seed for r in published})
    return cmd_report(args)


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
    common = Parser(add_help=False)
    common.add_argument("experiment")
    common.add_argument("--config", help="your own experiments TOML, added to reproduce/experiments.toml")
    common.add_argument("--root", help="runs go to ROOT/EXPERIMENT/LABEL/GAME__SEED (default: runs/sweeps, "
                        "or runs/sweeps-scale<S> with --scale S)")
    common.add_argument("--scale", type=float, default=1.0, help="multiply every run's total timesteps (run); "
                        "status and report need the same --scale to find and judge those runs")
    common.add_argument("--games", nargs="+", help="env ids or names ('Pong' = 'Pong-v5'); default: the experiment's")
    common.add_argument("--seeds", nargs="+", type=int, help="default: the experiment's")
    common.add_argument("--labels", nargs="+", help="a subset of the experiment's labels")
    p = Parser(description=__doc__.split("\n")[0])
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
    pub = sub.add_parser("publish", parents=[common], help="copy the finished runs (no checkpoints) to OUT/runs and "
                         "write their report in OUT")
    pub.add_argument("--out", required=True, help="e.g. results/NAME (runs go to OUT/runs/EXPERIMENT/LABEL/)")
    pub.add_argument("--benchmark", help="default: the experiment's")
    pub.add_argument("--reference", help="as for report")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--extra-args" in argv[:-1]:  # let its value start with "-": --extra-args "--no-cuda"
        i = argv.index("--extra-args")
        argv[i:i + 2] = [f"--extra-args={argv[i + 1]}"]
    args = p.parse_args(argv)
    check_numbers(args)
    if args.root is None:
        args.root = default_root(args.scale)
    return args


# A write the file system refused (full, no inodes, over quota, read-only, gone): the sweep's own exit code for it,
# the scripts' (docs/running.md, "A full disk")
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ESTALE, errno.EACCES, errno.EPERM}
WRITE_FAILED = 4


def disk_line(e: OSError) -> str:
    what = {errno.ENOSPC: "no space left on device (a full disk, or no free inodes: `df -h` and `df -i` tell)",
            errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied (read-only to this user: `ls -ld` it)",
            }.get(e.errno, os.strerror(e.errno).lower())
    where = f"write {e.filename}" if e.filename else "write under --root (a run's log or claim)"
    return (f"error: the sweep could not {where}: {what}; finished runs are kept and each other run resumes from "
            "its last checkpoint: make the file system writable, then run the same command again")


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        return {"run": cmd_run, "status": cmd_status, "report": cmd_report,
                "publish": cmd_publish}[args.command](args)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        with contextlib.suppress(OSError):  # stderr may be a file on that file system
            print(disk_line(e), file=sys.stderr, flush=True)
        return WRITE_FAILED


if __name__ == "__main__":
    sys.exit(main())
