"""Tests of reproduce/figures.py: the figures' CSVs (what is drawn) from runs written with SummaryWriter."""
import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import figure_data  # noqa: E402
from reproduce import report  # noqa: E402
from reproduce import runs  # noqa: E402
from report_helpers import section, write_adapt_run, write_run  # noqa: E402


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
    assert figure_data.size_range([r for g in data["ABS"].values() for r in g.values()]) == (16, 64)
    assert figure_data.size_range([]) == (None, None)
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
