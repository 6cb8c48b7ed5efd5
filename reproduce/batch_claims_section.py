"""The report's "Pre-registered analysis: the batch claims" section, from batch_claims.batch_analysis's numbers alone
(nothing is computed here), worded as docs/results-minatar-batches.md fixes it, with tables.py's formats."""
from __future__ import annotations

from math import comb

import numpy as np

from .batch_claims import (BEATS, INCOMPLETE, LESS, MORE, NONE, UNDEFINED, WAITING, WORSE, BatchAnalysis,
                           ZeroAnalysis)
from .tables import fmt, fmt_p, fmt_pct, fmt_points, md_table, welch_text


def interval(x: tuple) -> str:
    point, lo, hi = x
    return "–" if not np.isfinite(point) else f"{point:.3f} [{lo:.3f}, {hi:.3f}]"


def games_text(games: list) -> str:
    return ", ".join(games) or "none"


def claim_sentence(c, ref: str) -> str:
    b = c.baseline
    if c.decision == INCOMPLETE:
        return f"{ref} against {b}: not decided (some runs are not in)"
    why = (f"P({ref} > {b}) = {interval(c.poi)}; {ref} beats {b} on {len(c.better)} of the games "
           f"({games_text(c.better)}) and is worse on {len(c.worse)} ({games_text(c.worse)})")
    if c.decision == BEATS:
        return f"**{ref} beats {b}**: {why}"
    if c.decision == WORSE:
        return f"**{ref} is worse than {b}**: {why}"
    return f"**no difference could be seen between {ref} and {b}**: {why}"


def batch_claims_section(ba: BatchAnalysis) -> list[str]:
    plan, ref = ba.plan, ba.plan.reference
    m, n = len(ba.tests), len(plan.seeds)
    md = ["## Pre-registered analysis: the batch claims", "",
          f"The analysis fixed before the runs ({plan.source}), applied as written there to the runs of "
          f"{plan.total_timesteps:,} steps. Primary outcome: each run's evaluation return (\"Per-game evaluation "
          f"return\"). Tests: per game and fixed label F ({', '.join(plan.baselines)}), the exact two-sided "
          f"permutation p of the difference of means {ref} − F over all C({2 * n}, {n}) = {comb(2 * n, n):,} splits "
          f"of the game's {2 * n} runs; Holm's adjustment over the {m} tests at alpha = {plan.alpha:g} (until all are "
          f"complete, the Bonferroni bound min(1, {m}p)). Per game: adjusted p < {plan.alpha:g} and a positive "
          f"difference: \"{ref} beats F on GAME\"; negative: \"{ref} is worse than F on GAME\"; otherwise no "
          "difference could be seen.", ""]
    rows = []
    for t in ba.tests:
        d = t.difference
        if not t.complete:
            rows.append([t.game, t.baseline, *["–"] * 5, "incomplete"])
            continue
        rows.append([t.game, t.baseline, fmt(d.diff), welch_text(d), fmt_p(d.p), fmt_p(t.adjusted),
                     f"{t.g:.2f}" if np.isfinite(t.g) else "–",
                     {BEATS: f"{ref} beats {t.baseline}", WORSE: f"{ref} is worse", NONE: "no difference",
                      WAITING: WAITING}[t.decision]])
    md += [md_table(["game", "F", f"{ref} − F", "Welch 95% CI", "permutation p", "adjusted p", "Hedges' g",
                     "decision"], rows), ""]
    done = sum(t.complete for t in ba.tests)
    md.append(f"Adjusted p: Holm's, over the {m} tests (all complete)." if ba.holm else
              f"Adjusted p: {done} of the {m} tests complete (a test is complete once its game's runs are all in), "
              f"so each one's is the Bonferroni bound min(1, {m}p), which decides a test below {plan.alpha:g} "
              f"(Holm's is never above it), as a permutation p at {plan.alpha:g} or above decides no difference "
              f"(Holm's is never below it); the others wait for Holm's, once all {m} are.")
    md += ["", "### Across games", "",
           f"Normalised score: (return − random) / ({plan.normaliser}'s mean − random) per game; random is a "
           "uniformly random policy's mean return (`reproduce/minatar_random.csv`). A game whose "
           f"{plan.normaliser} mean is less than {plan.min_gap:g} above random is left out. The IQM of each label's "
           "normalised scores and rliable's probability of improvement, each with its 95% stratified bootstrap "
           "interval (runs resampled within games; the normaliser held at its estimate).", ""]
    norm_rows = [[g, fmt(ba.random[g]), fmt(ba.normalisers[g]) if g in ba.normalisers else "–",
                  "left out" if g in ba.left_out else ("used" if g in ba.normalisers else "–")] for g in plan.tasks]
    md += [md_table(["game", "random", f"{plan.normaliser} mean", "aggregate"], norm_rows), ""]
    if ba.iqm:
        md += [md_table(["label", "IQM of the normalised score [95% CI]"],
                        [[lb, interval(v)] for lb, v in ba.iqm.items()]), ""]
    else:
        md += ["The aggregates wait for every run of the grid.", ""]
    md += ["Decision, per claim (the page's rule: the interval of P(ABS > F) wholly above 0.5 and no game worse: "
           "ABS beats F; wholly below 0.5, or worse on a game and better on none: ABS is worse than F; otherwise no "
           "difference could be seen):", "", *(f"- {claim_sentence(c, ref)}." for c in ba.claims), ""]
    return md + (zero_section(ba.zeros) if ba.zeros else [])


def shares_text(x) -> str:
    """A batch_claims.Spread of shares in %: "21.0% (5.0-43.0%, 5 runs)"."""
    if x is None:
        return "–"
    return (f"{fmt_pct(100 * x.mean)} ({100 * x.lowest:.1f}-{100 * x.highest:.1f}%, "
            f"{x.runs} run{'s' * (x.runs != 1)})")


def zero_decision(t, check) -> str:
    """A ZeroTest's decision in the words of the check's rule."""
    ref, game = check.reference, check.game
    return {MORE: f"{t.label}'s training games end at 0 more often than {ref}'s on {game}",
            LESS: f"{t.label}'s training games end at 0 less often than {ref}'s on {game}",
            NONE: "no difference could be seen", INCOMPLETE: "waits for the held-out seeds",
            UNDEFINED: f"cannot be decided: no share for {', '.join(t.no_share)}"}[t.decision]


def zero_section(z: ZeroAnalysis) -> list[str]:
    """The check added during the runs (batch_claims.ZeroCheck): each label's shares, and its tests."""
    c, n = z.check, len(z.check.seeds)
    seeds, seen = f"{c.seeds[0]}-{c.seeds[-1]}", f"{c.seen[0]}-{c.seen[-1]}"
    md = ["### A check added during the runs: training games at 0", "",
          f"Added during the runs ({c.source}), from what seeds {seen} of {c.game} showed, and tested on seeds "
          f"{seeds} alone: each run's share of its training games that end after step {c.after:,} with a return of "
          f"0. {' and '.join(c.tested)}, each against {c.reference}: the difference of the mean shares over seeds "
          f"{seeds}, its exact two-sided permutation p over all C({2 * n}, {n}) = {comb(2 * n, n):,} splits, Holm's "
          f"adjustment over the {len(z.tests)} tests at alpha = {c.alpha:g}; tested once the held-out runs of "
          f"{', '.join((c.reference, *c.tested))} are all in. Seeds {seen} suggested the check: described, not "
          "tested.", ""]
    order = [c.reference, *c.tested, *sorted(lb for lb in z.spread if lb not in (c.reference, *c.tested))]
    rows = [[lb, shares_text(z.spread[lb]["seen"]), shares_text(z.spread[lb]["held"])] for lb in order
            if lb in z.spread]
    md += [md_table(["label", f"share at 0, seeds {seen} (described)", f"share at 0, seeds {seeds} (tested)"], rows),
           ""]
    md += [md_table(["label", f"− {c.reference} (percentage points)", "permutation p", "Holm's p", "decision"],
                    [[t.label, fmt_points(100 * t.diff), fmt_p(t.p), fmt_p(t.adjusted), zero_decision(t, c)]
                     for t in z.tests]), ""]
    return md
