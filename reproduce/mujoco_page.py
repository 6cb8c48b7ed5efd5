"""List the numbers docs/results-mujoco-5m.md's text quotes, each with where it comes from, and check the page.

    python -m reproduce.mujoco_page           # print them: "[page section] what: the words the page says"
    python -m reproduce.mujoco_page --check   # exit 1, listing what the page does not say, if any

The page's per-task tables are the report's cells (tests/test_results.py compares them); its text quotes numbers
that the report does not print in that form: per task with all 20 runs in, the seeds' standard deviation, the
interval as a share of PPO's mean, what seeds 1-3 (with Hedges' g) and seeds 4-10 gave alone, the pairs of runs in
which PPO + ABS is the higher, and on HalfCheetah how many runs of each arm find the fast gait; the schedule per
task (the table `schedule_table` prints, from adapt_by_game.csv and the runs' `adapt/kl` events); the divergence
counts and the burn-in of the report; and the machine time of the runs' eval_results.json.
Each is printed as the words the page says, with the page section it must be in.
"""
from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import numpy as np

from .cli import Parser
from .events import load_scalars  # (the report's reader of TensorBoard events)
from .stats import hedges_g, permutation_p, welch_interval

ROOT = Path(__file__).resolve().parents[1]
ABS, PPO = "PPO+ABS", "PPO"
TASKS = ("Walker2d", "Hopper", "HalfCheetah")  # the pre-registered order
FIRST, LATER = (1, 2, 3), (4, 5, 6, 7, 8, 9, 10)  # the published seeds, then the extension's
FAST = 4000  # HalfCheetah's evaluation returns fall into two groups: the fast gait above this, the rest near 2000
VERDICT, TOGETHER, MACHINE = ("## Verdict against the paper's Figure 7", "## What 1M and 5M say together",
                              "## Machine time")


def task_heading(task: str) -> str:
    return f"## {task}-v4, seeds 1-10: the pre-registered test"


def section(md: str, heading: str) -> str:
    """The text from `heading` to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    return re.split(rf"\n#{{1,{len(level)}}} ", md.split(heading, 1)[1], maxsplit=1)[0]


def row(md: str, heading: str, first: str) -> list[str]:
    """The cells of the row that starts with the cells `first` ("Hopper | PPO") in the table under `heading`."""
    line = next(ln for ln in section(md, heading).splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip().strip("*") for c in line.strip("| ").split(" | ")]


def per_seed(cell: str) -> dict[int, float]:
    """A report cell "1: 3.5, 2: 4.0" as {seed: value}."""
    return {int(s): float(v) for s, v in (p.split(": ") for p in cell.split(", "))}


def complete_tasks(md: str) -> list[str]:
    """The tasks the report's pre-registered analysis tests (all 20 runs in), in its order."""
    return [t for t in TASKS if row(md, "## Pre-registered analysis", t)[-1] != "incomplete"]


def evaluation(results: Path, label: str, task: str) -> dict[int, float]:
    """{seed: the run's 100-episode evaluation mean} of every published run of `label` on `task`."""
    out = {}
    for path in (results / "runs" / "mujoco" / label).glob(f"{task}-v4__*/eval_results.json"):
        out[int(path.parent.name.rsplit("__", 1)[1])] = json.loads(path.read_text())["eval"]["mean"]
    return dict(sorted(out.items()))


def signed(x: float) -> str:
    return f"{x:+.0f}"


def task_facts(md: str, results: Path, task: str) -> list[tuple[str, str, str]]:
    """(section, what, words) for a task the pre-registered analysis tests."""
    a, b = evaluation(results, ABS, task), evaluation(results, PPO, task)
    xa, xb = np.array(list(a.values())), np.array(list(b.values()))
    _, lo, hi, _ = welch_interval(xa, xb)  # the report's interval, unrounded
    here, out = task_heading(task), []
    out.append((here, "seed-to-seed standard deviation (ddof 1)",
                f"the seed-to-seed standard deviation within an arm is {xa.std(ddof=1):.0f} (PPO + ABS) and "
                f"{xb.std(ddof=1):.0f} (PPO)"))
    share = f"{100 * lo / xb.mean():+.0f}% to {100 * hi / xb.mean():+.0f}%"
    out.append((here, "Welch's interval, and as a share of PPO's mean",
                f"between {signed(lo)} and {signed(hi)} (about {share} of PPO's {xb.mean():.0f})"))
    a3, b3 = [a[s] for s in FIRST], [b[s] for s in FIRST]
    d, d_lo, d_hi, _ = welch_interval(a3, b3)
    out.append((here, "seeds 1-3 alone (Welch 95%, exact permutation p)",
                f"Seeds 1-3 gave {signed(d)} [{d_lo:.0f}, {d_hi:.0f}] (p = {permutation_p(a3, b3)[0]:.2f})"))
    out.append((here, "seeds 1-3 alone, Hedges' g", f"(Hedges' g {hedges_g(a3, b3):.2f})"))
    later = np.mean([a[s] for s in LATER]) - np.mean([b[s] for s in LATER])
    out.append((here, "seeds 4-10 alone", f"Seeds 4-10 alone give {signed(later)}"))
    higher = sum(a[s] > b[s] for s in LATER)
    out.append((here, "equal-seed pairs of seeds 4-10",
                f"Of the seven pairs of equal seeds 4-10, PPO + ABS's run is the higher in {higher}"))
    above = int((xa[:, None] > xb[None, :]).sum())
    out.append((here, "pairs of one run from each arm",
                f"PPO + ABS's run is above PPO's in {above} of the {xa.size * xb.size} pairs"))
    if task == "HalfCheetah":  # bimodal: the mean difference is a difference in how many runs find the fast gait
        fast = [int((x > FAST).sum()) for x in (xa, xb)]
        rest = [x[x <= FAST] for x in (xa, xb)]
        out.append((here, f"runs that end above {FAST}, the range of the rest, the medians",
                    f"{fast[0]} of the {xa.size} PPO + ABS runs and {fast[1]} of the {xb.size} PPO runs end above "
                    f"{FAST}; the others end between {rest[0].min():.0f} and {rest[0].max():.0f} (PPO + ABS) and "
                    f"between {rest[1].min():.0f} and {rest[1].max():.0f} (PPO). The medians are "
                    f"{np.median(xa):.0f} (PPO + ABS) and {np.median(xb):.0f} (PPO)"))
    late = {lb: per_seed(row(md, "### Late variance", f"{task} | {lb}")[2]) for lb in (ABS, PPO)}
    first = [np.mean([late[lb][s] for s in FIRST]) / 1e6 for lb in (ABS, PPO)]
    out.append((here, "late variance, seeds 1-3 (report, Late variance)",
                f"three seeds had shown {first[0]:.2f}M against {first[1]:.2f}M"))
    ten = [float(row(md, "### Late variance", f"{task} | {lb}")[3]) / 1e6 for lb in (ABS, PPO)]
    p_late = row(md, "### Secondary outcomes", f"{task} | late variance")[5]
    out.append((here, "late variance, seeds 1-10 (report)", f"{ten[0]:.2f}M against {ten[1]:.2f}M return², "
                                                            f"p = {p_late}"))
    holm = "Adjusted p: Holm's" in section(md, "## Pre-registered analysis")
    out.append((here, "the adjustment (report)", "the adjusted p is Holm's over the three tasks" if holm else
                "the adjusted p is the Bonferroni bound min(1, 3p) while"))
    primary = row(md, "## Pre-registered analysis", task)
    out.append((VERDICT, f"{task}: the primary outcome (report)", f"{primary[2]} {primary[3]} (adjusted p = "
                f"{primary[5]}, {'Holm' if holm else 'the Bonferroni bound on Holm'}'s)"))
    early = [float(row(md, "### Early return", f"{task} | {lb}")[3]) for lb in (ABS, PPO)]
    p_early = row(md, "### Secondary outcomes", f"{task} | early return")[5]
    out.append((VERDICT, f"{task}: early return (report)", f"{task} {early[0]:.0f} vs {early[1]:.0f} (p = {p_early})"))
    out.append((VERDICT, f"{task}: late variance (report)", f"{ten[0]:.2f}M vs {ten[1]:.2f}M (p = {p_late})"))
    return out


def schedule_table(results: Path) -> tuple[list[str], str]:
    """The page's schedule table, and its sentence on delta_high. Per task, from adapt_by_game.csv (per step bin, 50
    over the run: the mean over the PPO+ABS runs, the lowest and the highest run): the KL's highest mean and the
    highest run in that bin; L's highest mean before that bin, its lowest mean from that bin on and the lowest run
    there, and its last bin; from the runs' `adapt/kl` events, the highest single measurement."""
    bins: dict = {}
    with open(results / "adapt_by_game.csv") as f:
        for r in csv.DictReader(f):
            bins.setdefault((r["game"], r["tag"]), []).append(
                (float(r["step"]), float(r["mean"]), float(r["min"]), float(r["max"]), int(r["n_runs"])))
    header = ("task", "PPO + ABS runs", "KL: highest mean (bin)", "highest run there",
              "highest single measurement (seed)", "L: highest mean before the KL's peak (bin)",
              "lowest mean from that peak on (bin)", "lowest run there", "last bin: mean (runs)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    above = {"mean": [], "single": []}  # the tasks where the KL passes delta_high = 0.1 (the grid's --kl-high)
    for task in sorted({g for g, _ in bins}):
        kl, size = bins[(task, "adapt/kl")], bins[(task, "adapt/num_steps")]
        top = max(kl, key=lambda b: b[1])
        peak = kl.index(top)
        before = max(size[:peak], key=lambda b: b[1])  # the plateau the KL's rise pulls L down from
        low = min(range(peak, len(size)), key=lambda i: size[i][1])
        single = []
        for run in sorted((results / "runs" / "mujoco" / ABS).glob(f"{task}-v4__*")):
            _, values = load_scalars(run, ("adapt/kl",))["adapt/kl"]
            single.append((max(values), int(run.name.rsplit("__", 1)[1])))
        highest, seed = max(single)
        above["mean"] += [task] * int(top[1] > 0.1)
        above["single"] += [task] * int(highest > 0.1)
        last = size[-1]
        cells = (task, top[4], f"{top[1]:.3f} ({top[0] / 1e6:.2f}M)", f"{top[3]:.3f}", f"{highest:.2f} ({seed})",
                 f"{before[1]:.0f} ({before[0] / 1e6:.2f}M)", f"{size[low][1]:.0f} ({size[low][0] / 1e6:.2f}M)",
                 f"{size[low][2]:.0f}", f"{last[1]:.0f} ({last[2]:.0f}-{last[3]:.0f})")
        lines.append("| " + " | ".join(map(str, cells)) + " |")

    def tasks(names):
        return "all three tasks" if len(names) == 3 else " and ".join(names) or "no task"
    said = f"above delta_high = 0.1 in the mean of {tasks(above['mean'])} and in single measurements of " \
           f"{tasks(above['single'])}"
    return lines, said


def facts(md: str, results: Path) -> list[tuple[str, str, str]]:
    """(page section, what, the words the page says) for every number its text takes from the runs."""
    out = [f for task in complete_tasks(md) for f in task_facts(md, results, task)]
    table, high = schedule_table(results)
    out += [(TOGETHER, "schedule table", line) for line in table]
    out.append((TOGETHER, "the KL above delta_high (adapt_by_game.csv, events)", high))
    trend = next(ln for ln in section(md, "## Divergence over training").splitlines() if ln.startswith(f"- {ABS}: "))
    lower, count, median = re.search(r"(lower in the last tenth than in the first in \d+ of \d+ runs); "
                                     r"(ρ < 0 in \d+ of \d+) \((median ρ \S+)\)", trend).groups()
    out += [(TOGETHER, "divergence, lower at the end (report)", lower),
            (TOGETHER, "divergence, rank correlation (report)", f"{count}, {median}")]
    share = re.search(r"on average (\d+\.\d%) of the early window", section(md, "### Burn-in in the early window"))
    ends = row(md, "### Burn-in in the early window", f"{TASKS[0]} | {ABS}")[4].split(", ")[0].split(": ")[1]
    out.append((TOGETHER, "burn-in (report)", f"{share.group(1)} of the early window at 5M ({ends} of 500,000 steps)"))
    seconds, started = [], 0
    for path in sorted((results / "runs" / "mujoco").glob("*/*__*/eval_results.json")):
        seconds.append(json.loads(path.read_text())["train_seconds"])
        started += len(list(path.parent.glob("events.out.tfevents.*"))) > 1
    sps = [row(md, MACHINE, lb)[4].replace(",", "").split("–") for lb in (ABS, PPO)]
    low, high = min(int(s[0]) for s in sps), max(int(s[1]) for s in sps)
    out += [(MACHINE, "speed (report, Machine time)", f"at {low:,} to {high:,} environment steps per second"),
            (MACHINE, "minutes per run (train_seconds)",
             f"A run took {min(seconds) / 60:.0f} to {max(seconds) / 60:.0f} minutes of training"),
            (MACHINE, "hours in all (train_seconds)",
             f"the {len(seconds)} runs took {sum(seconds) / 3600:.1f} hours of training"),
            (MACHINE, "runs with more than one event file", f"{started} runs were stopped")]
    return out


def missing(page: str, listed) -> list[tuple[str, str, str]]:
    """The facts whose words the page's section does not say (line breaks and runs of spaces read as one space)."""
    def flat(text):
        return " ".join(text.split())
    return [(where, what, said) for where, what, said in listed
            if where not in page or flat(said) not in flat(section(page, where))]


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0], name="mujoco_page.py")
    p.add_argument("--results", type=Path, default=ROOT / "results" / "mujoco-5m",
                   help="the published grid: its report.md, adapt_by_game.csv and runs/")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "results-mujoco-5m.md", help="the page to check")
    p.add_argument("--check", action="store_true", help="print only what the page does not say; exit 1 if any")
    a = p.parse_args(argv)
    for path in (a.results / "report.md", a.results / "adapt_by_game.csv", a.page):
        if not path.is_file():
            p.error(f"{path} is not a file")
    try:
        listed = facts((a.results / "report.md").read_text(), a.results)
    except (IndexError, KeyError, StopIteration, AttributeError, ValueError, FileNotFoundError) as e:
        p.error(f"{a.results} is not the mujoco-5m grid this page reads (its report and runs): "
                f"{type(e).__name__}: {e}")
    if a.check:
        absent = missing(a.page.read_text(), listed)
        for where, what, said in absent:
            print(f"{a.page} does not say, in '{where}': {said}  ({what})")
        return 1 if absent else 0
    for where, what, said in listed:
        print(f"[{where.lstrip('# ')}] {what}: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
