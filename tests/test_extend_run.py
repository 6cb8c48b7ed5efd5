"""Another --total-timesteps on --resume: the schedules computed from it (an annealed learning rate, epsilon's decay,
PER's beta) would change mid-run, so it is refused in one line that points to --stop-at-step, unless
--extend-schedules asks for it; then a warning states where the schedules move. On abs_utils' parse_args with a toy
script, in every script's flags, and end to end on abs_ppo_mujoco.py, whose annealed learning rate would jump."""
import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import abs_utils as U  # noqa: E402
from reproduce.events import read_run_events  # noqa: E402
from scripts import SCRIPTS  # noqa: E402


@dataclass
class Args:  # the flags parse_args reads, as in every script
    exp_name: str = "toy"
    seed: int = 1
    track: bool = False
    output_dir: str = "runs"
    run_name: Optional[str] = None
    resume: Optional[str] = None
    env_id: str = "Toy-v0"
    total_timesteps: int = 640
    stop_at_step: Optional[int] = None
    extend_schedules: bool = False
    learning_rate: float = 1e-3


RUN_CONTROL = ("resume", "total_timesteps", "stop_at_step", "extend_schedules")


def parse(argv):
    return U.parse_args(Args, "toy", lambda a: iter(()), RUN_CONTROL, {}, argv)


def checkpoint(tmp_path, step=320, **flags):
    path = tmp_path / "r" / "checkpoint.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    args = dataclasses.asdict(Args(run_name="r", **flags))
    torch.save({"args": args, "run_name": "r", "algo": "toy", "global_step": step, "train_seconds": 0.0, "perf": {},
                "rng": U.rng_state(torch.device("cpu"))}, path)
    return str(path)


def one_line(capsys):
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_another_total_is_refused_in_one_line_naming_both_ways_on(tmp_path, capsys):
    ckpt = checkpoint(tmp_path)
    for total in ("1280", "480"):
        with pytest.raises(SystemExit) as e:
            parse(["--resume", ckpt, "--total-timesteps", total])
        assert e.value.code == 2 and one_line(capsys) == (
            f"error: --total-timesteps ({total}) is not the checkpoint's (640): the schedules computed from it (an "
            "annealed learning rate, epsilon's decay, ...) would change mid-run. To stop a run early and go on later, "
            "give --stop-at-step to its first command instead; to go on with every schedule over the new total, add "
            "--extend-schedules")


def test_extend_schedules_goes_on_and_says_where_the_schedules_move(tmp_path, capsys):
    args, ckpt = parse(["--resume", checkpoint(tmp_path), "--total-timesteps", "1280", "--extend-schedules"])
    assert args.total_timesteps == 1280 and args.extend_schedules and ckpt["global_step"] == 320
    # 320 of 640 steps is half-way; of 1280 a quarter: a linear annealing goes from 50% of its start to 75%
    assert one_line(capsys) == (
        "warning: --extend-schedules: the schedules computed from --total-timesteps go on over 1280 steps instead of "
        "640: at global_step 320 the run moves from 50.0% to 25.0% of them (a linearly annealed learning rate from "
        "50.0% to 75.0% of its start)")


def test_the_same_total_needs_no_flag_and_says_nothing(tmp_path, capsys):
    ckpt = checkpoint(tmp_path)
    for extra in ([], ["--total-timesteps", "640"], ["--total-timesteps", "640", "--extend-schedules"]):
        assert parse(["--resume", ckpt, *extra])[0].total_timesteps == 640
        assert capsys.readouterr().err == ""


def test_the_flag_holds_for_one_resume_only(tmp_path, capsys):
    """A checkpoint written by an extended run holds extend_schedules = True; the next resume does not inherit it."""
    ckpt = checkpoint(tmp_path, total_timesteps=1280, extend_schedules=True)
    assert parse(["--resume", ckpt])[0].extend_schedules is False
    with pytest.raises(SystemExit):
        parse(["--resume", ckpt, "--total-timesteps", "2560"])
    assert "is not the checkpoint's (1280)" in one_line(capsys)


def test_the_flag_without_resume_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        parse(["--output-dir", str(tmp_path), "--extend-schedules"])
    assert e.value.code == 2 and one_line(capsys) == (
        "error: --extend-schedules goes with --resume and another --total-timesteps than the checkpoint's")
    assert os.listdir(tmp_path) == []


def test_a_finished_run_points_to_the_flag_to_train_on(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, step=640)
    (tmp_path / "r" / "eval_results.json").write_text(json.dumps({"global_step": 640}))
    with pytest.raises(SystemExit):
        parse(["--resume", ckpt])
    assert "To train on, give a larger --total-timesteps with --extend-schedules" in one_line(capsys)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_has_the_flag_for_one_resume(name):
    m = SCRIPTS[name].module()
    assert m.Args().extend_schedules is False and "extend_schedules" in m.RUN_CONTROL_FLAGS


def test_ppo_s_learning_rate_goes_on_over_the_new_total_only_when_asked(tmp_path):
    """abs_ppo_mujoco.py anneals its learning rate to 0 over --total-timesteps: a finished 512-step run resumed to
    1024 steps is refused without the flag; with it, the first iteration after the resume logs the rate at 512 of
    1024 steps (half the start), where the finished run had ended near 0."""
    flags = ["--env-id", "InvertedPendulum-v5", "--no-adapt", "--num-steps", "128", "--num-minibatches", "2",
             "--update-epochs", "1", "--eval-episodes", "1", "--log-every-seconds", "0", "--no-cuda",
             "--output-dir", str(tmp_path), "--run-name", "r"]

    def run(*argv):
        return subprocess.run([sys.executable, str(ROOT / "abs_ppo_mujoco.py"), *argv], capture_output=True,
                              text=True, timeout=600)
    assert run(*flags, "--total-timesteps", "512").returncode == 0
    ckpt = str(tmp_path / "r" / "checkpoint.pt")
    refused = run("--resume", ckpt, "--total-timesteps", "1024")
    assert refused.returncode == 2 and refused.stderr.strip().startswith(
        "error: --total-timesteps (1024) is not the checkpoint's (512)")
    extended = run("--resume", ckpt, "--total-timesteps", "1024", "--extend-schedules")
    assert extended.returncode == 0, extended.stderr
    assert "at global_step 512 the run moves from 100.0% to 50.0% of them" in extended.stderr
    steps, rates = read_run_events(tmp_path / "r", ["charts/learning_rate"])[1]["charts/learning_rate"]
    lr = 3e-4  # the script's default
    assert rates[steps == 512][-1] == pytest.approx(lr * (1 - 384 / 512), rel=1e-6)  # the finished run's last
    assert rates[steps == 640][0] == pytest.approx(lr * (1 - 512 / 1024), rel=1e-6)  # the first after the resume


def test_running_md_shows_the_lines_the_code_prints():
    """docs/running.md's example: a finished 5M-step run resumed with --total-timesteps 6000000."""
    text = (ROOT / "docs" / "running.md").read_text()
    resume = U.parsing.Resume({"global_step": 5_000_000, "args": {"total_timesteps": 5_000_000}}, {}, None, False)
    args = Args(total_timesteps=6_000_000)
    with pytest.raises(ValueError) as e:
        U.parsing.resume_problems(args, resume)
    assert f"    error: {e.value}\n" in text
    args.extend_schedules = True
    assert f"    {U.parsing.extension_note(args, resume)}\n" in text
