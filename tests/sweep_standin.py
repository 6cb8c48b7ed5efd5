"""What the tests of reproduce/sweep.py share (tests/test_sweep.py, tests/test_sweep_faults.py): a stand-in for a
training script that follows docs/CONVENTIONS.md where the sweep relies on it, a tiny experiment on it, and the
sweep's command line."""
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import experiments  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402

# A stand-in for a training script, following the conventions: it locks <output-dir>/<run-name>/.lock as the scripts
# do (a second live run on the directory exits 2), writes eval_results.json atomically into it, exits 1 for a seed in
# --fail-seeds, and with --sleep waits for SIGTERM, on which it writes checkpoint.pt and exits 143. With
# --checkpoint-every N > 0 it writes checkpoint.pt once it has started (its first checkpoint); with --hold PATTERN it
# waits while the file PATTERN.format(seed=seed) exists, so that a test decides when each run ends.
STANDIN = textwrap.dedent('''
    import argparse, fcntl, json, os, signal, sys, time
    p = argparse.ArgumentParser()
    for f in ("--env-id", "--output-dir", "--run-name", "--resume", "--hold"):
        p.add_argument(f)
    for f in ("--seed", "--total-timesteps", "--checkpoint-every"):
        p.add_argument(f, type=int)
    p.add_argument("--fail-seeds", type=int, nargs="*", default=[])
    p.add_argument("--sleep", type=float, default=0.0)
    args, rest = p.parse_known_args()
    run_dir = os.path.join(args.output_dir, args.run_name)
    os.makedirs(run_dir, exist_ok=True)
    lock = open(os.path.join(run_dir, ".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"error: --run-name: {run_dir} is in use by another live run", file=sys.stderr)
        sys.exit(2)
    def write(name, obj):
        tmp = os.path.join(run_dir, name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, os.path.join(run_dir, name))
    def on_term(signum, frame):
        write("checkpoint.pt", {"step": 1})
        print("checkpointed on signal", signum, flush=True)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    t0 = time.time()
    print("training", args.env_id, args.seed, "pid", os.getpid(), flush=True)
    if args.seed in args.fail_seeds:
        print("boom: made to fail", file=sys.stderr)
        sys.exit(1)
    if args.checkpoint_every and not args.resume:
        write("checkpoint.pt", {"step": 1})
        print("checkpoint written", flush=True)
    while args.hold and os.path.exists(args.hold.format(seed=args.seed)):
        time.sleep(0.02)
    if args.resume:
        assert os.path.exists(args.resume), args.resume
    elif args.sleep:
        while time.time() - t0 < args.sleep:
            time.sleep(0.05)
    write("eval_results.json", {"algo": "standin", "env_id": args.env_id, "seed": args.seed,
                                "global_step": args.total_timesteps, "total_timesteps": args.total_timesteps,
                                "resumed_from": args.resume, "extra": rest, "start": t0, "end": time.time(),
                                "train_seconds": time.time() - t0, "args": {"seed": args.seed, "adapt": True},
                                "eval": {"episodes": 1, "returns": [1.0], "lengths": [10], "mean": 1.0, "std": 0.0,
                                         "median": 1.0, "min": 1.0, "max": 1.0, "capped": 0}})
''')


def make_tiny(tmp_path: Path) -> tuple[list[str], Path]:
    """A tiny experiment (two labels, one game, two seeds) on the stand-in, in its own TOML: the sweep's options
    that select it (--config, --root) and its experiment directory."""
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    config = tmp_path / "tiny.toml"
    config.write_text(textwrap.dedent(f'''
        [experiments.tiny]
        script = "{script}"
        games = ["Pong-v5"]
        seeds = [1, 2]
        total_timesteps = 1000
        checkpoint_every = 0
        env_suffix = "-v5"
        [experiments.tiny.labels]
        A = ""
        B = {{ flags = ["--sleep", "0.7", "--label-b"] }}
    '''))
    return ["--config", str(config), "--root", str(tmp_path / "sweeps")], tmp_path / "sweeps" / "tiny"


def sweep_cli(*args, timeout=120, env=None):
    return subprocess.run([*tool("sweep"), *args], capture_output=True, text=True, timeout=timeout,
                          env=tool_env(env))


def starts(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if experiments.START.match(line))
