#!/usr/bin/env python
"""Runs side by side on one machine: do N runs share the cores, or fight over them?

    python bench/workers.py                  # PQN, 16 envs, about 4 minutes on 2 cores
    python bench/workers.py --num-envs 128   # the paper's setting

Three cases of the same PQN command, each run for --seconds and then stopped with SIGTERM (the script checkpoints
and exits 143): one run alone with the libraries' default thread counts; two at once with the default thread counts
(each takes every core, as `reproduce/sweep.py run --workers 2` started them before it divided the cores); two at
once with cores / 2 threads each for torch and envpool (`--torch-threads`, `--env-threads`; what the sweep now
gives every worker). A run's speed is its steady SPS (bench/throughput.py: the rate over the second half of its
steps). Writes a markdown table to stdout and, with --out, a JSON file.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import scalars, steady_sps  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def command(num_envs: int, out: Path, name: str, threads: int | None) -> list[str]:
    cmd = [sys.executable, "abs_pqn_atari.py", "--env-id", "Breakout-v5", "--num-envs", str(num_envs),
           "--no-adapt", "--num-steps", "32", "--total-timesteps", "100000000", "--eval-episodes", "0",
           "--checkpoint-every", "0", "--output-dir", str(out), "--run-name", name, "--log-every-seconds", "1000"]
    return cmd + ([] if threads is None else ["--torch-threads", str(threads), "--env-threads", str(threads)])


def measure(case: str, copies: int, threads: int | None, num_envs: int, seconds: float, out: Path) -> dict:
    """Start `copies` runs at once, stop them after `seconds`, and read each one's steady SPS."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    names = [f"{case}_{i}" for i in range(copies)]
    procs = [subprocess.Popen(command(num_envs, out, n, threads), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for n in names]
    time.sleep(seconds)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    codes = [p.wait(timeout=300) for p in procs]
    sps = []
    for name, code, p in zip(names, codes, procs):
        events = scalars(out / name).get("charts/SPS", [])
        if code not in (0, 143) or len(events) < 4:
            raise RuntimeError(f"{case}: run {name} exited {code} with {len(events)} SPS events: {p.stderr.read()}")
        sps.append(steady_sps(events))
    return {"case": case, "runs": copies, "threads": threads, "steady_sps": sps, "total": sum(sps),
            "command": shlex.join(command(num_envs, Path("OUT"), "NAME", threads)[1:])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--seconds", type=float, default=75.0, help="wall time of each case")
    p.add_argument("--out", help="write the measurements to this JSON file")
    a = p.parse_args(argv)
    if not (a.num_envs >= 1 and a.seconds >= 20):
        p.exit(2, "error: --num-envs must be >= 1 and --seconds >= 20\n")
    cores = len(os.sched_getaffinity(0))
    share = max(1, cores // 2)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure("alone, default threads", 1, None, a.num_envs, a.seconds, Path(tmp)),
                measure("two at once, default threads", 2, None, a.num_envs, a.seconds, Path(tmp)),
                measure(f"two at once, {share} thread(s) each", 2, share, a.num_envs, a.seconds, Path(tmp))]
    alone = rows[0]["total"]
    print(f"PQN Breakout-v5, {a.num_envs} envs, {cores} cores, {a.seconds:.0f} s per case; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| case | steady SPS of each run | sum | sum / alone |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {' + '.join(f'{s:.0f}' for s in r['steady_sps'])} | {r['total']:.0f} | "
              f"{r['total'] / alone:.2f} |")
    if a.out:
        Path(a.out).write_text(json.dumps({"num_envs": a.num_envs, "cores": cores, "seconds": a.seconds,
                                           "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
