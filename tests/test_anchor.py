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
    g = anchor.gap("Breakout-MinAtar", ours, theirs, games=2)
    res = scipy.stats.ttest_ind(list(ours.values()), list(theirs.values()), equal_var=False)
    lo, hi = res.confidence_interval(0.975)
    assert (g.diff, g.lo, g.hi, g.level) == (pytest.approx(31.0), pytest.approx(lo), pytest.approx(hi), 0.975)
    assert g.decision == "beyond seed noise: ours higher" and g.p == pytest.approx(0.1)  # 2 of C(6, 3) = 20 splits
    assert anchor.gap("g", theirs, ours, games=2).decision == "beyond seed noise: ours lower"
    assert anchor.gap("g", {1: 1.0, 2: 9.0, 3: 5.0}, {1: 4.0, 2: 6.0, 3: 5.5}, games=2).decision == "within seed noise"
    assert anchor.gap("g", {1: 1.0}, theirs, games=1).decision.startswith("not decided")


def test_the_tool_writes_the_table_and_the_figure_from_runs_and_a_purejaxql_json(tmp_path):
    total = 4096 * 40
    finals = {1: 40.0, 2: 44.0, 3: 47.0}
    for seed, score in finals.items():
        write_run(tmp_path / "ours" / f"Breakout-MinAtar__{seed}", "Breakout-MinAtar", seed, score + 10,
                  curve=lambda s: s / 4096, total=total)
    (tmp_path / "pjq.json").write_text(json.dumps(purejaxql_json(finals, total=total)))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "reproduce.anchor", "--ours", str(tmp_path / "ours"), "--purejaxql",
                        str(tmp_path / "pjq.json"), "--out", str(out), "--total-timesteps", str(total), "--bins", "10"],
                       cwd=ROOT, env=tool_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    md = (out / "beside_purejaxql.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| Breakout-MinAtar"))
    assert "| 50.00, 54.00, 57.00 | 53.67 [" in row and "| 40.00, 44.00, 47.00 | 43.67 [" in row
    # by hand: s^2 = 12.33 a side, se = sqrt(2 * 12.33 / 3) = 2.867, df = 4, t = 2.776: 10 +- 7.96
    assert "| 10.00 [2.04, 17.96] |" in row and row.endswith("| 0.10 | beyond seed noise: ours higher |")
    finals_csv = list(csv.DictReader(open(out / "beside_purejaxql_finals.csv")))
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


@pytest.mark.parametrize("argv, flag", [(["--ours", "/nonexistent", "--purejaxql", __file__], "--ours"),
                                        (["--ours", str(ROOT), "--purejaxql", "/nonexistent.json"], "--purejaxql"),
                                        (["--ours", str(ROOT), "--purejaxql", __file__, "--bins", "0"], "--bins")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, flag):
    p = subprocess.run([sys.executable, "-m", "reproduce.anchor", *argv, "--out", str(tmp_path / "o")], cwd=ROOT,
                       env=tool_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and flag in p.stderr
    assert not (tmp_path / "o").exists()
