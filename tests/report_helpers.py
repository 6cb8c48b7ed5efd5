"""What the report's tests share: runs written as the scripts write them (eval_results.json, TensorBoard events
written with SummaryWriter), and readers of the report's markdown. It puts reproduce/ on sys.path, as the tools do
for their siblings."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import runs  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402

COMMITTED = ROOT / "results" / "mujoco-1m" / "runs" / "mujoco"


def write_run(run_dir: Path, env_id, seed, score, curve=None, adapt=False, finished=True, total=1000):
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    if curve is not None:
        w = SummaryWriter(log_dir=str(run_dir))
        for step in range(0, total + 1, 100):
            w.add_scalar("charts/episodic_return", curve(step), step)
            if adapt and step > 0:
                w.add_scalar("adapt/divergence", 0.5 - step / 4000, step)
                w.add_scalar("adapt/num_steps", 16 + step * 48 / total, step)
        w.close()
    if finished:
        (run_dir / "eval_results.json").write_text(json.dumps({
            "algo": "abs_pqn_atari", "env_id": env_id, "seed": seed, "run_name": run_dir.name,
            "global_step": total, "total_timesteps": total, "train_seconds": 1.0,
            "eval": {"episodes": 2, "returns": [score, score], "mean": score},
            "args": {"env_id": env_id, "seed": seed, "adapt": adapt}}))


def write_adapt_run(run_dir: Path, env_id, seed, measurement_steps, lengths, window, total, adapt=True, kl=None):
    """A PPO-like run: one adapt/kl (0.02, or kl's values) and adapt/num_steps event per divergence measurement,
    and --window W."""
    from torch.utils.tensorboard import SummaryWriter

    write_run(run_dir, env_id, seed, 1000.0, lambda s: s / 10, total=total)
    w = SummaryWriter(log_dir=str(run_dir))
    for step, L, value in zip(measurement_steps, lengths, kl or [0.02] * len(lengths)):
        w.add_scalar("adapt/kl", value, step)
        w.add_scalar("adapt/num_steps", L, step)
    w.close()
    res = json.loads((run_dir / "eval_results.json").read_text())
    res["args"].update({"adapt": adapt, "window": window, "num_steps": 32, "num_steps_min": 16,
                        "num_steps_max": 64})
    (run_dir / "eval_results.json").write_text(json.dumps(res))


def write_prefix_run(run_dir: Path, env_id, seed, score, stop, reached, total=1000, curve=lambda s: s / 10):
    """A run of a `total`-step protocol stopped at `stop` (--stop-at-step) that ended at step `reached`: its
    training games only up to there, and eval_results.json as the scripts write it at a stop."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    w = SummaryWriter(log_dir=str(run_dir))
    for step in range(0, reached + 1, 10):
        w.add_scalar("charts/episodic_return", curve(step), step)
    w.close()
    (run_dir / "eval_results.json").write_text(json.dumps({
        "algo": "abs_pqn_atari", "env_id": env_id, "seed": seed, "run_name": run_dir.name, "global_step": reached,
        "total_timesteps": total, "complete": False, "train_seconds": 1.0,
        "eval": {"episodes": 2, "returns": [score, score], "mean": score},
        "args": {"env_id": env_id, "seed": seed, "adapt": False, "stop_at_step": stop, "total_timesteps": total}}))


def hns(score, game):
    s = runs.load_atari_scores()[game]
    return (score - s["random"]) / (s["human"] - s["random"])


def section(md: str, title: str) -> str:
    return md.split(f"## {title}")[1].split("\n## ")[0]


def row(text: str, first: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def row_of(text: str, game: str, label: str) -> list[str]:
    """The row of one game and label in a per-seed table (game | label | ...)."""
    return row(text, f"{game} | {label}")


def subsection(md: str, title: str) -> str:
    """The text of a "### title" subsection, up to the next heading."""
    return md.split(f"\n### {title}\n")[1].split("\n#")[0]


def only_event_file(run_dir: Path) -> Path:
    (path,) = run_dir.glob("events.out.tfevents.*")
    return path


def report_cli(*args):
    return subprocess.run([*tool("report"), *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=tool_env())
