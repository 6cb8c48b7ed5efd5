"""reproduce/anchor.py, this project's PQN beside purejaxql's (docs/minatar.md): purejaxql's last greedy test read at
the update that ran it, the gap's interval and decision against scipy and hand values, the whole tool on written runs
and a written purejaxql JSON, and bad input as one line and exit 2."""
import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from report_helpers import ROOT, write_run
from reproduce import anchor
from reproduce_cli import tool_env


def purejaxql_json(finals: dict, game="Breakout-MinAtar", total=4096 * 40):
    """A purejaxql_run.py JSON of 40 updates of 4,096 steps, a test every int(40 * 0.05) = 2 updates: test k (after
    update 2k) returns 10 k plus the seed's final minus 200, so the last (update 40) returns the seed's final; the
    updates that ran no test carry the previous one (odd updates)."""
    config = {"ENV_NAME": game, "TOTAL_TIMESTEPS": total, "NUM_STEPS": 32, "NUM_ENVS": 128, "TEST_INTERVAL": 0.05}
    seeds = {}
    for seed, final in finals.items():
        updates = total // 4096
        test = np.zeros(updates)
        for u in range(1, updates + 1):  # metrics[u - 1]: after update u
            test[u - 1] = final - 200 + 10 * u / 2 if u % 2 == 0 else test[u - 2] if u > 1 else 0.0
        seeds[str(seed)] = {"env_step": [4096 * u for u in range(1, updates + 1)],
                            "returned_episode_returns": [final / 2 + u for u in range(updates)],
                            "test/returned_episode_returns": test.tolist()}
    return {"config": config, "seeds": seeds}


def test_purejaxql_final_is_its_last_greedy_test_not_the_last_entry():
    raw = purejaxql_json({1: 50.0, 2: 60.0})
    for seed in raw["seeds"].values():  # 40 updates, the last one tests: make the last entry a carried one instead
        seed["env_step"].append(4096 * 41)
        seed["returned_episode_returns"].append(0.0)
        seed["test/returned_episode_returns"].append(99.0)
    raw["config"]["TOTAL_TIMESTEPS"] = 4096 * 41  # 41 updates: int(41 * 0.05) = 2, the last test after update 40
    side = anchor.purejaxql_side(raw)
    assert side.finals == {1: 50.0, 2: 60.0}
    steps, values = side.tests[1]
    assert list(steps) == [4096 * u for u in range(2, 41, 2)] and values[-1] == 50.0 and values[0] == 50.0 - 190
    assert len(side.curves[2][0]) == 41


def test_gap_is_welch_at_the_bonferroni_level_and_decides_by_its_interval():
    ours, theirs = {1: 90.0, 2: 92.0, 3: 95.0}, {1: 60.0, 2: 61.0, 3: 63.0}
    g = anchor.gap("Breakout-MinAtar", ours, theirs)  # the comparison's two games: 97.5% each
    res = scipy.stats.ttest_ind(list(ours.values()), list(theirs.values()), equal_var=False)
    lo, hi = res.confidence_interval(0.975)
    assert (g.diff, g.lo, g.hi, g.level) == (pytest.approx(31.0), pytest.approx(lo), pytest.approx(hi), 0.975)
    assert g.decision == "beyond seed noise: ours higher" and g.p == pytest.approx(0.1)  # 2 of C(6, 3) = 20 splits
    assert anchor.gap("g", theirs, ours).decision == "beyond seed noise: ours lower"
    close = anchor.gap("g", {1: 1.0, 2: 9.0, 3: 5.0}, {1: 4.0, 2: 6.0, 3: 5.5})
    assert close.decision == f"not told apart by 3 + 3 seeds (interval {close.hi - close.lo:,.1f} wide)"
    assert anchor.gap("g", {1: 1.0}, theirs).decision == "not decided: fewer than 2 seeds on a side"
    flat = anchor.gap("g", {1: 100.0, 2: 100.0, 3: 100.0}, {1: 50.0, 2: 50.0, 3: 50.0})
    assert flat.diff == 50.0 and flat.decision == "not decided: no spread on either side, no interval"


def test_the_tool_writes_the_table_and_the_figure_from_runs_and_a_purejaxql_json(tmp_path):
    total = 4096 * 40
    finals = {1: 40.0, 2: 44.0, 3: 47.0}
    for seed, score in finals.items():
        write_run(tmp_path / "ours" / f"Breakout-MinAtar__{seed}", "Breakout-MinAtar", seed, score + 10,
                  curve=lambda s: s / 4096, total=total)
    (tmp_path / "pjq.json").write_text(json.dumps(purejaxql_json(finals, total=total)))
    out = tmp_path / "out"
    # ours also has an Asterix run (no purejaxql file for it yet) and a shorter run of Breakout, left out
    write_run(tmp_path / "ours" / "Asterix-MinAtar__1", "Asterix-MinAtar", 1, 5.0, curve=lambda s: 1.0, total=total)
    write_run(tmp_path / "ours" / "short" / "Breakout-MinAtar__1", "Breakout-MinAtar", 1, 999.0, total=4096)
    p = anchor_cli("--ours", tmp_path / "ours", "--purejaxql", tmp_path / "pjq.json", "--out", out,
                   "--total-timesteps", total, "--bins", 10)
    assert p.returncode == 0, p.stderr
    md = (out / "beside_purejaxql.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| Breakout-MinAtar"))
    assert "| 50.00, 54.00, 57.00 | 53.67 [" in row and "| 40.00, 44.00, 47.00 | 43.67 [" in row
    # by hand: s^2 = 12.33 a side, se = sqrt(2 * 12.33 / 3) = 2.867, Welch's df = 4, at 97.5% (two games)
    half = scipy.stats.t.ppf(1 - 0.025 / 2, 4) * np.sqrt(2 * np.var([50, 54, 57], ddof=1) / 3)
    assert f"| 10.00 [{10 - half:.2f}, {10 + half:.2f}] |" in row and "| 0.10 | not told apart by 3 + 3 seeds" in row
    assert "Waiting for runs on both sides: Asterix-MinAtar (ours only)." in md
    # the training return over the last 10% of the steps (> 147,456): ours s / 4096 at every 100 steps (each seed
    # alike); purejaxql's updates 37-40 at 151,552 ... 163,840 steps, returning final / 2 + 36 ... + 39
    steps = np.arange(0, total + 1, 100)
    ours_late = np.mean(steps[steps > 0.9 * total] / 4096)
    theirs_late = [v / 2 + 37.5 for v in finals.values()]
    half = scipy.stats.t.ppf(0.975, 2) * np.std(theirs_late, ddof=1) / np.sqrt(3)  # Welch, ours without spread: df 2
    late = next(line for line in md.splitlines()[md.splitlines().index(row) + 1:] if line.startswith("| Breakout"))
    diff = ours_late - np.mean(theirs_late)
    assert late == (f"| Breakout-MinAtar | {', '.join([f'{ours_late:.2f}'] * 3)} | {ours_late:.2f} | 57.50, 59.50, "
                    f"61.00 | 59.33 | {diff:.2f} [{diff - half:.2f}, {diff + half:.2f}] |")
    assert "short/Breakout-MinAtar__1`: a run of 4,096 steps, not of 163,840: left out" in md
    finals_csv = list(csv.DictReader(open(out / "beside_purejaxql_finals.csv")))
    assert [float(r["late_training_return"]) for r in finals_csv] == pytest.approx([ours_late] * 3 + theirs_late)
    assert [(r["implementation"] == anchor.OURS, int(r["seed"]), float(r["final_greedy_return"]))
            for r in finals_csv] == [(True, s, v + 10) for s, v in finals.items()] + [(False, s, v)
                                                                                     for s, v in finals.items()]
    curves = [r for r in csv.DictReader(open(out / "beside_purejaxql_curves.csv"))
              if r["implementation"] == anchor.OURS]
    assert len(curves) == 10 and all(int(r["n_runs"]) == 3 for r in curves)
    edges = np.linspace(0, total, 11)  # ours: the curve s / 4096 at every 100 steps, binned by hand
    steps = np.arange(0, total + 1, 100)
    first = steps[steps < edges[1]]
    assert float(curves[0]["mean"]) == pytest.approx(np.mean(first / 4096))
    assert (out / "beside_purejaxql.png").stat().st_size > 0


def anchor_cli(*args):
    return subprocess.run([sys.executable, "-m", "reproduce.anchor", *map(str, args)], cwd=ROOT, env=tool_env(),
                          capture_output=True, text=True, timeout=120)


def test_input_the_comparison_cannot_use_is_one_line_and_exit_2(tmp_path):
    total = 4096 * 40
    for copy in ("a", "b"):  # the same seed twice, in two directories
        write_run(tmp_path / "twice" / copy / "Breakout-MinAtar__1", "Breakout-MinAtar", 1, 10.0, total=total)
    write_run(tmp_path / "ours" / "Breakout-MinAtar__1", "Breakout-MinAtar", 1, 10.0, total=total)
    good = purejaxql_json({1: 10.0}, total=total)
    untested = {**good, "config": {**good["config"], "TEST_DURING_TRAINING": False}}
    asterix = purejaxql_json({1: 1.0}, "Asterix-MinAtar", total=total)
    for name, content in (("good", good), ("untested", untested), ("asterix", asterix)):
        (tmp_path / f"{name}.json").write_text(json.dumps(content))
    (tmp_path / "broken.json").write_text("{")
    cases = [(["--ours", tmp_path / "twice", "--purejaxql", tmp_path / "good.json"], "two runs of Breakout-MinAtar"),
             (["--ours", tmp_path / "ours", "--purejaxql", tmp_path / "untested.json"], "no greedy tests"),
             (["--ours", tmp_path / "ours", "--purejaxql", tmp_path / "good.json", tmp_path / "good.json"],
              "a second file of Breakout-MinAtar"),
             (["--ours", tmp_path / "ours", "--purejaxql", tmp_path / "broken.json"], "not a purejaxql_run.py JSON"),
             (["--ours", tmp_path / "ours", "--purejaxql", tmp_path / "asterix.json"], "has runs on both sides")]
    for argv, message in cases:
        p = anchor_cli(*argv, "--out", tmp_path / "o", "--total-timesteps", total)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, p.stderr
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, flag", [(["--ours", "/nonexistent", "--purejaxql", __file__], "--ours"),
                                        (["--ours", str(ROOT), "--purejaxql", "/nonexistent.json"], "--purejaxql"),
                                        (["--ours", str(ROOT), "--purejaxql", __file__, "--bins", "0"], "--bins")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, flag):
    p = subprocess.run([sys.executable, "-m", "reproduce.anchor", *argv, "--out", str(tmp_path / "o")], cwd=ROOT,
                       env=tool_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and flag in p.stderr
    assert not (tmp_path / "o").exists()
