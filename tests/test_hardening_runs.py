"""What happens outside the training loop, in every script, on real tiny runs in real processes:

- a stop signal (SIGINT, SIGTERM) at start-up or during the evaluation ends in one line and exit 128 + n, saying what
  is saved; --resume of the checkpoint then evaluates again, without training;
- a finished run is never rewritten silently: resuming it (also with --eval-episodes 0) is refused with one line
  that says how to train on or evaluate again, and its eval_results.json stays as it was;
- a checkpoint whose contents do not fit its flags (another network's weights, an empty network state, a scheduler
  state without its keys, an empty optimizer state, a negative global_step, a flag value its checks refuse) is one
  line naming the checkpoint, exit 2, and nothing in the run directory is written."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, GENERIC, ROOT, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

sys.path.insert(0, ROOT)  # abs_utils, beside the scripts
import abs_utils as U  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
COMMON = [*CPU, "--log-every-seconds", "0", "--checkpoint-every", "0"]
SIGNALS = [signal.SIGINT, signal.SIGTERM]


def script_cmd(script, *argv):
    return [sys.executable, SCRIPTS[script].path, *argv]


def run(script, argv, cwd, timeout=300):
    return preloaded.run(script_cmd(script, *argv), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         env=ENV)


def no_traceback(p_err):
    assert "Traceback" not in p_err and "KeyboardInterrupt" not in p_err, p_err[-2000:]


def one_error_line(p):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (p.returncode, p.stderr[-2000:])
    return lines[0]


def files_of(folder):  # name -> bytes, .lock (taken by any run before it loads) left out
    return {n: (folder / n).read_bytes() for n in os.listdir(folder) if n != ".lock"}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_a_signal_at_start_up_is_one_line_and_exit_128_plus_n(script, tmp_path):
    """During the imports (the slow first second) and the set-up: nothing is saved; the run can start again."""
    flags = SCRIPTS[script].fixed
    for sig in SIGNALS:
        proc = subprocess.Popen(script_cmd(script, *flags, *COMMON, "--output-dir", str(tmp_path / "runs"),
                                           "--run-name", "r"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path, env=ENV)
        time.sleep(1.0)  # the interpreter is up; torch, envpool or MuJoCo are being imported, or the run set up
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, (proc.returncode, out[-1000:], err[-1000:])
        no_traceback(err)
        assert out.strip().splitlines()[-1] == (f"stopped by signal {sig} before training started: nothing was saved; "
                                                "run the same command again"), out[-1000:]
        run_dir = tmp_path / "runs" / "r"  # nothing that keeps the same command from starting again
        assert not run_dir.exists() or set(os.listdir(run_dir)) <= {".lock"}


@pytest.mark.parametrize("script, sig", [(s, SIGNALS[i % 2]) for i, s in enumerate(SCRIPTS)])
def test_a_signal_during_the_evaluation_then_resume_evaluates_again_and_a_finished_run_is_kept(script, sig, tmp_path):
    flags = SCRIPTS[script].fixed
    proc = preloaded.Popen(script_cmd(script, *flags, *COMMON, "--eval-episodes", "1000", "--output-dir",
                                      str(tmp_path), "--run-name", "r"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
    lines = []
    for line in proc.stdout:  # until the evaluation (1000 games: minutes) has begun
        lines.append(line)
        if line.startswith("evaluating"):
            break
    assert lines and lines[-1].startswith("evaluating"), "".join(lines)[-2000:] + proc.stderr.read()[-2000:]
    time.sleep(0.5)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, out[-1000:], err[-1000:])
    no_traceback(err)
    ckpt = tmp_path / "r" / "checkpoint.pt"
    step = torch.load(ckpt, weights_only=True)["global_step"]
    assert out.strip().splitlines()[-1] == (
        f"stopped by signal {sig} during the evaluation: training is saved in {ckpt} (global_step {step}, its end); "
        f"--resume {ckpt} evaluates it again")
    assert not (tmp_path / "r" / "eval_results.json").exists()

    p = run(script, ["--resume", str(ckpt), "--eval-episodes", "1"], tmp_path)  # the evaluation alone, once more
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
    assert "evaluating 1 episodes" in p.stdout and "\nstep " not in p.stdout  # no training step was taken
    result = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert result["global_step"] == step and result["complete"] is True and result["eval"]["episodes"] == 1
    assert not [n for n in os.listdir(tmp_path / "r") if n.startswith("eval_results_at_")]

    before = files_of(tmp_path / "r")  # a finished run: refused, however it is resumed, and left as it was
    # abs_utils.parse_args refuses it for every script alike: the variants once, in one script
    for extra in ([], ["--eval-episodes", "0"], ["--eval-episodes", "3"])[:3 if script == GENERIC else 1]:
        line = one_error_line(run(script, ["--resume", str(ckpt), *extra], tmp_path))
        assert f"--resume: {tmp_path / 'r'} is a finished run" in line and f"at global_step {step}" in line
        assert "larger --total-timesteps" in line and "move its eval_results.json aside" in line
    assert files_of(tmp_path / "r") == before

    # Checkpoints whose contents do not fit their flags, each in a directory of its own.
    checkpoint = torch.load(ckpt, weights_only=True)
    net = SCRIPTS[script].network
    first = next(iter(checkpoint[net]))
    shape = list(checkpoint[net][first].shape)
    cases = {  # name -> (change, what the line must say)
        "other_network": (lambda c: c[net].update({first: torch.zeros([shape[0] + 1, *shape[1:]])}),
                          [f"'{net}' does not fit this run", f"size mismatch for {first}"]),
        "empty_network": (lambda c: c.update({net: {}}), [f"'{net}' does not fit this run", "Missing key"]),
        "empty_scheduler": (lambda c: c.update({"scheduler": {}}), ["'scheduler' does not fit this run", "no 'L'"]),
        "empty_optimizer": (lambda c: c.update({"optimizer": {}}), ["'optimizer' does not fit this run"]),
        "negative_step": (lambda c: c.update({"global_step": -64}), ["global_step = -64", ">= 0"]),
        "bad_flag": (lambda c: c["args"].update({"learning_rate": -1.0}),
                     ["--learning-rate must be", "got -1.0", "comes from the checkpoint"]),
    }
    for name, (change, needles) in cases.items():
        if name in ("empty_network", "negative_step", "bad_flag") and script != GENERIC:
            # alike in every script: abs_utils checks the counters and flags before the script loads anything, and
            # another network's weights already show that the script loads its network through load_state
            continue
        bad = torch.load(ckpt, weights_only=True)
        change(bad)
        folder = tmp_path / name
        folder.mkdir()
        bad.pop("digest")  # written as a run writes it: with the digest of these contents
        U.atomic_torch_save(str(folder / "checkpoint.pt"), bad)
        written = files_of(folder)
        line = one_error_line(run(script, ["--resume", str(folder / "checkpoint.pt")], tmp_path))
        assert line.startswith("error: --resume: ") or "comes from the checkpoint" in line, (name, line)
        assert str(folder / "checkpoint.pt") in line and all(n in line for n in needles), (name, line)
        assert files_of(folder) == written, name  # no event file, no result, the checkpoint untouched
        assert not (folder / ".lock").exists(), name  # the lock the refused resume took is removed with it


def test_a_prefix_run_stopped_during_its_evaluation_is_evaluated_again_at_its_stop(tmp_path):
    """--stop-at-step: the resume of a prefix checkpoint whose evaluation was stopped evaluates at the same stop
    (it does not train on to --total-timesteps); once evaluated, a resume goes on to the end as before."""
    script = "abs_pqn_atari.py"
    flags = SCRIPTS[script].fixed
    base = [*flags, *COMMON, "--total-timesteps", "128", "--stop-at-step", "64", "--output-dir", str(tmp_path),
            "--run-name", "r"]
    proc = preloaded.Popen(script_cmd(script, *base, "--eval-episodes", "1000"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
    for line in proc.stdout:
        if line.startswith("evaluating"):
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "evaluates it again" in out, out[-1000:] + err[-1000:]
    no_traceback(err)
    ckpt = str(tmp_path / "r" / "checkpoint.pt")
    p = run(script, ["--resume", ckpt, "--eval-episodes", "1"], tmp_path)
    assert p.returncode == 0 and "\nstep " not in p.stdout, p.stdout[-1500:] + p.stderr[-1500:]
    result = json.loads((tmp_path / "r" / "eval_results.json").read_text())
    assert result["global_step"] == 64 and result["complete"] is False and result["args"]["stop_at_step"] == 64
    p = run(script, ["--resume", ckpt, "--eval-episodes", "1"], tmp_path)  # now on to the end
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
    assert json.loads((tmp_path / "r" / "eval_results.json").read_text())["global_step"] == 128
    assert json.loads((tmp_path / "r" / "eval_results_at_64.json").read_text()) == result
