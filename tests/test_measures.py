"""Tests of reproduce/measures.py: each run's measures per seed, from runs written with SummaryWriter."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import measures  # noqa: E402
from reproduce import report  # noqa: E402
from reproduce import runs  # noqa: E402
from reproduce import sections  # noqa: E402
from reproduce import stats  # noqa: E402
from report_helpers import row, row_of, section, write_adapt_run, write_run  # noqa: E402


def test_final_training_return_is_the_mean_of_the_last_games_in_step_order():
    run = runs.Run("PPO", Path("."), "Hopper-v4", "Hopper", 1, 0.0, 150, 150)
    assert np.isnan(measures.final_training_return(run, 100))  # no games logged
    steps = np.repeat(np.arange(75.0), 2)  # two games end at each step
    run.scalars[runs.RETURN_TAG] = (steps, np.arange(1.0, 151.0))
    assert measures.final_training_return(run, 100) == pytest.approx(np.mean(np.arange(51.0, 151.0)))  # 100.5
    assert measures.final_training_return(run, 10) == pytest.approx(145.5)
    assert measures.final_training_return(run, 1000) == pytest.approx(75.5)  # fewer games than asked: all of them
    data = {"PPO": {"Hopper": {1: run, 2: copy_run(run, 50.0)}}}
    assert measures.per_seed(data, ["Hopper"], lambda r: measures.final_training_return(r, 10)) == {
        ("Hopper", "PPO"): {1: 145.5, 2: 195.5}}


def copy_run(run, shift):
    import dataclasses
    steps, values = run.scalars[runs.RETURN_TAG]
    return dataclasses.replace(run, seed=run.seed + 1, scalars={runs.RETURN_TAG: (steps, values + shift)})


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
                     "eval.action_counts; action: an index of the game's minimal action set): A Amidar seed 1: action "
                     "1 on 90.0%, A BattleZone seed 1: action 1 on 99.7%. Their evaluation score is that of playing "
                     "one action, not a measure of how they play."]


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
    """A: 72,000 steps in 720 s and in 360 s (100 and 200 steps/s), the second started twice (two event files), and
    on another game in 1,440 s (50 steps/s); B: one run whose eval_results.json predates train_seconds. Hours 0.7, per
    run 0.1-0.4; per game, Amidar's two runs 0.15 h on average and Breakout's one 0.4 h."""
    from torch.utils.tensorboard import SummaryWriter

    for name, seconds, game in (("a1", 720.0, "Amidar-v5"), ("a2", 360.0, "Amidar-v5"), ("a3", 1440.0, "Breakout-v5")):
        write_run(tmp_path / "A" / name, game, int(name[1]), 200.0, lambda s: s / 10, total=72_000)
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
    assert t["A"] == {"runs": 3, "timed": 3, "hours": pytest.approx(0.7), "per_run": (0.1, 0.4),
                      "sps": (50.0, 200.0), "restarted": 1,
                      "by_game": {"Amidar": (2, pytest.approx(0.15)), "Breakout": (1, pytest.approx(0.4))}}
    assert t["B"] == {"runs": 1, "timed": 0, "hours": 0.0, "per_run": None, "sps": None, "restarted": 0,
                      "by_game": {}}
    md = sections.machine_time_section(t)
    assert row("\n".join(md), "A")[1:] == ["3", "0.7", "0.1–0.4", "50–200", "1 of 3"]
    assert row("\n".join(md), "B")[1:] == ["1", "–", "–", "–", "0 of 1"]
    assert "- B: 1 of 1 runs have no `train_seconds` (not counted)" in md
