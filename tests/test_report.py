"""Tests of reproduce/report.py: statistics on hand-made inputs, and the whole report on a synthetic
fixture of runs (eval_results.json + TensorBoard events written with SummaryWriter)."""
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))
import report  # noqa: E402

FIGURES = ("learning_curves", "adapt", "improvement_rate", "aggregates")


# ----------------------------------------------------------------------------- statistics
def test_score_table_and_hns():
    table = report.load_atari_scores()
    assert len(table) == 57
    assert sum(s["atari10"] for s in table.values()) == 10
    assert report.benchmark_games("atari5", table) == ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"]
    b = table["Breakout"]  # random 1.7, human 30.5
    assert (b["random"], b["human"]) == (1.7, 30.5)
    np.testing.assert_allclose(report.human_normalized_score([1.7, 30.5, 16.1, 59.3], 1.7, 30.5), [0, 1, 0.5, 2])
    assert report.human_normalized_score(-17.5, -18.6, -16.4) == pytest.approx(0.5)  # DoubleDunk-like, negative
    assert report.game_of("Breakout-v5") == report.game_of("ALE/Breakout-v5") == "Breakout"
    assert report.game_of("HalfCheetah-v5") == "HalfCheetah"


def test_iqm_known_answers():
    assert report.iqm(np.arange(8).reshape(2, 4)) == pytest.approx(3.5)  # drops 0,1 and 6,7
    assert report.iqm([[0, 1, 2, 100]]) == pytest.approx(1.5)  # an outlier does not move it
    point = report.aggregate(np.array([[0.0, 2.0], [1.0, 3.0]]))  # IQM, median, mean, optimality gap
    np.testing.assert_allclose(point, [1.5, 1.5, 1.5, 1 - (0 + 1 + 1 + 1) / 4])


def test_improvement_rate_and_early_late():
    assert report.improvement_rate(2.0, 1.0) == 1.0
    assert report.improvement_rate(1.0, -2.0) == 1.5  # |other| in the denominator
    assert np.isnan(report.improvement_rate(1.0, 0.0))
    steps, values = np.arange(0, 1001, 100), np.arange(0, 1001, 100) / 10
    assert report.early_mean(steps, values, 1000) == 5.0  # steps 0, 100
    assert report.late_variance(steps, values, 1000) == 25.0  # values 90, 100
    assert report.finite_mean([1.0, np.nan, 3.0]) == 2.0


def test_bootstrap_ci_contains_point_and_shrinks_with_seeds():
    rng = np.random.default_rng(0)
    games = rng.uniform(0.2, 2.0, size=5)
    widths = {}
    for n in (3, 30):
        scores = games + rng.normal(0, 0.3, size=(n, 5))
        point, ci = report.bootstrap_ci({"x": scores}, reps=300, seed=1)
        lo, hi = ci["x"]
        assert np.all(lo <= point["x"] + 1e-12) and np.all(point["x"] <= hi + 1e-12)
        np.testing.assert_allclose(point["x"][0], report.iqm(scores))
        widths[n] = hi - lo
    assert np.all(widths[30] < widths[3])


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


def test_read_run_scores_from_the_mean_or_the_returns_and_names_an_empty_evaluation(tmp_path):
    write_run(tmp_path / "a", "Amidar-v5", 1, 250.0)
    assert report.read_run("ABS", tmp_path / "a").score == 250.0
    res = json.loads((tmp_path / "a" / "eval_results.json").read_text())
    res["eval"] = {"episodes": 2, "returns": [100.0, 300.0], "mean": None}  # mean null: use the returns
    (tmp_path / "a" / "eval_results.json").write_text(json.dumps(res))
    assert report.read_run("ABS", tmp_path / "a").score == 200.0
    # What a script writes with --eval-episodes 0: null statistics, no returns.
    res["eval"] = {"episodes": 0, "returns": [], "lengths": [], "mean": None, "std": None, "median": None,
                   "min": None, "max": None, "capped": 0}
    (tmp_path / "a" / "eval_results.json").write_text(json.dumps(res))
    with pytest.raises(ValueError, match="no evaluation episodes"):
        report.read_run("ABS", tmp_path / "a")
    _, skipped = report.find_runs("ABS", tmp_path)
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
    s = report.load_atari_scores()[game]
    return (score - s["random"]) / (s["human"] - s["random"])


def section(md: str, title: str) -> str:
    return md.split(f"## {title}")[1].split("\n## ")[0]


def row(text: str, first: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


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
    assert [c.split(" [")[0] for c in abs_row[1:5]] == [report.fmt(x) for x in expected_aggregates]
    assert abs_row[5:] == ["2", "4"] and small_row[5:] == ["1", "2"]
    small_mean = (hns(100, "Amidar") + hns(150, "Amidar")) / 2
    assert small_row[1].startswith(report.fmt(small_mean) + " [")
    lo, hi = (float(x) for x in re.findall(r"\[(\S+), (\S+)\]", abs_row[1])[0])
    assert lo <= float(abs_row[1].split()[0]) <= hi

    per_game = section(md, "Per-game")
    assert row(per_game, "Amidar")[1:] == ["**250.0 [200.0, 300.0] n=2**", "125.0 [100.0, 150.0] n=2"]
    assert row(per_game, "Qbert")[1:] == ["**1500.0 [1000.0, 2000.0] n=2**", "missing"]
    assert "**ABS best in 1 of 1 games**" in per_game and "others: Small 0" in per_game

    # Early: ABS (0+s, 10+s) -> 6.5 over seeds, Small (0+s, 5+s) -> 4.0. Late var: ABS 25, Small 6.25.
    el = section(md, "Early / late")
    assert row(el, "Amidar")[1:] == ["**6.500 n=2**", "4.000 n=2", "25.0 n=2", "**6.250 n=2**"]
    assert "**ABS higher early in 1 of 1 games**" in el and "**ABS lower late variance in 0 of 1 games**" in el

    # Improvement rate on HNS: (250 - 125) / (125 - random) for Amidar.
    ir = section(md, "Improvement rate")
    expected = 100 * (250 - 125) / (125 - report.load_atari_scores()["Amidar"]["random"])
    assert row(ir, "Amidar")[1] == f"{expected:.1f}%"
    assert row(ir, "**mean**")[1] == f"**{expected:.1f}%** (1 games)"
    assert "(s_ABS - s_X) / |s_X|" in ir

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
    assert row(section(md, "Per-game"), "HalfCheetah")[1:] == ["**3600.0 [3600.0, 3600.0] n=1**",
                                                               "3000.0 [3000.0, 3000.0] n=1"]
    assert row(section(md, "Early / late"), "Hopper")[1:3] == ["missing", "no data"]
    assert row(section(md, "Improvement rate of PPO+ABS"), "HalfCheetah")[1] == "20.0%"  # (3600-3000)/3000
    assert not (tmp_path / "out" / "aggregates.png").exists() and (tmp_path / "out" / "adapt.png").exists()


def test_bad_input(tmp_path):
    with pytest.raises(SystemExit) as e:
        report.parse_args(["--runs", f"A={tmp_path / 'nope'}"])
    assert e.value.code == 2
    assert report.main(["--runs", f"A={tmp_path}", "--out", str(tmp_path / "o")]) == 1  # no finished runs
