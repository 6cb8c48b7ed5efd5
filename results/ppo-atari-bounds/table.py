#!/usr/bin/env python
"""The bounds table of docs/ppo-atari.md ("Choosing the divergence and its bounds"), one row per run, from the
adapt/* events of fixed-L runs of abs_ppo_atari.py with --track-divergence:

    python results/ppo-atari-bounds/table.py results/ppo-atari-bounds/runs/Breakout-fixed128 \
        results/ppo-atari-bounds/runs/Qbert-fixed128

Columns: the measurements and their first and last steps; the 10% / 50% / 90% quantiles of adapt/kl (numpy's
linear interpolation) and the range of adapt/kl_mean, the schedule's window mean; how many greedy-change
measurements (adapt/divergence) were exactly 0, in (0, 0.5) and at least 0.5; the range of the greedy change's
window mean, the mean --divergence greedy would schedule on; Pearson's correlation of the two per measurement.
Both ranges are over full windows, from the W-th measurement on (W = 10, the burn-in: the means before it move
no L).
"""
import sys
from pathlib import Path

import numpy as np

WINDOW = 10  # abs_ppo_atari.py's --window


def series(run_dir, tag) -> tuple[list[int], np.ndarray]:
    """(steps, values) of one scalar tag of a run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag)
    return [e.step for e in events], np.array([e.value for e in events], dtype=np.float64)


def window_means(values: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """The mean of the last `window` values after each measurement from the `window`-th on (full windows)."""
    return np.array([values[i + 1 - window: i + 1].mean() for i in range(window - 1, len(values))])


def row(run_dir) -> list[str]:
    """The table's cells for one run (the game's name is the run directory's, up to its first '-')."""
    steps, kl = series(run_dir, "adapt/kl")
    _, kl_mean = series(run_dir, "adapt/kl_mean")
    greedy_steps, greedy = series(run_dir, "adapt/divergence")
    assert greedy_steps == steps and len(kl_mean) == len(kl), f"{run_dir}: the adapt/* tags differ in their steps"
    q10, q50, q90 = np.quantile(kl, [0.1, 0.5, 0.9])
    greedy_bar, kl_bar = window_means(greedy), kl_mean[WINDOW - 1:]  # kl_mean: the scheduler's own mean
    assert np.allclose(kl_bar, window_means(kl), rtol=1e-5), f"{run_dir}: adapt/kl_mean is not the window mean"
    return [Path(run_dir).name.split("-")[0], f"{len(kl)} ({steps[0]:,}-{steps[-1]:,})",
            f"{q10:.5f} / {q50:.5f} / {q90:.5f}", f"{kl_bar.min():.5f}-{kl_bar.max():.5f}",
            f"{int((greedy == 0).sum())} / {int(((greedy > 0) & (greedy < 0.5)).sum())} / {int((greedy >= 0.5).sum())}",
            f"{greedy_bar.min():.2f}-{greedy_bar.max():.2f}", f"{np.corrcoef(kl, greedy)[0, 1]:.2f}"]


def main(argv=None) -> int:
    runs = sys.argv[1:] if argv is None else argv
    if not runs:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    print("| game | measurements | KL 10% / 50% / 90% | KL window mean | greedy 0 / (0, 0.5) / >= 0.5 "
          "| greedy window mean | corr |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in runs:
        print("| " + " | ".join(row(run_dir)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
