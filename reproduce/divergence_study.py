"""KL against delta_ESS as the PPO + ABS divergence: traces, rollout lengths and returns (docs/study-mujoco-ess.md).

    python -m reproduce.divergence_study --runs KL=results/mujoco-1m/runs/mujoco/PPO+ABS \\
        ESS=results/mujoco-ess-1m/runs/mujoco-ess/PPO+ABS-ESS --games HalfCheetah-v4 Hopper-v4 --out study/

Every `eval_results.json` below a labelled directory is one finished run of `abs_ppo_mujoco.py`, as in report.py.
PPO logs both divergences (`adapt/kl`, `adapt/divergence_ess`) whichever one its schedule uses, and one
`losses/*` event per PPO iteration at the global step after it, so the rollout length L of every iteration is
the difference of consecutive steps. Writes `study.md` (one row per run and a mean per label), `divergence.png`
(both divergences over training, and against each other per measurement), `rollout.png` (L per iteration) and
`returns.png` (training returns), each with a CSV of the plotted data.

Runs are found and checked as the report finds them (runs.py), and their event files read record by record with
the report's damage checks (events.py): a run whose event file is cut or corrupted, or whose events end before
the run did, is left out and named in the notes, never counted as a shorter run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from .cli import Parser
from .events import load_run_events
from .figure_data import curve_band
from .figures import band_rows, grid, legend_or_note, plot_band, save, subplots
from .measures import final_training_return
from .runs import RETURN_TAG, add_run, find_runs, out_problem
from .tables import fmt, md_table

KL, ESS, ITERATION = "adapt/kl", "adapt/divergence_ess", "losses/policy_loss"


def rollout_lengths(iteration_steps) -> np.ndarray:
    """L of each PPO iteration from the global steps logged after it (the first iteration started at step 0)."""
    steps = np.asarray(iteration_steps, dtype=float)
    return np.diff(np.concatenate([[0.0], steps]))


def ratio_stats(kl, ess) -> dict:
    """delta_ESS / KL per measurement (median, 10% and 90% quantiles), their correlation and medians; measurements
    whose KL is not positive (the policy did not move, or a burn-in zero) are left out of the ratio."""
    kl, ess = np.asarray(kl, dtype=float), np.asarray(ess, dtype=float)
    keep = (kl > 0) & np.isfinite(kl) & np.isfinite(ess)
    if not keep.any():
        return {"n": 0, "median": np.nan, "q10": np.nan, "q90": np.nan, "corr": np.nan, "kl": np.nan, "ess": np.nan}
    q10, median, q90 = np.quantile(ess[keep] / kl[keep], [0.1, 0.5, 0.9])
    corr = np.corrcoef(kl[keep], ess[keep])[0, 1] if keep.sum() > 1 else np.nan
    return {"n": int(keep.sum()), "median": median, "q10": q10, "q90": q90, "corr": corr,
            "kl": float(np.median(kl[keep])), "ess": float(np.median(ess[keep]))}


def length_at(steps, lengths, fraction: float) -> float:
    """L of the iteration running when the run had done `fraction` of its steps (the last iteration's L at 1)."""
    steps = np.asarray(steps, dtype=float)
    return float(lengths[min(int(np.searchsorted(steps, fraction * steps[-1])), len(steps) - 1)])


def paired(kl_series, ess_series):
    """(steps, kl, ess) at the steps where both were logged (a run resumed across script versions may lack one)."""
    steps, i, j = np.intersect1d(kl_series[0], ess_series[0], return_indices=True)
    return steps, kl_series[1][i], ess_series[1][j]


def unexpected_lengths(lengths, args: dict) -> np.ndarray:
    """The iteration lengths no run with these flags can have (events lost between two checkpoints' flushes)."""
    lo, hi = (args.get("num_steps_min"), args.get("num_steps_max")) if args.get("adapt", True) else (
        args.get("num_steps"), args.get("num_steps"))
    if lo is None or hi is None:
        return np.array([])
    return np.asarray(lengths)[(lengths < lo) | (lengths > hi)]


def load(label: str, root: Path, games, seeds, last: int) -> tuple[list[dict], list[str]]:
    """The runs below root of the games and seeds asked for (all when empty), each with its iterations, rollout
    lengths, final training return and divergences, and notes on what was skipped or left out."""
    found, notes = find_runs(label, root)
    notes = [f"{label}: skipped {n}" for n in notes]
    kept = {}
    for run in found:
        if not (games and run.env_id not in games) and not (seeds and run.seed not in seeds):
            add_run(kept, (run.env_id, run.seed), run, run.env_id, notes)
    out = []
    for run in kept.values():
        args = run.args
        load_run_events(run, [KL, ESS, ITERATION, RETURN_TAG])
        notes += [f"{label}: {n}" for n in run.event_notes]
        if run.event_problems:
            notes += [f"{label}: left out (event files damaged or incomplete): {p}" for p in run.event_problems]
            continue
        if ITERATION not in run.scalars:
            notes.append(f"{label}: skipped `{run.path}`: no {ITERATION} events (not an abs_ppo_mujoco.py run?)")
            continue
        steps = run.scalars[ITERATION][0]
        lengths = rollout_lengths(steps) / args.get("num_envs", 1)  # per environment, as --num-steps
        odd = unexpected_lengths(lengths, args)
        if len(odd):
            notes.append(f"{label}: `{run.path}` has {len(odd)} iteration(s) of a length its flags cannot give "
                         f"({', '.join(f'{x:g}' for x in odd[:3])}): events are missing, its L and iterations are "
                         "not reliable")
        both = paired(run.scalars[KL], run.scalars[ESS]) if KL in run.scalars and ESS in run.scalars else None
        out.append({"run": run, "divergence": args.get("divergence", "kl") if args.get("adapt", True) else "none",
                    "steps": steps, "L": lengths, "final": final_training_return(run, last),
                    "pairs": both, "ratio": ratio_stats(*both[1:]) if both else None,
                    "bounds": {"kl": (args.get("kl_low"), args.get("kl_high")),
                               "ess": (args.get("ess_low"), args.get("ess_high"))}})
    return out, notes


def run_row(r: dict) -> list[str]:
    run, q = r["run"], r["ratio"] if r["ratio"] and r["ratio"]["n"] else None
    ratio = [f"{q['median']:.2f} [{q['q10']:.2f}, {q['q90']:.2f}]", f"{q['corr']:.3f}" if q["n"] > 1 else "–",
             fmt(q["kl"]), fmt(q["ess"])] if q else ["not logged", "–", "–", "–"]
    return [run.env_id, run.label, str(run.seed), f"{run.total_steps:,}", r["divergence"], fmt(run.score),
            fmt(r["final"]), str(len(r["L"])), f"{np.mean(r['L']):.0f}",
            *(f"{length_at(r['steps'], r['L'], f):.0f}" for f in (0.25, 0.5, 1.0)), *ratio]


HEADER = ["task", "label", "seed", "steps", "schedule on", "evaluation return", "final training return",
          "PPO iterations", "mean L", "L at 25%", "L at 50%", "L at the end", "delta_ESS / KL median [10%, 90%]",
          "corr", "median KL", "median delta_ESS"]


def mean_rows(data: dict[str, list[dict]], games) -> list[list[str]]:
    rows = []
    for game in games:
        for label, rs in data.items():
            rs = [r for r in rs if r["run"].env_id == game]
            if rs:
                rows.append([game, label, str(len(rs)), fmt(np.mean([r["run"].score for r in rs])),
                             fmt(np.mean([r["final"] for r in rs])), f"{np.mean([len(r['L']) for r in rs]):.1f}",
                             f"{np.mean([np.mean(r['L']) for r in rs]):.0f}"])
    return rows


def panels(games, title):
    fig, axes = grid(len(games), title)
    return fig, dict(zip(games, axes))


def divergence_figure(data, games, out: Path) -> str:
    """Top: the KL (solid) and delta_ESS (dashed) over training, for each label's lowest seed that logs both, with
    the lower bounds --kl-low and --ess-low (grey); bottom: delta_ESS against the KL, every measurement."""
    fig, axes = subplots(2, len(games), figsize=(4.5 * len(games), 7.2), squeeze=False)
    fig.suptitle("The KL and delta_ESS of the same policy updates (one measurement every K-th iteration)")
    top, bottom = dict(zip(games, axes[0])), dict(zip(games, axes[1]))
    rows, traced = [], set()
    for i, (label, rs) in enumerate(data.items()):
        for r in sorted((r for r in rs if r["ratio"] is not None), key=lambda r: r["run"].seed):
            run = r["run"]
            steps, kl, ess = r["pairs"]
            rows += [[run.env_id, label, run.seed, int(s), float(k), float(e)] for s, k, e in zip(steps, kl, ess)]
            bottom[run.env_id].scatter(kl, ess, s=10, color=f"C{i}", marker="os^v"[(run.seed - 1) % 4], alpha=0.7,
                                       label=f"{label} seed {run.seed}")
            if (run.env_id, label) not in traced:
                traced.add((run.env_id, label))
                ax = top[run.env_id]
                ax.plot(steps, kl, color=f"C{i}", label=f"{label} seed {run.seed}: KL")
                ax.plot(steps, ess, color=f"C{i}", ls="--", label=f"{label} seed {run.seed}: delta_ESS")
                for bound, ls in zip((r["bounds"]["kl"][0], r["bounds"]["ess"][0]), ("-", "--")):
                    if bound is not None and r["divergence"] != "none":
                        ax.axhline(bound, color="grey", lw=0.8, ls=ls)
    for game in games:
        top[game].set(title=game, xlabel="environment steps", ylabel="divergence")
        legend_or_note(top[game], "no run logs both divergences")
        lim = np.array(bottom[game].get_xlim())
        bottom[game].plot(lim, 2 * lim, "k:", lw=1, label="delta_ESS = 2 KL")
        bottom[game].set(xlabel="KL(pi_new || pi_snapshot), nats", ylabel="delta_ESS = 1 - ESS/n")
        bottom[game].legend(fontsize=7)
    return save(fig, out, "divergence", ["task", "label", "seed", "step", "kl", "divergence_ess"], rows)


def rollout_figure(data, games, out: Path) -> str:
    fig, ax_of = panels(games, "Rollout length L of every PPO iteration")
    rows, named = [], set()
    for i, (label, rs) in enumerate(data.items()):
        for r in rs:  # one line per run, one legend entry per label
            first = (r["run"].env_id, label) not in named
            named.add((r["run"].env_id, label))
            ax_of[r["run"].env_id].step(r["steps"], r["L"], where="post", color=f"C{i}", alpha=0.8, lw=1,
                                        label=f"{label} ({sum(x['run'].env_id == r['run'].env_id for x in rs)} "
                                        "runs)" if first else None)
            rows += [[r["run"].env_id, label, r["run"].seed, int(s), int(n)] for s, n in zip(r["steps"], r["L"])]
    for game, ax in ax_of.items():
        ax.set(title=game, xlabel="environment steps", ylabel="L (steps per environment per rollout)")
        legend_or_note(ax, "no runs")
    return save(fig, out, "rollout", ["task", "label", "seed", "step", "num_steps"], rows)


def returns_figure(data, games, out: Path, bins: int) -> str:
    fig, ax_of = panels(games, "Training returns: mean over seeds, shaded min–max")
    rows = []
    for i, (label, rs) in enumerate(data.items()):
        for game in games:
            curve = curve_band([r["run"] for r in rs if r["run"].env_id == game], RETURN_TAG, bins)
            if curve is not None:
                plot_band(ax_of[game], label, f"C{i}", curve)
                rows += band_rows((game,), label, curve)
    for game, ax in ax_of.items():
        ax.set(title=game, xlabel="environment steps", ylabel="training episodic return")
        legend_or_note(ax, "no runs")
    return save(fig, out, "returns", ["task", "label", "step", "mean", "min", "max", "n_runs"], rows)


def write_study(data, games, notes, out: Path, args) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    runs = sorted((r for rs in data.values() for r in rs),
                  key=lambda r: (games.index(r["run"].env_id), list(data).index(r["run"].label), r["run"].seed))
    lines = ["# KL against delta_ESS for the PPO + ABS schedule", "",
             "Runs: " + ", ".join(f"{label} = `{root}`" for label, root in args.runs.items()) + ".", "",
             f"Evaluation return: the run's mean over its evaluation episodes; final training return: the mean of "
             f"its last {args.last_games} training games. L: the rollout length of a PPO iteration per environment "
             "(the steps between consecutive `losses/*` events over --num-envs); mean L: over the iterations. "
             "delta_ESS / KL: per ABS measurement, on the runs that log both.", "", "## Per run", "",
             md_table(HEADER, [run_row(r) for r in runs]), "",
             "## Mean over seeds", "",
             md_table(["task", "label", "runs", "evaluation return", "final training return", "PPO iterations",
                       "mean L"], mean_rows(data, games)), "", "## Figures", ""]
    lines += [f"- {divergence_figure(data, games, out)}", f"- {rollout_figure(data, games, out)}",
              f"- {returns_figure(data, games, out, args.bins)}"]
    lines += ["", "## Notes", "", *(f"- {n}" for n in notes)] if notes else []
    path = out / "study.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def parse_args(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
               name="divergence_study.py")
    p.add_argument("--runs", nargs="+", required=True, metavar="LABEL=DIR",
                   help="labelled directories searched recursively for eval_results.json")
    p.add_argument("--games", nargs="+", default=[], help="env ids to keep (default: every one found)")
    p.add_argument("--seeds", nargs="+", type=int, default=[], help="seeds to keep (default: every one found)")
    p.add_argument("--out", default="study", help="output directory (study.md, PNG + CSV figures)")
    p.add_argument("--bins", type=int, default=50, help="step bins of the return curves")
    p.add_argument("--last-games", type=int, default=100, help="final training return: mean of the last N games")
    args = p.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, sep, d = item.partition("=")
        if not sep or not label or label in runs or not d:  # (an empty DIR would be the working directory)
            p.error(f"--runs: expected distinct LABEL=DIR entries, got {item!r}")
        if not Path(d).is_dir():
            p.error(f"--runs: {d!r} is not a directory")
        runs[label] = Path(d)
    if args.bins < 1 or args.last_games < 1:
        p.error("--bins and --last-games must be positive")
    args.runs = runs
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    problem = out_problem(Path(args.out))
    if problem:
        print(f"divergence_study.py: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    data, notes = {}, []
    for label, root in args.runs.items():
        data[label], label_notes = load(label, root, set(args.games), set(args.seeds), args.last_games)
        notes += label_notes
    found = sorted({r["run"].env_id for rs in data.values() for r in rs})
    games = [g for g in dict.fromkeys(args.games) if g in found] if args.games else found
    if not games:
        wanted = " ".join(f"{flag} {' '.join(map(str, v))}" for flag, v in (("--games", args.games),
                                                                          ("--seeds", args.seeds)) if v)
        # the runs skipped or left out are named, as study.md's notes would: a damaged run is not a missing one
        print("divergence_study.py: no finished abs_ppo_mujoco.py runs" + (f" matching {wanted}" if wanted else "")
              + " under " + ", ".join(map(str, args.runs.values())) + "".join(f"\n- {n}" for n in notes),
              file=sys.stderr)
        return 1
    notes += [f"--games {g}: no run under any label" for g in dict.fromkeys(args.games) if g not in found]
    notes += [f"{label}: no run of {', '.join(games)}" for label, rs in data.items() if not rs]
    print(f"wrote {write_study(data, games, notes, Path(args.out), args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
