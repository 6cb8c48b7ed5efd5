"""Tests of abs_utils, the run machinery every script imports: flag checks and parsing, resume with the
checkpoint's flags, weights-only checkpoint loading, RNG state, the Run (directory, writer, timing, progress,
checkpoints, signals, the non-finite stop, results). The scripts' own tests run it end to end on real environments."""
import argparse
import dataclasses
import json
import os
import re
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import abs_utils as U  # noqa: E402

SCRIPT = "toy"


@dataclass
class Args:  # the fields the Run and parse_args read, as in every script, plus a few of each kind
    exp_name: str = "toy"
    seed: int = 1
    torch_deterministic: bool = True
    cuda: bool = False
    track: bool = False
    wandb_project_name: str = "abs"
    wandb_entity: Optional[str] = None
    output_dir: str = "runs"
    run_name: Optional[str] = None
    resume: Optional[str] = None
    checkpoint_every: int = 100
    log_every_seconds: float = 0.0
    env_id: str = "Toy-v0"
    total_timesteps: int = 1000
    learning_rate: float = 1e-3
    adapt: bool = True
    window: int = 10
    schedule: Literal["log", "linear"] = "log"
    num_steps_min: int = 16
    num_steps_max: int = 64
    tag: Optional[str] = None
    extend_schedules: bool = False


RUN_CONTROL = ("resume", "total_timesteps", "checkpoint_every", "log_every_seconds", "cuda", "track",
               "extend_schedules")


def problems(a):
    yield from U.in_domain(a, ">= 1", "total_timesteps", "window", "num_steps_min")
    yield from U.in_domain(a, "> 0", "learning_rate")
    yield a.num_steps_min <= a.num_steps_max, f"--num-steps-min ({a.num_steps_min}) must be <= --num-steps-max"
    yield 64 % a.num_steps_min == 0, "--num-steps-min must divide 64"  # divides: only reached once it is >= 1


STATE = {"iteration": int}  # the toy script's part of a checkpoint


def parse(argv):
    return U.parse_args(Args, SCRIPT, problems, RUN_CONTROL, STATE, argv)


def one_error_line(capsys):
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# ------------------------------------------------------------------ flags
@pytest.mark.parametrize("argv, needle", [
    (["--total-timesteps", "0"], "--total-timesteps must be >= 1, got 0"),
    (["--learning-rate", "0"], "--learning-rate must be > 0, got 0.0"),
    (["--learning-rate", "nan"], "--learning-rate must be a finite number, got nan"),
    (["--log-every-seconds", "inf"], "--log-every-seconds must be a finite number"),
    (["--num-steps-min", "0"], "--num-steps-min must be >= 1, got 0"),  # before the row that divides by it
    (["--num-steps-min", "80"], "--num-steps-min (80) must be <= --num-steps-max"),
    (["--num-steps-min", "5"], "--num-steps-min must divide 64"),
    (["--seed", "-1"], "--seed must be in [0, 2^31 - 10000)"),
    (["--run-name", "a/b"], "--run-name must be a single path component"),
    (["--run-name", ".."], "--run-name must be a single path component"),
    (["--schedule", "cubic"], "invalid choice 'cubic' for argument '--schedule'. Expected one of ('log', 'linear')"),
    (["--window", "ten"], "--window"),  # tyro's type error, in one line
    (["--no-such-flag"], "--no-such-flag"),
    (["--resume", "nowhere/checkpoint.pt"], "--resume: no checkpoint file at 'nowhere/checkpoint.pt'"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert needle in one_error_line(capsys)
    assert os.listdir(tmp_path) == []


def test_a_bad_choice_is_one_line_from_a_real_process(tmp_path):
    """tyro draws its error in a Unicode box outside pytest; the script's user sees one line naming the flag."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import abs_utils as U; from typing import Literal; "
            "from dataclasses import dataclass\n@dataclass\nclass A:\n    schedule: Literal['log', 'linear'] = 'log'\n"
            "U.tyro_cli(A, sys.argv[2:])")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-c", code, root, "--schedule", "cubic"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.splitlines() == [
        "error: invalid choice 'cubic' for argument '--schedule'. Expected one of ('log', 'linear')."], p.stderr


def test_track_without_wandb_is_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # wandb cannot be imported
    with pytest.raises(SystemExit):
        parse(["--track"])
    assert "--track needs the wandb package" in one_error_line(capsys)


def test_in_domain_rows_name_the_flag_and_domain():
    a = Args(total_timesteps=0, learning_rate=0.5)
    assert list(U.in_domain(a, ">= 1", "total_timesteps")) == [(False, "--total-timesteps must be >= 1, got 0")]
    assert [ok for ok, _ in U.in_domain(a, "in [0, 1]", "learning_rate")] == [True]
    assert [ok for ok, _ in U.in_domain(Args(learning_rate=0.0), "in (0, 1]", "learning_rate")] == [False]
    assert [ok for ok, _ in U.in_domain(Args(learning_rate=1.0), "in (0, 1]", "learning_rate")] == [True]


@pytest.mark.parametrize("flag", ["--checkpoint-every", "--window", "--total-timesteps", "--num-steps-max"])
def test_a_count_above_10_12_is_refused_naming_the_bound(flag, tmp_path, capsys):
    """Every integer flag, whatever the script's own rows say: 2^63 would loop for ever or overflow a deque."""
    for value in (U.MAX_COUNT + 1, 2**63):
        with pytest.raises(SystemExit) as e:
            parse(["--output-dir", str(tmp_path / "out"), flag, str(value)])
        assert e.value.code == 2
        assert one_error_line(capsys) == f"error: {flag} must be at most 10^12 (no run takes that many steps, " \
                                          f"iterations or episodes), got {value}"
    assert not (tmp_path / "out").exists()
    assert [ok for ok, _ in U.count_problems(Args(window=U.MAX_COUNT, seed=0))] == [True] * 6  # the bound itself


def test_the_longest_update_gets_at_most_1000_epochs():
    assert U.epochs_problem(1000, "--update-epochs 10") == (True, "--update-epochs 10 give 1000 epochs to the "
                                                             "longest update, more than 1000 (a stop signal waits "
                                                             "for the update to end)")
    assert not U.epochs_problem(1001, "--update-epochs 10")[0]


def test_help_goes_to_stdout_and_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        parse(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr()
    assert "--num-steps-min" in out.out and out.err == ""


def test_default_run_name_and_an_existing_run_directory_is_refused(tmp_path, capsys):
    args, checkpoint = parse(["--output-dir", str(tmp_path)])
    assert checkpoint is None and args.run_name.startswith("Toy-v0__toy__1__")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "eval_results.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        parse(["--output-dir", str(tmp_path), "--run-name", "taken"])
    assert e.value.code == 2 and "already holds an earlier run's eval_results.json" in one_error_line(capsys)


# ------------------------------------------------------------------ resume
def write_checkpoint(path, args, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"global_step": 0, "iteration": 0, "train_seconds": 0.0, "perf": {},
             "rng": U.rng_state(torch.device("cpu"))}
    torch.save({"args": dataclasses.asdict(args), "run_name": args.run_name, "algo": SCRIPT, **state, **extra}, path)
    return str(path)


def test_resume_takes_every_flag_not_given_from_the_checkpoint(tmp_path, capsys):
    saved = Args(run_name="r", seed=7, adapt=False, cuda=True, schedule="linear", tag="kept", window=3,
                 learning_rate=0.5, total_timesteps=500)
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", saved)
    args, checkpoint = parse(["--resume", ckpt])
    assert checkpoint["run_name"] == "r"
    assert dataclasses.replace(args, resume=None) == saved  # booleans, Optional, Literal, numbers all kept
    assert capsys.readouterr().err == ""
    # Run-control flags given on the command line win, including --no-x booleans and Optional set to None.
    args, _ = parse(["--resume", ckpt, "--total-timesteps", "900", "--extend-schedules", "--no-cuda",
                     "--log-every-seconds", "2"])
    assert (args.total_timesteps, args.cuda, args.log_every_seconds, args.adapt) == (900, False, 2.0, False)
    assert capsys.readouterr().err.startswith("warning: --extend-schedules: ")


def test_resume_ignores_algorithm_flags_with_a_warning(tmp_path, capsys):
    saved = Args(run_name="r", adapt=False, tag="kept", window=3)
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", saved)
    args, _ = parse(["--resume", ckpt, "--adapt", "--tag", "None", "--window", "3", "--learning-rate", "0.1"])
    assert (args.adapt, args.tag, args.window, args.learning_rate) == (False, "kept", 3, 1e-3)
    err = capsys.readouterr().err
    assert err.startswith("warning: --resume keeps the checkpoint's algorithm flags; ignoring ")
    assert "--adapt True (checkpoint: False)" in err and "--tag None (checkpoint: kept)" in err
    assert "--learning-rate 0.1 (checkpoint: 0.001)" in err and "--window" not in err  # the same value: no warning


def test_resume_fills_flags_the_checkpoint_predates_with_defaults(tmp_path):
    saved = dataclasses.asdict(Args(run_name="r"))
    del saved["tag"]
    saved["removed_flag"] = 3  # a flag a later version dropped
    path = write_checkpoint(tmp_path / "r" / "checkpoint.pt", Args(run_name="r"))
    U.atomic_torch_save(path, {**U.load_checkpoint(path, SCRIPT), "args": saved})  # written so by the older version
    args, _ = parse(["--resume", path])
    assert args.tag is None and not hasattr(args, "removed_flag")


class PickleBomb:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


@pytest.mark.parametrize("content, needle", [
    ("text", "is not a checkpoint of this script"),
    ({"weights": torch.zeros(2)}, "is not a checkpoint of this script (no args or run_name)"),
    ({"args": {}, "run_name": "x", "algo": "abs_btr"}, "is a checkpoint of abs_btr.py, not of toy.py"),
    ({"args": {}, "run_name": "x"}, "is not a checkpoint of this script (no algo)"),
    ({"args": {}, "run_name": "x", "algo": "toy"}, "has no valid 'global_step' (NoneType)"),
])
def test_foreign_files_are_refused(tmp_path, content, needle, capsys):
    path = tmp_path / "c.pt"
    if isinstance(content, str):
        path.write_text(content)
    else:
        torch.save(content, path)
    with pytest.raises(SystemExit) as e:
        parse(["--resume", str(path)])
    assert e.value.code == 2 and needle in one_error_line(capsys)


def test_a_pickled_object_is_refused_without_running_it(tmp_path):
    marker, evil = tmp_path / "side_effect", tmp_path / "checkpoint.pt"
    torch.save({"args": {}, "run_name": "evil", "algo": SCRIPT, "payload": PickleBomb(str(marker))}, evil)
    with pytest.raises(ValueError, match="refused .* holds pickled objects"):
        U.load_checkpoint(str(evil), SCRIPT)
    assert not marker.exists()
    torch.load(evil, weights_only=False)  # the file does what it claims when loaded unsafely
    assert marker.is_dir()


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    device = torch.device("cpu")
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    random.gauss(0, 1), np.random.randn()  # both now hold a cached second Gaussian, which the state must keep
    torch.save({"rng": U.rng_state(device)}, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1).item(), np.random.randn())
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    U.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True)["rng"], device)
    assert (random.random(), np.random.rand(), torch.rand(1).item(), np.random.randn()) == expected


# ------------------------------------------------------------------ small helpers
def progress_line(tmp_path, capsys, global_step, total_timesteps, sps, fields, recent_returns):
    """The line Run.progress prints (it always prints at --log-every-seconds 0)."""
    args, _ = parse(["--output-dir", str(tmp_path), "--run-name", "p", "--total-timesteps", str(total_timesteps)])
    run = U.Run(args, None, SCRIPT, phases=("env",))
    run.last_print = 0.0
    run.progress(global_step, sps, fields, recent_returns)
    run.lock.close()
    return capsys.readouterr().out.strip()


def test_progress_line_and_summary(tmp_path, capsys):
    line = progress_line(tmp_path, capsys, 1024, 4096, 512, "L 16 | eps 0.500", [1.0, 2.0])
    assert line == "step 1024/4096 | SPS 512 | L 16 | eps 0.500 | return 1.5 | ETA 0:00:06"
    assert progress_line(tmp_path, capsys, 0, 10, 0, "x", []).endswith("| x | return n/a | ETA 0:00:10")
    s = U.summarize_eval([1.0, 3.0, 2.0], [10, 30, 20], 1)
    assert (s["episodes"], s["mean"], s["median"], s["min"], s["max"], s["capped"]) == (3, 2.0, 2.0, 1.0, 3.0, 1)
    assert s["std"] == pytest.approx(np.std([1, 3, 2])) and s["lengths"] == [10, 30, 20]
    empty = U.summarize_eval([], [], 0)
    assert empty["episodes"] == 0 and empty["mean"] is None and "action_counts" not in empty
    assert U.summarize_eval([1.0], [10], 0, np.array([3, 0, 7]))["action_counts"] == [3, 0, 7]
    assert U.top_action([3, 0, 7]) == (2, 0.7) and U.top_action([5, 5]) == (0, 0.5)  # a tie: the lowest index


def scalars(run_dir):
    """Every scalar of the run directory, read as TensorBoard does (all event files, purges applied)."""
    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def new_run(tmp_path, argv=()):
    args, checkpoint = parse(["--output-dir", str(tmp_path), "--run-name", "r", *argv])
    return U.Run(args, checkpoint, SCRIPT, phases=("env", "update"))


# ------------------------------------------------------------------ the Run
def test_run_logs_timings_games_and_results(tmp_path, capsys):
    run = new_run(tmp_path)
    assert run.dir == str(tmp_path / "r") and run.device.type == "cpu" and os.path.isdir(run.dir)
    run.begin(0)
    with run.timed("env"):
        time.sleep(0.02)
    with pytest.raises(RuntimeError), run.timed("update"):  # a failing block adds nothing
        raise RuntimeError
    assert 0.02 <= run.perf["env"] < 0.5 and run.perf["update"] == 0.0
    run.log(7, {"charts/SPS": 100}, perf=True)
    run.log(8, {"adapt/divergence": 0.25})
    run.log_games(np.array([1.0, 2.0]), np.array([10, 20]), 8)
    run.progress(8, 100, "L 16", [1.0, 2.0])
    assert "step 8/1000 | SPS 100 | L 16 | return 1.5" in capsys.readouterr().out
    run.end_training()
    summary = run.finish(1000, [1.0, 3.0], [5, 6], 0)
    tags = scalars(run.dir)
    assert tags["charts/SPS"] == [(7, 100.0)] and tags["adapt/divergence"] == [(8, 0.25)]
    assert [s for s, _ in tags["charts/SPS_interval"]] == [7]  # with the perf scalars only
    assert [s for s, _ in tags["perf/env_seconds"]] == [7] and tags["perf/update_seconds"] == [(7, 0.0)]
    assert tags["charts/episodic_return"] == [(8, 1.0), (8, 2.0)]
    assert tags["charts/episodic_length"] == [(8, 10), (8, 20)]
    assert tags["eval/mean_return"] == [(1000, 2.0)]
    assert not any(t.startswith("perf/cuda") for t in tags)
    res = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert set(res) == {"algo", "env_id", "seed", "run_name", "global_step", "total_timesteps", "complete",
                        "train_seconds", "eval", "args"}
    assert res["algo"] == "toy" and res["eval"] == summary and res["args"]["run_name"] == "r"
    assert 0.02 <= res["train_seconds"] < 30


def test_sps_interval_is_the_rate_since_the_previous_perf_log(tmp_path, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])  # the clock of every duration (docs/running.md)
    run = new_run(tmp_path)
    run.begin(1000)  # a resumed run's first interval starts at its checkpoint's step
    now[0] = 110.0
    run.log(2000, {"charts/SPS": 1}, perf=True)  # 1000 steps in 10 s
    now[0] = 111.0
    run.log(2200, {"adapt/divergence": 0.5})  # no perf: not an interval's end
    now[0] = 112.0
    run.log(3000, {"charts/SPS": 1}, perf=True)  # 1000 steps in 2 s (the cumulative rate: 2000 in 12 s)
    run.writer.close()
    assert scalars(run.dir)["charts/SPS_interval"] == [(2000, 100.0), (3000, 500.0)]


@pytest.mark.parametrize("lengths, capped, warned", [
    ([150, 150, 80], 2, True),  # more than half hit the cap
    ([150, 150, 80, 90], 2, False),  # half is not more than half
    ([150, 80, 90], 1, False),
])
def test_finish_warns_when_most_evaluation_episodes_hit_the_step_cap(tmp_path, capsys, lengths, capped, warned):
    run = new_run(tmp_path)
    run.begin(0)
    run.end_training()
    run.finish(1000, [1.0] * len(lengths), lengths, capped)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1 - warned] == f"eval: mean 1.00 +- 0.00 over {len(lengths)} episodes ({capped} hit the step cap)"
    warning = "warning: most evaluation episodes hit the step cap; their returns are those of games cut short"
    assert [line for line in lines if line.startswith("warning:")] == ([warning] if warned else [])
    assert json.loads((tmp_path / "r" / "eval_results.json").read_text())["eval"]["capped"] == capped


@pytest.mark.parametrize("action_counts, warning", [
    ([1, 9, 0], "warning: the evaluation policy chose action 1 on 90.0% of its steps (eval.action_counts): a "
                "near-constant policy, whose score is that of one action"),  # the share NEAR_CONSTANT_SHARE warns
    ([0, 0, 0, 5999, 1], "warning: the evaluation policy chose action 3 on 100.0% of its steps (eval.action_counts): "
                         "a near-constant policy, whose score is that of one action"),
    ([2, 8, 0, 1], None),  # 8 of 11: 72.7%
    (None, None),  # a script without action counts (MuJoCo): none recorded, no check
])
def test_finish_records_the_actions_and_warns_when_one_action_is_the_policy(tmp_path, capsys, action_counts, warning):
    assert U.NEAR_CONSTANT_SHARE == 0.9
    run = new_run(tmp_path)
    run.begin(0)
    run.end_training()
    run.finish(1000, [1.0], [10], 0, action_counts)
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")] == (
        [warning] if warning else [])
    assert json.loads((tmp_path / "r" / "eval_results.json").read_text())["eval"].get("action_counts") == action_counts


def test_memory_problem_compares_the_estimate_with_the_available_memory():
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    ok, message = U.memory_problem("the rollout storage (--num-steps-max 8)", lambda: 2**20, cuda=False)
    assert ok and message.startswith("the rollout storage (--num-steps-max 8) needs 0.0 GiB, more than the ")
    ok, message = U.memory_problem("the buffer", lambda: 3 * 2**50, cuda=False)
    assert not ok and re.fullmatch(r"the buffer needs 3145728\.0 GiB, more than the [0-9.]+ GiB of available RAM",
                                   message), message
    assert abs(float(message.split("than the ")[1].split()[0]) - available / 2**30) < 2  # it is MemAvailable
    for overflowing in (lambda: 10**400, lambda: torch.empty(2**62, 2**62, device="meta").numel()):
        ok, message = U.memory_problem("x", overflowing, cuda=False)
        assert not ok and message.startswith("x needs over 2^63 bytes, more than the "), message


def test_rollout_memory_problem_sizes_the_storage_at_L_max_and_names_its_flag():
    from types import SimpleNamespace

    seen = []

    def nbytes_at(L):
        seen.append(L)
        return L * 2**50
    a = SimpleNamespace(adapt=True, num_steps_max=4096, num_steps=128, num_envs=8, cuda=False)
    ok, message = U.rollout_memory_problem(a, nbytes_at)
    assert not ok and seen == [4096] and message.startswith(
        "the rollout storage (--num-steps-max 4096 x --num-envs 8) needs 4294967296.0 GiB, more than the ")
    a.adapt = False
    ok, message = U.rollout_memory_problem(a, nbytes_at)
    assert seen == [4096, 128] and message.startswith("the rollout storage (--num-steps 128 x --num-envs 8) needs ")
    assert U.rollout_memory_problem(a, lambda L: L)[0]


def test_action_names_are_envpools_actions_in_its_order():
    import envpool
    assert U.action_names("Breakout-v5") == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    names = U.action_names("BattleZone-v5")  # the full set: 18 actions, the ALE's own order
    assert len(names) == 18 and (names[8], names[14]) == ("DOWNRIGHT", "UPRIGHTFIRE")
    for env_id in ["MsPacman-v5", "Pong-v5", "DoubleDunk-v5", "NameThisGame-v5", "Phoenix-v5", "Qbert-v5"]:
        envs = envpool.make(env_id, env_type="gymnasium", num_envs=1)
        assert len(U.action_names(env_id)) == envs.action_space.n, env_id
        envs.close()


def test_fire_action_is_the_index_of_fire_in_the_games_minimal_action_set():
    for env_id in ["Breakout-v5", "Pong-v5", "SpaceInvaders-v5", "MontezumaRevenge-v5", "BattleZone-v5"]:
        assert U.fire_action(env_id) == 1, env_id
    for game in ["Asterix", "CrazyClimber", "Freeway", "KungFuMaster", "MsPacman", "Skiing", "Surround", "Tutankham"]:
        assert U.fire_action(f"{game}-v5") is None, game


def test_run_checkpoints_at_boundaries_and_the_end_and_resumes_the_timings(tmp_path):
    run = new_run(tmp_path)
    run.begin(0)
    state = {"global_step": 0, "iteration": 0}
    run.checkpoint(64, 64, lambda: state)
    assert not os.path.exists(run.checkpoint_path)  # no multiple of 100 in (0, 64]
    run.perf["env"] = 1.5
    state["global_step"] = 128
    run.checkpoint(128, 64, lambda: state)  # 100 lies in (64, 128]
    ck = U.load_checkpoint(run.checkpoint_path, SCRIPT)
    assert ck["global_step"] == 128 and ck["perf"] == {"env": 1.5, "update": 0.0} and ck["run_name"] == "r"
    assert ck["args"]["checkpoint_every"] == 100 and set(ck["rng"]) == {"python", "numpy", "torch"}
    ck["train_seconds"] = 42.0
    U.atomic_torch_save(run.checkpoint_path, ck)  # as a run that had trained 42 s writes it
    run.writer.close()
    run.lock.close()  # the first process ended
    args, checkpoint = parse(["--resume", run.checkpoint_path, "--total-timesteps", "2000", "--extend-schedules"])
    resumed = U.Run(args, checkpoint, SCRIPT, phases=("env", "update"))
    resumed.begin(checkpoint["global_step"])
    assert resumed.dir == run.dir and resumed.train_seconds == 42.0 and resumed.perf == {"env": 1.5, "update": 0.0}
    resumed.checkpoint(199, 71, lambda: {"global_step": 199, "iteration": 2})  # no multiple of 100 in (128, 199]
    assert U.load_checkpoint(resumed.checkpoint_path, SCRIPT)["global_step"] == 128
    resumed.checkpoint(200, 1, lambda: {"global_step": 200, "iteration": 3})  # 200 in (199, 200]
    assert U.load_checkpoint(resumed.checkpoint_path, SCRIPT)["global_step"] == 200
    resumed.checkpoint(2000, 64, lambda: {"global_step": 2000, "iteration": 9})  # the end is always checkpointed
    assert U.load_checkpoint(resumed.checkpoint_path, SCRIPT)["global_step"] == 2000
    resumed.writer.close()
    resumed.lock.close()
    never = new_run(tmp_path / "never", ["--checkpoint-every", "0"])  # 0: only at the end
    never.begin(0)
    never.checkpoint(500, 500, lambda: {"global_step": 500, "iteration": 1})
    assert not os.path.exists(never.checkpoint_path)
    never.writer.close()


def test_a_stop_signal_checkpoints_and_exits_128_plus_n(tmp_path, capsys):
    run = new_run(tmp_path, ["--checkpoint-every", "0"])
    run.begin(0)

    def slow_state():  # two more signals arrive while the checkpoint is being written
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        return {"global_step": 64, "iteration": 1}

    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only records it
        assert run.stop_signal == [signal.SIGTERM]
        with pytest.raises(SystemExit) as e:
            run.checkpoint(64, 64, slow_state)
    finally:
        run.end_training()  # the default handlers again
    assert e.value.code == 128 + signal.SIGTERM
    out = capsys.readouterr().out
    assert "checkpointing at the end of this iteration" in out and "resume with --resume" in out
    assert out.count("already stopping") == 2 and run.stop_signal[1:] == [signal.SIGINT, signal.SIGTERM]
    assert U.load_checkpoint(run.checkpoint_path, SCRIPT)["global_step"] == 64
    assert not os.path.exists(run.checkpoint_path + ".tmp")


def test_a_non_finite_loss_saves_the_state_before_it_and_exits_3(tmp_path, capsys):
    run = new_run(tmp_path)
    run.begin(0)
    with pytest.raises(SystemExit) as e:
        run.fail(32, RuntimeError("non-finite TD loss"), lambda: {"global_step": 0})
    run.end_training()
    assert e.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: non-finite TD loss at global_step 32"), err
    # The toy's only loss scale is named with its value; flags it does not have (PPO's --ent-coef) are not.
    assert err[0].endswith("lower values of the flags that scale the loss or its steps (--learning-rate 0.001).")
    assert U.load_checkpoint(os.path.join(run.dir, "checkpoint_nonfinite.pt"), SCRIPT)["global_step"] == 0
    assert not os.path.exists(run.checkpoint_path)  # checkpoint.pt stays the last good one


def test_a_non_finite_loss_names_every_loss_scale_the_script_has():
    ppo_like = argparse.Namespace(learning_rate=3e-4, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, gamma=0.99)
    assert U.loss_scales(ppo_like) == "--learning-rate 0.0003, --ent-coef 0.01, --vf-coef 0.5, --max-grad-norm 0.5"
    btr_like = argparse.Namespace(learning_rate=1e-4, munchausen_alpha=0.9, max_grad_norm=10.0, adam_eps=0.005)
    assert U.loss_scales(btr_like) == "--learning-rate 0.0001, --munchausen-alpha 0.9, --max-grad-norm 10.0"


def test_a_resumed_writer_drops_the_events_after_the_checkpoint(tmp_path):
    run = new_run(tmp_path)
    run.begin(0)
    for step in (100, 200, 300):
        run.log(step, {"losses/x": float(step)})
    run.writer.close()
    run.lock.close()  # the first process ended
    path = write_checkpoint(tmp_path / "r" / "checkpoint.pt", run.args, global_step=200)
    args, checkpoint = parse(["--resume", path])
    resumed = U.Run(args, checkpoint, SCRIPT, phases=("env",))
    resumed.begin(200)
    resumed.log(250, {"losses/x": 250.0})
    resumed.writer.close()
    assert scalars(run.dir)["losses/x"] == [(100, 100.0), (200, 200.0), (250, 250.0)]


# ------------------------------------------------------------------ run directories
def test_the_default_run_name_cannot_escape_the_output_dir(tmp_path, capsys):
    for exp_name in ("/../../escaped", "a/b"):
        with pytest.raises(SystemExit) as e:
            parse(["--output-dir", str(tmp_path / "out"), "--exp-name", exp_name])
        assert e.value.code == 2 and one_error_line(capsys).startswith("error: --exp-name must make a run name")
    with pytest.raises(SystemExit):
        parse(["--output-dir", str(tmp_path), "--run-name", "x" * 300])
    assert "at most 255 bytes" in one_error_line(capsys)
    assert os.listdir(tmp_path) == []


def test_run_directory_problems_are_one_line_before_anything_is_created(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "taken").write_text("")  # a file where the run directory would go
    for argv, needle in [(["--output-dir", str(tmp_path / "file")], "--output-dir: "),
                         (["--output-dir", str(tmp_path / "file" / "below")], "is not a directory"),
                         (["--output-dir", str(tmp_path / "out"), "--run-name", "taken"], "--run-name: ")]:
        with pytest.raises(SystemExit) as e:
            parse([*argv, "--run-name", "r"] if "--run-name" not in argv else argv)
        assert e.value.code == 2 and needle in one_error_line(capsys)
    args, _ = parse(["--output-dir", "/sys/abs-test", "--run-name", "r"])  # passes the checks, cannot be created
    with pytest.raises(SystemExit) as e:
        U.Run(args, None, SCRIPT, phases=("env",))
    line = one_error_line(capsys)
    assert e.value.code == 2 and line.startswith("error: --output-dir: /sys/abs-test/r cannot be written"), line
    assert sorted(os.listdir(tmp_path)) == ["file", "out"] and os.listdir(tmp_path / "out") == ["taken"]


def test_a_second_live_run_on_one_directory_is_refused(tmp_path, capsys):
    run = new_run(tmp_path)
    other = subprocess.run([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); "
                            "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)", os.path.join(run.dir, ".lock")],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "BlockingIOError" in other.stderr  # the lock holds against other processes
    args, _ = parse(["--output-dir", str(tmp_path), "--run-name", "r"])  # no checkpoint or results there yet
    with pytest.raises(SystemExit) as e:
        U.Run(args, None, SCRIPT, phases=("env",))
    assert e.value.code == 2 and "is in use by another live run" in one_error_line(capsys)
    run.lock.close()  # as when the first process ends, however it ends
    U.Run(args, None, SCRIPT, phases=("env",))


def test_a_resume_below_the_checkpoints_step_and_ill_typed_checkpoints_are_refused(tmp_path, capsys):
    path = write_checkpoint(tmp_path / "r" / "checkpoint.pt", Args(run_name="r"), global_step=640)
    with pytest.raises(SystemExit):
        parse(["--resume", path, "--total-timesteps", "600"])
    assert "--total-timesteps (600) is below the checkpoint's global_step (640)" in one_error_line(capsys)
    good = U.load_checkpoint(path, SCRIPT)  # written by a run whose contents do not fit: their digest is theirs
    for bad, needle in [({"iteration": "3"}, "no valid 'iteration' (str)"), ({"perf": None}, "no valid 'perf'"),
                        ({"args": {**good["args"], "total_timesteps": "1000"}}, "--total-timesteps = '1000'"),
                        ({"args": {**good["args"], "schedule": "cubic"}}, "--schedule = 'cubic'"),
                        ({"args": {**good["args"], "adapt": 1}}, "--adapt = 1")]:
        U.atomic_torch_save(path, {**good, **bad})
        with pytest.raises(SystemExit) as e:
            parse(["--resume", path])
        assert e.value.code == 2 and needle in one_error_line(capsys)


def test_flag_types_of_a_checkpoint():
    assert U.is_a(3, int) and U.is_a(3, float) and U.is_a(3.0, float) and not U.is_a(True, int)
    assert U.is_a(None, Optional[str]) and U.is_a("x", Optional[str]) and not U.is_a(3, Optional[str])
    assert U.is_a(False, bool) and not U.is_a(0, bool) and U.is_a("log", Literal["log", "linear"])
    assert not U.is_a("cubic", Literal["log", "linear"]) and not U.is_a(2.5, int)


def test_eta_of_a_huge_run_does_not_overflow(tmp_path, capsys):
    # the largest --total-timesteps the flag checks allow (U.MAX_COUNT), at 1 step per second
    assert progress_line(tmp_path, capsys, 0, U.MAX_COUNT, 1, "x", []).endswith("| ETA 277777777:46:40")
    assert progress_line(tmp_path, capsys, 0, 3 * 3600 + 61, 1, "x", []).endswith("| ETA 3:01:01")


def test_env_seed_is_the_seed_for_a_new_run_and_moves_with_the_step_on_a_resume():
    assert U.env_seed(7, 0) == 7 and U.env_seed(7, 1_000_000) == 1_000_007
    assert U.env_seed(2**31 - 10_001, 20_000_000) == (2**31 - 10_001 + 20_000_000) - 2**31  # envpool's int32
    assert all(0 <= U.env_seed(s, g) < 2**31 for s in (0, 2**31 - 10_001) for g in (0, 1, 2**40))


# ---------------------------------------------------------------- the Atari evaluation loop's two protocols
class GamesOfFixedLength:
    """envpool's Atari interface on envs whose games last `lengths[i]` steps each and score i + 1 (no lives lost)."""

    def __init__(self, lengths):
        self.lengths, self.config = np.array(lengths), {"num_envs": len(lengths)}
        self.action_space = gymnasium.spaces.Discrete(3)
        self.elapsed = np.zeros(len(lengths), dtype=np.int64)

    def info(self):
        return {"lives": np.full(len(self.lengths), 5), "elapsed_step": self.elapsed.copy()}

    def reset(self):
        return np.zeros(len(self.lengths)), self.info()

    def step(self, actions):
        self.elapsed = np.where(self.elapsed == self.lengths, 0, self.elapsed) + 1  # envpool resets after an end
        term = self.elapsed == self.lengths
        return np.zeros(len(self.lengths)), np.where(term, np.arange(len(self.lengths)) + 1.0, 0.0), term, \
            np.zeros_like(term), self.info()

    def close(self):
        pass


def test_quota_plays_equal_shares_and_first_finished_the_first_games_to_end():
    act = lambda obs: np.arange(len(obs)) % 2  # noqa: E731  envs 0 and 2 choose action 0, env 1 action 1
    # Quotas [2, 2, 1]: every env's games count, whatever their length. The last game ends at step 7: 7 steps of 3
    # envs, 14 choices of action 0 and 7 of action 1 (of the 3 actions).
    returns, lengths, capped, actions = U.play_atari_games(GamesOfFixedLength([2, 3, 7]), act, 5, None)
    assert (returns, lengths, capped, actions) == ([1.0, 2.0, 1.0, 2.0, 3.0], [2, 3, 2, 3, 7], 0, [14, 7, 0])
    # The first 5 to end: steps 2 (env 0), 3 (env 1), 4 (env 0), 6 (env 0, then env 1 in env order). Env 2's
    # 7-step game never counts, and the mean length falls from 3.4 to 2.4: the order favours short games.
    returns, lengths, capped, actions = U.play_atari_games(GamesOfFixedLength([2, 3, 7]), act, 5, None,
                                                           "first-finished")
    assert (returns, lengths, capped, actions) == ([1.0, 2.0, 1.0, 1.0, 2.0], [2, 3, 2, 2, 3], 0, [12, 6, 0])
    # A tie at the last place: only the first env's game of that step counts.
    returns, lengths, _, _ = U.play_atari_games(GamesOfFixedLength([2, 2, 2]), act, 4, None, "first-finished")
    assert (returns, lengths) == ([1.0, 2.0, 3.0, 1.0], [2, 2, 2, 2])
    with pytest.raises(ValueError, match="protocol"):
        U.play_atari_games(GamesOfFixedLength([2]), act, 1, None, "first")


# ----------------------------------------------------------------- outside the loop, finished runs, checkpoint contents
@pytest.fixture
def restore_signal_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_signal_outside_the_loop_is_one_line_and_exit_128_plus_n(tmp_path, capsys, monkeypatch,
                                                                     restore_signal_handlers):
    """Before a resumed run's loop the checkpoint is untouched; after training (the evaluation) it is saved and a
    resume evaluates again. (The scripts' own processes: tests/test_hardening_runs.py.)"""
    exits = []
    monkeypatch.setattr(U.signals, "_exit", exits.append)  # the handler ends the process at once; here it only records
    monkeypatch.setattr(U.signals, "_end_helpers", lambda: None)  # and the tests' own children live on (test below)
    saved = Args(run_name="r", total_timesteps=640)
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", saved, global_step=320)
    args, checkpoint = parse(["--resume", ckpt])
    run = U.Run(args, checkpoint, SCRIPT, phases=("env",))
    os.kill(os.getpid(), signal.SIGTERM)
    assert exits == [143] and capsys.readouterr().out.strip() == (
        f"stopped by signal 15 before training resumed: {ckpt} is unchanged (global_step 320); resume it again with "
        f"--resume {ckpt}")
    run.begin(320)
    run.checkpoint(640, 320, lambda: {"global_step": 640, "iteration": 1})  # the end: checkpointed
    run.end_training()
    os.kill(os.getpid(), signal.SIGINT)
    assert exits == [143, 130] and capsys.readouterr().out.strip() == (
        f"stopped by signal 2 during the evaluation: training is saved in {ckpt} (global_step 640, its end); "
        f"--resume {ckpt} evaluates it again")
    run.finish(640, [1.0], [10], 0)
    os.kill(os.getpid(), signal.SIGTERM)
    assert exits[-1] == 143 and "after the evaluation: the result is saved in" in capsys.readouterr().out


def test_a_signal_outside_the_loop_ends_the_helpers_a_library_started(tmp_path):
    """A helper left behind (here one like glfw's version probe, which MuJoCo's import starts: a `python -c` child
    reading a line from a pipe) would outlive the stopped process and print its EOFError into the same stderr."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (f"import os, signal, subprocess, sys, time; sys.path.insert(0, {root!r}); from abs_utils import signals; "
            "signals.stop_outside_loop('before training started', 'nothing was saved'); "
            "probe = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1); input()'], "
            "stdin=subprocess.PIPE); print(probe.pid, flush=True); os.kill(os.getpid(), signal.SIGTERM); "
            "time.sleep(30)")
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    probe, line = p.stdout.strip().splitlines()
    assert p.returncode == 143 and line == "stopped by signal 15 before training started: nothing was saved"
    assert p.stderr == ""  # no EOFError from the probe: it ended with its parent
    assert time.monotonic() - start < 60

    def ended(pid):  # gone, or a zombie where nothing reaps the orphans (a container's first process may not)
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
        except FileNotFoundError:
            return True
    deadline = time.monotonic() + 5  # killed at once: it ends within moments, not after its 1 s sleep and a read
    while not ended(int(probe)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended(int(probe))


def write_result(run_dir, global_step):
    (run_dir / "eval_results.json").write_text(json.dumps({"global_step": global_step, "eval": {"episodes": 1}}))


def test_a_finished_run_is_refused_and_one_stopped_in_its_evaluation_is_evaluated_again(tmp_path, capsys):
    saved = Args(run_name="r", total_timesteps=640)
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", saved, global_step=640)
    args, checkpoint = parse(["--resume", ckpt])  # no result: its evaluation was stopped, the resume is that
    assert checkpoint["global_step"] == 640 and args.total_timesteps == 640
    write_result(tmp_path / "r", 640)
    for extra in ([], ["--total-timesteps", "640"], ["--log-every-seconds", "1"]):
        with pytest.raises(SystemExit) as e:
            parse(["--resume", ckpt, *extra])
        line = one_error_line(capsys)
        assert e.value.code == 2 and line == (
            f"error: --resume: {tmp_path / 'r'} is a finished run (its checkpoint and eval_results.json are at "
            "global_step 640): nothing to resume. To train on, give a larger --total-timesteps with "
            "--extend-schedules; to evaluate it again, move its eval_results.json aside first")
    extended = parse(["--resume", ckpt, "--total-timesteps", "1280", "--extend-schedules"])
    assert extended[0].total_timesteps == 1280  # extended: trains on
    write_result(tmp_path / "r", 320)  # a result of an earlier step: this checkpoint's evaluation is still due
    assert parse(["--resume", ckpt])[1]["global_step"] == 640


@dataclass
class StopArgs(Args):
    stop_at_step: Optional[int] = None


def test_a_prefix_checkpoint_without_its_result_keeps_its_stop_and_with_it_runs_on(tmp_path, capsys):
    def parse_stop(argv):
        return U.parse_args(StopArgs, SCRIPT, problems, (*RUN_CONTROL, "stop_at_step"), STATE, argv)

    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", StopArgs(run_name="r", stop_at_step=320),
                            global_step=320)
    assert parse_stop(["--resume", ckpt])[0].stop_at_step == 320  # evaluated again at its stop
    assert parse_stop(["--resume", ckpt, "--stop-at-step", "480"])[0].stop_at_step == 480  # a given stop wins
    write_result(tmp_path / "r", 320)
    assert parse_stop(["--resume", ckpt])[0].stop_at_step is None  # evaluated: on to --total-timesteps
    with pytest.raises(SystemExit):
        parse_stop(["--resume", ckpt, "--stop-at-step", "320"])
    assert "must be above the checkpoint's global_step" in one_error_line(capsys)


def test_an_earlier_result_at_the_same_step_is_never_overwritten(tmp_path, capsys):
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", Args(run_name="r"), global_step=320)
    (tmp_path / "r" / "eval_results_at_320.json").write_text("first")
    write_result(tmp_path / "r", 320)
    run = U.Run(*parse(["--resume", ckpt]), SCRIPT, phases=("env",))
    U.keep_earlier_result(run.dir, 320)
    assert (tmp_path / "r" / "eval_results_at_320.json").read_text() == "first"
    assert json.loads((tmp_path / "r" / "eval_results_at_320_2.json").read_text())["global_step"] == 320
    assert not (tmp_path / "r" / "eval_results.json").exists()
    run.lock.close()


@pytest.mark.parametrize("extra, needle", [
    ({"global_step": -1}, "holds global_step = -1, which must be a finite number >= 0"),
    ({"iteration": -3}, "holds iteration = -3, which must be a finite number >= 0"),
    ({"train_seconds": -1.0}, "holds train_seconds = -1.0"),
    ({"train_seconds": float("nan")}, "holds train_seconds = nan"),
])
def test_negative_counters_in_a_checkpoint_are_refused_before_anything_is_created(tmp_path, capsys, extra, needle):
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", Args(run_name="r"), **extra)
    with pytest.raises(SystemExit) as e:
        parse(["--resume", ckpt])
    line = one_error_line(capsys)
    assert e.value.code == 2 and line.startswith(f"error: --resume: {ckpt!r} ") and needle in line, line
    assert os.listdir(tmp_path / "r") == ["checkpoint.pt"]


def test_a_bad_flag_value_from_a_checkpoint_is_named_as_the_checkpoints(tmp_path, capsys):
    ckpt = write_checkpoint(tmp_path / "r" / "checkpoint.pt", Args(run_name="r", learning_rate=-1.0))
    with pytest.raises(SystemExit):
        parse(["--resume", ckpt])
    assert one_error_line(capsys) == (f"error: --learning-rate must be > 0, got -1.0; --learning-rate comes from the "
                                      f"checkpoint {ckpt}, not from the command line (the file is damaged or was "
                                      "written by another version)")
    ckpt = write_checkpoint(tmp_path / "s" / "checkpoint.pt", Args(run_name="s"))  # typed: no mention of it
    with pytest.raises(SystemExit):
        parse(["--resume", ckpt, "--total-timesteps", "0"])
    assert one_error_line(capsys) == "error: --total-timesteps must be >= 1, got 0"
    assert U.given_flags(["--no-cuda", "--total_timesteps=5", "x", "--seed", "1"]) == {
        "no_cuda", "cuda", "total_timesteps", "seed"}


def test_load_state_turns_what_does_not_fit_into_one_line(capsys):
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    other = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2)).state_dict()
    for key, state, load, needle in [
        ("net", other, net.load_state_dict, "size mismatch for 0.weight: copying a param with shape "
                                             "torch.Size([3, 5]) from checkpoint"),
        ("net", {}, net.load_state_dict, 'Missing key(s) in state_dict: "0.weight"'),
        ("optimizer", {}, torch.optim.Adam(net.parameters()).load_state_dict, "no 'param_groups'"),
        ("scheduler", {"history": []}, lambda s: float(s["L"]), "no 'L'"),
    ]:
        with pytest.raises(SystemExit) as e:
            U.load_state("c.pt", {key: state}, key, load)
        line = one_error_line(capsys)
        assert e.value.code == 2 and line.startswith(f"error: --resume: c.pt's {key!r} does not fit this run (")
        assert needle in line and len(line) <= 400, line
    U.load_state("c.pt", {"net": net.state_dict()}, "net", net.load_state_dict)  # what fits loads


def test_no_file_of_abs_utils_is_over_the_cap_conventions_states():
    """docs/CONVENTIONS.md: "One file a concern, each at most 300 lines"."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "CONVENTIONS.md")) as f:
        cap = int(re.search(r"each at most (\d+) lines", f.read()).group(1))
    folder = os.path.join(root, "abs_utils")
    sizes = {name: len(open(os.path.join(folder, name)).read().splitlines()) for name in os.listdir(folder)
             if name.endswith(".py")}
    assert cap == 300 and not {name: n for name, n in sizes.items() if n > cap}, sizes
