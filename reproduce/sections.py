"""The report's sections, from what measures.py and stats.py computed (nothing is computed here), built of
tables.py's formats and tables. Every per-seed metric (the evaluation return, the final training return, the early
return, the late variance, the whole-run return) gets its section from one builder, metric_section, of its
stats.Compared: per-seed values with their mean and Student-t interval, the best-of-all and pairwise counts, and
the differences of each compared pair (Welch's interval, the exact permutation p).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .measures import AGGREGATES, NEAR_CONSTANT_SHARE, runs_of
from .runs import RETURN_TAG, reached
from .stats import IQM_TRIMS_FROM, Compared
from .tables import (PER_SEED_HOW, Frame, best_count_line, differences, fmt, fmt_pct, md_table, pairwise_lines,
                    seed_table)


@dataclass
class Metric:
    """One per-seed metric's section (metric_section): its values compared (stats.compare) and its wording."""
    title: str
    what: str  # what one value is: "Each run's ..."
    compared: Compared
    word: str = "higher"  # the pairwise count's "A {word} in k of N games"
    std: bool = False  # a population-std column (the spread CleanRL's published results give)
    left_out: list = field(default_factory=list)  # lines naming the runs left out of it
    sub: bool = False  # a subsection of "Early / late training" (its heading level and wording; its best counts
    # are over the games every label has values for, the other metrics' over the games every label ran)
    not_reached: dict = field(default_factory=dict)  # (game, label) -> seeds of prefix runs that stopped before it


class EarlyLate(NamedTuple):
    """What "Early / late training" states, measured before it is written (report.py)."""
    early: Compared
    late: Compared
    area: Compared  # the whole-run return
    not_reached: dict  # metric -> {(game, label): seeds} (measures.not_reached)
    early_hns: Compared  # the early return as HNS, on the Atari games
    early_agg: dict  # its aggregates across games (measures.aggregate_values)
    early_agg_notes: list
    burn: dict  # measures.burn_in's
    burn_notes: list
    burn_rows: dict  # (game, label) -> mean share at L_min (measures.burn_summary)
    burn_labels: dict  # label -> measures.BurnSummary


# ----------------------------------------------------------------------------- sections
def data_section(f: Frame, notes, roots, capped=((), ()), constant=()) -> list[str]:
    data, games = f.data, f.games
    rows = [[lb, f"`{roots[lb]}`", str(sum(len(s) for s in d.values())), f"{len(d)} of {len(games)}",
             ", ".join(f"{g}: {len(d[g])}" for g in games if g in d) or "–",
             ", ".join(g for g in games if g not in d) or "none"] for lb, d in data.items()]
    md = ["## Data", "", md_table(["label", "directory", "runs", "games", "seeds per game", "missing games"], rows), ""]
    md += [f"- Missing for {lb}: {', '.join(g for g in games if g not in d)}"
           for lb, d in data.items() if any(g not in d for g in games)]
    return (md + prefix_lines(f) + protocol_lines(f) + capped_lines(*capped) + constant_lines(constant)
            + [f"- {n}" for n in notes] + [""]
            + damaged_section(f))


def capped_lines(capped: list, whole: list) -> list[str]:
    """Where Atari evaluation episodes hit the step cap (measures.capped_evaluations: the runs, and the games where
    every episode of every run was cut, whose scores, raw and HNS, are then of games cut short)."""
    if not capped:
        return []
    runs = ", ".join(f"{r.label} {r.game} seed {r.seed}: {r.capped} of {r.eval_episodes}" for r in capped)
    return [f"- Evaluation episodes cut at the step cap (their returns are those of games cut short): {runs}"
            + (f". On {', '.join(whole)} every episode of every run was cut: the evaluation scores there, raw and "
               "human-normalised, say how far a capped game got, not what a whole game scores." if whole else "")]


def constant_lines(constant) -> list[str]:
    """The runs whose evaluation policy was near-constant (measures.near_constant_evaluations: run, action, share)."""
    if not constant:
        return []
    runs = ", ".join(f"{r.label} {r.game} seed {r.seed}: action {a} on {share:.1%}" for r, a, share in constant)
    return [f"- Near-constant evaluation policies (one action on at least {NEAR_CONSTANT_SHARE:.0%} of the "
            f"evaluation's steps, eval.action_counts; action: an index of the game's minimal action set): {runs}. "
            "Their evaluation score is that of playing one action, not a measure of how they play."]


def prefix_stops(f: Frame) -> str:
    """The stops of the prefix runs: "2,000,000 of 20,000,000 steps", several joined by "; "."""
    return "; ".join(sorted({reached(r) for r in runs_of(f.data, f.games) if not r.complete}))


def prefix_lines(f: Frame) -> list[str]:
    """What a report of prefix runs (--stop-at-step) means: where its final numbers are, and its windows."""
    runs = runs_of(f.data, f.games)
    prefix = [r for r in runs if not r.complete]
    if not prefix:
        return []
    labels = [lb for lb in f.labels if any(r.label == lb for r in prefix)]
    ends = f"{min(r.total_steps for r in prefix):,}" + (f" to {max(r.total_steps for r in prefix):,}"
                                                       if len({r.total_steps for r in prefix}) > 1 else "")
    return [f"- Prefix runs ({', '.join(labels)}): stopped at {prefix_stops(f)} (`--stop-at-step`; each ends with "
            f"the iteration that crosses its stop, here at {ends} steps). Every evaluation and final number below "
            "is at that stop, not at the protocol's end. Their early window is the first 10% of the protocol "
            "(`--total-timesteps`), reached when they stopped at or past it; the late variance and the whole-run "
            "return are not reached."]


def protocol_lines(f: Frame) -> list[str]:
    """Which Atari evaluation protocol (--eval-protocol) each label's runs used, for labels whose runs record one."""
    used = {lb: sorted({r.args.get("eval_protocol") for d in by_game.values() for r in d.values()} - {None})
            for lb, by_game in f.data.items()}
    unrecorded = {lb: sum(r.args.get("eval_protocol") is None for d in by_game.values() for r in d.values())
                  for lb, by_game in f.data.items()}
    return [f"- Evaluation of {lb}: `--eval-protocol {', '.join(p)}`"
            + (" (the first games to end count, which favours short games)" if "first-finished" in p else "")
            + (f"; {unrecorded[lb]} of its runs record none" if unrecorded[lb] else "")
            for lb, p in used.items() if p]


def damaged_section(f: Frame) -> list[str]:
    """The runs whose event files are damaged or incomplete (check_events), with what was left out."""
    runs = runs_of(f.data, f.games)
    problems = [p for r in runs for p in r.event_problems]
    notes = [n for r in runs for n in r.event_notes]
    if not problems and not notes:
        return []
    md = ["### Damaged or incomplete event files", ""]
    if problems:
        md += ["TensorBoard reads an event file only up to its first record that is cut short or fails its CRC "
               "check, and says nothing: the curve of such a run, or of one whose events end before the run did, "
               "would look like a shorter run. These runs' training-curve numbers (final training return, early "
               "return, late variance, burn-in, learning curves and the adapt figure) are left out; their "
               "evaluation return (eval_results.json) is kept.", "", *[f"- {p}" for p in problems], ""]
    if notes:
        md += ["Damaged, but nothing read from them is missing (kept):", "", *[f"- {n}" for n in notes], ""]
    return md


def left_out_line(f: Frame) -> list[str]:
    """One line naming the runs whose training-curve numbers are left out (damaged_section), or nothing."""
    runs = [r for r in runs_of(f.data, f.games) if r.event_problems]
    if not runs:
        return []
    return ["Left out (event files damaged or incomplete, see \"Damaged or incomplete event files\"): "
            + ", ".join(f"{r.label} {r.game} seed {r.seed}" for r in runs) + ".", ""]


def aggregate_section(agg, agg_notes, games, table, at="", heading="## Aggregate human-normalised score") -> list[str]:
    md = [f"{heading}{at}", ""]
    if not agg:
        return md + ["No Atari games: raw returns of different environments share no scale, so no aggregate is "
                     "computed; see the per-game table.", ""]
    md.append(md_table(["label", *(f"{a} [95% CI]" for a in AGGREGATES), "games", "runs"],
                       [[lb, *(f"{fmt(r['point'][k])} [{fmt(r['lo'][k])}, {fmt(r['hi'][k])}]" for k in range(4)),
                         str(r["games"]), str(r["runs"])] for lb, r in agg.items()]))
    md += ["", "The stratified bootstrap (rliable, the paper's metric) keeps the games fixed, resamples the runs "
           "within each game and recomputes the aggregate over the games; what each label's interval rests on:"]
    md += [f"- {lb}: {r['games']} game{'s' if r['games'] != 1 else ''} × {r['per_game']} run"
           f"{'s' if r['per_game'] != 1 else ''} per game ({r['runs']} runs)" for lb, r in agg.items()]
    for k in sorted({r["per_game"] for r in agg.values() if r["per_game"] <= 3}):
        md.append("- With 1 run per game every resample is the same runs: the interval is the point alone"
                  + ("; the games-resampled interval below is what such a sample can state." if any(
                      "games_lo" in r for r in agg.values()) else ".") if k == 1
                  else f"- With {k} runs per game, one game's own bootstrap interval is exactly [its lowest seed, its "
                  f"highest seed]: a resample of {k} copies of one seed has probability 1/{k ** k} > 2.5%. The "
                  "per-game tables below therefore give Student-t intervals.")
    over_games = {lb: r for lb, r in agg.items() if "games_lo" in r}
    if over_games:
        md += ["", "Resampling the games as well (rliable's task bootstrap: the games drawn with replacement, then the "
               "runs within each), the interval says how much the aggregate depends on which games were run, for the "
               "labels with one run per game:", "",
               md_table(["label", *(f"{a} [95% CI, games resampled]" for a in AGGREGATES), "games"],
                        [[lb, *(f"{fmt(r['point'][k])} [{fmt(r['games_lo'][k])}, {fmt(r['games_hi'][k])}]"
                                for k in range(4)), str(r["games"])] for lb, r in over_games.items()]), ""]
    md += [f"- {n}" for n in agg_notes]
    if len({r["games"] for r in agg.values()}) > 1:
        md.append("- Labels rest on different game sets (see missing games); compare with care.")
    if any(g not in table for g in games):
        md.append("- Non-Atari environments are left out of these aggregates (raw returns share no scale).")
    return md + [""]


def metric_section(f: Frame, m: Metric) -> list[str]:
    """A per-seed metric's section: its per-game table of per-seed values, the best-of-all and pairwise counts of
    the means, and the differences of each compared pair."""
    c = m.compared
    if m.not_reached and not c.seeds:  # every run stopped before the metric's window
        return [f"{'###' if m.sub else '##'} {m.title}", "", f"Not reached: every run stopped at {prefix_stops(f)} "
                "(`--stop-at-step`), before this metric's window.", ""]
    if m.sub:  # in "Early / late training"
        heading, bold, count, both = "###", "highest" if c.pick is max else "lowest", m.word, "have data for"
    else:
        heading, bold, both = "##", "lowest" if c.pick is min else "best", "ran"
        count = "best" if m.word == "higher" else m.word
    return [f"{heading} {m.title}", "", f"{m.what}: {PER_SEED_HOW}; {bold} mean in bold.", "", *m.left_out,
            seed_table(f, c, m.std, not_reached=m.not_reached), "", best_count_line(c, f.labels, count), "",
            f"Pairwise counts of the means (games both labels {both}; a tie is no win), with no regard to the seed "
            "spread (see the differences below):",
            *pairwise_lines(f, c, m.word), "", *differences(c)]


def per_game_iqm_section(f: Frame, c: Compared, atari: bool) -> list[str]:
    """The paper's per-game table, the IQM over seeds (of HNS on Atari, of the raw return elsewhere; c: compared by
    the IQM). The IQM of fewer than 4 values trims nothing: where every cell has n <= 3 it is the mean, so outside
    Atari (where it would repeat the evaluation table) the table is left out, and on Atari it is shown as the mean
    HNS."""
    title = ("Per-game human-normalised score" if atari else "Per-game IQM of evaluation return") + f.at
    small = not c.trims
    trims = (f"The IQM (the 25% trimmed mean) of n values drops int(n / 4) from each end: with n <= "
             f"{IQM_TRIMS_FROM - 1} it drops nothing and equals the mean.")
    if small and not atari:
        return [f"## {title}", "", f"Not shown. {trims} Every label has at most {IQM_TRIMS_FROM - 1} runs of each "
                "game here, so the IQM over seeds of the evaluation return is the mean in \"Per-game evaluation "
                "return\" above.", ""]
    unit = "human-normalised score (HNS)" if atari else "mean evaluation return (raw)"
    if small:
        what = (f"Each run's {unit}: {PER_SEED_HOW}; best mean in bold. The paper's per-game table gives the IQM "
                f"over seeds. {trims} With at most {IQM_TRIMS_FROM - 1} runs of each game here the IQM is this mean.")
    else:
        what = (f"Each run's {unit}: {PER_SEED_HOW}, and the IQM over seeds (the paper's per-game table); best IQM "
                f"in bold. {trims} Cells with n <= {IQM_TRIMS_FROM - 1} show the mean, marked \"(= mean)\".")
    md = [f"## {title}", "", what, "", seed_table(f, c, iqm_column=not small), "",
          best_count_line(c, f.labels, "best"), "",
          f"Pairwise counts of the {'means' if small else 'IQMs'} (games both labels ran; a tie is no win):",
          *pairwise_lines(f, c, "higher"), ""]
    if atari:
        md += ["Differences: as in \"Per-game evaluation return\" (per game HNS is an affine map of the return, so "
               "the permutation p-values are the same and the intervals scale).", ""]
    return md


def burn_in_lines(f: Frame, el: EarlyLate) -> list[str]:
    """The share of the early window each ABS label's runs spent in burn-in at L_min, and at L_min in all (burn-in,
    then while the divergence kept L there), per run and on average (measures.burn_in, measures.burn_summary)."""
    if not el.burn:
        return []

    def steps(v):
        return ", ".join(f"{seed}: {f'{x:,.0f}' if np.isfinite(x) else 'never'}" for seed, x in v.items())

    def shares(v):
        return ", ".join(f"{seed}: {100 * x:.1f}%" for seed, x in v.items())
    rows = []
    for (g, lb), by_seed in el.burn.items():
        rows.append([g, lb, ", ".join(f"{x:g}" for x in sorted({v.L for v in by_seed.values()})),
                     ", ".join(str(w) for w in sorted({v.window for v in by_seed.values()})),
                     steps({s: v.end for s, v in by_seed.items()}), shares({s: v.share for s, v in by_seed.items()}),
                     steps({s: v.moved for s, v in by_seed.items()}),
                     shares({s: v.at_L_min for s, v in by_seed.items()}), f"{100 * el.burn_rows[(g, lb)]:.1f}%",
                     str(len(by_seed))])
    md = ["### Burn-in in the early window", "",
          "An ABS run holds L at L_min until its W-th divergence measurement (W = its --window; the first "
          "measurement that may move L), read from its adapt/* events (one per measurement, at the step it was "
          "logged); after it, L stays at L_min while the divergence is at or above delta_max. Shares are of the "
          "early window (the first 10% of the run's steps; of its protocol for a prefix run): before burn-in "
          "ends, and before L first left L_min.", "",
          md_table(["game", "label", "L_min", "W", "burn-in ends at step (seed: step)",
                    "share in burn-in (seed: share)", "L first leaves L_min at step (seed: step)",
                    "share at L_min (seed: share)", "mean share at L_min", "n"], rows), ""]
    for lb, b in el.burn_labels.items():
        lmin = ", ".join(f"{x:g}" for x in b.L_min)
        baselines = [f"{label}: fixed L = {L}" for label, L in b.baselines]
        md.append(f"- {lb}: on average {100 * b.share[0]:.1f}% of the early window (runs: "
                  f"{100 * b.share[1]:.1f}-{100 * b.share[2]:.1f}%) is burn-in at L = {lmin}, and "
                  f"{100 * b.at_L_min[0]:.1f}% (runs: {100 * b.at_L_min[1]:.1f}-{100 * b.at_L_min[2]:.1f}%) ran at "
                  f"L = {lmin} in all. "
                  + (f"Its early return is mostly that of a fixed L = {lmin}"
                     + (f" ({'; '.join(baselines)})" if baselines else "") + ", not of the ABS schedule."
                     if b.at_L_min[0] > 0.5 else "Most of its early window ran with L moved from L_min.")
                  + (f" L did not leave L_min in the early window after the burn-in in: "
                     f"{', '.join(f'{g} seed {s}' for g, s in b.stayed)}." if b.stayed else ""))
    return md + [""]


def early_late_section(f: Frame, el: EarlyLate, table: dict) -> list[str]:
    md = ["## Early / late training", "",
          f"From `{RETURN_TAG}`, per run: early = its mean episodic return over the first 10% of training steps; "
          "late = the variance of its episodic return over the last 10% (population variance, at least two games "
          "there); whole run = the area under its learning curve per step, the mean over the ten tenths of its "
          "steps of its mean episodic return in each tenth (sample efficiency: every phase of training weighs the "
          "same). n = the runs with games in that window.", "", *left_out_line(f)]
    if any(el.not_reached.values()):
        md += [f"Prefix runs (stopped at {prefix_stops(f)}): the early window is the first 10% of the protocol's "
               "steps (`--total-timesteps`), not of the steps they trained; a window a run stopped before is \"not "
               "reached\".", ""]
    for metric in (Metric("Early return", "Each run's early return", el.early, "higher early", sub=True,
                          not_reached=el.not_reached.get("early", {})),
                   Metric("Late variance", "Each run's late variance", el.late, "lower late variance", sub=True,
                          not_reached=el.not_reached.get("late", {})),
                   Metric("Whole-run return", "Each run's whole-run return (learning curve area)", el.area,
                          "higher whole-run return", sub=True, not_reached=el.not_reached.get("whole", {}))):
        md += metric_section(f, metric)
        if metric.title == "Early return" and el.early_hns.seeds:  # Atari games with an early return
            md += early_hns_section(f, el, table)
    md += burn_in_lines(f, el)
    return md + ([f"- {n}" for n in el.burn_notes] + [""] if el.burn_notes else [])


def early_hns_section(f: Frame, el: EarlyLate, table: dict) -> list[str]:
    """The early return as a human-normalised score on the Atari games: per game (the seed table, counts and
    differences of metric_section) and its aggregates across games with stratified-bootstrap CIs."""
    md = metric_section(f, Metric("Early return, human-normalised", "Each run's early return as a human-normalised "
                                  "score, (early return - random) / (human - random)", el.early_hns, "higher early",
                                  sub=True))
    md += aggregate_section(el.early_agg, el.early_agg_notes, f.games, table,
                            heading="#### Early return, human-normalised, across games")
    return md


def improvement_section(rates, games, ref, skipped=None, at="") -> list[str]:
    same = {a for a, _ in rates} == {ref}
    ref_name = ref if same else "A"
    md = [f"## Improvement rate{f' of {ref}' if same else ''}{at}", "",
          f"Improvement rate of {ref_name} over a label X on a game (the paper's Figure 3 and 5 quantity): "
          f"(s_{ref_name} - s_X) / |s_X|, where s is the mean over seeds of the human-normalised score (Atari) or "
          "of the raw evaluation return (other environments); shown in %. It blows up when s_X is near 0 and is "
          "undefined at 0, so the robust form below is given too. Mean and median are over the games both labels "
          "ran and the form is defined on.", ""]
    skipped_lines = [f"- {a} over {b}: {why}" for (a, b), why in (skipped or {}).items()]
    if skipped_lines:
        md += ["Comparisons skipped:", *skipped_lines, ""]
    if not rates:
        return md + ([] if skipped_lines else ["Needs a second label.", ""])

    def table(form):
        rows = [[g, *(fmt_pct(100 * r[form].get(g, np.nan)) for r in rates.values())]
                for g in games if any(g in r[form] for r in rates.values())]
        for k, name in enumerate(("mean", "median")):  # over the games the form is defined on
            rows.append([f"**{name}**", *(f"**{fmt_pct(100 * r[f'{form} summary'][k])}** "
                                          f"({r[f'{form} summary'][2]} games)" for r in rates.values())])
        return md_table(["game", *(f"{a} over {b}" for a, b in rates)], rows)
    md += [table("paper"), "", "### Robust improvement", "",
           "(a - b) / (max(human, b) - random) on the mean raw scores a, b of the two labels (Wang et al. 2016): "
           "the denominator is at least human - random, so a baseline near the random score cannot inflate it. "
           "Outside Atari there is no human or random score: (a - b) / max(|a|, |b|), bounded in [-200%, 200%].",
           "", table("robust"), ""]
    excluded = [f"- {a} over {b}: {g} ({why})" for (a, b), r in rates.items() for g, why in r["excluded"]]
    return md + (["Games left out:", *excluded, ""] if excluded else ["No game left out.", ""])


def divergence_trend_section(f: Frame, trends: dict, counts: dict) -> list[str]:
    """The paper's Figure 1 claim per run that logged a divergence (measures.divergence_trends): where it starts,
    its mean over the first and the last tenth of the run's steps, and Spearman's rank correlation with the step;
    per label, in how many runs it fell (measures.trend_counts)."""
    if not trends:
        return []

    def per_seed(by_seed, value, form="{:#.3g}"):
        return ", ".join(f"{s}: {'–' if not np.isfinite(value(v)) else form.format(value(v))}"
                         for s, v in by_seed.items())
    rows = [[g, lb, ", ".join(sorted({v.tag for v in by_seed.values()})), per_seed(by_seed, lambda v: v.n, "{:d}"),
             per_seed(by_seed, lambda v: v.first), per_seed(by_seed, lambda v: v.early),
             per_seed(by_seed, lambda v: v.late), per_seed(by_seed, lambda v: v.rho, "{:+.2f}")]
            for (g, lb), by_seed in trends.items()]
    md = [f"## Divergence over training{f.at}", "",
          "The paper (Section 4.1, Figure 1): the divergence \"typically starts high due to random exploration and "
          "rapid initial learning, then monotonically decreases as the agent stabilizes\". Per run that logged one "
          "(ABS's own, or measured and not used by a fixed-batch run, `--track-divergence`), over the steps it "
          "trained: its first measurement, its mean over the first and the last tenth of those steps (3 significant "
          "digits), and Spearman's "
          "rank correlation ρ of the measurements with their steps (−1: each below the one before; negative: it "
          "mostly falls). –: no value (no measurement in that tenth; for ρ, fewer than 3 measurements or all "
          "equal).", "",
          md_table(["game", "label", "divergence", "measurements (seed: n)", "first (seed: value)",
                    "mean, first tenth (seed: value)", "mean, last tenth (seed: value)", "ρ with step (seed: ρ)"],
                   rows), ""]
    for lb, c in counts.items():
        md.append(f"- {lb}: lower in the last tenth than in the first in {c.lower} of {c.both} runs; ρ < 0 in "
                  f"{c.falling} of {c.ranked}" + (f" (median ρ {c.median_rho:+.2f})." if c.ranked else "."))
    return md + [""]


def machine_time_section(times: dict) -> list[str]:
    """The runs' training time per label (measures.machine_time)."""
    def span(x, form):
        return "–" if x is None else form.format(x[0]) + ("" if form.format(x[0]) == form.format(x[1])
                                                          else "–" + form.format(x[1]))
    rows = [[lb, str(t["runs"]), f"{t['hours']:.1f}" if t["timed"] else "–", span(t["per_run"], "{:.1f}"),
             span(t["sps"], "{:,.0f}"), f"{t['restarted']} of {t['runs']}"] for lb, t in times.items()]
    untimed = [f"- {lb}: {t['runs'] - t['timed']} of {t['runs']} runs have no `train_seconds` (not counted)"
               for lb, t in times.items() if t["timed"] < t["runs"]]
    return ["## Machine time", "",
            "Each finished run's `train_seconds` (its eval_results.json; unfinished runs are not counted): the "
            "seconds of its training loop, summed over the sessions of a run that was stopped and resumed, without "
            "its evaluation or any steps a hard kill lost after the last checkpoint; and its speed over them, the "
            "steps it trained / train_seconds. Both depend on the "
            "machine and on what else ran on it. Started more than once: runs with more than one event file (each "
            "start of a script opens one: stopped, then resumed or started again).", "",
            md_table(["label", "runs", "training hours, all runs", "hours per run", "steps per second per run",
                      "started more than once"], rows), "", *untimed, *([""] if untimed else [])]
