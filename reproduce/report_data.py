"""The report's numbers as data: report.json, written beside report.md from the same measured numbers
(report.Measured), so that a results page quotes them by name (mujoco_page.py, early_page.py) and never reads
report.md back. Nothing is computed here: the measures are converted to JSON's types.

Layout (every key a name; a game, label, seed or outcome is a key, never a position):
- "labels", "games", "pairs" ([A, B] per compared pair);
- per-seed metrics, each a compared metric: "evaluation", "hns", "final", "early", "late", "whole", "early_hns":
  {"seeds": {game: {label: Seeds}}, "best": {game: [labels]}, "best_counts": {label: n},
  "wins": {A: {B: [games A is better on, games both have]}}, "differences": {game: {A: {B: Difference}}}}
  (stats.Seeds, stats.Difference; a Seeds' "values" is {seed: value});
- "aggregates", "early_aggregates": {label: {"games", "runs", "per_game", and per aggregate (IQM, median, mean,
  optimality gap): {"point", "lo", "hi", and with one run per game "games_lo", "games_hi"}}};
- "burn_in": {game: {label: {seed: measures.BurnIn}}}, "burn_in_summary": {label: measures.BurnSummary, its
  shares as {"mean", "lowest", "highest"}};
- "trends": {game: {label: {seed: measures.Trend}}}, "trend_counts": {label: measures.TrendCount};
- "machine_time": {label: measures.machine_time's, its ranges as {"lowest", "highest"}}; "preregistered":
  measures.Preregistered with "tasks" keyed by task and a task's "seeds" by label, or null;
- "batch_claims": reproduce/batch_claims.py's analysis (report_data.batch_claims), or null;
- "capped": the runs with evaluation episodes cut at the step cap, and the games where every episode was;
  "constant": the runs whose evaluation policy was near-constant (measures.near_constant_evaluations);
- "quoted": quoted.py's.
A number that is not finite (no interval with one seed, a burn-in that never ends) is null.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .measures import AGGREGATES
from .stats import Compared, Difference

METRICS = ("evaluation", "hns", "final", "early", "late", "whole", "early_hns")


def plain(x):
    """x in JSON's types: a NamedTuple as an object of its fields, a dict keyed by tuples as nested objects, NumPy's
    numbers as Python's, a set sorted, a number that is not finite as None."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if hasattr(x, "_asdict"):
        return {k: plain(v) for k, v in x._asdict().items()}
    if isinstance(x, dict):
        out: dict = {}
        for k, v in x.items():
            *outer, last = k if isinstance(k, tuple) else (k,)
            node = out
            for part in outer:
                node = node.setdefault(str(part), {})
            node[str(last)] = plain(v)
        return out
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v) for v in x]
    if isinstance(x, (set, frozenset)):  # (the labels best on a game: ties)
        return sorted(plain(v) for v in x)
    if isinstance(x, Path):
        return str(x)
    if callable(x):
        return x.__name__
    raise TypeError(f"report.json: no plain form for {type(x).__name__}")


def compared(c: Compared) -> dict:
    return {"seeds": plain(c.seeds), "best": plain(c.best), "best_counts": plain(c.best_counts),
            "wins": plain(c.wins), "differences": plain({(d.game, d.a, d.b): d for d in c.differences})}


def aggregates(rows: dict) -> dict:
    """measures.aggregate_values' rows with each aggregate by its name."""
    return {lb: {**{k: v for k, v in r.items() if not isinstance(v, (list, tuple, np.ndarray))},
                 **{name: {k: plain(r[k][i]) for k in ("point", "lo", "hi", "games_lo", "games_hi") if k in r}
                    for i, name in enumerate(AGGREGATES)}} for lb, r in rows.items()}


def extent(x) -> dict | None:
    """A (lowest, highest) or (mean, lowest, highest) range by name."""
    return None if x is None else dict(zip(("lowest", "highest") if len(x) == 2 else ("mean", "lowest", "highest"),
                                           plain(x)))


def report_data(f, m) -> dict:
    """report.json's content: the Frame's labels, games and pairs, and the report's Measured."""
    el = m.early_late
    pr = m.preregistered
    return {
        "labels": f.labels, "games": f.games, "pairs": plain(f.pairs),
        **{name: compared(c) for name, c in zip(METRICS, (m.evaluation, m.hns, m.final, el.early, el.late, el.area,
                                                          el.early_hns))},
        "aggregates": aggregates(m.agg), "early_aggregates": aggregates(el.early_agg),
        "burn_in": plain(el.burn),
        "burn_in_summary": {lb: {**plain(b), "share": extent(b.share), "at_L_min": extent(b.at_L_min)}
                            for lb, b in el.burn_labels.items()},
        "trends": plain(m.trends), "trend_counts": plain(m.trend_counts),
        "machine_time": {lb: {**plain(t), "per_run": extent(t["per_run"]), "sps": extent(t["sps"])}
                         for lb, t in m.times.items()},
        "preregistered": {**plain(pr), "tasks": {t.task: {**plain(t), "seeds": dict(zip(pr.plan.pair, plain(t.seeds)))}
                                                 for t in pr.tasks}} if pr else None,
        "batch_claims": batch_claims(m.batch_claims),
        "capped": {"runs": [{**run(r), "capped": r.capped, "episodes": r.eval_episodes} for r in m.capped[0]],
                   "every_episode": m.capped[1]},
        "constant": [{**run(r), "action": action, "share": share} for r, action, share in m.constant],
        "quoted": plain(m.quoted)}


def interval(x) -> dict:
    """A (point, lo, hi) by name."""
    return dict(zip(("point", "lo", "hi"), plain(x)))


def batch_claims(a) -> dict | None:
    """batch_claims.BatchAnalysis by name: "tests" {baseline: {game: PairTest}}, "claims" {baseline: Claim, its
    "poi" an interval}, "iqm" {label: interval}, "zeros" the check added during the runs (ZeroAnalysis, its "tests"
    {label: ZeroTest}); or null where the report's runs are not such a grid's."""
    if a is None:
        return None
    z = a.zeros
    return {**plain(a), "tests": {b: {t.game: plain(t) for t in a.tests if t.baseline == b} for b in a.plan.baselines},
            "claims": {c.baseline: {**plain(c), "poi": interval(c.poi)} for c in a.claims},
            "iqm": {lb: interval(x) for lb, x in a.iqm.items()},
            "zeros": {**plain(z), "tests": {t.label: plain(t) for t in z.tests}} if z else None}


def run(r) -> dict:
    return {"label": r.label, "game": r.game, "seed": r.seed}


def write_data(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n")


def read_data(path: Path) -> dict:
    return json.loads(path.read_text())


def number(x) -> float:
    """A number of report.json as a float: null (not finite) as NaN."""
    return float("nan") if x is None else float(x)


def difference(d: dict) -> Difference:
    """A Difference of report.json, for tables.py's formats (welch_text)."""
    return Difference(**{k: number(v) if k in ("diff", "lo", "hi", "df", "p", "smallest_p") else v
                         for k, v in d.items()})
