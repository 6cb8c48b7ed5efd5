"""The MinAtar study's pre-registered analysis (reproduce/batch_claims.py, docs/results-minatar-batches.md): its
decisions on made-up grids whose answer is known, its normalised IQM against an independent computation, the
Bonferroni bound and the tests it decides while runs are missing, and the report's section on a grid of written runs."""
import csv
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import batch_claims as bc  # noqa: E402
from reproduce import minatar_page  # noqa: E402
from report_helpers import report_cli, write_run  # noqa: E402
from reproduce.runs import load_minatar_random  # noqa: E402
from reproduce.stats import bonferroni, compare  # noqa: E402

PLAN = bc.MINATAR_BATCHES
LABELS = ("ABS", "Small", "Vanilla", "Large")
RANDOM = load_minatar_random()


def grid(shift: dict, base=20.0, spread=1.0, drop=()):
    """(game, label) -> {seed: value}: label L's return on a game is base + shift[L] + a seed's noise (the same
    noise pattern for every label, permuted per label so that no two cells are equal)."""
    rng = np.random.default_rng(0)
    values = {}
    for g in PLAN.tasks:
        for lb in LABELS:
            noise = rng.permutation(np.linspace(-spread, spread, 10))
            values[(g, lb)] = {s: base + shift[lb] + noise[s - 1] for s in range(1, 11) if (g, lb, s) not in drop}
    return values


def analyse(values):
    evaluation = compare(values, list(PLAN.tasks), list(LABELS), [("ABS", b) for b in PLAN.baselines])
    return bc.batch_analysis(PLAN, evaluation, RANDOM, reps=200)


def test_random_returns_are_the_committed_csv():
    assert set(RANDOM) == set(PLAN.tasks) and RANDOM["Breakout-MinAtar"] == pytest.approx(0.416)


def test_abs_far_above_every_baseline_beats_each_on_every_game():
    a = analyse(grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0}))
    assert a.holm and all(t.decision == bc.BEATS for t in a.tests) and len(a.tests) == 15
    # every split but the observed one and its mirror has a smaller |difference|: p = 2 / C(20, 10)
    assert all(t.difference.p == pytest.approx(2 / 184756) for t in a.tests)
    assert max(t.adjusted for t in a.tests) == pytest.approx(15 * 2 / 184756)  # Holm: all tie, the largest is 15p
    assert [c.decision for c in a.claims] == [bc.BEATS] * 3
    assert all(c.poi == (1.0, 1.0, 1.0) and len(c.better) == 5 for c in a.claims)


def test_normalised_iqm_is_the_trimmed_mean_of_the_normalised_returns():
    values = grid({"ABS": 10, "Small": -5, "Vanilla": 0, "Large": 3})
    a = analyse(values)
    for lb in LABELS:
        normalised = [(v - RANDOM[g]) / (np.mean(list(values[(g, "Vanilla")].values())) - RANDOM[g])
                      for g in PLAN.tasks for v in values[(g, lb)].values()]
        point, lo, hi = a.iqm[lb]
        assert point == pytest.approx(scipy.stats.trim_mean(normalised, 0.25)) and lo <= point <= hi
    assert a.iqm["Vanilla"][0] == pytest.approx(1.0, abs=0.05)


def test_no_shift_is_no_difference_and_a_worse_abs_is_worse():
    same = analyse(grid({lb: 0 for lb in LABELS}, spread=5.0))
    assert all(t.decision == bc.NONE for t in same.tests)
    assert [c.decision for c in same.claims] == [bc.NONE] * 3
    worse = analyse(grid({"ABS": -10, "Small": 0, "Vanilla": 0, "Large": 0}))
    assert [c.decision for c in worse.claims] == [bc.WORSE] * 3 and all(c.poi[0] == 0.0 for c in worse.claims)


def test_a_missing_run_leaves_its_tests_incomplete_and_bounds_the_others():
    a = analyse(grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0}, drop={("Seaquest-MinAtar", "Small", 7)}))
    incomplete = [t for t in a.tests if not t.complete]  # a game's tests wait for all its 40 runs
    assert [(t.game, t.baseline) for t in incomplete] == [("Seaquest-MinAtar", b) for b in PLAN.baselines]
    assert not a.holm and not a.iqm
    done = [t for t in a.tests if t.complete]
    assert all(t.adjusted == pytest.approx(min(1.0, 15 * t.difference.p)) for t in done)  # Bonferroni
    assert all(t.decision == bc.BEATS for t in done)  # each bound 15 x 2 / C(20, 10), below alpha: decided
    assert [c.decision for c in a.claims] == [bc.INCOMPLETE] * 3


# Freeway-like returns: ABS about 0.4 above Small (exact p 0.0082, below alpha, but 15 x p = 0.12 is not); Vanilla the
# same values as ABS (p = 1); Large close to ABS
CLOSE = {"ABS": [66.0, 66.4, 65.8, 66.9, 66.2, 66.6, 65.9, 66.5, 66.1, 66.7],
         "Small": [65.7, 66.0, 65.4, 66.4, 65.9, 65.6, 65.8, 66.2, 65.3, 65.9],
         "Vanilla": [66.7, 66.1, 66.5, 65.9, 66.6, 66.2, 66.9, 65.8, 66.4, 66.0],
         "Large": [66.1, 66.3, 65.9, 66.8, 66.2, 66.5, 66.0, 66.4, 66.2, 66.6]}


def close_freeway(values):
    for lb, v in CLOSE.items():
        values[("Freeway-MinAtar", lb)] = {s: x for s, x in enumerate(v, 1)}
    return values


def test_a_complete_game_is_decided_below_the_bound_and_otherwise_waits_for_holms():
    """The page's rule while runs are missing: a game's tests once its 40 runs are in; a Bonferroni bound below alpha
    decides (Holm's is never above it), so does a permutation p at alpha or above (no difference: Holm's is never below
    it), any other waits for Holm's; once all are in, Holm's p (here below the bound) decides."""
    others = {(g, lb, 10) for g in PLAN.tasks if g not in ("Freeway-MinAtar", "Breakout-MinAtar") for lb in LABELS}
    values = close_freeway(grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0}, drop=others))
    a = analyse(values)
    by = {(t.game, t.baseline): t for t in a.tests}
    assert {k for k, t in by.items() if t.complete} == {(g, b) for g in ("Freeway-MinAtar", "Breakout-MinAtar")
                                                      for b in PLAN.baselines}
    assert all(by[("Breakout-MinAtar", b)].decision == bc.BEATS for b in PLAN.baselines)  # 15 x 2/C(20, 10)
    small = by[("Freeway-MinAtar", "Small")]
    assert small.difference.p == pytest.approx(0.0082, abs=5e-5)
    assert small.adjusted == pytest.approx(15 * small.difference.p) and small.decision == bc.WAITING
    assert by[("Freeway-MinAtar", "Vanilla")].difference.p == 1.0
    assert by[("Freeway-MinAtar", "Vanilla")].decision == bc.NONE  # no Holm's p can fall below 0.05 from p = 1
    # a p just at alpha decides too; one just below waits (its Holm's p may yet fall below alpha)
    for shift, decided in ((0.0, bc.NONE), (-1e-9, bc.WAITING)):
        t = by[("Freeway-MinAtar", "Vanilla")]
        t = t._replace(difference=t.difference._replace(p=0.05 + shift))
        assert bc.per_game_decision(t, bonferroni(t.difference.p, 15), 0.05, every=False) == decided
    assert [c.decision for c in a.claims] == [bc.INCOMPLETE] * 3
    # a game is complete with every label's runs: one Large run missing leaves its tests against Small incomplete too
    partial = analyse(close_freeway(grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0},
                                         drop=others | {("Breakout-MinAtar", "Large", 3)})))
    assert not any(t.complete for t in partial.tests if t.game == "Breakout-MinAtar")
    # every run in: Holm's, not the bound: the 12 far-apart tests first, then Freeway's Small test at 3 x p
    full = analyse(close_freeway(grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0})))
    small = next(t for t in full.tests if (t.game, t.baseline) == ("Freeway-MinAtar", "Small"))
    assert full.holm and small.adjusted == pytest.approx(3 * small.difference.p) and small.decision == bc.BEATS
    vanilla = next(t for t in full.tests if (t.game, t.baseline) == ("Freeway-MinAtar", "Vanilla"))
    assert vanilla.decision == bc.NONE and vanilla.adjusted == 1.0
    assert [len(c.better) for c in full.claims] == [5, 4, 4]


def test_a_claim_needs_no_game_worse_and_worse_on_one_game_and_better_on_none_is_worse():
    """The claim's rule: P(ABS > F)'s interval wholly above 0.5 and no game worse: beats; wholly below 0.5, or worse
    on a game and better on none: worse; otherwise no difference."""
    values = grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0})
    for s in range(1, 11):  # Seaquest: ABS far below every fixed label
        values[("Seaquest-MinAtar", "ABS")][s] -= 20
    a = analyse(values)
    assert all(c.poi[1] > 0.5 and c.worse == ["Seaquest-MinAtar"] and len(c.better) == 4 for c in a.claims)
    assert [c.decision for c in a.claims] == [bc.NONE] * 3
    values = grid({"ABS": 1.5, "Small": 0, "Vanilla": 0, "Large": 0}, spread=5.0)  # ABS a little above, untested
    for s in range(1, 11):  # Breakout: ABS far below
        values[("Breakout-MinAtar", "ABS")][s] -= 20
    a = analyse(values)
    assert all(c.worse == ["Breakout-MinAtar"] and not c.better and c.poi[1] < 0.5 < c.poi[2] for c in a.claims)
    assert [c.decision for c in a.claims] == [bc.WORSE] * 3


def test_a_game_vanilla_does_not_learn_is_left_out_of_the_aggregate():
    values = grid({"ABS": 10, "Small": 0, "Vanilla": 0, "Large": 0})
    for s in range(1, 11):  # Vanilla at random's level on Freeway
        values[("Freeway-MinAtar", "Vanilla")][s] = RANDOM["Freeway-MinAtar"] + 0.01 * s
    for s in range(1, 11):  # and ABS far below Small there: P(ABS > Small) would be 4/5 with Freeway in
        values[("Freeway-MinAtar", "ABS")][s] -= 30
    a = analyse(values)
    assert a.left_out == ["Freeway-MinAtar"] and len(a.iqm) == 4
    small = next(c for c in a.claims if c.baseline == "Small")
    assert small.poi == (1.0, 1.0, 1.0) and small.worse == ["Freeway-MinAtar"] and small.decision == bc.NONE


# Of a Freeway run's 17 training games after step 1.5M, how many end at 0: Small 4 on every seed, ABS 2 on the seeds
# before the check's and none after, Vanilla and Large none
ZERO_GAMES = {"Small": lambda s: 4, "ABS": lambda s: 2 if s < 6 else 0, "Vanilla": lambda s: 0, "Large": lambda s: 0}


def test_report_of_a_minatar_grid_has_the_section(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    roots, written = {}, {}
    shift = {"ABS": 5.0, "Small": 0.0, "Vanilla": 0.0, "Large": -1.0}
    for lb in LABELS:
        for g in PLAN.tasks:
            for s in range(1, 11):
                written[(g, lb, s)] = 20.0 + shift[lb] + 0.3 * ((s * 7 + len(lb)) % 10)
                write_run(tmp_path / lb / f"{g}__{s}", g, s, written[(g, lb, s)], total=10_000_000)
                if g == ZEROS.game:  # training games every 0.5M steps, the first ZERO_GAMES of those after 1.5M at 0
                    with SummaryWriter(str(tmp_path / lb / f"{g}__{s}")) as w:
                        for i, step in enumerate(range(2_000_000, 10_000_001, 500_000)):
                            w.add_scalar("charts/episodic_return", 0.0 if i < ZERO_GAMES[lb](s) else 30.0, step)
                        w.add_scalar("charts/episodic_return", 0.0, 1_000_000)  # before the step: not counted
        roots[lb] = tmp_path / lb
    out = tmp_path / "report"
    p = report_cli("--runs", *[f"{lb}={d}" for lb, d in roots.items()], "--benchmark", "minatar", "--out", str(out),
                   "--reps", "200")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    md = (out / "report.md").read_text()
    assert "## Pre-registered analysis: the batch claims" in md
    assert "**ABS beats Small**" in md and "**ABS beats Large**" in md and "**ABS beats Vanilla**" in md
    assert "Adjusted p: Holm's, over the 15 tests (all complete)." in md

    # The figures a reader looks at first: each run's evaluation return as a dot, the curves with a 95% band, and
    # the aggregates with their intervals, each beside a CSV of what it draws.
    for name in ("evaluation_by_seed", "learning_curves_ci", "batch_claims"):
        assert (out / f"{name}.png").stat().st_size > 0 and f"`{name}.png`" in md
    dots = list(csv.DictReader(open(out / "evaluation_by_seed.csv")))
    assert len(dots) == 200
    assert all(float(r["evaluation_return"]) == pytest.approx(written[(r["game"], r["label"], int(r["seed"]))])
               for r in dots)
    aggregates = {(r["label"], r["metric"]): r for r in csv.DictReader(open(out / "batch_claims.csv"))}
    vanilla = {g: np.mean([written[(g, "Vanilla", s)] for s in range(1, 11)]) for g in PLAN.tasks}
    for lb in LABELS:  # the IQM against scipy's trimmed mean of the normalised returns
        normalised = [(written[(g, lb, s)] - RANDOM[g]) / (vanilla[g] - RANDOM[g]) for g in PLAN.tasks
                      for s in range(1, 11)]
        r = aggregates[(lb, "IQM of normalised score")]
        assert float(r["point"]) == pytest.approx(scipy.stats.trim_mean(normalised, 0.25))
        assert float(r["ci_low"]) <= float(r["point"]) <= float(r["ci_high"])
    for b in PLAN.baselines:  # every ABS run is above every run of each fixed label on its game
        r = aggregates[(b, "P(ABS > label)")]
        assert (float(r["point"]), float(r["ci_low"]), float(r["ci_high"])) == (1.0, 1.0, 1.0)
    # report.json holds the same analysis by name, for the results page's words
    data = json.loads((out / "report.json").read_text())["batch_claims"]
    assert {b: c["decision"] for b, c in data["claims"].items()} == {b: bc.BEATS for b in PLAN.baselines}
    large = aggregates[("Large", "IQM of normalised score")]
    assert data["iqm"]["Large"]["point"] == pytest.approx(float(large["point"]))
    assert data["tests"]["Small"]["Breakout-MinAtar"]["difference"]["diff"] == pytest.approx(5.0 + 0.3 * (
        np.mean([(s * 7 + 3) % 10 for s in range(1, 11)]) - np.mean([(s * 7 + 5) % 10 for s in range(1, 11)])))
    # the check added during the runs, from the runs' events: Small's share 4 / 17 on every seed, ABS's as Vanilla's
    # on seeds 6-10 (0)
    zeros = data["zeros"]
    assert zeros["shares"]["Small"] == {str(s): pytest.approx(4 / 17) for s in range(1, 11)}
    assert zeros["shares"]["ABS"] == {str(s): pytest.approx(2 / 17 if s < 6 else 0.0) for s in range(1, 11)}
    assert zeros["tests"]["Small"]["p"] == pytest.approx(2 / 252) and zeros["tests"]["ABS"]["p"] == 1.0
    assert {lb: t["decision"] for lb, t in zeros["tests"].items()} == {"Small": bc.MORE, "ABS": bc.NONE}
    assert "| Small | 23.5% (23.5-23.5%, 5 runs) | 23.5% (23.5-23.5%, 5 runs) |" in md
    assert ("| Small | +23.5 | 0.008 | 0.016 | Small's training games end at 0 more often than Vanilla's on "
            "Freeway-MinAtar |") in md and "| ABS | 0.0 | 1.00 | 1.00 | no difference could be seen |" in md
    # the results page's words for it (reproduce/minatar_page.py): every claim decided, with its numbers
    words = " ".join(minatar_page.verdict(json.loads((out / "report.json").read_text())).split())
    assert ("200 of 200 runs are in; games with every run in: Asterix, Breakout, Freeway, Seaquest, SpaceInvaders."
            in words)
    for b in PLAN.baselines:
        assert f"**ABS beats {b}**: P(ABS > {b}) = 1.000 [1.000, 1.000]; ABS is above {b} on 5 of 5 games" in words
    iqm = ", ".join(f"{lb} {float(r['point']):.3f} [{float(r['ci_low']):.3f}, {float(r['ci_high']):.3f}]"
                    for lb in LABELS for r in [aggregates[(lb, "IQM of normalised score")]])
    assert ("IQM of the normalised score (0 = random, 1 = Vanilla's mean), with 95% stratified bootstrap intervals, "
            f"which decide nothing: {iqm}.") in words
    assert ("**Small's training games end at 0 more often than Vanilla's on Freeway**: on seeds 6-10, mean shares "
            "Small 23.5%, Vanilla 0.0% (+23.5 points; permutation p = 0.008, Holm's p = 0.016); seeds 1-5, which "
            "suggested the check and are not tested: mean shares Small 23.5%, Vanilla 0.0%.") in words
    assert ("**no difference could be seen between ABS and Vanilla**: on seeds 6-10, mean shares ABS 0.0%, "
            "Vanilla 0.0% (0.0 points; permutation p = 1.00, Holm's p = 1.00); seeds 1-5, which suggested the check "
            "and are not tested: mean shares ABS 11.8%, Vanilla 0.0%.") in words


# ------------------------------------------------------------------ the check added during the runs (ZeroCheck)
ZEROS = bc.FREEWAY_ZEROS


def test_zero_share_counts_the_games_ending_after_the_step_at_zero():
    steps, values = [1_000_000, 1_500_000, 1_500_001, 2_000_000, 9_000_000], [0.0, 0.0, 0.0, 3.0, 0.0]
    assert bc.zero_share(steps, values, 1_500_000) == pytest.approx(2 / 3)  # 1,500,000 itself is not after it
    assert bc.zero_share(steps, [5.0] * 5, 1_500_000) == 0.0
    assert np.isnan(bc.zero_share([1_000_000], [0.0], 1_500_000))  # no game after the step


def exact_p(a, b):
    """The two-sided permutation p over every split, counted here with itertools alone."""
    pooled, observed = list(a) + list(b), abs(np.mean(a) - np.mean(b))
    splits = list(itertools.combinations(range(len(pooled)), len(a)))
    hits = sum(abs(np.mean([pooled[i] for i in s]) - np.mean([pooled[i] for i in range(len(pooled)) if i not in s]))
               >= observed - 1e-12 for s in splits)
    return hits / len(splits)


def zero_shares(small, abs_, vanilla, seeds=range(1, 11)):
    """(game, label) -> {seed: share}, Freeway's, from each label's share per seed; a far-off pattern on seeds 1-5."""
    early = {"Small": 0.0, "ABS": 0.9, "Vanilla": 0.5}
    return {("Freeway-MinAtar", lb): {s: (v[s - 6] if s >= 6 else early[lb]) for s in seeds}
            for lb, v in (("Small", small), ("ABS", abs_), ("Vanilla", vanilla))} | {
        ("Asterix-MinAtar", "Small"): {s: 0.0 for s in seeds}}


def test_the_check_tests_the_held_out_seeds_alone_with_holm_over_its_two_tests():
    small, same, vanilla = [0.15, 0.3, 0.2, 0.4, 0.25], [0.0, 0.01, 0.0, 0.02, 0.0], [0.0, 0.0, 0.0, 0.01, 0.02]
    z = bc.zero_analysis(ZEROS, zero_shares(small, same, vanilla))
    by = {t.label: t for t in z.tests}
    assert by["Small"].p == pytest.approx(exact_p(small, vanilla)) == pytest.approx(2 / 252)
    assert by["ABS"].p == pytest.approx(exact_p(same, vanilla))
    assert by["Small"].diff == pytest.approx(np.mean(small) - np.mean(vanilla))
    assert by["Small"].adjusted == pytest.approx(2 * 2 / 252)  # Holm: the smaller p times 2
    assert by["ABS"].adjusted == pytest.approx(max(2 * 2 / 252, by["ABS"].p))
    assert (by["Small"].decision, by["ABS"].decision) == (bc.MORE, bc.NONE)
    assert set(z.shares) == {"Small", "ABS", "Vanilla"} and len(z.shares["ABS"]) == 10  # all seeds, described
    # seeds 1-5 do not enter the tests; a label whose games end at 0 less often is "less often"
    flipped = bc.zero_analysis(ZEROS, zero_shares(vanilla, small[::-1], small))
    assert [t.decision for t in flipped.tests] == [bc.LESS, bc.NONE]


def test_the_check_adjusts_by_holm_not_by_bonferroni_nor_leaves_p_raw():
    low = [0.1, 0.2, 0.3, 0.4, 0.0]  # against Vanilla's five zeros: p = 12 / 252 = 0.048
    assert exact_p(low, [0.0] * 5) == pytest.approx(12 / 252)
    # Small's p = 2 / 252 and ABS's 12 / 252: Holm's ABS p is max(2 x 2 / 252, 12 / 252) = 0.048, below alpha (the
    # Bonferroni bound, 2 x 12 / 252 = 0.095, is not)
    z = bc.zero_analysis(ZEROS, zero_shares([0.1, 0.2, 0.3, 0.4, 0.5], low, [0.0] * 5))
    assert [t.adjusted for t in z.tests] == pytest.approx([4 / 252, 12 / 252])
    assert [t.decision for t in z.tests] == [bc.MORE, bc.MORE]
    # both p = 12 / 252, below alpha alone: Holm's are 24 / 252 = 0.095, so no difference could be seen
    z = bc.zero_analysis(ZEROS, zero_shares(low, low, [0.0] * 5))
    assert [t.adjusted for t in z.tests] == pytest.approx([24 / 252] * 2)
    assert [t.decision for t in z.tests] == [bc.NONE, bc.NONE]


def test_the_check_waits_until_every_held_out_run_of_its_labels_is_in():
    shares = zero_shares([0.2] * 5, [0.2] * 5, [0.0] * 5)
    del shares[("Freeway-MinAtar", "ABS")][10]  # ABS's seed 10 not in: both tests wait (Holm needs both)
    z = bc.zero_analysis(ZEROS, shares)
    assert [(t.complete, t.decision) for t in z.tests] == [(False, bc.INCOMPLETE)] * 2
    assert all(np.isnan(t.p) and np.isnan(t.adjusted) for t in z.tests)
    assert z.spread["ABS"]["held"] == bc.Spread(0.2, 0.2, 0.2, 4) and z.spread["ABS"]["seen"].runs == 5


def test_a_held_out_run_without_a_share_leaves_the_check_undecided_and_an_outside_seed_is_left_out():
    shares = zero_shares([0.2] * 5, [0.2] * 5, [0.0] * 5)
    shares[("Freeway-MinAtar", "Small")][7] = float("nan")  # in, but no game after the step (or damaged events)
    shares[("Freeway-MinAtar", "Vanilla")][11] = 0.9  # a seed outside 1-10
    z = bc.zero_analysis(ZEROS, shares)
    assert [(t.complete, t.decision, t.no_share) for t in z.tests] == [(False, bc.UNDEFINED, ("Small seed 7",))] * 2
    assert 11 not in z.shares["Vanilla"] and z.spread["Small"]["held"].runs == 4
    del shares[("Freeway-MinAtar", "Small")][7]  # not in at all: it waits instead
    assert [t.decision for t in bc.zero_analysis(ZEROS, shares).tests] == [bc.INCOMPLETE] * 2
    shares[("Freeway-MinAtar", "Small")][7] = 0.2  # every held-out run in with a share: decided, seed 11 aside
    z = bc.zero_analysis(ZEROS, shares)
    assert [t.decision for t in z.tests] == [bc.MORE] * 2 and z.tests[0].p == pytest.approx(2 / 252)
