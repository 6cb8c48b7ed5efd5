"""The experiment grids and their runs: reading the experiments' TOML (reproduce/experiments.toml and --config),
checking it, expanding an experiment into its runs, and one run's directory, files, command line and execution.

Every run has the directory <root>/<experiment>/<label>/<game>__<seed> (the scripts' --output-dir and --run-name)
and the log <root>/<experiment>/<label>/logs/<game>__<seed>.log, to which every attempt appends its output between
a "[sweep] ... start: <command>" line, followed by "[sweep] source: commit <sha>" (the code it ran from), and a
"[sweep] ... exit N" line (execute). An attempt is made only by the process that claims the run (claim): no other
process is running it, so that two sweeps of one grid never write one log or start one run twice.
"""
from __future__ import annotations

import ast
import dataclasses
import datetime
import fcntl
import json
import math
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from runs import is_int, reference_pairs

REPO = Path(__file__).resolve().parent.parent
BUILTIN_CONFIG = Path(__file__).resolve().parent / "experiments.toml"
RESULT, CHECKPOINT = "eval_results.json", "checkpoint.pt"
DEFAULT_ROOT = "runs/sweeps"
EXPERIMENT_KEYS = {"description", "script", "games", "seeds", "total_timesteps", "checkpoint_every",
                   "env_suffix", "benchmark", "flags", "labels", "reference", "comparisons", "stop_at_step"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")  # an experiment's or a label's name: one path component
NAME_BYTES = 200  # at most, for a name that is a path component (file systems take 255)
GAME_RE = re.compile(r"^[A-Za-z0-9][^/\\\x00]*$")  # one path component: see check_games
START, EXIT = re.compile(r"^\[sweep\] \S+ start"), re.compile(r"^\[sweep\] \S+ exit (-?\d+)")
INTERRUPTED = (130, 143)  # SIGINT / SIGTERM: the script wrote a checkpoint; a rerun resumes it
ELSEWHERE = "running elsewhere"  # what execute returns for a run that another process runs (claim)
RUN_LOCK = ".lock"  # the training scripts' lock in their run directory (docs/CONVENTIONS.md)
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
    def claim_file(self) -> Path:
        """Locked by the process that runs the run and writes its log (claim)."""
        return self.label_dir / "logs" / f"{self.name}.lock"

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



# ----------------------------------------------------------------------------- experiments
def load_config(extra: str | Path | None = None) -> tuple[dict, dict]:
    """(game lists, experiments) of the built-in file, updated by the user's --config file. Every game list and
    experiment is checked here, where its file is known, so that a malformed entry is one line naming the file (the
    built-in one as such: the user did not give it)."""
    files = [(BUILTIN_CONFIG, f"the built-in experiments file {BUILTIN_CONFIG}")]
    files += [(Path(extra), f"--config {extra}")] if extra else []
    games, experiments, sources = {}, {}, {}
    for path, where in files:
        data = read_toml(path, where)
        unknown = sorted(set(data) - {"games", "experiments"})
        if unknown:  # e.g. [experiment.x]: a typo that would otherwise define nothing
            raise SweepError(f"{where}: unknown key(s) {unknown}; a file holds [games] and [experiments.NAME] tables")
        lists, exps = data.get("games", {}), data.get("experiments", {})
        for key, table, form in (("games", lists, "NAME = [env ids]"), ("experiments", exps, "[experiments.NAME]")):
            if not isinstance(table, dict):
                raise SweepError(f"{where}: [{key}] must be a table of {form} entries, got {table!r}")
        for name, value in lists.items():
            check_games(value, f"{where}: game list {name}")
        for name, exp in exps.items():
            check_name("experiment", name, where)
            check_experiment(name, exp, f"{where}: experiment {name}")
        games.update(lists)
        experiments.update(exps)
        sources.update(dict.fromkeys(exps, where))
    for name, exp in experiments.items():  # (a list may come from another file than the experiment naming it)
        if isinstance(exp["games"], str) and exp["games"] not in games:
            raise SweepError(f"{sources[name]}: experiment {name}: games {exp['games']!r} names no [games] list; "
                             f"lists: {', '.join(games)}")
    return games, experiments


def read_toml(path: Path, where: str) -> dict:
    """The TOML file's tables; a file that cannot be read, decoded or parsed is one line naming `where`."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise SweepError(f"{where}: cannot be read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:  # tomllib decodes the whole file first
        raise SweepError(f"{where}: is not UTF-8 text (byte {e.start}: {e.reason}), as a TOML file must be") from e
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{where}: is not valid TOML: {e}") from e
    except RecursionError as e:  # arrays or inline tables nested thousands deep
        raise SweepError(f"{where}: is nested too deeply to read") from e


def check_name(kind: str, name, where: str) -> str:
    """An experiment's or a label's name (kind), which names a directory: one path component of letters, digits,
    '.', '_', '+' and '-', a letter or digit first, at most NAME_BYTES bytes (SweepError otherwise), so that no name
    puts runs, checkpoints or logs outside the sweep's root."""
    if not (isinstance(name, str) and NAME_RE.match(name) and len(name.encode()) <= NAME_BYTES):
        raise SweepError(f"{where}: {kind} name {name!r} is not one path component (letters, digits, '.', '_', '+', "
                         f"'-'; a letter or digit first; at most {NAME_BYTES} bytes)")
    return name


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
    raise SweepError(f"{where}: flags must be a string or a list of strings, got {value!r}")


def check_seeds(seeds, where: str) -> list[int]:
    """Seeds as integers in [0, SEED_LIMIT), each once (SweepError otherwise)."""
    if not isinstance(seeds, list) or not seeds:
        raise SweepError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    out = []
    for seed in seeds:
        if not is_int(seed) or not 0 <= seed < SEED_LIMIT:
            raise SweepError(f"{where}: seed {seed!r} is not an integer in [0, 2^31 - 10000 = {SEED_LIMIT})")
        if seed in out:
            raise SweepError(f"{where}: seed {seed} is given twice")
        out.append(seed)
    return out


def check_games(games, where: str) -> list[str]:
    """Env ids, each once and each one path component (SweepError otherwise): a game names its runs' directory
    and log, <game>__<seed>, so a '/' in it would put them outside the sweep's root."""
    if not isinstance(games, list) or not games:
        raise SweepError(f"{where} must be a non-empty list of env ids, got {games!r}")
    for i, game in enumerate(games):
        if not (isinstance(game, str) and GAME_RE.match(game) and len(os.fsencode(game)) <= 200):
            raise SweepError(f"{where}: game {game!r} is not an env id that is one path component (a string of at "
                             "most 200 bytes that starts with a letter or digit and has no '/' or '\\')")
        if game in games[:i]:  # two runs in one directory
            raise SweepError(f"{where}: {game} is given twice")
    return games


def _check_int(exp: dict, key: str, low: int, where: str, high: int | None = None) -> None:
    value = exp.get(key)
    if value is not None and not (is_int(value) and low <= value and (high is None or value <= high)):
        domain = f">= {low}" if high is None else f"in [{low}, total_timesteps = {high}]"
        raise SweepError(f"{where}: {key} {value!r} is not an integer {domain}")


def check_experiment(name: str, exp, where: str) -> None:
    """One experiment's keys in their types and domains (SweepError naming `where`, the key and what it takes).
    The name of a [games] list and the command line's selections are checked by load_config and expand."""
    if not isinstance(exp, dict):
        raise SweepError(f"{where}: must be a table [experiments.{name}] with the keys of "
                         f"reproduce/experiments.toml's header, got {exp!r}")
    unknown = set(exp) - EXPERIMENT_KEYS
    missing = {"script", "games", "seeds", "total_timesteps", "labels"} - set(exp)
    if unknown or missing:
        raise SweepError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    for key in ("description", "script", "env_suffix", "benchmark", "reference"):
        if key in exp and not (isinstance(exp[key], str) and (exp[key] or key == "env_suffix")):
            raise SweepError(f"{where}: {key} must be a non-empty string, got {exp[key]!r}")
    if not isinstance(exp["games"], (str, list)):
        raise SweepError(f"{where}: games must be a non-empty list of env ids, or the name of a [games] list, "
                         f"got {exp['games']!r}")
    if isinstance(exp["games"], list):
        check_games(exp["games"], f"{where}: games")
    check_seeds(exp["seeds"], where)
    _check_int(exp, "total_timesteps", 1, where)
    _check_int(exp, "checkpoint_every", 0, where)
    _check_int(exp, "stop_at_step", 1, where, exp["total_timesteps"])
    _flags(exp.get("flags", ""), where)
    labels = exp["labels"]
    if not isinstance(labels, dict) or not labels:
        raise SweepError(f"{where}: labels must be a non-empty table [experiments.{name}.labels] of "
                         f"LABEL = \"flags\" or LABEL = {{ script = \"...\", flags = \"...\" }}, got {labels!r}")
    for label, spec in labels.items():
        check_name("label", label, where)
        if isinstance(spec, dict):
            if set(spec) - {"script", "flags"} or not isinstance(spec.get("script", "x"), str) \
                    or not spec.get("script", "x"):
                raise SweepError(f"{where}, label {label}: only 'script' (a non-empty string) and 'flags' allowed, "
                                 f"got {spec!r}")
            spec = spec.get("flags", "")
        _flags(spec, f"{where}, label {label}")
    reference_and_comparisons(name, exp, where)


def normalize_game(game: str, suffix: str) -> str:
    """'Pong' -> 'Pong-v5' when the experiment's env_suffix is '-v5'; full ids are kept."""
    return game if re.search(r"-v\d+$", game) else game + suffix


def expand(name: str, experiments: dict, game_lists: dict, root: str | Path, *, games=None,
           seeds=None, labels=None, scale: float = 1.0, extra_args=(), checkpoint_every=None) -> list[Run]:
    """All runs of one experiment, seed-major (seed 1 of every game and label comes first)."""
    if name not in experiments:
        raise SweepError(f"unknown experiment {name!r}; known: {', '.join(experiments)}")
    check_name("experiment", name, f"experiment {name!r}")
    exp = experiments[name]
    check_experiment(name, exp, f"experiment {name}")
    exp_games = exp["games"]
    if isinstance(exp_games, str):
        if exp_games not in game_lists:
            raise SweepError(f"experiment {name}: no game list named {exp_games!r}")
        exp_games = check_games(game_lists[exp_games], f"game list {exp_games}")
    suffix = exp.get("env_suffix", "")
    if games:  # the user's spelling first, then the ids it stands for (Pong and Pong-v5 are one game)
        games = check_games([normalize_game(g, suffix) for g in check_games(list(games), "--games")], "--games")
    else:
        games = list(exp_games)
    seeds = check_seeds(list(seeds), "--seeds") if seeds else exp["seeds"]
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise SweepError(f"--scale {scale}: must be a finite number > 0")
    total = exp["total_timesteps"]
    if not total * scale <= MAX_STEPS:
        raise SweepError(f"--scale {scale:g}: {total:,} x {scale:g} total timesteps is more than a 64-bit step "
                         "counter holds")
    steps = max(1, round(total * scale))
    stop = exp.get("stop_at_step")
    if stop is not None:
        stop = min(steps, max(1, round(stop * scale)))
    ckpt = exp.get("checkpoint_every", 0) if checkpoint_every is None else checkpoint_every
    if not is_int(ckpt) or ckpt < 0:
        raise SweepError(f"--checkpoint-every: checkpoint_every {ckpt!r} is not an integer >= 0")
    common = _flags(exp.get("flags", ""), f"experiment {name}")
    extra_args = check_flags(extra_args, "--extra-args")
    label_specs = exp["labels"]
    for label in labels or []:
        if label not in label_specs:
            raise SweepError(f"experiment {name} has no label {label!r}; labels: {', '.join(label_specs)}")
    runs = []
    for seed in seeds:
        for game in games:
            for label, spec in label_specs.items():
                if labels and label not in labels:
                    continue
                if isinstance(spec, dict):
                    script, flags = spec.get("script", exp["script"]), spec.get("flags", "")
                else:
                    script, flags = exp["script"], spec
                runs.append(Run(name, label, script, game, seed, steps, ckpt,
                                common + _flags(flags, f"experiment {name}, label {label}") + extra_args,
                                Path(root).resolve() / name / label, stop))
    return runs


def reference_and_comparisons(name: str, exp: dict, where: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The experiment's reference label (default: its first) and its comparisons, a list of [A, B] label pairs
    (A against the baseline B; default: the reference against every other label)."""
    where = where or f"experiment {name}"
    labels = list(exp["labels"])
    ref = exp.get("reference", labels[0])
    if ref not in labels:
        raise SweepError(f"{where}: reference {ref!r} is not one of its labels {labels}")
    pairs = exp.get("comparisons")
    if pairs is None:
        return ref, reference_pairs(ref, labels)
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and all(x in labels for x in p)
                                              for p in pairs):
        raise SweepError(f"{where}: comparisons must be a list of [label, label] pairs of {labels}")
    return ref, [tuple(p) for p in pairs]


def default_root(scale: float) -> str:
    """runs/sweeps, or runs/sweeps-scale<S> for a --scale S other than 1: runs of another length never share a
    directory with the full ones."""
    return DEFAULT_ROOT if scale == 1 else f"{DEFAULT_ROOT}-scale{scale:g}"


# ----------------------------------------------------------------------------- one run
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


