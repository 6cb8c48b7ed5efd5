"""The report's figures: each a PNG with a CSV of the plotted data beside it (save), and the section that lists
them. Curves are binned across runs (stats.binned, stats.band) and drawn as a mean line with a min-max band."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from measures import AGGREGATES, divergence_tag, is_abs_run, runs_of, size_tag  # noqa: E402
from runs import DIVERGENCE_TAGS, RETURN_TAG, SIZE_TAGS, Run  # noqa: E402
from stats import band, binned, finite, held  # noqa: E402

UNITS = {"adapt/divergence": "divergence δ (fraction of\ngreedy actions changed)",
         "adapt/kl": "divergence δ = KL (nats)",
         "adapt/divergence_ess": "divergence δ = 1 - ESS/n\n(policy ratios)",
         "adapt/num_steps": "rollout length L (steps per env)",
         "adapt/batch_size": "batch size (transitions per update)"}
BAND_COLUMNS = ["step", "mean", "min", "max", "n_runs"]
ADAPT_BY_GAME_MAX = 6  # games: past this a panel per game is unreadable (Atari: 57), adapt.png alone is drawn


def write_csv(path: Path, header, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])


def save(fig, out: Path, name: str, header, rows) -> str:
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=100)
    plt.close(fig)
    write_csv(out / f"{name}.csv", header, rows)
    return f"`{name}.png` (data: `{name}.csv`)"


def grid(n: int, title: str, w=4.5, h=3.4):
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows + 0.4), squeeze=False)
    fig.suptitle(title)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def curve_rows(runs: list[Run], tag: str, bins: int):
    """Binned across-run band of one tag: (step, mean, min, max, n) arrays, empty bins removed. A controller tag
    (the divergence, L or the batch size: measured every K iterations, and holding in between) keeps each run's
    latest measured value in the bins it did not measure in, up to the bin where the run ended (stats.held), so
    that every bin averages every run that has started measuring."""
    runs = [r for r in runs if tag in r.scalars and len(r.scalars[tag][0])]
    if not runs:
        return None
    end = max(max(r.total_steps for r in runs), max(r.scalars[tag][0].max() for r in runs))
    edges = np.linspace(0, end, bins + 1)
    curves = [binned(*r.scalars[tag], edges) for r in runs]
    if tag in (*DIVERGENCE_TAGS, *SIZE_TAGS):  # held to the run's end, or its last measurement if that is later
        last = [int(np.clip(np.digitize(max(r.total_steps, r.scalars[tag][0].max()), edges[1:-1]), 0, bins - 1))
                for r in runs]
        curves = [held(c, k) for c, k in zip(curves, last)]
    mean, lo, hi, n = band(curves)
    keep = n > 0
    return (0.5 * (edges[1:] + edges[:-1]))[keep], mean[keep], lo[keep], hi[keep], n[keep]


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



def band_rows(ax, runs: list[Run], tag: str, bins: int, label: str, color: str, key=()) -> list[list] | None:
    """Draw the runs' binned band of one tag (curve_rows, plot_band) and return its CSV rows, [*key, label, step,
    mean, min, max, n_runs] per bin; None when no run logged the tag (nothing drawn)."""
    c = curve_rows(runs, tag, bins)
    if c is None:
        return None
    plot_band(ax, label, color, c)
    return [[*key, label, *map(float, x[:4]), int(x[4])] for x in zip(*c)]


def learning_curves_figure(data, games, out, bins):
    games = [g for g in games if any(g in d for d in data.values())]
    fig, axes = grid(len(games), "Learning curves: mean over seeds, shaded min–max")
    rows = []
    for ax, game in zip(axes, games):
        for i, (lb, by_game) in enumerate(data.items()):  # one colour per label in every panel
            rows += band_rows(ax, list(by_game.get(game, {}).values()), RETURN_TAG, bins, lb, f"C{i}", [game]) or []
        ax.set(title=game, xlabel="environment steps", ylabel="training episodic return")
        legend_or_note(ax, f"no {RETURN_TAG} events")
    return save(fig, out, "learning_curves", ["game", "label", *BAND_COLUMNS], rows)


def adapt_figure(data, out, bins):
    panels = [tag for tag in (*DIVERGENCE_TAGS, *SIZE_TAGS)
              if any(tag in r.scalars for d in data.values() for g in d.values() for r in g.values())]
    if not panels:
        return None
    fig, axes = grid(len(panels), "Batch-size controller: mean over games and seeds, shaded min–max")
    rows = []
    for ax, tag in zip(axes, panels):
        for i, (lb, by_game) in enumerate(data.items()):
            rows += band_rows(ax, [r for g in by_game.values() for r in g.values()], tag, bins, lb, f"C{i}",
                              [tag]) or []
        ax.set(title=tag, xlabel="environment steps", ylabel=UNITS[tag])
        legend_or_note(ax, f"no {tag} events")
    return save(fig, out, "adapt", ["tag", "label", *BAND_COLUMNS], rows)


def adapt_by_game_figure(data, games, out, bins):
    """The schedule's path per game, which adapt.png averages over games: for each ABS label (is_abs_run), its
    divergence δ (top row) and its batch size (bottom row), mean over seeds, shaded min–max. None with more than
    ADAPT_BY_GAME_MAX games or no ABS run."""
    abs_runs = {lb: {g: [r for r in by_game.get(g, {}).values() if is_abs_run(r)] for g in games}
                for lb, by_game in data.items()}
    games = [g for g in games if any(by_game[g] for by_game in abs_runs.values())]
    if not games or len(games) > ADAPT_BY_GAME_MAX:
        return None
    fig, axes = plt.subplots(2, len(games), figsize=(4.5 * len(games), 6.8 + 0.4), squeeze=False)
    fig.suptitle("Batch-size controller per game:" + ("\n" if len(games) == 1 else " ")  # one column: two lines
                 + "mean over seeds, shaded min–max")
    rows = []
    for col, game in enumerate(games):
        for row, (what, tag_of) in enumerate((("divergence", divergence_tag), ("batch size", size_tag))):
            ax, units = axes[row][col], set()
            for i, lb in enumerate(data):  # the colours of the other figures: one per label, in label order
                runs = abs_runs[lb][game]
                for tag in sorted({tag_of(r) for r in runs} - {None}):
                    drawn = band_rows(ax, [r for r in runs if tag_of(r) == tag], tag, bins, lb, f"C{i}", [game, tag])
                    if drawn is not None:
                        units.add(UNITS[tag])
                        rows += drawn
            ax.set(title=f"{game}: {what}", xlabel="environment steps",
                   ylabel=units.pop() if len(units) == 1 else what)
            legend_or_note(ax, f"no {what} events")
    return save(fig, out, "adapt_by_game", ["game", "tag", "label", *BAND_COLUMNS], rows)


def size_range(runs: list[Run]) -> tuple:
    """(lowest minimum, highest maximum) of the batch-size ranges the runs' flags allow (--num-steps-min/max, or
    BTR's --batch-size-min/max), or (None, None) when none of them names one."""
    lows = [r.args.get("num_steps_min", r.args.get("batch_size_min")) for r in runs]
    highs = [r.args.get("num_steps_max", r.args.get("batch_size_max")) for r in runs]
    lows, highs = [v for v in lows if v is not None], [v for v in highs if v is not None]
    return (min(lows), max(highs)) if lows and highs else (None, None)


def by_game_grid_figure(data, games, out, bins, what: str, burn=None):
    """One panel per game and one for the mean over games of a controller quantity, what = "divergence" (the
    paper's Figure 1: every run that measured one, ABS runs and fixed-batch runs with --track-divergence, which
    measure it without using it) or "batch size" (the ABS runs, is_abs_run): mean over seeds, shaded min-max; a
    dashed line in an ABS label's colour where its burn-in ends (burn: measures.burn_in's, mean over seeds). Any
    number of games (adapt_by_game_figure, two rows, stops at ADAPT_BY_GAME_MAX). None when no run logged it."""
    tag_of, keep = (divergence_tag, lambda r: True) if what == "divergence" else (size_tag, is_abs_run)
    runs = {lb: {g: [r for r in by_game.get(g, {}).values() if keep(r) and tag_of(r)] for g in games}
            for lb, by_game in data.items()}
    games = [g for g in games if any(by_lb[g] for by_lb in runs.values())]
    if not games:
        return None
    fig, axes = grid(len(games) + 1, f"{what.capitalize()} per game: mean over seeds, min–max shaded;\n"
                     "dashed: an ABS label's burn-in ends")
    rows = []
    for ax, game in zip(axes, [*games, "mean over games"]):
        units = set()
        for i, lb in enumerate(data):  # the colours of the other figures: one per label, in label order
            panel = [r for g in (games if game == "mean over games" else [game]) for r in runs[lb][g]]
            for tag in sorted({tag_of(r) for r in panel}):
                drawn = band_rows(ax, [r for r in panel if tag_of(r) == tag], tag, bins, lb, f"C{i}", [game, tag])
                if drawn is not None:
                    units.add(UNITS[tag])
                    rows += drawn
            ends = [v.end for g in (games if game == "mean over games" else [game])
                    for v in (burn or {}).get((g, lb), {}).values() if np.isfinite(v.end)]
            if ends and panel:
                ax.axvline(float(np.mean(ends)), color=f"C{i}", ls="--", lw=1)
        ax.set(title=game, xlabel="environment steps", ylabel=units.pop() if len(units) == 1 else what)
        if what == "batch size":  # the whole range the runs may move in, so that "L stayed at L_min" shows
            panel = [r for lb in runs for g in (games if game == "mean over games" else [game]) for r in runs[lb][g]]
            lo, hi = size_range(panel)
            if lo is not None and hi > lo:
                ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
        legend_or_note(ax, f"no {what} events")
    name = "divergence_by_game" if what == "divergence" else "batch_size_by_game"
    return save(fig, out, name, ["game", "tag", "label", *BAND_COLUMNS], rows)


def improvement_figure(rates, out):
    """Bars of the paper's improvement rate per game, its mean and its median, one colour per compared pair."""
    games = sorted({g for r in rates.values() for g in r["paper"]}) + ["mean", "median"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(games) * len(rates)), 4))
    width, rows = 0.8 / len(rates), []
    for i, ((a, b), r) in enumerate(rates.items()):
        p = r["paper"]
        vals = [100 * p.get(g, np.nan) for g in games[:-2]] + [100 * finite(np.mean, p.values()),
                                                               100 * finite(np.median, p.values())]
        ax.bar(np.arange(len(games)) + (i - (len(rates) - 1) / 2) * width, vals, width, label=f"{a} over {b}")
        rows += [[g, a, b, v] for g, v in zip(games, vals)]
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(games)), games, rotation=45, ha="right")
    ax.set(xlabel="game", ylabel="improvement rate (%)", title="Improvement rate (s_A - s_B) / |s_B|")
    ax.legend()
    return save(fig, out, "improvement_rate", ["game", "reference", "other", "improvement_rate_percent"], rows)


def aggregate_figure(agg, out):
    labels = list(agg)
    fig, axes = plt.subplots(1, 4, figsize=(16, 0.5 * len(labels) + 2))
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


def figures_section(data, games, agg, rates, out, bins, burn=None) -> list[str]:
    """Draw every figure the data allows into out, and return the report's section that lists them."""
    figures = [learning_curves_figure(data, games, out, bins)]
    adapt = adapt_figure(data, out, bins)
    figures.append(adapt or "no adapt/* tags in any run: no adapt figure")
    no_adapt = [lb for lb, d in data.items() if d and not any(
        t in r.scalars for g in d.values() for r in g.values() for t in (*DIVERGENCE_TAGS, *SIZE_TAGS))]
    if adapt and no_adapt:
        figures.append(f"no adapt/* tags for {', '.join(no_adapt)} (fixed batch): not in `adapt.png`")
    by_game = adapt_by_game_figure(data, games, out, bins)
    if by_game:
        figures.append(by_game + ": the ABS runs' divergence and batch size, one column per game")
    # Figure 1 of the paper where adapt_by_game does not show it: more games than its columns, or a fixed-batch
    # run that tracked the divergence it does not use (--track-divergence); then also the ABS runs' L per game,
    # marked where their burn-in ends as the divergence panels are.
    tracked = any(divergence_tag(r) and not is_abs_run(r) for r in runs_of(data, games))
    if tracked or not by_game:
        divergence = by_game_grid_figure(data, games, out, bins, "divergence", burn)
        if divergence:
            figures.append(divergence + ": the divergence of every run that measured one (the paper's Figure 1), "
                           "per game and its mean over games")
    if tracked or not by_game:  # Figure 1's companion: each game's L, with the same burn-in marks
        sizes = by_game_grid_figure(data, games, out, bins, "batch size", burn)
        if sizes:
            figures.append(sizes + ": the ABS runs' batch size per game and its mean over games")
    if rates:
        figures.append(improvement_figure(rates, out))
    if agg:
        figures.append(aggregate_figure(agg, out))
    left = [r for r in runs_of(data, games) if r.event_problems]
    if left:
        figures.append("not in the learning curves or the adapt figure (event files damaged or incomplete): "
                       + ", ".join(f"{r.label} {r.game} seed {r.seed}" for r in left))
    return ["## Figures", ""] + [f"- {f}" for f in figures] + [""]


