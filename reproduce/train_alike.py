"""Do two commits of a training script train alike? The same tiny runs at each commit, every logged number compared.

    python -m reproduce.train_alike 3a05cee a33334c 0c283d3
    python -m reproduce.train_alike 3a05cee HEAD --script abs_btr.py

A grid that runs for days can span commits of this project. Its runs are one experiment only if each commit trains
as the others do; this tool shows it. For each commit it extracts the tree (`git archive`, nothing is checked out),
runs the same short runs of `--script` (default abs_pqn_atari.py; every training script has its tiny setup in SETUPS:
Breakout for the Atari scripts, Breakout-MinAtar, InvertedPendulum-v5) with each case's flags (one torch thread and
one envpool thread, on the CPU, seed 1), and compares them with the first commit's runs:

- every scalar of the TensorBoard events, step by step and bit for bit, except the wall-clock ones (`*SPS*`,
  `*_seconds`),
- the evaluation's games (`eval_results.json`: the step reached, each game's return and length), and
- the checkpoint each run ends with, bit for bit, but for its flags and timings: the state a resume starts from.
  A resume takes its algorithm flags from the checkpoint, so a run stopped at one commit and resumed at another
  goes on with the first commit's flags and the second's code; a default changed between the commits shows only
  where these short runs use it.

Cases (--cases): `abs` (the adaptive batch: for PQN + ABS, L in [4, 16], K = 2, W = 2; gns_pqn_atari.py's GNS
controller), `vanilla` (a fixed batch, measuring the divergence it does not use where the script can), `resumed` (the
`abs` run stopped half-way by --stop-at-step and resumed from its checkpoint: this is how a grid's runs continue
after a machine stops). A commit whose flags differ from these cannot be compared here.

Prints a table, one row per commit and one column per case ("same" or the first difference), and exits 0 when every
run is the same as the first commit's, 1 when one differs, 2 on bad input (before anything is created), 3 when a run
failed (its log named, and every run kept), 143 on SIGTERM (the temporary runs removed). The runs stay in --out when it
is given.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from .cli import Parser
from .events import read_run_events

ATARI_EVAL = ["--eval-episodes", "4", "--eval-num-envs", "2", "--eval-max-episode-steps", "200"]
PQN_CASES = {"abs": ["--num-steps-min", "4", "--num-steps-max", "16", "--adapt-freq", "2", "--window", "2"],
             "vanilla": ["--no-adapt", "--num-steps", "8", "--track-divergence", "--adapt-freq", "2"]}
# script -> (the flags of its every run: a tiny network or batch, 4 evaluation games; each case's flags)
SETUPS = {
    "abs_pqn_atari.py": (["--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--env-threads", "1",
                          *ATARI_EVAL], PQN_CASES),
    "gns_pqn_atari.py": (["--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--env-threads", "1",
                          *ATARI_EVAL],
                         {"abs": ["--num-steps-min", "1", "--num-steps-max", "8", "--gns-freq", "2",
                                  "--gns-micro-batches", "2"],
                          "vanilla": ["--no-adapt", "--num-steps", "8"]}),
    "abs_ppo_atari.py": (["--env-id", "Breakout-v5", "--num-envs", "4", "--num-minibatches", "2", "--update-epochs",
                          "1", "--epochs-ref-steps", "8", "--env-threads", "1", *ATARI_EVAL],
                         {"abs": ["--num-steps-min", "4", "--num-steps-max", "16", "--adapt-freq", "2", "--window", "2",
                                  "--kl-low", "1e-7", "--kl-high", "0.1"],
                          "vanilla": ["--no-adapt", "--num-steps", "8", "--track-divergence", "--adapt-freq", "2"]}),
    "abs_ppo_mujoco.py": (["--env-id", "InvertedPendulum-v5", "--num-minibatches", "4", "--eval-episodes", "4"],
                          {"abs": ["--num-steps-min", "64", "--num-steps-max", "256", "--adapt-freq", "2", "--window",
                                   "2"],
                           "vanilla": ["--no-adapt", "--num-steps", "128", "--track-divergence", "--adapt-freq",
                                       "2"]}),
    "abs_btr.py": (["--env-id", "Breakout-v5", "--num-envs", "8", "--buffer-size", "4096", "--learning-starts", "400",
                    "--no-impala", "--hidden-size", "16", "--num-cosines", "16", "--exploration-steps", "400",
                    "--target-network-frequency", "10", "--env-threads", "1", *ATARI_EVAL],
                   {"abs": ["--batch-size-min", "32", "--batch-size-max", "64", "--ref-batch-size", "64",
                            "--adapt-freq", "2", "--divergence-span", "1", "--window", "2"],
                    "vanilla": ["--no-adapt", "--batch-size", "32", "--track-divergence", "--adapt-freq", "2",
                                "--divergence-span", "1"]}),
    "abs_pqn_minatar.py": (["--env-id", "Breakout-MinAtar", "--num-envs", "8", "--num-minibatches", "2",
                            *ATARI_EVAL], PQN_CASES),
}
CASES = ("abs", "vanilla", "resumed")  # resumed: the abs run, stopped half-way and resumed


def common_flags(script: str, steps: int) -> list[str]:
    """The flags every run of `script` shares: its setup, a short prefix (--stop-at-step) of a longer schedule,
    checkpoints, one thread each."""
    return [*SETUPS[script][0], "--seed", "1", "--total-timesteps", str(4 * steps), "--torch-threads", "1",
            "--no-cuda", "--log-every-seconds", "0", "--checkpoint-every", str(max(1, steps // 3))]


def case_flags(script: str, case: str) -> list[str]:
    return SETUPS[script][1]["abs" if case == "resumed" else case]


def is_wall_clock(tag: str) -> bool:
    return "SPS" in tag or tag.endswith("_seconds")


# top-level keys not compared: the flags, the timings, and the digest of the whole file (which covers the timings)
CHECKPOINT_SKIP = {"args", "perf", "train_seconds", "digest"}


def checkpoint_difference(x, y, where: str = "") -> str | None:
    """The first place where two checkpoints' contents differ (tensors bit for bit), None if nowhere: the state a
    resume starts from (weights, optimiser, random generators, the schedule's state), without the flags (which hold
    paths, and any flag a later commit added) and the timings."""
    if isinstance(x, dict) and isinstance(y, dict):
        skip = CHECKPOINT_SKIP if not where else set()
        keys, other = set(x) - skip, set(y) - skip
        if keys != other:
            return f"{where or 'top level'}: keys only in one: {', '.join(sorted(map(str, keys ^ other)))}"
        return next((d for k in sorted(keys, key=str)
                     if (d := checkpoint_difference(x[k], y[k], f"{where}/{k}")) is not None), None)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and len(x) == len(y):
        return next((d for i, (u, v) in enumerate(zip(x, y))
                     if (d := checkpoint_difference(u, v, f"{where}[{i}]")) is not None), None)
    if torch.is_tensor(x) and torch.is_tensor(y):  # bit for bit (torch.equal would call two NaNs different)
        def raw(t):
            return t.detach().contiguous().reshape(-1).view(torch.uint8)
        same = x.dtype == y.dtype and x.shape == y.shape and torch.equal(raw(x), raw(y))
        return None if same else where
    same = type(x) is type(y) and (x == y or (isinstance(x, float) and x != x and y != y))  # NaN is NaN here
    return None if same else where


def compare(a: Path, b: Path) -> str:
    """'same (T tags, P points, G games, checkpoint)' when run b logged and evaluated exactly what run a did and
    ended with the same checkpoint, else the first difference."""
    sa, sb = (read_run_events(d)[1] for d in (a, b))
    ta, tb = ({t for t in s if not is_wall_clock(t)} for s in (sa, sb))
    if ta != tb:
        return f"differs: tags only in one run: {', '.join(sorted(ta ^ tb))}"
    points = 0
    for tag in sorted(ta):
        (xa, ya), (xb, yb) = sa[tag], sb[tag]
        if len(xa) != len(xb) or not np.array_equal(xa, xb):
            return f"differs: {tag} logged at other steps ({len(xa)} vs {len(xb)} points)"
        bad = np.flatnonzero(~((ya == yb) | (np.isnan(ya) & np.isnan(yb))))
        if len(bad):
            i = bad[0]
            return f"differs: {tag} at step {xa[i]:.0f}: {float(ya[i])!r} vs {float(yb[i])!r}"
        points += len(xa)
    ea, eb = (json.loads((d / "eval_results.json").read_text()) for d in (a, b))
    if ea["global_step"] != eb["global_step"]:
        return f"differs: global_step {ea['global_step']} vs {eb['global_step']}"
    for key in ("returns", "lengths"):
        if ea["eval"][key] != eb["eval"][key]:
            return f"differs: evaluation {key} {ea['eval'][key]} vs {eb['eval'][key]}"
    ca, cb = (d / "checkpoint.pt" for d in (a, b))
    if ca.exists() != cb.exists():
        return "differs: a checkpoint in only one run"
    if ca.exists():
        where = checkpoint_difference(*(torch.load(c, map_location="cpu", weights_only=True) for c in (ca, cb)))
        if where is not None:
            return f"differs: checkpoint {where}"
    return (f"same ({len(ta)} tags, {points} points, {len(ea['eval']['returns'])} games"
            + (", checkpoint)" if ca.exists() else ")"))


def run(tree: Path, out: Path, script: str, case: str, steps: int) -> None:
    """Train one case of `script` at the commit extracted in `tree`; its run directory is out/case."""
    def train(extra: list[str], log: str) -> None:
        cmd = [sys.executable, script, *common_flags(script, steps), *case_flags(script, case), "--output-dir",
               str(out), "--run-name", case, *extra]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        with open(out / log, "w") as f:
            res = subprocess.run(cmd, cwd=tree, stdout=f, stderr=subprocess.STDOUT, env=env)
        if res.returncode:
            raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode} (log: {out / log})")
    if case == "resumed":
        train(["--stop-at-step", str(steps // 2)], f"{case}-first.log")
        train(["--resume", str(out / case / "checkpoint.pt"), "--stop-at-step", str(steps)], f"{case}.log")
    else:
        train(["--stop-at-step", str(steps)], f"{case}.log")


def parse(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n\n")[0], name="train_alike.py")
    p.add_argument("commits", nargs="+", help="two or more commits; each is compared with the first")
    p.add_argument("--script", choices=list(SETUPS), default="abs_pqn_atari.py", help="the training script compared")
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="the runs to compare")
    p.add_argument("--steps", type=int, default=6000, help="environment steps per run (of a 4x longer schedule)")
    p.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1], help="the git repository")
    p.add_argument("--out", type=Path, help="keep the runs here (a new directory); default: a temporary one")
    a = p.parse_args(argv)
    if len(a.commits) < 2:
        p.error("give two or more commits")
    if a.steps < 512:
        p.error(f"--steps must be at least 512, got {a.steps}")
    if a.out is not None and a.out.exists():
        p.error(f"--out {a.out} exists: give a new directory")
    a.out = a.out.resolve() if a.out is not None else None  # the runs start in each commit's tree
    a.cases = list(dict.fromkeys(a.cases))
    if subprocess.run(["git", "-C", str(a.repo), "rev-parse", "--git-dir"], capture_output=True).returncode:
        p.error(f"--repo {a.repo} is not a git repository")
    a.shas = []
    for c in a.commits:
        res = subprocess.run(["git", "-C", str(a.repo), "rev-parse", "--verify", "--quiet", "--short=12",
                              f"{c}^{{commit}}"], capture_output=True, text=True)
        if res.returncode:
            p.error(f"commits: {c!r} is not a commit of {a.repo}")
        if subprocess.run(["git", "-C", str(a.repo), "cat-file", "-e", f"{c}:{a.script}"],
                          capture_output=True).returncode:
            p.error(f"commits: {c!r} has no {a.script}")
        a.shas.append(res.stdout.strip())
    return a


def _stop(signum, frame):
    """SIGTERM (a job's end, `kill`) unwinds like Ctrl-C: subprocess.run kills the run in progress, and the temporary
    copies of the commits (about 65 MB each) are removed on the way out."""
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    a = parse(argv)
    signal.signal(signal.SIGTERM, _stop)
    work = a.out or Path(tempfile.mkdtemp(prefix="train_alike_"))
    work.mkdir(parents=True, exist_ok=True)
    failed = False
    try:
        dirs = []
        for i, (c, sha) in enumerate(zip(a.commits, a.shas)):
            # by position: the same commit may be given twice (is its training deterministic?)
            commit_dir = work / f"{i + 1}-{sha}"
            tree, out = commit_dir / "tree", commit_dir / "runs"
            tree.mkdir(parents=True)
            out.mkdir()
            archive = subprocess.run(["git", "-C", str(a.repo), "archive", sha], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            for case in a.cases:
                print(f"training {case} at {c} ...", flush=True)
                try:
                    run(tree, out, a.script, case, a.steps)
                except RuntimeError as e:  # a run that failed: its log is kept, with every other run
                    failed = True
                    print(f"train_alike.py: {e}", file=sys.stderr)
                    return 3
            dirs.append(out)
        env = SETUPS[a.script][0][1]
        print(f"\n{a.script}, {env}, {a.steps} steps per run; each commit against {a.commits[0]} ({a.shas[0]}):\n")
        print("| commit | " + " | ".join(a.cases) + " |")
        print("|---|" + "---|" * len(a.cases))
        differs = False
        for c, out in zip(a.commits[1:], dirs[1:]):
            cells = [compare(dirs[0] / case, out / case) for case in a.cases]
            differs |= any(not cell.startswith("same") for cell in cells)
            print(f"| {c} | " + " | ".join(cells) + " |")
        return 1 if differs else 0
    finally:
        if a.out is None and not failed:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
