"""What the results pages' text quotes beyond the report's tables, measured with the report's other numbers
(report.measure) and written with them to report.json (report_data.py): the page tools (mujoco_page.py,
early_page.py) only format these numbers. Statistics are stats.py's; this file reads no file.

- a pre-registered analysis's evaluation returns per task (evaluation_split): the seeds' spread, the interval as a
  share of the baseline's mean, what the seeds that ran before the plan was fixed gave alone (Welch, the exact
  permutation p, Hedges' g) and what the later ones gave, the pairs of runs in which A is the higher, and a task
  whose returns fall into two groups (TWO_GROUPS) counted on each side of its threshold;
- the schedule per game of the ABS runs (schedule): the divergence's peak bin and highest single measurement, and L
  before and after that peak, from the figures' binned curves (figure_data.by_game) and the runs' events;
- every label's divergence over the games by tenth of the steps (divergence_tenths), from the curve of the mean over
  games (figure_data.divergence); the runs whose first divergence measurement is their highest (first_highest); the
  range of an ABS run's delta_bar after its burn-in and how many of its measurements could move L (after_burn_in);
  the highest L of any bin of the figures (highest_size);
- per compared pair, the early return's count of games with a coin's chance of as many (early_count), the range of
  the early HNS and the game of the largest early HNS difference (early_hns);
- the training time of all runs together (machine_total).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .measures import divergence_tag, runs_of
from .runs import SIZE_TAGS
from .stats import Compared, hedges_g, permutation_p, sign_p, welch_interval

# A task whose evaluation returns fall into two groups, and the return between them: HalfCheetah's runs that find the
# fast gait end above 4000, the others near 2000 (docs/results-mujoco-5m.md).
TWO_GROUPS = {"HalfCheetah": 4000.0}


def arms(pair: tuple, values) -> dict:
    """{label: value} of the two arms of `pair`, in its order."""
    return dict(zip(pair, values))


def extent(values) -> dict:
    return {"lowest": min(values), "highest": max(values)}


class Alone(NamedTuple):
    """A - B over some of the seeds only."""
    seeds: tuple
    diff: float  # the difference of the means
    lo: float  # Welch's 95% interval
    hi: float
    p: float  # the exact permutation p
    g: float  # Hedges' g
    higher: int  # the pairs of equal seeds in which A's run is the higher


class Groups(NamedTuple):
    """The runs of each arm on either side of a task's threshold (TWO_GROUPS)."""
    threshold: float
    above: dict  # label -> its runs above it
    rest: dict  # label -> the lowest and highest of its other runs
    median: dict  # label -> the median of its runs


class Split(NamedTuple):
    """One task's evaluation returns, A against B, beyond the report's table."""
    std: dict  # label -> the seeds' standard deviation (ddof 1)
    share: dict  # Welch's 95% interval of A - B over all seeds, in % of B's mean: "lo", "hi"
    before: Alone  # the seeds that ran before the plan was fixed
    after: Alone  # the seeds that ran after it
    above: int  # the pairs of one run from each arm in which A's is the higher
    pairs: int  # every such pair
    late_before: dict  # label -> the late variance's mean over the seeds before the plan
    groups: Groups | None  # a task of TWO_GROUPS


def alone(a: dict, b: dict, seeds) -> Alone:
    xa, xb = [a[s] for s in seeds], [b[s] for s in seeds]
    d, lo, hi, _ = welch_interval(xa, xb)
    return Alone(tuple(seeds), d, lo, hi, permutation_p(xa, xb)[0], hedges_g(xa, xb),
                 int(sum(x > y for x, y in zip(xa, xb))))


def evaluation_split(evaluation: Compared, late: Compared, pair: tuple, tasks, before: tuple) -> dict:
    """task -> Split of the tasks both arms of `pair` ran with the same seeds, `before` among them."""
    out = {}
    for task in tasks:
        cells = [evaluation.seeds.get((task, lb)) for lb in pair]
        if not all(cells) or list(cells[0].values) != list(cells[1].values) or not set(before) < set(cells[0].values):
            continue
        a, b = (c.values for c in cells)
        xa, xb = np.array(list(a.values())), np.array(list(b.values()))
        _, lo, hi, _ = welch_interval(xa, xb)
        after = [s for s in a if s not in before]
        lates = [late.seeds.get((task, lb)) for lb in pair]
        late_before = arms(pair, (float(np.mean([c.values[s] for s in before])) if c and set(before) <= set(c.values)
                                  else float("nan") for c in lates))
        threshold = TWO_GROUPS.get(task)
        groups = None
        if threshold is not None:
            rest = [x[x <= threshold] for x in (xa, xb)]
            groups = Groups(threshold, arms(pair, (int((x > threshold).sum()) for x in (xa, xb))),
                            arms(pair, (extent(r) if r.size else None for r in rest)),
                            arms(pair, (float(np.median(x)) for x in (xa, xb))))
        out[task] = Split(arms(pair, (float(xa.std(ddof=1)), float(xb.std(ddof=1)))),
                          {"lo": 100 * lo / xb.mean(), "hi": 100 * hi / xb.mean()}, alone(a, b, before),
                          alone(a, b, after),
                          int((xa[:, None] > xb[None, :]).sum()), xa.size * xb.size, late_before, groups)
    return out


class Schedule(NamedTuple):
    """One game's schedule over its ABS runs of one label: the figures' bins (step, mean, min, max, n) of the
    divergence and of L (figure_data.by_game), and the runs' own measurements."""
    runs: int  # the runs in the divergence's peak bin
    peak: dict  # the divergence's bin of the highest mean: "step", "mean", "highest" (its highest run)
    highest: dict  # the highest single measurement of any run: "value", "seed"
    high: float | None  # the runs' upper bound of the divergence (--kl-high), when they name one
    before: dict  # L's bin of the highest mean before the peak: "step", "mean"
    low: dict  # L's bin of the lowest mean from the peak on: "step", "mean", "lowest" (its lowest run)
    last: dict  # L's last bin: "mean", "lowest", "highest"


def schedule(by_game, data) -> dict:
    """game -> label -> Schedule, from figure_data's by_game columns (a divergence Panel and a batch-size Panel per
    game) and the runs' divergence events."""
    out = {}
    for divergence, size in by_game or []:
        game = divergence.title.split(": ")[0]
        for band in divergence.bands:
            sized = next((b for b in size.bands if b.label == band.label), None)
            if sized is None:
                continue
            kl, L = (np.array(b.curve, dtype=float).T for b in (band, sized))  # rows: (step, mean, min, max, n)
            peak = int(np.argmax(kl[:, 1]))
            before = int(np.argmax(L[:peak, 1])) if peak else 0
            low = peak + int(np.argmin(L[peak:, 1]))
            runs = [r for r in data[band.label].get(game, {}).values() if divergence_tag(r) == band.tag]
            if not runs:
                continue
            value, seed = max((float(np.max(r.scalars[band.tag][1])), r.seed) for r in runs)
            highs = {r.args.get("kl_high") for r in runs} if band.tag == "adapt/kl" else {None}
            out.setdefault(game, {})[band.label] = Schedule(
                int(kl[peak, 4]), {"step": kl[peak, 0], "mean": kl[peak, 1], "highest": kl[peak, 3]},
                {"value": value, "seed": seed}, highs.pop() if len(highs) == 1 else None,
                {"step": L[before, 0], "mean": L[before, 1]},
                {"step": L[low, 0], "mean": L[low, 1], "lowest": L[low, 2]},
                {"mean": L[-1, 1], "lowest": L[-1, 2], "highest": L[-1, 3]})
    return out


def machine_total(data, games) -> dict:
    """Every run of every label together: their count, the fewest and the most minutes one trained, the hours of
    all, and the runs with more than one event file (stopped and started again)."""
    runs = runs_of(data, games)
    minutes = [r.train_seconds / 60 for r in runs if r.train_seconds is not None]
    return {"runs": len(runs), "timed": len(minutes), "minutes": extent(minutes) if minutes else None,
            "hours": sum(minutes) / 60, "restarted": sum(r.event_file_count > 1 for r in runs)}


def divergence_tenths(panels, data) -> dict:
    """label -> the means of the points of its "mean over games" divergence curve (figure_data.divergence) in each
    tenth of the steps its runs trained (None: no point there), and the tenth of the highest."""
    out = {}
    for band in next((p.bands for p in panels or [] if p.title == "mean over games"), []):
        end = max(r.total_steps for by_seed in data[band.label].values() for r in by_seed.values())
        if end < 10:
            continue
        tenths = [[] for _ in range(10)]
        for step, m in zip(band.curve[0], band.curve[1]):
            tenths[min(int(step // (end // 10)), 9)].append(m)
        means = [float(np.mean(t)) if t else float("nan") for t in tenths]
        out[band.label] = {"tenths": means,
                           "highest": int(np.nanargmax(means)) if np.isfinite(means).any() else None}
    return out


def first_highest(data, games) -> list[dict]:
    """The runs whose first divergence measurement is their highest, label by label and game by game: its first and
    last measurements."""
    out = []
    for lb, by_game in data.items():
        for g in games:
            for seed, r in sorted(by_game.get(g, {}).items()):
                tag = divergence_tag(r)
                values = r.scalars[tag][1] if tag else []
                if len(values) and values[0] == max(values):
                    out.append({"label": lb, "game": g, "seed": seed, "first": values[0], "last": values[-1]})
    return out


def after_burn_in(data, burn: dict, trends: dict) -> dict:
    """game -> label -> seed -> an ABS run's lowest and highest window mean of its divergence (delta_bar, the
    schedule's input) at or after the step its burn-in ended, and its measurements from the W-th on (those that may
    move L)."""
    out = {}
    for (g, lb), by_seed in burn.items():
        for seed, b in by_seed.items():
            r, trend = data[lb][g][seed], trends.get((g, lb), {}).get(seed)
            steps, values = r.scalars.get(f"{divergence_tag(r)}_mean", ([], []))
            after = [v for s, v in zip(steps, values) if s >= b.end]
            out.setdefault(g, {}).setdefault(lb, {})[seed] = {
                "delta_bar": extent(after) if after else None,
                "moving": trend.n - b.window + 1 if trend else None}
    return out


def highest_size(fd) -> float | None:
    """The highest batch size (L) of any run in any bin of the figures' batch-size curves."""
    panels = [p for p in fd.sizes or []] + [size for _, size in fd.by_game or []]
    tops = [float(np.max(b.curve[3])) for p in panels for b in p.bands if b.tag in SIZE_TAGS and len(b.curve[3])]
    return max(tops) if tops else None


def early_count(early: Compared) -> dict:
    """A -> B -> the games A's early return is the higher on (a tie is no win), of those both ran, and a coin's chance
    of as many or more."""
    out = {}
    for (a, b), (wins, n) in early.wins.items():
        out.setdefault(a, {})[b] = {"wins": wins, "games": n, "p": sign_p(wins, n)}
    return out


def early_hns(early_hns_c: Compared, early: Compared) -> dict:
    """The early HNS's lowest and highest per-seed value, and per compared pair the game of the largest difference
    of the means, that difference and the early return's difference there."""
    values = [v for s in early_hns_c.seeds.values() for v in s.values.values()]
    out = {"range": extent(values) if values else None, "largest": {}}
    raw = {(d.game, d.a, d.b): d.diff for d in early.differences}
    for d in early_hns_c.differences:
        top = out["largest"].setdefault(d.a, {}).get(d.b)
        if top is None or d.diff > top["hns"]:
            out["largest"][d.a][d.b] = {"game": d.game, "hns": d.diff, "raw": raw.get((d.game, d.a, d.b))}
    return out


def quoted(data, games, evaluation: Compared, el, trends: dict, plan, fd) -> dict:
    """Everything above that applies to the report's runs (report.measure): from the runs, the evaluation return
    compared, the early and late measures (sections.EarlyLate), the divergence trends, the pre-registered plan (or
    None) and the figure data."""
    out = {"schedule": schedule(fd.by_game, data), "machine": machine_total(data, games),
           "divergence_tenths": divergence_tenths(fd.divergence, data), "first_highest": first_highest(data, games),
           "after_burn_in": after_burn_in(data, el.burn, trends), "highest_size": highest_size(fd),
           "early_count": early_count(el.early), "early_hns": early_hns(el.early_hns, el.early)}
    if plan is not None and plan.before:
        out["split"] = evaluation_split(evaluation, el.late, plan.pair, plan.tasks, plan.before)
    return out
