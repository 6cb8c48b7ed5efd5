"""The report's figures: each a PNG with a CSV of the plotted data beside it (save), and the section that lists
them. What they draw is figure_data.py's, computed before: here the curves binned across runs are drawn as a mean
line with a min-max band (or a Student-t band), each seed's evaluation return as a dot, and written to the CSVs."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .figure_data import FigureData, Panel, Strip
from .measures import AGGREGATES
from .runs import RETURN_TAG

UNITS = {"adapt/divergence": "divergence δ (fraction of\ngreedy actions changed)",
         "adapt/kl": "divergence δ = KL (nats)",
         "adapt/divergence_ess": "divergence δ = 1 - ESS/n\n(policy ratios)",
         "adapt/num_steps": "rollout length L (steps per env)",
         "adapt/batch_size": "batch size (transitions per update)"}
BAND_COLUMNS = ["step", "mean", "min", "max", "n_runs"]
T_BAND_COLUMNS = ["step", "mean", "ci_low", "ci_high", "n_runs"]  # a Student-t band (stats.t_band)


def write_csv(path: Path, header, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])


def subplots(rows: int = 1, cols: int = 1, **kwargs):
    """A figure and its axes (Figure.subplots' arguments), drawn to files only: no pyplot, no display backend."""
    fig = Figure(figsize=kwargs.pop("figsize", None))
    return fig, fig.subplots(rows, cols, **kwargs)


def save(fig, out: Path, name: str, header, rows) -> str:
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=100)
    write_csv(out / f"{name}.csv", header, rows)
    return f"`{name}.png` (data: `{name}.csv`)"


def grid(n: int, title: str, w=4.5, h=3.4):
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = subplots(rows, cols, figsize=(w * cols, h * rows + 0.4), squeeze=False)
    fig.suptitle(title)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def legend_or_note(ax, note: str):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes)


def plot_band(ax, label, color, c):
    step, mean, lo, hi, _ = c
    # Markers when a curve has few points: a single measurement would otherwise draw nothing.
    ax.plot(step, mean, label=label, color=color, marker="o" if len(step) < 10 else None, markersize=4)
    ax.fill_between(step, lo, hi, alpha=0.25, color=color)


def band_rows(key, label: str, c) -> list[list]:
    """The CSV rows of one band (figure_data.curve_band's (step, mean, min, max, n)): [*key, label, step, mean,
    min, max, n_runs] per bin."""
    return [[*key, label, *map(float, x[:4]), int(x[4])] for x in zip(*c)]


def draw_panel(ax, panel: Panel, ylabel: str | None = None, what: str | None = None) -> list[list]:
    """Draw a panel's bands (each label's colour, in label order, with its burn-in mark after its bands) and return
    their CSV rows. ylabel: the axis label; by default the bands' units where they share one, else `what`."""
    rows = []
    for i in sorted({b.color for b in panel.bands} | {c for _, c in panel.marks}):
        for b in (b for b in panel.bands if b.color == i):
            plot_band(ax, b.label, f"C{i}", b.curve)
            rows += band_rows(b.key, b.label, b.curve)
        for step, _ in (m for m in panel.marks if m[1] == i):
            ax.axvline(step, color=f"C{i}", ls="--", lw=1)
    units = {UNITS[b.tag] for b in panel.bands} if ylabel is None else {ylabel}
    ax.set(title=panel.title, xlabel="environment steps", ylabel=units.pop() if len(units) == 1 else what)
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)
    legend_or_note(ax, f"no {what} events")
    return rows


def learning_curves_figure(panels: list[Panel], out):
    fig, axes = grid(len(panels), "Learning curves: mean over seeds, shaded min–max")
    rows = [row for ax, panel in zip(axes, panels)
            for row in draw_panel(ax, panel, "training episodic return", RETURN_TAG)]
    return save(fig, out, "learning_curves", ["game", "label", *BAND_COLUMNS], rows)


def learning_ci_figure(panels: list[Panel], out):
    """The learning curves per game with a Student-t 95% band over the seeds (stats.t_band) in each step bin: none
    where one run has a value."""
    fig, axes = grid(len(panels), "Learning curves: mean over seeds, shaded Student-t 95% CI of the mean")
    rows = [row for ax, panel in zip(axes, panels)
            for row in draw_panel(ax, panel, "training episodic return", RETURN_TAG)]
    return save(fig, out, "learning_curves_ci", ["game", "label", *T_BAND_COLUMNS], rows)


def evaluation_figure(strips: list[Strip], out):
    """Per game, each seed's evaluation return as a dot (spread sideways by seed so that equal values stay apart),
    each label in its column and colour, with its mean (a bar) and Student-t 95% interval."""
    fig, axes = grid(len(strips), "Evaluation return per seed; bar: mean, whiskers: Student-t 95% CI")
    rows = []
    for ax, strip in zip(axes, strips):
        for x, (label, color, s) in enumerate(strip.arms):
            seeds, values = list(s.values), list(s.values.values())
            offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
            ax.scatter(x + np.asarray(offsets) - 0.1, values, color=f"C{color}", s=16, alpha=0.8)
            ax.errorbar(x + 0.2, s.mean, yerr=[[max(s.mean - s.lo, 0)], [max(s.hi - s.mean, 0)]]
                        if np.isfinite(s.lo) else None, fmt="_", color=f"C{color}", markersize=14, capsize=4)
            rows += [[strip.game, label, seed, v, s.mean, s.lo, s.hi, len(values)] for seed, v in zip(seeds, values)]
        ax.set_xticks(range(len(strip.arms)), [label for label, _, _ in strip.arms])
        ax.set(title=strip.game, ylabel="evaluation return")
    return save(fig, out, "evaluation_by_seed", ["game", "label", "seed", "evaluation_return", "mean", "ci_low",
                                                 "ci_high", "n_runs"], rows)


def adapt_figure(panels: list[Panel], out):
    fig, axes = grid(len(panels), "Batch-size controller: mean over games and seeds, shaded min–max")
    rows = [row for ax, panel in zip(axes, panels) for row in draw_panel(ax, panel, UNITS[panel.title], panel.title)]
    return save(fig, out, "adapt", ["tag", "label", *BAND_COLUMNS], rows)


def adapt_by_game_figure(columns: list[tuple[Panel, Panel]], out):
    """The schedule's path per game, which adapt.png averages over games: for each ABS label, its divergence δ (top
    row) and its batch size (bottom row), mean over seeds, shaded min–max."""
    fig, axes = subplots(2, len(columns), figsize=(4.5 * len(columns), 6.8 + 0.4), squeeze=False)
    fig.suptitle("Batch-size controller per game:" + ("\n" if len(columns) == 1 else " ")  # one column: two lines
                 + "mean over seeds, shaded min–max")
    rows = []
    for col, panels in enumerate(columns):
        for row, (what, panel) in enumerate(zip(("divergence", "batch size"), panels)):
            rows += draw_panel(axes[row][col], panel, what=what)
    return save(fig, out, "adapt_by_game", ["game", "tag", "label", *BAND_COLUMNS], rows)


def by_game_grid_figure(panels: list[Panel], out, what: str):
    """One panel per game and one for the mean over games of a controller quantity, what = "divergence" (the
    paper's Figure 1: every run that measured one, ABS runs and fixed-batch runs with --track-divergence, which
    measure it without using it) or "batch size" (the ABS runs, on the whole range the runs may move in, so that "L
    stayed at L_min" shows): mean over seeds, shaded min-max; a dashed line in an ABS label's colour where its
    burn-in ends (mean over seeds). Any number of games (adapt_by_game_figure, two rows, stops at
    figure_data.ADAPT_BY_GAME_MAX)."""
    fig, axes = grid(len(panels), f"{what.capitalize()} per game: mean over seeds, min–max shaded;\n"
                     "dashed: an ABS label's burn-in ends")
    rows = [row for ax, panel in zip(axes, panels) for row in draw_panel(ax, panel, what=what)]
    name = "divergence_by_game" if what == "divergence" else "batch_size_by_game"
    return save(fig, out, name, ["game", "tag", "label", *BAND_COLUMNS], rows)


def improvement_figure(bars: tuple, out):
    """Bars of the paper's improvement rate per game, its mean and its median, one colour per compared pair."""
    games, rates = bars
    fig, ax = subplots(figsize=(max(6.0, 0.6 * len(games) * len(rates)), 4))
    width, rows = 0.8 / len(rates), []
    for i, ((a, b), vals) in enumerate(rates.items()):
        ax.bar(np.arange(len(games)) + (i - (len(rates) - 1) / 2) * width, vals, width, label=f"{a} over {b}")
        rows += [[g, a, b, v] for g, v in zip(games, vals)]
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(games)), games, rotation=45, ha="right")
    ax.set(xlabel="game", ylabel="improvement rate (%)", title="Improvement rate (s_A - s_B) / |s_B|")
    ax.legend()
    return save(fig, out, "improvement_rate", ["game", "reference", "other", "improvement_rate_percent"], rows)


def aggregate_figure(agg, out):
    labels = list(agg)
    fig, axes = subplots(1, 4, figsize=(16, 0.5 * len(labels) + 2))
    rows = []
    for k, (ax, name) in enumerate(zip(axes, AGGREGATES)):
        p = np.array([agg[lb]["point"][k] for lb in labels])
        lo = np.array([agg[lb]["lo"][k] for lb in labels])
        hi = np.array([agg[lb]["hi"][k] for lb in labels])
        ax.errorbar(p, np.arange(len(labels)), xerr=[np.maximum(p - lo, 0), np.maximum(hi - p, 0)],
                    fmt="o", capsize=4, label="95% CI")
        ax.set_yticks(np.arange(len(labels)), labels)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set(xlabel=f"{name} of human-normalised score", title=name)
        ax.legend(fontsize=8)
        rows += [[lb, name, p[i], lo[i], hi[i], agg[lb]["games"], agg[lb]["runs"]] for i, lb in enumerate(labels)]
    return save(fig, out, "aggregates", ["label", "metric", "point", "ci_low", "ci_high", "n_games", "n_runs"], rows)


def batch_claims_figure(a, colors: dict, out):
    """The aggregates of a pre-registered batch analysis (batch_claims.BatchAnalysis) across games: the IQM of each
    label's normalised score, and rliable's probability that a run of the reference label beats one of each fixed
    label, each with its 95% stratified bootstrap interval; 1 (the normaliser's mean) and 0.5 (no difference) marked."""
    ref, labels = a.plan.reference, [a.plan.reference, *a.plan.baselines]
    fig, axes = subplots(1, 2, figsize=(10, 0.5 * len(labels) + 2.2))
    used = [g for g in a.normalisers if g not in a.left_out]
    fig.suptitle(f"Across {len(used)} games" + (f" ({', '.join(a.left_out)} left out)" if a.left_out else "")
                 + ": point and 95% stratified bootstrap interval")
    rows = []
    for ax, metric, names, values, what, mark in (
            (axes[0], "IQM of normalised score", labels, [a.iqm[lb] for lb in labels],
             f"IQM of normalised score (1 = {a.plan.normaliser}'s mean)", 1.0),
            (axes[1], f"P({ref} > label)", [c.baseline for c in a.claims], [c.poi for c in a.claims],
             f"P({ref} > label): probability of improvement", 0.5)):
        p, lo, hi = (np.array(x, dtype=float) for x in zip(*values))
        for i, name in enumerate(names):
            ax.errorbar(p[i], i, xerr=[[max(p[i] - lo[i], 0)], [max(hi[i] - p[i], 0)]], fmt="o", capsize=4,
                        color=f"C{colors.get(name, 0)}")
        ax.axvline(mark, color="k", lw=0.8, ls="--")
        ax.set_yticks(np.arange(len(names)), names)
        ax.set_ylim(len(names) - 0.4, -0.6)  # the first name on top
        ax.set(xlabel=what)
        rows += [[name, metric, p[i], lo[i], hi[i]] for i, name in enumerate(names)]
    return save(fig, out, "batch_claims", ["label", "metric", "point", "ci_low", "ci_high"], rows)


def figures_section(fd: FigureData, agg: dict, out: Path, claims=None) -> list[str]:
    """Draw every figure of figure_data's into out, and that of a batch analysis's aggregates (claims, once they
    exist), and return the report's section that lists them."""
    figures = [learning_curves_figure(fd.learning, out)]
    if fd.learning_ci:
        figures.append(learning_ci_figure(fd.learning_ci, out) + ": the same curves with a Student-t 95% band over "
                       "the seeds in each step bin (the pre-registered analysis's figure, for reading)")
    if fd.strips:
        figures.append(evaluation_figure(fd.strips, out) + ": each seed's evaluation return per task and label, "
                       "with their mean and Student-t 95% CI (the pre-registered analysis's figure, for reading)")
    adapt = adapt_figure(fd.adapt, out) if fd.adapt else None
    figures.append(adapt or "no adapt/* tags in any run: no adapt figure")
    if adapt and fd.no_adapt:
        figures.append(f"no adapt/* tags for {', '.join(fd.no_adapt)} (fixed batch): not in `adapt.png`")
    if fd.by_game:
        figures.append(adapt_by_game_figure(fd.by_game, out) + ": the ABS runs' divergence and batch size, one column "
                       "per game")
    # Figure 1 of the paper where adapt_by_game does not show it (more games than its columns, or a fixed-batch run
    # that tracked the divergence it does not use), and each game's L beside it, marked where burn-in ends.
    if fd.divergence:
        figures.append(by_game_grid_figure(fd.divergence, out, "divergence") + ": the divergence of every run that "
                       "measured one (the paper's Figure 1), per game and its mean over games")
    if fd.sizes:
        figures.append(by_game_grid_figure(fd.sizes, out, "batch size") + ": the ABS runs' batch size per game and "
                       "its mean over games")
    if fd.bars:
        figures.append(improvement_figure(fd.bars, out))
    if agg:
        figures.append(aggregate_figure(agg, out))
    if claims is not None and claims.iqm:
        colors = {label: color for strip in fd.strips or () for label, color, _ in strip.arms}
        figures.append(batch_claims_figure(claims, colors, out) + ": the pre-registered analysis's aggregates across "
                       "games, the IQM of the normalised score per label and the probability of improvement of "
                       f"{claims.plan.reference} over each fixed label, with their 95% intervals")
    if fd.left:
        figures.append("not in the learning curves or the adapt figure (event files damaged or incomplete): "
                       + ", ".join(f"{r.label} {r.game} seed {r.seed}" for r in fd.left))
    return ["## Figures", ""] + [f"- {f}" for f in figures] + [""]
