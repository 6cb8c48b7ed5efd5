"""The report's "Pre-registered analysis" section, from measures.preregistered's numbers alone (nothing is computed
here), worded as the analysis's page fixes it (docs/results-mujoco-5m.md, "The analysis, fixed before seeds 4-10
ran": measures.MUJOCO_5M), with tables.py's formats.
"""
from __future__ import annotations

from math import comb

import numpy as np

from .measures import Preregistered, TaskTest
from .tables import fmt, fmt_p, fmt_pct, md_table, welch_text


def seed_list(seeds) -> str:
    return ", ".join(map(str, seeds)) or "none"


def decision(t: TaskTest, a: str, b: str, steps: str, plan_seeds: tuple) -> str:
    """The task's sentence of the page's "Decision, per task" rule; an incomplete task's finished seeds."""
    if not t.complete:
        outside = sorted({s for arm in t.seeds for s in arm} - set(plan_seeds))
        what = (f"not the pre-registered sample (seeds outside {plan_seeds[0]}-{plan_seeds[-1]}: {seed_list(outside)})"
                if outside else "incomplete")
        return (f"{what}: {len(t.seeds[0])} vs {len(t.seeds[1])} runs, finished seeds {a}: {seed_list(t.seeds[0])}; "
                f"{b}: {seed_list(t.seeds[1])}; no test")
    d = t.primary
    if t.decision in ("raises", "lowers"):
        return f"{a} {t.decision} {t.task}'s {steps} evaluation return by {fmt(d.diff)} [{fmt(d.lo)}, {fmt(d.hi)}]"
    return f"no difference was resolved; a difference outside {welch_text(d)} is unlikely"


def preregistered_section(pr: Preregistered) -> list[str]:
    plan, (a, b) = pr.plan, pr.plan.pair
    m, n, steps = len(plan.tasks), len(plan.seeds), f"{plan.total_timesteps / 1e6:g}M"
    seeds = f"{plan.seeds[0]}-{plan.seeds[-1]}"
    md = ["## Pre-registered analysis", "",
          f"The analysis fixed before these runs were complete ({plan.source}), applied as it is written there to "
          f"the runs of {plan.total_timesteps:,} steps. "
          f"Sample: per task ({', '.join(plan.tasks)}), seeds {seeds} of {a} and of {b}; a task is analysed when all "
          f"{2 * n} of its runs are in, and a task with fewer is reported as incomplete, with its finished seeds and "
          "no test. Primary outcome: each run's evaluation return (\"Per-game evaluation return\"). Test: the exact "
          f"two-sided permutation p of the difference of means, {a} − {b}, over all C({2 * n}, {n}) = "
          f"{comb(2 * n, n):,} splits of a task's {2 * n} runs into two groups of {n}. Family-wise error over the "
          f"{m} tasks: Holm's step-down adjustment, alpha = {plan.alpha:g}; until all {m} tasks are complete, a "
          f"finished task's adjusted p is given as the Bonferroni bound min(1, {m}p), which is never below its "
          "Holm-adjusted p. Effect size: the difference of the means with Welch's 95% interval (Welch–Satterthwaite "
          f"df), unadjusted; also as a share of {b}'s mean, and as Hedges' g (the difference over the pooled "
          f"standard deviation, times 1 − 3 / (4 (n_A + n_B) − 9)), point values only. Decision, per task: adjusted "
          f"p < {plan.alpha:g}: \"{a} raises (or lowers) TASK's {steps} evaluation return by D [lo, hi]\" (D: "
          f"{a} − {b}, with Welch's 95% interval); otherwise \"no difference was resolved; a difference outside "
          "[lo, hi] is unlikely\" (Welch's 95% interval), and no direction is claimed.", ""]
    rows = []
    for t in pr.tasks:
        d = t.primary
        runs = f"{len(t.seeds[0])} vs {len(t.seeds[1])}"
        if not t.complete:
            rows.append([t.task, runs, *["–"] * 6, "incomplete"])
            continue
        rows.append([t.task, runs, fmt(d.diff), welch_text(d), fmt_p(d.p) + ("" if d.exact else " (sampled)"),
                     fmt_p(t.adjusted), fmt_pct(t.percent), f"{t.g:.2f}" if np.isfinite(t.g) else "–",
                     t.decision])
    md += [md_table(["task", f"runs ({a} vs {b})", f"{a} − {b}", "Welch 95% CI", "permutation p", "adjusted p",
                     f"% of {b}'s mean", "Hedges' g", "decision"], rows), ""]
    done = sum(t.complete for t in pr.tasks)
    md.append(f"Adjusted p: Holm's, over the {m} tasks (all complete)." if pr.holm else
              f"Adjusted p: {done} of the {m} tasks complete, so each complete task's is the Bonferroni bound "
              f"min(1, {m}p); Holm's once all {m} are." if done else
              f"Adjusted p: no task is complete; a complete task's will be the Bonferroni bound min(1, {m}p) until "
              f"all {m} are, then Holm's.")
    md += ["", "Decision, per task:", *(f"- {t.task}: {decision(t, a, b, steps, plan.seeds)}." for t in pr.tasks)]
    if pr.others:
        md.append(f"- Not in this analysis: {', '.join(pr.others)} (not one of its tasks).")
    md += ["", "### Secondary outcomes (no correction)", "",
           "Reported per complete task with the same statistics (the difference, Welch's 95% interval, the exact "
           "permutation p) and no correction, as description, not as tests of the claim: the training return (each "
           f"run's mean over its last {pr.last_games} training episodes, \"Final training return\"); the whole-run "
           "return (the area under its training curve per step); the early return (its mean training return over "
           "the first 10% of steps); the late variance (the population variance of its training return over the "
           "last 10% of steps: the paper's \"stable learning\" claim, whose direction is a lower variance with "
           "ABS). Their per-seed values are in the sections below.", ""]
    rows = [[t.task, name, *(["no data", *["–"] * 3] if d is None else
                             [f"{d.na} vs {d.nb}", fmt(d.diff), welch_text(d),
                              fmt_p(d.p) + ("" if d.exact else " (sampled)")])]
            for t in pr.tasks if t.complete for name, d in t.secondary.items()]
    md += [md_table(["task", "outcome", "runs", f"{a} − {b}", "Welch 95% CI", "permutation p"], rows)
           if rows else "No task is complete: none is reported."]
    return md + [""]
