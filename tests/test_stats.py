"""Tests of reproduce/stats.py: the statistics on hand-made inputs, against hand values."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import events  # noqa: E402
from reproduce import figure_data  # noqa: E402
from reproduce import runs  # noqa: E402
from reproduce import stats  # noqa: E402
from reproduce import tables  # noqa: E402


def test_score_table_and_hns():
    table = runs.load_atari_scores()
    assert len(table) == 57
    assert sum(s["atari10"] for s in table.values()) == 10
    assert runs.benchmark_games("atari5", table) == ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"]
    b = table["Breakout"]  # random 1.7, human 30.5
    assert (b["random"], b["human"]) == (1.7, 30.5)
    np.testing.assert_allclose(stats.human_normalized_score([1.7, 30.5, 16.1, 59.3], 1.7, 30.5), [0, 1, 0.5, 2])
    assert stats.human_normalized_score(-17.5, -18.6, -16.4) == pytest.approx(0.5)  # DoubleDunk-like, negative
    assert runs.game_of("Breakout-v5") == runs.game_of("ALE/Breakout-v5") == "Breakout"
    assert runs.game_of("HalfCheetah-v5") == "HalfCheetah"


def test_iqm_known_answers():
    assert stats.iqm(np.arange(8).reshape(2, 4)) == pytest.approx(3.5)  # drops 0,1 and 6,7
    assert stats.iqm([[0, 1, 2, 100]]) == pytest.approx(1.5)  # an outlier does not move it
    point = stats.aggregate(np.array([[0.0, 2.0], [1.0, 3.0]]))  # IQM, median, mean, optimality gap
    np.testing.assert_allclose(point, [1.5, 1.5, 1.5, 1 - (0 + 1 + 1 + 1) / 4])


def test_improvement_rate_and_early_late():
    assert stats.improvement_rate(2.0, 1.0) == 1.0
    assert stats.improvement_rate(1.0, -2.0) == 1.5  # |other| in the denominator
    assert np.isnan(stats.improvement_rate(1.0, 0.0))
    steps, values = np.arange(0, 1001, 100), np.arange(0, 1001, 100) / 10
    assert stats.early_mean(steps, values, 1000) == 5.0  # steps 0, 100
    assert stats.late_variance(steps, values, 1000) == 25.0  # values 90, 100
    assert np.isnan(stats.late_variance(steps[:-1], values[:-1], 1000))  # one game in the window: no variance
    assert stats.finite(np.mean, [1.0, np.nan, 3.0]) == 2.0
    # Whole-run return: mean of the ten tenths' means. Tenth 1 holds steps 0, 50 (returns 0, 5: mean 2.5), tenths
    # 2-10 one game each at steps 100, ..., 900 (returns 10, ..., 90); 1000 falls in the last tenth with 90.
    steps = np.array([0, 50, *range(100, 1001, 100)])
    values = steps / 10
    tenths = [2.5, 10, 20, 30, 40, 50, 60, 70, 80, (90 + 100) / 2]
    assert stats.curve_area(steps, values, 1000) == pytest.approx(sum(tenths) / 10)
    assert stats.curve_area(steps, values, 1000) != pytest.approx(values.mean())  # not the mean over games
    assert stats.curve_area([0, 950], [4.0, 8.0], 1000) == 6.0  # empty tenths are left out
    assert np.isnan(stats.curve_area([], [], 1000))


def test_late_variance_is_per_game_whatever_the_rollout_length(tmp_path):
    """Identical per-game returns N(1000, 100^2) ending at the same rate, grouped into iterations of L = 64 / 32 / 16
    (so 80 / 40 / 20 games share one step): one event per game gives equal late variances, the old per-iteration
    mean gave a variance that shrinks with L."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(1)
    E, T = 8, 100_000
    late, old = {}, {}
    for L in (64, 32, 16):
        steps = np.arange(E * L, T + 1, E * L)
        steps = steps[steps >= 0.8 * T]  # only the late window matters here
        games = rng.normal(1000.0, 100.0, size=(len(steps), L * 5 // 4))  # 0.15 games per environment step
        w = SummaryWriter(str(tmp_path / f"L{L}"))
        for step, g in zip(steps, games):
            for x in g:
                w.add_scalar("charts/episodic_return", x, step)
        w.close()
        s, v = events.load_scalars(tmp_path / f"L{L}", ["charts/episodic_return"])["charts/episodic_return"]
        assert len(v) == games.size and np.all(np.diff(s) >= 0)  # every game kept, several per step
        np.testing.assert_allclose(np.sort(v), np.sort(games.ravel().astype(np.float32)))
        late[L] = stats.late_variance(s, v, T)
        sel = steps >= 0.9 * T
        old[L] = stats.late_variance(steps[sel], games[sel].mean(1), T)
        assert (s >= 0.9 * T).sum() > 1400
    for L in late:  # ~1500 games each: the sampling error of a variance is about 4%
        assert late[L] == pytest.approx(100.0 ** 2, rel=0.2)
    assert max(late.values()) / min(late.values()) < 1.3
    assert old[16] / old[64] > 2.5  # the bias the per-game events remove: 1/20 vs 1/80 of the game variance


def test_pairwise_wins_and_robust_improvement():
    values = {("g1", "A"): 2.0, ("g1", "B"): 1.0, ("g2", "A"): 1.0, ("g2", "B"): 3.0, ("g3", "A"): 5.0,
              ("g3", "B"): 5.0, ("g4", "A"): 1.0, ("g5", "B"): 1.0, ("g6", "A"): np.nan, ("g6", "B"): 1.0}
    games = ["g1", "g2", "g3", "g4", "g5", "g6"]
    assert stats.pairwise_wins(values, "A", "B", games) == (1, 3)  # g3 a tie, g4-g6 lack a value
    assert stats.pairwise_wins(values, "B", "A", games) == (1, 3)
    assert stats.pairwise_wins(values, "A", "B", games, min) == (1, 3)
    # PrivateEye (random 24.9, human 69571.3): 300 vs 100 is +266% in the paper's form on HNS, 0.29% robust.
    pe = runs.load_atari_scores()["PrivateEye"]
    hns_a, hns_b = (stats.human_normalized_score(x, pe["random"], pe["human"]) for x in (300.0, 100.0))
    assert stats.improvement_rate(hns_a, hns_b) == pytest.approx((300 - 100) / (100 - 24.9))
    assert stats.robust_improvement(300.0, 100.0, pe["random"], pe["human"]) == pytest.approx(
        200 / (69571.3 - 24.9))
    # A baseline above the human score is its own denominator: (50 - 40) / (40 - 1.7) on Breakout-like numbers.
    assert stats.robust_improvement(50.0, 40.0, 1.7, 30.5) == pytest.approx(10 / 38.3)
    # Without a score table (MuJoCo): symmetric relative difference, bounded, NaN only when both are 0.
    assert stats.robust_improvement(3600.0, 3000.0) == pytest.approx(600 / 3600)
    assert stats.robust_improvement(-100.0, 100.0) == pytest.approx(-2.0)
    assert np.isnan(stats.robust_improvement(0.0, 0.0))
    assert stats.finite(np.median, [1.0, np.nan, 3.0, 10.0]) == 3.0


def test_probability_of_improvement_by_hand_and_as_rliables():
    from rliable import metrics

    # one game: X's runs 1, 2, 3 against Y's 2, 0: 4 pairs above (1 > 0, 2 > 0, 3 > 2, 3 > 0), 1 tie (2 = 2)
    assert stats.probability_of_improvement([[1.0], [2.0], [3.0]], [[2.0], [0.0]]) == pytest.approx(4.5 / 6)
    assert stats.probability_of_improvement([[5.0, 1.0]], [[1.0, 5.0]]) == 0.5  # 1 on one game, 0 on the other
    assert np.isnan(stats.probability_of_improvement([[np.nan]], [[1.0]]))
    rng = np.random.default_rng(0)
    for runs_x, runs_y, games in ((10, 10, 5), (3, 7, 2), (1, 1, 1)):
        x, y = rng.integers(0, 4, (runs_x, games)).astype(float), rng.integers(0, 4, (runs_y, games)).astype(float)
        for a, b in ((x, y), (y, x), (x, x)):  # with ties, and equal arrays (rliable's 0.5 without counting)
            assert stats.probability_of_improvement(a, b) == metrics.probability_of_improvement(a, b)


def test_bootstrap_ci_contains_point_and_shrinks_with_seeds():
    rng = np.random.default_rng(0)
    games = rng.uniform(0.2, 2.0, size=5)
    widths = {}
    for n in (3, 30):
        scores = games + rng.normal(0, 0.3, size=(n, 5))
        point, ci = stats.bootstrap_ci({"x": scores}, reps=300, seed=1)
        lo, hi = ci["x"]
        assert np.all(lo <= point["x"] + 1e-12) and np.all(point["x"] <= hi + 1e-12)
        np.testing.assert_allclose(point["x"][0], stats.iqm(scores))
        widths[n] = hi - lo
    assert np.all(widths[30] < widths[3])


def test_bootstrap_ci_is_set_by_its_seed_alone():
    # rliable resamples with NumPy's global generator: whatever drew from it before must not move the intervals,
    # --seed must, and the caller's global stream must be left where it was.
    scores = np.random.default_rng(3).normal(size=(6, 4))
    cis = []
    for before in (1, 2):
        np.random.seed(before)
        cis.append(stats.bootstrap_ci({"x": scores}, reps=200, seed=7)[1]["x"])
        assert np.random.randint(1 << 30) == np.random.RandomState(before).randint(1 << 30)
    np.testing.assert_array_equal(cis[0], cis[1])
    other = stats.bootstrap_ci({"x": scores}, reps=200, seed=8)[1]["x"]
    assert not np.array_equal(other, cis[0])


def test_student_t_interval_by_hand():
    # 1, 2, 4: mean 7/3 = 2.3333; deviations -4/3, -1/3, 5/3, squares sum 42/9 = 4.6667, s^2 = 4.6667 / 2 = 2.3333,
    # s = 1.5275; t_{0.975, 2} = 4.3027 (t table, 2 df); half-width 4.3027 * 1.5275 / sqrt(3) = 3.7946.
    mean, lo, hi = stats.t_interval([1.0, 2.0, 4.0])
    assert mean == pytest.approx(2.3333, abs=1e-4)
    assert (hi - mean, mean - lo) == (pytest.approx(3.7946, abs=1e-4), pytest.approx(3.7946, abs=1e-4))
    assert (lo, hi) == (pytest.approx(-1.4613, abs=1e-4), pytest.approx(6.1279, abs=1e-4))
    # Two values 100, 150: s = 35.355, t_{0.975, 1} = 12.706, half-width 12.706 * 35.355 / sqrt(2) = 317.65.
    assert stats.t_interval([100.0, 150.0])[2] == pytest.approx(125 + 317.65, abs=0.01)
    # n = 1: a mean and no interval, and the table says so.
    mean, lo, hi = stats.t_interval([3600.0])
    assert mean == 3600.0 and np.isnan(lo) and np.isnan(hi)
    assert tables.t_text(stats.seed_stats({1: 3600.0})) == "n = 1, no interval"
    assert tables.t_text(stats.seed_stats({1: 1.0, 2: 2.0, 3: 4.0})) == "[-1.461, 6.128]"
    assert tables.seeds_text({1: 1.0, 2: 2.0, 3: 4.0}) == "1: 1.000, 2: 2.000, 3: 4.000"


def test_welch_interval_by_hand():
    # Equal sizes and spreads: a = 1, 2, 3 and b = 4, 5, 6 have s^2 = 1, v = s^2 / n = 1/3 each; diff -3,
    # se = sqrt(2/3) = 0.8165, df = (2/3)^2 / ((1/3)^2 / 2 + (1/3)^2 / 2) = 4, t_{0.975, 4} = 2.7764: half 2.2669.
    diff, lo, hi, df = stats.welch_interval([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (diff, df) == (pytest.approx(-3.0), pytest.approx(4.0))
    assert (lo, hi) == (pytest.approx(-5.2669, abs=1e-4), pytest.approx(-0.7331, abs=1e-4))
    # Unequal: a = 0, 2 (mean 1, s^2 2, v 1), b = 0, 0, 6 (mean 2, s^2 12, v 4): diff -1, se = sqrt(5) = 2.2361,
    # Welch-Satterthwaite df = (1 + 4)^2 / (1^2 / 1 + 4^2 / 2) = 25 / 9 = 2.7778 (a pooled t-test would have 3);
    # t_{0.975, 25/9} = 3.3314: half-width 3.3314 * 2.2361 = 7.4493.
    diff, lo, hi, df = stats.welch_interval([0.0, 2.0], [0.0, 0.0, 6.0])
    assert (diff, df) == (pytest.approx(-1.0), pytest.approx(25 / 9))
    assert (lo, hi) == (pytest.approx(-8.4493, abs=1e-4), pytest.approx(6.4493, abs=1e-4))
    # One run on a side, or no spread on either: a difference and no interval.
    assert np.isnan(stats.welch_interval([1.0], [2.0, 3.0])[1]) and stats.welch_interval([1.0], [2.0, 3.0])[0] == -1.5
    diff, lo, hi, df = stats.welch_interval([25.0, 25.0], [6.25, 6.25])
    assert diff == 18.75 and np.isnan(lo) and np.isnan(df)


def test_exact_permutation_p_by_enumeration():
    # 4, 5, 6 vs 1, 2, 3: of the C(6, 3) = 20 splits only the observed one and its mirror reach |diff| = 3.
    assert stats.permutation_p([4.0, 5.0, 6.0], [1.0, 2.0, 3.0]) == (pytest.approx(0.1), 20, True)
    # Overlap and ties: 1, 2, 3 vs 2, 3, 4, |diff| = 1. The pool 1, 2a, 2b, 3a, 3b, 4 sums to 15 and a split with
    # group sum S has diff (2S - 15) / 3, so |diff| >= 1 iff S <= 6 or S >= 9. With the 1: {2a,2b} 5, {2a,3a} 6,
    # {2a,3b} 6, {2b,3a} 6, {2b,3b} 6 (5 splits; {2a,4}, {2b,4} 7, {3a,3b} 7, {3a,4}, {3b,4} 8 do not); without it:
    # {2a,3a,4}, {2a,3b,4}, {2b,3a,4}, {2b,3b,4} 9 and {3a,3b,4} 10 (5 splits; the other five sum to 7 or 8).
    # p = 10 / 20 = 0.5.
    assert stats.permutation_p([1.0, 2.0, 3.0], [2.0, 3.0, 4.0]) == (pytest.approx(0.5), 20, True)
    # Unequal sizes: 10, 11 vs 1, 2, 3: diff (5S - 54) / 6 for a pair summing to S; the observed S = 21 gives 8.5, the
    # most negative S = 3 gives -6.5: only the observed split of C(5, 2) = 10 is as extreme, p = 0.1.
    assert stats.permutation_p([10.0, 11.0], [1.0, 2.0, 3.0]) == (pytest.approx(0.1), 10, True)
    # 200, 300 vs 100, 150 (C(4, 2) = 6): |diff| 125 for the observed split and its mirror, 75 and 25 for the others.
    assert stats.permutation_p([200.0, 300.0], [100.0, 150.0])[0] == pytest.approx(1 / 3)
    # Above the limit of enumerated relabellings a seeded sample is drawn instead: (1 + hits) / (1 + samples).
    p, n, exact = stats.permutation_p([4.0, 5.0, 6.0], [1.0, 2.0, 3.0], exact_limit=10, samples=2000)
    assert not exact and n == 2000 and p == pytest.approx(0.1, abs=0.03)


def min_p_statement(na: int, nb: int) -> str:
    """The report's statement of the smallest p with n_a vs n_b runs, from stats' numbers."""
    from math import comb

    return tables.min_p_statement(na, nb, stats.min_permutation_p(na, nb), comb(na + nb, na))


def test_smallest_possible_p_and_its_statement():
    assert stats.min_permutation_p(3, 3) == pytest.approx(2 / 20)
    assert stats.min_permutation_p(2, 3) == pytest.approx(1 / 10)
    assert stats.min_permutation_p(3, 4) == pytest.approx(1 / 35)
    assert stats.min_permutation_p(1, 1) == 1.0
    assert min_p_statement(3, 3) == ("with 3 vs 3 runs the smallest possible p is 0.10 (2 of 20 "
                                     "relabellings): no difference can reach p < 0.05")
    assert min_p_statement(3, 4) == ("with 3 vs 4 runs the smallest possible p is 0.029 (1 of 35 "
                                     "relabellings), below 0.05")
    assert min_p_statement(10, 10) == ("with 10 vs 10 runs the smallest possible p is 1.1e-05 (2 of 184,756 "
                                       "relabellings), below 0.05")  # 2 / C(20, 10) = 1.08e-5
    assert "no difference can reach" in min_p_statement(1, 1)


def test_tenth_means_and_rank_correlation_by_hand():
    # steps <= 100 are the first tenth of 1,000 (values 1, 2, 3), steps >= 900 the last (4, 5)
    assert stats.tenth_means([0, 50, 100, 500, 900, 1000], [1, 2, 3, 9, 4, 5], 1000) == (2.0, 4.5)
    assert np.isnan(stats.tenth_means([500], [1.0], 1000)).all()  # no value in either tenth
    assert stats.rank_correlation([1, 2, 3, 4], [0.9, 0.5, 0.2, 0.1]) == pytest.approx(-1.0)  # every one falls
    assert stats.rank_correlation([1, 2, 3, 4], [0.1, 0.2, 0.5, 0.9]) == pytest.approx(1.0)
    # ranks of [3, 1, 2] against 1, 2, 3: d = 2, -1, -1, rho = 1 - 6 * 6 / (3 * 8) = -0.5
    assert stats.rank_correlation([1, 2, 3], [3.0, 1.0, 2.0]) == pytest.approx(-0.5)
    assert np.isnan(stats.rank_correlation([1, 2], [2.0, 1.0]))  # fewer than 3 values
    assert np.isnan(stats.rank_correlation([1, 2, 3], [0.5, 0.5, 0.5]))  # constant: no ranks to correlate


def test_held_keeps_a_controller_value_until_the_next_measurement():
    nan = float("nan")
    got = stats.held(np.array([nan, 1.0, nan, nan, 3.0, nan, nan]), 5)
    np.testing.assert_array_equal(got, [nan, 1.0, 1.0, 1.0, 3.0, 3.0, nan])  # nothing before the first or past 5
    np.testing.assert_array_equal(stats.held(np.array([nan, nan]), 1), [nan, nan])
    # curve_rows holds each run to its end, or to its last measurement where that is later (b: 800 > 500 steps);
    # a run with an empty array of the tag is left out

    def run(total, steps, values):
        return runs.Run("A", Path("x"), "Hopper-v4", "Hopper", 1, 0.0, total, total,
                        scalars={"adapt/num_steps": (np.array(steps, float), np.array(values, float))})
    step, mean, lo, hi, n = figure_data.curve_band([run(1000, [100, 900], [16, 20]), run(500, [300, 800], [32, 48]),
                                                run(1000, [], [])], "adapt/num_steps", 10)
    assert step.tolist() == [150.0, 250.0, 350.0, 450.0, 550.0, 650.0, 750.0, 850.0, 950.0]
    assert n.tolist() == [1, 1, 2, 2, 2, 2, 2, 2, 1] and mean.tolist()[5] == 24.0 and mean.tolist()[7] == 32.0


def reference_permutation_p(a, b, exact_limit=stats.EXACT_RELABELLINGS, samples=stats.SAMPLED_RELABELLINGS, seed=0):
    """permutation_p's definition, split by split: correctly rounded group sums (math.fsum) of every split, or of the
    seeded draws above exact_limit."""
    from itertools import combinations
    from math import comb, fsum

    x, na, nb = np.array([*a, *b], dtype=float), len(a), len(b)

    def diff(idx):
        mask = np.zeros(len(x), dtype=bool)
        mask[list(idx)] = True
        return fsum(x[mask]) / na - fsum(x[~mask]) / nb
    observed = abs(diff(range(na)))
    least = observed - 1e-12 * max(1.0, observed)
    n = comb(na + nb, na)
    if n <= exact_limit:
        return sum(abs(diff(i)) >= least for i in combinations(range(len(x)), na)) / n, n, True
    rng = np.random.default_rng(seed)
    hits = sum(abs(diff(rng.permutation(len(x))[:na])) >= least for _ in range(samples))
    return (1 + hits) / (1 + samples), samples, False


def test_permutation_p_counts_ties_as_its_definition_does():
    """The chunked float sums decide each split as the correctly rounded sums do: on pools where plain float sums of
    different orders disagree (1e16 beside 1: 1e16 + 1 + 1 is 1e16 in order, 1e16 + 2 correctly rounded) and with
    many equal values, p is the definition's exactly; so are the seeded draws above the limit."""
    rng = np.random.default_rng(5)
    pool = [1e16, -1e16, 1.0, 2.0, 0.5, 3.0, 0.1, 0.2, 0.3, 1e-3]
    for _ in range(40):
        na, nb = rng.integers(1, 7, size=2)
        a, b = rng.choice(pool, na).tolist(), rng.choice(pool, nb).tolist()
        assert stats.permutation_p(a, b) == reference_permutation_p(a, b), (a, b)
    a, b = [1e16, 1.0, 1.0, 0.3], [1e16, 2.0, 0.0, 0.1, 0.2]
    assert stats.permutation_p(a, b, exact_limit=10, samples=300, seed=3) == reference_permutation_p(
        a, b, exact_limit=10, samples=300, seed=3)


def test_permutation_p_of_10_vs_10_runs_by_every_split(monkeypatch):
    """10 vs 10 runs (the 10-seed MuJoCo grid): all C(20, 10) = 184,756 splits. Integer returns make the check
    independent of float sums: a split with first-group sum S has difference of means (2 S - T) / 10 (T: the pooled
    sum), so it counts when |2 S - T| >= |2 S_observed - T|. The splits are the subsets of ten of the 20 runs: the
    sums and sizes of all 2^20 subsets, built one run at a time (each subset without it, then with it)."""
    a = [3561, 3438, 3665, 2900, 3120, 3702, 3390, 3015, 3544, 3281]
    b = [2988, 3105, 2850, 3311, 2790, 3050, 2975, 3202, 2899, 3140]
    sums, sizes = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    for x in a + b:
        sums, sizes = np.concatenate([sums, sums + x]), np.concatenate([sizes, sizes + 1])
    assert np.sum(sizes == 10) == 184_756
    t = sum(a) + sum(b)
    hits = np.sum(np.abs(2 * sums[sizes == 10] - t) >= abs(2 * sum(a) - t))
    p, n, exact = stats.permutation_p(a, b)
    assert (n, exact) == (184_756, True) and p == hits / 184_756
    assert 0 < p < 0.01  # the ten PPO+ABS-like returns lie above most of the others
    # the splits listed once and kept (splits.split_table) or, above KEPT_SPLITS, listed chunk by chunk: the same p
    assert stats.KEPT_SPLITS >= 184_756 and stats.split_table(20, 10).shape == (184_756, 10)
    monkeypatch.setattr(stats, "KEPT_SPLITS", 0)
    assert stats.permutation_p(a, b) == (p, n, exact)


def test_permutation_p_of_a_value_that_is_not_finite_or_an_empty_side_is_nan():
    """No finite difference of means to rank the splits by: NaN, which decides nothing (NaN < alpha is false), where
    counting would give p = 0 (every |diff| compares false with a NaN observed difference)."""
    for bad in (float("nan"), float("inf"), -float("inf")):
        p, n, exact = stats.permutation_p([1.0, bad, 3.0], [1.0, 2.0, 3.0])
        assert np.isnan(p) and n == 0
    assert np.isnan(stats.permutation_p([], [1.0, 2.0])[0])


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 (m = 3): 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04, raised to the 0.06 before
    # it (step-down: an adjusted p never falls below a smaller p's); given back in the input order
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # m = 4: 4 x 0.01 = 0.04, 3 x 0.02 = 0.06, 2 x 0.03 = 0.06, 1 x 0.5 = 0.5
    assert stats.holm([0.02, 0.5, 0.01, 0.03]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    # capped at 1: 3 x 0.3 = 0.9, 2 x 0.6 = 1.2 -> 1, 1 x 0.9 = 0.9 -> 1 (the running maximum)
    assert stats.holm([0.3, 0.6, 0.9]) == pytest.approx([0.9, 1.0, 1.0])
    assert stats.holm([0.01, 0.01]) == pytest.approx([0.02, 0.02])  # ties: 2 x 0.01, then max(0.02, 0.01)
    assert stats.holm([0.2]) == [0.2] and stats.holm([]) == []
    # never above Bonferroni's min(1, m p), never below p
    p = np.random.default_rng(0).uniform(size=7)
    adjusted = np.array(stats.holm(p))
    assert np.all(adjusted <= np.minimum(1, 7 * p) + 1e-15) and np.all(adjusted >= p)
    for bad in ([0.1, 1.5], [float("nan")], [-0.1]):
        with pytest.raises(ValueError, match=r"holm: p-values must lie in \[0, 1\]"):
            stats.holm(bad)


def test_hedges_g_by_hand():
    # 1, 2, 3 vs 4, 5, 6: difference -3, pooled s^2 = (2 x 1 + 2 x 1) / 4 = 1; correction 1 - 3 / (4 x 6 - 9) = 0.8
    assert stats.hedges_g([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(-2.4)
    assert stats.hedges_g([4.0, 5.0, 6.0], [1.0, 2.0, 3.0]) == pytest.approx(2.4)
    # 0, 2 (mean 1, squares 2) vs 0, 0, 6 (mean 2, squares 4 + 4 + 16 = 24): pooled s^2 = 26 / 3, s = 2.94392;
    # -1 / 2.94392 = -0.339683, times 1 - 3 / 11 = 8 / 11: -0.247042
    assert stats.hedges_g([0.0, 2.0], [0.0, 0.0, 6.0]) == pytest.approx(-0.247042, abs=1e-6)
    # one value on a side: the pooled s from the other side alone (1, 3, 2: squares 2, df 2, s = 1); difference
    # 5 - 2 = 3, correction 1 - 3 / (16 - 9) = 4 / 7
    assert stats.hedges_g([5.0], [1.0, 3.0, 2.0]) == pytest.approx(3 * 4 / 7)
    # undefined: a side empty, fewer than 4 values (df 1: the correction would be 1 - 3 / 3 = 0), no spread
    for a, b in (([], [1.0, 2.0]), ([1.0], [2.0]), ([5.0], [1.0, 3.0]), ([1.0, 1.0], [1.0, 1.0]),
                 ([5.0, 5.0], [3.0, 3.0])):
        assert np.isnan(stats.hedges_g(a, b)), (a, b)


def test_compare_states_each_cell_the_best_the_wins_and_the_differences_by_hand():
    """Two games, three labels, A vs C and B vs C compared. g1: A 1, 2, 3 (mean 2), B 4, 6 (5), C 2, 2 (2); g2: A 0, 10
    (5), C 1, 2, 3, 4 (mean 2.5; IQM of four values: the middle two, 2.5 too); B did not run g2."""
    values = {("g1", "A"): {1: 1.0, 2: 2.0, 3: 3.0}, ("g1", "B"): {1: 4.0, 2: 6.0}, ("g1", "C"): {1: 2.0, 2: 2.0},
              ("g2", "A"): {1: 0.0, 2: 10.0}, ("g2", "C"): {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}}
    c = stats.compare(values, ["g1", "g2"], ["A", "B", "C"], [("A", "C"), ("B", "C")])
    a = c.seeds[("g1", "A")]  # mean 2, s = 1, t_{0.975, 2} = 4.3027: 2 +- 2.4841; population std sqrt(2/3)
    assert (a.mean, a.lo, a.hi) == (2.0, pytest.approx(2 - 2.4841, abs=1e-4), pytest.approx(2 + 2.4841, abs=1e-4))
    assert a.std == pytest.approx(np.sqrt(2 / 3)) and a.iqm == 2.0 and a.values == values[("g1", "A")]
    assert c.seeds[("g2", "C")].iqm == 2.5 and c.trims  # four seeds: its IQM trims one from each end
    # best by the mean: B on g1 (5), A on g2 (5 > 2.5); counted over g1 alone, the only game with every label
    assert c.best == {"g1": {"B"}, "g2": {"A"}} and c.complete == ["g1"]
    assert c.best_counts == {"A": 0, "B": 1, "C": 0}
    assert c.wins == {("A", "C"): (1, 2), ("B", "C"): (1, 1)}  # A ties C on g1 (2 = 2: no win), beats it on g2
    assert [(d.game, d.a, d.b, d.diff, d.na, d.nb, d.splits) for d in c.differences] == [
        ("g1", "A", "C", 0.0, 3, 2, 10), ("g2", "A", "C", 2.5, 2, 4, 15), ("g1", "B", "C", 3.0, 2, 2, 6)]
    d = c.differences[2]  # 4, 6 vs 2, 2: C(4, 2) = 6 splits, |diff| 3 for the observed one and its mirror
    assert (d.p, d.relabellings, d.exact, d.smallest_p) == (pytest.approx(1 / 3), 6, True, pytest.approx(1 / 3))
    assert d.df == pytest.approx(1.0)  # C has no spread: Welch's df is B's n - 1
    # lower is better (a variance), by the IQM, over the games given, without differences
    c = stats.compare(values, ["g1", "g2"], ["A", "B", "C"], [("A", "C")], min, "iqm", ["g1", "g2"], test=False)
    assert c.best == {"g1": {"A", "C"}, "g2": {"C"}} and c.best_counts == {"A": 1, "B": 0, "C": 2}
    assert c.wins == {("A", "C"): (0, 2)} and c.differences == []
    assert stats.compare({}, ["g1"], ["A"], []).trims is False
