"""Tests of reproduce/report.py, the entry point: the whole report on a synthetic fixture of runs
(eval_results.json + TensorBoard events written with SummaryWriter), its flags and its errors."""
import csv
import errno
import json
import os
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
from reproduce import stats  # noqa: E402
from reproduce import tables  # noqa: E402
from report_helpers import hns, report_cli, row, row_of, section, write_run  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402


FIGURES = ("learning_curves", "adapt", "improvement_rate", "aggregates")


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


def test_report_end_to_end(fixture_runs, tmp_path):
    out = tmp_path / "report"
    res = subprocess.run([*tool("report"), "--runs", f"ABS={fixture_runs / 'abs'}", f"Small={fixture_runs / 'sweep'}",
                          "--out", str(out), "--reps", "200"], capture_output=True, text=True, timeout=120,
                         env=tool_env())
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
    assert [c.split(" [")[0] for c in abs_row[1:5]] == [tables.fmt(x) for x in expected_aggregates]
    assert abs_row[5:] == ["2", "4"] and small_row[5:] == ["1", "2"]
    small_mean = (hns(100, "Amidar") + hns(150, "Amidar")) / 2
    assert small_row[1].startswith(tables.fmt(small_mean) + " [")
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
    assert diff[2:] == ["125.0", f"[{tables.fmt(lo)}, {tables.fmt(hi)}]", "1.47", "0.33", "6", "2 vs 2"]
    assert df == pytest.approx(3125 ** 2 / (2500 ** 2 + 625 ** 2))
    # The same numbers as data, by name (report.json: what the results pages read), unrounded.
    numbers = json.loads((out / "report.json").read_text())
    assert numbers["labels"] == ["ABS", "Small"] and numbers["pairs"] == [["ABS", "Small"]]
    amidar = numbers["evaluation"]["seeds"]["Amidar"]
    assert amidar["ABS"]["values"] == {"1": 200.0, "2": 300.0} and amidar["ABS"]["mean"] == 250.0
    assert "Small" not in numbers["evaluation"]["seeds"]["Qbert"]
    d = numbers["evaluation"]["differences"]["Amidar"]["ABS"]["Small"]
    assert (d["diff"], d["lo"], d["hi"], d["splits"]) == (125.0, lo, hi, 6) and d["p"] == pytest.approx(1 / 3)
    assert numbers["evaluation"]["wins"]["ABS"]["Small"] == [1, 1]
    assert numbers["aggregates"]["ABS"]["IQM"]["point"] == pytest.approx(expected_aggregates[0])
    assert "- ABS vs Small (Amidar): with 2 vs 2 runs the smallest possible p is 0.33 (2 of 6 relabellings): no " \
        "difference can reach p < 0.05." in per_game

    # Per-game HNS (Atari): with 2 runs per game the IQM trims nothing, so the table gives the mean HNS and says so.
    hns_table = section(md, "Per-game human-normalised score")
    assert row_of(hns_table, "Amidar", "ABS")[3] == f"**{tables.fmt((hns(200, 'Amidar') + hns(300, 'Amidar')) / 2)}**"
    assert row_of(hns_table, "Amidar", "Small")[3] == tables.fmt((hns(100, 'Amidar') + hns(150, 'Amidar')) / 2)
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
    res = subprocess.run([*tool("report"), "--runs", *dirs, "--out", str(tmp_path / "o3"), "--reps", "20"],
                         capture_output=True, text=True, timeout=120, env=tool_env())
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


@pytest.mark.parametrize("item,message", [
    ("A=", "--runs: 'A=' names no directory (LABEL=DIR)"),
    ("=sub", "--runs: empty or repeated label in '=sub'"),
    ("A=nope", "--runs: 'nope' is not a directory"),
    ("A=file", "--runs: 'file' is not a directory"),
])
def test_a_runs_item_without_a_directory_is_one_line_and_exit_2(tmp_path, item, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "sub").mkdir()
    res = subprocess.run([*tool("report"), "--runs", item, "--out", "o"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=tool_env())
    assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"report.py: error: {message} (report.py --help"), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "sub"]


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


def test_report_data_is_json_by_name(tmp_path):
    """report.json's conversion: a dict keyed by (game, label) nests, NumPy's numbers become Python's, a number that
    is not finite is null, a set is sorted, and anything else is refused rather than written as text."""
    from reproduce.report_data import plain, read_data, write_data
    seeds = stats.Seeds({1: np.float64(2.0)}, 2.0, float("nan"), float("inf"), 0.0, 2.0)
    data = plain({("Pong", "ABS"): seeds, ("Pong", "B"): {"A", "B"}, "n": np.int64(3)})
    assert data == {"Pong": {"ABS": {"values": {"1": 2.0}, "mean": 2.0, "lo": None, "hi": None, "std": 0.0,
                                     "iqm": 2.0}, "B": ["A", "B"]}, "n": 3}
    with pytest.raises(TypeError):
        plain(object())
    write_data(tmp_path / "report.json", data)
    assert read_data(tmp_path / "report.json") == data
