"""What the report measures, per run and seed, from the runs collected by runs.py and events.py: a run's
normalised score, final training return, early return, late variance, curve area, burn-in and the divergence's
trend; per label, the aggregates across games; per compared pair, the improvement rates; and a pre-registered
analysis (MUJOCO_5M) from those measures. The statistics themselves are stats.py's.

Every per-seed measure has the form (game, label) -> {seed: value}, over the runs whose value is finite
(per_seed); the report's metric sections take that form.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .runs import DIVERGENCE_TAGS, RETURN_TAG, SIZE_TAGS, Run
from .stats import (EARLY, Compared, Difference, aggregate, bonferroni, bootstrap_ci, burn_in_share, curve_area,
                   early_mean, finite, first_move, hedges_g, holm, human_normalized_score, improvement_rate,
                   late_variance, rank_correlation, robust_improvement, tenth_means)

AGGREGATES = ("IQM", "median", "mean", "optimality gap")  # the names of stats.aggregate's values, in its order


def runs_of(data, games) -> list[Run]:
    """The runs of data[label][game][seed] on the games, game by game."""
    return [r for g in games for d in data.values() for r in d.get(g, {}).values()]


def normalized(run: Run, table: dict) -> float:
    """HNS for Atari, raw return otherwise."""
    s = table.get(run.game)
    return float(human_normalized_score(run.score, s["random"], s["human"])) if s else run.score


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


def final_training_return(run: Run, last: int) -> float:
    """Mean of the run's last `last` logged games (`charts/episodic_return`, in step order): the end-of-training
    metric of CleanRL's published results (openrlbenchmark averages the last 100 per run). NaN without games."""
    if RETURN_TAG not in run.scalars or not len(run.scalars[RETURN_TAG][1]):
        return float("nan")
    return float(np.mean(run.scalars[RETURN_TAG][1][-last:]))


def run_curve(run: Run):
    """(steps, returns, window length) of the run's training games, or None without any. The window length is the
    run's Run.window_steps: for a prefix run, its protocol's --total-timesteps."""
    if RETURN_TAG not in run.scalars:
        return None
    steps, values = run.scalars[RETURN_TAG]
    return steps, values, run.window_steps or (steps.max() if len(steps) else 0)


def reaches(run: Run, metric: str) -> bool:
    """Whether the run trained through the window of an early_late metric ("early", "late", "whole"): a prefix run
    reaches the early window when it stopped at or past 10% of its protocol, never the late window or the whole run."""
    return run.complete or (metric == "early" and run.total_steps >= EARLY * run.total_timesteps)


def early_late(data, games) -> tuple[dict, dict, dict]:
    """(game, label) -> {seed: value} for the first-10% mean return, the last-10% return variance and the whole
    run's curve area (curve_area), over the runs whose curve has points in that window and that trained through it
    (reaches; not_reached names the others)."""
    def of(stat, metric):
        return lambda r: stat(*run_curve(r)) if run_curve(r) is not None and reaches(r, metric) else float("nan")
    return tuple(per_seed(data, games, of(f, m)) for f, m in zip((early_mean, late_variance, curve_area), METRICS))


METRICS = ("early", "late", "whole")  # early_late's metrics, in its order


def not_reached(data, games) -> dict:
    """metric -> {(game, label): [seeds]} of the prefix runs that stopped before the metric's window (reaches)."""
    out = {m: {} for m in METRICS}
    for r in runs_of(data, games):
        for m in METRICS:
            if not reaches(r, m):
                out[m].setdefault((r.game, r.label), []).append(r.seed)
    return out


def size_tag(run: Run) -> str | None:
    """The batch-size tag the run logs (adapt/num_steps for PPO and PQN, adapt/batch_size for BTR), or None."""
    return next((t for t in SIZE_TAGS if t in run.scalars and len(run.scalars[t][0])), None)


def divergence_tag(run: Run) -> str | None:
    """The divergence the run's schedule used, among the tags it logged (read_run keeps only that one)."""
    return next((t for t in DIVERGENCE_TAGS if t in run.scalars and len(run.scalars[t][0])), None)


def is_abs_run(run: Run) -> bool:
    """An ABS run: it adapts (--adapt, the scripts' default) with a window W (--window) and logs its batch size at
    every divergence measurement. The fixed-batch baselines (--no-adapt) and GNS (no window) are not."""
    return bool(run.args.get("adapt", True)) and "window" in run.args and size_tag(run) is not None


class BurnIn(NamedTuple):
    end: float  # the step burn-in ends at (inf: never)
    share: float  # the share of the early window before it
    L: float  # L during burn-in (L_min)
    window: int  # W
    moved: float  # the step L first left L_min (inf: never)
    at_L_min: float  # the share of the early window before that step: burn-in and after it while L stayed


def burn_in(data, games) -> tuple[dict, list[str]]:
    """(game, label) -> {seed: BurnIn} for the ABS runs (is_abs_run), and notes. Burn-in: before the W-th
    divergence measurement (W = the run's --window), while L is still L_min; the share is burn_in_share's. After it
    L may stay at L_min (a divergence at or above delta_max, or near enough below it): the share at L_min counts
    up to L's first move. A run whose logged L moved before its W-th measurement is noted."""
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
                end, share = burn_in_share(steps, window, r.window_steps or steps.max())
                moved = first_move(steps, values)
                if moved < end:
                    notes.append(f"{lb}: {game} seed {seed}: {tag} moved before its W-th measurement (W = {window}), "
                                 "not a burn-in at one L")
                at_min = burn_in_share([moved], 1, r.window_steps or steps.max())[1]
                out.setdefault((game, lb), {})[seed] = BurnIn(end, share, float(values[0]), window, moved, at_min)
    return out, notes


class BurnSummary(NamedTuple):
    """A label's burn-in over its ABS runs of every game (burn_in), as the report states it."""
    L_min: list  # the L its runs held during burn-in
    share: tuple  # (mean, min, max) over its runs of the share of the early window in burn-in
    at_L_min: tuple  # (mean, min, max) of the share at L_min in all (burn-in, then while L stayed there)
    baselines: list  # (label, L): its compared fixed-batch labels whose runs share one fixed L
    stayed: list  # (game, seed): the runs whose L never left L_min in the early window after a burn-in that ended


def burn_summary(burn: dict, data, labels, pairs) -> tuple[dict, dict]:
    """((game, label) -> the mean share at L_min over its seeds, label -> BurnSummary) of burn_in's runs."""
    def spread(x):
        return float(np.mean(x)), min(x), max(x)
    rows = {k: float(np.mean([v.at_L_min for v in by_seed.values()])) for k, by_seed in burn.items()}
    out = {}
    for lb in labels:
        runs = {(g, s): v for (g, label), by_seed in burn.items() if label == lb for s, v in by_seed.items()}
        if not runs:
            continue
        baselines = []
        for a, b in pairs:
            fixed = sorted({r.args.get("num_steps") for d in data[b].values() for r in d.values()
                            if r.args.get("adapt") is False and r.args.get("num_steps") is not None})
            if a == lb and len(fixed) == 1:
                baselines.append((b, fixed[0]))
        out[lb] = BurnSummary(sorted({v.L for v in runs.values()}), spread([v.share for v in runs.values()]),
                              spread([v.at_L_min for v in runs.values()]), baselines,
                              [k for k, v in runs.items() if v.at_L_min == 1.0 and v.share < 1.0])
    return rows, out


class Trend(NamedTuple):
    tag: str  # the divergence logged (adapt/divergence, adapt/kl, ...)
    n: int  # its measurements
    first: float  # the first measurement
    early: float  # the mean over the first tenth of the run's steps
    late: float  # the mean over the last tenth
    rho: float  # Spearman's rank correlation with the step (negative: it falls)


def divergence_trends(data, games) -> dict:
    """(game, label) -> {seed: Trend} for every run that logged a divergence: an ABS run's own, or one a fixed-batch
    run measured without using it (--track-divergence). The paper's Figure 1 claim (the divergence starts high, then
    falls) over the steps each run trained: for a prefix run, the steps up to its stop."""
    out = {}
    for game in games:
        for lb, by_game in data.items():
            for seed, r in sorted(by_game.get(game, {}).items()):
                tag = divergence_tag(r)
                if tag is None:
                    continue
                steps, values = r.scalars[tag]  # sorted by step (events.py)
                early, late = tenth_means(steps, values, r.total_steps)
                out.setdefault((game, lb), {})[seed] = Trend(tag, len(values), float(values[0]), early, late,
                                                             rank_correlation(steps, values))
    return out


class TrendCount(NamedTuple):
    """A label's runs in divergence_trends, counted: the paper's Figure 1 claim as a tally."""
    lower: int  # runs whose mean over the last tenth is below the first tenth's
    both: int  # runs with a mean in both tenths
    falling: int  # runs with rho < 0
    ranked: int  # runs with a rho (3 or more measurements, not all equal)
    median_rho: float  # over the ranked runs (NaN: none)


def trend_counts(trends: dict, labels) -> dict:
    """label -> TrendCount over its runs of every game in `trends` (divergence_trends); labels without one are left
    out."""
    out = {}
    for lb in labels:
        runs = [v for (_, label), by_seed in trends.items() if label == lb for v in by_seed.values()]
        if runs:
            both = [v for v in runs if np.isfinite(v.early) and np.isfinite(v.late)]
            rhos = [v.rho for v in runs if np.isfinite(v.rho)]
            out[lb] = TrendCount(sum(v.late < v.early for v in both), len(both), sum(r < 0 for r in rhos), len(rhos),
                                 float(np.median(rhos)) if rhos else float("nan"))
    return out


# abs_utils.NEAR_CONSTANT_SHARE: an evaluation policy that chose one action on this share of its steps or more.
NEAR_CONSTANT_SHARE = 0.9


def near_constant_evaluations(data, games) -> list[tuple[Run, int, float]]:
    """(run, action, share) for the runs whose evaluation policy chose one action on at least NEAR_CONSTANT_SHARE of
    its steps (eval.action_counts, written by the Atari scripts): their score is that of one action, not of play."""
    out = []
    for r in (r for r in runs_of(data, games) if r.action_counts and sum(r.action_counts)):
        top = max(r.action_counts)
        if top / sum(r.action_counts) >= NEAR_CONSTANT_SHARE:
            out.append((r, r.action_counts.index(top), top / sum(r.action_counts)))
    return out


def capped_evaluations(data, games, table) -> tuple[list[Run], list[str]]:
    """The Atari runs (games in table) with evaluation episodes cut at the step cap (eval.capped > 0), whose returns
    are those of games cut short, and the games where every episode of every run was cut. (A MuJoCo episode capped
    at its time limit is a whole episode: not counted.)"""
    atari = [r for r in runs_of(data, games) if r.game in table]
    capped = [r for r in atari if r.capped]
    whole = sorted({r.game for r in capped} - {r.game for r in atari if r.capped != r.eval_episodes})
    return capped, whole


def machine_time(data, games) -> dict:
    """label -> the runs' training time: "runs", "timed" (runs whose eval_results.json has train_seconds), "hours"
    (their sum), "per_run" (min, max hours), "sps" (min, max of the steps trained / train_seconds, over runs with
    train_seconds > 0), "restarted" (runs with more than one event file: each start of a script opens one, so
    these were stopped and started again) and "by_game" (game -> (timed runs, their mean hours), games with one)."""
    out = {}
    for lb in data:
        runs = runs_of({lb: data[lb]}, games)
        timed = [r for r in runs if r.train_seconds is not None]
        hours = [r.train_seconds / 3600 for r in timed]
        sps = [r.total_steps / r.train_seconds for r in timed if r.train_seconds > 0]
        per_game = {g: [r.train_seconds / 3600 for r in timed if r.game == g] for g in games}
        out[lb] = {"runs": len(runs), "timed": len(timed), "hours": float(sum(hours)),
                   "per_run": (min(hours), max(hours)) if hours else None,
                   "sps": (min(sps), max(sps)) if sps else None,
                   "restarted": sum(r.event_file_count > 1 for r in runs),
                   "by_game": {g: (len(h), float(np.mean(h))) for g, h in per_game.items() if h}}
    return out


def improvement_rates(data, games, table, pairs):
    """(a, b) -> {"paper": {game: rate}, "robust": {game: rate}, "excluded": [(game, why)], "paper summary" and
    "robust summary": (mean, median, games) over the games the form is defined on} for each compared pair: the
    paper's form on per-game mean HNS (raw return outside Atari), the robust form on mean raw scores."""
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
        out[(a, b)] = {"paper": paper, "robust": robust, "excluded": excluded,
                       **{f"{form} summary": (finite(np.mean, r.values()), finite(np.median, r.values()),
                                              int(np.isfinite(list(r.values())).sum()))
                          for form, r in (("paper", paper), ("robust", robust))}}
    return out


def aggregate_table(data, games, table, reps, seed):
    """Per label: the aggregates of its runs' evaluation HNS over its Atari games (aggregate_values)."""
    return aggregate_values({label: {g: [normalized(by_game[g][s], table) for s in sorted(by_game[g])]
                                     for g in games if g in by_game and g in table}
                             for label, by_game in data.items()}, reps, seed)


def hns_values(values: dict, table: dict) -> dict:
    """(game, label) -> {seed: value} of raw returns -> the same of human-normalised scores, on the Atari games of
    the table (the others are left out)."""
    return {(g, lb): {s: float(human_normalized_score(v, table[g]["random"], table[g]["human"]))
                      for s, v in vals.items()} for (g, lb), vals in values.items() if g in table}


def by_label(values: dict, games) -> dict:
    """(game, label) -> {seed: value}  ->  label -> {game: [values in seed order]}, in the order of games."""
    out = {}
    for g in games:
        for (game, lb), vals in values.items():
            if game == g:
                out.setdefault(lb, {})[g] = [vals[s] for s in sorted(vals)]
    return out


def aggregate_values(per_label: dict, reps, seed):
    """label -> {game: [scores in seed order]}  ->  (label -> {point, lo, hi: the AGGREGATES, games, runs,
    per_game}, notes): the aggregates over the games of a (runs x games) matrix cut to the fewest seeds any game
    has, with stratified-bootstrap 95% CIs. A label without a game is left out."""
    mats, rows, notes = {}, {}, []
    for label, by_game in per_label.items():
        if not by_game:
            continue
        n = min(len(v) for v in by_game.values())
        if any(len(v) > n for v in by_game.values()):
            notes.append(f"{label}: games have unequal seed counts; aggregates use the first {n} seed(s) of each game")
        mats[label] = np.array([v[:n] for v in by_game.values()]).T
    if not mats:
        return rows, notes
    point, ci = bootstrap_ci(mats, aggregate, reps, seed)
    # One run per game: every stratified resample is the runs themselves. Resampling the games is then the only
    # uncertainty the sample can state (which games were drawn, not how a game's runs vary).
    single = {label: m for label, m in mats.items() if m.shape[0] == 1 and m.shape[1] > 1}
    tasks = bootstrap_ci(single, aggregate, reps, seed, task_bootstrap=True)[1] if single else {}
    for label, m in mats.items():
        rows[label] = {"point": point[label], "lo": ci[label][0], "hi": ci[label][1],
                       "games": m.shape[1], "runs": m.size, "per_game": m.shape[0]}
        if label in tasks:
            rows[label]["games_lo"], rows[label]["games_hi"] = tasks[label]
    return rows, notes


# ----------------------------------------------------------------------------- a pre-registered analysis
class Preregistration(NamedTuple):
    """An analysis fixed before its runs ran: the runs it is for (a benchmark, a run length), the pair it tests, the
    tasks its adjustment is over, the seeds each arm of a task needs, and alpha."""
    benchmark: str
    total_timesteps: int
    pair: tuple  # (A, B): the difference tested is A - B
    tasks: tuple  # the family of Holm's adjustment: games, as the report names them
    seeds: tuple  # a task is tested when each arm has exactly these seeds
    alpha: float
    source: str  # where it is written
    before: tuple = ()  # the seeds that had run when it was fixed (quoted.py states what they gave alone)


# docs/results-mujoco-5m.md, "The analysis, fixed before seeds 4-10 ran": PPO + ABS against PPO, 5M steps, seeds
# 1-10 of each on Walker2d, Hopper and HalfCheetah (in the order they ran), Holm's adjustment at alpha = 0.05.
MUJOCO_5M = Preregistration("mujoco", 5_000_000, ("PPO+ABS", "PPO"), ("Walker2d", "Hopper", "HalfCheetah"),
                            tuple(range(1, 11)), 0.05,
                            "docs/results-mujoco-5m.md, \"The analysis, fixed before seeds 4-10 ran\"", (1, 2, 3))
# Its secondary outcomes, in the page's order: the training return (the last games' mean), the whole-run return,
# the early return, the late variance.
SECONDARY = ("training return", "whole-run return", "early return", "late variance")


def is_preregistered(plan: Preregistration, benchmark, data, games, pairs) -> bool:
    """Whether a report's runs are those `plan` is for: its benchmark, its pair among the compared ones, and every
    run complete at the plan's length."""
    runs = runs_of(data, games)
    return (benchmark == plan.benchmark and tuple(plan.pair) in {tuple(p) for p in pairs} and bool(runs)
            and all(r.complete and r.total_timesteps == plan.total_timesteps for r in runs))


class TaskTest(NamedTuple):
    """One task of a pre-registered analysis (preregistered)."""
    task: str
    seeds: tuple  # (A's seeds, B's seeds) with an evaluation return, in order
    complete: bool  # each arm has exactly the plan's seeds: the task is tested
    primary: Difference | None  # the evaluation return's A - B (the report's own, stats.compare), when complete
    adjusted: float  # its p adjusted over the tasks (Preregistered.holm says how); NaN when not tested
    percent: float  # the difference in % of |B's mean|
    g: float  # Hedges' g
    decision: str  # "raises" or "lowers" (adjusted p < alpha), "unresolved", or "incomplete" (not tested)
    secondary: dict  # SECONDARY name -> the outcome's A - B (None without values on both sides), when complete


class Preregistered(NamedTuple):
    """A pre-registered analysis of one report's measures (preregistered)."""
    plan: Preregistration
    tasks: list  # a TaskTest per task of the plan, in its order
    holm: bool  # every task complete: the adjusted p are Holm's; else the Bonferroni bound min(1, m p)
    others: list  # the report's games outside the plan's tasks (not analysed)
    last_games: int  # the training return's games (--last-games)


def preregistered(plan: Preregistration, evaluation: Compared, secondary: dict, games, last_games: int):
    """The plan's analysis from the report's measures: evaluation, the evaluation return compared (stats.compare),
    and secondary, SECONDARY name -> that outcome compared. Per task: A - B with Welch's interval and the exact
    permutation p (the report's own Difference), the p adjusted over the plan's tasks (Holm's when every task is
    complete, else the Bonferroni bound min(1, m p), m the plan's task count, which is never below Holm's), the
    difference in % of |B's mean|, Hedges' g and the decision; a task without exactly the plan's seeds in both arms is
    incomplete and not tested."""
    a, b = plan.pair

    def difference_of(c: Compared, task: str) -> Difference | None:
        return next((d for d in c.differences if (d.game, d.a, d.b) == (task, a, b)), None)
    tasks = []
    for task in plan.tasks:
        cells = [evaluation.seeds.get((task, lb)) for lb in plan.pair]
        seeds = tuple(tuple(c.values) if c else () for c in cells)
        complete = all(s == tuple(plan.seeds) for s in seeds)
        primary = difference_of(evaluation, task) if complete else None
        tasks.append(TaskTest(
            task, seeds, complete, primary, float("nan"),
            100 * primary.diff / abs(cells[1].mean) if complete and cells[1].mean != 0 else float("nan"),
            hedges_g(list(cells[0].values.values()), list(cells[1].values.values())) if complete else float("nan"),
            "incomplete", {name: difference_of(c, task) for name, c in secondary.items()} if complete else {}))
    tested = [t for t in tasks if t.complete]
    every = len(tested) == len(plan.tasks)
    adjusted = holm([t.primary.p for t in tested]) if every else [bonferroni(t.primary.p, len(plan.tasks))
                                                                   for t in tested]
    by_task = {t.task: p for t, p in zip(tested, adjusted)}
    tasks = [t._replace(adjusted=by_task[t.task], decision="unresolved" if by_task[t.task] >= plan.alpha else
                        "raises" if t.primary.diff > 0 else "lowers") if t.complete else t for t in tasks]
    return Preregistered(plan, tasks, every, [g for g in games if g not in plan.tasks], last_games)
