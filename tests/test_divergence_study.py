"""reproduce/divergence_study.py: its math against hand values and its command-line checks; the published study
is regenerated from the committed runs in test_results.py."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reproduce"))
import divergence_study as study  # noqa: E402


def test_rollout_lengths_are_the_steps_between_iterations():
    # iterations of 1024, 1024, 1664 and 2240 steps: logged after each at the global step
    assert study.rollout_lengths([1024, 2048, 3712, 5952]).tolist() == [1024, 1024, 1664, 2240]
    assert study.rollout_lengths([2048]).tolist() == [2048]


def test_length_at_picks_the_iteration_running_at_that_fraction():
    steps, lengths = np.array([1000, 2000, 4000, 8000]), np.array([1000, 1000, 2000, 4000])
    assert study.length_at(steps, lengths, 0.25) == 1000  # step 2000 ends the second iteration
    assert study.length_at(steps, lengths, 0.26) == 2000  # step 2080 is inside the third
    assert study.length_at(steps, lengths, 0.5) == 2000
    assert study.length_at(steps, lengths, 0.51) == 4000
    assert study.length_at(steps, lengths, 1.0) == 4000


def test_ratio_stats_by_hand():
    kl = [0.01, 0.02, 0.04, 0.0, 0.03]  # the zero (a policy that did not move) is left out of the ratio
    ess = [0.02, 0.03, 0.1, 0.0, 0.06]  # ratios 2, 1.5, 2.5, 2
    q = study.ratio_stats(kl, ess)
    assert q["n"] == 4
    assert q["median"] == pytest.approx(2.0)
    assert q["q10"] == pytest.approx(1.5 + 0.3 * 0.5)  # numpy's linear quantile of [1.5, 2, 2, 2.5] at 0.1
    assert q["q90"] == pytest.approx(2.0 + 0.7 * 0.5)
    assert q["kl"] == pytest.approx(0.025) and q["ess"] == pytest.approx(0.045)
    assert q["corr"] == pytest.approx(np.corrcoef([0.01, 0.02, 0.04, 0.03], [0.02, 0.03, 0.1, 0.06])[0, 1])
    exact = study.ratio_stats([0.01, 0.02, 0.03], [0.02, 0.04, 0.06])
    assert exact["median"] == pytest.approx(2.0) and exact["corr"] == pytest.approx(1.0)
    none = study.ratio_stats([0.0, np.nan], [0.0, 0.1])
    assert none["n"] == 0 and np.isnan(none["median"])


@pytest.mark.parametrize("argv, message", [
    (["--runs", "results"], "expected distinct LABEL=DIR"),
    (["--runs", "A=results", "A=results"], "expected distinct LABEL=DIR"),
    (["--runs", "A=no/such/dir"], "is not a directory"),
    (["--runs", "A=results", "--bins", "0"], "--bins and --last-games must be positive"),
])
def test_bad_arguments_name_the_flag(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    with pytest.raises(SystemExit) as e:
        study.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_no_runs_found_exits_1(tmp_path, capsys):
    assert study.main(["--runs", f"A={tmp_path}", "--out", str(tmp_path / "out")]) == 1
    assert "no finished abs_ppo_mujoco.py runs" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
