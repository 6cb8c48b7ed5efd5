"""Tests of reproduce/sections.py: what the report's sections say, in reports of runs written with
SummaryWriter."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import report  # noqa: E402
from reproduce import runs  # noqa: E402
from report_helpers import row, row_of, section, subsection, write_prefix_run, write_run  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402


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
    res = subprocess.run([*tool("report"), *dirs, "--out", str(tmp_path / "o2")], capture_output=True, text=True,
                         timeout=120, env=tool_env())
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
