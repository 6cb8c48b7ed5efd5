#!/usr/bin/env python
"""The paper's tables and figures from directories of finished runs (docs/reproducing.md: "The paper's tables").

    python reproduce/report.py --runs ABS=runs/abs Small=runs/small --out report/ --benchmark atari10

Every `eval_results.json` below a labelled directory (any depth) is one finished run; the TensorBoard
events beside it give the training curves. Runs are grouped by label, game (env id without `-v5`) and
seed. Atari scores are human-normalised (HNS) with `atari57_scores.csv` beside this file; other
environments (MuJoCo) stay in raw returns. Aggregates (IQM, median, mean, optimality gap) and their
95% stratified-bootstrap confidence intervals come from `rliable` (Agarwal et al. 2021). A number that rests on
the few runs of one game is shown with its per-seed values, their mean and a Student-t 95% interval; each
compared pair gets the difference of means with Welch's 95% interval and an exact permutation p (with 3 vs 3
runs no p can be below 0.10, and the report says so). Training curves give the early return, the late
variance and the whole-run return (the curve's area per step); ABS runs: the share of the early window spent
in burn-in, and their divergence and L per game.
Writes `report.md` and PNG figures, each with a CSV of the plotted data, into `--out`.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import struct
import sys
import warnings
from dataclasses import dataclass, field
from itertools import combinations
from math import comb, fsum
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rliable import library as rly  # noqa: E402
from rliable import metrics  # noqa: E402
from google.protobuf.message import DecodeError  # noqa: E402
from scipy import stats  # noqa: E402
from tensorboard.backend.event_processing import io_wrapper  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: E402

SCORES_CSV = Path(__file__).resolve().with_name("atari57_scores.csv")
BENCHMARKS = ("atari10", "atari5", "atari57", "mujoco")
RETURN_TAG = "charts/episodic_return"
# PQN/BTR: greedy-action change; PPO: KL, or 1 - ESS/n of the policy ratios (--divergence ess)
DIVERGENCE_TAGS = ("adapt/divergence", "adapt/kl", "adapt/divergence_ess")
SIZE_TAGS = ("adapt/num_steps", "adapt/batch_size")
UNITS = {"adapt/divergence": "divergence δ (fraction of\ngreedy actions changed)",
         "adapt/kl": "divergence δ = KL (nats)",
         "adapt/divergence_ess": "divergence δ = 1 - ESS/n\n(policy ratios)",
         "adapt/num_steps": "rollout length L (steps per env)",
         "adapt/batch_size": "batch size (transitions per update)"}
AGGREGATES = ("IQM", "median", "mean", "optimality gap")
EARLY, LATE = 0.1, 0.9  # first 10% / last 10% of training steps
LEVEL = 0.95  # of every interval
EXACT_RELABELLINGS = 1_000_000  # the permutation test enumerates up to this many relabellings, else samples them
SAMPLED_RELABELLINGS = 100_000
IQM_TRIMS_FROM = 4  # the IQM (25% trimmed mean, scipy's trim_mean) of n < 4 values trims int(0.25 n) = 0 of them


# ----------------------------------------------------------------------------- scores and statistics
def load_atari_scores(path: Path = SCORES_CSV) -> dict[str, dict]:
    """game -> {random, human, atari10, atari5} from the 57-game table."""
    with open(path, newline="") as f:
        return {r["game"]: {"random": float(r["random"]), "human": float(r["human"]),
                            "atari10": r["atari10"] == "1", "atari5": r["atari5"] == "1"}
                for r in csv.DictReader(f)}


def game_of(env_id: str) -> str:
    """`Breakout-v5`, `ALE/Breakout-v5`, `BreakoutNoFrameskip-v4` -> `Breakout`; `Hopper-v5` -> `Hopper`."""
    return re.sub(r"(NoFrameskip)?-v\d+$", "", env_id.split("/")[-1])


def human_normalized_score(score, random: float, human: float):
    """HNS = (score - random) / (human - random)."""
    return (np.asarray(score, dtype=float) - random) / (human - random)


def benchmark_games(benchmark: str, table: dict) -> list[str] | None:
    """The benchmark's games; None for mujoco (any non-Atari environment)."""
    if benchmark == "mujoco":
        return None
    return sorted(g for g, s in table.items() if benchmark == "atari57" or s[benchmark])


def iqm(scores) -> float:
    """Interquartile mean (25% trimmed mean) over all runs and games."""
    return float(metrics.aggregate_iqm(np.asarray(scores, dtype=float)))


def aggregate(scores: np.ndarray) -> np.ndarray:
    """(runs x games) scores -> [IQM, median, mean, optimality gap], in the order of AGGREGATES."""
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_median(scores),
                     metrics.aggregate_mean(scores), metrics.aggregate_optimality_gap(scores)])


def bootstrap_ci(score_dict: dict[str, np.ndarray], func=aggregate, reps: int = 2000, seed: int = 0):
    """Point estimates and 95% stratified-bootstrap CIs (runs resampled within each game).

    score_dict maps a name to a (runs x games) matrix. Returns ({name: point}, {name: 2 x k [lo; hi]}).
    The same seed gives the same intervals: rliable's StratifiedBootstrap draws its resamples from NumPy's global
    generator (it ignores random_state), so the global generator is seeded here and restored afterwards."""
    outer = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch's RandomState deprecation notice
            return rly.get_interval_estimates(score_dict, func, reps=reps,
                                              random_state=np.random.RandomState(seed))
    finally:
        np.random.set_state(outer)


def improvement_rate(score_ref: float, score_other: float) -> float:
    """(score_ref - score_other) / |score_other| (the paper's Figure 3 quantity); NaN when score_other is 0."""
    return (score_ref - score_other) / abs(score_other) if score_other != 0 else float("nan")


def robust_improvement(a: float, b: float, random: float | None = None, human: float | None = None) -> float:
    """(a - b) / (max(human, b) - random) on raw scores (Wang et al. 2016): a baseline near the random score
    cannot inflate it. Without a human/random table (MuJoCo): (a - b) / max(|a|, |b|), bounded in [-2, 2];
    NaN when both are 0."""
    if random is not None and human is not None:
        return (a - b) / (max(human, b) - random)
    scale = max(abs(a), abs(b))
    return (a - b) / scale if scale > 0 else float("nan")


def early_mean(steps, values, total_steps: float) -> float:
    """Mean episodic return over the first 10% of training steps."""
    sel = np.asarray(steps) <= EARLY * total_steps
    return float(np.mean(np.asarray(values)[sel])) if sel.any() else float("nan")


def late_variance(steps, values, total_steps: float) -> float:
    """Population variance of episodic return over the last 10% of training steps; NaN with fewer than two games
    there (one game has no spread to measure)."""
    sel = np.asarray(steps) >= LATE * total_steps
    return float(np.var(np.asarray(values)[sel])) if sel.sum() >= 2 else float("nan")


def curve_area(steps, values, total_steps: float) -> float:
    """The learning curve's area per step, the sample-efficiency summary: the mean over the ten tenths of training
    of the mean episodic return in each tenth (a tenth without games is left out; NaN when none has any). Unlike
    the mean over all games, it does not weight a phase by how many (short) games it had."""
    edges = np.linspace(0.0, total_steps, 11)
    tenths = binned(np.asarray(steps), np.asarray(values, dtype=float), edges)
    return float(np.nanmean(tenths)) if np.isfinite(tenths).any() else float("nan")


def finite_mean(xs) -> float:
    """Mean of the finite values (NaN when none), e.g. the mean improvement rate over games."""
    v = [x for x in xs if np.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")


def finite_median(xs) -> float:
    """Median of the finite values (NaN when none)."""
    v = [x for x in xs if np.isfinite(x)]
    return float(np.median(v)) if v else float("nan")


def pairwise_wins(values: dict, a: str, b: str, games, pick=max) -> tuple[int, int]:
    """(games where a beats b, games both have a finite value): the paper's "ABS wins 7/10" against one
    baseline. pick=max: higher is better; pick=min: lower is better. A tie is not a win."""
    both = [g for g in games if np.isfinite(values.get((g, a), np.nan)) and np.isfinite(values.get((g, b), np.nan))]
    better = (lambda x, y: x > y) if pick is max else (lambda x, y: x < y)
    return sum(better(values[(g, a)], values[(g, b)]) for g in both), len(both)


def binned(steps, values, edges: np.ndarray) -> np.ndarray:
    """Mean of values per step bin (NaN for empty bins)."""
    idx = np.clip(np.digitize(steps, edges[1:-1]), 0, len(edges) - 2)
    sums = np.bincount(idx, values, len(edges) - 1)
    counts = np.bincount(idx, None, len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def band(curves: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Across-run mean, min, max and count per bin of binned curves."""
    a = np.vstack(curves)
    n = np.sum(~np.isnan(a), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins
        return np.nanmean(a, 0), np.nanmin(a, 0), np.nanmax(a, 0), n


# ----------------------------------------------------------------------------- few runs of one game
def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, lo, hi): the Student-t interval mean +- t_{(1+level)/2, n-1} * s / sqrt(n), s the sample standard
    deviation (ddof 1). With one value (or none) there is no interval: lo and hi are NaN."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return float("nan"), float("nan"), float("nan")
    m = float(np.mean(x))
    if len(x) < 2:
        return m, float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x)))
    return m, m - half, m + half


def welch_interval(a, b, level: float = LEVEL) -> tuple[float, float, float, float]:
    """(mean(a) - mean(b), lo, hi, df): Welch's interval diff +- t_{(1+level)/2, df} * sqrt(s_a^2/n_a + s_b^2/n_b)
    with the Welch-Satterthwaite df = (v_a + v_b)^2 / (v_a^2/(n_a-1) + v_b^2/(n_b-1)), v = s^2/n. lo, hi and df are
    NaN when a side has fewer than two values, or when neither side has any spread (no df)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(np.mean(a) - np.mean(b)) if len(a) and len(b) else float("nan")
    if len(a) < 2 or len(b) < 2:
        return diff, float("nan"), float("nan"), float("nan")
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    if va + vb == 0:
        return diff, float("nan"), float("nan"), float("nan")
    df = float((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)))
    half = float(stats.t.ppf(0.5 + level / 2, df) * np.sqrt(va + vb))
    return diff, diff - half, diff + half, df


def permutation_p(a, b, exact_limit: int = EXACT_RELABELLINGS, samples: int = SAMPLED_RELABELLINGS,
                  seed: int = 0) -> tuple[float, int, bool]:
    """(p, relabellings, exact): the two-sided permutation test of the difference of means. Every split of the
    pooled n_a + n_b values into groups of n_a and n_b (all C(n_a + n_b, n_a) of them, the observed one included)
    gives a difference of means; p = the share with |diff| >= |observed diff| - 1e-12 * max(1, |observed diff|)
    (a float tolerance, 1e-12 for differences up to 1 and relative above). Group sums are correctly rounded
    (math.fsum), so splits with equal sums, and the mirror split when n_a = n_b, tie exactly. Above exact_limit
    relabellings, `samples` random ones (seeded) are drawn instead and p = (1 + hits) / (1 + samples), exact False.
    NaN when a side is empty."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    na, nb = len(a), len(b)
    if not na or not nb:
        return float("nan"), 0, True
    x = np.array(a + b)
    n, total = comb(na + nb, na), len(x)

    def diff(idx) -> float:
        mask = np.zeros(total, dtype=bool)
        mask[list(idx)] = True
        return fsum(x[mask]) / na - fsum(x[~mask]) / nb
    observed = abs(diff(range(na)))
    tol = 1e-12 * max(1.0, observed)
    if n <= exact_limit:
        hits = sum(abs(diff(idx)) >= observed - tol for idx in combinations(range(total), na))
        return hits / n, n, True
    rng = np.random.default_rng(seed)
    hits = sum(abs(diff(rng.permutation(total)[:na])) >= observed - tol for _ in range(samples))
    return (1 + hits) / (1 + samples), samples, False


def min_permutation_p(na: int, nb: int) -> float:
    """The smallest p the two-sided exact permutation test can give with n_a vs n_b runs, whatever the values:
    only the observed split (and, for equal sizes, its mirror, which has the same |diff|) can be the most extreme,
    so 2 / C(n, n_a) for n_a = n_b and 1 / C(n, n_a) otherwise."""
    return (2 if na == nb else 1) / comb(na + nb, na)


def min_p_statement(na: int, nb: int, alpha: float = 0.05) -> str:
    """The plain reading of min_permutation_p: whether any difference can reach p < alpha with these counts."""
    p, n = min_permutation_p(na, nb), comb(na + nb, na)
    head = f"with {na} vs {nb} runs the smallest possible p is {fmt_p(p)} ({2 if na == nb else 1} of {n} relabellings)"
    return f"{head}: no difference can reach p < {alpha:g}" if p >= alpha else f"{head}, below {alpha:g}"


def fmt_p(p: float) -> str:
    if p is None or not np.isfinite(p):
        return "–"
    return f"{p:.2f}" if p >= 0.095 else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def burn_in_share(steps, window: int, total_steps: float) -> tuple[float, float]:
    """(the step burn-in ends at, its share of the early window): ABS holds L = L_min until its W-th divergence
    measurement (the first that moves L), so burn-in ends at the step that measurement was logged at, one event per
    measurement of adapt/num_steps (or adapt/batch_size); a run with fewer than W measurements never left it (inf).
    The early window is the first 10% of training steps (EARLY), as in early_mean."""
    steps = np.sort(np.asarray(steps, dtype=float))
    end = float(steps[window - 1]) if len(steps) >= window else float("inf")
    early = EARLY * total_steps
    return end, (min(end, early) / early if early > 0 else float("nan"))


# ----------------------------------------------------------------------------- reading runs
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


def divergence_tags(args: dict) -> tuple[str, ...]:
    """The divergence tags a run's figure shows: the one its schedule used. PPO logs the KL and 1 - ESS/n in either
    mode; with --divergence ess its schedule ran on adapt/divergence_ess, otherwise on the KL (PQN/BTR: their own)."""
    return ("adapt/divergence_ess",) if args.get("divergence") == "ess" else DIVERGENCE_TAGS[:2]


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


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _steps(obj: dict, key: str, where: str) -> int | None:
    """A step count (global_step, total_timesteps): absent or null -> None, else an integer >= 0."""
    x = obj.get(key)
    if x is None:
        return None
    if not _is_int(x) or x < 0:
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
    if not _is_int(seed):
        raise Malformed(f"{where}seed is {_kind(seed)}, not an integer")
    mean, returns = ev.get("mean"), ev.get("returns")
    if mean is not None and not _is_number(mean):
        raise Malformed(f"eval.mean is {_kind(mean)}, not a number")
    if returns is not None and not (isinstance(returns, list) and all(_is_number(x) for x in returns)):
        raise Malformed(f"eval.returns is {_kind(returns)}, not a list of numbers")
    if mean is None and not returns:  # a run with --eval-episodes 0 writes "mean": null
        raise ValueError("no evaluation episodes")
    score = float(mean) if mean is not None else float(np.mean(returns))
    if not np.isfinite(score):
        raise ValueError(f"non-finite evaluation score {score}")
    for key, ok, what in (("adapt", lambda x: isinstance(x, bool), "a boolean"),
                          ("window", lambda x: _is_int(x) and x >= 1, "an integer >= 1"),
                          ("num_steps", lambda x: x is None or _is_number(x), "a number"),
                          ("divergence", lambda x: x is None or isinstance(x, str), "a string")):
        if key in args and not ok(args[key]):
            raise Malformed(f"args.{key} is {_kind(args[key])}, not {what}")
    global_step, planned, arg_total = (_steps(r, "global_step", ""), _steps(r, "total_timesteps", ""),
                                       _steps(args, "total_timesteps", "args."))
    total = global_step or planned or arg_total or 0
    return {"env_id": env_id, "seed": seed, "score": score, "total": total, "planned": planned or arg_total or total,
            "args": args}


def read_run(label: str, run_dir: Path) -> Run:
    try:
        r = json.loads((run_dir / "eval_results.json").read_bytes())
    except UnicodeDecodeError as e:
        raise Malformed(f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise Malformed(f"invalid JSON ({e})") from e
    f = parse_results(r)
    return Run(label, run_dir, f["env_id"], game_of(f["env_id"]), f["seed"], f["score"], f["total"], f["planned"],
               divergence_tags=divergence_tags(f["args"]), args=f["args"])


def find_runs(label: str, root: Path) -> tuple[list[Run], list[str]]:
    """Finished runs below root, and notes on the directories skipped: an eval_results.json that cannot be read or
    is malformed is named with the reason, never raised."""
    runs, skipped = [], []
    for d, dirs, files in os.walk(root):
        dirs.sort()
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


def load_scalars(run_dir: Path, tags) -> dict:
    """tag -> (steps, values) of every event in the run's TensorBoard files, sorted by step: the scripts log one
    `charts/episodic_return` per finished game and several games can end at one step, so no event is dropped
    (size_guidance 0 turns off TensorBoard's sampling of 10,000 events per tag). A resumed run's events after
    its checkpoint are purged by TensorBoard itself (the scripts open the writer with purge_step)."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    out = {}
    for tag in sorted(set(tags) & set(acc.Tags().get("scalars", []))):
        events = sorted(acc.Scalars(tag), key=lambda e: (e.step, e.wall_time))
        out[tag] = (np.array([e.step for e in events], dtype=float), np.array([e.value for e in events], dtype=float))
    return out


# ----------------------------------------------------------------------------- damaged or incomplete events
@dataclass
class EventFile:
    """What reading one event file record by record found (read_event_file)."""
    path: Path
    size: int  # bytes
    read: int  # bytes of intact records from the start of the file
    problem: str | None  # why reading stopped before the end of the file; None when it was read to the end
    last_step: int | None  # the largest step of a summary read (None: no summary read)
    restarts: tuple = ()  # steps of the SessionLog START events read (a resumed writer's purge_step)
    tags: frozenset = frozenset()  # scalar tags read


def event_files(run_dir: Path) -> list[Path]:
    """The event files TensorBoard reads for a run directory, in its reading order."""
    return sorted(p for p in run_dir.iterdir() if p.is_file() and io_wrapper.IsSummaryEventsFile(str(p)))


def read_event_file(path: Path) -> EventFile:
    """Read the TFRecord framing of an event file (length, its masked CRC-32C, the data, its CRC-32C), as
    TensorBoard's reader does, and parse each record as an Event. TensorBoard stops at the first record that is cut
    short or fails a CRC check, silently (a "truncated record" at debug level), and reads nothing after it: a file
    cut or corrupted in the middle looks to it like a shorter run. Here the stop is reported, with the bytes read."""
    size, pos, last, restarts, tags = path.stat().st_size, 0, None, [], set()

    def result(problem=None):
        return EventFile(path, size, pos, problem, last, tuple(restarts), frozenset(tags))
    try:
        f = open(path, "rb")
    except OSError as e:
        return result(f"cannot be opened ({type(e).__name__}: {e.strerror or e})")
    with f:
        while True:
            header = f.read(12)
            if not header:
                return result()
            if len(header) < 12:
                return result("a record cut short (in its header)")
            (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != crc:
                return result("a record failing its CRC check (header)")
            if length > size - pos - 16:
                return result("a record cut short (in its data)")
            data, tail = f.read(length), f.read(4)
            if len(data) < length or len(tail) < 4:
                return result("a record cut short (in its data)")
            if masked_crc32c(data) != struct.unpack("<I", tail)[0]:
                return result("a record failing its CRC check (data)")
            try:
                event = event_pb2.Event.FromString(data)
            except DecodeError:
                return result("a record that is not an event")
            pos += 16 + length
            if event.HasField("summary"):
                last = event.step if last is None else max(last, event.step)
                tags.update(v.tag for v in event.summary.value)
            elif event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                restarts.append(event.step)


def iteration_tag(tags) -> str | None:
    """The tag the completeness check follows: one logged every iteration (charts/SPS, else a losses/* tag), else
    the training games (charts/episodic_return); None when the events hold none of them."""
    for tag in ("charts/SPS", *sorted(t for t in tags if t.startswith("losses/")), RETURN_TAG):
        if tag in tags:
            return tag
    return None


def logging_interval(steps) -> float:
    """The largest step gap between consecutive logged steps of a tag, counted from step 0: one logging interval
    (an iteration's steps for PPO and PQN, whose rollout length may grow, or BTR's --log-every steps)."""
    s = np.unique(np.asarray(steps, dtype=float))
    return float(np.max(np.diff(np.concatenate([[0.0], s])))) if len(s) else 0.0


def check_events(run: Run, files: list[EventFile], scalars: dict) -> tuple[list[str], list[str]]:
    """(problems, notes) of a run's event files. A problem leaves its training-curve numbers out:
    - damaged: a file TensorBoard cannot read to its end (a record cut short or failing its CRC check), unless
      a later file of the run restarts (a resumed writer's purge_step P, which drops every earlier event from step
      P on) at a step the damaged file was read past: then nothing that counts is missing, and it is only noted;
    - incomplete: the events, as TensorBoard reads them, end before the run's last step (eval_results.json
      global_step) by more than one logging interval of a tag logged every iteration (iteration_tag)."""
    problems, notes = [], []
    who = f"{run.label} {run.game} seed {run.seed}"
    end = f"the run's last step {run.total_steps:,}" if run.total_steps else "the run's last step unknown"
    for i, ef in enumerate(files):
        if ef.problem is None:
            continue
        read = (f"{ef.problem} at byte {ef.read:,} of {ef.size:,}; TensorBoard stops reading the file there, so its "
                f"events end at step " + (f"{ef.last_step:,}" if ef.last_step is not None else "– (none read)"))
        later = [p for x in files[i + 1:] for p in x.restarts]
        if later and (ef.last_step or 0) >= min(later):
            notes.append(f"`{ef.path}` ({who}): {read}, but the run resumed at step {min(later):,} in a later event "
                         "file, which replaces every event from that step on: nothing read is missing (kept)")
        else:
            problems.append(f"`{ef.path}` ({who}): damaged: {read} ({end})")
    tag = iteration_tag(set().union(*(ef.tags for ef in files)) if files else set())
    if not problems and tag is not None and run.total_steps:
        steps = scalars.get(tag, (np.array([]), None))[0]
        last = float(steps.max()) if len(steps) else None
        interval = logging_interval(steps)
        if last is None or last < run.total_steps - interval:
            shown = files[-1].path if files else run.path
            problems.append(f"`{shown}` ({who}): incomplete: its events end at step "
                            + (f"{last:,.0f}" if last is not None else "– (none of them)")
                            + f" ({tag}), before {end} by more than one logging interval ({interval:,.0f} steps)")
    return problems, notes


def load_run_events(run: Run) -> None:
    """Fill run.scalars from the run's event files, unless they are damaged or incomplete (check_events): then the
    run's training-curve numbers are left out (run.scalars stays empty) and run.event_problems says why. Its
    evaluation return, from eval_results.json, is kept either way."""
    tags = (RETURN_TAG, *run.divergence_tags, *SIZE_TAGS)
    try:
        files = [read_event_file(p) for p in event_files(run.path)]
    except OSError as e:
        run.event_problems = [f"`{run.path}` ({run.label} {run.game} seed {run.seed}): damaged: its event files "
                              f"cannot be listed ({type(e).__name__}: {e.strerror or e})"]
        return
    if not files:
        return
    check = iteration_tag(set().union(*(ef.tags for ef in files)))
    try:
        scalars = load_scalars(run.path, (*tags, *([check] if check else [])))
    except (OSError, DecodeError) as e:
        run.event_problems = [f"`{run.path}` ({run.label} {run.game} seed {run.seed}): damaged: TensorBoard cannot "
                              f"read its events ({type(e).__name__}: {e})"]
        return
    run.event_problems, run.event_notes = check_events(run, files, scalars)
    if not run.event_problems:
        run.scalars = {t: v for t, v in scalars.items() if t in tags}


def newer_copy(a: Run, b: Run) -> tuple[Run, Run]:
    """(kept, ignored) of two copies of one run: the newer eval_results.json is kept."""
    keep, drop = sorted([a, b], key=lambda r: (r.path / "eval_results.json").stat().st_mtime)[::-1]
    return keep, drop


class MixedLengths(ValueError):
    """One label's runs have different total_timesteps."""


def collect(roots: dict[str, Path], benchmark: str | None, table: dict, allow_mixed: bool = False,
            total_timesteps: int | None = None):
    """-> data[label][game][seed] = Run, the game list, and notes for the report. With total_timesteps, only runs
    of that length are kept (the others are noted as left out). Raises MixedLengths when a label's runs have
    different total_timesteps, unless allow_mixed."""
    data, notes, found = {}, [], set()
    allowed = benchmark_games(benchmark, table) if benchmark else None
    for label, root in roots.items():
        runs, skipped = find_runs(label, root)
        notes += [f"{label}: skipped {s}" for s in skipped]
        data[label] = {}
        for run in runs:
            if (benchmark == "mujoco" and run.game in table) or (allowed is not None and run.game not in allowed):
                notes.append(f"{label}: ignored `{run.path}` ({run.env_id} is not in {benchmark})")
                continue
            if total_timesteps is not None and run.total_timesteps != total_timesteps:
                notes.append(f"{label}: other length, left out: `{run.path}` ({run.total_timesteps:,} steps, not "
                             f"{total_timesteps:,})")
                continue
            old = data[label].setdefault(run.game, {}).get(run.seed)
            if old is not None:
                keep, drop = newer_copy(old, run)
                notes.append(f"{label}: {run.game} seed {run.seed} found twice; kept the newer `{keep.path}`, "
                             f"ignored `{drop.path}`")
                run = keep
            data[label][run.game][run.seed] = run
            found.add(run.game)
    games = sorted(found) if allowed is None else allowed
    for label, by_game in data.items():
        lengths = sorted({r.total_timesteps for g in by_game.values() for r in g.values()})
        if len(lengths) > 1:
            if not allow_mixed:
                raise MixedLengths(f"label {label} has runs of different lengths (total_timesteps "
                                   f"{', '.join(f'{n:,}' for n in lengths)}); pass --total-timesteps N to report "
                                   "only the runs of length N, or --allow-mixed-timesteps to pool them")
            notes.append(f"{label}: pools runs of different lengths (total_timesteps "
                         f"{', '.join(f'{n:,}' for n in lengths)}; --allow-mixed-timesteps)")
    for label in data:
        for game in data[label].values():
            for run in game.values():
                load_run_events(run)
    return data, games, notes


# ----------------------------------------------------------------------------- tables
def fmt(x: float) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"


def fmt_pct(x: float) -> str:
    """A rate in %, at one decimal whatever its size (fmt gives three decimals below 10: 9.921% beside 32.5%)."""
    return f"{x:.1f}%" if x is not None and np.isfinite(x) else "–"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def normalized(run: Run, table: dict) -> float:
    """HNS for Atari, raw return otherwise."""
    s = table.get(run.game)
    return float(human_normalized_score(run.score, s["random"], s["human"])) if s else run.score


def aggregate_table(data, games, table, reps, seed):
    """Per label: (runs x games) HNS matrix over its Atari games, cut to the fewest seeds any game has."""
    mats, rows, notes = {}, {}, []
    for label, by_game in data.items():
        gs = [g for g in games if g in by_game and g in table]
        if not gs:
            continue
        n = min(len(by_game[g]) for g in gs)
        if any(len(by_game[g]) > n for g in gs):
            notes.append(f"{label}: games have unequal seed counts; aggregates use the first {n} seed(s) of each game")
        mats[label] = np.array([[normalized(by_game[g][s], table) for s in sorted(by_game[g])[:n]] for g in gs]).T
    if not mats:
        return rows, notes
    point, ci = bootstrap_ci(mats, aggregate, reps, seed)
    for label, m in mats.items():
        rows[label] = {"point": point[label], "lo": ci[label][0], "hi": ci[label][1],
                       "games": m.shape[1], "runs": m.size, "per_game": m.shape[0]}
    return rows, notes


def per_seed(data, games, value) -> dict:
    """(game, label) -> {seed: value(run)} over the runs whose value is finite; a (game, label) without one is
    absent."""
    out = {}
    for game in games:
        for lb, by_game in data.items():
            vals = {seed: value(r) for seed, r in sorted(by_game.get(game, {}).items())}
            vals = {seed: float(v) for seed, v in vals.items() if np.isfinite(v)}
            if vals:
                out[(game, lb)] = vals
    return out


def per_game_scores(data, games) -> dict:
    """(game, label) -> {seed: the run's mean evaluation return}."""
    return per_seed(data, games, lambda r: r.score)


def per_game_normalized(data, games, table) -> dict:
    """(game, label) -> {seed: the run's HNS} (raw evaluation return outside Atari)."""
    return per_seed(data, games, lambda r: normalized(r, table))


def final_training_return(run: Run, last: int) -> float:
    """Mean of the run's last `last` logged games (`charts/episodic_return`, in step order): the end-of-training
    metric of CleanRL's published results (openrlbenchmark averages the last 100 per run). NaN without games."""
    if RETURN_TAG not in run.scalars or not len(run.scalars[RETURN_TAG][1]):
        return float("nan")
    return float(np.mean(run.scalars[RETURN_TAG][1][-last:]))


def final_training_returns(data, games, last) -> dict:
    """(game, label) -> {seed: final_training_return} over the runs with games logged."""
    return per_seed(data, games, lambda r: final_training_return(r, last))


def run_curve(run: Run):
    """(steps, returns, total steps) of the run's training games, or None without any."""
    if RETURN_TAG not in run.scalars:
        return None
    steps, values = run.scalars[RETURN_TAG]
    return steps, values, run.total_steps or (steps.max() if len(steps) else 0)


def early_late(data, games) -> tuple[dict, dict, dict]:
    """(game, label) -> {seed: value} for the first-10% mean return, the last-10% return variance and the whole
    run's curve area (curve_area), over the runs whose curve has points in that window."""
    def of(stat):
        return lambda r: stat(*run_curve(r)) if run_curve(r) is not None else float("nan")
    return tuple(per_seed(data, games, of(f)) for f in (early_mean, late_variance, curve_area))


def size_tag(run: Run) -> str | None:
    """The batch-size tag the run logs (adapt/num_steps for PPO and PQN, adapt/batch_size for BTR), or None."""
    return next((t for t in SIZE_TAGS if t in run.scalars and len(run.scalars[t][0])), None)


def is_abs_run(run: Run) -> bool:
    """An ABS run: it adapts (--adapt, the scripts' default) with a window W (--window) and logs its batch size at
    every divergence measurement. The fixed-batch baselines (--no-adapt) and GNS (no window) are not."""
    return bool(run.args.get("adapt", True)) and "window" in run.args and size_tag(run) is not None


def burn_in(data, games) -> tuple[dict, list[str]]:
    """(game, label) -> {seed: (burn-in end step, share of the early window, L during burn-in, W)} for the ABS runs
    (is_abs_run), and notes. Burn-in: before the W-th divergence measurement (W = the run's --window), while L is
    still L_min; the share is burn_in_share's. A run whose logged L moved before its W-th measurement is noted."""
    out, notes = {}, []
    for game in games:
        for lb, by_game in data.items():
            for seed, r in sorted(by_game.get(game, {}).items()):
                if not is_abs_run(r):
                    continue
                tag, window = size_tag(r), int(r.args["window"])
                steps, values = r.scalars[tag]
                order = np.argsort(steps, kind="stable")
                steps, values = steps[order], values[order]
                end, share = burn_in_share(steps, window, r.total_steps or steps.max())
                if len(set(values[:window - 1].tolist())) > 1:
                    notes.append(f"{lb}: {game} seed {seed}: {tag} moved before its W-th measurement (W = {window}), "
                                 "not a burn-in at one L")
                out.setdefault((game, lb), {})[seed] = (end, share, float(values[0]), window)
    return out, notes


def improvement_rates(data, games, table, pairs):
    """(a, b) -> {"paper": {game: rate}, "robust": {game: rate}, "excluded": [(game, why)]} for each compared
    pair: the paper's form on per-game mean HNS (raw return outside Atari), the robust form on mean raw scores."""
    def mean_of(lb, g, norm=True):
        return float(np.mean([normalized(r, table) if norm else r.score for r in data[lb][g].values()]))
    out = {}
    for a, b in pairs:
        paper, robust, excluded = {}, {}, []
        for g in games:
            missing = [lb for lb in (a, b) if g not in data[lb]]
            if missing:
                excluded.append((g, f"no finished run of {missing[0]}" if len(missing) < 2 else
                                 "no run of either label"))
                continue
            paper[g] = improvement_rate(mean_of(a, g), mean_of(b, g))
            s = table.get(g)
            robust[g] = robust_improvement(mean_of(a, g, False), mean_of(b, g, False),
                                           s and s["random"], s and s["human"])
            if not np.isfinite(paper[g]):
                excluded.append((g, f"s_{b} = 0: the paper's form is undefined (kept in the robust form)"))
            if not np.isfinite(robust[g]):
                excluded.append((g, "both scores 0: the robust form is undefined"))
        out[(a, b)] = {"paper": paper, "robust": robust, "excluded": excluded}
    return out


def pairwise_lines(values: dict, pairs, games, what: str, pick=max) -> list[str]:
    """One line per compared pair: in how many of the games both ran a beats b (ties are no win)."""
    if not pairs:
        return ["- no comparison with runs of both its labels"]
    lines = []
    for a, b in pairs:
        wins, n = pairwise_wins(values, a, b, games, pick)
        lines.append(f"- {a} vs {b}: **{a} {what} in {wins} of {n} games**" if n else
                     f"- {a} vs {b}: no game has a value for both")
    return lines


def best_count_line(best: dict, labels, complete, what: str) -> str:
    """The paper's "ABS best in 8 of 10 games" line, for the first (reference) label; ties count for all."""
    if not complete:
        return f"No game has data for every label: no \"{what}\" count."
    counts = {lb: sum(lb in best[g] for g in complete) for lb in labels}
    head = f"**{labels[0]} {what} in {counts[labels[0]]} of {len(complete)} games**"
    rest = ", ".join(f"{lb} {counts[lb]}" for lb in labels[1:])
    return (f"{head} (games every label ran; rows with a missing label are not counted; ties count for each)"
            + (f"; others: {rest}." if rest else "."))


# ----------------------------------------------------------------------------- figures
def write_csv(path: Path, header, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])


def save(fig, out: Path, name: str, header, rows) -> str:
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=100)
    plt.close(fig)
    write_csv(out / f"{name}.csv", header, rows)
    return f"`{name}.png` (data: `{name}.csv`)"


def grid(n: int, title: str, w=4.5, h=3.4):
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows + 0.4), squeeze=False)
    fig.suptitle(title)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def curve_rows(runs: list[Run], tag: str, bins: int):
    """Binned across-run band of one tag: (step, mean, min, max, n) arrays, empty bins removed."""
    series = [r.scalars[tag] for r in runs if tag in r.scalars]
    if not series:
        return None
    edges = np.linspace(0, max(max(r.total_steps for r in runs), max(s.max() for s, _ in series)), bins + 1)
    mean, lo, hi, n = band([binned(s, v, edges) for s, v in series])
    keep = n > 0
    return (0.5 * (edges[1:] + edges[:-1]))[keep], mean[keep], lo[keep], hi[keep], n[keep]


def legend_or_note(ax, note: str):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes)


def plot_band(ax, label, color, c):
    step, mean, lo, hi, _ = c
    # Markers when a curve has few points: a single measurement would otherwise draw nothing.
    ax.plot(step, mean, label=label, color=color, marker="o" if len(step) < 10 else None, markersize=4)
    ax.fill_between(step, lo, hi, alpha=0.25, color=color)


def learning_curves_figure(data, games, out, bins):
    games = [g for g in games if any(g in d for d in data.values())]
    fig, axes = grid(len(games), "Learning curves: mean over seeds, shaded min–max")
    rows = []
    for ax, game in zip(axes, games):
        for i, (lb, by_game) in enumerate(data.items()):  # one colour per label in every panel
            c = curve_rows(list(by_game.get(game, {}).values()), RETURN_TAG, bins)
            if c is not None:
                plot_band(ax, lb, f"C{i}", c)
                rows += [[game, lb, *map(float, x[:4]), int(x[4])] for x in zip(*c)]
        ax.set(title=game, xlabel="environment steps", ylabel="training episodic return")
        legend_or_note(ax, f"no {RETURN_TAG} events")
    return save(fig, out, "learning_curves", ["game", "label", "step", "mean", "min", "max", "n_runs"], rows)


def adapt_figure(data, out, bins):
    panels = [tag for tag in (*DIVERGENCE_TAGS, *SIZE_TAGS)
              if any(tag in r.scalars for d in data.values() for g in d.values() for r in g.values())]
    if not panels:
        return None
    fig, axes = grid(len(panels), "Batch-size controller: mean over games and seeds, shaded min–max")
    rows = []
    for ax, tag in zip(axes, panels):
        for i, (lb, by_game) in enumerate(data.items()):
            c = curve_rows([r for g in by_game.values() for r in g.values()], tag, bins)
            if c is not None:
                plot_band(ax, lb, f"C{i}", c)
                rows += [[tag, lb, *map(float, x[:4]), int(x[4])] for x in zip(*c)]
        ax.set(title=tag, xlabel="environment steps", ylabel=UNITS[tag])
        legend_or_note(ax, f"no {tag} events")
    return save(fig, out, "adapt", ["tag", "label", "step", "mean", "min", "max", "n_runs"], rows)


ADAPT_BY_GAME_MAX = 6  # games: past this a panel per game is unreadable (Atari: 57), adapt.png alone is drawn


def divergence_tag(run: Run) -> str | None:
    """The divergence the run's schedule used, among the tags it logged (read_run keeps only that one)."""
    return next((t for t in DIVERGENCE_TAGS if t in run.scalars and len(run.scalars[t][0])), None)


def adapt_by_game_figure(data, games, out, bins):
    """The schedule's path per game, which adapt.png averages over games: for each ABS label (is_abs_run), its
    divergence δ (top row) and its batch size (bottom row), mean over seeds, shaded min–max. None with more than
    ADAPT_BY_GAME_MAX games or no ABS run."""
    abs_runs = {lb: {g: [r for r in by_game.get(g, {}).values() if is_abs_run(r)] for g in games}
                for lb, by_game in data.items()}
    games = [g for g in games if any(by_game[g] for by_game in abs_runs.values())]
    if not games or len(games) > ADAPT_BY_GAME_MAX:
        return None
    fig, axes = plt.subplots(2, len(games), figsize=(4.5 * len(games), 6.8 + 0.4), squeeze=False)
    fig.suptitle("Batch-size controller per game: mean over seeds, shaded min–max")
    rows = []
    for col, game in enumerate(games):
        for row, (what, tag_of) in enumerate((("divergence", divergence_tag), ("batch size", size_tag))):
            ax, units = axes[row][col], set()
            for i, lb in enumerate(data):  # the colours of the other figures: one per label, in label order
                runs = abs_runs[lb][game]
                for tag in sorted({tag_of(r) for r in runs} - {None}):
                    c = curve_rows([r for r in runs if tag_of(r) == tag], tag, bins)
                    if c is not None:
                        plot_band(ax, lb, f"C{i}", c)
                        units.add(UNITS[tag])
                        rows += [[game, tag, lb, *map(float, x[:4]), int(x[4])] for x in zip(*c)]
            ax.set(title=f"{game}: {what}", xlabel="environment steps",
                   ylabel=units.pop() if len(units) == 1 else what)
            legend_or_note(ax, f"no {what} events")
    return save(fig, out, "adapt_by_game", ["game", "tag", "label", "step", "mean", "min", "max", "n_runs"], rows)


def improvement_figure(rates, out):
    """Bars of the paper's improvement rate per game, its mean and its median, one colour per compared pair."""
    games = sorted({g for r in rates.values() for g in r["paper"]}) + ["mean", "median"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(games) * len(rates)), 4))
    width, rows = 0.8 / len(rates), []
    for i, ((a, b), r) in enumerate(rates.items()):
        p = r["paper"]
        vals = [100 * p.get(g, np.nan) for g in games[:-2]] + [100 * finite_mean(p.values()),
                                                               100 * finite_median(p.values())]
        ax.bar(np.arange(len(games)) + (i - (len(rates) - 1) / 2) * width, vals, width, label=f"{a} over {b}")
        rows += [[g, a, b, v] for g, v in zip(games, vals)]
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(games)), games, rotation=45, ha="right")
    ax.set(xlabel="game", ylabel="improvement rate (%)", title="Improvement rate (s_A - s_B) / |s_B|")
    ax.legend()
    return save(fig, out, "improvement_rate", ["game", "reference", "other", "improvement_rate_percent"], rows)


def aggregate_figure(agg, out):
    labels = list(agg)
    fig, axes = plt.subplots(1, 4, figsize=(16, 0.5 * len(labels) + 2))
    rows = []
    for k, (ax, name) in enumerate(zip(axes, AGGREGATES)):
        p = np.array([agg[lb]["point"][k] for lb in labels])
        lo = np.array([agg[lb]["lo"][k] for lb in labels])
        hi = np.array([agg[lb]["hi"][k] for lb in labels])
        ax.errorbar(p, np.arange(len(labels)), xerr=[np.maximum(p - lo, 0), np.maximum(hi - p, 0)],
                    fmt="o", capsize=4, label="95% CI")
        ax.set_yticks(np.arange(len(labels)), labels)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set(xlabel=f"{name} of human-normalised score", title=name)
        ax.legend(fontsize=8)
        rows += [[lb, name, p[i], lo[i], hi[i], agg[lb]["games"], agg[lb]["runs"]] for i, lb in enumerate(labels)]
    return save(fig, out, "aggregates", ["label", "metric", "point", "ci_low", "ci_high", "n_games", "n_runs"], rows)


# ----------------------------------------------------------------------------- report
def marked(text: str | None, is_best: bool) -> str:
    return "missing" if text is None else (f"**{text}**" if is_best else text)


def best_by(values: dict, games, labels, pick=max) -> dict:
    """game -> set of labels with the best value (pick=max or min) among the labels that ran it; ties
    count for every tied label."""
    best = {}
    for g in games:
        v = {lb: values[(g, lb)] for lb in labels if np.isfinite(values.get((g, lb), np.nan))}
        best[g] = {lb for lb, x in v.items() if x == pick(v.values())} if v else set()
    return best


def data_section(data, games, notes, roots) -> list[str]:
    rows = [[lb, f"`{roots[lb]}`", str(sum(len(s) for s in d.values())), f"{len(d)} of {len(games)}",
             ", ".join(f"{g}: {len(d[g])}" for g in games if g in d) or "–",
             ", ".join(g for g in games if g not in d) or "none"] for lb, d in data.items()]
    md = ["## Data", "", md_table(["label", "directory", "runs", "games", "seeds per game", "missing games"], rows), ""]
    md += [f"- Missing for {lb}: {', '.join(g for g in games if g not in d)}"
           for lb, d in data.items() if any(g not in d for g in games)]
    return md + [f"- {n}" for n in notes] + [""] + damaged_section(data, games)


def runs_of(data, games):
    return [r for g in games for d in data.values() for r in d.get(g, {}).values()]


def damaged_section(data, games) -> list[str]:
    """The runs whose event files are damaged or incomplete (check_events), with what was left out."""
    runs = runs_of(data, games)
    problems = [p for r in runs for p in r.event_problems]
    notes = [n for r in runs for n in r.event_notes]
    if not problems and not notes:
        return []
    md = ["### Damaged or incomplete event files", ""]
    if problems:
        md += ["TensorBoard reads an event file only up to its first record that is cut short or fails its CRC "
               "check, and says nothing: the curve of such a run, or of one whose events end before the run did, "
               "would look like a shorter run. These runs' training-curve numbers (final training return, early "
               "return, late variance, burn-in, learning curves and the adapt figure) are left out; their "
               "evaluation return (eval_results.json) is kept.", "", *[f"- {p}" for p in problems], ""]
    if notes:
        md += ["Damaged, but nothing read from them is missing (kept):", "", *[f"- {n}" for n in notes], ""]
    return md


def left_out_line(data, games) -> list[str]:
    """One line naming the runs whose training-curve numbers are left out (damaged_section), or nothing."""
    runs = [r for r in runs_of(data, games) if r.event_problems]
    if not runs:
        return []
    return ["Left out (event files damaged or incomplete, see \"Damaged or incomplete event files\"): "
            + ", ".join(f"{r.label} {r.game} seed {r.seed}" for r in runs) + ".", ""]


def aggregate_section(agg, agg_notes, games, table) -> list[str]:
    md = ["## Aggregate human-normalised score", ""]
    if not agg:
        return md + ["No Atari games: raw returns of different environments share no scale, so no aggregate is "
                     "computed; see the per-game table.", ""]
    md.append(md_table(["label", *(f"{a} [95% CI]" for a in AGGREGATES), "games", "runs"],
                       [[lb, *(f"{fmt(r['point'][k])} [{fmt(r['lo'][k])}, {fmt(r['hi'][k])}]" for k in range(4)),
                         str(r["games"]), str(r["runs"])] for lb, r in agg.items()]))
    md += ["", "The stratified bootstrap (rliable, the paper's metric) keeps the games fixed, resamples the runs "
           "within each game and recomputes the aggregate over the games; what each label's interval rests on:"]
    md += [f"- {lb}: {r['games']} game{'s' if r['games'] != 1 else ''} × {r['per_game']} run"
           f"{'s' if r['per_game'] != 1 else ''} per game ({r['runs']} runs)" for lb, r in agg.items()]
    for k in sorted({r["per_game"] for r in agg.values() if r["per_game"] <= 3}):
        md.append("- With 1 run per game every resample is the same runs: the interval is the point alone." if k == 1
                  else f"- With {k} runs per game, one game's own bootstrap interval is exactly [its lowest seed, its "
                  f"highest seed]: a resample of {k} copies of one seed has probability 1/{k ** k} > 2.5%. The "
                  "per-game tables below therefore give Student-t intervals.")
    md += [f"- {n}" for n in agg_notes]
    if len({r["games"] for r in agg.values()}) > 1:
        md.append("- Labels rest on different game sets (see missing games); compare with care.")
    if any(g not in table for g in games):
        md.append("- Non-Atari environments are left out of these aggregates (raw returns share no scale).")
    return md + [""]


PER_SEED_HOW = ("per seed (seed: value), their mean and a Student-t 95% CI of the mean, mean ± t_{0.975, n-1} · "
                "s / √n (s: the sample standard deviation over the seeds; none at n = 1)")


def seeds_text(vals: dict) -> str:
    return ", ".join(f"{seed}: {fmt(v)}" for seed, v in vals.items())


def t_text(vals: dict) -> str:
    if len(vals) < 2:
        return "n = 1, no interval"
    _, lo, hi = t_interval(list(vals.values()))
    return f"[{fmt(lo)}, {fmt(hi)}]"


def seed_table(values, games, labels, best, data=None, std=False, iqm_column=False) -> str:
    """One row per game and label: per-seed values, mean (bold: best), Student-t 95% CI, n; optionally the
    population std over seeds and the IQM over seeds (= mean where it trims nothing)."""
    rows = []
    for g in games:
        for lb in labels:
            vals = values.get((g, lb))
            if vals is None:
                missing = "no data" if data is not None and g in data[lb] else "missing"
                rows.append([g, lb, missing, "–", "–", *(["–"] if std else []), *(["–"] if iqm_column else []),
                             "0"])
                continue
            x = list(vals.values())
            extra = [fmt(float(np.std(x)))] if std else []
            if iqm_column:  # bold goes to the IQM (best: by the IQM)
                extra.append(marked(fmt(iqm(x)) if len(x) >= IQM_TRIMS_FROM else f"{fmt(float(np.mean(x)))} (= mean)",
                                    lb in best[g]))
            rows.append([g, lb, seeds_text(vals), marked(fmt(float(np.mean(x))), lb in best[g] and not iqm_column),
                         t_text(vals), *extra, str(len(x))])
    header = ["game", "label", "per seed (seed: value)", "mean", "Student-t 95% CI",
              *(["population std"] if std else []), *(["IQM over seeds"] if iqm_column else []), "n"]
    return md_table(header, rows)


def differences(values, pairs, games) -> list[str]:
    """For each compared pair A vs B and game both have values for: A - B (difference of means), Welch's 95% CI,
    the exact permutation p, and a plain statement for every run count too small for p < 0.05."""
    rows, counts = [], {}
    for a, b in pairs:
        for g in games:
            if (g, a) not in values or (g, b) not in values:
                continue
            xa, xb = list(values[(g, a)].values()), list(values[(g, b)].values())
            diff, lo, hi, df = welch_interval(xa, xb)
            if len(xa) < 2 or len(xb) < 2:
                ci = f"n = {min(len(xa), len(xb))}, no interval"
            elif not np.isfinite(df):
                ci = "no spread, no interval"
            else:
                ci = f"[{fmt(lo)}, {fmt(hi)}]"
            p, n, exact = permutation_p(xa, xb)
            rows.append([g, f"{a} − {b}", fmt(diff), ci, f"{df:.2f}" if np.isfinite(df) else "–",
                         fmt_p(p) + ("" if exact else " (sampled)"),
                         f"{n:,}" + ("" if exact else f" of {comb(len(xa) + len(xb), len(xa)):,}"),
                         f"{len(xa)} vs {len(xb)}"])
            counts.setdefault((a, b), {}).setdefault((len(xa), len(xb)), []).append(g)
    if not rows:
        return ["Differences: no game has runs of both labels of a compared pair.", ""]
    md = ["Differences, A − B, per compared pair and game: the difference of the means over seeds; Welch's 95% CI "
          "(Welch–Satterthwaite df); the exact two-sided permutation p over every split of the runs into groups of "
          "their sizes, C(n_A + n_B, n_A) relabellings (statistic: the difference of means; p = the share of "
          "relabellings whose |difference| is at least the observed one).", "",
          md_table(["game", "A − B", "difference of means", "Welch 95% CI", "Welch df", "permutation p",
                    "relabellings", "runs"], rows), ""]
    for (a, b), by_n in counts.items():
        for (na, nb), gs in by_n.items():
            md.append(f"- {a} vs {b} ({', '.join(gs)}): {min_p_statement(na, nb)}.")
    return md + [""]


def per_game_section(values, games, labels, complete, pairs, title, what, data=None, std=False, word="higher",
                     pick=max, left_out=()) -> list[str]:
    """A per-game table of per-seed values ((game, label) -> {seed: value}), the best-of-all and pairwise counts of
    the means, and the differences of each compared pair; left_out: lines on the runs left out of it."""
    means = {k: float(np.mean(list(v.values()))) for k, v in values.items()}
    best = best_by(means, games, labels, pick)
    return [f"## {title}", "", f"{what}: {PER_SEED_HOW}; {'lowest' if pick is min else 'best'} mean in bold.", "",
            *left_out, seed_table(values, games, labels, best, data, std), "",
            best_count_line(best, labels, complete, "best" if word == "higher" else word), "",
            "Pairwise counts of the means (games both labels ran; a tie is no win), with no regard to the seed "
            "spread (see the differences below):",
            *pairwise_lines(means, pairs, games, word, pick), "", *differences(values, pairs, games)]


def per_game_iqm_section(values, games, labels, complete, pairs, atari: bool) -> list[str]:
    """The paper's per-game table, the IQM over seeds (of HNS on Atari, of the raw return elsewhere). The IQM of
    fewer than 4 values trims nothing: where every cell has n <= 3 it is the mean, so outside Atari (where it would
    repeat the evaluation table) the table is left out, and on Atari it is shown as the mean HNS."""
    title = "Per-game human-normalised score" if atari else "Per-game IQM of evaluation return"
    small = all(len(v) < IQM_TRIMS_FROM for v in values.values())
    trims = (f"The IQM (the 25% trimmed mean) of n values drops int(n / 4) from each end: with n <= "
             f"{IQM_TRIMS_FROM - 1} it drops nothing and equals the mean.")
    if small and not atari:
        return [f"## {title}", "", f"Not shown. {trims} Every label has at most {IQM_TRIMS_FROM - 1} runs of each "
                "game here, so the IQM over seeds of the evaluation return is the mean in \"Per-game evaluation "
                "return\" above.", ""]
    points = {k: (float(np.mean(list(v.values()))) if len(v) < IQM_TRIMS_FROM else iqm(list(v.values())))
              for k, v in values.items()}
    best = best_by(points, games, labels)
    unit = "human-normalised score (HNS)" if atari else "mean evaluation return (raw)"
    if small:
        what = (f"Each run's {unit}: {PER_SEED_HOW}; best mean in bold. The paper's per-game table gives the IQM "
                f"over seeds. {trims} With at most {IQM_TRIMS_FROM - 1} runs of each game here the IQM is this mean.")
    else:
        what = (f"Each run's {unit}: {PER_SEED_HOW}, and the IQM over seeds (the paper's per-game table); best IQM "
                f"in bold. {trims} Cells with n <= {IQM_TRIMS_FROM - 1} show the mean, marked \"(= mean)\".")
    md = [f"## {title}", "", what, "", seed_table(values, games, labels, best, iqm_column=not small), "",
        best_count_line(best, labels, complete, "best"), "",
        f"Pairwise counts of the {'means' if small else 'IQMs'} (games both labels ran; a tie is no win):",
        *pairwise_lines(points, pairs, games, "higher"), ""]
    if atari:
        md += ["Differences: as in \"Per-game evaluation return\" (per game HNS is an affine map of the return, so "
               "the permutation p-values are the same and the intervals scale).", ""]
    return md


def burn_in_lines(burn, data, labels, pairs) -> list[str]:
    """The share of the early window each ABS label's runs spent in burn-in at L_min, per run and on average."""
    if not burn:
        return []
    rows = []
    for (g, lb), by_seed in burn.items():
        shares = [v[1] for v in by_seed.values()]
        rows.append([g, lb, ", ".join(f"{x:g}" for x in sorted({v[2] for v in by_seed.values()})),
                     ", ".join(str(w) for w in sorted({v[3] for v in by_seed.values()})),
                     ", ".join(f"{seed}: {f'{v[0]:,.0f}' if np.isfinite(v[0]) else 'never'}"
                               for seed, v in by_seed.items()),
                     ", ".join(f"{seed}: {100 * v[1]:.1f}%" for seed, v in by_seed.items()),
                     f"{100 * np.mean(shares):.1f}%", str(len(shares))])
    md = ["### Burn-in in the early window", "",
          "An ABS run holds L at L_min until its W-th divergence measurement (W = its --window; the first "
          "measurement that moves L), read from its adapt/* events (one per measurement, at the step it was "
          "logged). Share: the part of the early window (the first 10% of the run's steps) before that step.", "",
          md_table(["game", "label", "L in burn-in", "W", "burn-in ends at step (seed: step)",
                    "share of the early window in burn-in (seed: share)", "mean share", "n"], rows), ""]
    for lb in labels:
        entries = [v for (g, label), by_seed in burn.items() if label == lb for v in by_seed.values()]
        if not entries:
            continue
        shares = [v[1] for v in entries]
        lmin = ", ".join(f"{x:g}" for x in sorted({v[2] for v in entries}))
        baselines = []
        for a, b in pairs:
            fixed = sorted({r.args.get("num_steps") for d in data[b].values() for r in d.values()
                            if r.args.get("adapt") is False and r.args.get("num_steps") is not None})
            if a == lb and len(fixed) == 1:
                baselines.append(f"{b}: fixed L = {fixed[0]}")
        md.append(f"- {lb}: on average {100 * np.mean(shares):.1f}% of the early window (runs: "
                  f"{100 * min(shares):.1f}-{100 * max(shares):.1f}%) is burn-in at L = {lmin}, before its first "
                  f"adaptation: its early return is mostly that of a fixed L = {lmin}"
                  + (f" ({'; '.join(baselines)})" if baselines else "") + ", not of the ABS schedule.")
    return md + [""]


def early_late_section(early, late, area, data, games, labels, pairs, burn=None, burn_notes=()) -> list[str]:
    def complete(values):
        return [g for g in games if all((g, lb) in values for lb in labels)]
    md = ["## Early / late training", "",
          f"From `{RETURN_TAG}`, per run: early = its mean episodic return over the first 10% of training steps; "
          "late = the variance of its episodic return over the last 10% (population variance, at least two games "
          "there); whole run = the area under its learning curve per step, the mean over the ten tenths of its "
          "steps of its mean episodic return in each tenth (sample efficiency: every phase of training weighs the "
          "same). n = the runs with games in that window.", "", *left_out_line(data, games)]
    for name, values, word, pick, what in (
            ("Early return", early, "higher early", max, "early return"),
            ("Late variance", late, "lower late variance", min, "late variance"),
            ("Whole-run return", area, "higher whole-run return", max, "whole-run return (learning curve area)")):
        what = "Each run's " + what
        means = {k: float(np.mean(list(v.values()))) for k, v in values.items()}
        best = best_by(means, games, labels, pick)
        md += [f"### {name}", "", f"{what}: {PER_SEED_HOW}; {'highest' if pick is max else 'lowest'} mean in bold.",
               "",
               seed_table(values, games, labels, best, data), "",
               best_count_line(best, labels, complete(values), word), "",
               "Pairwise counts of the means (games both labels have data for; a tie is no win), with no regard to "
               "the seed spread (see the differences below):",
               *pairwise_lines(means, pairs, games, word, pick), "", *differences(values, pairs, games)]
    md += burn_in_lines(burn or {}, data, labels, pairs)
    return md + ([f"- {n}" for n in burn_notes] + [""] if burn_notes else [])


def improvement_section(rates, games, ref, skipped=None) -> list[str]:
    same = {a for a, _ in rates} == {ref}
    ref_name = ref if same else "A"
    md = [f"## Improvement rate{f' of {ref}' if same else ''}", "",
          f"Improvement rate of {ref_name} over a label X on a game (the paper's Figure 3 and 5 quantity): "
          f"(s_{ref_name} - s_X) / |s_X|, where s is the mean over seeds of the human-normalised score (Atari) or "
          "of the raw evaluation return (other environments); shown in %. It blows up when s_X is near 0 and is "
          "undefined at 0, so the robust form below is given too. Mean and median are over the games both labels "
          "ran and the form is defined on.", ""]
    skipped_lines = [f"- {a} over {b}: {why}" for (a, b), why in (skipped or {}).items()]
    if skipped_lines:
        md += ["Comparisons skipped:", *skipped_lines, ""]
    if not rates:
        return md + ([] if skipped_lines else ["Needs a second label.", ""])

    def table(form):
        rows = [[g, *(fmt_pct(100 * r[form].get(g, np.nan)) for r in rates.values())]
                for g in games if any(g in r[form] for r in rates.values())]
        for name, f in (("mean", finite_mean), ("median", finite_median)):
            rows.append([f"**{name}**", *(f"**{fmt_pct(100 * f(r[form].values()))}** "
                                          f"({int(np.isfinite(list(r[form].values())).sum())} games)"
                                          for r in rates.values())])
        return md_table(["game", *(f"{a} over {b}" for a, b in rates)], rows)
    md += [table("paper"), "", "### Robust improvement", "",
           "(a - b) / (max(human, b) - random) on the mean raw scores a, b of the two labels (Wang et al. 2016): "
           "the denominator is at least human - random, so a baseline near the random score cannot inflate it. "
           "Outside Atari there is no human or random score: (a - b) / max(|a|, |b|), bounded in [-200%, 200%].",
           "", table("robust"), ""]
    excluded = [f"- {a} over {b}: {g} ({why})" for (a, b), r in rates.items() for g, why in r["excluded"]]
    return md + (["Games left out:", *excluded, ""] if excluded else ["No game left out.", ""])


def figures_section(data, games, agg, rates, out, bins) -> list[str]:
    figures = [learning_curves_figure(data, games, out, bins)]
    adapt = adapt_figure(data, out, bins)
    figures.append(adapt or "no adapt/* tags in any run: no adapt figure")
    no_adapt = [lb for lb, d in data.items() if d and not any(
        t in r.scalars for g in d.values() for r in g.values() for t in (*DIVERGENCE_TAGS, *SIZE_TAGS))]
    if adapt and no_adapt:
        figures.append(f"no adapt/* tags for {', '.join(no_adapt)} (fixed batch): not in `adapt.png`")
    by_game = adapt_by_game_figure(data, games, out, bins)
    if by_game:
        figures.append(by_game + ": the ABS runs' divergence and batch size, one column per game")
    if rates:
        figures.append(improvement_figure(rates, out))
    if agg:
        figures.append(aggregate_figure(agg, out))
    left = [r for r in runs_of(data, games) if r.event_problems]
    if left:
        figures.append("not in the learning curves or the adapt figure (event files damaged or incomplete): "
                       + ", ".join(f"{r.label} {r.game} seed {r.seed}" for r in left))
    return ["## Figures", ""] + [f"- {f}" for f in figures] + [""]


def write_report(data, games, notes, args, table) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ref = args.reference or next(iter(data))
    data = {ref: data[ref], **{lb: d for lb, d in data.items() if lb != ref}}  # reference label first
    labels = list(data)
    complete = [g for g in games if all(g in d for d in data.values())]
    skipped = {tuple(p): "no finished run of " + " or ".join(lb for lb in p if lb not in data)
               for p in args.skip_compare}
    # Skipped pairs mean the comparisons were chosen: never fall back to the reference against every other label.
    pairs = [tuple(p) for p in args.compare] or ([] if skipped else [(ref, lb) for lb in labels if lb != ref])
    notes = notes + [f"comparison {a} vs {b} skipped: {why}" for (a, b), why in skipped.items()]
    agg, agg_notes = aggregate_table(data, games, table, args.reps, args.seed)
    rates = improvement_rates(data, games, table, pairs)
    md = ["# Report", "", f"Generated by `reproduce/report.py` from {len(labels)} label(s); benchmark: "
          f"{args.benchmark or 'the games found'} ({len(games)} games). Aggregates across games: 95% stratified-"
          f"bootstrap CIs (`rliable`, {args.reps} reps). Per game (a few runs of one game): the per-seed values, "
          "their mean and a Student-t 95% CI; for each compared pair, the difference of means with Welch's 95% CI "
          "and an exact permutation p. *n* = runs a number rests on.", ""]
    md += data_section(data, games, notes, args.runs)
    md += aggregate_section(agg, agg_notes, games, table)
    md += per_game_section(per_game_scores(data, games), games, labels, complete, pairs,
                           "Per-game evaluation return", "Each run's mean evaluation return (raw game score)")
    atari = any(g in table for g in games)
    md += per_game_iqm_section(per_game_normalized(data, games, table), games, labels, complete, pairs, atari)
    md += per_game_section(final_training_returns(data, games, args.last_games), games, labels, complete, pairs,
                           "Final training return",
                           f"Each run's mean of its last {args.last_games} games (`{RETURN_TAG}`, the training metric "
                           "of CleanRL's published results, read by openrlbenchmark, whose spread is the population "
                           "std over seeds, also given)", data=data, std=True, left_out=left_out_line(data, games))
    md += early_late_section(*early_late(data, games), data, games, labels, pairs, *burn_in(data, games))
    md += improvement_section(rates, games, ref, skipped)
    md += figures_section(data, games, agg, rates, out, args.bins)
    (out / "report.md").write_text("\n".join(md))
    return out / "report.md"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, metavar="LABEL=DIR",
                   help="labelled directories searched recursively for eval_results.json")
    p.add_argument("--out", default="report", help="output directory (report.md, PNG + CSV figures)")
    p.add_argument("--benchmark", choices=BENCHMARKS, help="restrict to and check against this game set")
    p.add_argument("--reference", help="label the others are compared with (default: the first)")
    p.add_argument("--compare", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="compare label A against label B (repeatable; default: the reference against each other)")
    p.add_argument("--skip-compare", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="a chosen comparison whose label A or B has no finished run: listed as skipped "
                   "(repeatable); with it, no comparison other than --compare is made")
    p.add_argument("--total-timesteps", type=int, metavar="N",
                   help="report only the runs of N total timesteps; runs of other lengths are listed as left out")
    p.add_argument("--allow-mixed-timesteps", action="store_true",
                   help="pool runs of one label that have different total_timesteps (refused by default)")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap replications")
    p.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    p.add_argument("--bins", type=int, default=50, help="step bins of the curves")
    p.add_argument("--last-games", type=int, default=100,
                   help="final training return: mean of each run's last N logged games (CleanRL's metric: 100)")
    args = p.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, _, d = item.partition("=") if "=" in item else (Path(item).name, "", item)
        if not label or label in runs:
            p.error(f"--runs: empty or repeated label in {item!r}")
        if not Path(d).is_dir():
            p.error(f"--runs: {d!r} is not a directory")
        runs[label] = Path(d)
    if args.reference is not None and args.reference not in runs:
        p.error(f"--reference: {args.reference!r} is not one of the labels {list(runs)}")
    for pair in args.compare:
        if any(lb not in runs for lb in pair):
            p.error(f"--compare: {' '.join(pair)!r} names a label that is not one of {list(runs)}")
    for pair in args.skip_compare:
        if all(lb in runs for lb in pair):
            p.error(f"--skip-compare: both {' and '.join(pair)} have runs (use --compare)")
    if args.reps < 1 or args.bins < 1 or args.last_games < 1:
        p.error("--reps, --bins and --last-games must be positive")
    args.runs = runs
    return args


def out_problem(out: Path) -> str | None:
    """Why --out cannot be the report's directory (it is a file, lies below a file, or cannot be written), or None.
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


def main(argv=None) -> int:
    args = parse_args(argv)
    problem = out_problem(Path(args.out))
    if problem:
        print(f"report.py: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    table = load_atari_scores()
    try:
        data, games, notes = collect(args.runs, args.benchmark, table, args.allow_mixed_timesteps,
                                     args.total_timesteps)
    except MixedLengths as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 2
    if not any(data.values()):
        length = f" of {args.total_timesteps:,} steps" if args.total_timesteps is not None else ""
        print(f"report.py: no finished runs{length} (eval_results.json) found under "
              + ", ".join(map(str, args.runs.values())) + ("\n" + "\n".join(notes) if notes else ""), file=sys.stderr)
        return 1
    try:
        path = write_report(data, games, notes, args, table)
    except OSError as e:  # e.g. a disk that is full, or permissions os.access did not tell
        print(f"report.py: --out {args.out}: cannot write the report ({type(e).__name__}: {e.strerror or e}"
              + (f": {e.filename}" if e.filename else "") + ")", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
