"""The report's statistics: arrays and numbers in, numbers out; no file is read and no text is written here.

- scores: the human-normalised score and the improvement rates (the paper's form and a robust one);
- across games: the rliable aggregates (IQM, median, mean, optimality gap), the probability of improvement, and
  their stratified bootstrap;
- across the few runs of one game: the Student-t interval of a mean, Welch's interval of a difference of means
  (scipy's `ttest_1samp` and `ttest_ind(equal_var=False)`), the exact two-sided permutation p, Hedges' g; across
  tests, Holm's adjusted p-values and the Bonferroni bound;
- a per-seed metric across labels (compare): each game and label's seeds summarised, the best label per game,
  pairwise wins, and each compared pair's differences;
- along one run's training curve: the early mean, the late variance, the area per step, the burn-in share; curves
  binned over runs, the figures' bands (min-max, or the Student-t interval of the mean).
"""
from __future__ import annotations

import warnings
from itertools import chain, combinations, islice
from math import comb
from typing import NamedTuple

import numpy as np
import scipy.stats
from rliable import library as rly
from rliable import metrics

from .splits import KEPT_SPLITS, SPLIT_CHUNK, split_diff, split_hits, split_table

EARLY, LATE = 0.1, 0.9  # first 10% / last 10% of training steps
LEVEL = 0.95  # of every interval
EXACT_RELABELLINGS = 1_000_000  # the permutation test enumerates up to this many relabellings, else samples them
SAMPLED_RELABELLINGS = 100_000
IQM_TRIMS_FROM = 4  # the IQM (25% trimmed mean, scipy's trim_mean) of n < 4 values trims int(0.25 n) = 0 of them


# ----------------------------------------------------------------------------- scores
def human_normalized_score(score, random: float, human: float):
    """HNS = (score - random) / (human - random)."""
    return (np.asarray(score, dtype=float) - random) / (human - random)


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


def finite(stat, xs) -> float:
    """stat (np.mean, np.median) of the finite values of xs, NaN when there is none: e.g. the mean improvement rate
    over the games it is defined on."""
    v = [x for x in xs if np.isfinite(x)]
    return float(stat(v)) if v else float("nan")


# ----------------------------------------------------------------------------- across games (rliable)
def iqm(scores) -> float:
    """Interquartile mean (25% trimmed mean) over all runs and games."""
    return float(metrics.aggregate_iqm(np.asarray(scores, dtype=float)))


def aggregate(scores: np.ndarray) -> np.ndarray:
    """(runs x games) scores -> [IQM, median, mean, optimality gap] (measures.AGGREGATES names them)."""
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_median(scores),
                     metrics.aggregate_mean(scores), metrics.aggregate_optimality_gap(scores)])


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's P(X > Y): per game (column) the share of (run of X, run of Y) pairs in which X's score is higher,
    ties counting one half, averaged over the games; NaN when a score is not finite. Counted here over the pairs at
    once: rliable's metrics.probability_of_improvement gets the same counts from scipy's Mann-Whitney U, one call per
    game (about 8 ms), and the bootstrap calls it thousands of times (tests/test_stats.py checks the two agree)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return float("nan")
    d = x[:, None, :] - y[None, :, :]  # runs of X x runs of Y x games
    u = (d > 0).sum(axis=(0, 1)) + 0.5 * (d == 0).sum(axis=(0, 1))  # Mann-Whitney's U of X, per game
    return float(np.mean(u / (x.shape[0] * y.shape[0])))


def bootstrap_ci(score_dict: dict[str, np.ndarray], func=aggregate, reps: int = 2000, seed: int = 0,
                 task_bootstrap: bool = False):
    """Point estimates and 95% stratified-bootstrap CIs (runs resampled within each game; with task_bootstrap, the
    games resampled too, rliable's task bootstrap).

    score_dict maps a name to a (runs x games) matrix. Returns ({name: point}, {name: 2 x k [lo; hi]}).
    The same seed gives the same intervals: rliable's StratifiedBootstrap draws its resamples from NumPy's global
    generator (it ignores random_state), so the global generator is seeded here and restored afterwards."""
    outer = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch's RandomState deprecation notice
            return rly.get_interval_estimates(score_dict, func, reps=reps, task_bootstrap=task_bootstrap,
                                              random_state=np.random.RandomState(seed))
    finally:
        np.random.set_state(outer)


# ----------------------------------------------------------------------------- the few runs of one game
def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, lo, hi): the Student-t interval mean +- t_{(1+level)/2, n-1} * s / sqrt(n), s the sample standard
    deviation (ddof 1), as scipy's ttest_1samp gives it. With one value (or none) there is no interval: lo and hi
    are NaN."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return float("nan"), float("nan"), float("nan")
    m = float(np.mean(x))
    if len(x) < 2:
        return m, float("nan"), float("nan")
    if np.all(x == x[0]):  # no spread: the interval is the point (scipy warns and divides 0 by 0)
        return m, m, m
    lo, hi = scipy.stats.ttest_1samp(x, 0.0).confidence_interval(level)
    return m, float(lo), float(hi)


def welch_interval(a, b, level: float = LEVEL) -> tuple[float, float, float, float]:
    """(mean(a) - mean(b), lo, hi, df): Welch's interval diff +- t_{(1+level)/2, df} * sqrt(s_a^2/n_a + s_b^2/n_b)
    with the Welch-Satterthwaite df = (v_a + v_b)^2 / (v_a^2/(n_a-1) + v_b^2/(n_b-1)), v = s^2/n, as scipy's
    ttest_ind(equal_var=False) gives it. lo, hi and df are NaN when a side has fewer than two values, or when neither
    side has any spread (no df)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(np.mean(a) - np.mean(b)) if len(a) and len(b) else float("nan")
    if len(a) < 2 or len(b) < 2 or np.var(a, ddof=1) + np.var(b, ddof=1) == 0:
        return diff, float("nan"), float("nan"), float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one side without spread: scipy's precision notice
        res = scipy.stats.ttest_ind(a, b, equal_var=False)
        lo, hi = res.confidence_interval(level)
    return diff, float(lo), float(hi), float(res.df)


def permutation_p(a, b, exact_limit: int = EXACT_RELABELLINGS, samples: int = SAMPLED_RELABELLINGS,
                  seed: int = 0) -> tuple[float, int, bool]:
    """(p, relabellings, exact): the two-sided permutation test of the difference of means. Every split of the
    pooled n_a + n_b values into groups of n_a and n_b (all C(n_a + n_b, n_a) of them, the observed one included)
    gives a difference of means; p = the share with |diff| >= |observed diff| - 1e-12 * max(1, |observed diff|)
    (a float tolerance, 1e-12 for differences up to 1 and relative above). Group sums are correctly rounded
    (math.fsum), so splits with equal sums, and the mirror split when n_a = n_b, tie exactly. Above exact_limit
    relabellings, `samples` random ones (seeded) are drawn instead and p = (1 + hits) / (1 + samples), exact False.
    NaN when a side is empty or holds a value that is not finite. (scipy's permutation_test defines the two-sided p
    otherwise, as twice the smaller one-sided p.) The splits are counted in chunks, with plain float sums
    (split_hits): C(20, 10) = 184,756 in a fraction of a second, the splits themselves listed once per (n_a, n_b)
    up to KEPT_SPLITS of them (split_table; a report tests many cells of the same size)."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    na, nb = len(a), len(b)
    x = np.array(a + b)
    if not na or not nb or not np.all(np.isfinite(x)):  # no finite difference of means to rank the splits by
        return float("nan"), 0, True
    n, total = comb(na + nb, na), len(x)
    observed = abs(split_diff(x, range(na), na, nb))
    least = observed - 1e-12 * max(1.0, observed)
    if n <= min(exact_limit, KEPT_SPLITS):
        table = split_table(total, na)
        return sum(split_hits(x, table[i:i + SPLIT_CHUNK], nb, least) for i in range(0, n, SPLIT_CHUNK)) / n, n, True
    if n <= exact_limit:
        splits, hits = combinations(range(total), na), 0
        while len(chunk := np.fromiter(chain.from_iterable(islice(splits, SPLIT_CHUNK)), dtype=np.intp)):
            hits += split_hits(x, chunk.reshape(-1, na), nb, least)
        return hits / n, n, True
    rng = np.random.default_rng(seed)
    drawn = np.array([rng.permutation(total)[:na] for _ in range(samples)])  # the generator's stream, draw by draw
    hits = sum(split_hits(x, drawn[i:i + SPLIT_CHUNK], nb, least) for i in range(0, samples, SPLIT_CHUNK))
    return (1 + hits) / (1 + samples), samples, False


def min_permutation_p(na: int, nb: int) -> float:
    """The smallest p the two-sided exact permutation test can give with n_a vs n_b runs, whatever the values:
    only the observed split (and, for equal sizes, its mirror, which has the same |diff|) can be the most extreme,
    so 2 / C(n, n_a) for n_a = n_b and 1 / C(n, n_a) otherwise."""
    return (2 if na == nb else 1) / comb(na + nb, na)


def sign_p(wins: int, n: int) -> float:
    """The chance of `wins` or more of n games for a label that wins each with probability 1/2 (a coin)."""
    return sum(comb(n, k) for k in range(wins, n + 1)) / 2 ** n


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: with the m p-values sorted ascending, the i-th
    smallest's adjusted p is the largest of (m - j + 1) p_(j) over j <= i, at most 1. Each is then compared with
    alpha itself, for a family-wise error of alpha over the m tests (Holm 1979)."""
    p = np.asarray(pvalues, dtype=float)
    if np.any(~((p >= 0) & (p <= 1))):
        raise ValueError(f"holm: p-values must lie in [0, 1], got {list(p)}")
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(len(p))
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    return [float(x) for x in adjusted]


def bonferroni(p: float, m: int) -> float:
    """The Bonferroni bound min(1, m p) on one of m tests' adjusted p: never below its Holm-adjusted p (holm)."""
    return min(1.0, m * p)


def hedges_g(a, b) -> float:
    """Hedges' g: (mean(a) - mean(b)) / s_pooled, s_pooled^2 = ((n_a - 1) s_a^2 + (n_b - 1) s_b^2) / (n_a + n_b - 2)
    (s^2: the sample variance, ddof 1), times the small-sample correction 1 - 3 / (4 (n_a + n_b) - 9) (Hedges 1981's
    approximation of the exact one, which needs df = n_a + n_b - 2 >= 2: at df = 1 the approximation is 0 whatever
    the data). NaN when it is undefined: a side empty, fewer than 4 values in all, or no spread (s_pooled = 0)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = len(a), len(b)
    if not na or not nb or na + nb < 4:
        return float("nan")
    ss = np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2)
    pooled = np.sqrt(ss / (na + nb - 2))
    if not pooled > 0:
        return float("nan")
    return float((a.mean() - b.mean()) / pooled * (1 - 3 / (4 * (na + nb) - 9)))


def best_by(values: dict, games, labels, pick=max) -> dict:
    """game -> set of labels with the best value (pick=max or min) among the labels that ran it; ties
    count for every tied label."""
    best = {}
    for g in games:
        v = {lb: values[(g, lb)] for lb in labels if np.isfinite(values.get((g, lb), np.nan))}
        best[g] = {lb for lb, x in v.items() if x == pick(v.values())} if v else set()
    return best


def pairwise_wins(values: dict, a: str, b: str, games, pick=max) -> tuple[int, int]:
    """(games where a beats b, games both have a finite value): the paper's "ABS wins 7/10" against one
    baseline. pick=max: higher is better; pick=min: lower is better. A tie is not a win."""
    both = [g for g in games if np.isfinite(values.get((g, a), np.nan)) and np.isfinite(values.get((g, b), np.nan))]
    better = (lambda x, y: x > y) if pick is max else (lambda x, y: x < y)
    return sum(better(values[(g, a)], values[(g, b)]) for g in both), len(both)


# ----------------------------------------------------------------------------- per-seed values across labels
class Seeds(NamedTuple):
    """What the report states of one game and label's per-seed values (seed_stats)."""
    values: dict  # seed -> value
    mean: float
    lo: float  # the Student-t 95% interval of the mean (t_interval): NaN with one seed
    hi: float
    std: float  # the population standard deviation over the seeds
    iqm: float  # the IQM over the seeds: the mean where it trims nothing (fewer than IQM_TRIMS_FROM seeds)


def seed_stats(values: dict) -> Seeds:
    x = list(values.values())
    mean, lo, hi = t_interval(x)
    return Seeds(values, mean, lo, hi, float(np.std(x)), mean if len(x) < IQM_TRIMS_FROM else iqm(x))


class Difference(NamedTuple):
    """One compared pair A vs B on one game: A - B of the means, Welch's interval, the exact permutation p."""
    game: str
    a: str
    b: str
    diff: float
    lo: float  # Welch's 95% interval (welch_interval): NaN with one run on a side or no spread
    hi: float
    df: float
    p: float  # permutation_p
    relabellings: int  # the relabellings it counted: all of them when exact, else the sampled ones
    exact: bool
    na: int
    nb: int
    splits: int  # C(n_a + n_b, n_a), every relabelling
    smallest_p: float  # min_permutation_p(n_a, n_b)


def difference(game: str, a: str, b: str, xa: list, xb: list) -> Difference:
    p, n, exact = permutation_p(xa, xb)
    return Difference(game, a, b, *welch_interval(xa, xb), p, n, exact, len(xa), len(xb),
                      comb(len(xa) + len(xb), len(xa)), min_permutation_p(len(xa), len(xb)))


class Compared(NamedTuple):
    """One per-seed metric over the games, labels and compared pairs (compare)."""
    seeds: dict  # (game, label) -> Seeds
    pick: object  # the better of two points: max or min
    best: dict  # game -> the labels with the best point (best_by; ties count for each)
    complete: list  # the games the best counts are over
    best_counts: dict  # label -> in how many of those games it is best
    wins: dict  # (a, b) -> (games a beats b, games both have a point) (pairwise_wins)
    differences: list  # a Difference per compared pair and game both have values for
    trims: bool  # some game and label has IQM_TRIMS_FROM seeds or more: its IQM is not its mean


def compare(values: dict, games, labels, pairs, pick=max, point: str = "mean", complete=None,
            test: bool = True) -> Compared:
    """values (game, label) -> {seed: value}: each cell's Seeds, the best label per game and the pairwise wins on the
    cells' `point` ("mean" or "iqm"), the best counts over `complete` (default: the games every label has values
    for) and, with `test`, the differences of every compared pair."""
    seeds = {k: seed_stats(v) for k, v in values.items()}
    points = {k: getattr(s, point) for k, s in seeds.items()}
    best = best_by(points, games, labels, pick)
    complete = [g for g in games if all((g, lb) in values for lb in labels)] if complete is None else complete
    differences = [difference(g, a, b, list(values[(g, a)].values()), list(values[(g, b)].values()))
                   for a, b in pairs for g in games if (g, a) in values and (g, b) in values] if test else []
    return Compared(seeds, pick, best, complete, {lb: sum(lb in best[g] for g in complete) for lb in labels},
                    {(a, b): pairwise_wins(points, a, b, games, pick) for a, b in pairs}, differences,
                    any(len(v) >= IQM_TRIMS_FROM for v in values.values()))


# ----------------------------------------------------------------------------- along one training curve
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


def burn_in_share(steps, window: int, total_steps: float) -> tuple[float, float]:
    """(the step burn-in ends at, its share of the early window): ABS holds L = L_min until its W-th divergence
    measurement (the first that moves L), so burn-in ends at the step that measurement was logged at, one event per
    measurement of adapt/num_steps (or adapt/batch_size); a run with fewer than W measurements never left it (inf).
    The early window is the first 10% of training steps (EARLY), as in early_mean."""
    steps = np.sort(np.asarray(steps, dtype=float))
    end = float(steps[window - 1]) if len(steps) >= window else float("inf")
    early = EARLY * total_steps
    return end, (min(end, early) / early if early > 0 else float("nan"))


def first_move(steps, values) -> float:
    """The step at which a logged L (sorted by step) first differs from its first value, inf if it never does: with
    burn_in_share's window, how long an ABS run actually ran at L_min (burn-in, and after it while the divergence
    kept L there)."""
    values = np.asarray(values)
    moved = np.flatnonzero(values != values[0]) if len(values) else []
    return float(np.asarray(steps)[moved[0]]) if len(moved) else float("inf")


def tenth_means(steps, values, end: float) -> tuple[float, float]:
    """(the mean of the values logged in the first tenth of the steps [0, end], in the last tenth): where a divergence
    starts and ends over a run (NaN for a tenth without a value)."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    first, last = values[steps <= 0.1 * end], values[steps >= 0.9 * end]
    return (float(first.mean()) if len(first) else float("nan"), float(last.mean()) if len(last) else float("nan"))


def rank_correlation(steps, values) -> float:
    """Spearman's rank correlation of the values with their steps: -1 when every value is below the one before it,
    negative when they mostly fall over training (the paper's "monotonically decreases"), 0 with no monotone trend;
    NaN for fewer than 3 values or constant ones (no ranks to correlate)."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if len(values) < 3 or np.all(values == values[0]) or np.all(steps == steps[0]):
        return float("nan")
    rho = float(scipy.stats.spearmanr(steps, values).statistic)
    return 0.0 if abs(rho) < 1e-12 else rho  # no trend is 0, not a rounding error's sign (-1e-17 shows as -0.00)


def binned(steps, values, edges: np.ndarray) -> np.ndarray:
    """Mean of values per step bin (NaN for empty bins)."""
    idx = np.clip(np.digitize(steps, edges[1:-1]), 0, len(edges) - 2)
    sums = np.bincount(idx, values, len(edges) - 1)
    counts = np.bincount(idx, None, len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def held(curve: np.ndarray, last: int) -> np.ndarray:
    """A binned curve of a quantity that holds between its measurements (the schedule's divergence and L): each
    empty bin from the first measured one to bin `last` (where the run ended) takes the value of the latest
    measured bin before it. Without this, a bin that only some runs measured in averages over those runs alone
    (the mean over games of runs whose measurements fall at different steps jumps between them)."""
    out = np.array(curve, dtype=float)
    idx = np.where(np.isnan(out), -1, np.arange(len(out)))
    np.maximum.accumulate(idx, out=idx)
    fill = (idx >= 0) & (np.arange(len(out)) <= last)
    out[fill] = out[idx[fill]]
    return out


def curves_band(curves: list, end: float, bins: int, hold: bool, spread=None) -> tuple[np.ndarray, ...]:
    """(bin centre, mean, min, max, n) over the bins of [0, end] that hold a value of any curve, of curves given as
    (steps, values, last step): each curve binned (binned); with hold, a quantity that holds between its
    measurements, each curve keeps its latest value in the bins it did not measure in, up to the bin of its last step
    (held), so that every bin averages every curve that has started. spread: the band across the binned curves,
    band (min and max, the default) or t_band (the Student-t 95% interval of the mean)."""
    edges = np.linspace(0, end, bins + 1)
    binned_curves = [binned(steps, values, edges) for steps, values, _ in curves]
    if hold:
        last = [int(np.clip(np.digitize(step, edges[1:-1]), 0, bins - 1)) for _, _, step in curves]
        binned_curves = [held(c, k) for c, k in zip(binned_curves, last)]
    mean, lo, hi, n = (spread or band)(binned_curves)
    keep = n > 0
    return (0.5 * (edges[1:] + edges[:-1]))[keep], mean[keep], lo[keep], hi[keep], n[keep]


def band(curves: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Across-run mean, min, max and count per bin of binned curves."""
    a = np.vstack(curves)
    n = np.sum(~np.isnan(a), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins
        return np.nanmean(a, 0), np.nanmin(a, 0), np.nanmax(a, 0), n


def t_band(curves: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Across-run mean, Student-t 95% interval of the mean (t_interval: NaN where one run has a value) and count
    per bin of binned curves."""
    a = np.vstack(curves)
    cells = [t_interval(col[~np.isnan(col)]) for col in a.T]
    return (*(np.array([c[k] for c in cells]) for k in range(3)), np.sum(~np.isnan(a), axis=0))
