"""List the numbers docs/results-mujoco-5m.md's text quotes, each with where it comes from, and check the page.

    python -m reproduce.mujoco_page           # print them: "[page section] what: the words the page says"
    python -m reproduce.mujoco_page --check   # exit 1, listing what the page does not say, if any

The page's per-task tables are the report's cells (tests/test_results.py compares them); its text quotes numbers
that the report does not print in that form: per task with all 20 runs in, the seeds' standard deviation, the
interval as a share of PPO's mean, what seeds 1-3 (with Hedges' g) and seeds 4-10 gave alone, the pairs of runs in
which PPO + ABS is the higher, and on HalfCheetah how many runs of each arm find the fast gait; the schedule per
task (the table `schedule_table` prints); the divergence counts and the burn-in of the report; and the machine time.
Every number is the report's own, measured with it and read by name from its report.json (report_data.py; quoted.py
measures what the report's tables do not state): this file only words them. Each is printed as the words the page
says, with the page section it must be in.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from .cli import Parser
from .report_data import difference, read_data
from .tables import fmt, fmt_p, welch_text

ROOT = Path(__file__).resolve().parents[1]
ABS, PPO = "PPO+ABS", "PPO"
TASKS = ("Walker2d", "Hopper", "HalfCheetah")  # the pre-registered order
VERDICT, TOGETHER, MACHINE = ("## Verdict against the paper's Figure 7", "## What 1M and 5M say together",
                              "## Machine time")


def task_heading(task: str) -> str:
    return f"## {task}-v4, seeds 1-10: the pre-registered test"


def section(md: str, heading: str) -> str:
    """The text from `heading` to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    return re.split(rf"\n#{{1,{len(level)}}} ", md.split(heading, 1)[1], maxsplit=1)[0]


def complete_tasks(data: dict) -> list[str]:
    """The tasks the report's pre-registered analysis tests (all 20 runs in), in its order."""
    return [t for t in TASKS if data["preregistered"]["tasks"][t]["complete"]]


def signed(x: float) -> str:
    return f"{x:+.0f}"


def mean(data: dict, metric: str, task: str, label: str) -> float:
    return data[metric]["seeds"][task][label]["mean"]


def task_facts(data: dict, task: str) -> list[tuple[str, str, str]]:
    """(section, what, words) for a task the pre-registered analysis tests."""
    split, test = data["quoted"]["split"][task], data["preregistered"]["tasks"][task]
    primary = difference(test["primary"])
    ppo = mean(data, "evaluation", task, PPO)
    here, out = task_heading(task), []
    out.append((here, "seed-to-seed standard deviation (ddof 1)",
                f"the seed-to-seed standard deviation within an arm is {split['std'][ABS]:.0f} (PPO + ABS) and "
                f"{split['std'][PPO]:.0f} (PPO)"))
    share = f"{split['share']['lo']:+.0f}% to {split['share']['hi']:+.0f}%"
    out.append((here, "Welch's interval, and as a share of PPO's mean",
                f"between {signed(primary.lo)} and {signed(primary.hi)} (about {share} of PPO's {ppo:.0f})"))
    first, later = split["before"], split["after"]
    out.append((here, "seeds 1-3 alone (Welch 95%, exact permutation p)",
                f"Seeds 1-3 gave {signed(first['diff'])} [{first['lo']:.0f}, {first['hi']:.0f}] "
                f"(p = {first['p']:.2f})"))
    out.append((here, "seeds 1-3 alone, Hedges' g", f"(Hedges' g {first['g']:.2f})"))
    out.append((here, "seeds 4-10 alone", f"Seeds 4-10 alone give {signed(later['diff'])}"))
    out.append((here, "equal-seed pairs of seeds 4-10",
                f"Of the seven pairs of equal seeds 4-10, PPO + ABS's run is the higher in {later['higher']}"))
    out.append((here, "pairs of one run from each arm",
                f"PPO + ABS's run is above PPO's in {split['above']} of the {split['pairs']} pairs"))
    if task == "HalfCheetah":  # bimodal: the mean difference is a difference in how many runs find the fast gait
        g, runs = split["groups"], {lb: len(seeds) for lb, seeds in test["seeds"].items()}
        rest = {lb: f"between {r['lowest']:.0f} and {r['highest']:.0f}" for lb, r in g["rest"].items()}
        out.append((here, f"runs that end above {g['threshold']:.0f}, the range of the rest, the medians",
                    f"{g['above'][ABS]} of the {runs[ABS]} PPO + ABS runs and {g['above'][PPO]} of the {runs[PPO]} "
                    f"PPO runs end above {g['threshold']:.0f}; the others end {rest[ABS]} (PPO + ABS) and {rest[PPO]} "
                    f"(PPO). The medians are {g['median'][ABS]:.0f} (PPO + ABS) and {g['median'][PPO]:.0f} (PPO)"))
    first_late = [split["late_before"][lb] / 1e6 for lb in (ABS, PPO)]
    out.append((here, "late variance, seeds 1-3 (report, Late variance)",
                f"three seeds had shown {first_late[0]:.2f}M against {first_late[1]:.2f}M"))
    secondary = {name: difference(d) for name, d in test["secondary"].items()}
    ten = [mean(data, "late", task, lb) / 1e6 for lb in (ABS, PPO)]
    p_late = fmt_p(secondary["late variance"].p)
    out.append((here, "late variance, seeds 1-10 (report)", f"{ten[0]:.2f}M against {ten[1]:.2f}M return², "
                                                            f"p = {p_late}"))
    holm = data["preregistered"]["holm"]
    out.append((here, "the adjustment (report)", "the adjusted p is Holm's over the three tasks" if holm else
                "the adjusted p is the Bonferroni bound min(1, 3p) while"))
    out.append((VERDICT, f"{task}: the primary outcome (report)", f"{fmt(primary.diff)} {welch_text(primary)} "
                f"(adjusted p = {fmt_p(test['adjusted'])}, {'Holm' if holm else 'the Bonferroni bound on Holm'}'s)"))
    early = [mean(data, "early", task, lb) for lb in (ABS, PPO)]
    p_early = fmt_p(secondary["early return"].p)
    out.append((VERDICT, f"{task}: early return (report)", f"{task} {early[0]:.0f} vs {early[1]:.0f} (p = {p_early})"))
    out.append((VERDICT, f"{task}: late variance (report)", f"{ten[0]:.2f}M vs {ten[1]:.2f}M (p = {p_late})"))
    return out


def schedule_table(data: dict) -> tuple[list[str], str]:
    """The page's schedule table, and its sentence on delta_high. Per task, over the PPO+ABS runs (quoted.schedule,
    from the report's figure data, 50 step bins, and the runs' `adapt/kl` events): the KL's highest mean and the
    highest run in that bin; L's highest mean before that bin, its lowest mean from that bin on and the lowest run
    there, and its last bin; the highest single measurement."""
    header = ("task", "PPO + ABS runs", "KL: highest mean (bin)", "highest run there",
              "highest single measurement (seed)", "L: highest mean before the KL's peak (bin)",
              "lowest mean from that peak on (bin)", "lowest run there", "last bin: mean (runs)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    above = {"mean": [], "single": []}  # the tasks where the KL passes delta_high (the grid's --kl-high)
    schedules = data["quoted"]["schedule"]
    for task in sorted(schedules):
        s = schedules[task][ABS]
        peak, highest, before, low, last = (s[k] for k in ("peak", "highest", "before", "low", "last"))
        above["mean"] += [task] * int(peak["mean"] > s["high"])
        above["single"] += [task] * int(highest["value"] > s["high"])
        cells = (task, s["runs"], f"{peak['mean']:.3f} ({peak['step'] / 1e6:.2f}M)", f"{peak['highest']:.3f}",
                 f"{highest['value']:.2f} ({highest['seed']})", f"{before['mean']:.0f} ({before['step'] / 1e6:.2f}M)",
                 f"{low['mean']:.0f} ({low['step'] / 1e6:.2f}M)", f"{low['lowest']:.0f}",
                 f"{last['mean']:.0f} ({last['lowest']:.0f}-{last['highest']:.0f})")
        lines.append("| " + " | ".join(map(str, cells)) + " |")

    def tasks(names):
        return "all three tasks" if len(names) == 3 else " and ".join(names) or "no task"
    highs = {f"{s[ABS]['high']:g}" for s in schedules.values()}
    said = f"above delta_high = {'/'.join(sorted(highs))} in the mean of {tasks(above['mean'])} and in single " \
           f"measurements of {tasks(above['single'])}"
    return lines, said


def facts(data: dict) -> list[tuple[str, str, str]]:
    """(page section, what, the words the page says) for every number its text takes from the report's data."""
    out = [f for task in complete_tasks(data) for f in task_facts(data, task)]
    table, high = schedule_table(data)
    out += [(TOGETHER, "schedule table", line) for line in table]
    out.append((TOGETHER, "the KL above delta_high (the report's figure data, events)", high))
    c = data["trend_counts"][ABS]
    out += [(TOGETHER, "divergence, lower at the end (report)",
             f"lower in the last tenth than in the first in {c['lower']} of {c['both']} runs"),
            (TOGETHER, "divergence, rank correlation (report)",
             f"ρ < 0 in {c['falling']} of {c['ranked']}, median ρ {c['median_rho']:+.2f}")]
    burn = data["burn_in_summary"][ABS]["share"]["mean"]
    first = data["burn_in"][TASKS[0]][ABS]
    ends = first[min(first, key=int)]["end"]
    out.append((TOGETHER, "burn-in (report)", f"{100 * burn:.1f}% of the early window at 5M ({ends:,.0f} of 500,000 "
                                              "steps)"))
    times, total = data["machine_time"], data["quoted"]["machine"]
    low = min(times[lb]["sps"]["lowest"] for lb in (ABS, PPO))
    high = max(times[lb]["sps"]["highest"] for lb in (ABS, PPO))
    out += [(MACHINE, "speed (report, Machine time)", f"at {low:,.0f} to {high:,.0f} environment steps per second"),
            (MACHINE, "minutes per run (train_seconds)",
             f"A run took {total['minutes']['lowest']:.0f} to {total['minutes']['highest']:.0f} minutes of training"),
            (MACHINE, "hours in all (train_seconds)",
             f"the {total['timed']} runs took {total['hours']:.1f} hours of training"),
            (MACHINE, "runs with more than one event file", f"{total['restarted']} runs were stopped")]
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
                   help="the published grid: its report.json (the report's numbers as data)")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "results-mujoco-5m.md", help="the page to check")
    p.add_argument("--check", action="store_true", help="print only what the page does not say; exit 1 if any")
    a = p.parse_args(argv)
    for path in (a.results / "report.json", a.page):
        if not path.is_file():
            p.error(f"{path} is not a file")
    try:
        listed = facts(read_data(a.results / "report.json"))
    except (KeyError, TypeError, ValueError) as e:
        p.error(f"{a.results} is not the mujoco-5m grid this page reads (its report.json): {type(e).__name__}: {e}")
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
