#!/usr/bin/env python
"""Steady speed of abs_pqn_minatar.py on one CPU core, split into its phases, beside purejaxql's PQN on that core.

    python bench/minatar/speed.py --core 1 [--steps 600000] [--purejaxql PATH --jax-python PY] [--out DIR]

Each row is a real run of the script (`--torch-threads 1 --eval-episodes 0`), pinned to --core: steady steps/s over
the second half of its steps (from the wall times of its charts/SPS events, as bench/throughput.py reads them) and the
seconds of each phase (perf/*_seconds: env = the games' own Python, inference = acting, update = the Q(lambda)
targets and the gradient steps, adapt = measuring the divergence). Rows: Vanilla (L = 32) and ABS on Breakout and
Space Invaders (the fastest and the slowest game to simulate); ABS runs at L_min = 16 for its first W x K = 500
iterations (1,024,000 steps), so a shorter run measures its burn-in, which has twice the gradient steps per
transition of L = 32; Large (L = 64) gives the other end. The env-only row is random actions through the same
MinAtarEnvs: the ceiling the games set. With --purejaxql (a checkout of github.com/mttga/purejaxql) and --jax-python
(a Python with its JAX stack), bench/minatar/purejaxql_run.py times purejaxql's pqn_minatar on gymnax's games on the
same core, without its test episodes, compiled ahead (compile seconds apart). Nothing else should run meanwhile.
Writes speed.json and speed.md to --out (default bench/minatar).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
GAMES = ("Breakout-MinAtar", "SpaceInvaders-MinAtar")
LABELS = {"Vanilla (L = 32)": ["--no-adapt", "--num-steps", "32"], "ABS (burn-in, L = 16)": [],
          "Large (L = 64)": ["--no-adapt", "--num-steps", "64"]}
PHASES = ("env", "inference", "update", "adapt")


def pinned(core):
    return lambda: os.sched_setaffinity(0, {core})


def script_row(game, flags, steps, core):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(ROOT / "abs_pqn_minatar.py"), "--env-id", game, *flags, "--total-timesteps",
               str(steps), "--torch-threads", "1", "--eval-episodes", "0", "--checkpoint-every", "0", "--no-cuda",
               "--output-dir", out, "--run-name", "r", "--log-every-seconds", "30"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, preexec_fn=pinned(core), stdout=subprocess.DEVNULL,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - t0
        acc = EventAccumulator(str(Path(out) / "r"), size_guidance={"scalars": 0})
        acc.Reload()
        sps = acc.Scalars("charts/SPS")
        last = sps[-1]
        half = [e for e in sps if e.step >= last.step / 2]
        steady = (last.step - half[0].step) / (last.wall_time - half[0].wall_time)
        phases = {p: acc.Scalars(f"perf/{p}_seconds")[-1].value for p in PHASES
                  if f"perf/{p}_seconds" in acc.Tags()["scalars"]}
    return {"steps": last.step, "steady_sps": steady, "wall_seconds": wall, "phases": phases,
            "minutes_per_10M": 1e7 / steady / 60}


def env_only_row(game, steps, core):
    code = ("import sys, time, numpy as np; sys.path.insert(0, sys.argv[1]); import abs_pqn_minatar as m; "
            "e = m.MinAtarEnvs(sys.argv[2], 128, 1); e.reset(); r = np.random.default_rng(0); "
            "n = int(sys.argv[3]) // 128; "
            "t = time.perf_counter(); [e.step(r.integers(0, e.action_space.n, 128)) for _ in range(n)]; "
            "print(n * 128 / (time.perf_counter() - t))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), game, str(steps)], check=True, capture_output=True,
                         text=True, preexec_fn=pinned(core))
    return {"steady_sps": float(out.stdout.strip())}


def purejaxql_row(game, steps, core, purejaxql, python):
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "pj.json"
        subprocess.run([python, str(HERE / "purejaxql_run.py"), "--purejaxql", purejaxql, "--env", game,
                        "--total-timesteps", str(steps), "--no-test", "--out", str(path)], check=True,
                       preexec_fn=pinned(core), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = json.loads(path.read_text())
    seed = next(iter(r["seeds"].values()))
    return {"steps": seed["steps"], "steady_sps": seed["steps"] / seed["run_seconds"],
            "compile_seconds": seed["compile_seconds"], "jax": r["jax"],
            "minutes_per_10M": 1e7 / (seed["steps"] / seed["run_seconds"]) / 60}


def table(rows):
    md = ["| game | row | steady steps/s | ratio to purejaxql | minutes per 10M steps "
          "| env / inference / update / adapt s |", "|---|---|---|---|---|---|"]
    for game in GAMES:
        ref = rows.get(f"{game}|purejaxql (L = 32)", {}).get("steady_sps")
        for key, r in rows.items():
            g, label = key.split("|")
            if g != game:
                continue
            ratio = f"{r['steady_sps'] / ref:.2f}" if ref else "-"
            minutes = f"{r['minutes_per_10M']:.1f}" if "minutes_per_10M" in r else "-"
            phases = " / ".join(f"{r['phases'].get(p, 0):.0f}" for p in PHASES) if "phases" in r else "-"
            md.append(f"| {g} | {label} | {r['steady_sps']:,.0f} | {ratio} | {minutes} | {phases} |")
    return md


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--core", type=int, default=0, help="the CPU core every run is pinned to (default 0)")
    p.add_argument("--steps", type=int, default=600_000, help="environment steps of each script run")
    p.add_argument("--purejaxql", help="a checkout of github.com/mttga/purejaxql")
    p.add_argument("--jax-python", help="a Python with purejaxql's JAX stack")
    p.add_argument("--purejaxql-steps", type=int, default=262_144, help="environment steps of each purejaxql run")
    p.add_argument("--out", type=Path, default=HERE)
    a = p.parse_args()
    if bool(a.purejaxql) != bool(a.jax_python):
        p.error("--purejaxql and --jax-python go together")
    rows = {}
    for game in GAMES:
        rows[f"{game}|env only (random actions)"] = env_only_row(game, 256_000, a.core)
        if a.purejaxql:
            rows[f"{game}|purejaxql (L = 32)"] = purejaxql_row(game, a.purejaxql_steps, a.core, a.purejaxql,
                                                                a.jax_python)
        for label, flags in LABELS.items():
            rows[f"{game}|{label}"] = script_row(game, flags, a.steps, a.core)
        print("\n".join(table(rows)), flush=True)
    meta = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "core": a.core,
            "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "")}
    (a.out / "speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (a.out / "speed.md").write_text("\n".join([f"`{meta['command']}` ({meta['date']}, {meta['cpu']}, core "
                                               f"{a.core})", "", *table(rows)]) + "\n")


if __name__ == "__main__":
    main()
