"""Finished runs: finding, parsing and checking their `eval_results.json` (docs/CONVENTIONS.md), keeping the newer
of two copies of one run, grouping them by label, game and seed, and the Atari score table.

A malformed `eval_results.json` is never raised: `find_runs` names it with the reason and the other runs go on.
Reading the runs' TensorBoard events is events.py's.
"""
from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SCORES_CSV = Path(__file__).resolve().with_name("atari57_scores.csv")
MINATAR_RANDOM_CSV = Path(__file__).resolve().with_name("minatar_random.csv")
BENCHMARKS = ("atari10", "atari5", "atari57", "mujoco", "minatar")
MINATAR = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar")
RETURN_TAG = "charts/episodic_return"
# PQN/BTR: greedy-action change; PPO: KL, or 1 - ESS/n of the policy ratios (--divergence ess)
DIVERGENCE_TAGS = ("adapt/divergence", "adapt/kl", "adapt/divergence_ess")
SIZE_TAGS = ("adapt/num_steps", "adapt/batch_size")


# ----------------------------------------------------------------------------- games and labels
def load_atari_scores(path: Path = SCORES_CSV) -> dict[str, dict]:
    """game -> {random, human, atari10, atari5} from the 57-game table."""
    with open(path, newline="") as f:
        return {r["game"]: {"random": float(r["random"]), "human": float(r["human"]),
                            "atari10": r["atari10"] == "1", "atari5": r["atari5"] == "1"}
                for r in csv.DictReader(f)}


def load_minatar_random(path: Path = MINATAR_RANDOM_CSV) -> dict[str, float]:
    """game -> a uniformly random policy's mean return on it (reproduce/minatar_random.py's CSV)."""
    with open(path, newline="") as f:
        return {r["game"]: float(r["random"]) for r in csv.DictReader(f)}


def game_of(env_id: str) -> str:
    """`Breakout-v5`, `ALE/Breakout-v5`, `BreakoutNoFrameskip-v4` -> `Breakout`; `Hopper-v5` -> `Hopper`."""
    return re.sub(r"(NoFrameskip)?-v\d+$", "", env_id.split("/")[-1])


def benchmark_games(benchmark: str, table: dict) -> list[str] | None:
    """The benchmark's games; None for mujoco (any non-Atari environment)."""
    if benchmark == "mujoco":
        return None
    if benchmark == "minatar":  # abs_pqn_minatar.py's five games
        return list(MINATAR)
    return sorted(g for g, s in table.items() if benchmark == "atari57" or s[benchmark])


def reference_pairs(ref: str, labels) -> list[tuple[str, str]]:
    """The default comparisons: the reference label against every other label, as (A, baseline B) pairs."""
    return [(ref, lb) for lb in labels if lb != ref]


def is_int(x) -> bool:
    """An integer that is not a boolean (JSON's and TOML's true are Python ints)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ----------------------------------------------------------------------------- one run
@dataclass
class Run:
    label: str
    path: Path
    env_id: str
    game: str
    seed: int
    score: float  # mean evaluation return
    total_steps: int
    total_timesteps: int  # the run's --total-timesteps (its planned length)
    scalars: dict = field(default_factory=dict)  # tag -> (steps, values)
    divergence_tags: tuple = DIVERGENCE_TAGS[:2]  # the divergence its schedule used (divergence_tags())
    args: dict = field(default_factory=dict)  # the flags it ran with (eval_results.json "args")
    event_problems: list = field(default_factory=list)  # damaged or incomplete events: training curves left out
    event_notes: list = field(default_factory=list)  # damage that costs nothing (a resumed writer replaced it)
    complete: bool = True  # False: a prefix run, stopped (--stop-at-step) before its --total-timesteps
    train_seconds: float | None = None  # its training loop's seconds, summed over its sessions (no evaluation)
    capped: int | None = None  # evaluation episodes cut at the step cap (eval.capped), of eval_episodes
    eval_episodes: int | None = None
    action_counts: list | None = None  # the evaluation policy's choices per action (eval.action_counts; Atari)
    event_file_count: int = 0  # its event files: one per start of the script (a stopped and resumed run has two)

    @property
    def window_steps(self) -> int:
        """The length whose first and last 10% are the early and late windows: the protocol (--total-timesteps) of
        a prefix run, whose early window is then the protocol's; the steps trained by a complete run."""
        return self.total_steps if self.complete else self.total_timesteps

    @property
    def stop_step(self) -> int:
        """The step a prefix run was asked to stop at (--stop-at-step; it ends with the iteration that crosses it),
        else the steps it trained."""
        stop = self.args.get("stop_at_step")
        return stop if not self.complete and is_int(stop) else self.total_steps


# --divergence of the PPO scripts -> the tag its schedule ran on. Each logs two divergences in either mode: MuJoCo the
# KL and 1 - ESS/n (adapt/divergence_ess), Atari the KL and the greedy-action change (adapt/divergence).
SCHEDULED_ON = {"kl": ("adapt/kl",), "ess": ("adapt/divergence_ess",), "greedy": ("adapt/divergence",)}


def divergence_tags(args: dict) -> tuple[str, ...]:
    """The divergence tags a run's figures and trends show: the one its schedule used (a fixed-batch run with
    --track-divergence: the one it would have used), by its --divergence; a script without the flag (PQN, BTR) or a
    run whose args predate it logs one of adapt/divergence and adapt/kl."""
    return SCHEDULED_ON.get(args.get("divergence"), DIVERGENCE_TAGS[:2])


class Malformed(ValueError):
    """An eval_results.json that is not what the scripts write (docs/CONVENTIONS.md): the run is skipped."""


def _kind(x) -> str:
    """How a JSON value is named in a reason: 'a list', 'null', 'the string "x"', 'the number 5'."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"the boolean {json.dumps(x)}"
    if isinstance(x, (int, float)):
        return f"the number {x!r}"
    if isinstance(x, str):
        return f"the string {json.dumps(x[:40])}"
    return {dict: "an object", list: "a list"}.get(type(x), type(x).__name__)


def _steps(obj: dict, key: str, where: str) -> int | None:
    """A step count (global_step, total_timesteps): absent or null -> None, else an integer >= 0."""
    x = obj.get(key)
    if x is None:
        return None
    if not is_int(x) or x < 0:
        raise Malformed(f"{where}{key} is {_kind(x)}, not a step count (an integer >= 0)")
    return x


def parse_results(r) -> dict:
    """The fields of a parsed eval_results.json the report uses, checked: Malformed names the first that is missing
    or of the wrong type. Falls back to "args" for env_id, seed and total_timesteps as the scripts write them."""
    if not isinstance(r, dict):
        raise Malformed(f"holds {_kind(r)}, not a JSON object")
    args = r.get("args", {})
    if not isinstance(args, dict):
        raise Malformed(f"args is {_kind(args)}, not an object")
    if "eval" not in r:
        raise Malformed("no eval")
    ev = r["eval"]
    if not isinstance(ev, dict):
        raise Malformed(f"eval is {_kind(ev)}, not an object")
    env_id, where = (r.get("env_id"), "") if r.get("env_id") is not None else (args.get("env_id"), "args.")
    if env_id is None:
        raise Malformed("no env_id")
    if not isinstance(env_id, str) or not game_of(env_id):
        raise Malformed(f"{where}env_id is {_kind(env_id)}, not an environment id")
    seed, where = (r["seed"], "") if "seed" in r else (args.get("seed"), "args.")
    if seed is None:
        raise Malformed("no seed")
    if not is_int(seed):
        raise Malformed(f"{where}seed is {_kind(seed)}, not an integer")
    mean, returns = ev.get("mean"), ev.get("returns")
    if mean is not None and not is_number(mean):
        raise Malformed(f"eval.mean is {_kind(mean)}, not a number")
    if returns is not None and not (isinstance(returns, list) and all(is_number(x) for x in returns)):
        raise Malformed(f"eval.returns is {_kind(returns)}, not a list of numbers")
    if mean is None and not returns:  # a run with --eval-episodes 0 writes "mean": null
        raise ValueError("no evaluation episodes")
    score = float(mean) if mean is not None else float(np.mean(returns))
    if not np.isfinite(score):
        raise ValueError(f"non-finite evaluation score {score}")
    for key, ok, what in (("adapt", lambda x: isinstance(x, bool), "a boolean"),
                          ("window", lambda x: is_int(x) and x >= 1, "an integer >= 1"),
                          ("num_steps", lambda x: x is None or is_number(x), "a number"),
                          ("divergence", lambda x: x is None or isinstance(x, str), "a string")):
        if key in args and not ok(args[key]):
            raise Malformed(f"args.{key} is {_kind(args[key])}, not {what}")
    global_step, planned, arg_total = (_steps(r, "global_step", ""), _steps(r, "total_timesteps", ""),
                                       _steps(args, "total_timesteps", "args."))
    total = global_step or planned or arg_total or 0
    planned = planned or arg_total or total
    complete = r.get("complete")  # written since --stop-at-step; before it every run trained to its end
    if complete is not None and not isinstance(complete, bool):
        raise Malformed(f"complete is {_kind(complete)}, not a boolean")
    if "stop_at_step" in args and not (args["stop_at_step"] is None or is_int(args["stop_at_step"])):
        raise Malformed(f"args.stop_at_step is {_kind(args['stop_at_step'])}, not an integer or null")
    counts = {}
    for key in ("capped", "episodes"):
        counts[key] = ev.get(key)
        if counts[key] is not None and not (is_int(counts[key]) and counts[key] >= 0):
            raise Malformed(f"eval.{key} is {_kind(counts[key])}, not an integer >= 0")
    actions = ev.get("action_counts")
    if actions is not None and not (isinstance(actions, list) and all(is_int(x) and x >= 0 for x in actions)):
        raise Malformed(f"eval.action_counts is {_kind(actions)}, not a list of integers >= 0")
    seconds = r.get("train_seconds")
    if seconds is not None and not (is_number(seconds) and seconds >= 0):
        raise Malformed(f"train_seconds is {_kind(seconds)}, not a number >= 0")
    return {"env_id": env_id, "seed": seed, "score": score, "total": total, "planned": planned, "args": args,
            "complete": total >= planned if complete is None else complete,
            "train_seconds": None if seconds is None else float(seconds), "capped": counts["capped"],
            "episodes": counts["episodes"], "action_counts": actions}


def read_run(label: str, run_dir: Path) -> Run:
    try:
        r = json.loads((run_dir / "eval_results.json").read_bytes())
    except UnicodeDecodeError as e:
        raise Malformed(f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise Malformed(f"invalid JSON ({e})") from e
    f = parse_results(r)
    return Run(label, run_dir, f["env_id"], game_of(f["env_id"]), f["seed"], f["score"], f["total"], f["planned"],
               divergence_tags=divergence_tags(f["args"]), args=f["args"], complete=f["complete"],
               train_seconds=f["train_seconds"], capped=f["capped"], eval_episodes=f["episodes"],
               action_counts=f["action_counts"])


def find_runs(label: str, root: Path, wanted=None) -> tuple[list[Run], list[str]]:
    """Finished runs below root, and notes on the directories skipped: an eval_results.json that cannot be read or
    is malformed is named with the reason, never raised. wanted(directory) -> False leaves a directory out without
    a note (a run of a game or seed not chosen)."""
    runs, skipped = [], []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        if wanted is not None and not wanted(Path(d)):
            continue
        if "eval_results.json" in files:
            try:
                runs.append(read_run(label, Path(d)))
            except Malformed as e:
                skipped.append(f"`{Path(d) / 'eval_results.json'}`: malformed eval_results.json ({e})")
            except (OSError, ValueError, KeyError, TypeError) as e:
                skipped.append(f"`{Path(d) / 'eval_results.json'}`: unreadable eval_results.json "
                               f"({type(e).__name__}: {e})")
        elif "checkpoint.pt" in files or any(f.startswith("events.out.tfevents") for f in files):
            skipped.append(f"`{d}`: no eval_results.json (unfinished run)")
    return runs, skipped


def add_run(runs: dict, key, run: Run, name: str, notes: list) -> None:
    """runs[key] = run; when runs[key] holds another copy of the same run (two directories with one label, game
    and seed), the newer eval_results.json is kept and the choice is noted, naming the run `name seed S`."""
    old = runs.get(key)
    if old is not None:
        run, drop = sorted([old, run], key=lambda r: (r.path / "eval_results.json").stat().st_mtime)[::-1]
        notes.append(f"{run.label}: {name} seed {run.seed} found twice; kept the newer `{run.path}`, "
                     f"ignored `{drop.path}`")
    runs[key] = run


class MixedLengths(ValueError):
    """One label's runs have different total_timesteps."""


def collect(roots: dict[str, Path], benchmark: str | None, table: dict, allow_mixed: bool = False,
            total_timesteps: int | None = None, games: list[str] | None = None, seeds: list[int] | None = None):
    """-> data[label][game][seed] = Run, the game list, and notes for the report. With total_timesteps, only runs
    of that length are kept (the others are noted as left out). With games (names, game_of) or seeds, only those
    runs are read and the game list is those games (a subset of the benchmark's, checked by the caller). Raises
    MixedLengths when a label's runs have different total_timesteps, unless allow_mixed. The runs' events are not
    read here (events.load_events)."""
    data, notes, found, unchosen = {}, [], set(), 0
    allowed = benchmark_games(benchmark, table) if benchmark else None

    def wanted(d: Path) -> bool:  # a directory named <env id>__<seed>, as the scripts name runs, of another choice
        env_id, _, seed = d.name.rpartition("__")
        return not (env_id and seed.isdigit()) or ((games is None or game_of(env_id) in games)
                                                     and (seeds is None or int(seed) in seeds))
    for label, root in roots.items():
        runs, skipped = find_runs(label, root, wanted)
        notes += [f"{label}: skipped {s}" for s in skipped]
        data[label] = {}
        for run in runs:
            if (games is not None and run.game not in games) or (seeds is not None and run.seed not in seeds):
                unchosen += 1
                continue
            if (benchmark == "mujoco" and run.game in table) or (allowed is not None and run.game not in allowed):
                notes.append(f"{label}: ignored `{run.path}` ({run.env_id} is not in {benchmark})")
                continue
            if total_timesteps is not None and run.total_timesteps != total_timesteps:
                notes.append(f"{label}: other length, left out: `{run.path}` ({run.total_timesteps:,} steps, not "
                             f"{total_timesteps:,})")
                continue
            add_run(data[label].setdefault(run.game, {}), run.seed, run, run.game, notes)
            found.add(run.game)
    if games is not None:
        notes.append(f"games chosen (--games): {', '.join(games)}"
                     + (f", {len(games)} of {benchmark}'s {len(allowed)}" if allowed is not None else ""))
    if seeds is not None:
        notes.append(f"seeds chosen (--seeds): {', '.join(map(str, seeds))}")
    if unchosen:
        notes.append(f"{unchosen} finished run(s) of other games or seeds not read")
    games = sorted(games) if games is not None else sorted(found) if allowed is None else allowed
    for label, by_game in data.items():
        lengths = sorted({r.total_timesteps for g in by_game.values() for r in g.values()})
        if len(lengths) > 1:
            if not allow_mixed:
                raise MixedLengths(f"label {label} has runs of different lengths (total_timesteps "
                                   f"{', '.join(f'{n:,}' for n in lengths)}); pass --total-timesteps N to report "
                                   "only the runs of length N, or --allow-mixed-timesteps to pool them")
            notes.append(f"{label}: pools runs of different lengths (total_timesteps "
                         f"{', '.join(f'{n:,}' for n in lengths)}; --allow-mixed-timesteps)")
        # A prefix run's final numbers are at its stop: pooled with runs that went on, they would mean neither.
        stops = sorted({reached(r) for g in by_game.values() for r in g.values()})
        if len(stops) > 1:
            if not allow_mixed:
                raise MixedLengths(f"label {label} has runs that stopped at different steps ({'; '.join(stops)}); "
                                   "report each stop under its own label, or pass --allow-mixed-timesteps to pool "
                                   "them")
            notes.append(f"{label}: pools runs that stopped at different steps ({'; '.join(stops)}; "
                         "--allow-mixed-timesteps)")
    return data, games, notes


def reached(run: Run) -> str:
    """Where a run's final numbers are: "2,000,000 of 20,000,000 steps" for a prefix run (its --stop-at-step),
    "the end of 20,000,000 steps" for a complete one."""
    return f"{run.stop_step:,} of {run.total_timesteps:,} steps" if not run.complete else \
        f"the end of {run.total_timesteps:,} steps"


def out_problem(out: Path) -> str | None:
    """Why --out cannot be a tool's output directory (it is a file, lies below a file, or cannot be written), or None.
    Nothing is created: the directory is made only when the report is written."""
    if out.exists() and not out.is_dir():
        return "is a file, not a directory"
    existing = out
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            return f"{existing} is a broken symbolic link"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so no directory can be made below it"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{'it' if existing == out else existing} is not writable"
    return None
