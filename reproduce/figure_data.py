"""What the report's figures draw, computed before anything is drawn: the runs' curves binned across runs per label,
tag and panel (stats.curves_band), where an ABS label's burn-in ends, the range its batch sizes may move in, and the
improvement rates per game; for a pre-registered analysis, each seed's evaluation return and the learning curves
with a Student-t band. figures.py draws these and writes each figure's CSV from them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .measures import divergence_tag, is_abs_run, runs_of, size_tag
from .runs import DIVERGENCE_TAGS, RETURN_TAG, SIZE_TAGS, Run
from .stats import Compared, curves_band, t_band

CONTROLLER_TAGS = (*DIVERGENCE_TAGS, *SIZE_TAGS)  # the batch-size controller's tags (adapt/*)
ADAPT_BY_GAME_MAX = 6  # games: past this a panel per game is unreadable (Atari: 57), adapt.png alone is drawn


class Band(NamedTuple):
    """A label's runs in one panel: their binned curve of one tag (curve_band), as drawn and as written to the
    figure's CSV: [*key, label, step, mean, min, max, n_runs] per bin."""
    label: str
    color: int  # the label's place in the report: one colour per label in every figure
    tag: str
    key: tuple
    curve: tuple  # (step, mean, min, max, n) over the bins with a value


class Panel(NamedTuple):
    title: str
    bands: list
    marks: list | tuple = ()  # (step, colour): where an ABS label's burn-in ends, its mean over the panel's runs
    ylim: tuple | None = None  # the whole range the batch sizes may move in, where the runs' flags name it


class FigureData(NamedTuple):
    """What figures.py draws (None: a figure not drawn) and the notes of the report's list of figures."""
    learning: list  # a Panel per game
    adapt: list | None  # a Panel per controller tag that some run logged
    no_adapt: list  # the labels whose runs log no controller tag (fixed batch: not in the adapt figure)
    by_game: list | None  # (divergence Panel, batch size Panel) per game of the ABS runs, ADAPT_BY_GAME_MAX at most
    divergence: list | None  # a Panel per game and one over games, of every run that logged a divergence
    sizes: list | None  # the same of the ABS runs' batch size
    bars: tuple | None  # the improvement rates: (the games, then "mean" and "median"; {(a, b): rates in %})
    left: list  # the runs left out for damaged or incomplete event files
    strips: list | None = None  # a Strip per game: each seed's evaluation return (pre-registered analysis only)
    learning_ci: list | None = None  # a Panel per game: the learning curves, mean and Student-t 95% band


class Strip(NamedTuple):
    """One game's evaluation returns: per label (in the report's order, its colour its place), each seed's value, and
    their mean with its Student-t 95% interval (stats.Seeds)."""
    game: str
    arms: list  # (label, colour, stats.Seeds)


def curve_band(runs: list[Run], tag: str, bins: int, spread=None):
    """The runs' binned band of one tag (stats.curves_band: step, mean, min, max, n; with spread=stats.t_band the
    Student-t 95% interval of the mean instead of the min and max), or None when no run logged it. A controller tag
    (the divergence, L or the batch size: measured every K iterations, holding in between) keeps each run's latest
    value up to the bin where the run ended, or of its last measurement if that is later."""
    runs = [r for r in runs if tag in r.scalars and len(r.scalars[tag][0])]
    if not runs:
        return None
    ends = [max(r.total_steps, r.scalars[tag][0].max()) for r in runs]
    return curves_band([(*r.scalars[tag], end) for r, end in zip(runs, ends)], max(ends), bins,
                       tag in CONTROLLER_TAGS, spread)


def bands(label: str, color: int, runs: list[Run], tag_of, bins: int, key: tuple) -> list[Band]:
    """The label's bands in one panel: one per tag its runs log (tag_of(run), None for none; in sorted order), each
    over the runs of that tag and keyed (*key, tag)."""
    out = []
    for tag in sorted({tag_of(r) for r in runs} - {None}):
        curve = curve_band([r for r in runs if tag_of(r) == tag], tag, bins)
        if curve is not None:
            out.append(Band(label, color, tag, (*key, tag), curve))
    return out


def game_panels(data, games, bins: int, tag_of, keep, burn=None, sizes=False) -> list[Panel] | None:
    """A Panel per game and one of the mean over games, of the runs that keep(run) and log tag_of(run); where each
    ABS label's burn-in ends (burn: measures.burn_in's), and with sizes the range the runs' flags allow. None when
    no run logs it."""
    runs = {lb: {g: [r for r in by_game.get(g, {}).values() if keep(r) and tag_of(r)] for g in games}
            for lb, by_game in data.items()}
    games = [g for g in games if any(by_lb[g] for by_lb in runs.values())]
    if not games:
        return None
    panels = []
    for title, chosen in [*((g, [g]) for g in games), ("mean over games", games)]:
        drawn, marks = [], []
        for i, lb in enumerate(data):
            panel = [r for g in chosen for r in runs[lb][g]]
            drawn += bands(lb, i, panel, tag_of, bins, (title,))
            ends = [v.end for g in chosen for v in (burn or {}).get((g, lb), {}).values() if np.isfinite(v.end)]
            if ends and panel:
                marks.append((float(np.mean(ends)), i))
        lo, hi = size_range([r for lb in runs for g in chosen for r in runs[lb][g]]) if sizes else (None, None)
        panels.append(Panel(title, drawn, marks, (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
                            if lo is not None and hi > lo else None))
    return panels


def size_range(runs: list[Run]) -> tuple:
    """(lowest minimum, highest maximum) of the batch-size ranges the runs' flags allow (--num-steps-min/max, or
    BTR's --batch-size-min/max), or (None, None) when none of them names one."""
    lows = [r.args.get("num_steps_min", r.args.get("batch_size_min")) for r in runs]
    highs = [r.args.get("num_steps_max", r.args.get("batch_size_max")) for r in runs]
    lows, highs = [v for v in lows if v is not None], [v for v in highs if v is not None]
    return (min(lows), max(highs)) if lows and highs else (None, None)


def learning_panels(data, games, bins: int, spread=None) -> list[Panel]:
    """A Panel per game that some label ran: each label's training return binned across its runs (curve_band)."""
    return [Panel(g, [Band(lb, i, RETURN_TAG, (g,), c) for i, (lb, d) in enumerate(data.items())
                      if (c := curve_band(list(d.get(g, {}).values()), RETURN_TAG, bins, spread)) is not None])
            for g in games if any(g in d for d in data.values())]


def figure_data(data, games, rates: dict, bins: int, burn=None, evaluation: Compared | None = None) -> FigureData:
    """Every figure's data: the learning curves per game; the controller's tags over games and seeds; the ABS
    runs' divergence and batch size per game, for at most ADAPT_BY_GAME_MAX games; else, and wherever a fixed-batch
    run tracked the divergence it does not use (--track-divergence), a panel per game and one over games of each (the
    paper's Figure 1); the improvement rates (measures.improvement_rates) per game, their mean and median. With
    evaluation (the evaluation return compared, for a pre-registered analysis): each seed's evaluation return per
    game, and the learning curves with a Student-t 95% band over the seeds per step bin."""
    learning = learning_panels(data, games, bins)
    every = {lb: [r for g in d.values() for r in g.values()] for lb, d in data.items()}
    adapt = [Panel(t, [b for i, lb in enumerate(data) for b in bands(lb, i, every[lb], lambda r, t=t: t, bins, ())])
             for t in CONTROLLER_TAGS if any(t in r.scalars for rs in every.values() for r in rs)] or None
    no_adapt = [lb for lb, d in data.items()
                if d and not any(t in r.scalars for r in every[lb] for t in CONTROLLER_TAGS)]
    abs_runs = {lb: {g: [r for r in d.get(g, {}).values() if is_abs_run(r)] for g in games} for lb, d in data.items()}
    abs_games = [g for g in games if any(by_game[g] for by_game in abs_runs.values())]
    by_game = [tuple(Panel(f"{g}: {what}", [b for i, lb in enumerate(data) for b in bands(
        lb, i, abs_runs[lb][g], tag_of, bins, (g,))]) for what, tag_of in (("divergence", divergence_tag),
                                                                         ("batch size", size_tag)))
               for g in abs_games] if 0 < len(abs_games) <= ADAPT_BY_GAME_MAX else None
    tracked = any(divergence_tag(r) and not is_abs_run(r) for r in runs_of(data, games))
    grids = tracked or not by_game  # Figure 1 where by_game does not show it, with each game's L beside it
    divergence = game_panels(data, games, bins, divergence_tag, lambda r: True, burn) if grids else None
    sizes = game_panels(data, games, bins, size_tag, is_abs_run, burn, sizes=True) if grids else None
    bars = None
    if rates:
        names = sorted({g for r in rates.values() for g in r["paper"]})
        bars = ([*names, "mean", "median"], {pair: [100 * r["paper"].get(g, np.nan) for g in names]
                                             + [100 * x for x in r["paper summary"][:2]] for pair, r in rates.items()})
    strips = [Strip(g, [(lb, i, evaluation.seeds[(g, lb)]) for i, lb in enumerate(data)
                        if (g, lb) in evaluation.seeds]) for g in games
              if any((g, lb) in evaluation.seeds for lb in data)] if evaluation is not None else None
    return FigureData(learning, adapt, no_adapt, by_game, divergence, sizes, bars,
                      [r for r in runs_of(data, games) if r.event_problems], strips,
                      learning_panels(data, games, bins, t_band) if evaluation is not None else None)
