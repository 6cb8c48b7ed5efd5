"""The MinAtar study's pre-registered analysis of the paper's batch claims (docs/results-minatar-batches.md, "The
analysis, fixed before the runs"), from the report's measures: numbers in, numbers out; the section that words them
is batch_claims_section.py, the random policy's returns come from runs.load_minatar_random.

Per game and fixed label F, once the game's runs of every label are in: ABS - F with Welch's interval, the exact
permutation p and Hedges' g, the p adjusted over every (game, F) test (Holm's once all are complete, the Bonferroni
bound before), and the per-game decision: a bound below alpha decides at once (Holm's p is never above it), and so
does a permutation p at alpha or above ("no difference": Holm's p is never below it); any other waits for Holm's.
Across games, once every run is in: the normalised score (return - random) / (Vanilla's mean - random), its IQM per
label and rliable's probability of improvement of ABS over each F, each with its 95% stratified bootstrap interval,
and the claim's decision.

The check added during the runs (the page's "A check added during the runs", ZeroCheck): on one game, each run's share
of training games that end at 0 after a step (zero_share), each tested label against a reference over seeds that had
not run when it was written, with the exact permutation p and Holm's adjustment over its tests."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .runs import MINATAR
from .stats import (Compared, Difference, bonferroni, bootstrap_ci, hedges_g, holm, iqm, permutation_p,
                    probability_of_improvement)

BEATS, WORSE, NONE, INCOMPLETE = "beats", "is worse than", "no difference", "incomplete"
WAITING = "waits for Holm's"  # complete, its p below alpha and its bound not, some other test not complete
MORE, LESS = "more often", "less often"  # the check's decisions: a label's games end at 0 more or less often
UNDEFINED = "cannot be decided"  # the check's held-out runs are in, but one has no share


class BatchPlan(NamedTuple):
    """An analysis of one reference label against fixed baselines on several games, fixed before its runs ran."""
    benchmark: str
    total_timesteps: int
    reference: str  # the tested label (ABS)
    baselines: tuple  # the fixed labels it is tested against
    tasks: tuple  # the games
    seeds: tuple  # a (game, label) cell is complete with exactly these seeds
    alpha: float
    normaliser: str  # the label whose mean return is a game's 1 of the normalised score
    min_gap: float  # a game whose normaliser's mean is less than this above random is left out of the aggregate
    source: str


MINATAR_BATCHES = BatchPlan("minatar", 10_000_000, "ABS", ("Small", "Vanilla", "Large"), MINATAR,
                            tuple(range(1, 11)), 0.05, "Vanilla", 1.0,
                            "docs/results-minatar-batches.md, \"The analysis, fixed before the runs\"")


class PairTest(NamedTuple):
    game: str
    baseline: str
    complete: bool  # the game's cells of every label have exactly the plan's seeds (its runs are all in)
    difference: Difference | None  # reference - baseline, when complete
    g: float  # Hedges' g
    adjusted: float  # over every test of the plan (Holm, or the Bonferroni bound while some are incomplete)
    decision: str  # BEATS, WORSE, NONE, WAITING or INCOMPLETE


class Claim(NamedTuple):
    baseline: str
    poi: tuple  # (point, lo, hi) of P(reference > baseline); NaNs before every run is in
    better: list  # the games the reference beats it on
    worse: list  # the games the reference is worse on
    decision: str


class BatchAnalysis(NamedTuple):
    plan: BatchPlan
    tests: list  # PairTest per (baseline, game), baseline-major
    holm: bool  # every test complete: the adjusted p are Holm's
    random: dict  # game -> the random policy's mean return
    normalisers: dict  # game -> the normaliser's mean return (complete games)
    left_out: list  # games left out of the aggregate (normaliser within min_gap of random)
    iqm: dict  # label -> (point, lo, hi) of the normalised score's IQM; empty before every run is in
    claims: list  # Claim per baseline
    zeros: ZeroAnalysis | None = None  # the check added during the runs (report.measure adds it)


def applies(plan: BatchPlan, benchmark, data: dict, pairs) -> bool:
    """A report's runs are this plan's: its benchmark, every (reference, baseline) pair compared, and every run
    complete at the plan's length."""
    runs = [r for by_game in data.values() for by_seed in by_game.values() for r in by_seed.values()]
    wanted = {(plan.reference, b) for b in plan.baselines}
    return (benchmark == plan.benchmark and wanted <= {tuple(p) for p in pairs} and bool(runs)
            and all(r.complete and r.total_timesteps == plan.total_timesteps for r in runs))


def cell(evaluation: Compared, game: str, label: str) -> list | None:
    """A (game, label) cell's values in the plan's seed order, or None when it lacks some seed or has another."""
    s = evaluation.seeds.get((game, label))
    return None if s is None else [s.values[k] for k in sorted(s.values)]


def per_game_decision(t: PairTest, adjusted: float, alpha: float, every: bool) -> str:
    """A complete test's decision from its adjusted p (Holm's when every test is complete, else the Bonferroni
    bound). Holm's p lies between the permutation p and the bound, so before every test is in, a bound below alpha
    decides the test and so does a permutation p at alpha or above (no difference); the rest wait for Holm's."""
    if adjusted < alpha:
        return BEATS if t.difference.diff > 0 else WORSE
    return NONE if every or t.difference.p >= alpha else WAITING


def batch_analysis(plan: BatchPlan, evaluation: Compared, random: dict, reps: int = 2000,
                   seed: int = 0) -> BatchAnalysis:
    """The plan's analysis of the evaluation return compared by the report (stats.compare, the reference against
    every baseline), with random: game -> a random policy's mean return."""
    ref = plan.reference

    def complete(game, label):
        s = evaluation.seeds.get((game, label))
        return s is not None and tuple(sorted(s.values)) == tuple(plan.seeds)
    labels = (ref, *plan.baselines)
    tests = []
    for b in plan.baselines:
        for game in plan.tasks:
            ok = all(complete(game, lb) for lb in labels)  # the page: a game's tests once its runs are all in
            d = next((d for d in evaluation.differences if (d.game, d.a, d.b) == (game, ref, b)), None) if ok else None
            g = hedges_g(cell(evaluation, game, ref), cell(evaluation, game, b)) if ok else float("nan")
            tests.append(PairTest(game, b, ok, d, g, float("nan"), INCOMPLETE))
    done = [t for t in tests if t.complete]
    every = len(done) == len(tests)
    adjusted = holm([t.difference.p for t in done]) if every else [bonferroni(t.difference.p, len(tests)) for t in done]
    by_key = {(t.game, t.baseline): p for t, p in zip(done, adjusted)}

    for i, t in enumerate(tests):
        if t.complete:
            p = by_key[(t.game, t.baseline)]
            tests[i] = t._replace(adjusted=p, decision=per_game_decision(t, p, plan.alpha, every))

    normalisers = {g: float(np.mean(cell(evaluation, g, plan.normaliser))) for g in plan.tasks
                   if complete(g, plan.normaliser)}
    left_out = [g for g, v in normalisers.items() if v - random[g] < plan.min_gap]
    used = [g for g in plan.tasks if g in normalisers and g not in left_out]
    nan3 = (float("nan"),) * 3
    iqms, pois = {}, {b: nan3 for b in plan.baselines}
    if every and all(complete(g, lb) for g in plan.tasks for lb in labels) and used:
        def matrix(label):  # runs x games, normalised
            return np.array([[(v - random[g]) / (normalisers[g] - random[g]) for v in cell(evaluation, g, label)]
                             for g in used]).T
        m = {lb: matrix(lb) for lb in labels}
        point, ci = bootstrap_ci(m, func=lambda s: np.array([iqm(s)]), reps=reps, seed=seed)
        iqms = {lb: (float(point[lb][0]), float(ci[lb][0][0]), float(ci[lb][1][0])) for lb in labels}
        point, ci = bootstrap_ci({b: [m[ref], m[b]] for b in plan.baselines},
                                 func=lambda x, y: np.array([probability_of_improvement(x, y)]), reps=reps, seed=seed)
        pois = {b: (float(point[b][0]), float(ci[b][0][0]), float(ci[b][1][0])) for b in plan.baselines}
    claims = []
    for b in plan.baselines:
        mine = [t for t in tests if t.baseline == b]
        better = [t.game for t in mine if t.decision == BEATS]
        worse = [t.game for t in mine if t.decision == WORSE]
        point, lo, hi = pois[b]
        if not every:
            decision = INCOMPLETE
        elif not np.isfinite(point):  # every game left out of the aggregate: the rule's per-game part alone
            decision = WORSE if worse and not better else NONE
        elif lo > 0.5 and not worse:
            decision = BEATS
        elif hi < 0.5 or (worse and not better):
            decision = WORSE
        else:
            decision = NONE
        claims.append(Claim(b, pois[b], better, worse, decision))
    return BatchAnalysis(plan, tests, every, dict(random), normalisers, left_out, iqms, claims)


class ZeroCheck(NamedTuple):
    """A secondary outcome added during the runs, tested on seeds that had not run when it was written: on one game,
    the share of a run's training games that end after step `after` with a return of 0, of each tested label against
    the reference."""
    game: str
    after: int
    reference: str
    tested: tuple
    seen: tuple  # the seeds whose runs suggested the check: described, not tested
    seeds: tuple  # the held-out seeds the tests use
    alpha: float
    source: str


FREEWAY_ZEROS = ZeroCheck("Freeway-MinAtar", 1_500_000, "Vanilla", ("Small", "ABS"), tuple(range(1, 6)),
                          tuple(range(6, 11)), 0.05,
                          "docs/results-minatar-batches.md, \"A check added during the runs\"")


class ZeroTest(NamedTuple):
    label: str
    complete: bool  # the held-out runs of every tested label and of the reference are all in, each with a share
    diff: float  # the label's mean share - the reference's, over the held-out seeds
    p: float  # the exact two-sided permutation p of diff
    adjusted: float  # Holm's over the check's tests
    decision: str  # MORE, LESS, NONE, INCOMPLETE or UNDEFINED
    no_share: tuple = ()  # the held-out runs in without a share ("Small seed 7"), which leave the check UNDEFINED


class Spread(NamedTuple):
    mean: float
    lowest: float
    highest: float
    runs: int


class ZeroAnalysis(NamedTuple):
    check: ZeroCheck
    shares: dict  # label -> {seed: share, NaN for a run without one} over the check's seen and held-out seeds
    spread: dict  # label -> {"seen": Spread | None, "held": Spread | None}: the shares of those seeds that exist
    tests: list  # ZeroTest per tested label


def zero_share(steps, values, after: int) -> float:
    """The share of the training games ending after step `after` (one return per game, at the step it ended) whose
    return is 0; NaN when no game ends after it."""
    later = np.asarray(values, dtype=float)[np.asarray(steps, dtype=float) > after]
    return float(np.mean(later == 0)) if later.size else float("nan")


def spread(values) -> Spread | None:
    v = [x for x in values if np.isfinite(x)]
    return Spread(float(np.mean(v)), min(v), max(v), len(v)) if v else None


def zero_analysis(check: ZeroCheck, shares: dict) -> ZeroAnalysis:
    """The check's tests from shares: (game, label) -> {seed: zero_share of a run in, NaN where it has none}. Seeds
    outside the check's seen and held-out ones are left out. The tests wait until every held-out run of the
    reference and the tested labels is in; a run in without a share (its events damaged, or no game after the step)
    leaves them undecided, named."""
    mine = {lb: {k: float(v) for k, v in sorted(by_seed.items()) if k in check.seen + check.seeds}
            for (game, lb), by_seed in shares.items() if game == check.game}
    labels, nan = (check.reference, *check.tested), float("nan")
    every = all(set(check.seeds) <= set(mine.get(lb, {})) for lb in labels)
    missing = tuple(f"{lb} seed {k}" for lb in labels for k in check.seeds if every and not np.isfinite(mine[lb][k]))
    if not every or missing:
        tests = [ZeroTest(lb, False, nan, nan, nan, UNDEFINED if every else INCOMPLETE, missing)
                 for lb in check.tested]
    else:
        ref = [mine[check.reference][k] for k in check.seeds]
        tests = [ZeroTest(lb, True, float(np.mean(x) - np.mean(ref)), permutation_p(x, ref)[0], nan, INCOMPLETE)
                 for lb in check.tested for x in [[mine[lb][k] for k in check.seeds]]]
        tests = [t._replace(adjusted=q, decision=(MORE if t.diff > 0 else LESS) if q < check.alpha else NONE)
                 for t, q in zip(tests, holm([t.p for t in tests]))]
    spreads = {lb: {"seen": spread([v for k, v in s.items() if k in check.seen]),
                    "held": spread([v for k, v in s.items() if k in check.seeds])} for lb, s in mine.items()}
    return ZeroAnalysis(check, mine, spreads, tests)
