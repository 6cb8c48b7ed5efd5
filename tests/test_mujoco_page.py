"""reproduce/mujoco_page.py: the numbers it lists for docs/results-mujoco-5m.md, computed here again from the runs and
adapt_by_game.csv, and its --check, which names what a page does not say (tests/test_results.py checks the committed
page with it against the regenerated report)."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))
import mujoco_page  # noqa: E402

RESULTS = ROOT / "results" / "mujoco-5m"
PAGE = ROOT / "docs" / "results-mujoco-5m.md"


@pytest.fixture(scope="module")
def listed():
    """Every fact, read once: the schedule reads every PPO+ABS run's events."""
    return mujoco_page.facts((RESULTS / "report.md").read_text(), RESULTS)


def tool(*args):
    return subprocess.run([sys.executable, "reproduce/mujoco_page.py", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def returns(label):
    runs = RESULTS / "runs" / "mujoco" / label
    return np.array([json.loads((runs / f"Walker2d-v4__{s}" / "eval_results.json").read_text())["eval"]["mean"]
                     for s in range(1, 11)])


def test_a_tasks_numbers_from_its_runs(listed):
    said = {what: words for where, what, words in listed if where == mujoco_page.task_heading("Walker2d")}
    a, b = returns("PPO+ABS"), returns("PPO")
    assert said["seed-to-seed standard deviation (ddof 1)"].endswith(
        f"is {np.std(a, ddof=1):.0f} (PPO + ABS) and {np.std(b, ddof=1):.0f} (PPO)")
    wins = sum(x > y for x in a for y in b)  # every pair of one run from each arm
    assert said["pairs of one run from each arm"] == f"PPO + ABS's run is above PPO's in {wins} of the 100 pairs"
    later = a[3:].mean() - b[3:].mean()
    assert said["seeds 4-10 alone"] == f"Seeds 4-10 alone give {later:+.0f}"
    higher = (a[3:] > b[3:]).sum()  # equal seeds 4-10
    assert said["equal-seed pairs of seeds 4-10"].startswith(f"PPO + ABS's run is the higher in {higher} ")


def test_the_schedule_table_reads_adapt_by_game(listed):
    with open(RESULTS / "adapt_by_game.csv") as f:
        kl = [r for r in csv.DictReader(f) if r["game"] == "Walker2d" and r["tag"] == "adapt/kl"]
    top = max(kl, key=lambda r: float(r["mean"]))
    row = next(w for _, what, w in listed if what == "schedule table" and w.startswith("| Walker2d |")).split(" | ")
    assert row[1] == top["n_runs"] == "10"
    assert row[2] == f"{float(top['mean']):.3f} ({float(top['step']) / 1e6:.2f}M)"
    assert row[3] == f"{float(top['max']):.3f}"
    assert float(row[4].split()[0]) >= float(top["max"]) - 5e-3  # one measurement is at least a bin's run mean


def test_check_names_what_a_page_does_not_say(tmp_path, listed):
    assert not mujoco_page.missing(PAGE.read_text(), listed)
    wins = next(w for where, what, w in listed
                if where == mujoco_page.task_heading("Hopper") and what == "pairs of one run from each arm")
    page = tmp_path / "page.md"
    page.write_text(PAGE.read_text().replace(wins.split(" in ")[1], "0 of the 100 pairs"))
    res = tool("--page", page, "--check")
    assert res.returncode == 1 and res.stdout.count("\n") == 1, res.stdout + res.stderr
    assert f"in '{mujoco_page.task_heading('Hopper')}': {wins}" in res.stdout
    res = tool("--page", tmp_path / "missing.md")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "missing.md is not a file" in res.stderr
