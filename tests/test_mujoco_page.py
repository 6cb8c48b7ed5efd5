"""reproduce/mujoco_page.py: the numbers it lists for docs/results-mujoco-5m.md from the report's data (report.json),
computed here again from the runs and adapt_by_game.csv, and its --check, which names what a page does not say
(tests/test_results.py checks the committed page with it against the regenerated report)."""
import csv
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import mujoco_page  # noqa: E402
from reproduce.report_data import read_data  # noqa: E402

RESULTS = ROOT / "results" / "mujoco-5m"
PAGE = ROOT / "docs" / "results-mujoco-5m.md"


@pytest.fixture(scope="module")
def listed():
    """Every fact, from the report's data (report.json)."""
    return mujoco_page.facts(read_data(RESULTS / "report.json"))


def tool(*args):
    return subprocess.run([sys.executable, "-m", "reproduce.mujoco_page", *map(str, args)], cwd=ROOT,
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
    assert said["equal-seed pairs of seeds 4-10"].endswith(f"PPO + ABS's run is the higher in {higher}")
    # seeds 1-3 alone: Welch's interval and the exact permutation p over the 20 splits of 6 runs
    first = scipy.stats.ttest_ind(a[:3], b[:3], equal_var=False).confidence_interval(0.95)
    pooled, d = np.concatenate([a[:3], b[:3]]), a[:3].mean() - b[:3].mean()
    splits = [pooled[list(g)].mean() - np.delete(pooled, list(g)).mean() for g in itertools.combinations(range(6), 3)]
    p = np.mean(np.abs(splits) >= abs(d) - 1e-9)
    assert said["seeds 1-3 alone (Welch 95%, exact permutation p)"] == (
        f"Seeds 1-3 gave {d:+.0f} [{first.low:.0f}, {first.high:.0f}] (p = {p:.2f})")
    ten = scipy.stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert said["Welch's interval, and as a share of PPO's mean"] == (
        f"between {ten.low:+.0f} and {ten.high:+.0f} (about {100 * ten.low / b.mean():+.0f}% to "
        f"{100 * ten.high / b.mean():+.0f}% of PPO's {b.mean():.0f})")


def test_the_schedule_table_reads_adapt_by_game(listed):
    with open(RESULTS / "adapt_by_game.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["game"] == "Walker2d"]
    kl = [r for r in rows if r["tag"] == "adapt/kl"]
    size = [r for r in rows if r["tag"] == "adapt/num_steps"]
    top = max(kl, key=lambda r: float(r["mean"]))
    peak = kl.index(top)
    before = max(size[:peak], key=lambda r: float(r["mean"]))
    low = min(size[peak:], key=lambda r: float(r["mean"]))
    row = next(w for _, what, w in listed if what == "schedule table" and w.startswith("| Walker2d |")).split(" | ")
    assert row[1] == top["n_runs"] == "10"
    assert row[2] == f"{float(top['mean']):.3f} ({float(top['step']) / 1e6:.2f}M)"
    assert row[3] == f"{float(top['max']):.3f}"
    assert float(row[4].split()[0]) >= float(top["max"]) - 5e-3  # one measurement is at least a bin's run mean
    assert row[5] == f"{float(before['mean']):.0f} ({float(before['step']) / 1e6:.2f}M)"
    assert row[6] == f"{float(low['mean']):.0f} ({float(low['step']) / 1e6:.2f}M)"
    assert row[7] == f"{float(low['min']):.0f}"
    assert float(before["step"]) < float(top["step"]) <= float(low["step"])


def test_check_names_what_a_page_does_not_say(tmp_path, listed):
    assert not mujoco_page.missing(PAGE.read_text(), listed)
    wins = next(w for where, what, w in listed
                if where == mujoco_page.task_heading("Hopper") and what == "pairs of one run from each arm")
    page = tmp_path / "page.md"
    page.write_text(PAGE.read_text().replace(wins.split(" in ")[1], "0 of the 100 pairs"))
    res = tool("--page", page, "--check")
    assert res.returncode == 1 and res.stdout.count("\n") == 1, res.stdout + res.stderr
    assert f"in '{mujoco_page.task_heading('Hopper')}': {wins}" in res.stdout
    # the right words in the wrong section are not said
    hopper, walker = mujoco_page.task_heading("Hopper"), mujoco_page.task_heading("Walker2d")
    moved = PAGE.read_text().replace(wins, "").replace(walker + "\n", walker + "\n\n" + wins + ".\n")
    assert [w for h, _, w in mujoco_page.missing(moved, listed) if h == hopper] == [wins]
    res = tool("--page", tmp_path / "missing.md")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "missing.md is not a file" in res.stderr
    res = tool("--results", ROOT / "results" / "mujoco-1m")  # a report without the pre-registered analysis
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "is not the mujoco-5m grid" in res.stderr
