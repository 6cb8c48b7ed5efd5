"""The published results under results/ must be what the project's own tools make of the committed runs: each
report is generated again from the committed eval_results.json and TensorBoard events and compared with the
committed report.md and figure data (README: "Results"), and the results READMEs' hand-written accounts of their
runs say what the runs' files hold."""
import ast
import contextlib
import csv
import itertools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package

TASKS, SEEDS, LABELS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4"), (1, 2, 3), ("PPO", "PPO+ABS")


@dataclass(frozen=True)
class Grid:
    """A published grid under results/<name>/: the experiment of reproduce/experiments.toml it ran, the sweep flags
    its report was made with (its docs page, "How these were made"), its games, seeds and labels, and the most bytes
    its directory may hold."""
    experiment: str
    flags: tuple
    games: tuple
    seeds: tuple
    labels: tuple
    max_bytes: float

    def runs(self) -> int:
        return len(self.labels) * len(self.games) * len(self.seeds)


GRIDS = {"mujoco-1m": Grid("mujoco", ("--scale", "0.2"), TASKS, SEEDS, LABELS, 15e6),
         # seeds 1-3, then seeds 4-10 of the pre-registered extension, on every task
         "mujoco-5m": Grid("mujoco", (), TASKS, tuple(range(1, 11)), LABELS, 200e6),
         "ppo-atari-check": Grid("ppo-atari5", ("--scale", "0.1", "--labels", "PPO", "PPO+ABS"),
                                 ("Breakout-v5", "Qbert-v5"),
                                 (1,), ("PPO", "PPO+ABS"), 8e6),
         "atari10-early": Grid("atari10-early", (), ("Amidar-v5", "BattleZone-v5", "Bowling-v5", "DoubleDunk-v5",
                                                                "Frostbite-v5", "KungFuMaster-v5", "NameThisGame-v5",
                                                                "Phoenix-v5", "Qbert-v5", "Riverraid-v5"), (1,),
                                                                ("ABS", "Vanilla"),
                                 20e6)}


def report_command(name: str) -> list[str]:
    """The command that wrote results/<name>/report.md, run from the repository root; --out last."""
    g = GRIDS[name]
    return ["-m", "reproduce.sweep", "report", g.experiment, *g.flags, "--root", f"results/{name}/runs",
            "--games", *g.games, "--seeds", *map(str, g.seeds), "--out"]


@pytest.mark.parametrize("grid", GRIDS)
def test_published_grid_holds_every_run_and_no_checkpoint(grid):
    g = GRIDS[grid]
    for label in g.labels:
        for game in g.games:
            for seed in g.seeds:
                run = ROOT / "results" / grid / "runs" / g.experiment / label / f"{game}__{seed}"
                assert (run / "eval_results.json").is_file(), run
                assert list(run.glob("events.out.tfevents.*")), run
                assert (run.parent / "logs" / f"{game}__{seed}.log").is_file(), run
    files = [p for p in (ROOT / "results" / grid).rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix == ".pt" or p.name == ".lock"]  # no checkpoints, models or locks
    assert sum(p.stat().st_size for p in files) < g.max_bytes


@pytest.fixture(scope="module")
def regenerated(made_once):
    """grid -> the directory its report was made again in, from the committed runs (once per grid and pytest run)."""
    def fill(grid: str, out: Path):
        res = subprocess.run([sys.executable, *report_command(grid), str(out)], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
    return lambda grid: made_once(f"report-{grid}", lambda out: fill(grid, out))


@pytest.mark.parametrize("grid", GRIDS)
def test_report_data_is_regenerated_from_the_committed_runs(regenerated, grid):
    """report.json, the report's numbers as data that the results pages quote, is what the report makes of the
    committed runs."""
    committed = json.loads((ROOT / "results" / grid / "report.json").read_text())
    assert committed == json.loads((regenerated(grid) / "report.json").read_text()), (
        f"results/{grid}/report.json differs from what reproduce/report.py makes of the committed runs; regenerate it "
        f"with: python " + " ".join(report_command(grid)) + f" results/{grid}")


@pytest.mark.parametrize("grid", GRIDS)
def test_report_is_regenerated_from_the_committed_runs(regenerated, grid):
    committed = (ROOT / "results" / grid / "report.md").read_text().splitlines()
    fresh = (regenerated(grid) / "report.md").read_text().splitlines()
    tables = [(i, a, b) for i, (a, b) in enumerate(zip(committed, fresh)) if a != b]
    assert not tables and len(committed) == len(fresh), (
        f"results/{grid}/report.md differs from what reproduce/report.py makes of the committed runs (first "
        f"differing line {tables[0][0] + 1 if tables else min(len(committed), len(fresh)) + 1}); regenerate it "
        f"with: python " + " ".join(report_command(grid)) + f" results/{grid}")
    # the data table is the full grid: every label ran every seed of every game, none skipped
    g = GRIDS[grid]
    for label in g.labels:
        data = next(ln for ln in fresh if ln.startswith(f"| {label} |"))
        per_game = ", ".join(f"{game.split('-v')[0]}: {len(g.seeds)}" for game in g.games)
        assert (f"| {g.runs() // len(g.labels)} | {len(g.games)} of {len(g.games)} | {per_game} | none |"
                in data), data
    # none skipped or left out, but the comparisons of labels the grid did not run (a --labels subset)
    outside = [f"{ln.split()[2]} vs {ln.split()[4]}" for ln in fresh if ln.startswith("- comparison ")
               and not {ln.split()[2], ln.split()[4]} <= set(g.labels)]
    assert not [ln for ln in fresh if ln.startswith("- ") and ("skipped" in ln or "left out" in ln)
                and not any(f"comparison {pair} skipped" in ln for pair in outside)]


@pytest.mark.parametrize("grid", [name for name, g in GRIDS.items() if g.experiment == "mujoco"])
def test_mujoco_reports_say_what_smallest_p_their_seeds_allow(regenerated, grid):
    """With n seeds a side on every task: with 3 vs 3 no p can be below 0.10 (2 of the C(6, 3) = 20 splits give
    the largest difference), with 10 vs 10 it can be 2 / 184,756."""
    fresh = (regenerated(grid) / "report.md").read_text()
    g = GRIDS[grid]
    hand = {3: "0.10 (2 of 20 relabellings): no difference can reach p < 0.05.",
            10: "1.1e-05 (2 of 184,756 relabellings), below 0.05."}
    n, tasks = len(g.seeds), ", ".join(t.split("-v")[0] for t in g.games)
    statement = f"- PPO+ABS vs PPO ({tasks}): with {n} vs {n} runs the smallest possible p is {hand[n]}"
    # evaluation, final training return, early return, late variance, whole-run return
    assert fresh.count(statement) == 5, statement


@pytest.mark.parametrize("grid", [name for name, g in GRIDS.items() if g.experiment == "mujoco"])
def test_mujoco_pages_machine_time_is_the_reports(regenerated, grid):
    """The docs page's hours of training are the report's "Machine time", summed over its labels."""
    md = (regenerated(grid) / "report.md").read_text().split("## Machine time")[1].split("\n## ")[0]
    hours = [float(ln.split("|")[3]) for ln in md.splitlines() if ln.startswith("| PPO")]
    page = (ROOT / "docs" / f"results-{grid}.md").read_text()
    runs = GRIDS[grid].runs()
    assert len(hours) == 2 and f"the {runs} runs took {sum(hours):.1f} hours of training" in page.lower()


def test_mujoco_5m_page_states_both_reports_divergence_trends(regenerated):
    """The 5M page's Figure 1 bullet gives each report's "Divergence over training" counts and median rho."""
    page = " ".join((ROOT / "docs" / "results-mujoco-5m.md").read_text().split())
    bullet = page.split("**The paper's Figure 1 claim**")[1].split(" - **")[0]
    at_5m, at_1m = bullet.split(" At 5M ")[1].split(" At 1M ")  # each grid's sentence
    for grid, text in (("mujoco-5m", at_5m), ("mujoco-1m", at_1m)):
        md = (regenerated(grid) / "report.md").read_text().split("## Divergence over training")[1].split("\n## ")[0]
        line = next(ln for ln in md.splitlines() if ln.startswith("- PPO+ABS: "))
        lower, rho = line.removeprefix("- PPO+ABS: ").rstrip(").").split("; ")
        count, median = rho.split(" (")
        assert lower.split(" in ")[-1] in text and f"{count}, {median}" in text, (grid, line, text)


# the outcomes of the 5M page's per-task tables and the report's section of each (docs/results-mujoco-5m.md)
OUTCOMES_5M = {"evaluation return (primary)": "## Per-game evaluation return",
               "training return, last 100 episodes": "## Final training return",
               "whole-run return": "### Whole-run return", "early return, first 10%": "### Early return",
               "late variance, last 10%, return²": "### Late variance"}


def test_mujoco_5m_page_states_the_preregistered_numbers_of_each_complete_task(regenerated):
    """Each task with all 20 runs in has its section on the 5M page, whose table is the report's: each arm's mean,
    the difference with Welch's interval and the permutation p per outcome, the adjusted p, the share of PPO's mean
    and Hedges' g of the primary outcome, and the decision; an incomplete task has no such section."""
    md = (regenerated("mujoco-5m") / "report.md").read_text()
    page = (ROOT / "docs" / "results-mujoco-5m.md").read_text()
    pre = md.split("## Pre-registered analysis")[1].split("\n### ")[0]
    for task in (t.split("-v")[0] for t in TASKS):
        heading = f"## {task}-v4, seeds 1-10: the pre-registered test"
        row = next(ln for ln in pre.splitlines() if ln.startswith(f"| {task} | "))
        if "| incomplete |" in row:
            assert heading not in page, task
            continue
        cells = row.strip("| ").split(" | ")
        section = page.split(heading)[1].split("\n## ")[0]
        for outcome, report_section in OUTCOMES_5M.items():
            def cell(label, col):  # the report marks the higher mean in bold
                return report_cell(md, report_section, task, label, col).strip("*")
            diff = f"{cell('PPO+ABS − PPO', 3)} {cell('PPO+ABS − PPO', 4)}"
            adjusted = cells[5] if outcome.endswith("(primary)") else "uncorrected"
            assert (f"| {outcome} | {cell('PPO+ABS', 4)} | {cell('PPO', 4)} | {diff} | {cell('PPO+ABS − PPO', 6)} | "
                    f"{adjusted} |") in section, (task, outcome)
        assert f"{cells[6]} of PPO's mean, Hedges' g {cells[7]}" in " ".join(section.split()), task
        decision = next(ln for ln in pre.splitlines() if ln.startswith(f"- {task}: ")).removeprefix(f"- {task}: ")
        assert decision.rstrip(".").lower() in " ".join(section.split()).lower(), task


def test_mujoco_5m_page_says_every_number_mujoco_page_lists(regenerated):
    """The 5M page's text says, each in its section, every number reproduce/mujoco_page.py lists from the
    regenerated report's data (the seeds' spread, seeds 1-3 and 4-10 alone, HalfCheetah's fast-gait runs, the
    schedule table, the divergence counts, the machine time)."""
    from reproduce import mujoco_page
    data = json.loads((regenerated("mujoco-5m") / "report.json").read_text())
    page = (ROOT / "docs" / "results-mujoco-5m.md").read_text()
    listed = mujoco_page.facts(data)
    complete = mujoco_page.complete_tasks(data)
    assert complete == list(mujoco_page.TASKS)
    per_task = {t: sum(where == mujoco_page.task_heading(t) for where, _, _ in listed) for t in complete}
    assert per_task == {t: 11 if t == "HalfCheetah" else 10 for t in complete}  # HalfCheetah: its fast-gait runs too
    assert not mujoco_page.missing(page, listed), "run: python -m reproduce.mujoco_page --check"


def test_mujoco_1m_report_states_what_three_seeds_can_show(regenerated):
    """Per task: the per-seed values with a Student-t interval (not the bootstrap's [lowest, highest seed]), Welch's
    interval and the exact permutation p of PPO+ABS - PPO, no per-game IQM table (the IQM of 3 values is their
    mean), and ABS's burn-in share of the early window."""
    md = (regenerated("mujoco-1m") / "report.md").read_text()
    evaluation = md.split("## Per-game evaluation return")[1].split("\n## ")[0]
    hopper = next(ln for ln in evaluation.splitlines() if ln.startswith("| Hopper | PPO |"))
    assert hopper == "| Hopper | PPO | 1: 3665.0, 2: 3438.1, 3: 3581.4 | **3561.5** | [3276.5, 3846.5] | 3 |"
    assert "[3438.1, 3665.0]" not in md  # the bootstrap interval of 3 seeds: their min and max
    assert "| Hopper | PPO+ABS − PPO | -561.1 | [-1991.3, 869.0] | 2.14 | 0.20 | 20 | 3 vs 3 |" in evaluation
    assert "Not shown." in md.split("## Per-game IQM of evaluation return")[1].split("\n## ")[0]
    assert ("- PPO+ABS: on average 92.9% of the early window (runs: 92.7-93.1%) is burn-in at L = 1024, and 92.9% "
            "(runs: 92.7-93.1%) ran at L = 1024 in all. Its early return is mostly that of a fixed L = 1024 (PPO: "
            "fixed L = 2048), not of the ABS schedule.") in md


def test_mujoco_5m_evaluation_table_matches_an_independent_computation(regenerated):
    """Every evaluation row and difference of the 5M report, computed here again from each run's 100 evaluation
    returns: the seed means, the Student-t 95% CI, Welch's 95% CI and the exact permutation p over every split."""
    md = (regenerated("mujoco-5m") / "report.md").read_text()
    evaluation = md.split("## Per-game evaluation return")[1].split("\n## ")[0]

    def one(x):  # the report's number format: one decimal from 10 in size, three below
        return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"
    for task in TASKS:
        seeds, task_seeds = {}, GRIDS["mujoco-5m"].seeds
        n = len(task_seeds)
        for label in LABELS:
            runs = ROOT / "results" / "mujoco-5m" / "runs" / "mujoco" / label
            returns = [json.loads((runs / f"{task}__{s}" / "eval_results.json").read_text())["eval"]["returns"]
                       for s in task_seeds]
            assert [len(r) for r in returns] == [100] * n  # the paper's 100 evaluation episodes per run
            x = np.array([np.mean(r) for r in returns])
            seeds[label] = x
            half = scipy.stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n)
            per_seed = ", ".join(f"{s}: {one(v)}" for s, v in zip(task_seeds, x))
            row = next(ln for ln in evaluation.splitlines() if ln.startswith(f"| {task[:-3]} | {label} |"))
            assert row.replace("**", "") == (f"| {task[:-3]} | {label} | {per_seed} | {one(x.mean())} | "
                                             f"[{one(x.mean() - half)}, {one(x.mean() + half)}] | {n} |"), row
        a, b = seeds["PPO+ABS"], seeds["PPO"]
        va, vb = a.var(ddof=1) / n, b.var(ddof=1) / n
        df = (va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1))
        diff, half = a.mean() - b.mean(), scipy.stats.t.ppf(0.975, df) * np.sqrt(va + vb)
        pooled = np.concatenate([a, b])
        first = pooled[np.array(list(itertools.combinations(range(2 * n), n)))].sum(axis=1)  # every split's group
        splits = first / n - (pooled.sum() - first) / n
        p = np.mean(np.abs(splits) >= abs(diff) - 1e-9)
        p_text = f"{p:.2f}" if p >= 0.095 else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")  # the report's format
        assert (f"| {task[:-3]} | PPO+ABS − PPO | {one(diff)} | [{one(diff - half)}, {one(diff + half)}] | {df:.2f} "
                f"| {p_text} | {len(splits):,} | {n} vs {n} |") in evaluation, task
    # ABS's burn-in ends at step 93,184 in every run: 18.6% of the early window (the first 500,000 of 5M steps),
    # and L leaves L_min there: most of the window ran the schedule
    assert ("- PPO+ABS: on average 18.6% of the early window (runs: 18.6-18.6%) is burn-in at L = 1024, and 18.6% "
            "(runs: 18.6-18.6%) ran at L = 1024 in all. Most of its early window ran with L moved from L_min.") in md


@pytest.mark.parametrize("grid", GRIDS)
def test_figure_data_is_regenerated_from_the_committed_runs(regenerated, grid):
    """Every figure's CSV the report writes is committed, equal, beside its figure; none is committed that it does not
    write (a figure left from an earlier report)."""
    fresh = sorted(p.name for p in regenerated(grid).glob("*.csv"))
    assert fresh == sorted(p.name for p in (ROOT / "results" / grid).glob("*.csv"))
    # at least the learning curves and ABS's divergence and L, over the games and per game: one column per game up to
    # figure_data.ADAPT_BY_GAME_MAX games, a grid of panels per measure beyond
    assert {"learning_curves.csv", "adapt.csv"} <= set(fresh)
    assert "adapt_by_game.csv" in fresh or {"divergence_by_game.csv", "batch_size_by_game.csv"} <= set(fresh)
    for name in fresh:
        with open(ROOT / "results" / grid / name) as a, open(regenerated(grid) / name) as b:
            assert list(csv.reader(a)) == list(csv.reader(b)), name
        assert (ROOT / "results" / grid / name.replace(".csv", ".png")).is_file()


def report_cell(md: str, section: str, game: str, label: str, col: int) -> str:
    """Column `col` (1: the game) of the row of `game` and `label` in the table under the report's heading
    `section`, with a one-seed cell's "1: " dropped."""
    row = next(ln for ln in md.split(section)[1].splitlines() if ln.startswith(f"| {game} | {label} |"))
    return row.split(" | ")[col - 1].removeprefix("1: ").rstrip(" |")


def test_ppo_atari_check_page_states_the_reports_numbers(regenerated):
    """docs/ppo-atari.md's learning-check table and KL trend are the regenerated report's numbers, for each game."""
    md = (regenerated("ppo-atari-check") / "report.md").read_text()
    page = " ".join((ROOT / "docs" / "ppo-atari.md").read_text().split("## Learning check")[1].split("\n## ")[0]
                    .split())
    for game in (g.split("-v")[0] for g in GRIDS["ppo-atari-check"].games):
        for label in ("PPO", "PPO+ABS"):
            cells = [report_cell(md, section, game, label, 3) for section in ("## Per-game evaluation return",
                     "## Final training return", "### Early return\n", "### Whole-run return")]
            assert f"| {game} | {label} | " + " | ".join(cells) + " |" in page, cells
        trend = {lb: [report_cell(md, "## Divergence over training", game, lb, col) for col in (5, 6, 7, 8)]
                 for lb in ("PPO+ABS", "PPO")}
        (a0, a1, a2, a_rho), (p0, p1, p2, p_rho) = trend["PPO+ABS"], trend["PPO"]
        said = (f"{game}: the first measurement {a0} (PPO+ABS) and {p0} (PPO), the mean over the first tenth of the "
                f"steps {a1} and {p1}, over the last tenth {a2} and {p2}, Spearman's rho with the step {a_rho} and "
                f"{p_rho}")
        assert said in page, said
    for label in ("PPO", "PPO+ABS"):
        time = next(ln for ln in md.split("## Machine time")[1].splitlines() if ln.startswith(f"| {label} |"))
        runs, hours, per_run, sps = time.split(" | ")[1:5]
        said = f"{label} {hours} hours for its {runs} runs ({per_run} per run, {sps} steps/s)"
        assert said in page, said


def test_ppo_atari_page_states_the_l_range_and_kl_of_the_committed_runs():
    """docs/ppo-atari.md's argument for its L range and its --kl-low restates committed runs: the learning check's
    PPO + ABS runs (their highest L and how often L was L_min) and the bounds runs' smallest KL."""
    from reproduce import events
    page = " ".join((ROOT / "docs" / "ppo-atari.md").read_text().split())
    check = ROOT / "results" / "ppo-atari-check" / "runs" / "ppo-atari5" / "PPO+ABS"
    said = {}
    for game in ("Breakout", "Qbert"):
        steps, L = events.load_scalars(check / f"{game}-v5__1", ["adapt/num_steps"])["adapt/num_steps"]
        L = np.asarray(L)
        assert L.min() == 64 and L.max() < 256
        said[game] = (int(L.max()), int((L == 64).sum()), len(L))
    (b_max, b_min, b_n), (q_max, q_min, q_n) = said["Breakout"], said["Qbert"]
    assert (f"rose to at most {b_max} on Breakout and {q_max} on Qbert, so L_max = 256 did not bind within 1M steps, "
            f"and L was at L_min after {b_min} of Breakout's {b_n} measurements and {q_min} of Qbert's {q_n}") in page
    bounds = ROOT / "results" / "ppo-atari-bounds" / "runs"
    smallest = {f"{min(events.load_scalars(bounds / f'{game}-fixed128', ['adapt/kl'])['adapt/kl'][1]):.4f}"
                for game in ("Breakout", "Qbert")}
    assert smallest == {"0.0002"} and "the smallest single measurement seen (0.0002 on both games)" in page


def test_atari10_early_page_states_the_reports_numbers(regenerated):
    """docs/results-atari10-early.md's tables are what reproduce/early_page.py fills from the regenerated report, its
    text says every number early_page.py --facts lists, and its verdict and the README headline restate them."""
    from reproduce import early_page
    md = (regenerated("atari10-early") / "report.md").read_text()
    data = json.loads((regenerated("atari10-early") / "report.json").read_text())
    text = (ROOT / "docs" / "results-atari10-early.md").read_text()
    page = " ".join(text.split())
    verdict = " ".join(text.split("## Verdict")[1].split("\n## ")[0].split())
    readme = " ".join((ROOT / "README.md").read_text().split())  # its headline restates a few of them
    games = [g.split("-v")[0] for g in GRIDS["atari10-early"].games]
    assert early_page.games(data) == games
    changed = early_page.fill(text, data)[1]
    assert not changed, f"run: python -m reproduce.early_page (the tables {changed} are not the report's)"
    listed = early_page.facts(data)
    for what, said in listed:
        if what != "starts at its highest":  # one or more runs: the verdict says it, checked below
            assert " ".join(said.split()) in page, (what, said)
    facts = dict(listed)

    wins, n = map(int, re.search(r"higher early in (\d+) of (\d+) games", facts[early_page.EARLY_COUNT]).groups())
    assert n == len(games) and f"higher in {wins} of the {n} games" in verdict
    chance = scipy.stats.binom.sf(wins - 1, n, 0.5)  # as likely as a coin: p = 1/2 per game
    assert f"{wins} or more of {n} would come up with probability {chance:.2f}" in page
    assert f"{wins} or more of {n} with probability {chance:.2f}" in verdict
    iqm = {lb: re.search(rf"\b{lb} (\S+ \[\S+, \S+\])", facts[f"{early_page.EARLY_IQM}, {lb}"]).group(1)
           for lb in ("ABS", "Vanilla")}
    (a_lo, a_hi), (v_lo, v_hi) = ([float(x) for x in iqm[lb].split("[")[1].rstrip("]").split(", ")]
                                  for lb in ("ABS", "Vanilla"))
    assert a_lo <= v_hi and v_lo <= a_hi  # "the intervals overlap"
    top = facts[early_page.LARGEST]
    assert top in verdict
    assert (f"ABS higher early in {wins} of {n} games (the paper's Table 2: 7 of 10), by {top.split(',')[0]}; the "
            f"early-HNS IQM is ABS {iqm['ABS']} and Vanilla {iqm['Vanilla']} (games resampled)") in readme

    for lb in ("ABS", "Vanilla"):
        trend = facts[f"{lb} divergence trend (report)"]
        lower = re.search(r"lower in the last tenth than in the first in (\d+ of \d+) runs", trend).group(1)
        assert f"{lower} runs of {lb}" in verdict and "lower in the last tenth than in the first in" in verdict, trend
        rho = re.search(r"median ρ ([-+]\d\.\d\d)", trend).group(1)
        assert f"{rho} for {lb}" in verdict, trend
    starts_highest = early_page.starts_highest(data)
    assert starts_highest and all(said in verdict for said in starts_highest), starts_highest
    trained = float(report_cell(md, "## Final training return", "BattleZone", "Vanilla", 3))
    assert f"last 100 training games (epsilon-greedy) averaged {trained:,.0f}" in page
    highest = float(re.search(r"is (\d+)$", facts[early_page.HIGHEST_L]).group(1))
    assert highest < 32 and f"L never reached Vanilla's 32: {facts[early_page.HIGHEST_L]}" in page
    assert f"2 at L = 16, {32 / highest:.1f} at L = {highest:.0f}" in page


def test_atari10_early_page_states_the_scripts_settings():
    """The settings docs/results-atari10-early.md quotes, and the arithmetic it does on them, are abs_pqn_atari.py's
    defaults and the atari10-early grid's flags."""
    sys.path.insert(0, str(ROOT))
    import tomllib

    import abs_pqn_atari as pqn
    a = pqn.Args()
    exp = tomllib.loads((ROOT / "reproduce" / "experiments.toml").read_text())["experiments"]["atari10-early"]
    page = " ".join((ROOT / "docs" / "results-atari10-early.md").read_text().split())
    assert exp["labels"] == {"ABS": "", "Vanilla": "--no-adapt --num-steps 32 --track-divergence --adapt-freq 10"}
    assert "PQN at a fixed L = 32 (`--no-adapt --num-steps 32`)" in page
    assert "(`--track-divergence --adapt-freq 10`: every 10th iteration instead of every 50th" in page
    assert (f"{a.num_envs} envs, L in [{a.num_steps_min}, {a.num_steps_max}], delta in [{a.divergence_low:.0%}, "
            f"{a.divergence_high:.0%}], K = {a.adapt_freq}, W = {a.window}") in page
    assert (exp["total_timesteps"], exp["stop_at_step"], exp["seeds"]) == (20_000_000, 2_000_000, [1])
    assert f"each run checkpoints every {exp['checkpoint_every']:,} steps" in page
    window, batch = exp["stop_at_step"], a.num_steps_min * a.num_envs
    assert a.exploration_fraction * exp["total_timesteps"] == window  # epsilon decays over exactly the window
    assert f"Epsilon falls linearly from {a.start_e:g} to {a.end_e:g} over exactly these 2M steps" in page
    burn_in = a.window * a.adapt_freq * batch
    assert (f"W × K = {a.window} × {a.adapt_freq} = {a.window * a.adapt_freq} iterations of {a.num_steps_min} × "
            f"{a.num_envs} = {batch:,} steps, so burn-in ends at step {burn_in:,}, {burn_in / window:.1%} of the "
            f"{window:,}-step window") in page
    assert f"ABS measures every {a.adapt_freq} iterations (its first at step {a.adapt_freq * batch:,}" in page
    assert f"Vanilla every 10 (every {10 * 32 * a.num_envs:,} steps)" in page
    assert f"{a.ref_batch_size:,} reference states" in page and a.ref_batch_size == batch
    assert f"minibatches of {batch // a.num_minibatches}" in page
    assert f"minibatches of {2 * batch // a.num_minibatches:,}" in page
    assert f"{a.eval_max_episode_steps:,}-step cap" in page
    assert f"an EMA (beta = {a.ema_beta:g} per measurement)" in page
    epochs = [pqn.update_epochs_for(L, a.update_epochs, a.epochs_ref_steps) for L in range(1, a.num_steps_max + 1)]
    two = max(L for L, e in enumerate(epochs, start=1) if e == a.update_epochs)
    assert f"gives {a.update_epochs} epochs for every L up to {two}" in page
    assert pqn.round_half_up(a.update_epochs * a.num_steps_min / a.epochs_ref_steps) == 1  # "without its floor: one"
    steps = a.num_minibatches * a.update_epochs
    assert f"{a.num_minibatches} minibatches × {a.update_epochs} epochs = {steps}" in page

    def target(d):
        return round(pqn.divergence_to_length(d, a.num_steps_min, a.num_steps_max, a.divergence_low,
                                              a.divergence_high))
    assert (f"a target of {target(0.5)} at a delta_bar of 0.5 and {target(0.7)} at 0.7 ({target(0.95)} at 0.95)"
            in page)


# The study of --divergence ess (README "Beyond the paper"): its own runs, and the command that wrote study.md.
ESS = ROOT / "results" / "mujoco-ess-1m"
ESS_TASKS, TRACK_TASKS = ("HalfCheetah-v4", "Hopper-v4"), ("InvertedPendulum-v4", "Humanoid-v4")
STUDY = ["-m", "reproduce.divergence_study", "--runs", "PPO=results/mujoco-1m/runs/mujoco/PPO",
         "PPO+ABS=results/mujoco-1m/runs/mujoco/PPO+ABS",
         "PPO+ABS-ESS=results/mujoco-ess-1m/runs/mujoco-ess/PPO+ABS-ESS", "PPO-track=results/mujoco-ess-1m/runs/track",
         "--games", *TASKS, *TRACK_TASKS, "--out"]
STUDY_DATA = ("divergence.csv", "rollout.csv", "returns.csv")


def test_ess_study_holds_every_run_and_no_checkpoint():
    runs = [ESS / "runs" / "mujoco-ess" / "PPO+ABS-ESS" / f"{task}__{seed}" for task in ESS_TASKS for seed in SEEDS]
    runs += [ESS / "runs" / "track" / f"{task}__1" for task in TRACK_TASKS]
    for run in runs:
        assert (run / "eval_results.json").is_file(), run
        assert list(run.glob("events.out.tfevents.*")), run
        assert (run.parent / "logs" / f"{run.name}.log").is_file(), run
    files = [p for p in ESS.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix == ".pt"]
    assert sum(p.stat().st_size for p in files) < 8e6


@pytest.fixture(scope="module")
def study(made_once):
    def fill(out: Path):
        res = subprocess.run([sys.executable, *STUDY, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
    return made_once("mujoco-ess-1m", fill)


def test_ess_study_is_regenerated_from_the_committed_runs(study):
    committed, fresh = (ESS / "study.md").read_text(), (study / "study.md").read_text()
    assert committed == fresh, ("results/mujoco-ess-1m/study.md differs from what reproduce/divergence_study.py "
                                "makes of the committed runs; regenerate it with: python " + " ".join(STUDY)
                                + " results/mujoco-ess-1m")
    rows = [ln for ln in fresh.splitlines() if ln.startswith("| ") and "| PPO+ABS-ESS |" in ln and "| ess |" in ln]
    assert len(rows) == len(ESS_TASKS) * len(SEEDS)  # every ESS run is in the table and scheduled on delta_ESS
    assert "## Notes" not in fresh  # no run skipped or unfinished


@pytest.mark.parametrize("name", STUDY_DATA)
def test_ess_study_figure_data_is_regenerated_from_the_committed_runs(study, name):
    with open(ESS / name) as a, open(study / name) as b:
        assert list(csv.reader(a)) == list(csv.reader(b)), name
    assert (ESS / name.replace(".csv", ".png")).is_file()


def test_seeds_4_to_10_of_mujoco_5m_are_whole_and_listed():
    """Seeds 4-10 of results/mujoco-5m, 42 runs: each with its evaluation, events and log, no checkpoint, and the
    README of the directory lists each with the numbers of its eval_results.json."""
    published = ROOT / "results" / "mujoco-5m"
    later = [p for p in sorted((published / "runs" / "mujoco").glob("*/*/eval_results.json"))
             if int(p.parent.name.split("__")[1]) >= 4]
    assert len(later) == 2 * 7 * len(TASKS)
    readme = " ".join((published / "README.md").read_text().split())
    for path in later:
        run, r = path.parent, json.loads(path.read_text())
        label, (task, seed) = run.parent.name, run.name.split("__")
        assert label in LABELS and task in TASKS and int(seed) >= 4 and r["global_step"] >= 5_000_000
        assert list(run.glob("events.out.tfevents.*")) and (run.parent / "logs" / f"{run.name}.log").is_file()
        said = (f"{label}, {task}, seed {seed}: {r['eval']['mean']:.1f} at {r['global_step']:,} steps, "
                f"{r['train_seconds']:,.0f} s of training")
        assert said in readme, said
    assert not [p for p in published.rglob("*") if p.suffix == ".pt" or p.name == ".lock"]


WORDS = {"one": 1, "two": 2, "three": 3, "four": 4}


def log_times(log: str, what: str) -> list:
    """The times of a run log's `[sweep] <time> start` (what="start") or `exit 0` (what="exit 0") lines."""
    from datetime import datetime
    return [datetime.fromisoformat(t) for t in re.findall(rf"^\[sweep\] (\S+) {what}\b", log, re.M)]


def resumed_at(log: str) -> list[int]:
    """The steps of the checkpoints a run log's starts resumed from, in order."""
    return [int(s) for s in re.findall(r"^resumed .* at global_step (\d+)", log, re.M)]


def test_mujoco_5m_run_list_states_each_runs_own_numbers():
    """results/mujoco-5m/README.md's hand-written list of seeds 4-10: every run of those seeds has one entry, in the
    order the runs were made (task by task as the README names them, seed by seed: each seed's runs started once the
    previous seed's had exited), and what an entry says of its run is what its files hold: the 100-episode mean to one
    decimal, `global_step`, round(train_seconds), its event files (one per start; one where none are named), stopped
    once or twice, the checkpoint steps it was resumed from (its log's "resumed ... at global_step"), and the start
    times it gives of the starts in its log. Not checked, as no file records them: the commit (these logs name
    none), the workers, the pauses, and HalfCheetah seed 4's lost first start."""
    here = ROOT / "results" / "mujoco-5m"
    text = (here / "README.md").read_text()
    tasks = re.search(r"followed task by task \((\S+), (\S+),\s+then (\S+)\)", text).groups()
    entries = [" ".join(e.split()) for e in text.split("`train_seconds` (its eval_results.json):\n")[1]
               .split("\n## ")[0].split("\n- ")]
    entries[0] = entries[0].removeprefix("- ")
    heads = [re.match(r"(PPO|PPO\+ABS), (\S+-v4), seed (\d+): ([\d.]+) at ([\d,]+) steps, ([\d,]+) s of training", e)
             for e in entries]
    assert all(heads), [e[:60] for e, h in zip(entries, heads) if not h]
    keys = [(label, task, int(seed)) for label, task, seed, *_ in (h.groups() for h in heads)]
    runs = here / "runs" / "mujoco"
    later = sorted((d.parent.name, *d.name.split("__")) for d in runs.glob("*/*__*") if int(d.name.split("__")[1]) >= 4)
    assert sorted((lb, t, str(s)) for lb, t, s in keys) == later and len(set(keys)) == len(keys)
    assert keys == sorted(keys, key=lambda k: (tasks.index(k[1]), k[2], LABELS.index(k[0])))
    logs = {k: (runs / k[0] / "logs" / f"{k[1]}__{k[2]}.log").read_text() for k in keys}
    groups = [[k for k in keys if k[1:] == g] for g in dict.fromkeys(k[1:] for k in keys)]  # (task, seed), in order
    for before, after in zip(groups, groups[1:]):
        assert max(log_times(logs[k], "exit 0")[-1] for k in before) <= min(log_times(logs[k], "start")[0]
                                                                             for k in after), (before, after)
    for (label, task, seed), head, entry in zip(keys, heads, entries):
        run, where = runs / label / f"{task}__{seed}", f"{label} {task} seed {seed}"
        r, log = json.loads((run / "eval_results.json").read_text()), logs[label, task, seed]
        assert r["eval"]["episodes"] == 100 and r["args"]["eval_episodes"] == 100, where
        assert head.group(4, 5, 6) == (f"{r['eval']['mean']:.1f}", f"{r['global_step']:,}",
                                       f"{round(r['train_seconds']):,}"), where
        files, starts, resumes = len(list(run.glob("events.out.tfevents.*"))), log_times(log, "start"), resumed_at(log)
        assert files == len(starts) == len(resumes) + 1, where  # one event file per start, each later start a resume
        said = [WORDS[w] for w in re.findall(r"\b(one|two|three|four) event files?\b", entry)]
        assert said in ([files], []) and (said or files == 1), where
        for times in re.findall(r"[Ss]topped (once|twice)\b", entry):
            assert files == {"once": 2, "twice": 3}[times], where
        checkpoints = [int(s.replace(",", "")) for s in re.findall(r"checkpoints? at step ([\d,]+)", entry)]
        assert checkpoints == resumes, where
        for when in re.findall(r"(?:\(started |started again from step 0 \()(\d{4}-\d\d-\d\d \d\d:\d\d)\)", entry):
            assert when == f"{starts[0]:%Y-%m-%d %H:%M}", where
        for when in re.findall(r"resumed with the same command \((\d\d:\d\d)\)", entry):
            assert when == f"{starts[1]:%H:%M}", where


def test_ppo_atari_bounds_readme_states_its_runs_own_numbers():
    """results/ppo-atari-bounds/README.md of its two runs: each folder holds one event file, its eval_results.json and
    log.txt; each command's flags are its run's `args`; the steps it names are the runs' `global_step` (their stop), L
    is their `num_steps`, the defaults it names are abs_ppo_atari.py's and the runs', its training minutes and seconds
    are round(train_seconds), and the runs ran one at a time (the second's event file named after the first's start
    plus its training)."""
    here = ROOT / "results" / "ppo-atari-bounds"
    text = " ".join((here / "README.md").read_text().split())
    runs = {d.name.split("-")[0]: d for d in sorted((here / "runs").iterdir())}
    assert sorted(runs) == ["Breakout", "Qbert"]
    res = {game: json.loads((d / "eval_results.json").read_text()) for game, d in runs.items()}
    for game, d in runs.items():
        assert sorted(p.name for p in d.iterdir() if "tfevents" not in p.name) == ["eval_results.json", "log.txt"]
        assert len(list(d.glob("events.out.tfevents.*"))) == 1, game
    script = (ROOT / "abs_ppo_atari.py").read_text()
    fields = next(n for n in ast.walk(ast.parse(script)) if isinstance(n, ast.ClassDef) and n.name == "Args").body
    defaults = {}  # abs_ppo_atari.py's literal defaults: a flag the command leaves out is the run's as one of these
    for node in fields:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            with contextlib.suppress(ValueError):
                defaults[node.target.id] = ast.literal_eval(node.value)
    commands = re.findall(r"OMP_NUM_THREADS=1 python abs_ppo_atari.py (.*?)(?= OMP_NUM_THREADS=| Breakout took)", text)
    assert len(commands) == len(runs)
    for command in commands:
        flags = re.findall(r"--([\w-]+)(?: ([^-\s]\S*))?", command.replace(" \\", ""))
        args, given = res[dict(flags)["run-name"].split("-")[0]]["args"], set()
        for flag, value in flags:
            name = flag.removeprefix("no-").replace("-", "_")
            given.add(name)
            assert str(args[name]) == ("False" if flag.startswith("no-") else value or "True"), (flag, value)
        assert not [k for k, v in args.items() if k in defaults and v != defaults[k] and k not in given]
    a = {game: r["args"] for game, r in res.items()}
    assert (f"the first {res['Breakout']['global_step']:,} (Breakout) and {res['Qbert']['global_step']:,} (Qbert) "
            "steps") in text
    assert all(r["global_step"] == r["args"]["stop_at_step"] for r in res.values())
    (L, seed, freq, total), = {(x["num_steps"], x["seed"], x["adapt_freq"], x["total_timesteps"]) for x in a.values()}
    assert f"CleanRL's PPO (L = {L}), seed {seed}, both divergences measured every {freq} iterations" in text
    assert f"of the {total // 10**6}M-step protocol" in text
    low, high = (re.search(rf"^    {name}: float = (\S+)$", script, re.M).group(1) for name in ("kl_low", "kl_high"))
    assert f"`abs_ppo_atari.py`'s default `--kl-low {low}` and `--kl-high {high}`" in text
    assert {(str(x["kl_low"]), str(x["kl_high"])) for x in a.values()} == {(low, high)}
    took = {game: divmod(round(r["train_seconds"]), 60) for game, r in res.items()}
    assert (f"Breakout took {took['Breakout'][0]} min {took['Breakout'][1]} s of training, "
            f"Qbert {took['Qbert'][0]} min {took['Qbert'][1]} s") in text
    start = {game: int(next(d.glob("events.out.tfevents.*")).name.split(".")[3]) for game, d in runs.items()}
    assert start["Breakout"] + res["Breakout"]["train_seconds"] <= start["Qbert"]  # "one at a time"


def test_atari10_early_run_list_states_each_runs_own_numbers():
    """results/atari10-early/README.md's hand-written list of the runs: every published game has one entry (both its
    labels), and what an entry says of its runs is what their files hold: the source commits of their logs, the
    checkpoint steps they were resumed from (each one before the stop named) and an evaluation-only resume only where
    it says "evaluated", "in one go", "stopped once" and the event files of the label each clause is about, the
    games at the step cap, the constant returns, actions and episode lengths it names, its wall seconds (first start
    to last exit), its times and dates (its logs' starts and exits), "one after the other" and "side by side"; with
    the stop and the range of `global_step`, the BattleZone entry's numbers and the lines of Amidar's refused second
    sweep. Not checked: the action names (ale_py's, not the files'), and what no file records (commit 359b156, from
    before the logs named their commit; the pauses, cores and neighbours; BattleZone's random score)."""
    here = ROOT / "results" / "atari10-early"
    runs = here / "runs" / "atari10-early"
    text = (here / "README.md").read_text()
    games = {g.split("-v")[0] for g in GRIDS["atari10-early"].games}
    items = [" ".join(e.split()) for e in text.split("\nRuns published (")[1].split("\n\n")[0].split("\n- ")[1:]]
    heads = [re.match(r"(\w+)(, ABS and Vanilla)?: ", e) for e in items]
    entries = {h.group(1): (bool(h.group(2)), e) for h, e in zip(heads, items) if h and h.group(1) in games}
    assert len(entries) == len([h for h in heads if h and h.group(1) in games])  # each game once
    published = {(d.parent.name, d.name.split("-v")[0]) for d in runs.glob("*/*__1")}
    assert published == {(lb, g) for lb in ("ABS", "Vanilla") for g in entries} and set(entries) == games
    res = {(lb, g): json.loads((runs / lb / f"{g}-v5__1" / "eval_results.json").read_text()) for lb, g in published}
    logs = {(lb, g): (runs / lb / "logs" / f"{g}-v5__1.log").read_text() for lb, g in published}
    steps = [r["global_step"] for r in res.values()]
    (stop_at, total), = {(r["args"]["stop_at_step"], r["args"]["total_timesteps"]) for r in res.values()}
    assert (f"each stopped at the iteration that crosses {stop_at:,} of {total:,} steps, here at {min(steps):,} to "
            f"{max(steps):,}: each run's `global_step`") in " ".join(text.split())
    for game, (both_named, entry) in entries.items():
        labels = ("ABS", "Vanilla")
        run = {lb: res[lb, game] for lb in labels}
        log = {lb: logs[lb, game] for lb in labels}
        starts, exits = ({lb: log_times(log[lb], w) for lb in labels} for w in ("start", "exit 0"))
        stop = {lb: run[lb]["args"]["stop_at_step"] for lb in labels}
        files = {lb: len(list((runs / lb / f"{game}-v5__1").glob("events.out.tfevents.*"))) for lb in labels}
        resumes = {lb: resumed_at(log[lb]) for lb in labels}
        mid = {lb: [s for s in resumes[lb] if s < stop[lb]] for lb in labels}  # resumed in training, not to evaluate
        sources = {c for lb in labels for c in re.findall(r"^\[sweep\] source: commit (\w{7})", log[lb], re.M)}
        assert sources and all(c in entry for c in sources), (game, sources)
        assert all(f"{s:,}" in entry for lb in labels for s in mid[lb]), game
        assert ("evaluated" in entry) == any(s >= stop[lb] for lb in labels for s in resumes[lb]), game
        for lb, s in re.findall(r"(ABS|Vanilla) (?:at|was stopped once by the end of a session \(its last checkpoint "
                                r"at step) ([\d,]+)", entry):
            assert int(s.replace(",", "")) == mid[lb][-1], (game, lb)
        if m := re.search(r"at step ([\d,]+), before its first checkpoint \(([\d,]+)\)", entry):  # a start lost
            lb = "Vanilla" if "Vanilla started" in entry else "ABS"
            lost = int(re.findall(r"^step (\d+)/", log[lb].split("[sweep]")[2], re.M)[-1])
            assert (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))) == (
                lost, run[lb]["args"]["checkpoint_every"]) and not resumes[lb], game
            assert len(starts[lb]) == 2 == 2 * files[lb] and "its log shows both starts" in entry, game
        subject = labels
        for i, clause in enumerate(re.split(r"(?<=[.;]) ", entry)):
            named = sorted((clause.find(lb), lb) for lb in labels if lb in clause)
            if i == 0 and both_named or re.search(r"^Both\b|\bboth runs\b|\beach in one go\b", clause):
                subject = labels
            elif named:
                subject = (named[0][1],)
            for lb in subject:
                where = (game, lb, clause[:50])
                if "in one go" in clause:
                    assert files[lb] == 1 and not resumes[lb], where
                if "stopped once" in clause:
                    assert files[lb] == 2 and len(mid[lb]) == 1, where
                for w in re.findall(r"\b(one|two|three) event files?\b", clause):
                    assert files[lb] == WORDS[w], where
                if m := re.search(r"chose action (\d+), \w+, on ([\d.]+)%", clause):
                    counts = run[lb]["eval"]["action_counts"]
                    share = 100 * max(counts) / sum(counts)
                    decimals = len(m.group(2).partition(".")[2])
                    assert (counts.index(max(counts)), f"{share:.{decimals}f}") == (int(m.group(1)), m.group(2)), where
                if m := re.search(r"scored exactly (\d+) in each of (?:their|its) (\d+) games", clause):
                    ev = run[lb]["eval"]
                    assert set(ev["returns"]) == {float(m.group(1))} and ev["episodes"] == int(m.group(2)), where
                if m := re.search(r"in each of its \d+ games \(each (\d+) to (\d+) steps\)", clause):
                    lengths = run[lb]["eval"]["lengths"]
                    assert (min(lengths), max(lengths)) == tuple(map(int, m.groups())), where
        if m := re.search(r", (ABS|Vanilla)'s (\d+) or (\d+)\.", entry):
            assert set(run[m.group(1)]["eval"]["returns"]) == {float(m.group(2)), float(m.group(3))}, game
        capped = {lb: run[lb]["eval"]["capped"] for lb in labels}
        if re.search(r"[Nn]o game hit the cap", entry):
            assert capped == {"ABS": 0, "Vanilla": 0}, game
        if m := re.search(r"(\d+) of (ABS|Vanilla)'s (\d+) greedy games hit the", entry):
            assert capped[m.group(2)] == int(m.group(1)) and run[m.group(2)]["eval"]["episodes"] == int(m.group(3))
        if m := re.search(r"; (ABS|Vanilla)'s none", entry):
            assert capped[m.group(1)] == 0, game
        if "Every one of both runs' 100 greedy games hit" in entry:
            assert all(run[lb]["eval"]["capped"] == run[lb]["eval"]["episodes"] == 100 for lb in labels), game
        for cap in re.findall(r"([\d,]+)-step cap", entry):
            assert all(int(cap.replace(",", "")) == run[lb]["args"]["eval_max_episode_steps"] for lb in labels), game
        for lb, s in re.findall(r"(ABS|Vanilla) ([\d,]+) s\b", entry):  # wall seconds
            assert int(s.replace(",", "")) == (exits[lb][-1] - starts[lb][0]).total_seconds(), (game, lb)
        logged = [t for lb in labels for t in starts[lb] + exits[lb]]
        for t in re.findall(r"\b(\d\d:\d\d(?::\d\d)?)\b", entry):
            assert t in {f"{x:%H:%M:%S}"[:len(t)] for x in logged}, (game, t)
        for d in re.findall(r"\b(\d{4}-\d\d-\d\d)\b", entry):
            assert d in {f"{x:%Y-%m-%d}" for x in logged}, (game, d)
        for lb, first, last in re.findall(r"(ABS|Vanilla)(?: ran in one go \(| )(\d\d:\d\d(?::\d\d)?) to "
                                          r"(\d\d:\d\d(?::\d\d)?)", entry):  # its log's first and last lines
            lines = log[lb].strip().splitlines()
            assert lines[0].startswith(f"[sweep] {starts[lb][0]:%Y-%m-%dT%H:%M:%S} start"), (game, lb)
            assert lines[-1] == f"[sweep] {exits[lb][-1]:%Y-%m-%dT%H:%M:%S} exit 0", (game, lb)
            assert (first, last) == (f"{starts[lb][0]:%H:%M:%S}"[:len(first)], f"{exits[lb][-1]:%H:%M:%S}"[:len(last)])
        for lb, t in re.findall(r"(ABS|Vanilla) started at (\d\d:\d\d)", entry):
            assert t == f"{starts[lb][0]:%H:%M}", (game, lb)
        if m := re.search(r"started it again from step 0 at (\d\d:\d\d)", entry):
            assert m.group(1) in {f"{starts[lb][1]:%H:%M}" for lb in labels if len(starts[lb]) > 1}, game
        if "one after the other" in entry:
            first, second = sorted(labels, key=lambda lb: starts[lb][0])
            assert exits[first][-1] <= starts[second][0], game
        if "side by side" in entry:
            assert starts["ABS"][0] == starts["Vanilla"][0], game

    battlezone = next(e for e in items if e.startswith("What BattleZone's evaluation measures"))
    abs_bz, van_bz = res["ABS", "BattleZone"]["eval"], res["Vanilla", "BattleZone"]["eval"]
    m = re.search(r"Vanilla's greedy policy scored (\d+) in every one of its (\d+) games \(each about ([\d,]+) steps\)",
                  battlezone)
    assert set(van_bz["returns"]) == {float(m.group(1))} and van_bz["episodes"] == int(m.group(2))
    assert {round(n, -2) for n in van_bz["lengths"]} == {int(m.group(3).replace(",", ""))}
    md = (here / "report.md").read_text()  # the committed report: test_report_is_regenerated_from_the_committed_runs
    trained = float(report_cell(md, "## Final training return", "BattleZone", "Vanilla", 3))
    assert f"averaged {trained:,.0f} (report.md)" in battlezone
    assert f"(epsilon-greedy, epsilon down to {res['Vanilla', 'BattleZone']['args']['end_e']:g})" in battlezone
    for who, ev in (("Its greedy policy", van_bz), ("ABS's", abs_bz)):
        m = re.search(rf"{who} chose action (\d+), \w+, on ([\d.]+)%", battlezone)
        share = 100 * max(ev["action_counts"]) / sum(ev["action_counts"])
        assert (ev["action_counts"].index(max(ev["action_counts"])), f"{share:.{len(m.group(2).partition('.')[2])}f}"
                ) == (int(m.group(1)), m.group(2)), who
    assert f"and scored {abs_bz['mean']:,.0f}" in battlezone
    refused = logs["Vanilla", "Amidar"].splitlines()
    first, last = map(int, re.search(r"lines (\d+)-(\d+)\)", entries["Amidar"][1]).groups())
    lines = refused[first - 1:last]
    assert re.match(r"\[sweep\] \S+ start", lines[0]) and lines[1].startswith("[sweep] source: commit")
    assert any("is in use by another live run" in ln for ln in lines) and "" in lines
    assert re.match(r"\[sweep\] \S+ exit 2$", lines[-1]) and "is in use by another live run" in entries["Amidar"][1]
