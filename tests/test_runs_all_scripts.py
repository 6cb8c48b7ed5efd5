"""The run machinery every script shares, tested once for all six (tests/scripts.py is their table):

- SIGTERM during training checkpoints and exits 143; --resume alone finishes the run with every flag of the first
  one, its schedules carried across the stop; a new run with the same --run-name is refused;
- a non-finite loss stops with exit 3, saving the state before the failing step;
- bad input is one line naming the flag, exit 2, and nothing created: each script's own rows (BAD_INPUTS in its test
  file, which must name every numeric flag it has), every integer flag at 2^63, and the rows abs_utils checks alike
  for every script (once, on one script);
- --help shows every flag with its docstring and default; a checkpoint of another script, or one without this
  script's state, is refused, and a resume keeps the checkpoint's algorithm flags.

A check that lives once in abs_utils is tested there (tests/test_abs_utils.py, with a toy Args) and end to end on one
script (scripts.GENERIC); what only one script has stays in its own test file."""
import ast
import dataclasses
import importlib
import json
import math
import os
import runpy
import signal
import subprocess
import sys
import time
from typing import Optional

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, GENERIC, ROOT, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

sys.path.insert(0, ROOT)  # the scripts import abs_utils beside them
# One intra-op thread per run: on 2 shared cores, more threads spin against the environments' workers.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MODULES = {script: SCRIPTS[script].module() for script in SCRIPTS}
# Each script's own bad-input rows (argv, what its one error line must name) live in its test file.
TESTS = {script: importlib.import_module("test_" + SCRIPTS[script].name) for script in SCRIPTS}


def run(script, argv, cwd, timeout=600):
    return preloaded.run([sys.executable, SCRIPTS[script].path, *argv], capture_output=True, text=True,
                         timeout=timeout, cwd=cwd, env=ENV)


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def files_of(run_dir):
    return {p: p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def one_error_line(p_or_err: str):
    lines = p_or_err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p_or_err[-2000:]
    return lines[0]


# ---------------------------------------------------------------- SIGTERM, then --resume alone
def stopped_flags(S):  # the script's run that a SIGTERM stops (scripts.StoppedRun)
    return [*S.adaptive, *CPU, *S.stopped.flags]


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_sigterm_then_resume_with_only_resume_finishes_the_run(script, tmp_path):
    """Every flag, the step budget and the evaluation flags of the first run are kept; the schedule logged after the
    stop continues the first run's (learning rate annealed by the steps done when each iteration started, epsilon by
    the steps done); with K = 3 the iteration count carried across the stop keeps the measurements on every 3rd
    iteration."""
    S, m = SCRIPTS[script], MODULES[script]
    stopped_run = S.stopped
    total, ckpt_path = stopped_run.total, tmp_path / "once" / "checkpoint.pt"
    first = [*stopped_flags(S), "--total-timesteps", str(total), "--output-dir", str(tmp_path), "--run-name", "once"]
    proc = preloaded.Popen([sys.executable, S.path, *first], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=ENV, cwd=tmp_path)
    try:
        for line in proc.stdout:  # wait until training runs
            if line.startswith("step "):
                break
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "resume with --resume" in out and not (tmp_path / "once" / "eval_results.json").exists()
    stopped = torch.load(ckpt_path, weights_only=True)
    assert 0 < stopped["global_step"] < total and stopped["algo"] == S.name

    p = run(script, ["--resume", str(ckpt_path)], tmp_path)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert f"resumed {ckpt_path} at global_step {stopped['global_step']}" in p.stdout
    res = json.loads((tmp_path / "once" / "eval_results.json").read_text())
    # the first run's --total-timesteps, not the default (millions of steps)
    assert res["total_timesteps"] == total and total <= res["global_step"] < total + stopped_run.overshoot
    first_args = stopped["args"]
    first_args.pop("resume"), res["args"].pop("resume")
    assert res["args"] == first_args  # every flag of the first run
    ev = res["eval"]  # evaluated with the first run's evaluation flags
    assert ev["episodes"] == first_args["eval_episodes"] == len(ev["returns"]) > 0
    assert all(n <= first_args.get("eval_max_episode_steps", math.inf) for n in ev["lengths"])
    assert os.listdir(tmp_path) == ["once"]

    tags = scalars(tmp_path / "once")
    logged = tags[stopped_run.tag]
    steps = [s for s, _ in logged]
    assert steps == sorted(set(steps))
    assert [s for s in steps if s > stopped["global_step"]] and len({v for _, v in logged}) > 2  # it moves, after too
    for (s0, _), (s, v) in zip([(0, None), *logged[:-1]], logged):
        assert v == pytest.approx(stopped_run.value(m, s, s0, total), rel=1e-5, abs=1e-7), (s, v)
    if stopped_run.measured:  # one measurement at the end of every 3rd iteration, before and after the stop
        final = torch.load(ckpt_path, weights_only=True)
        assert first_args["adapt_freq"] == 3 and len(steps) == final["iteration"] > stopped["iteration"]
        assert stopped["global_step"] in steps  # one row per iteration: the resume purged none before the stop
        for ckpt in (stopped, final):
            assert ckpt["scheduler"]["num_measurements"] == ckpt["iteration"] // 3
        assert [s for s, _ in tags[stopped_run.measured]] == steps[2::3] and len(steps) >= 6

    # A new run with the same --run-name is refused and leaves the first run's files as they were.
    before = files_of(tmp_path / "once")
    p = run(script, [*stopped_flags(S), "--total-timesteps", "64", "--output-dir", str(tmp_path), "--run-name",
                     "once"], tmp_path, timeout=120)
    line = one_error_line(p.stderr)
    assert p.returncode == 2 and "--resume" in line and "--run-name" in line
    assert files_of(tmp_path / "once") == before


# ---------------------------------------------------------------- a non-finite loss
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_non_finite_loss_stops_with_exit_3_and_the_state_before_the_step(script, tmp_path):
    """--learning-rate 1e30: the first updates ruin the weights, and the script stops before the step whose loss or
    gradient is not finite (checkpoint_nonfinite.pt); checkpoint.pt stays the last good one and nothing is evaluated.
    (abs_ppo_mujoco.py's test of --ent-coef shows the line naming every flag that scales the loss.)"""
    S = SCRIPTS[script]
    total = 20_000 if script == "abs_pqn_atari.py" else 2000
    p = run(script, [*S.adaptive, *CPU, *S.cheaper, "--learning-rate",
                     "1e30", "--total-timesteps", str(total), "--output-dir", str(tmp_path), "--run-name", "nan"],
            tmp_path)
    assert p.returncode == 3, p.stdout[-1000:] + p.stderr[-1000:]
    path = tmp_path / "nan" / "checkpoint_nonfinite.pt"
    line = one_error_line(p.stderr)
    assert line.startswith("error: non-finite ") and "loss or gradient" in line and str(path) in line, line
    assert "--learning-rate 1e+30" in line
    failed = torch.load(path, weights_only=True)
    assert all(torch.isfinite(v).all() for v in failed[S.network].values())  # the weights before the failing step
    assert 0 < failed["global_step"] < total and not (tmp_path / "nan" / "eval_results.json").exists()
    assert failed["global_step"] >= failed["args"].get("learning_starts", 0)  # BTR: no update before it learns
    # its clock runs up to the failure (it once kept the last checkpoint's, here none: 0)
    assert failed["train_seconds"] >= sum(failed["perf"].values()) > 0


# ---------------------------------------------------------------- machinery run on one script
def test_two_quick_sigterms_still_checkpoint_and_exit_143(tmp_path):
    """A cluster or a double Ctrl-C: the second signal arrives while the first is being handled."""
    S = SCRIPTS[GENERIC]
    proc = preloaded.Popen([sys.executable, S.path, *S.adaptive, *CPU, "--total-timesteps", "10000000", "--run-name",
                            "twice", "--checkpoint-every", "0", "--output-dir", str(tmp_path)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=ENV)
    for line in proc.stdout:  # wait until training runs
        if line.startswith("step "):
            break
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "Traceback" not in out and "resume with --resume" in out
    ckpt = torch.load(tmp_path / "twice" / "checkpoint.pt", weights_only=True)
    assert ckpt["global_step"] > 0 and ckpt["args"]["run_name"] == "twice"


def test_hard_kill_after_a_checkpoint_keeps_the_events_up_to_it(tmp_path):
    """SIGKILL leaves no chance to close the event file: the events up to the last checkpoint must already be on disk,
    or a resumed run (which purges only the later ones) has a hole in every curve. abs_utils.Run flushes the writer
    before each checkpoint; tensorboard's own file layer also appends each event at once, but tensorflow's
    tf.io.gfile (used when tensorflow is installed) buffers until a flush."""
    S = SCRIPTS["abs_ppo_mujoco.py"]
    p = preloaded.Popen([sys.executable, S.path, *S.adaptive, *CPU, "--total-timesteps", "1000000",
                         "--checkpoint-every", "2000", "--output-dir", str(tmp_path), "--run-name", "kill"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    ckpt_path = tmp_path / "kill" / "checkpoint.pt"
    try:
        deadline = time.time() + 120
        while not ckpt_path.exists() and time.time() < deadline and p.poll() is None:
            time.sleep(0.01)
    finally:
        p.kill()
        p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    step = torch.load(ckpt_path, weights_only=True)["global_step"]
    logged = [s for s, _ in scalars(tmp_path / "kill")["losses/policy_loss"]]
    assert step >= 2000 and step in logged  # the checkpointed iteration's events are on disk


class PickleBomb:
    """Unpickling it creates a directory: the side effect a malicious checkpoint could have."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_checkpoint_holding_a_pickled_object_is_refused_without_running_it(tmp_path):
    marker, evil = tmp_path / "side_effect", tmp_path / "evil" / "checkpoint.pt"
    evil.parent.mkdir()
    torch.save({"args": {}, "run_name": "evil", "payload": PickleBomb(str(marker))}, evil)
    p = run(GENERIC, ["--resume", str(evil)], tmp_path, timeout=120)
    assert p.returncode == 2 and one_error_line(p.stderr).startswith("error: --resume: refused"), p.stderr
    assert not marker.exists() and os.listdir(evil.parent) == ["checkpoint.pt"]
    torch.load(evil, weights_only=False)  # the file does what it claims when loaded unsafely
    assert marker.is_dir()


# ---------------------------------------------------------------- bad input from a real process
REAL_PROCESS_ROWS = [
    *[(script, ["--env-id", SCRIPTS[script].other_env], "--env-id") for script in SCRIPTS],
    ("abs_pqn_atari.py", ["--num-steps-min", "80", "--num-steps-max", "64"], "--num-steps-min"),
    ("gns_pqn_atari.py", ["--num-envs", "12"], "--gns-micro-batches"),  # 12 % 8 micro-batches
    ("abs_ppo_atari.py", ["--num-steps-min", "300"], "--num-steps-min"),
    ("abs_ppo_mujoco.py", ["--kl-low", "0.1", "--kl-high", "0.05"], "--kl-high"),
    ("abs_btr.py", ["--batch-size-max", "70"], "--batch-size-max"),
    # tyro's own error, drawn as a box on a UTF-8 pipe (under pytest's capture it is plain text): one line
    ("gns_pqn_atari.py", ["--gns-timing", "during"], "invalid choice 'during' for argument '--gns-timing'"),
    (GENERIC, ["--resume", "nowhere/checkpoint.pt"], "--resume: no checkpoint file at 'nowhere/checkpoint.pt'"),
    (GENERIC, ["--resume", "not_a_checkpoint.pt"], "--resume: 'not_a_checkpoint.pt' is not a checkpoint of this"),
]


@pytest.mark.parametrize("script, argv, needle", REAL_PROCESS_ROWS)
def test_bad_flag_of_a_real_process_is_one_line_exit_2_and_creates_nothing(script, argv, needle, tmp_path):
    (tmp_path / "not_a_checkpoint.pt").write_text("not a checkpoint")
    out = tmp_path / "out"
    p = run(script, [*argv, "--output-dir", str(out), "--run-name", "x"], tmp_path, timeout=120)
    assert p.returncode == 2 and needle in one_error_line(p.stderr), p.stderr
    assert not out.exists()


def docstrings(path):
    """Each field of the script's Args -> the docstring under it (`name: type = default` then a string), its
    whitespace joined: read from the source, as tyro reads it."""
    with open(path) as f:
        tree = ast.parse(f.read())
    args = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args")
    return {field.target.id: " ".join(doc.value.value.split()) for field, doc in zip(args.body, args.body[1:])
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_help_shows_every_flag_with_its_docstring_and_default(script, tmp_path):
    p = run(script, ["--help"], tmp_path, timeout=120)
    assert p.returncode == 0 and os.listdir(tmp_path) == []
    text = " ".join(p.stdout.replace("│", " ").split())  # (the box's rules, inside a wrapped docstring)
    docs = docstrings(SCRIPTS[script].path)
    for field in dataclasses.fields(MODULES[script].Args):
        flag = "--" + field.name.replace("_", "-")
        assert flag in text and f"{docs[field.name]} (default: {field.default})" in text, flag


# ---------------------------------------------------------------- checkpoints and the resume's flags, in process
def checkpoint_of(m, args=None, **drop):
    """A checkpoint that passes script m's checks: abs_utils.RUN_STATE and m.CHECKPOINT_STATE, typed."""
    state = {"global_step": 64, "train_seconds": 1.0, "perf": {}, "rng": {}}
    state.update({key: (kind[0] if isinstance(kind, tuple) else kind)() for key, kind in m.CHECKPOINT_STATE.items()})
    state.update({"algo": m.SCRIPT, "run_name": "r", "args": args or {}})
    return {k: v for k, v in state.items() if k not in drop}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_resume_keeps_the_checkpoints_algorithm_flags_and_refuses_other_checkpoints(script, tmp_path, capsys):
    """Every flag not given comes from the checkpoint; a given run-control flag (RUN_CONTROL_FLAGS) wins and another
    given flag is ignored with a warning. A checkpoint of another script, or without one of this script's keys
    (CHECKPOINT_STATE), is refused in one line before anything is written."""
    m = MODULES[script]
    assert set(m.RUN_CONTROL_FLAGS) <= set(m.Args.__dataclass_fields__) and "total_timesteps" in m.RUN_CONTROL_FLAGS
    ckpt = tmp_path / "r" / "checkpoint.pt"
    ckpt.parent.mkdir()
    torch.save(checkpoint_of(m, {"seed": 7, "learning_rate": 0.125, "total_timesteps": 1000}), ckpt)
    args, checkpoint = m.parse_args(["--resume", str(ckpt), "--learning-rate", "0.5", "--total-timesteps", "2000",
                                     "--extend-schedules"])
    assert (args.seed, args.learning_rate, args.total_timesteps, args.run_name) == (7, 0.125, 2000, "r")
    assert checkpoint["global_step"] == 64
    err = capsys.readouterr().err.strip().splitlines()  # the algorithm flag given is named; the run-control one is not
    assert err[0] == "warning: --resume keeps the checkpoint's algorithm flags; ignoring --learning-rate 0.5 " \
                     "(checkpoint: 0.125)"
    assert len(err) == 2 and err[1].startswith("warning: --extend-schedules: ")  # the new total, stated

    other = next(SCRIPTS[s].module().SCRIPT for s in SCRIPTS if s != script)
    bad = {f"of {other}": ({**checkpoint_of(m), "algo": other}, f"is a checkpoint of {other}.py, not of {script}"),
           **{f"without {key}": (checkpoint_of(m, **{key: None}), f"no valid {key!r}") for key in m.CHECKPOINT_STATE}}
    for case, (content, needle) in bad.items():
        torch.save(content, ckpt)
        with pytest.raises(SystemExit) as e:
            m.parse_args(["--resume", str(ckpt)])
        line = one_error_line(capsys.readouterr().err)
        assert e.value.code == 2 and line.startswith(f"error: --resume: {str(ckpt)!r} ") and needle in line, case
    assert os.listdir(tmp_path / "r") == ["checkpoint.pt"]


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing created
NUMERIC = (int, float, Optional[int], Optional[float])
# abs_utils.common_problems checks these for every script alike (tests/test_abs_utils.py with its toy Args): their rows
# run once, on GENERIC, with the flags of the run directory and the checkpoint the same way.
CHECKED_FOR_EVERY_SCRIPT = {"seed", "torch_threads", "env_threads", "stop_at_step", "video_episodes"}
COMMON_ROWS = [
    (["--seed", "-1"], "--seed"), (["--seed", str(2**31 - 10_000)], "--seed"),
    (["--torch-threads", "-1"], "--torch-threads"), (["--torch-threads", "2000"], "--torch-threads"),
    (["--env-threads", "-1"], "--env-threads"), (["--env-threads", "2000"], "--env-threads"),
    (["--stop-at-step", "0"], "--stop-at-step"),  # (tests/test_stop_at_step.py: more values, from a real process)
    (["--video-episodes", "0"], "--video-episodes"), (["--capture-video", "--eval-episodes", "0"], "--capture-video"),
    (["--run-name", "../x"], "--run-name"), (["--run-name", "a/b"], "--run-name"), (["--run-name", ".."], "--run-name"),
    (["--track"], "--track"), (["--resume", "nowhere/checkpoint.pt"], "--resume"),
    # abs_utils.check_flags refuses a NaN or infinite value of every float flag alike, first
    *[(["--" + f.name.replace("_", "-"), value], "--" + f.name.replace("_", "-"))
      for f in dataclasses.fields(MODULES[GENERIC].Args) if f.type is float for value in ("nan", "inf", "-inf")],
]
BAD_INPUTS = [(script, argv, flag) for script in SCRIPTS for argv, flag in TESTS[script].BAD_INPUTS]
BAD_INPUTS += [(GENERIC, argv, flag) for argv, flag in COMMON_ROWS]
# Every integer flag, including those a script checks only from below or not at all: a count of 2^63 (a typo) would
# loop for ever or overflow (a deque of --window 2^63 once the run directory exists), so it is refused first.
INT_FLAGS = {script: [f.name for f in dataclasses.fields(MODULES[script].Args) if f.type in (int, Optional[int])]
             for script in SCRIPTS}
BAD_INPUTS += [(script, ["--" + name.replace("_", "-"), str(2**63)], "--" + name.replace("_", "-"))
               for script in SCRIPTS for name in INT_FLAGS[script]]


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_every_numeric_flag_has_a_bad_input_row(script):
    """A new numeric flag needs a row of its own in its script's BAD_INPUTS (its domain, checked in flag_problems)."""
    def named(rows):
        return {a[2:].replace("-", "_") for argv, _ in rows for a in argv if a.startswith("--")}

    numeric = {f.name for f in dataclasses.fields(MODULES[script].Args) if f.type in NUMERIC}
    missing = numeric - CHECKED_FOR_EVERY_SCRIPT - named(TESTS[script].BAD_INPUTS)
    assert not missing, f"no row in test_{script} BAD_INPUTS for {sorted(missing)}"
    assert CHECKED_FOR_EVERY_SCRIPT <= named(COMMON_ROWS)


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_the_int_flags_are_the_counts(script):
    assert {"seed", "total_timesteps", "checkpoint_every", "eval_episodes", "stop_at_step"} <= set(INT_FLAGS[script])
    assert len(INT_FLAGS[script]) >= 15


@pytest.mark.parametrize("script, argv, flag", BAD_INPUTS,
                         ids=[f"{script[:-3]} {' '.join(argv)}" for script, argv, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_naming_the_flag_and_creates_nothing(script, argv, flag, tmp_path,
                                                                             monkeypatch, capsys):
    """The script's real entry point, in this process, on a valid run of 8 steps (scripts.Script.safe) with the bad
    input added: a bad input that slipped through fails the test instead of training for hours."""
    S = SCRIPTS[script]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "wandb", None)  # wandb cannot be imported (as when it is not installed)
    monkeypatch.setattr(sys, "argv", [S.path, *S.safe, *CPU, *argv, "--output-dir", "out"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(S.path, run_name="__main__")
    assert e.value.code == 2
    assert flag in one_error_line(capsys.readouterr().err)
    assert os.listdir(tmp_path) == []
