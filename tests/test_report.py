"""Tests of reproduce/report.py: statistics on hand-made inputs, and the whole report on a synthetic
fixture of runs (eval_results.json + TensorBoard events written with SummaryWriter)."""
import csv
import errno
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))
import events  # noqa: E402
import figures  # noqa: E402
import measures  # noqa: E402
import report  # noqa: E402
import runs  # noqa: E402
import sections  # noqa: E402
import stats  # noqa: E402

FIGURES = ("learning_curves", "adapt", "improvement_rate", "aggregates")


# ----------------------------------------------------------------------------- statistics
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


def test_final_training_return_is_the_mean_of_the_last_games_in_step_order():
    run = runs.Run("PPO", Path("."), "Hopper-v4", "Hopper", 1, 0.0, 150, 150)
    assert np.isnan(measures.final_training_return(run, 100))  # no games logged
    steps = np.repeat(np.arange(75.0), 2)  # two games end at each step
    run.scalars[runs.RETURN_TAG] = (steps, np.arange(1.0, 151.0))
    assert measures.final_training_return(run, 100) == pytest.approx(np.mean(np.arange(51.0, 151.0)))  # 100.5
    assert measures.final_training_return(run, 10) == pytest.approx(145.5)
    assert measures.final_training_return(run, 1000) == pytest.approx(75.5)  # fewer games than asked: all of them
    data = {"PPO": {"Hopper": {1: run, 2: copy_run(run, 50.0)}}}
    assert measures.per_seed(data, ["Hopper"], lambda r: measures.final_training_return(r, 10)) == {("Hopper", "PPO"): {1: 145.5, 2: 195.5}}


def copy_run(run, shift):
    import dataclasses
    steps, values = run.scalars[runs.RETURN_TAG]
    return dataclasses.replace(run, seed=run.seed + 1, scalars={runs.RETURN_TAG: (steps, values + shift)})


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


# ----------------------------------------------------------------------------- few runs of one game
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
    assert sections.t_text({1: 3600.0}) == "n = 1, no interval"
    assert sections.t_text({1: 1.0, 2: 2.0, 3: 4.0}) == "[-1.461, 6.128]"
    assert sections.seeds_text({1: 1.0, 2: 2.0, 3: 4.0}) == "1: 1.000, 2: 2.000, 3: 4.000"


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


def test_smallest_possible_p_and_its_statement():
    assert stats.min_permutation_p(3, 3) == pytest.approx(2 / 20)
    assert stats.min_permutation_p(2, 3) == pytest.approx(1 / 10)
    assert stats.min_permutation_p(3, 4) == pytest.approx(1 / 35)
    assert stats.min_permutation_p(1, 1) == 1.0
    assert sections.min_p_statement(3, 3) == ("with 3 vs 3 runs the smallest possible p is 0.10 (2 of 20 "
                                            "relabellings): no difference can reach p < 0.05")
    assert sections.min_p_statement(3, 4) == ("with 3 vs 4 runs the smallest possible p is 0.029 (1 of 35 "
                                            "relabellings), below 0.05")
    assert "no difference can reach" in sections.min_p_statement(1, 1)


def write_adapt_run(run_dir: Path, env_id, seed, measurement_steps, lengths, window, total, adapt=True, kl=None):
    """A PPO-like run: one adapt/kl (0.02, or kl's values) and adapt/num_steps event per divergence measurement,
    and --window W."""
    from torch.utils.tensorboard import SummaryWriter

    write_run(run_dir, env_id, seed, 1000.0, lambda s: s / 10, total=total)
    w = SummaryWriter(log_dir=str(run_dir))
    for step, L, value in zip(measurement_steps, lengths, kl or [0.02] * len(lengths)):
        w.add_scalar("adapt/kl", value, step)
        w.add_scalar("adapt/num_steps", L, step)
    w.close()
    res = json.loads((run_dir / "eval_results.json").read_text())
    res["args"].update({"adapt": adapt, "window": window, "num_steps": 32, "num_steps_min": 16,
                        "num_steps_max": 64})
    (run_dir / "eval_results.json").write_text(json.dumps(res))


def test_burn_in_share_from_event_files(tmp_path):
    """W = 3, L_min = 16, one measurement every 160 steps of 10,000: the 3rd (the first that moves L) is logged at
    step 480, so burn-in covers 480 of the early window's 1,000 steps (48%). With W = 5 it ends at 800 (80%); a run
    with fewer than W measurements never leaves it (100%); one whose divergence keeps L at L_min after its burn-in
    (480) spends the whole window at L_min; the fixed-L baseline is no ABS run."""
    steps = [160, 320, 480, 640, 800, 960, 1120]
    write_adapt_run(tmp_path / "ABS" / "a", "Hopper-v4", 1, steps, [16, 16, 20, 24, 27, 30, 32], 3, 10_000)
    write_adapt_run(tmp_path / "ABS" / "b", "Hopper-v4", 2, steps, [16, 16, 16, 16, 19, 22, 25], 5, 10_000)
    write_adapt_run(tmp_path / "ABS" / "c", "Hopper-v4", 3, steps[:2], [16, 16], 3, 10_000)
    write_adapt_run(tmp_path / "ABS" / "d", "Hopper-v4", 4, steps, [16] * 7, 3, 10_000)
    write_adapt_run(tmp_path / "PPO" / "a", "Hopper-v4", 1, steps, [32] * 7, 3, 10_000, adapt=False)
    data, games, _ = report.collect({"ABS": tmp_path / "ABS", "PPO": tmp_path / "PPO"}, None, {})
    burn, notes = measures.burn_in(data, games)
    assert set(burn) == {("Hopper", "ABS")} and notes == []
    got = burn[("Hopper", "ABS")]
    # seed 1's L leaves 16 at its 3rd measurement (480); seed 2's at its 5th (800); seed 3 never (100% at L_min)
    assert got[1] == (480.0, pytest.approx(0.48), 16.0, 3, 480.0, pytest.approx(0.48))
    assert got[2] == (800.0, pytest.approx(0.80), 16.0, 5, 800.0, pytest.approx(0.80))
    assert got[3][0] == float("inf") and got[3][1] == 1.0 and got[3].moved == float("inf") and got[3].at_L_min == 1.0
    assert got[4] == (480.0, pytest.approx(0.48), 16.0, 3, float("inf"), 1.0)
    assert stats.burn_in_share([160, 320, 480], 3, 4000) == (480.0, 1.0)  # ends after the early window (400)
    assert report.main(["--runs", f"ABS={tmp_path / 'ABS'}", f"PPO={tmp_path / 'PPO'}", "--out", str(tmp_path / "o"),
                        "--reps", "20"]) == 0
    el = section((tmp_path / "o" / "report.md").read_text(), "Early / late")
    assert row_of(el.split("### Burn-in")[1], "Hopper", "ABS")[2:] == [
        "16", "3, 5", "1: 480, 2: 800, 3: never, 4: 480", "1: 48.0%, 2: 80.0%, 3: 100.0%, 4: 48.0%",
        "1: 480, 2: 800, 3: never, 4: never", "1: 48.0%, 2: 80.0%, 3: 100.0%, 4: 100.0%", "82.0%", "4"]
    assert ("- ABS: on average 69.0% of the early window (runs: 48.0-100.0%) is burn-in at L = 16, and 82.0% (runs: "
            "48.0-100.0%) ran at L = 16 in all. Its early return is mostly that of a fixed L = 16 (PPO: fixed L = 32), "
            "not of the ABS schedule. L did not leave L_min in the early window after the burn-in in: Hopper seed 4."
            ) in el
    # An L that moves before the W-th measurement is not a burn-in at one L: noted.
    write_adapt_run(tmp_path / "odd" / "a", "Hopper-v4", 1, steps, [16, 18, 20, 24, 27, 30, 32], 3, 10_000)
    data, games, _ = report.collect({"odd": tmp_path / "odd"}, None, {})
    assert measures.burn_in(data, games)[1] == ["odd: Hopper seed 1: adapt/num_steps moved before its W-th measurement "
                                              "(W = 3), not a burn-in at one L"]


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


def test_divergence_trend_section_from_event_files(tmp_path):
    """The paper's Figure 1 claim per run, from its events: seed 1's KL falls at every measurement (rho -1), seed
    2's rises (+1); 7 measurements over 1,200 steps: the first tenth (<= 120) holds the first, the last (>= 1,080)
    the seventh. The fixed-L baseline logged the KL too (as --track-divergence does): it is listed with its own
    trend."""
    steps = [100, 160, 320, 480, 640, 800, 1120]
    falls, rises = [0.09, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02], [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07]
    write_adapt_run(tmp_path / "ABS" / "a", "Hopper-v4", 1, steps, [16] * 7, 3, 1200, kl=falls)
    write_adapt_run(tmp_path / "ABS" / "b", "Hopper-v4", 2, steps, [16] * 7, 3, 1200, kl=rises)
    write_adapt_run(tmp_path / "PPO" / "a", "Hopper-v4", 1, steps, [32] * 7, 3, 1200, adapt=False,
                    kl=[0.05, 0.01, 0.05, 0.01, 0.05, 0.01, 0.05])
    data, games, _ = report.collect({"ABS": tmp_path / "ABS", "PPO": tmp_path / "PPO"}, None, {})
    got = measures.divergence_trends(data, games)
    assert got[("Hopper", "ABS")][1] == ("adapt/kl", 7, pytest.approx(0.09), pytest.approx(0.09),
                                         pytest.approx(0.02), pytest.approx(-1.0))
    assert got[("Hopper", "ABS")][2].rho == pytest.approx(1.0)
    # rho of the alternating KL: ranks 5.5, 2, 5.5, 2, 5.5, 2, 5.5 (ties averaged) against 1..7; their deviations
    # 1.5, -2, 1.5, -2, 1.5, -2, 1.5 times -3..3 sum to 0: no trend, exactly
    assert got[("Hopper", "PPO")][1].rho == 0.0
    # ABS: seed 1 lower at the end (0.02 < 0.09), seed 2 not; rho -1 and +1, median 0
    assert measures.trend_counts(got, ["ABS", "PPO", "none"]) == {"ABS": (1, 2, 1, 2, 0.0), "PPO": (0, 1, 0, 1, 0.0)}
    assert report.main(["--runs", f"ABS={tmp_path / 'ABS'}", f"PPO={tmp_path / 'PPO'}", "--out", str(tmp_path / "o"),
                        "--reps", "20"]) == 0
    md = section((tmp_path / "o" / "report.md").read_text(), "Divergence over training")
    assert row_of(md, "Hopper", "ABS")[2:] == ["adapt/kl", "1: 7, 2: 7", "1: 0.0900, 2: 0.0100", "1: 0.0900, 2: 0.0100",
                                               "1: 0.0200, 2: 0.0700", "1: -1.00, 2: +1.00"]
    assert "- ABS: lower in the last tenth than in the first in 1 of 2 runs; ρ < 0 in 1 of 2 (median ρ +0.00)." in md
    assert "- PPO: lower in the last tenth than in the first in 0 of 1 runs; ρ < 0 in 0 of 1 (median ρ +0.00)." in md


def test_adapt_by_game_figure_draws_each_abs_label_per_game(tmp_path):
    """One column per game, each ABS run's divergence and L, mean and min-max over seeds in 50 bins of 200 steps
    (10,000 steps): on Hopper seed 1's L is [16, 16, 20, 24, 27, 30, 32] and seed 2's [16, 16, 16, 16, 19, 22, 25]
    at steps 160, 320, ..., 1120, so the bin [800, 1000) holds 27, 30 and 19, 22: mean (28.5 + 20.5) / 2 = 24.5,
    min 20.5, max 28.5. The fixed-L baseline (--no-adapt) is not drawn; past 6 games there is no figure."""
    steps = [160, 320, 480, 640, 800, 960, 1120]
    write_adapt_run(tmp_path / "ABS" / "a", "Hopper-v4", 1, steps, [16, 16, 20, 24, 27, 30, 32], 3, 10_000)
    write_adapt_run(tmp_path / "ABS" / "b", "Hopper-v4", 2, steps, [16, 16, 16, 16, 19, 22, 25], 3, 10_000)
    write_adapt_run(tmp_path / "ABS" / "c", "Walker2d-v4", 1, steps, [16] * 7, 3, 10_000)
    write_adapt_run(tmp_path / "PPO" / "a", "Hopper-v4", 1, steps, [32] * 7, 3, 10_000, adapt=False)
    assert report.main(["--runs", f"ABS={tmp_path / 'ABS'}", f"PPO={tmp_path / 'PPO'}", "--out", str(tmp_path / "o"),
                        "--reps", "20", "--benchmark", "mujoco"]) == 0
    assert "- `adapt_by_game.png` (data: `adapt_by_game.csv`): the ABS runs' divergence and batch size, one column " \
        "per game" in section((tmp_path / "o" / "report.md").read_text(), "Figures")
    with open(tmp_path / "o" / "adapt_by_game.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["game"], r["tag"], r["label"]) for r in rows} == {
        (g, t, "ABS") for g in ("Hopper", "Walker2d") for t in ("adapt/kl", "adapt/num_steps")}
    hopper_L = {float(r["step"]): r for r in rows if (r["game"], r["tag"]) == ("Hopper", "adapt/num_steps")}
    # bin centres from the first measured bin to the run's end (10,000 steps): the bins without a measurement hold
    # each run's latest value (L does not change between measurements)
    assert sorted(hopper_L) == [100.0 + 200 * i for i in range(50)]
    b = hopper_L[900.0]
    assert (float(b["mean"]), float(b["min"]), float(b["max"]), b["n_runs"]) == (24.5, 20.5, 28.5, "2")
    b = hopper_L[1300.0]  # no measurement since 1120: seed 1 holds 32, seed 2 holds 25
    assert (float(b["mean"]), float(b["min"]), float(b["max"]), b["n_runs"]) == (28.5, 25.0, 32.0, "2")
    assert [float(r["mean"]) for r in rows if r["tag"] == "adapt/kl"] == pytest.approx([0.02] * 100)  # 50 bins x 2
    import matplotlib.image as mpimg
    assert mpimg.imread(tmp_path / "o" / "adapt_by_game.png").shape[0] > 100
    # The fixed-L baseline logged the divergence it does not use: the paper's Figure 1 draws it beside ABS's, per
    # game and over games, with ABS's burn-in end (seed 1: step 480, seed 2: 480; W = 3).
    with open(tmp_path / "o" / "divergence_by_game.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["game"], r["label"]) for r in rows} == {("Hopper", "ABS"), ("Walker2d", "ABS"), ("Hopper", "PPO"),
                                                       ("mean over games", "ABS"), ("mean over games", "PPO")}
    assert {r["n_runs"] for r in rows if r["game"] == "mean over games" and r["label"] == "ABS"} == {"3"}
    # and beside it each game's L of the ABS runs (not the fixed baseline's), on the range the flags allow
    with open(tmp_path / "o" / "batch_size_by_game.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["game"], r["label"]) for r in rows} == {("Hopper", "ABS"), ("Walker2d", "ABS"),
                                                       ("mean over games", "ABS")}
    data, _, _ = report.collect({"ABS": tmp_path / "ABS"}, None, {})
    assert figures.size_range([r for g in data["ABS"].values() for r in g.values()]) == (16, 64)
    assert figures.size_range([]) == (None, None)
    # Seven games: two rows of seven panels are unreadable; the grids of panels take over.
    for i, game in enumerate(("Ant", "HalfCheetah", "Humanoid", "Swimmer", "Reacher", "Pusher", "Hopper")):
        write_adapt_run(tmp_path / "many" / game, f"{game}-v4", 1, steps, [16] * 7, 3, 10_000)
    assert report.main(["--runs", f"ABS={tmp_path / 'many'}", "--out", str(tmp_path / "m"), "--reps", "20",
                        "--benchmark", "mujoco"]) == 0
    assert not (tmp_path / "m" / "adapt_by_game.png").exists() and (tmp_path / "m" / "adapt.png").exists()
    for name, tag in (("divergence_by_game", "adapt/kl"), ("batch_size_by_game", "adapt/num_steps")):
        with open(tmp_path / "m" / f"{name}.csv") as f:
            rows = list(csv.DictReader(f))
        assert len({r["game"] for r in rows}) == 8 and {r["tag"] for r in rows} == {tag}, name
        assert mpimg.imread(tmp_path / "m" / f"{name}.png").shape[0] > 100


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
    step, mean, lo, hi, n = figures.curve_rows([run(1000, [100, 900], [16, 20]), run(500, [300, 800], [32, 48]),
                                                run(1000, [], [])], "adapt/num_steps", 10)
    assert step.tolist() == [150.0, 250.0, 350.0, 450.0, 550.0, 650.0, 750.0, 850.0, 950.0]
    assert n.tolist() == [1, 1, 2, 2, 2, 2, 2, 2, 1] and mean.tolist()[5] == 24.0 and mean.tolist()[7] == 32.0


def test_mean_over_games_averages_every_game_when_their_measurements_fall_at_different_steps(tmp_path):
    """Hopper measures L = 16 at steps 100, 500, 900; Walker2d L = 32 at 300, 700, 1100 (runs of 1,200 steps, 50
    bins of 24 steps). Binning alone gave each bin one game's L (16 or 32 in turn); with each run holding its latest
    L, every bin from 300 on averages both: 24, from two runs. Before 300 only Hopper has started: 16, one run."""
    write_adapt_run(tmp_path / "ABS" / "a", "Hopper-v4", 1, [100, 500, 900], [16] * 3, 3, 1200)
    write_adapt_run(tmp_path / "ABS" / "b", "Walker2d-v4", 1, [300, 700, 1100], [32] * 3, 3, 1200)
    write_adapt_run(tmp_path / "PPO" / "a", "Hopper-v4", 1, [100, 500, 900], [32] * 3, 3, 1200, adapt=False)
    assert report.main(["--runs", f"ABS={tmp_path / 'ABS'}", f"PPO={tmp_path / 'PPO'}", "--out", str(tmp_path / "o"),
                        "--reps", "20", "--benchmark", "mujoco"]) == 0
    with open(tmp_path / "o" / "batch_size_by_game.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["game"] == "mean over games"]
    late = [(float(r["mean"]), r["n_runs"]) for r in rows if float(r["step"]) >= 300]
    early = [(float(r["mean"]), r["n_runs"]) for r in rows if float(r["step"]) < 300]
    assert set(late) == {(24.0, "2")} and set(early) == {(16.0, "1")}
    assert len(late) + len(early) == len(rows) == 50 - 4  # bins 0-3 end before step 100


# ----------------------------------------------------------------------------- end to end
def write_run(run_dir: Path, env_id, seed, score, curve=None, adapt=False, finished=True, total=1000):
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    if curve is not None:
        w = SummaryWriter(log_dir=str(run_dir))
        for step in range(0, total + 1, 100):
            w.add_scalar("charts/episodic_return", curve(step), step)
            if adapt and step > 0:
                w.add_scalar("adapt/divergence", 0.5 - step / 4000, step)
                w.add_scalar("adapt/num_steps", 16 + step * 48 / total, step)
        w.close()
    if finished:
        (run_dir / "eval_results.json").write_text(json.dumps({
            "algo": "abs_pqn_atari", "env_id": env_id, "seed": seed, "run_name": run_dir.name,
            "global_step": total, "total_timesteps": total, "train_seconds": 1.0,
            "eval": {"episodes": 2, "returns": [score, score], "mean": score},
            "args": {"env_id": env_id, "seed": seed, "adapt": adapt}}))


def test_near_constant_evaluation_policies_are_named_with_their_action_and_share(tmp_path):
    """A run whose evaluation chose one action on >= 90% of its steps is named with the action and its share; 89.9%,
    a run without action counts (written before they were recorded) and one of all-zero counts are not."""
    for label, env_id, counts in (("A", "Amidar-v5", [1, 9, 0]), ("B", "Amidar-v5", [101, 899, 0, 0]),
                                  ("A", "BattleZone-v5", [16, 5984]), ("B", "BattleZone-v5", None),
                                  ("A", "Hopper-v4", [0, 0])):
        write_run(tmp_path / label / f"{env_id}__1", env_id, 1, 1.0, lambda s: s / 10)
        res = json.loads((tmp_path / label / f"{env_id}__1" / "eval_results.json").read_text())
        if counts is not None:
            res["eval"]["action_counts"] = counts
        (tmp_path / label / f"{env_id}__1" / "eval_results.json").write_text(json.dumps(res))
    assert report.main(["--runs", f"A={tmp_path / 'A'}", f"B={tmp_path / 'B'}", "--out", str(tmp_path / "o"),
                        "--reps", "20"]) == 0
    lines = [line for line in section((tmp_path / "o" / "report.md").read_text(), "Data").split("\n")
             if line.startswith("- Near-constant")]
    assert lines == ["- Near-constant evaluation policies (one action on at least 90% of the evaluation's steps, "
                     "eval.action_counts; action: an index of the game's minimal action set): A Amidar seed 1: action 1 "
                     "on 90.0%, A BattleZone seed 1: action 1 on 99.7%. Their evaluation score is that of playing one "
                     "action, not a measure of how they play."]


def test_the_reports_near_constant_share_is_the_scripts():
    sys.path.insert(0, str(ROOT))
    import abs_utils
    assert measures.NEAR_CONSTANT_SHARE == abs_utils.NEAR_CONSTANT_SHARE


def test_capped_atari_evaluations_are_named_and_a_wholly_capped_game_is_flagged(tmp_path):
    """Atari evaluation episodes cut at the step cap are named per run (A Amidar 1 of 2, DoubleDunk 2 of 2 in both
    labels); DoubleDunk, where every episode of every run was cut, is flagged beside the aggregate. A MuJoCo episode
    capped at its time limit is a whole episode: not named."""
    for label, env_id, capped in (("A", "Amidar-v5", 1), ("B", "Amidar-v5", 0), ("A", "DoubleDunk-v5", 2),
                                  ("B", "DoubleDunk-v5", 2), ("A", "Hopper-v4", 2)):
        write_run(tmp_path / label / f"{env_id}__1", env_id, 1, -1.0, lambda s: s / 10)
        res = json.loads((tmp_path / label / f"{env_id}__1" / "eval_results.json").read_text())
        res["eval"]["capped"] = capped
        if (label, env_id) == ("A", "Amidar-v5"):  # the only run of A that records its evaluation protocol
            res["args"]["eval_protocol"] = "quota"
        (tmp_path / label / f"{env_id}__1" / "eval_results.json").write_text(json.dumps(res))
    assert report.main(["--runs", f"A={tmp_path / 'A'}", f"B={tmp_path / 'B'}", "--out", str(tmp_path / "o"),
                        "--reps", "20"]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    assert ("- Evaluation episodes cut at the step cap (their returns are those of games cut short): A Amidar seed 1: "
            "1 of 2, A DoubleDunk seed 1: 2 of 2, B DoubleDunk seed 1: 2 of 2. On DoubleDunk every episode of every "
            "run was cut: the evaluation scores there, raw and human-normalised, say how far a capped game got, not "
            "what a whole game scores.") in section(md, "Data")
    assert "Hopper seed 1: 2 of 2" not in md
    assert "- Evaluation of A: `--eval-protocol quota`; 2 of its runs record none" in md
    assert "Evaluation of B" not in md  # none of its runs records one
    assert ("- DoubleDunk: every evaluation episode of every run was cut at the step cap (see Data); its score here is "
            "that of games cut short") in section(md, "Aggregate")


def test_machine_time_sums_each_labels_train_seconds_and_counts_restarted_runs(tmp_path):
    """A: 72,000 steps in 720 s and in 360 s (100 and 200 steps/s), the second started twice (two event files);
    B: one run whose eval_results.json predates train_seconds. Hours 0.3, per run 0.1-0.2."""
    from torch.utils.tensorboard import SummaryWriter

    for name, seconds in (("a1", 720.0), ("a2", 360.0)):
        write_run(tmp_path / "A" / name, "Amidar-v5", int(name[1]), 200.0, lambda s: s / 10, total=72_000)
        res = json.loads((tmp_path / "A" / name / "eval_results.json").read_text())
        (tmp_path / "A" / name / "eval_results.json").write_text(json.dumps({**res, "train_seconds": seconds}))
    w = SummaryWriter(log_dir=str(tmp_path / "A" / "a2"), purge_step=50_000)
    w.add_scalar("charts/episodic_return", 60.0, 50_000)
    w.close()
    write_run(tmp_path / "B" / "b1", "Amidar-v5", 1, 100.0, lambda s: s / 10)
    res = json.loads((tmp_path / "B" / "b1" / "eval_results.json").read_text())
    del res["train_seconds"]
    (tmp_path / "B" / "b1" / "eval_results.json").write_text(json.dumps(res))
    data, games, _ = report.collect({"A": tmp_path / "A", "B": tmp_path / "B"}, None, {})
    t = measures.machine_time(data, games)
    assert t["A"] == {"runs": 2, "timed": 2, "hours": pytest.approx(0.3), "per_run": (0.1, 0.2),
                      "sps": (100.0, 200.0), "restarted": 1}
    assert t["B"] == {"runs": 1, "timed": 0, "hours": 0.0, "per_run": None, "sps": None, "restarted": 0}
    md = sections.machine_time_section(t)
    assert row("\n".join(md), "A")[1:] == ["2", "0.3", "0.1–0.2", "100–200", "1 of 2"]
    assert row("\n".join(md), "B")[1:] == ["1", "–", "–", "–", "0 of 1"]
    assert "- B: 1 of 1 runs have no `train_seconds` (not counted)" in md


def test_read_run_scores_from_the_mean_or_the_returns_and_names_an_empty_evaluation(tmp_path):
    write_run(tmp_path / "a", "Amidar-v5", 1, 250.0)
    assert runs.read_run("ABS", tmp_path / "a").score == 250.0
    res = json.loads((tmp_path / "a" / "eval_results.json").read_text())
    res["eval"] = {"episodes": 2, "returns": [100.0, 300.0], "mean": None}  # mean null: use the returns
    (tmp_path / "a" / "eval_results.json").write_text(json.dumps(res))
    assert runs.read_run("ABS", tmp_path / "a").score == 200.0
    # What a script writes with --eval-episodes 0: null statistics, no returns.
    res["eval"] = {"episodes": 0, "returns": [], "lengths": [], "mean": None, "std": None, "median": None,
                   "min": None, "max": None, "capped": 0}
    (tmp_path / "a" / "eval_results.json").write_text(json.dumps(res))
    with pytest.raises(ValueError, match="no evaluation episodes"):
        runs.read_run("ABS", tmp_path / "a")
    _, skipped = runs.find_runs("ABS", tmp_path)
    assert len(skipped) == 1 and "no evaluation episodes" in skipped[0]


@pytest.fixture(scope="module")
def fixture_runs(tmp_path_factory):
    """ABS: Amidar and Qbert, seeds 1-2, adapt/* tags, flat layout. Small: Amidar only, sweep layout,
    plus one unfinished run. Training curves: ABS step/10 + seed, Small step/20 + seed."""
    root = tmp_path_factory.mktemp("runs")
    abs_scores = {("Amidar", 1): 200.0, ("Amidar", 2): 300.0, ("Qbert", 1): 1000.0, ("Qbert", 2): 2000.0}
    for (game, seed), score in abs_scores.items():
        write_run(root / "abs" / f"{game}-v5__abs__{seed}__1", f"{game}-v5", seed, score,
                  lambda s, seed=seed: s / 10 + seed, adapt=True)
    for seed, score in ((1, 100.0), (2, 150.0)):
        write_run(root / "sweep" / "batches" / "Small" / f"Amidar__{seed}", "Amidar-v5", seed, score,
                  lambda s, seed=seed: s / 20 + seed)
    write_run(root / "sweep" / "batches" / "Small" / "Qbert__1", "Qbert-v5", 1, 0.0, lambda s: 0.0, finished=False)
    return root


def hns(score, game):
    s = runs.load_atari_scores()[game]
    return (score - s["random"]) / (s["human"] - s["random"])


def section(md: str, title: str) -> str:
    return md.split(f"## {title}")[1].split("\n## ")[0]


def row(text: str, first: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def row_of(text: str, game: str, label: str) -> list[str]:
    """The row of one game and label in a per-seed table (game | label | ...)."""
    return row(text, f"{game} | {label}")


def test_report_end_to_end(fixture_runs, tmp_path):
    out = tmp_path / "report"
    res = subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), "--runs",
                          f"ABS={fixture_runs / 'abs'}", f"Small={fixture_runs / 'sweep'}",
                          "--out", str(out), "--reps", "200"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    md = (out / "report.md").read_text()

    data = section(md, "Data")
    assert row(data, "ABS")[2:6] == ["4", "2 of 2", "Amidar: 2, Qbert: 2", "none"]
    assert row(data, "Small")[2:6] == ["2", "1 of 2", "Amidar: 2", "Qbert"]
    assert "Missing for Small: Qbert" in data
    assert re.search(r"Small: skipped `.*Qbert__1`: no eval_results.json", data)

    # Aggregates: ABS rests on a 2 seeds x 2 games HNS matrix; IQM of 4 values = mean of the middle two.
    m = sorted([hns(200, "Amidar"), hns(300, "Amidar"), hns(1000, "Qbert"), hns(2000, "Qbert")])
    mean = np.mean(m)
    abs_row, small_row = row(section(md, "Aggregate"), "ABS"), row(section(md, "Aggregate"), "Small")
    expected_aggregates = ((m[1] + m[2]) / 2, mean, mean, 1 - mean)  # IQM, median of 2 game means, mean, gap
    assert [c.split(" [")[0] for c in abs_row[1:5]] == [sections.fmt(x) for x in expected_aggregates]
    assert abs_row[5:] == ["2", "4"] and small_row[5:] == ["1", "2"]
    small_mean = (hns(100, "Amidar") + hns(150, "Amidar")) / 2
    assert small_row[1].startswith(sections.fmt(small_mean) + " [")
    lo, hi = (float(x) for x in re.findall(r"\[(\S+), (\S+)\]", abs_row[1])[0])
    assert lo <= float(abs_row[1].split()[0]) <= hi

    # Per game: per-seed values, mean, Student-t CI (n = 2: t_{0.975, 1} = 12.706; ABS s = 70.71, half-width
    # 12.706 * 70.71 / sqrt(2) = 635.3; Small s = 35.36, half-width 317.7).
    per_game = section(md, "Per-game evaluation return")
    assert "Student-t 95% CI" in per_game
    assert row_of(per_game, "Amidar", "ABS")[2:] == ["1: 200.0, 2: 300.0", "**250.0**", "[-385.3, 885.3]", "2"]
    assert row_of(per_game, "Amidar", "Small")[2:] == ["1: 100.0, 2: 150.0", "125.0", "[-192.7, 442.7]", "2"]
    assert row_of(per_game, "Qbert", "ABS")[2:4] == ["1: 1000.0, 2: 2000.0", "**1500.0**"]
    assert row_of(per_game, "Qbert", "Small")[2:] == ["missing", "–", "–", "0"]
    assert "**ABS best in 1 of 1 games**" in per_game and "others: Small 0" in per_game
    assert "- ABS vs Small: **ABS higher in 1 of 1 games**" in per_game  # pairwise, against one baseline
    # ABS - Small on Amidar: 125; Welch v = 2500 + 625, df = 3125^2 / (2500^2 + 625^2) = 1.4706; permutation: of the
    # C(4, 2) = 6 splits, the observed one and its mirror have |diff| 125 (the others 75 and 25): p = 1/3.
    diff = row_of(per_game, "Amidar", "ABS − Small")
    _, lo, hi, df = stats.welch_interval([200.0, 300.0], [100.0, 150.0])
    assert diff[2:] == ["125.0", f"[{sections.fmt(lo)}, {sections.fmt(hi)}]", "1.47", "0.33", "6", "2 vs 2"]
    assert df == pytest.approx(3125 ** 2 / (2500 ** 2 + 625 ** 2))
    assert "- ABS vs Small (Amidar): with 2 vs 2 runs the smallest possible p is 0.33 (2 of 6 relabellings): no " \
        "difference can reach p < 0.05." in per_game

    # Per-game HNS (Atari): with 2 runs per game the IQM trims nothing, so the table gives the mean HNS and says so.
    hns_table = section(md, "Per-game human-normalised score")
    assert row_of(hns_table, "Amidar", "ABS")[3] == f"**{sections.fmt((hns(200, 'Amidar') + hns(300, 'Amidar')) / 2)}**"
    assert row_of(hns_table, "Amidar", "Small")[3] == sections.fmt((hns(100, 'Amidar') + hns(150, 'Amidar')) / 2)
    assert row_of(hns_table, "Qbert", "Small")[2] == "missing" and "**ABS best in 1 of 1 games**" in hns_table
    assert "with n <= 3 it drops nothing and equals the mean. With at most 3 runs of each game here the IQM is " \
        "this mean." in hns_table and "IQM over seeds |" not in hns_table
    # What the aggregates' bootstrap rests on, and why a game's own bootstrap bounds are its extreme seeds.
    agg = section(md, "Aggregate")
    assert "- ABS: 2 games × 2 runs per game (4 runs)" in agg and "- Small: 1 game × 2 runs per game (2 runs)" in agg
    assert "With 2 runs per game, one game's own bootstrap interval is exactly [its lowest seed, its highest seed]: " \
        "a resample of 2 copies of one seed has probability 1/4 > 2.5%." in agg

    # Final training return (the last 100 games; here all 11): ABS mean(0..100) + s = 51, 52 -> 51.5, population std
    # 0.5 over the seeds; Small mean(0..50) + s -> 26, 27.
    final = section(md, "Final training return")
    assert row_of(final, "Amidar", "ABS")[2:4] == ["1: 51.0, 2: 52.0", "**51.5**"]
    assert row_of(final, "Amidar", "ABS")[5:] == ["0.500", "2"]
    assert row_of(final, "Amidar", "Small")[2:4] == ["1: 26.0, 2: 27.0", "26.5"]
    assert row_of(final, "Qbert", "Small")[2] == "missing"
    assert "last 100 games" in final and "- ABS vs Small: **ABS higher in 1 of 1 games**" in final

    # Early: ABS (0+s, 10+s) -> 6, 7; Small (0+s, 5+s) -> 3.5, 4.5. Late var: ABS 25 and Small 6.25 for each seed.
    el = section(md, "Early / late")
    early, late = el.split("### Late variance")
    assert row_of(early, "Amidar", "ABS")[2:4] == ["1: 6.000, 2: 7.000", "**6.500**"]
    assert row_of(early, "Amidar", "Small")[2:4] == ["1: 3.500, 2: 4.500", "4.000"]
    assert row_of(late, "Amidar", "ABS")[2:4] == ["1: 25.0, 2: 25.0", "25.0"]
    assert row_of(late, "Amidar", "Small")[2:4] == ["1: 6.250, 2: 6.250", "**6.250**"]
    assert "**ABS higher early in 1 of 1 games**" in el and "**ABS lower late variance in 0 of 1 games**" in el
    # No spread on either side: a difference, no Welch interval; the permutation p is 2/6 (observed split, mirror).
    assert row_of(late, "Amidar", "ABS − Small")[2:6] == ["18.8", "no spread, no interval", "–", "0.33"]
    assert "### Burn-in" not in el  # these ABS runs have no --window in their args

    # Improvement rate on HNS: (250 - 125) / (125 - random) for Amidar.
    ir = section(md, "Improvement rate")
    expected = 100 * (250 - 125) / (125 - runs.load_atari_scores()["Amidar"]["random"])
    assert row(ir, "Amidar")[1] == f"{expected:.1f}%"
    assert row(ir, "**mean**")[1] == f"**{expected:.1f}%** (1 games)"
    assert row(ir, "**median**")[1] == f"**{expected:.1f}%** (1 games)"
    assert "(s_ABS - s_X) / |s_X|" in ir
    amidar = runs.load_atari_scores()["Amidar"]  # robust: (250 - 125) / (max(human, 125) - random)
    robust = ir.split("### Robust improvement")[1]
    assert row(robust, "Amidar")[1] == f"{100 * 125 / (amidar['human'] - amidar['random']):.1f}%"
    assert "- ABS over Small: Qbert (no finished run of Small)" in ir

    figures = section(md, "Figures")
    assert "no adapt/* tags for Small" in figures
    import matplotlib.image as mpimg
    for name in FIGURES:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"`{name}.png`" in figures
        assert mpimg.imread(png).shape[0] > 100
        with open(out / f"{name}.csv") as f:
            assert len(list(csv.reader(f))) > 1
    with open(out / "improvement_rate.csv") as f:
        rates = {r["game"]: float(r["improvement_rate_percent"]) for r in csv.DictReader(f)}
    assert rates["Amidar"] == pytest.approx(expected) and rates["mean"] == pytest.approx(expected)
    with open(out / "learning_curves.csv") as f:
        curve = [r for r in csv.DictReader(f) if (r["game"], r["label"]) == ("Qbert", "ABS")]
    assert float(curve[-1]["mean"]) == pytest.approx(101.5) and curve[-1]["n_runs"] == "2"  # 1000/10 + 1.5
    with open(out / "adapt.csv") as f:
        assert {(r["tag"], r["label"]) for r in csv.DictReader(f)} == {("adapt/divergence", "ABS"),
                                                                        ("adapt/num_steps", "ABS")}


def test_benchmark_restricts_games(fixture_runs, tmp_path):
    assert report.main(["--runs", f"ABS={fixture_runs / 'abs'}", f"Small={fixture_runs / 'sweep'}",
                        "--out", str(tmp_path), "--reps", "50", "--benchmark", "atari5"]) == 0
    md = (tmp_path / "report.md").read_text()
    data = section(md, "Data")
    assert row(data, "ABS")[3] == "1 of 5" and "Missing for ABS: BattleZone, DoubleDunk, NameThisGame, Phoenix" in data
    assert "Amidar-v5 is not in atari5" in data and row(data, "Small")[2] == "0"
    assert "Needs a second label" not in md


def test_games_and_seeds_choose_the_runs_and_the_tables_list_only_those(tmp_path, capsys):
    """Amidar and Qbert, seeds 1 and 2, finished; Phoenix seed 1 and Amidar seed 3 unfinished. --games Amidar-v5
    --seeds 1: one run, the tables list Amidar alone, the runs not chosen are not read or named (the unfinished
    ones are not listed as skipped), and the Data section says what was chosen."""
    for env_id in ("Amidar-v5", "Qbert-v5"):
        for seed in (1, 2):
            write_run(tmp_path / "A" / f"{env_id}__{seed}", env_id, seed, 100.0 * seed, lambda s: s / 10)
    for unfinished in ("Phoenix-v5__1", "Amidar-v5__3"):
        (tmp_path / "A" / unfinished).mkdir()
        (tmp_path / "A" / unfinished / "checkpoint.pt").write_bytes(b"")
    assert report.main(["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "o"), "--reps", "20",
                        "--benchmark", "atari10", "--games", "Amidar-v5", "--seeds", "1"]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    assert row(section(md, "Data"), "A")[2:6] == ["1", "1 of 1", "Amidar: 1", "none"]
    assert "- games chosen (--games): Amidar, 1 of atari10's 10" in md and "- seeds chosen (--seeds): 1" in md
    assert "Qbert" not in md and "Phoenix" not in md and "__3" not in md
    assert row_of(section(md, "Per-game evaluation return"), "Amidar", "A")[2] == "1: 100.0"
    assert row_of(section(md, "Final training return"), "Amidar", "A")[5:] == ["–", "1"]  # one seed: no spread
    # a game outside the benchmark, and an empty name: one line, exit 2
    assert report.main(["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "p"), "--benchmark", "atari5",
                        "--games", "Amidar", "Qbert"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("report.py: --games: Amidar not in --benchmark atari5 (its games: BattleZone,")
    with pytest.raises(SystemExit) as e:
        report.main(["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "p"), "--games", "ALE/"])
    assert e.value.code == 2 and "--games: 'ALE/' holds an empty name" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_mujoco_one_seed_raw_returns(tmp_path):
    """MuJoCo in raw returns, one seed, a run without events, --reference, an Atari run filtered out."""
    write_run(tmp_path / "ppo" / "a", "HalfCheetah-v5", 1, 3000.0, lambda s: s)
    write_run(tmp_path / "ppo" / "b", "Hopper-v5", 1, 2000.0)  # no TensorBoard events
    write_run(tmp_path / "ppo" / "c", "Breakout-v5", 1, 10.0, lambda s: s)
    write_run(tmp_path / "abs" / "a", "HalfCheetah-v5", 1, 3600.0, lambda s: 2 * s, adapt=True)
    assert report.main(["--runs", f"PPO={tmp_path / 'ppo'}", f"PPO+ABS={tmp_path / 'abs'}", "--out",
                        str(tmp_path / "out"), "--reps", "50", "--benchmark", "mujoco", "--reference", "PPO+ABS"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Breakout-v5 is not in mujoco" in md and "Missing for PPO+ABS: Hopper" in md
    assert "No Atari games" in section(md, "Aggregate")
    per_game = section(md, "Per-game evaluation return")
    assert row_of(per_game, "HalfCheetah", "PPO+ABS")[2:] == ["1: 3600.0", "**3600.0**", "n = 1, no interval", "1"]
    assert row_of(per_game, "HalfCheetah", "PPO")[2:] == ["1: 3000.0", "3000.0", "n = 1, no interval", "1"]
    assert row_of(per_game, "HalfCheetah", "PPO+ABS − PPO")[2:] == ["600.0", "n = 1, no interval", "–", "1.00", "2",
                                                                   "1 vs 1"]
    assert "with 1 vs 1 runs the smallest possible p is 1.00 (2 of 2 relabellings): no difference can reach p < " \
        "0.05" in per_game
    assert "[3600.0, 3600.0]" not in md
    # One run per game: the IQM trims nothing, so the per-game IQM table (raw returns) is left out, and says why.
    iqm = section(md, "Per-game IQM of evaluation return")
    assert "Not shown" in iqm and "drops nothing and equals the mean" in iqm and "| game |" not in iqm
    el = section(md, "Early / late")
    assert row_of(el, "Hopper", "PPO+ABS")[2] == "missing" and row_of(el, "Hopper", "PPO")[2] == "no data"
    assert row(section(md, "Improvement rate of PPO+ABS"), "HalfCheetah")[1] == "20.0%"  # (3600-3000)/3000
    assert not (tmp_path / "out" / "aggregates.png").exists() and (tmp_path / "out" / "adapt.png").exists()


def test_per_game_iqm_table_only_where_the_iqm_trims(tmp_path):
    """4 runs of a game: the IQM drops one from each end (0, 1, 2, 100 -> 1.5, the mean is 25.75); 2 runs: "= mean"."""
    for seed, score in enumerate((0.0, 1.0, 2.0, 100.0), 1):
        write_run(tmp_path / "A" / f"h{seed}", "Hopper-v4", seed, score)
    for seed, score in enumerate((5.0, 7.0), 1):
        write_run(tmp_path / "B" / f"h{seed}", "Hopper-v4", seed, score)
    assert report.main(["--runs", f"A={tmp_path / 'A'}", f"B={tmp_path / 'B'}", "--out", str(tmp_path / "o"),
                        "--reps", "20"]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    iqm = section(md, "Per-game IQM of evaluation return")
    assert "Not shown" not in iqm
    assert row_of(iqm, "Hopper", "A")[3] == "25.8" and row_of(iqm, "Hopper", "A")[5:] == ["1.500", "4"]
    assert row_of(iqm, "Hopper", "B")[5:] == ["**6.000 (= mean)**", "2"]  # the best IQM in bold
    assert "- A vs B: **A higher in 0 of 1 games**" in iqm  # on the IQMs 1.5 vs 6, not the means 25.75 vs 6
    # 4 vs 2 runs: C(6, 4) = 15 splits, the smallest possible p 1/15 = 0.067.
    assert "with 4 vs 2 runs the smallest possible p is 0.067 (1 of 15 relabellings): no difference can reach" in md


def test_adapt_figure_shows_the_divergence_each_ppo_run_scheduled_on(tmp_path):
    """PPO logs adapt/kl and adapt/divergence_ess in either mode: a run with --divergence ess is drawn on its
    adapt/divergence_ess, a KL run (and a run whose args predate the flag) on its adapt/kl."""
    from torch.utils.tensorboard import SummaryWriter

    for label, divergence in (("KL", "kl"), ("ESS", "ess"), ("OLD", None)):
        run_dir = tmp_path / label / "a"
        write_run(run_dir, "HalfCheetah-v4", 1, 1000.0, lambda s: s)
        w = SummaryWriter(log_dir=str(run_dir))
        for step in range(100, 1001, 100):
            w.add_scalar("adapt/kl", 0.01, step)
            w.add_scalar("adapt/divergence_ess", 0.02, step)
            w.add_scalar("adapt/num_steps", 2048, step)
        w.close()
        res = json.loads((run_dir / "eval_results.json").read_text())
        if divergence is not None:
            res["args"]["divergence"] = divergence
        (run_dir / "eval_results.json").write_text(json.dumps(res))
    assert runs.read_run("ESS", tmp_path / "ESS" / "a").divergence_tags == ("adapt/divergence_ess",)
    assert runs.divergence_tags({"divergence": "kl"}) == ("adapt/kl",)
    assert report.main(["--runs", *(f"{lb}={tmp_path / lb}" for lb in ("KL", "ESS", "OLD")), "--out",
                        str(tmp_path / "out"), "--reps", "20", "--benchmark", "mujoco"]) == 0
    with open(tmp_path / "out" / "adapt.csv") as f:
        drawn = {(r["tag"], r["label"]) for r in csv.DictReader(f)}
    assert drawn == {("adapt/kl", "KL"), ("adapt/kl", "OLD"), ("adapt/divergence_ess", "ESS"),
                     *(("adapt/num_steps", lb) for lb in ("KL", "ESS", "OLD"))}


def test_ppo_atari_runs_show_the_divergence_their_schedule_used(tmp_path):
    """abs_ppo_atari.py logs the KL and the greedy-action change (adapt/divergence) in either mode: a --divergence kl
    run (and a fixed-L run tracking it) is drawn and trended on its KL, a --divergence greedy run on the greedy change,
    though both tags are in every run's events. Here the KL falls and the greedy change rises."""
    from torch.utils.tensorboard import SummaryWriter

    for label, divergence, adapt in (("KL", "kl", True), ("GREEDY", "greedy", True), ("PPO", "kl", False)):
        run_dir = tmp_path / label / "a"
        write_run(run_dir, "Breakout-v5", 1, 10.0, lambda s: s / 100, total=1000)
        w = SummaryWriter(log_dir=str(run_dir))
        for i, step in enumerate(range(100, 1001, 100)):
            w.add_scalar("adapt/kl", 0.01 - 0.001 * i, step)
            w.add_scalar("adapt/divergence", 0.001 * (i + 1), step)
            w.add_scalar("adapt/num_steps", 128, step)
        w.close()
        res = json.loads((run_dir / "eval_results.json").read_text())
        res["args"].update({"divergence": divergence, "adapt": adapt, "window": 10})
        (run_dir / "eval_results.json").write_text(json.dumps(res))
    assert runs.read_run("GREEDY", tmp_path / "GREEDY" / "a").divergence_tags == ("adapt/divergence",)
    data, games, _ = report.collect({lb: tmp_path / lb for lb in ("KL", "GREEDY", "PPO")}, None, {})
    trends = measures.divergence_trends(data, games)
    assert {lb: (v[1].tag, v[1].rho) for (_, lb), v in trends.items()} == {
        "KL": ("adapt/kl", pytest.approx(-1.0)), "GREEDY": ("adapt/divergence", pytest.approx(1.0)),
        "PPO": ("adapt/kl", pytest.approx(-1.0))}


def test_compare_pairs_and_mixed_lengths(tmp_path):
    """--compare picks the pairs (the scale grid's "ABS range vs the fixed baseline of the same network"); a label
    whose runs have different total_timesteps is refused unless --allow-mixed-timesteps."""
    for label, scores in (("fixed", (100.0, 24.9)), ("ABS", (150.0, 30.0)), ("L_fixed", (400.0, 10.0)),
                          ("L_ABS", (300.0, 10.0))):
        for game, score in zip(("Amidar", "PrivateEye"), scores):
            write_run(tmp_path / label / game, f"{game}-v5", 1, score)
    dirs = [f"{lb}={tmp_path / lb}" for lb in ("fixed", "ABS", "L_fixed", "L_ABS")]
    assert report.main(["--runs", *dirs, "--out", str(tmp_path / "out"), "--reps", "20",
                        "--compare", "ABS", "fixed", "--compare", "L_ABS", "L_fixed"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    ir = section(md, "Improvement rate")
    assert ir.startswith("\n\n") and "| game | ABS over fixed | L_ABS over L_fixed |" in ir
    assert "| ABS over L_fixed" not in md and "- ABS vs L_fixed" not in md
    assert "- ABS vs fixed: **ABS higher in 2 of 2 games**" in md
    assert "- L_ABS vs L_fixed: **L_ABS higher in 0 of 2 games**" in md  # PrivateEye 10 vs 10: a tie
    # fixed scored PrivateEye's random score (HNS 0): the paper's form is undefined and the game is listed as left
    # out of it; the robust form is (30 - 24.9) / (max(human, 24.9) - random).
    pe = runs.load_atari_scores()["PrivateEye"]
    assert row(ir.split("### Robust improvement")[0], "PrivateEye")[1:] == ["–", "0.0%"]
    robust = ir.split("### Robust improvement")[1]
    assert row(robust, "PrivateEye")[1] == f"{100 * (30 - 24.9) / (pe['human'] - pe['random']):.1f}%"
    assert "- ABS over fixed: PrivateEye (s_fixed = 0: the paper's form is undefined" in ir
    with pytest.raises(SystemExit):
        report.parse_args(["--runs", *dirs, "--compare", "ABS", "nope"])

    write_run(tmp_path / "ABS" / "Amidar-short", "Amidar-v5", 2, 50.0, total=500)
    assert report.main(["--runs", *dirs, "--out", str(tmp_path / "o2"), "--reps", "20"]) == 2
    res = subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), "--runs", *dirs, "--out",
                          str(tmp_path / "o3"), "--reps", "20"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "label ABS has runs of different lengths (total_timesteps 500, 1,000)" in res.stderr
    assert "--allow-mixed-timesteps" in res.stderr and not (tmp_path / "o3").exists()
    assert report.main(["--runs", *dirs, "--out", str(tmp_path / "o4"), "--reps", "20",
                        "--allow-mixed-timesteps"]) == 0
    assert "ABS: pools runs of different lengths" in (tmp_path / "o4" / "report.md").read_text()


def test_bad_input(tmp_path):
    with pytest.raises(SystemExit) as e:
        report.parse_args(["--runs", f"A={tmp_path / 'nope'}"])
    assert e.value.code == 2
    assert report.main(["--runs", f"A={tmp_path}", "--out", str(tmp_path / "o")]) == 1  # no finished runs


def test_improvement_lists_games_neither_compared_label_ran(tmp_path):
    """A game only a third label ran is listed as left out of the A-over-B rates, not skipped silently."""
    for label, games in (("A", ("Amidar",)), ("B", ("Amidar",)), ("C", ("Amidar", "Qbert"))):
        for game in games:
            write_run(tmp_path / label / game, f"{game}-v5", 1, 100.0 if label == "B" else 200.0)
    assert report.main(["--runs", *(f"{lb}={tmp_path / lb}" for lb in "ABC"), "--out", str(tmp_path / "out"),
                        "--reps", "20", "--compare", "A", "B"]) == 0
    ir = section((tmp_path / "out" / "report.md").read_text(), "Improvement rate")
    assert "- A over B: Qbert (no run of either label)" in ir
    assert "No game left out" not in ir


def test_skipped_comparisons_are_listed_and_never_replaced_by_reference_vs_all(tmp_path):
    """Comparisons chosen for their labels (the scale grid's ABS range vs the fixed baseline of its own network)
    whose labels lack runs are listed as skipped; the report does not compare the reference with every label."""
    for label in ("S_ABS", "L_fixed"):
        write_run(tmp_path / label / "Amidar", "Amidar-v5", 1, 100.0)
    dirs = [f"{lb}={tmp_path / lb}" for lb in ("S_ABS", "L_fixed")]
    assert report.main(["--runs", *dirs, "--out", str(tmp_path / "out"), "--reps", "20",
                        "--skip-compare", "S_ABS", "S_fixed", "--skip-compare", "L_ABS", "L_fixed"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "S_ABS over L_fixed" not in md and "S_ABS vs L_fixed" not in md
    assert "comparison S_ABS vs S_fixed skipped: no finished run of S_fixed" in section(md, "Data")
    ir = section(md, "Improvement rate")
    assert "- S_ABS over S_fixed: no finished run of S_fixed" in ir and "- L_ABS over L_fixed: no finished run " \
        "of L_ABS" in ir and "| game |" not in ir
    assert "- no comparison with runs of both its labels" in section(md, "Per-game evaluation return")
    with pytest.raises(SystemExit):  # a pair with runs of both labels is compared, not skipped
        report.parse_args(["--runs", *dirs, "--skip-compare", "S_ABS", "L_fixed"])


def test_total_timesteps_keeps_one_length_and_lists_the_others(tmp_path):
    write_run(tmp_path / "ABS" / "full", "Amidar-v5", 1, 200.0, total=1000)
    write_run(tmp_path / "ABS" / "mini", "Amidar-v5", 2, 50.0, total=20)
    dirs = ["--runs", f"ABS={tmp_path / 'ABS'}", "--reps", "20"]
    res = subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), *dirs, "--out", str(tmp_path / "o1")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "pass --total-timesteps N to report only the runs of length N" in res.stderr
    assert report.main([*dirs, "--out", str(tmp_path / "o2"), "--total-timesteps", "1000"]) == 0
    data = section((tmp_path / "o2" / "report.md").read_text(), "Data")
    assert row(data, "ABS")[2] == "1" and f"ABS: other length, left out: `{tmp_path / 'ABS' / 'mini'}` (20 steps, " \
        "not 1,000)" in data
    assert report.main([*dirs, "--out", str(tmp_path / "o3"), "--total-timesteps", "5"]) == 1  # no run of 5 steps


def test_a_run_found_twice_keeps_the_newer_copy(tmp_path):
    write_run(tmp_path / "ABS" / "a", "Amidar-v5", 1, 100.0)
    write_run(tmp_path / "ABS" / "b", "Amidar-v5", 1, 300.0)
    older, newer = tmp_path / "ABS" / "b" / "eval_results.json", tmp_path / "ABS" / "a" / "eval_results.json"
    os.utime(older, (1_000_000, 1_000_000))  # "b" is the older copy, whatever the order of the directory walk
    data, _, notes = report.collect({"ABS": tmp_path / "ABS"}, None, {})
    assert data["ABS"]["Amidar"][1].score == 100.0
    assert notes == [f"ABS: Amidar seed 1 found twice; kept the newer `{newer.parent}`, ignored `{older.parent}`"]


# ----------------------------------------------------------------------------- malformed eval_results.json
GOOD = {"algo": "abs_pqn_atari", "env_id": "Amidar-v5", "seed": 1, "global_step": 1000, "total_timesteps": 1000,
        "eval": {"episodes": 2, "returns": [1.0, 3.0], "mean": 2.0}, "args": {"env_id": "Amidar-v5", "seed": 1}}


def with_(**changes):
    """GOOD with top-level keys changed (a value of `...` deletes the key)."""
    res = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if v is ...:
            del res[k]
        else:
            res[k] = v
    return json.dumps(res)


# (name, the file's text, what the reason names)
MALFORMED = [
    ("list", "[]", "holds a list, not a JSON object"),
    ("null", "null", "holds null, not a JSON object"),
    ("string", '"eval"', 'holds the string "eval", not a JSON object'),
    ("eval-string", with_(eval="x"), 'eval is the string "x", not an object'),
    ("eval-missing", with_(eval=...), "no eval"),
    ("env-id-number", with_(env_id=5), "env_id is the number 5, not an environment id"),
    ("env-id-missing", json.dumps({**json.loads(with_(env_id=...)), "args": {"seed": 1}}), "no env_id"),
    ("seed-string", with_(seed="abc"), 'seed is the string "abc", not an integer'),
    ("seed-bool", with_(seed=True), "seed is the boolean true, not an integer"),
    ("seed-missing", json.dumps({**json.loads(with_(seed=...)), "args": {}}), "no seed"),
    ("mean-string", with_(eval={"episodes": 2, "mean": "2"}), 'eval.mean is the string "2", not a number'),
    ("returns-string", with_(eval={"episodes": 2, "mean": None, "returns": "ab"}),
     'eval.returns is the string "ab", not a list of numbers'),
    ("args-list", with_(args=[]), "args is a list, not an object"),
    ("window-string", with_(args={"env_id": "Amidar-v5", "window": "10"}), 'args.window is the string "10"'),
    ("adapt-string", with_(args={"env_id": "Amidar-v5", "adapt": "false"}), 'args.adapt is the string "false"'),
    ("step-negative", with_(global_step=-5), "global_step is the number -5, not a step count"),
    ("step-string", with_(total_timesteps="1000"), 'total_timesteps is the string "1000", not a step count'),
    ("complete-string", with_(complete="no"), 'complete is the string "no", not a boolean'),
    ("stop-string", with_(args={"env_id": "Amidar-v5", "stop_at_step": "100"}),
     'args.stop_at_step is the string "100", not an integer or null'),
    ("seconds-string", with_(train_seconds="60"), 'train_seconds is the string "60", not a number >= 0'),
    ("seconds-negative", with_(train_seconds=-1), "train_seconds is the number -1, not a number >= 0"),
    ("capped-string", with_(eval={"episodes": 2, "mean": 1.0, "capped": "2"}),
     'eval.capped is the string "2", not an integer >= 0'),
    ("actions-negative", with_(eval={"episodes": 2, "mean": 1.0, "action_counts": [3, -1]}),
     "eval.action_counts is a list, not a list of integers >= 0"),
    ("actions-floats", with_(eval={"episodes": 2, "mean": 1.0, "action_counts": [3.5]}),
     "eval.action_counts is a list, not a list of integers >= 0"),
    ("invalid-json", '{"env_id": "Amidar-v5", ', "invalid JSON"),
    ("empty", "", "invalid JSON"),
]


@pytest.mark.parametrize("name,text,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_read_run_names_what_is_malformed(tmp_path, name, text, reason):
    (tmp_path / "eval_results.json").write_text(text)
    with pytest.raises(runs.Malformed) as e:
        runs.read_run("A", tmp_path)
    assert reason in str(e.value)


def test_malformed_eval_results_are_listed_as_skipped_and_the_report_is_made(tmp_path):
    """Every malformed file is named in the Data section with its path and reason; the good runs are reported."""
    write_run(tmp_path / "A" / "good1", "Amidar-v5", 1, 200.0, lambda s: s / 10)
    write_run(tmp_path / "A" / "good2", "Amidar-v5", 2, 300.0, lambda s: s / 10)
    for name, text, _ in MALFORMED:
        (tmp_path / "A" / name).mkdir()
        (tmp_path / "A" / name / "eval_results.json").write_text(text)
    (tmp_path / "A" / "latin1").mkdir()
    (tmp_path / "A" / "latin1" / "eval_results.json").write_bytes(b'{"env_id": "Caf\xe9-v5"}')
    res = subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), "--runs", f"A={tmp_path / 'A'}",
                          "--out", str(tmp_path / "out"), "--reps", "20"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    data = section((tmp_path / "out" / "report.md").read_text(), "Data")
    assert row(data, "A")[2] == "2"  # the two good runs
    for name, _, reason in MALFORMED:
        line = next(ln for ln in data.splitlines() if f"`{tmp_path / 'A' / name / 'eval_results.json'}`" in ln)
        assert line.startswith("- A: skipped ") and "malformed eval_results.json" in line and reason in line, line
    assert f"`{tmp_path / 'A' / 'latin1' / 'eval_results.json'}`: malformed eval_results.json (not UTF-8" in data


# ----------------------------------------------------------------------------- damaged or incomplete event files
COMMITTED = ROOT / "results" / "mujoco-1m" / "runs" / "mujoco"


def records(path: Path) -> list[tuple[int, int, set]]:
    """(byte offset where the record ends, its step, its tags) of every record of an intact event file, read here
    without report.py's reader."""
    from tensorboard.compat.proto import event_pb2

    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
        out.append((pos + 16 + n, event.step, {v.tag for v in event.summary.value}))
        pos += 16 + n
    assert pos == len(data)
    return out


def tensorboard_scalars(run_dir: Path, tags=None) -> dict:
    """tag -> (steps, values) as TensorBoard's own EventAccumulator reads a run directory (every event kept, sorted
    by step then wall time): the reference events.read_run_events must equal."""
    import logging

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    level = logging.getLogger("tensorboard").level
    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # its "TensorFlow restart" line at each resume
    try:
        acc.Reload()
    finally:
        logging.getLogger("tensorboard").setLevel(level)
    out = {}
    for tag in acc.Tags()["scalars"]:
        if tags is None or tag in tags:
            ev = sorted(acc.Scalars(tag), key=lambda e: (e.step, e.wall_time))
            out[tag] = (np.array([e.step for e in ev], dtype=float), np.array([e.value for e in ev], dtype=float))
    return out


def same_scalars(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[t][0], b[t][0]) and np.array_equal(a[t][1], b[t][1])
                                        for t in a)


def only_event_file(run_dir: Path) -> Path:
    (path,) = run_dir.glob("events.out.tfevents.*")
    return path


def test_every_committed_event_file_reads_to_its_end_and_reaches_its_run_s_last_step():
    """(tests/test_results.py checks that the committed report, which would list any, comes out the same.)"""
    found = [runs.read_run(lb, d) for lb in ("PPO", "PPO+ABS") for d in sorted((COMMITTED / lb).glob("*__*"))]
    assert len(found) == 18
    files = {r.path: [events.read_event_file(p) for p in events.event_files(r.path)] for r in found}
    assert sum(map(len, files.values())) == 22  # 4 runs were resumed
    for r in found:
        assert all(ef.problem is None and ef.read == ef.size > 0 for ef in files[r.path]), r.path
        assert files[r.path][-1].last_step == r.total_steps and "charts/SPS" in files[r.path][-1].tags, r.path


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Copies of the committed PPO Hopper runs, seed 2 intact (it was resumed: two event files), and PPO+ABS
    Hopper seeds 1-3, each damaged one way:
    PPO seed 1: its event file cut mid-record at about 30% (TensorBoard reads up to the cut, silently);
    PPO seed 3: one byte of its event file flipped at half its length (a record fails its CRC check);
    PPO+ABS seed 1: its event file cut at a record boundary at half its length (no read error: incomplete);
    PPO+ABS seeds 2 and 3 intact. Returns (root, {name: details}, the report made, the committed report of the
    intact runs, the report's directory)."""
    root = tmp_path_factory.mktemp("damaged")
    for label in ("PPO", "PPO+ABS"):
        for seed in (1, 2, 3):
            shutil.copytree(COMMITTED / label / f"Hopper-v4__{seed}", root / label / f"Hopper-v4__{seed}")
    info = {}
    cut = only_event_file(root / "PPO" / "Hopper-v4__1")
    ends = records(cut)
    end = next(e for e, _, _ in ends if e > 0.3 * cut.stat().st_size)
    size = end + 7  # the next record's header cut after 7 of its 12 bytes
    full_curve = tensorboard_scalars(cut.parent, [runs.RETURN_TAG])[runs.RETURN_TAG]
    with open(cut, "r+b") as f:
        f.truncate(size)
    cut_curve = tensorboard_scalars(cut.parent, [runs.RETURN_TAG])[runs.RETURN_TAG]
    info["cut"] = dict(path=cut, read=end, size=size, step=max(s for e, s, _ in ends if e <= end),
                       full_curve=full_curve, cut_curve=cut_curve)
    flip = only_event_file(root / "PPO" / "Hopper-v4__3")
    raw = bytearray(flip.read_bytes())
    at = len(raw) // 2
    raw[at] ^= 0xFF
    flip.write_bytes(bytes(raw))
    start = max([0] + [e for e, _ in records_of(bytes(raw), at)])
    info["flip"] = dict(path=flip, read=start, size=len(raw))
    short = only_event_file(root / "PPO+ABS" / "Hopper-v4__1")
    ends = records(short)
    end = next(e for e, _, _ in ends if e > 0.5 * short.stat().st_size)
    with open(short, "r+b") as f:
        f.truncate(end)
    info["short"] = dict(path=short, step=max(s for e, s, tags in ends if e <= end and "charts/SPS" in tags))
    out = tmp_path_factory.mktemp("damaged-report")
    assert report.main(["--runs", f"PPO={root / 'PPO'}", f"PPO+ABS={root / 'PPO+ABS'}", "--out", str(out),
                        "--reps", "20"]) == 0
    return root, info, (out / "report.md").read_text(), (COMMITTED.parents[1] / "report.md").read_text(), out


def records_of(data: bytes, limit: int) -> list[tuple[int, int]]:
    """(end offset, 0) of the intact records that end at or before byte `limit` of data."""
    pos, out = 0, []
    while pos + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        if pos + 16 + n > limit:
            break
        out.append((pos + 16 + n, 0))
        pos += 16 + n
    return out


def test_tensorboard_alone_reads_a_cut_event_file_silently_short(damaged):
    """What the report guards against: TensorBoard reads the cut file up to the cut and says nothing, and the curve's
    numbers (here the final training return) come out of a third of the run as if it were all of it."""
    _, info, *_ = damaged
    full, cut = info["cut"]["full_curve"], info["cut"]["cut_curve"]
    assert len(cut[1]) < 0.5 * len(full[1]) and cut[0].max() < 0.5 * full[0].max()
    assert abs(np.mean(cut[1][-100:]) - np.mean(full[1][-100:])) > 500  # Hopper: ~1,000 vs ~2,700


def test_a_cut_or_corrupted_event_file_is_named_and_its_curve_numbers_left_out(damaged):
    root, info, md, intact, *_ = damaged
    assert "Damaged or incomplete event files" not in intact
    data = section(md, "Data")
    lines = data.split("### Damaged or incomplete event files")[1].splitlines()
    cut, flip = info["cut"], info["flip"]
    line = next(ln for ln in lines if f"`{cut['path']}`" in ln)
    assert (f"(PPO Hopper seed 1): damaged: a record cut short (in its header) at byte {cut['read']:,} of "
            f"{cut['size']:,}; TensorBoard stops reading the file there, so its events end at step {cut['step']:,} "
            "(the run's last step 1,001,472)") in line
    line = next(ln for ln in lines if f"`{flip['path']}`" in ln)
    assert "(PPO Hopper seed 3): damaged: a record failing its CRC check" in line
    assert f"at byte {flip['read']:,} of {flip['size']:,}" in line
    # Training-curve numbers: only the intact seed 2 is left for PPO, in every table built from the curves ...
    for title in ("Final training return", "Early / late"):
        text = section(md, title)
        assert ("Left out (event files damaged or incomplete, see \"Damaged or incomplete event files\"): PPO Hopper "
                "seed 1, PPO Hopper seed 3, PPO+ABS Hopper seed 1.") in text
        got, was = ([[c.strip() for c in ln.strip("|").split("|")] for ln in t.splitlines()
                     if ln.startswith("| Hopper | PPO |")] for t in (text, section(intact, title)))
        assert len(got) == len(was) >= 1
        for g, w in zip(got, was):  # per seed "1: x, 2: y, 3: z" -> "2: y", n 3 -> 1
            assert g[2] == w[2].split(", ")[1] and g[2].startswith("2: ") and (g[-1], w[-1]) == ("1", "3"), (g, w)
    # ... and in the figure data: one PPO run in every bin, none past the cut from the cut run
    with open(damaged[4] / "learning_curves.csv") as f:
        ppo = [r for r in csv.DictReader(f) if r["label"] == "PPO"]
    assert ppo and {r["n_runs"] for r in ppo} == {"1"}
    assert "not in the learning curves or the adapt figure (event files damaged or incomplete): PPO Hopper seed 1, " \
        "PPO Hopper seed 3, PPO+ABS Hopper seed 1" in section(md, "Figures")
    # The evaluation return, from eval_results.json, stays for every seed.
    for label in ("PPO", "PPO+ABS"):
        assert row_of(section(md, "Per-game evaluation return"), "Hopper", label) == row_of(
            section(intact, "Per-game evaluation return"), "Hopper", label)


def test_an_event_file_that_ends_early_without_a_read_error_is_incomplete(damaged):
    _, info, md, *_ = damaged
    short = info["short"]
    line = next(ln for ln in section(md, "Data").splitlines() if f"`{short['path']}`" in ln)
    assert (f"(PPO+ABS Hopper seed 1): incomplete: its events end at step {short['step']:,} (charts/SPS), before the "
            "run's last step 1,000,448 by more than one logging interval") in line
    final = section(md, "Final training return")
    assert row_of(final, "Hopper", "PPO+ABS")[2].startswith("2: ") and row_of(final, "Hopper", "PPO+ABS")[-1] == "2"
    burn = section(md, "Early / late").split("### Burn-in")[1]
    assert row_of(burn, "Hopper", "PPO+ABS")[-1] == "2"  # its burn-in left out too


def write_resumed_run(run_dir: Path, first_to: int, resume_at: int = 500, total: int = 1000, damage=b""):
    """A run written in two sessions, as a resumed script writes it: the first event file has steps 100..first_to
    (then `damage` appended to it), the second opens with purge_step resume_at + 1 (TensorBoard drops every earlier
    event from that step on) and logs resume_at..total."""
    from torch.utils.tensorboard import SummaryWriter

    write_run(run_dir, "Hopper-v4", 1, 1000.0, total=total)
    w = SummaryWriter(str(run_dir), purge_step=0)
    for step in range(100, first_to + 1, 100):
        w.add_scalar(runs.RETURN_TAG, step / 10, step)
        w.add_scalar("charts/SPS", 1000, step)
    w.close()
    with open(only_event_file(run_dir), "ab") as f:
        f.write(damage)
    time.sleep(1.1)  # the second file's name (its time stamp) sorts after the first
    w = SummaryWriter(str(run_dir), purge_step=resume_at + 1)
    for step in range(resume_at, total + 1, 100):
        w.add_scalar(runs.RETURN_TAG, step / 10, step)
        w.add_scalar("charts/SPS", 1000, step)
    w.close()


def test_damage_a_resumed_run_replaced_is_noted_and_damage_before_its_resume_leaves_the_curve_out(tmp_path):
    """A hard kill (a node failure) can leave a record cut short at the end of an event file; the run then resumes
    from its checkpoint in a new file that replaces every event from the resume step on. If the damaged file was
    read past that step, nothing is missing: noted, numbers kept. If it was read only up to an earlier step, the
    events between are lost: left out."""
    partial = struct.pack("<Q", 50)[:5]  # a header cut after 5 bytes
    write_resumed_run(tmp_path / "A" / "kept", first_to=800, damage=partial)
    data, _, _ = report.collect({"A": tmp_path / "A"}, None, {})
    run = data["A"]["Hopper"][1]
    first = events.event_files(run.path)[0]
    assert run.event_problems == [] and len(run.event_notes) == 1, run.event_problems
    assert run.event_notes[0].startswith(f"`{first}` (A Hopper seed 1): a record cut short (in its header) at byte ")
    assert "events end at step 800, but the run resumed at step 501 in a later event file" in run.event_notes[0]
    assert run.scalars[runs.RETURN_TAG][0].tolist() == [100, 200, 300, 400, 500, 500, 600, 700, 800, 900, 1000]
    assert report.main(["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "o1"), "--reps", "20"]) == 0
    md = (tmp_path / "o1" / "report.md").read_text()
    assert "Damaged, but nothing read from them is missing (kept):" in md and "Left out" not in md
    write_resumed_run(tmp_path / "B" / "lost", first_to=300, damage=partial)
    data, _, _ = report.collect({"B": tmp_path / "B"}, None, {})
    run = data["B"]["Hopper"][1]
    assert run.event_notes == [] and run.scalars == {}
    assert len(run.event_problems) == 1 and "damaged: a record cut short (in its header)" in run.event_problems[0]
    assert "events end at step 300 (the run's last step 1,000)" in run.event_problems[0]


def test_an_intact_resumed_run_is_not_flagged(tmp_path):
    write_resumed_run(tmp_path / "A" / "r", first_to=600)
    data, _, _ = report.collect({"A": tmp_path / "A"}, None, {})
    run = data["A"]["Hopper"][1]
    assert run.event_problems == run.event_notes == [] and runs.RETURN_TAG in run.scalars
    steps = run.scalars[runs.RETURN_TAG][0]
    assert list(steps).count(600) == 1  # the first file's event at 600 (after the resume at 500) was purged


def test_the_one_pass_reader_gives_tensorboards_scalars(tmp_path, damaged):
    """events.read_run_events (CRCs in C, one pass) against TensorBoard's EventAccumulator, tag by tag, value by
    value: committed runs (resumed ones included, two event files), runs resumed after damage, a fresh start over a
    killed attempt's events (purge_step 0), and the cut and corrupted copies of the damaged fixture."""
    from torch.utils.tensorboard import SummaryWriter

    resumed = [d for lb in ("PPO", "PPO+ABS") for d in sorted((COMMITTED / lb).glob("*__*"))
               if len(events.event_files(d)) > 1]
    assert len(resumed) == 4
    dirs = [COMMITTED / "PPO" / "HalfCheetah-v4__1", *resumed[:2]]
    partial = struct.pack("<Q", 50)[:5]
    write_resumed_run(tmp_path / "A" / "intact", first_to=600)
    write_resumed_run(tmp_path / "A" / "kept", first_to=800, damage=partial)
    write_resumed_run(tmp_path / "A" / "lost", first_to=300, damage=partial)
    write_resumed_run(tmp_path / "A" / "fresh", first_to=700, total=700)  # then a new start (purge_step 0) over it
    time.sleep(1.1)
    w = SummaryWriter(str(tmp_path / "A" / "fresh"), purge_step=0)
    for step in range(0, 1001, 100):
        w.add_scalar(runs.RETURN_TAG, -step, step)
    w.close()
    dirs += [tmp_path / "A" / n for n in ("intact", "kept", "lost", "fresh")]
    root, info, *_ = damaged
    dirs += [info["cut"]["path"].parent, info["flip"]["path"].parent, info["short"]["path"].parent]
    for d in dirs:
        files, ours = events.read_run_events(d)
        theirs = tensorboard_scalars(d)
        assert theirs and same_scalars(ours, theirs), d
    steps, values = events.read_run_events(tmp_path / "A" / "fresh")[1][runs.RETURN_TAG]
    assert steps.tolist() == list(range(0, 1001, 100)) and values.tolist() == [-s for s in range(0, 1001, 100)]


def empty_event_files(run_dir: Path, how: str) -> None:
    """Leave a run without training events: its event files removed, cut to 0 bytes, or replaced by one that a
    SummaryWriter opened and closed (its file-version record only)."""
    from torch.utils.tensorboard import SummaryWriter

    for path in run_dir.glob("events.out.tfevents.*"):
        if how == "zero bytes":
            path.write_bytes(b"")
        else:
            path.unlink()
    if how == "no summary":
        SummaryWriter(str(run_dir)).close()


@pytest.mark.parametrize("how", ["removed", "zero bytes", "no summary"])
def test_a_run_without_training_events_is_named_and_left_out_of_every_curve_table(tmp_path, how):
    """A run whose event files are missing or hold no training event would drop out of the curves' tables (burn-in
    n 3 -> 2) without a word: it is named as incomplete, as a cut file is, and its evaluation return kept."""
    for seed in (1, 2, 3):
        shutil.copytree(COMMITTED / "PPO+ABS" / f"Hopper-v4__{seed}", tmp_path / "runs" / f"Hopper-v4__{seed}")
    run_dir = tmp_path / "runs" / "Hopper-v4__2"
    empty_event_files(run_dir, how)
    assert report.main(["--runs", f"PPO+ABS={tmp_path / 'runs'}", "--out", str(tmp_path / "o"), "--reps", "20"]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    damaged = section(md, "Data").split("### Damaged or incomplete event files")[1]
    (line,) = [ln for ln in damaged.splitlines() if "(PPO+ABS Hopper seed 2)" in ln]
    assert line.startswith(f"- `{run_dir}" if how == "removed" else f"- `{run_dir}/events.out.tfevents."), line
    assert line.endswith("incomplete: no TensorBoard event file (events.out.tfevents.*) in the run directory"
                         if how == "removed" else "incomplete: its event files hold no training events (none of "
                         "charts/SPS, losses/*, charts/episodic_return)"), line
    left = ("Left out (event files damaged or incomplete, see \"Damaged or incomplete event files\"): "
            "PPO+ABS Hopper seed 2.")
    burn = section(md, "Early / late").split("### Burn-in")[1]
    assert left in section(md, "Final training return") and left in section(md, "Early / late")
    assert row_of(burn, "Hopper", "PPO+ABS")[-1] == "2"
    assert row_of(section(md, "Per-game evaluation return"), "Hopper", "PPO+ABS")[-1] == "3"


@pytest.mark.parametrize("item,message", [
    ("A=", "--runs: 'A=' names no directory (LABEL=DIR)"),
    ("=sub", "--runs: empty or repeated label in '=sub'"),
    ("A=nope", "--runs: 'nope' is not a directory"),
    ("A=file", "--runs: 'file' is not a directory"),
])
def test_a_runs_item_without_a_directory_is_one_line_and_exit_2(tmp_path, item, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "sub").mkdir()
    res = subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), "--runs", item, "--out", "o"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"report.py: error: {message} (report.py --help"), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "sub"]


def test_logging_interval_and_iteration_tag():
    assert events.logging_interval([1024, 2048, 4096, 8192]) == 4096  # a rollout that grows
    assert events.logging_interval([500]) == 500 and events.logging_interval([]) == 0
    assert events.iteration_tag({"charts/SPS", "losses/x", runs.RETURN_TAG}) == "charts/SPS"
    assert events.iteration_tag({"losses/b", "losses/a", runs.RETURN_TAG}) == "losses/a"
    assert events.iteration_tag({runs.RETURN_TAG}) == runs.RETURN_TAG and events.iteration_tag(set()) is None


# ----------------------------------------------------------------------------- --out
def report_cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_out_that_is_a_file_or_below_one_is_one_line_and_exit_2(tmp_path, capsys):
    write_run(tmp_path / "A" / "a", "Amidar-v5", 1, 100.0)
    (tmp_path / "file").write_text("x")
    res = report_cli("--runs", f"A={tmp_path / 'A'}", "--out", tmp_path / "file", "--reps", "20")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr == f"report.py: --out {tmp_path / 'file'}: is a file, not a directory\n"
    assert report.main(["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "file" / "sub")]) == 2
    assert capsys.readouterr().err == (f"report.py: --out {tmp_path / 'file' / 'sub'}: {tmp_path / 'file'} is a file, "
                                       "so no directory can be made below it\n")
    assert (tmp_path / "file").read_text() == "x"


def test_out_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    write_run(tmp_path / "A" / "a", "Amidar-v5", 1, 100.0)
    argv = ["--runs", f"A={tmp_path / 'A'}", "--out", str(tmp_path / "new" / "out"), "--reps", "20"]
    real = os.access
    monkeypatch.setattr(runs.os, "access", lambda p, mode: False if Path(p) == tmp_path else real(p, mode))
    assert report.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"report.py: --out {tmp_path / 'new' / 'out'}: {tmp_path} is not writable\n"
    assert not (tmp_path / "new").exists()
    monkeypatch.setattr(runs.os, "access", real)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "new" / "out" / "report.md"))
    monkeypatch.setattr(report, "write_report", full)
    assert report.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"report.py: --out {tmp_path / 'new' / 'out'}: cannot write the "
                                                   "report (OSError: No space left on device")


def test_data_section_says_which_evaluation_protocol_each_label_used(tmp_path):
    """--eval-protocol (PQN, GNS) is recorded in each run's args; the Data section names it per label, and says
    nothing for runs that predate it (MuJoCo, older runs)."""
    for label, protocol in (("ABS", "quota"), ("Authors", "first-finished"), ("Old", None)):
        for seed in (1, 2):
            write_run(tmp_path / label / str(seed), "Amidar-v5", seed, 100.0 + seed)
            path = tmp_path / label / str(seed) / "eval_results.json"
            res = json.loads(path.read_text())
            if protocol is not None:
                res["args"]["eval_protocol"] = protocol
            path.write_text(json.dumps(res))
    assert report.main(["--runs", *(f"{lb}={tmp_path / lb}" for lb in ("ABS", "Authors", "Old")), "--out",
                        str(tmp_path / "o"), "--reps", "20"]) == 0
    data = section((tmp_path / "o" / "report.md").read_text(), "Data")
    assert "- Evaluation of ABS: `--eval-protocol quota`\n" in data
    assert ("- Evaluation of Authors: `--eval-protocol first-finished` (the first games to end count, which favours "
            "short games)") in data
    assert "Evaluation of Old" not in data


def subsection(md: str, title: str) -> str:
    """The text of a "### title" subsection, up to the next heading."""
    return md.split(f"\n### {title}\n")[1].split("\n#")[0]


def write_prefix_run(run_dir: Path, env_id, seed, score, stop, reached, total=1000, curve=lambda s: s / 10):
    """A run of a `total`-step protocol stopped at `stop` (--stop-at-step) that ended at step `reached`: its
    training games only up to there, and eval_results.json as the scripts write it at a stop."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    w = SummaryWriter(log_dir=str(run_dir))
    for step in range(0, reached + 1, 10):
        w.add_scalar("charts/episodic_return", curve(step), step)
    w.close()
    (run_dir / "eval_results.json").write_text(json.dumps({
        "algo": "abs_pqn_atari", "env_id": env_id, "seed": seed, "run_name": run_dir.name, "global_step": reached,
        "total_timesteps": total, "complete": False, "train_seconds": 1.0,
        "eval": {"episodes": 2, "returns": [score, score], "mean": score},
        "args": {"env_id": env_id, "seed": seed, "adapt": False, "stop_at_step": stop, "total_timesteps": total}}))


def test_read_run_knows_prefix_runs_and_runs_written_before_the_flag(tmp_path):
    write_prefix_run(tmp_path / "p", "Amidar-v5", 1, 10.0, stop=200, reached=208)
    r = runs.read_run("A", tmp_path / "p")
    assert (r.complete, r.total_steps, r.total_timesteps, r.window_steps, r.stop_step) == (False, 208, 1000, 1000, 200)
    assert runs.reached(r) == "200 of 1,000 steps"
    write_run(tmp_path / "old", "Amidar-v5", 1, 10.0)  # no "complete": it trained to its end
    r = runs.read_run("A", tmp_path / "old")
    assert (r.complete, r.window_steps, r.stop_step) == (True, 1000, 1000)
    assert runs.reached(r) == "the end of 1,000 steps"


def test_report_of_prefix_runs(tmp_path):
    """Runs stopped at 200 of a 1,000-step protocol: the early window is the protocol's first 10% (steps <= 100,
    not the first 20 steps they trained), the late and whole-run metrics are not reached, and every number read at
    the runs' end says where it is."""
    for seed in (1, 2):
        write_prefix_run(tmp_path / "ABS" / f"a{seed}", "Amidar-v5", seed, 100.0 * seed, 200, 208)
        write_prefix_run(tmp_path / "Vanilla" / f"a{seed}", "Amidar-v5", seed, 50.0, 200, 216, curve=lambda s: 1.0)
    dirs = ["--runs", f"ABS={tmp_path / 'ABS'}", f"Vanilla={tmp_path / 'Vanilla'}", "--reps", "20"]
    assert report.main([*dirs, "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    for title in ("Aggregate human-normalised score", "Per-game evaluation return", "Per-game human-normalised "
                  "score", "Final training return", "Improvement rate of ABS"):
        assert f"## {title} at 200 of 1,000 steps\n" in md, title
    assert "- Prefix runs (ABS, Vanilla): stopped at 200 of 1,000 steps (`--stop-at-step`; each ends with the " \
        "iteration that crosses its stop, here at 208 to 216 steps)" in md
    early = subsection(md, "Early return")
    # the returns s / 10 at steps 0, 10, ..., 100: mean 5.0 (the first 10% of 208 steps would give 1.0)
    assert row_of(early, "Amidar", "ABS")[2:4] == ["1: 5.000, 2: 5.000", "**5.000**"]
    assert row_of(early, "Amidar", "Vanilla")[3] == "1.000"
    for title in ("Late variance", "Whole-run return"):
        assert subsection(md, title).strip() == ("Not reached: every run stopped at 200 of 1,000 steps "
                                                      "(`--stop-at-step`), before this metric's window.")


def test_prefix_runs_beside_complete_ones(tmp_path):
    """A prefix label beside a complete one: each late cell says which it is; a prefix run stopped before 10% of
    its protocol has no early return; one label's runs stopped at different steps are refused unless pooled."""
    write_prefix_run(tmp_path / "P" / "a", "Amidar-v5", 1, 10.0, 50, 56)  # stopped before step 100
    write_run(tmp_path / "F" / "a", "Amidar-v5", 1, 20.0, lambda s: s / 10)
    dirs = ["--runs", f"P={tmp_path / 'P'}", f"F={tmp_path / 'F'}", "--reps", "20"]
    assert report.main([*dirs, "--out", str(tmp_path / "o1")]) == 0
    md = (tmp_path / "o1" / "report.md").read_text()
    assert "## Per-game evaluation return at each run's stop (see Data)\n" in md
    assert row_of(subsection(md, "Early return"), "Amidar", "P")[2] == "not reached"
    late = subsection(md, "Late variance")
    assert row_of(late, "Amidar", "P")[2] == "not reached"
    assert row_of(late, "Amidar", "F")[4:] == ["n = 1, no interval", "1"]
    write_prefix_run(tmp_path / "P" / "b", "Amidar-v5", 2, 10.0, 500, 504)
    res = subprocess.run([sys.executable, str(ROOT / "reproduce" / "report.py"), *dirs, "--out", str(tmp_path / "o2")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "o2").exists()
    assert "label P has runs that stopped at different steps (50 of 1,000 steps; 500 of 1,000 steps)" in res.stderr
    assert report.main([*dirs, "--out", str(tmp_path / "o3"), "--allow-mixed-timesteps"]) == 0
    assert "P: pools runs that stopped at different steps" in (tmp_path / "o3" / "report.md").read_text()


def test_early_return_as_hns_per_game_and_across_games(tmp_path):
    """On Atari games the early return is also given as HNS, per game and aggregated over the games. One run per game:
    the stratified bootstrap can only return the point, so the games are resampled too, and that interval is given."""
    games = ("Amidar", "BattleZone", "Phoenix", "Qbert")
    levels = {"ABS": (0.1, 0.2, 0.3, 0.9), "Vanilla": (0.0, 0.1, 0.5, 0.6)}  # each game's early HNS, by hand
    for lb, hs in levels.items():
        for g, h in zip(games, hs):
            s = runs.load_atari_scores()[g]
            raw = s["random"] + h * (s["human"] - s["random"])
            write_prefix_run(tmp_path / lb / g, f"{g}-v5", 1, 1.0, 200, 208, curve=lambda _, raw=raw: raw)
    dirs = ["--runs", *(f"{lb}={tmp_path / lb}" for lb in levels), "--reps", "200"]
    assert report.main([*dirs, "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    early = subsection(md, "Early return, human-normalised")
    for lb, hs in levels.items():
        for g, h in zip(games, hs):
            assert row_of(early, g, lb)[3].strip("*") == f"{h:.3f}", (g, lb)
    assert row(early, "Phoenix | ABS − Vanilla")[2] == "-0.200"
    assert "**ABS higher early in 3 of 4 games**" in early  # all but Phoenix
    across = md.split("#### Early return, human-normalised, across games")[1].split("\n## ")[0]
    for lb, hs in levels.items():
        iqm = np.mean(sorted(hs)[1:3])  # the IQM of 4 values: the middle two
        cells = row(across, lb)
        assert cells[1] == f"{iqm:.3f} [{iqm:.3f}, {iqm:.3f}]"  # stratified: one run per game, the point alone
        assert cells[3].startswith(f"{np.mean(hs):.3f} [")
        point, lo, hi = map(float, re.match(r"([-\d.]+) \[([-\d.]+), ([-\d.]+)\]", row(
            across.split("games resampled]")[-1], lb)[1]).groups())
        assert point == round(iqm, 3) and lo < point < hi and min(hs) <= lo and hi <= max(hs)
    # no Atari game, no HNS: the MuJoCo reports have neither section
    assert "human-normalised" not in subsection(md, "Late variance")
