"""The experiment grids' runs: an experiment of the TOML (read and checked by experiment_file.py) expanded into its
runs (expand), and one run's directory, files and command line (Run); execution.py runs one.

Every run has the directory <root>/<experiment>/<label>/<game>__<seed> (the scripts' --output-dir and --run-name)
and the log <root>/<experiment>/<label>/logs/<game>__<seed>.log, to which every attempt appends its output between
a "[sweep] ... start: <command>" line (START), followed by "[sweep] source: commit <sha>" (the code it ran from), and
a "[sweep] ... exit N" line (EXIT), written by execution.execute.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from .experiment_file import (SweepError, check_experiment, check_flags, check_games, check_name, check_seeds,
                              parse_flags)
from .runs import is_int

REPO = Path(__file__).resolve().parent.parent
RESULT, CHECKPOINT = "eval_results.json", "checkpoint.pt"
DEFAULT_ROOT = "runs/sweeps"
START, EXIT = re.compile(r"^\[sweep\] \S+ start"), re.compile(r"^\[sweep\] \S+ exit (-?\d+)")
# The scripts' thread-count flags, which the sweep sets (cores / workers) unless the user's flags set them.
THREAD_FLAGS = ("--torch-threads", "--env-threads")
MAX_STEPS = 2 ** 63 - 1  # total_timesteps must fit the scripts' (and TensorBoard's) 64-bit step counters


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


def normalize_game(game: str, suffix: str) -> str:
    """'Pong' -> 'Pong-v5' when the experiment's env_suffix is '-v5'; full ids are kept."""
    return game if re.search(r"-v\d+$", game) else game + suffix


@dataclasses.dataclass(frozen=True)
class Selection:
    """What the command line selects of an experiment (None: all of it) and changes in its runs."""
    games: Sequence[str] | None = None  # names or env ids ('Pong' = 'Pong-v5')
    seeds: Sequence[int] | None = None
    labels: Sequence[str] | None = None
    scale: float = 1.0  # multiplies total_timesteps (and stop_at_step)
    extra_args: Sequence[str] = ()  # flags appended to every command
    checkpoint_every: int | None = None  # None: the experiment's


def expand(name: str, experiments: dict, game_lists: dict, root: str | Path,
           select: Selection = Selection()) -> list[Run]:
    """All runs of one experiment, seed-major (seed 1 of every game and label comes first), of what `select`
    selects."""
    games, seeds, labels, scale = select.games, select.seeds, select.labels, select.scale
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
    ckpt = exp.get("checkpoint_every", 0) if select.checkpoint_every is None else select.checkpoint_every
    if not is_int(ckpt) or ckpt < 0:
        raise SweepError(f"--checkpoint-every: checkpoint_every {ckpt!r} is not an integer >= 0")
    common = parse_flags(exp.get("flags", ""), f"experiment {name}")
    extra_args = check_flags(select.extra_args, "--extra-args")
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
                                common + parse_flags(flags, f"experiment {name}, label {label}") + extra_args,
                                Path(root).resolve() / name / label, stop))
    return runs


def default_root(scale: float) -> str:
    """runs/sweeps, or runs/sweeps-scale<S> for a --scale S other than 1: runs of another length never share a
    directory with the full ones."""
    return DEFAULT_ROOT if scale == 1 else f"{DEFAULT_ROOT}-scale{scale:g}"
