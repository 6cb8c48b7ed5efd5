"""This project's PQN beside the PQN authors' own: abs_pqn_minatar.py's runs under gymnax's MinAtar conditions (the
`minatar-anchor` grid) set beside purejaxql's `pqn_minatar.py` on gymnax's games (the JSON files of
bench/minatar/purejaxql_run.py), per game: each seed's final greedy return, each side's mean with its Student-t
interval, the difference with Welch's interval and the exact permutation p, and the learning curves of both on one
figure (docs/minatar.md, "Beside purejaxql's own runs").

    python -m reproduce.anchor --ours results/minatar-anchor/runs/minatar-anchor/PQN \\
        --purejaxql results/minatar-anchor/purejaxql/*.json --out results/minatar-anchor

writes beside_purejaxql.md (the table and the decision per game, and, described beside them, each seed's training
return over the last 10% of the steps), beside_purejaxql.png with the CSV of each of its rows
(beside_purejaxql_curves.csv, beside_purejaxql_finals.csv).

What each side's numbers are:
- final return, ours: eval.mean of the run's eval_results.json, 100 greedy episodes each cut at 1,000 steps;
- final return, purejaxql's: its last greedy test (test/returned_episode_returns at the last update that ran one,
  every TEST_INTERVAL of the updates): 128 environments stepped 1,000 steps (gymnax's max_steps_in_episode) from a
  reset with epsilon 0, the mean return of the episodes that ended within them (an episode at the cap ends there; an
  environment whose episode ends early starts another, counted too if it ends within the 1,000 steps);
- the learning curves: ours `charts/episodic_return` (each finished training episode at its step); purejaxql's
  returned_episode_returns of each update (the mean over the update's steps and environments of each environment's
  latest finished episode, its LogWrapper) at its env_step; both binned into the same step bins, the mean over seeds
  with a min-max band; purejaxql's greedy tests over training as markers (the mean over seeds).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .cli import Parser
from .events import load_scalars
from .figures import plot_band, subplots, write_csv
from .runs import RETURN_TAG, find_runs
from .stats import curves_band, permutation_p, t_interval, welch_interval

OURS, THEIRS = "this project (abs_pqn_minatar.py)", "purejaxql (pqn_minatar.py)"
GAMES = ("Breakout-MinAtar", "Asterix-MinAtar")  # the comparison's games (docs/minatar.md), fixed before its runs
ALPHA = 0.05  # family-wise over GAMES: each game's interval is at level 1 - ALPHA / len(GAMES) (Bonferroni)
LATE = 0.1  # the training return's last fraction of the steps, described beside the outcome (not a test of the rule)


class AnchorError(ValueError):
    """Input the comparison cannot use (main: one line, exit 2)."""


class Side(NamedTuple):
    """One implementation's runs of one game: seed -> final greedy return, and seed -> (steps, training returns)."""
    finals: dict
    curves: dict
    tests: dict  # seed -> (steps, greedy test returns) over training (purejaxql's); empty for ours


class Gap(NamedTuple):
    game: str
    ours: tuple  # (mean, lo, hi): Student-t
    theirs: tuple
    diff: float  # mean(ours) - mean(theirs)
    lo: float  # Welch's interval at `level`
    hi: float
    level: float
    p: float  # exact two-sided permutation p
    decision: str


# ----------------------------------------------------------------------------- reading
def purejaxql_side(result: dict, where: str = "purejaxql's JSON") -> Side:
    """A purejaxql_run.py JSON's seeds as a Side: the final return is the last greedy test; the tests over training
    are the updates that ran one (every int(NUM_UPDATES * TEST_INTERVAL) updates, counted from 1)."""
    c = result["config"]
    updates = int(c["TOTAL_TIMESTEPS"]) // c["NUM_STEPS"] // c["NUM_ENVS"]
    every = int(updates * c["TEST_INTERVAL"])
    if not c.get("TEST_DURING_TRAINING", True) or every < 1:
        raise AnchorError(f"{where}: no greedy tests during training (TEST_DURING_TRAINING off, or fewer than "
                          f"1 / TEST_INTERVAL updates): written with --no-test, for speed only")
    finals, curves, tests = {}, {}, {}
    for seed, m in result["seeds"].items():
        steps = np.asarray(m["env_step"], dtype=float)
        test = np.asarray(m["test/returned_episode_returns"], dtype=float)
        ran = np.flatnonzero((np.arange(1, len(steps) + 1) % every) == 0)
        finals[int(seed)] = float(test[ran[-1]])
        curves[int(seed)] = (steps, np.asarray(m["returned_episode_returns"], dtype=float))
        tests[int(seed)] = (steps[ran], test[ran])
    return Side(finals, curves, tests)


def read_purejaxql(paths, total: int) -> dict:
    """game -> Side, from purejaxql_run.py's JSON files (one game each, of `total` steps)."""
    sides = {}
    for path in paths:
        try:
            result = json.loads(Path(path).read_text())
            game, steps = result["config"]["ENV_NAME"], int(result["config"]["TOTAL_TIMESTEPS"])
            if steps != total:
                raise AnchorError(f"--purejaxql {path}: its runs are of {steps:,} steps, not --total-timesteps "
                                  f"{total:,}")
            if game in sides:
                raise AnchorError(f"--purejaxql {path}: a second file of {game}: give one file per game")
            sides[game] = purejaxql_side(result, f"--purejaxql {path}")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, IndexError) as e:
            raise AnchorError(f"--purejaxql {path}: not a purejaxql_run.py JSON ({type(e).__name__}: {e})") from e
    return sides


def read_ours(root: Path, total: int) -> tuple[dict, list[str]]:
    """(game -> Side, notes), from the finished runs below root (eval_results.json and the event files) that ran
    all of `total` steps; the others are noted, left out."""
    runs, notes = find_runs("ours", root)
    sides = {}
    for r in sorted(runs, key=lambda r: (r.game, r.seed)):
        if not r.complete or r.total_timesteps != total:
            notes.append(f"`{r.path}`: a run of {r.total_timesteps:,} steps{'' if r.complete else ', stopped early'}, "
                         f"not of {total:,}: left out")
            continue
        side = sides.setdefault(r.env_id, Side({}, {}, {}))
        if r.seed in side.finals:
            raise AnchorError(f"--ours {root}: two runs of {r.env_id} seed {r.seed}: keep one")
        side.finals[r.seed] = r.score
        side.curves[r.seed] = load_scalars(r.path, [RETURN_TAG]).get(RETURN_TAG, ([], []))
    return sides, notes


# ----------------------------------------------------------------------------- statistics
def gap(game: str, ours: dict, theirs: dict, games: int = len(GAMES)) -> Gap:
    """The difference of the final returns, ours - theirs, with Welch's interval at the level that keeps the
    family-wise error over `games` games at ALPHA: a gap beyond seed noise when the interval leaves out 0; one that
    holds 0 means that these seeds cannot tell the two apart (not that they are equal)."""
    a, b = list(ours.values()), list(theirs.values())
    level = 1 - ALPHA / games
    diff, lo, hi, _ = welch_interval(a, b, level)
    p, _, _ = permutation_p(a, b)
    decision = ("not decided: fewer than 2 seeds on a side" if min(len(a), len(b)) < 2 else
                "not decided: no spread on either side, no interval" if not np.isfinite(lo) else
                "beyond seed noise: ours higher" if lo > 0 else
                "beyond seed noise: ours lower" if hi < 0 else
                f"not told apart by {len(a)} + {len(b)} seeds (interval {hi - lo:,.1f} wide)")
    return Gap(game, t_interval(a), t_interval(b), diff, lo, hi, level, p, decision)


def late_training(curves: dict, end: float) -> dict:
    """seed -> the mean training return logged over the last LATE of the steps (step > (1 - LATE) * end): each side's
    own statistic (ours per finished episode, purejaxql's per update), so a description, not the rule's outcome."""
    late = {}
    for seed, (steps, values) in curves.items():
        steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
        keep = steps > (1 - LATE) * end
        late[seed] = float(values[keep].mean()) if keep.any() else float("nan")
    return late


def greedy_test_means(tests: dict) -> tuple:
    """(steps, mean over seeds) of the greedy tests over training (every seed tests at the same updates)."""
    steps = next(iter(tests.values()))[0]
    return steps, np.mean([v for _, v in tests.values()], axis=0)


# ----------------------------------------------------------------------------- formatting and drawing
def fmt(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:,.2f}"


def interval(t: tuple) -> str:
    return f"{fmt(t[0])} [{fmt(t[1])}, {fmt(t[2])}]"


def table(gaps: list[Gap], ours: dict, theirs: dict) -> list[str]:
    level = gaps[0].level if gaps else 1 - ALPHA
    md = [f"| game | {OURS}: seeds | mean [95% t] | {THEIRS}: seeds | mean [95% t] | ours - theirs "
          f"[Welch {100 * level:g}%] | permutation p | decision |", "|---|---|---|---|---|---|---|---|"]
    for g in gaps:
        seeds = [", ".join(f"{fmt(v)}" for _, v in sorted(side[g.game].finals.items())) for side in (ours, theirs)]
        md.append(f"| {g.game} | {seeds[0]} | {interval(g.ours)} | {seeds[1]} | {interval(g.theirs)} | "
                  f"{fmt(g.diff)} [{fmt(g.lo)}, {fmt(g.hi)}] | {g.p:.2f} | {g.decision} |")
    return md


def late_table(games: list[str], ours: dict, theirs: dict, end: float) -> list[str]:
    """Per game, each side's training return over the last LATE of the steps per seed, and the difference with
    Welch's 95% interval, uncorrected: how far apart the curves end, against their seeds' spread."""
    md = [f"| game | {OURS}: seeds | mean | {THEIRS}: seeds | mean | ours - theirs [Welch 95%] |",
          "|---|---|---|---|---|---|"]
    for game in games:
        a, b = (late_training(side[game].curves, end) for side in (ours, theirs))
        diff, lo, hi, _ = welch_interval(list(a.values()), list(b.values()), 0.95)
        cells = [f"{', '.join(fmt(v) for _, v in sorted(x.items()))} | {fmt(np.mean(list(x.values())))}"
                 for x in (a, b)]
        md.append(f"| {game} | {cells[0]} | {cells[1]} | {fmt(diff)} [{fmt(lo)}, {fmt(hi)}] |")
    return md


def figure(games: list[str], ours: dict, theirs: dict, end: float, bins: int, out: Path) -> None:
    """Top row: per game, both learning curves and purejaxql's greedy tests; bottom row: each seed's final greedy
    return, ours and purejaxql's, with each side's mean."""
    fig, axes = subplots(2, len(games), figsize=(5.5 * len(games), 7.5), squeeze=False)
    fig.suptitle("PQN, gymnax's MinAtar conditions:\nthis project beside purejaxql")
    curve_rows, final_rows = [], []
    for col, game in enumerate(games):
        top, bottom = axes[0][col], axes[1][col]
        for i, (name, side) in enumerate(((OURS, ours[game]), (THEIRS, theirs[game]))):
            c = curves_band([(st, v, end) for st, v in side.curves.values()], end, bins, hold=False)
            plot_band(top, f"{name}, training", f"C{i}", c)
            curve_rows += [[game, name, *map(float, x[:4]), int(x[4])] for x in zip(*c)]
            seeds = sorted(side.finals)
            values = [side.finals[s] for s in seeds]
            bottom.scatter(np.full(len(values), i) + np.linspace(-0.1, 0.1, len(values)), values, color=f"C{i}")
            bottom.plot([i - 0.2, i + 0.2], [np.mean(values)] * 2, color=f"C{i}")
            late = late_training(side.curves, end)
            final_rows += [[game, name, s, v, late[s]] for s, v in zip(seeds, values)]
        steps, means = greedy_test_means(theirs[game].tests)
        top.plot(steps, means, "s", color="C1", markersize=4, label=f"{THEIRS}, greedy test")
        top.plot([end] * len(ours[game].finals), list(ours[game].finals.values()), "o", color="C0", markersize=5,
                 label=f"{OURS}, final greedy (each seed)")
        top.set(title=f"{game}: training return (mean over seeds,\nmin–max shaded) and greedy returns",
                xlabel="environment steps", ylabel="episodic return")
        top.legend(fontsize=7)
        bottom.set_xticks([0, 1], ["this project", "purejaxql"])
        bottom.set_xlim(-0.6, 1.6)
        bottom.set(ylabel="final greedy return (each seed; line: mean)")
    fig.tight_layout()
    fig.savefig(out / "beside_purejaxql.png", dpi=100)
    write_csv(out / "beside_purejaxql_curves.csv", ["game", "implementation", "step", "mean", "min", "max", "n_runs"],
              curve_rows)
    write_csv(out / "beside_purejaxql_finals.csv", ["game", "implementation", "seed", "final_greedy_return",
                                                    "late_training_return"], final_rows)


def write(ours_root: Path, purejaxql: list, out: Path, end: int, bins: int) -> Path:
    (ours, notes), theirs = read_ours(ours_root, end), read_purejaxql(purejaxql, end)
    games = [g for g in GAMES if g in ours and g in theirs]
    if not games:
        raise AnchorError(f"no game of {', '.join(GAMES)} has runs on both sides yet (ours: "
                          f"{', '.join(sorted(ours)) or 'none'}; purejaxql's: {', '.join(sorted(theirs)) or 'none'})")
    gaps = [gap(g, ours[g].finals, theirs[g].finals) for g in games]
    out.mkdir(parents=True, exist_ok=True)
    figure(games, ours, theirs, end, bins, out)
    waiting = [f"{g} ({'ours' if g in ours else 'purejaxql' if g in theirs else 'neither'} only)"
               for g in GAMES if g not in games]
    md = ["# PQN beside purejaxql's", "", "Written by `python -m reproduce.anchor` (docs/minatar.md, \"Beside "
          "purejaxql's own runs\"). Final greedy return per seed: ours the mean of 100 episodes cut at 1,000 steps, "
          "purejaxql's its last greedy test (128 environments for 1,000 steps). Each game's interval of the "
          f"difference is Welch's at {100 * (1 - ALPHA / len(GAMES)):g}% (Bonferroni over the comparison's "
          f"{len(GAMES)} games); the permutation p is exact (with 3 seeds a side it cannot be below 0.10).", "",
          *table(gaps, ours, theirs), "",
          f"The training return over the last {100 * LATE:g}% of the steps, per seed (each side's own statistic: "
          "ours each finished episode, purejaxql's each update's mean of every environment's latest episode), "
          "described beside the outcome, not a test of the rule:", "", *late_table(games, ours, theirs, end), ""]
    if waiting:
        md += [f"Waiting for runs on both sides: {', '.join(waiting)}.", ""]
    others = sorted((set(ours) | set(theirs)) - set(GAMES))
    if others or notes:
        md += [f"Not in the comparison: {'; '.join([*(f'{g} (not one of its games)' for g in others), *notes])}.",
               ""]
    md += ["Figure: `beside_purejaxql.png` (data: `beside_purejaxql_curves.csv`, `beside_purejaxql_finals.csv`).", ""]
    (out / "beside_purejaxql.md").write_text("\n".join(md))
    return out / "beside_purejaxql.md"


def main(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
               name="anchor.py")
    p.add_argument("--ours", required=True, help="the minatar-anchor runs (their eval_results.json and events)")
    p.add_argument("--purejaxql", nargs="+", required=True, help="bench/minatar/purejaxql_run.py's JSON files")
    p.add_argument("--out", default="beside-purejaxql", help="the directory to write the table and figure into")
    p.add_argument("--total-timesteps", type=int, default=10_000_000,
                   help="the runs' length: runs of another length are left out (ours) or refused (purejaxql's)")
    p.add_argument("--bins", type=int, default=50, help="step bins of the curves")
    a = p.parse_args(argv)
    if not Path(a.ours).is_dir():
        p.error(f"--ours {a.ours}: not a directory")
    for f in a.purejaxql:
        if not Path(f).is_file():
            p.error(f"--purejaxql {f}: no such file")
    if a.bins < 1 or a.total_timesteps <= 0:
        p.error("--bins and --total-timesteps: must be positive")
    try:
        print(f"wrote {write(Path(a.ours), a.purejaxql, Path(a.out), a.total_timesteps, a.bins)}")
    except AnchorError as e:
        p.error(str(e))


if __name__ == "__main__":
    main()
