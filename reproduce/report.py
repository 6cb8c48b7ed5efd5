"""The paper's tables and figures from directories of finished runs (docs/reproducing.md: "The paper's tables").

    python -m reproduce.report --runs ABS=runs/abs Small=runs/small --out report/ --benchmark atari10

Every `eval_results.json` below a labelled directory (any depth) is one finished run; the TensorBoard
events beside it give the training curves. Runs are grouped by label, game (env id without `-v5`) and
seed. Atari scores are human-normalised (HNS) with `atari57_scores.csv` beside this file; other
environments (MuJoCo) stay in raw returns. Aggregates (IQM, median, mean, optimality gap) and their
95% stratified-bootstrap confidence intervals come from `rliable` (Agarwal et al. 2021). A number that rests on
the few runs of one game is shown with its per-seed values, their mean and a Student-t 95% interval; each
compared pair gets the difference of means with Welch's 95% interval and an exact permutation p (with 3 vs 3
runs no p can be below 0.10, and the report says so). Training curves give the early return, the late
variance and the whole-run return (the curve's area per step); ABS runs: the share of the early window spent
in burn-in and at L_min, and their divergence and L per game; every run that logged a divergence: where it starts
and ends and its rank correlation with the step (the paper's Figure 1 claim); the machine time. For the runs of
the MuJoCo grid at 5M steps, the analysis fixed before its seeds 4-10 ran (measures.MUJOCO_5M: Holm-adjusted exact
permutation tests per task, effect sizes, the decision; docs/results-mujoco-5m.md), with two figures for it. --games
and --seeds choose the runs.
Writes `report.md`, its numbers as data (`report.json`, report_data.py) and PNG figures, each with a CSV of the plotted
data, into `--out`.

The report is made in stages, one file each beside this one: runs.py finds and checks the runs' eval_results.json,
events.py reads their event files record by record and checks them for damage, measures.py takes each run's
measures per seed, stats.py holds the statistics (no file access), figure_data.py bins what the figures draw;
then, from those numbers alone, sections.py (with tables.py's formats and tables) and preregistered_section.py write
the markdown and figures.py draws the figures. This file holds the command line, and measures everything (measure)
before it writes the report's sections in their order (write_report).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from . import runs
from .batch_claims import (FREEWAY_ZEROS, MINATAR_BATCHES, BatchAnalysis, applies, batch_analysis,
                           zero_analysis, zero_share)
from .batch_claims_section import batch_claims_section
from .cli import Parser
from .events import load_events
from .figure_data import FigureData, figure_data
from .figures import figures_section
from .measures import (MUJOCO_5M, SECONDARY, Preregistered, aggregate_table, aggregate_values,
                      burn_in, burn_summary, by_label, capped_evaluations, divergence_trends, early_late,
                      final_training_return, hns_values, improvement_rates, is_preregistered, machine_time,
                      near_constant_evaluations, normalized, not_reached, per_seed, preregistered, run_curve,
                      trend_counts)
from .runs import (BENCHMARKS, RETURN_TAG, MixedLengths, benchmark_games, game_of,
                  load_atari_scores, load_minatar_random, out_problem, reference_pairs)
from .preregistered_section import preregistered_section
from .quoted import quoted
from .report_data import report_data, write_data
from .sections import (EarlyLate, Metric, aggregate_section, data_section, divergence_trend_section,
                      early_late_section, improvement_section, left_out_line, machine_time_section, metric_section,
                      per_game_iqm_section)
from .stats import Compared, compare
from .tables import Frame


def collect(roots: dict[str, Path], benchmark: str | None, table: dict, allow_mixed: bool = False,
            total_timesteps: int | None = None, games: list[str] | None = None, seeds: list[int] | None = None):
    """The runs (runs.collect: data[label][game][seed] = Run, the games, notes), each with its events read and
    checked (events.load_events)."""
    data, games, notes = runs.collect(roots, benchmark, table, allow_mixed, total_timesteps, games, seeds)
    load_events(data)
    return data, games, notes


@dataclass
class Measured:
    """Every number of one report, measured (measure) before any of it is written."""
    capped: tuple  # measures.capped_evaluations: the runs cut at the step cap, the games where every run was
    constant: list  # measures.near_constant_evaluations
    agg: dict  # the aggregates across games per label (measures.aggregate_table)
    agg_notes: list
    evaluation: Compared  # the evaluation return
    hns: Compared  # the evaluation HNS (the raw return outside Atari), by the IQM over seeds
    final: Compared  # the final training return
    early_late: EarlyLate
    trends: dict  # measures.divergence_trends
    trend_counts: dict
    rates: dict  # measures.improvement_rates
    times: dict  # measures.machine_time
    figures: FigureData
    preregistered: Preregistered | None  # the analysis fixed before the runs (measures.MUJOCO_5M), for its runs
    batch_claims: BatchAnalysis | None  # the MinAtar study's (batch_claims.MINATAR_BATCHES), for its runs
    quoted: dict  # what the results pages quote beyond the report's tables (quoted.py), in report.json only


def measure(f: Frame, table: dict, args) -> Measured:
    """Every number of the report of f's runs (args: --last-games, --reps, --seed, --bins)."""
    data, games = f.data, f.games

    def compared(values, pick=max, **how):
        return compare(values, games, f.labels, f.pairs, pick, **how)
    agg, agg_notes = aggregate_table(data, games, table, args.reps, args.seed)
    burn, burn_notes = burn_in(data, games)
    early, late, area = early_late(data, games)
    early_hns = hns_values(early, table)
    early_agg, early_agg_notes = aggregate_values(by_label(early_hns, games), args.reps, args.seed)
    burn_rows, burn_labels = burn_summary(burn, data, f.labels, f.pairs)
    trends = divergence_trends(data, games)
    rates = improvement_rates(data, games, table, f.pairs)
    evaluation = compared(per_seed(data, games, lambda r: r.score), complete=f.complete)
    final = compared(per_seed(data, games, lambda r: final_training_return(r, args.last_games)), complete=f.complete)
    el = EarlyLate(early=compared(early), late=compared(late, min), area=compared(area),
                   not_reached=not_reached(data, games), early_hns=compared(early_hns), early_agg=early_agg,
                   early_agg_notes=early_agg_notes, burn=burn, burn_notes=burn_notes, burn_rows=burn_rows,
                   burn_labels=burn_labels)
    plan = MUJOCO_5M if is_preregistered(MUJOCO_5M, args.benchmark, data, games, f.pairs) else None
    analysis = preregistered(plan, evaluation, dict(zip(SECONDARY, (final, el.area, el.early, el.late))), games,
                             args.last_games) if plan else None
    claims = batch_analysis(MINATAR_BATCHES, evaluation, load_minatar_random(), args.reps, args.seed) \
        if applies(MINATAR_BATCHES, args.benchmark, data, f.pairs) else None
    if claims:  # its check added during the runs: each run's share of training games at 0 after a step (NaN: none)
        z = FREEWAY_ZEROS
        shares = {(z.game, lb): {s: zero_share(*c[:2], z.after) if (c := run_curve(r)) else float("nan")
                                 for s, r in by_game.get(z.game, {}).items()} for lb, by_game in data.items()}
        claims = claims._replace(zeros=zero_analysis(z, shares))
    # A pre-registered analysis's figures: each seed's evaluation return and the curves with a 95% band
    figures = figure_data(data, games, rates, args.bins, burn, evaluation if plan or claims else None)
    return Measured(
        capped=capped_evaluations(data, games, table), constant=near_constant_evaluations(data, games), agg=agg,
        agg_notes=agg_notes, evaluation=evaluation,
        hns=compared(per_seed(data, games, lambda r: normalized(r, table)), point="iqm", complete=f.complete,
                     test=False),
        final=final, early_late=el, trends=trends, trend_counts=trend_counts(trends, f.labels), rates=rates,
        times=machine_time(data, games),
        figures=figures, preregistered=analysis,
        batch_claims=claims,
        quoted=quoted(data, games, evaluation, el, trends, plan, figures))


def write_report(data, games, notes, args, table) -> Path:
    """Measure every number of the report (measure), then write its sections in order from them, and its figures."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ref = args.reference or next(iter(data))
    data = {ref: data[ref], **{lb: d for lb, d in data.items() if lb != ref}}  # reference label first
    skipped = {tuple(p): "no finished run of " + " or ".join(lb for lb in p if lb not in data)
               for p in args.skip_compare}
    # Skipped pairs mean the comparisons were chosen: never fall back to the reference against every other label.
    pairs = [tuple(p) for p in args.compare] or ([] if skipped else reference_pairs(ref, data))
    notes = notes + [f"comparison {a} vs {b} skipped: {why}" for (a, b), why in skipped.items()]
    f = Frame(data, games, pairs)
    m = measure(f, table, args)
    md = ["# Report", "", f"Generated by `reproduce/report.py` from {len(data)} label(s); benchmark: "
          f"{args.benchmark or 'the games found'} ({len(games)} games). Aggregates across games: 95% stratified-"
          f"bootstrap CIs (`rliable`, {args.reps} reps). Per game (a few runs of one game): the per-seed values, "
          "their mean and a Student-t 95% CI; for each compared pair, the difference of means with Welch's 95% CI "
          "and an exact permutation p. *n* = runs a number rests on.", ""]
    md += data_section(f, notes, args.runs, m.capped, m.constant)
    md += preregistered_section(m.preregistered) if m.preregistered else []
    md += batch_claims_section(m.batch_claims) if m.batch_claims else []
    md += aggregate_section(m.agg, m.agg_notes + [f"{g}: every evaluation episode of every run was cut at the step "
                                                  "cap (see Data); its score here is that of games cut short"
                                                  for g in m.capped[1]], games, table, f.at)
    md += metric_section(f, Metric(f"Per-game evaluation return{f.at}",
                                   "Each run's mean evaluation return (raw game score)", m.evaluation))
    md += per_game_iqm_section(f, m.hns, atari=any(g in table for g in games))
    md += metric_section(f, Metric(
        f"Final training return{f.at}", f"Each run's mean of its last {args.last_games} games (`{RETURN_TAG}`, the "
        "training metric of CleanRL's published results, read by openrlbenchmark, whose spread is the population std "
        "over seeds, also given)", m.final, std=True, left_out=left_out_line(f)))
    md += early_late_section(f, m.early_late, table)
    md += divergence_trend_section(f, m.trends, m.trend_counts)
    md += improvement_section(m.rates, games, ref, skipped, f.at)
    md += machine_time_section(m.times)
    md += figures_section(m.figures, m.agg, out, m.batch_claims)
    (out / "report.md").write_text("\n".join(md))
    write_data(out / "report.json", report_data(f, m))
    return out / "report.md"


def parse_args(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
               name="report.py")
    p.add_argument("--runs", nargs="+", required=True, metavar="LABEL=DIR",
                   help="labelled directories searched recursively for eval_results.json")
    p.add_argument("--out", default="report", help="output directory (report.md, PNG + CSV figures)")
    p.add_argument("--benchmark", choices=BENCHMARKS, help="restrict to and check against this game set")
    p.add_argument("--reference", help="label the others are compared with (default: the first)")
    p.add_argument("--compare", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="compare label A against label B (repeatable; default: the reference against each other)")
    p.add_argument("--skip-compare", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="a chosen comparison whose label A or B has no finished run: listed as skipped "
                   "(repeatable); with it, no comparison other than --compare is made")
    p.add_argument("--total-timesteps", type=int, metavar="N",
                   help="report only the runs of N total timesteps; runs of other lengths are listed as left out")
    p.add_argument("--allow-mixed-timesteps", action="store_true",
                   help="pool runs of one label that have different total_timesteps (refused by default)")
    p.add_argument("--games", nargs="+", metavar="GAME",
                   help="report only these games (names or env ids: Pong or Pong-v5); the tables list only them")
    p.add_argument("--seeds", nargs="+", type=int, metavar="N", help="report only the runs of these seeds")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap replications")
    p.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    p.add_argument("--bins", type=int, default=50, help="step bins of the curves")
    p.add_argument("--last-games", type=int, default=100,
                   help="final training return: mean of each run's last N logged games (CleanRL's metric: 100)")
    args = p.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, _, d = item.partition("=") if "=" in item else (Path(item).name, "", item)
        if not label or label in runs:
            p.error(f"--runs: empty or repeated label in {item!r}")
        if not d:  # Path("") is the working directory: a report of whatever lies below it
            p.error(f"--runs: {item!r} names no directory (LABEL=DIR)")
        if not Path(d).is_dir():
            p.error(f"--runs: {d!r} is not a directory")
        runs[label] = Path(d)
    if args.reference is not None and args.reference not in runs:
        p.error(f"--reference: {args.reference!r} is not one of the labels {list(runs)}")
    for pair in args.compare:
        if any(lb not in runs for lb in pair):
            p.error(f"--compare: {' '.join(pair)!r} names a label that is not one of {list(runs)}")
    for pair in args.skip_compare:
        if all(lb in runs for lb in pair):
            p.error(f"--skip-compare: both {' and '.join(pair)} have runs (use --compare)")
    if args.reps < 1 or args.bins < 1 or args.last_games < 1:
        p.error("--reps, --bins and --last-games must be positive")
    if args.total_timesteps is not None and args.total_timesteps < 1:
        p.error(f"--total-timesteps {args.total_timesteps}: must be at least 1")
    if args.games is not None:
        names = [game_of(g) for g in args.games]
        if not all(names):
            p.error(f"--games: {' '.join(args.games)!r} holds an empty name (game names or env ids: Pong, Pong-v5)")
        args.games = list(dict.fromkeys(names))
    if args.seeds is not None:
        args.seeds = list(dict.fromkeys(args.seeds))
    args.runs = runs
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    problem = out_problem(Path(args.out))
    if problem:
        print(f"report.py: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    table = load_atari_scores()
    allowed = benchmark_games(args.benchmark, table) if args.benchmark else None
    outside = [g for g in args.games or [] if allowed is not None and g not in allowed]
    if outside:
        print(f"report.py: --games: {', '.join(outside)} not in --benchmark {args.benchmark} (its games: "
              f"{', '.join(allowed)})", file=sys.stderr)
        return 2
    try:
        data, games, notes = collect(args.runs, args.benchmark, table, args.allow_mixed_timesteps,
                                     args.total_timesteps, args.games, args.seeds)
    except MixedLengths as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 2
    if not any(data.values()):
        length = f" of {args.total_timesteps:,} steps" if args.total_timesteps is not None else ""
        print(f"report.py: no finished runs{length} (eval_results.json) found under "
              + ", ".join(map(str, args.runs.values())) + ("\n" + "\n".join(notes) if notes else ""), file=sys.stderr)
        return 1
    try:
        path = write_report(data, games, notes, args, table)
    except OSError as e:  # e.g. a disk that is full, or permissions os.access did not tell
        print(f"report.py: --out {args.out}: cannot write the report ({type(e).__name__}: {e.strerror or e}"
              + (f": {e.filename}" if e.filename else "") + ")", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
