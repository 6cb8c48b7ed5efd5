#!/usr/bin/env python
"""Speed and memory of the training scripts, measured as real processes.

    python bench/throughput.py --quick      # a few minutes on 2 CPU cores
    python bench/throughput.py              # sized for a GPU box (paper settings, longer runs)
    python bench/throughput.py --groups pqn-gpu btr-gpu --budget 300   # the GPU call of bench/gpu/check.sh

Variants of one group (PQN fixed / ABS / GNS, PPO fixed / ABS, PPO-Atari fixed / ABS, BTR fixed / ABS) run at
the same settings and alternate round by round, so that drift of a shared machine hits them alike. Two columns
of speed: "SPS" is the script's own whole-run figure (start-up, burn-in and compilation included);
"steady SPS" is the rate over the second half of the run's steps, from the wall times of its
charts/SPS events, which is what an hours-long run sees. Both are medians over rounds, and a row's
ratio is its steady SPS over that of its group's first row measured in the same rounds.
The speed groups (pqn-speed, btr-speed) compare the --bf16 / --compile flags with float32 eager; the GPU
groups (pqn-gpu, btr-gpu) put the paper-setting rows of both into one group each; ppo-threads compares PPO's
default --torch-threads 1 with 2 threads.
With --budget the whole benchmark keeps to a number of seconds: each run gets its shares (a --compile
run three, a BTR run two, any other one; rounds are dropped if a share would be under 10 s) and is stopped
with SIGTERM when they are used up and its training loop has started (the scripts checkpoint and exit 143;
its SPS events count, its peak CUDA memory, logged only at a normal end, is missing; SIGKILL 60 s after
the SIGTERM, or after the share if the loop has not started by then). A run whose loop has printed its last
step is not sent SIGTERM: it is in its end-of-run work, and is left to end (SIGKILL 60 s after the share).
A stopped run that printed progress keeps a speed whatever its exit: its SPS events, or, where a hard stop
left none on disk, its last progress line (steps and SPS, no phase split).
A run stopped short of its steps gives the next round's run of that variant 85% of the steps it reached, so
later rounds end normally within their share. A run that would start with less than half its share left is
skipped.
An environment-only row (random actions through the same envpool setup) is the ceiling.
Writes bench/results.md and bench/results.json (or --out DIR).
"""
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reproduce package: the tools' output-directory check and parser
from reproduce.cli import Parser  # noqa: E402
from reproduce.runs import out_problem  # noqa: E402

GROUPS = ("pqn", "ppo", "ppo-atari", "btr", "pqn-speed", "btr-speed", "pqn-gpu", "btr-gpu", "ppo-threads")
MAX_ROUNDS = 100  # --rounds: every round runs every variant once (minutes each); more is a typo, not a benchmark
MIN_SHARE = 10.0  # --budget: seconds of one share (a PQN run) below which rounds are dropped
PERF_TAGS = ("perf/env_seconds", "perf/inference_seconds", "perf/update_seconds", "perf/adapt_seconds",
             "perf/replay_seconds")  # replay: BTR only


def configs(quick: bool) -> dict:
    """group -> list of (variant name, script, flags); the first variant of a group is its baseline."""
    if quick:  # 2 CPU cores: small envs and short runs; K smaller than the paper's so it is exercised
        pqn = "--env-id Breakout-v5 --num-envs 16 --num-minibatches 4 --total-timesteps 16384"
        K = 10
        ppo = "--env-id HalfCheetah-v5 --total-timesteps 8192 --num-steps-min 1024 --num-steps-max 2048"
        ppo_fixed = "--env-id HalfCheetah-v5 --total-timesteps 16384 --no-adapt --num-steps 2048"  # 8 iterations
        # CleanRL's PPO-Atari settings, K = 2 (of 10) so that 8 iterations of 1,024 steps measure 4 times
        ppo_atari, K_ppo = "--env-id Breakout-v5 --total-timesteps 8192", 2
        # K and M shrunk with the batch so that measuring costs ~5x its paper share (as PQN's K=10 does)
        btr = ("--env-id Breakout-v5 --num-envs 8 --buffer-size 16384 --learning-starts 1000 --total-timesteps 3000 "
               "--no-impala --hidden-size 64 --batch-size-min 64 --batch-size-max 128 --batch-size 64 "
               "--adapt-freq 100 --ref-batch-size 512")
    else:  # paper settings
        pqn = "--env-id Breakout-v5 --num-envs 128 --total-timesteps 2000000"
        K = 50
        ppo = "--env-id HalfCheetah-v5 --total-timesteps 200000"
        ppo_fixed = "--env-id HalfCheetah-v5 --total-timesteps 200000 --no-adapt --num-steps 2048"
        ppo_atari, K_ppo = "--env-id Breakout-v5 --total-timesteps 200000", 10
        # the default network, batch 256 / ABS [128, 512]; learning starts early so a short run is mostly learning
        btr = "--env-id Breakout-v5 --buffer-size 262144 --learning-starts 10000 --total-timesteps 120000"
    pinned = f"{pqn} --adapt-freq {K} --num-steps-min 32 --num-steps-max 32"
    return {
        "pqn": [("PQN fixed L=32", "abs_pqn_atari.py", f"{pqn} --no-adapt --num-steps 32"),
                ("PQN + ABS, L pinned at 32", "abs_pqn_atari.py", pinned),
                ("PQN + ABS, L in [16, 64]", "abs_pqn_atari.py", f"{pqn} --adapt-freq {K}"),
                ("PQN + GNS, L pinned at 32", "gns_pqn_atari.py",
                 f"{pqn} --gns-freq {K} --num-steps-min 32 --num-steps-max 32")],
        "ppo": [("PPO fixed L=2048", "abs_ppo_mujoco.py", f"{ppo} --no-adapt --num-steps 2048"),
                ("PPO + ABS", "abs_ppo_mujoco.py", ppo)],
        "ppo-atari": [("PPO Atari fixed L=128", "abs_ppo_atari.py", f"{ppo_atari} --no-adapt --num-steps 128"),
                      ("PPO Atari + ABS, L pinned at 128", "abs_ppo_atari.py",
                       f"{ppo_atari} --adapt-freq {K_ppo} --num-steps-min 128 --num-steps-max 128"),
                      ("PPO Atari + ABS, L in [64, 256]", "abs_ppo_atari.py", f"{ppo_atari} --adapt-freq {K_ppo}")],
        "btr": [("BTR fixed batch", "abs_btr.py", f"{btr} --no-adapt"),
                ("BTR + ABS", "abs_btr.py", btr)],
        "pqn-speed": [("PQN + ABS (L pinned at 32), float32 eager", "abs_pqn_atari.py", pinned),
                      ("PQN + ABS --bf16", "abs_pqn_atari.py", f"{pinned} --bf16"),
                      ("PQN + ABS --compile", "abs_pqn_atari.py", f"{pinned} --compile"),
                      ("PQN + ABS --bf16 --compile", "abs_pqn_atari.py", f"{pinned} --bf16 --compile")],
        "btr-speed": [("BTR + ABS, float32", "abs_btr.py", btr),
                      ("BTR + ABS --bf16", "abs_btr.py", f"{btr} --bf16")],
        # One group per script family for the GPU call (bench/gpu/check.sh): the rows above that matter there.
        "pqn-gpu": [("PQN fixed L=32", "abs_pqn_atari.py", f"{pqn} --no-adapt --num-steps 32"),
                    ("PQN + ABS, L pinned at 32", "abs_pqn_atari.py", pinned),
                    ("PQN + ABS, L in [16, 64]", "abs_pqn_atari.py", f"{pqn} --adapt-freq {K}"),
                    ("PQN + GNS, L pinned at 32", "gns_pqn_atari.py",
                     f"{pqn} --gns-freq {K} --num-steps-min 32 --num-steps-max 32"),
                    ("PQN + ABS --bf16", "abs_pqn_atari.py", f"{pinned} --bf16"),
                    ("PQN + ABS --compile", "abs_pqn_atari.py", f"{pinned} --compile")],
        "btr-gpu": [("BTR fixed batch", "abs_btr.py", f"{btr} --no-adapt"),
                    ("BTR + ABS", "abs_btr.py", btr),
                    ("BTR + ABS --bf16", "abs_btr.py", f"{btr} --bf16")],
        # PPO's default --torch-threads 1 against 2 threads, alternating (docs/running.md)
        "ppo-threads": [("PPO fixed L=2048, 1 torch thread", "abs_ppo_mujoco.py", f"{ppo_fixed} --torch-threads 1"),
                        ("PPO fixed L=2048, 2 torch threads", "abs_ppo_mujoco.py", f"{ppo_fixed} --torch-threads 2")],
    }


def weight(script: str, flags: str) -> int:
    """A run's share of a --budget: compilation and BTR's slow start need longer runs for a steady rate."""
    return 3 if "--compile" in flags.split() else 2 if script == "abs_btr.py" else 1


def scalars(run_dir: Path) -> dict:
    """tag -> [(step, value, wall_time)]"""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value, e.wall_time) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def steady_sps(events: list) -> float | None:
    """Steps per second over the second half of a run's steps, from (step, value, wall_time) events."""
    last_step, last_time = events[-1][0], events[-1][2]
    half = [(s, w) for s, _, w in events if s >= last_step / 2]
    if len(half) < 2 or last_time <= half[0][1]:
        return None
    return (last_step - half[0][0]) / (last_time - half[0][1])


def scaled(flags: str, scale: float) -> list[str]:
    """The flags with --total-timesteps multiplied by scale (for a smoke run of the benchmark itself)."""
    words = shlex.split(flags)
    i = words.index("--total-timesteps") + 1
    words[i] = str(max(1, int(int(words[i]) * scale)))
    return words


def with_steps(words: list[str], steps: int) -> list[str]:
    """The flag words with --total-timesteps set to steps."""
    words = list(words)
    words[words.index("--total-timesteps") + 1] = str(steps)
    return words


PROGRESS = re.compile(r"^step (\d+)/(\d+)(?: \(stop at (\d+)\))? \| SPS (\d+)", re.M)


def last_progress(log: str) -> tuple[int, int, bool] | None:
    """(step, SPS, whether the loop has reached its last step) of the last progress line a script printed
    ('step 2048/10000 (stop at 4096) | SPS 312 | ...', abs_utils' Run.progress), or None before the first."""
    lines = PROGRESS.findall(log)
    if not lines:
        return None
    step, total, stop, sps = lines[-1]
    return int(step), int(sps), int(step) >= int(stop or total)


def run_variant(script: str, flags: list[str], out: Path, extra: str, time_limit: float | None = None,
                kill_after: float = 60.0) -> dict:
    """One training process; its SPS, phase split, peak RSS (wait4 of that very child) and storage.
    With time_limit, the process gets SIGTERM after that many seconds once its training loop has printed progress
    and while it has not printed its last step (the scripts checkpoint and exit 143; SIGKILL kill_after seconds
    later), and the row counts with the steps it reached."""
    cmd = [sys.executable, script, *flags, *shlex.split(extra), "--eval-episodes", "0",
           "--checkpoint-every", "0", "--output-dir", str(out), "--run-name", "bench"]
    t0 = time.time()
    log = open(out / "log.txt", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    stopped, term_at, step_at_term = False, None, None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG if time_limit else 0)
        if pid:
            break
        elapsed = time.time() - t0
        # SIGTERM only once the training loop runs (its first progress line): the scripts' handler is set by then;
        # and not after its last step: the run is then in its end-of-run work, with its speed already logged.
        text = (out / "log.txt").read_text(errors="replace")
        progress = last_progress(text)
        if term_at is None and elapsed > time_limit and "step " in text and not (progress and progress[2]):
            proc.send_signal(signal.SIGTERM)
            stopped, term_at, step_at_term = True, elapsed, progress and progress[0]
        # SIGKILL kill_after seconds after the SIGTERM (the iteration under way, a compilation too, may end), or
        # after the limit if the loop never started or had ended
        elif elapsed > (term_at if term_at is not None else time_limit) + kill_after:
            proc.kill()
            stopped = True
        time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    row = {"command": shlex.join(["python", script, *flags, *shlex.split(extra)]),
           "returncode": proc.returncode, "wall_seconds": time.time() - t0,
           "peak_rss_mb": usage.ru_maxrss / 1024, "stopped": stopped}
    if term_at is not None:
        row["term_seconds"], row["step_at_term"] = term_at, step_at_term
    # A stopped run counts whatever its exit (143, or a signal's default action during its end-of-run work).
    tags = scalars(out / "bench") if proc.returncode == 0 or stopped else {}
    log_text = (out / "log.txt").read_text(errors="replace")
    if "charts/SPS" not in tags:
        progress = last_progress(log_text) if stopped else None
        if progress is None:
            row["error"] = log_text[-800:]
            return row
        # a hard stop before the events were flushed: the speed the run printed (no phase split)
        row["steps"], row["sps"] = progress[0], float(progress[1])
        row["steady_sps"], row["phases"], row["speed_from"] = row["sps"], {}, "log"
        return row
    row["steps"] = tags["charts/SPS"][-1][0]
    row["sps"] = tags["charts/SPS"][-1][1]
    row["steady_sps"] = steady_sps(tags["charts/SPS"]) or row["sps"]
    row["phases"] = {t.split("/")[1]: tags[t][-1][1] for t in PERF_TAGS if t in tags}
    row["speed_from"] = "events"
    for tag in ("perf/storage_bytes", "perf/cuda_peak_bytes"):
        if tag in tags:
            row[tag.split("/")[1]] = tags[tag][-1][1]
    return row


def env_only_sps(env_id: str, num_envs: int, steps: int) -> float:
    """Random actions through the same envpool setup as abs_pqn_atari.py: the machine's ceiling."""
    import envpool
    import numpy as np

    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, episodic_life=True, reward_clip=True, seed=1)
    envs.reset()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(steps // num_envs):
        envs.step(rng.integers(0, envs.action_space.n, num_envs))
    return steps / (time.perf_counter() - t0)


def was_skipped(row: dict) -> bool:
    """A row --budget did not run (not a failure)."""
    return str(row.get("error", "")).startswith("skipped")


def summarize(group_rows: list[list[dict]]) -> list[dict]:
    """Median over rounds per variant, and the ratio to the baseline's median."""
    out = []
    for rows in group_rows:
        ok = [r for r in rows if r.get("sps") is not None]
        crashed = [r for r in rows if not was_skipped(r)]
        # phases, storage and command of a round that worked; else a failure, which outweighs a skip
        s = dict(ok[-1] if ok else crashed[-1] if crashed else rows[-1])
        s["rounds"] = len(ok)
        s["sps_rounds"] = [r["sps"] for r in ok]
        s["sps"] = statistics.median(s["sps_rounds"]) if ok else None
        s["steady_sps_rounds"] = [r["steady_sps"] for r in ok]
        s["steady_sps"] = statistics.median(s["steady_sps_rounds"]) if ok else None
        s["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rows)
        s["stopped_rounds"] = sum(bool(r.get("stopped")) for r in rows)
        cuda = [r["cuda_peak_bytes"] for r in ok if "cuda_peak_bytes" in r]
        if cuda:
            s["cuda_peak_bytes"] = max(cuda)
        out.append(s)
    base = out[0]["steady_sps"]
    for s in out:
        s["ratio"] = s["steady_sps"] / base if s["steady_sps"] and base else None
    return out


def phase_split(phases: dict) -> str:
    if not phases:  # a speed read from the run's log (stopped before its events were written)
        return "-"
    total = sum(phases.values()) or 1.0
    return ", ".join(f"{k.replace('_seconds', '')} {100 * v / total:.0f}%" for k, v in phases.items())


def markdown(results: dict) -> str:
    lines = [f"# Throughput ({results['mode']})", "",
             f"Machine: {results['machine']}. Date: {results['date']}. Rounds: {results['rounds']} "
             "(variants alternate within each round; medians over rounds). SPS: whole run, as the script reports it; "
             "steady SPS: over the second half of the run's steps; ratio: steady SPS to the group's first row.", "",
             f"Environment only (random actions, {results['env_only']['num_envs']} envs): " +
             (f"**{results['env_only']['sps']:.0f} SPS**" if results["env_only"]["sps"] is not None
              else f"failed ({results['env_only'].get('error')})"), "",
             "| variant | SPS | steady SPS | ratio to first | phase split | peak host MB | peak CUDA MB | storage MB "
             "| command |",
             "|---|---|---|---|---|---|---|---|---|"]
    if results.get("budget_seconds"):
        lines[4:4] = [f"Budget: {results['budget_seconds']:.0f} s for all runs; a run's SPS marked * was stopped at "
                      "its time limit in some round (no peak CUDA memory from that round).", ""]
    for group, rows in results["groups"].items():
        for r in rows:
            if r.get("sps") is None:
                verdict = "skipped" if was_skipped(r) else "failed"
                lines.append(f"| {r['name']} | {verdict} | | | | | | | `{r['command']}` |")
                continue
            star = "*" if r.get("stopped_rounds") else ""
            cuda = f"{r['cuda_peak_bytes'] / 2**20:.0f}" if "cuda_peak_bytes" in r else "-"
            storage = f"{r['storage_bytes'] / 2**20:.1f}" if "storage_bytes" in r else "-"
            ratio = f"{r['ratio']:.3f}" if r.get("ratio") is not None else "-"  # baseline row failed
            lines.append(f"| {r['name']} | {r['sps']:.0f}{star} | {r['steady_sps']:.0f} | {ratio} "
                         f"| {phase_split(r.get('phases', {}))} "
                         f"| {r['peak_rss_mb']:.0f} | {cuda} | {storage} | `{r['command']}` |")
    return "\n".join(lines) + "\n"


def input_problem(args) -> str | None:
    """The first flag outside its domain, as one line naming it and what it takes, or None. Checked before any
    run starts: a bad --out or --extra-args found after the runs would throw their minutes away."""
    if args.rounds is not None and not 1 <= args.rounds <= MAX_ROUNDS:
        return f"--rounds {args.rounds}: must be an integer in [1, {MAX_ROUNDS}]"
    if not (math.isfinite(args.scale) and args.scale > 0):
        return f"--scale {args.scale}: must be a finite number > 0"
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 10):
        return (f"--budget {args.budget}: must be a finite number of seconds > 10 (10 s are kept for the "
                "environment-only row and the tables)")
    try:
        shlex.split(args.extra_args)
    except ValueError as e:  # an unclosed quote
        return f"--extra-args {args.extra_args!r}: {e}"
    for flag, path in (("--out", args.out), ("--keep-logs", args.keep_logs)):
        problem = path is not None and out_problem(Path(path))
        if problem:
            return f"{flag} {path}: {problem}"
    return None


def log_tail(path: Path, n: int = 10) -> str:
    """The last n lines of a run's output (stdout and stderr), indented: a failed run's cause, printed with it."""
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "    (no output)"


def main(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0], name="throughput.py")
    p.add_argument("--quick", action="store_true", help="small settings that finish in minutes on 2 CPU cores")
    p.add_argument("--rounds", type=int, help="alternation rounds (default: 2 quick, 3 full)")
    p.add_argument("--groups", nargs="+", choices=GROUPS,
                   help="variant groups to run (default: pqn ppo btr with --quick, all without)")
    p.add_argument("--extra-args", default="", help="flags appended to every run, e.g. '--no-cuda'")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (smoke-testing the benchmark)")
    p.add_argument("--out", default=str(ROOT / "bench"), help="directory of results.md and results.json")
    p.add_argument("--budget", type=float, help="seconds for all runs together; each run is stopped at its share")
    p.add_argument("--keep-logs", help="directory to copy every run's output into (<group><variant>_<round>.log)")
    args = p.parse_args(argv)
    problem = input_problem(args)
    if problem:
        print(f"throughput.py: error: {problem}", file=sys.stderr)
        return 2
    rounds = args.rounds or (2 if args.quick else 3)
    groups = args.groups or (["pqn", "ppo", "btr"] if args.quick else list(GROUPS))
    table = {g: v for g, v in configs(args.quick).items() if g in groups}
    for g, variants in table.items():
        for name, script, _ in variants:
            if not (ROOT / script).exists():
                print(f"throughput.py: error: --groups {g} needs {script}, which is not in {ROOT}", file=sys.stderr)
                return 2
    measured = {g: [[] for _ in v] for g, v in table.items()}
    words = {g: [scaled(flags, args.scale) for _, _, flags in v] for g, v in table.items()}
    most = max(int(w[w.index("--total-timesteps") + 1]) for ws in words.values() for w in ws)
    if most > 2**63 - 1:  # what the scripts' (and TensorBoard's) 64-bit step counters hold
        print(f"throughput.py: error: --scale {args.scale:g}: {most:.3g} total timesteps is more than a 64-bit step "
              "counter holds", file=sys.stderr)
        return 2
    limits = {g: [None] * len(v) for g, v in table.items()}
    if args.budget:  # 10 s of it kept for the environment-only row and the tables
        weights = sum(weight(s, f) for v in table.values() for _, s, f in v)
        # fewer rounds rather than runs too short to pass their start-up (at least MIN_SHARE s per weight)
        rounds = max(1, min(rounds, int((args.budget - 10) / (weights * MIN_SHARE))))
        limits = {g: [(args.budget - 10) * weight(s, f) / (rounds * weights) for _, s, f in v]
                  for g, v in table.items()}
        share = (args.budget - 10) / (rounds * weights)
        print(f"budget {args.budget:.0f} s: {rounds} round(s), {share:.1f} s per share",
              flush=True)
    if args.keep_logs:
        os.makedirs(args.keep_logs, exist_ok=True)
    deadline = time.time() + (args.budget or float("inf")) - 10
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(rounds):
            for g, variants in table.items():
                for i, (name, script, flags) in enumerate(variants):
                    out = Path(tmp) / f"{g}{i}_{rnd}"
                    out.mkdir()
                    left = deadline - time.time()
                    if limits[g][i] and left < limits[g][i] / 2:  # earlier runs overran: keep to the budget
                        print(f"round {rnd + 1}/{rounds} {name}: skipped, {left:.0f} s of the budget left", flush=True)
                        measured[g][i].append({"name": name, "command": shlex.join(["python", script, *words[g][i]]),
                                               "returncode": None, "peak_rss_mb": 0.0, "stopped": False,
                                               "error": "skipped: the budget was spent"})
                        continue
                    limit = min(limits[g][i], left) if limits[g][i] else None
                    row = run_variant(script, words[g][i], out, args.extra_args, limit)
                    row["name"] = name
                    measured[g][i].append(row)
                    total = int(words[g][i][words[g][i].index("--total-timesteps") + 1])
                    if row["stopped"] and 0 < row.get("steps", 0) < total:  # the next round ends within its share
                        words[g][i] = with_steps(words[g][i], max(1, int(0.85 * row["steps"])))
                    if args.keep_logs:
                        shutil.copy(out / "log.txt", Path(args.keep_logs) / f"{g}{i}_{rnd}.log")
                    print(f"round {rnd + 1}/{rounds} {name}: " +
                          (f"{row['sps']:.0f} SPS" if "sps" in row else f"failed ({row['returncode']})") +
                          (f", stopped at {row['wall_seconds']:.0f} s" if row["stopped"] else "") +
                          (f", {row['steps']} steps" if "steps" in row else ""), flush=True)
                    refused = bad_input_line(row, out / "log.txt")
                    if refused:  # the script refused its flags (exit 2): every run would, so stop with its line
                        print(f"error: {name} ({script}) refused its flags (with --extra-args {args.extra_args!r}): "
                              f"{refused.removeprefix('error: ')}", file=sys.stderr)
                        return 2
                    if "sps" not in row:  # its cause here, not only in results.json
                        print(f"  command: {row['command']}\n  last lines of its output:\n{log_tail(out / 'log.txt')}",
                              flush=True)
    num_envs = 16 if args.quick else 128
    results = {
        "mode": ("quick" if args.quick else "full") + (f", steps x {args.scale}" if args.scale != 1 else ""),
        "rounds": rounds,
        "budget_seconds": args.budget,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, " + gpu_name(),
        "env_only": {"num_envs": num_envs, "sps": None},
        "groups": {g: summarize(rows) for g, rows in measured.items()},
    }
    try:
        results["env_only"]["sps"] = env_only_sps("Breakout-v5", num_envs, 20 * num_envs * 32)
    except Exception as e:  # still write the rows measured so far
        results["env_only"]["error"] = f"{type(e).__name__}: {e}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown(results))
    print(markdown(results))
    failed, skipped = failures(results)
    if skipped:
        print(f"skipped (the budget was spent): {', '.join(skipped)}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def bad_input_line(row: dict, log: Path) -> str | None:
    """A run the script refused as bad input (exit 2): its one `error:` line, else None."""
    if row.get("returncode") != 2:
        return None
    try:
        return next((ln for ln in reversed(log.read_text().splitlines()) if ln.startswith("error: ")), None)
    except OSError:
        return None


def failures(results: dict) -> tuple[list[str], list[str]]:
    """Rows without a result: those that failed (exit 1), and those --budget skipped (reported, not a failure)."""
    rows = [r for rows in results["groups"].values() for r in rows if r.get("sps") is None]
    skipped = [r["name"] for r in rows if was_skipped(r)]
    failed = [r["name"] for r in rows if r["name"] not in skipped]
    return failed + (["environment only"] if results["env_only"]["sps"] is None else []), skipped


def gpu_name() -> str:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    except Exception:
        return "no GPU"


if __name__ == "__main__":
    sys.exit(main())
