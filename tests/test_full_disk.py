"""A write the disk refuses (full, over quota, a filesystem gone) ends a run with one line naming the file, the cause
and what to do, and exit 4; the last complete checkpoint and the earlier result stay intact and nothing half-written
is left. Injected OSError(ENOSPC) at each write a run makes (checkpoint, eval_results.json, model.pt, the events, the
output, the run directory's lock), on a toy run of abs_utils; then real scripts on a real full filesystem: a small
tmpfs mounted in a user namespace (skipped, with the reason, where the machine allows none) and /dev/full."""
import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import abs_utils as U  # noqa: E402

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@dataclass
class Args:  # the flags the Run reads
    exp_name: str = "toy"
    seed: int = 1
    torch_deterministic: bool = True
    cuda: bool = False
    track: bool = False
    wandb_project_name: str = "abs"
    wandb_entity: Optional[str] = None
    output_dir: str = "runs"
    run_name: Optional[str] = "r"
    resume: Optional[str] = None
    checkpoint_every: int = 100
    log_every_seconds: float = 0.0
    env_id: str = "Toy-v0"
    total_timesteps: int = 300


def state(step):
    return lambda: {"global_step": step, "weights": torch.full((1000,), float(step))}


@pytest.fixture
def refuse_writes(monkeypatch):
    """refuse(name): from now on every write to a file whose name contains `name` fails with ENOSPC after its first
    bytes (a real full disk takes some of them), through open, as torch.save, json and TensorBoard open their
    files."""
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[:10])
            raise OSError(ENOSPC.errno, ENOSPC.strerror)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def refuse(name):
        def fake_open(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            return Full(f) if name in str(file) and any(m in mode for m in "wa") else f
        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(io, "open", fake_open)  # TensorBoard's file writer opens through io
    return refuse


@pytest.fixture
def exits(monkeypatch):
    """The codes the Run's hook for uncaught errors exits with (recorded instead), and the hooks restored."""
    codes = []
    monkeypatch.setattr(U.run.os, "_exit", codes.append)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    return codes


def new_run(tmp_path):
    return U.Run(Args(output_dir=str(tmp_path)), None, "toy", phases=("env",))


def uncaught(run, error):
    """What the process does with an error the loop does not catch: Python hands it to sys.excepthook."""
    assert sys.excepthook == run._on_uncaught
    sys.excepthook(type(error), error, error.__traceback__)


def one_line(capsys):
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def raised(f, *args):
    with pytest.raises(Exception) as e:
        f(*args)
    return e.value


# ------------------------------------------------------------------ injected: each write of a run
def test_a_refused_checkpoint_keeps_the_last_complete_one_and_leaves_nothing_half_written(
        tmp_path, refuse_writes, exits, capsys):
    run = new_run(tmp_path)
    run.begin(0)
    run.checkpoint(100, 100, state(100))
    refuse_writes("checkpoint.pt")
    error = raised(run.checkpoint, 200, 100, state(200))
    assert isinstance(error, U.checkpoint.WriteFailed) and error.errno == errno.ENOSPC
    uncaught(run, error)
    ckpt = tmp_path / "r" / "checkpoint.pt"
    # the tensors it holds: 1000 float32 weights, torch's RNG state (5056 bytes), NumPy's 624 int64 keys
    assert error.need == 4000 + torch.get_rng_state().numel() + 624 * 8 == 14048
    # (injected: the disk has the bytes free, which is how a file system out of inodes answers)
    assert exits == [4] and one_line(capsys) == (
        f"error: could not write {ckpt}: no space left on device "
        f"({U.checkpoint.size_text(U.checkpoint.free_bytes(str(ckpt)))} free, more than its 13.7 kB: no free inodes, "
        f"`df -i`); the last complete checkpoint, {ckpt} at global_step 100, is intact: free space, then run the same "
        f"command with --resume {ckpt}")
    assert torch.load(ckpt, weights_only=True)["global_step"] == 100  # the older one, whole
    assert sorted(os.listdir(tmp_path / "r")) == [".lock", "checkpoint.pt"] + sorted(
        f for f in os.listdir(tmp_path / "r") if f.startswith("events"))  # no checkpoint.pt.tmp
    run.lock.close()


def test_a_first_checkpoint_refused_says_there_is_none_to_resume(tmp_path, refuse_writes, exits, capsys):
    run = new_run(tmp_path)
    run.begin(0)
    refuse_writes("checkpoint.pt")
    uncaught(run, raised(run.checkpoint, 100, 100, state(100)))
    assert exits == [4] and one_line(capsys).endswith(
        "no checkpoint was written yet: free space, then run the same command again")
    assert not any(f.startswith("checkpoint") for f in os.listdir(tmp_path / "r"))
    run.lock.close()


def test_a_refused_result_keeps_the_earlier_one_and_the_checkpoint(tmp_path, refuse_writes, exits, capsys):
    run = new_run(tmp_path)
    run.begin(0)
    run.checkpoint(300, 300, state(300))
    run.end_training()
    (tmp_path / "r" / "eval_results.json").write_text('{"global_step": 100}')  # an earlier result, kept
    refuse_writes("eval_results.json")
    uncaught(run, raised(run.finish, 300, [1.0], [10], 0))
    line = one_line(capsys)
    assert exits == [4] and line.startswith(f"error: could not write {tmp_path / 'r' / 'eval_results.json'}: no "
                                            "space left on device (")  # (injected: bytes free, as with no inodes)
    assert "at global_step 300, is intact" in line  # a resume of the checkpoint at the end evaluates again
    assert json.loads((tmp_path / "r" / "eval_results.json").read_text()) == {"global_step": 100}
    assert not (tmp_path / "r" / "eval_results.json.tmp").exists()
    run.lock.close()


def test_a_refused_model_file_leaves_none(tmp_path, refuse_writes, exits, capsys):
    run = new_run(tmp_path)
    run.begin(0)
    run.checkpoint(300, 300, state(300))
    refuse_writes("model.pt")
    uncaught(run, raised(run.save_model, {"weights": torch.zeros(10)}))
    assert exits == [4] and "could not write" in one_line(capsys)
    assert not any(f.startswith("model") for f in os.listdir(tmp_path / "r"))
    run.lock.close()


def test_refused_events_end_the_run_with_one_line(tmp_path, refuse_writes, exits, capsys):
    run = new_run(tmp_path)
    refuse_writes("events.out")

    def train():  # the file's first event is written at once, the next ones by the writer's thread
        run.begin(0)
        for step in range(50):
            run.log(step, {"charts/x": 1.0})
            run.writer.flush()
    error = raised(train)
    assert U.checkpoint.disk_error(error) is not None
    uncaught(run, error)
    assert exits == [4] and one_line(capsys) == (
        f"error: could not write to {tmp_path / 'r'} (the events or the output): no space left on device; no "
        "checkpoint was written yet: free space, then run the same command again")
    run.lock.close()


def test_other_errors_keep_python_s_traceback(tmp_path, exits, capsys):
    run = new_run(tmp_path)
    uncaught(run, ValueError("not a disk error"))
    assert exits == [] and "ValueError: not a disk error" in capsys.readouterr().err
    run.lock.close()


def test_a_run_directory_that_cannot_be_made_for_lack_of_space_is_exit_4(tmp_path, monkeypatch, capsys):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(U.run.os, "makedirs", full)
    with pytest.raises(SystemExit) as e:
        new_run(tmp_path)
    assert e.value.code == 4 and one_line(capsys) == (
        f"error: could not write {tmp_path / 'r'}/.lock: no space left on device; nothing was written: free space, "
        "then run the same command again")


def test_a_torch_save_error_that_is_no_disk_error_is_not_reported_as_one(tmp_path):
    path = tmp_path / "c.pt"
    path.write_bytes(b"old")
    with pytest.raises(Exception) as e:  # a lambda cannot be pickled
        U.atomic_torch_save(str(path), {"f": lambda: 0})
    assert not isinstance(e.value, U.checkpoint.WriteFailed)
    assert path.read_bytes() == b"old" and not (tmp_path / "c.pt.tmp").exists()


# ------------------------------------------------------------------ real scripts, real full filesystems
def tiny_pqn(out, *extra):
    return [sys.executable, str(ROOT / "abs_pqn_atari.py"), "--env-id", "Breakout-v5", "--num-envs", "8",
            "--num-steps-min", "4", "--num-steps-max", "8", "--num-minibatches", "2", "--total-timesteps", "256",
            "--output-dir", str(out), "--run-name", "r", "--eval-episodes", "0", "--torch-threads", "1",
            "--env-threads", "1", "--log-every-seconds", "0", *extra]


def in_small_tmpfs(tmp_path, commands: str) -> subprocess.CompletedProcess:
    """Run shell commands in a user and mount namespace where $FS is a tmpfs (its size set by the commands' mount),
    or skip: the namespace needs unshare and unprivileged user namespaces."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare command to mount a small filesystem")
    fs = tmp_path / "fs"
    fs.mkdir()
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            f"mount -t tmpfs -o size=1m tmpfs {fs}"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.strip()}")
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", commands],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "FS": str(fs)}, timeout=600)


def test_a_full_filesystem_mid_run_keeps_the_checkpoint_and_the_same_resume_finishes(tmp_path):
    """abs_pqn_atari.py's checkpoint is ~20 MB: a 30 MB tmpfs holds the first (step 64) but not a second beside it.
    The run ends with exit 4, the first checkpoint intact and no .tmp; with more space, --resume finishes."""
    first = " ".join(tiny_pqn("$FS", "--checkpoint-every", "64"))
    resume = " ".join(tiny_pqn("$FS", "--resume", "$FS/r/checkpoint.pt")[:2] + ["--resume", "$FS/r/checkpoint.pt"])
    p = in_small_tmpfs(tmp_path, f"""mount -t tmpfs -o size=30m tmpfs $FS && cd {ROOT}
        {first} > $FS/../first.out 2> $FS/../first.err; echo "first=$?"
        ls -a $FS/r; {sys.executable} -c "import torch; print('step', torch.load('$FS/r/checkpoint.pt')['global_step'])"
        mount -o remount,size=100m $FS
        {resume} > $FS/../second.out 2>&1; echo "second=$?"
        {sys.executable} -c "import json; print('result', json.load(open('$FS/r/eval_results.json'))['global_step'])"
        """)
    out, err = p.stdout, (tmp_path / "first.err").read_text()
    assert "first=4" in out, (out, p.stderr, err)
    error_lines = [line for line in err.splitlines() if line.startswith("error")]
    assert len(error_lines) == 1 and error_lines[0].startswith(f"error: could not write {tmp_path}/fs/r/checkpoint.pt: "
                                                               "no space left on device (it needs about")
    assert error_lines[0].endswith(f"at global_step 64, is intact: free space, then run the same command with "
                                   f"--resume {tmp_path}/fs/r/checkpoint.pt")
    assert "Traceback" not in err and "checkpoint.pt.tmp" not in out and "step 64" in out
    assert "second=0" in out and "result 256" in out, (out, (tmp_path / "second.out").read_text())


def test_output_to_a_full_device_is_one_line_and_exit_4(tmp_path):
    """stdout on /dev/full (every write: ENOSPC), as a log on a full disk is: the first progress line fails."""
    with open("/dev/full", "w") as full:
        p = subprocess.run(tiny_pqn(tmp_path), stdout=full, stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 4 and p.stderr.strip().splitlines()[-1] == (
        f"error: could not write to {tmp_path / 'r'} (the events or the output): no space left on device; no "
        "checkpoint was written yet: free space, then run the same command again"), p.stderr
    assert "Traceback" not in p.stderr


def test_the_exit_code_is_documented_beside_the_others():
    text = (ROOT / "docs" / "running.md").read_text()
    assert f"| {U.checkpoint.WRITE_FAILED_EXIT} | a write the disk refused" in text


def test_what_a_write_needs_and_what_is_free():
    """The sizes the line gives: the tensors' and arrays' bytes, each storage once; nothing where a side is unknown."""
    shared = torch.zeros(4)
    assert U.checkpoint.stored_bytes({"a": np.zeros(10, np.float32), "t": [shared, shared.view(2, 2)],
                                      "n": 3, "s": "x"}) == 40 + 16
    assert U.checkpoint.free_bytes("/no/such/folder/file") is None
    error = U.checkpoint.WriteFailed("/no/such/folder/file", ENOSPC, need=100)
    assert str(error) == "could not write /no/such/folder/file: no space left on device"  # free unknown: no sizes
    assert U.checkpoint.size_text(3 * 2**20) == "3.0 MB" and U.checkpoint.size_text(1536) == "1.5 kB"


def test_a_thread_s_other_errors_keep_python_s_report(tmp_path, exits):
    seen = []
    threading.excepthook = seen.append  # the hook the Run finds and keeps
    run = new_run(tmp_path)
    for error in (ENOSPC, ValueError("not a disk error")):
        threading.excepthook(threading.ExceptHookArgs((type(error), error, None, None)))
    assert len(seen) == 1 and isinstance(seen[0].exc_value, ValueError)  # the disk error dropped, the other kept
    run.lock.close()


@pytest.mark.parametrize("code, words, fix", [
    (errno.EROFS, "read-only file system", "make it writable"),
    (errno.EDQUOT, "disk quota exceeded (it needs about", "free space")])
def test_a_read_only_file_system_and_a_quota_are_named_as_what_they_are(tmp_path, monkeypatch, exits, capsys, code,
                                                                      words, fix):
    """Not "free space" with the free megabytes beside it: a read-only file system says so and asks for it to be
    made writable; a quota gives the sizes."""
    run = new_run(tmp_path)
    run.begin(0)
    run.checkpoint(100, 100, state(100))

    def refuse(*a, **k):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(torch, "save", refuse)
    error = raised(run.checkpoint, 200, 100, state(200))
    uncaught(run, error)
    line = one_line(capsys)
    assert exits == [4] and words in line and f"is intact: {fix}, then run the same command" in line, line
    assert ("MB free" in line) == (code == errno.EDQUOT)


# ------------------------------------------------------------------ a run directory made read-only mid-run
def test_a_refused_result_leaves_no_evaluation_event_so_the_resume_logs_it_once(tmp_path, refuse_writes, exits,
                                                                               capsys):
    """The result is written before its event: when the disk refuses the result, the events hold no eval/mean_return,
    and the resume that evaluates again writes the only one."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run = new_run(tmp_path)
    run.begin(0)
    run.checkpoint(300, 300, state(300))
    run.end_training()
    refuse_writes("eval_results.json")
    uncaught(run, raised(run.finish, 300, [1.0], [10], 0))
    assert exits == [4]
    run.writer.flush()
    events = EventAccumulator(str(tmp_path / "r"))
    assert "eval/mean_return" not in events.Reload().Tags()["scalars"]
    run.writer.close()
    run.lock.close()


def test_a_finished_run_whose_last_event_is_refused_keeps_its_result_and_says_so(tmp_path, refuse_writes, exits,
                                                                                capsys):
    run = new_run(tmp_path)
    run.begin(0)
    run.checkpoint(300, 300, state(300))
    run.end_training()
    refuse_writes("events.out")
    summary = run.finish(300, [2.0, 4.0], [10, 10], 0)
    assert summary["mean"] == 3.0 and exits == []
    assert json.loads((tmp_path / "r" / "eval_results.json").read_text())["eval"]["mean"] == 3.0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: could not write eval/mean_return to the events in {tmp_path / 'r'}: no space left on "
                   f"device; the result is saved in {tmp_path / 'r' / 'eval_results.json'}"], err
    run.lock.close()


def tiny_minatar(out, *extra):  # MinAtar's small network: a run of 4,096 steps and its checkpoints in seconds
    return [sys.executable, str(ROOT / "abs_pqn_minatar.py"), "--env-id", "Breakout-MinAtar", "--num-envs", "8",
            "--num-steps-min", "4", "--num-steps-max", "8", "--num-minibatches", "2", "--total-timesteps", "4096",
            "--output-dir", str(out), "--run-name", "r", "--eval-episodes", "0", "--torch-threads", "1",
            "--log-every-seconds", "0", *extra]


def without_capabilities(command: list) -> list:
    """command in a new user namespace without a mapping: the same uid outside, but without root's capabilities
    inside, so that `chmod a-w` binds root as it binds any user (skipped where there is no unshare or none is
    allowed)."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare command to run without root's capabilities")
    probe = subprocess.run(["unshare", "--user", "true"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"cannot make a user namespace here: {probe.stderr.strip()}")
    return ["unshare", "--user", *command]


def test_a_run_directory_made_read_only_mid_run_is_one_line_and_the_same_resume_finishes(tmp_path):
    """`chmod -R a-w` on the run directory while abs_pqn_minatar.py trains (stopped with SIGSTOP once its first
    checkpoint exists, so that the change lands mid-run): its next checkpoint is refused, one line names the
    permission and the intact checkpoint, exit 4, no traceback; made writable again, the line's --resume finishes."""
    import signal
    import time
    run_dir = tmp_path / "r"
    p = subprocess.Popen(without_capabilities(tiny_minatar(tmp_path, "--checkpoint-every", "64")),
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoint.pt").exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    p.send_signal(signal.SIGSTOP)
    subprocess.run(["chmod", "-R", "a-w", str(run_dir)], check=True)
    p.send_signal(signal.SIGCONT)
    out, err = p.communicate(timeout=600)
    subprocess.run(["chmod", "-R", "u+w", str(run_dir)], check=True)
    assert p.returncode == 4, (out, err)
    lines = [line for line in err.splitlines() if line.startswith("error")]
    assert "Traceback" not in err and len(lines) == 1, err
    # the checkpoint's write, or TensorBoard's (it reopens its file to flush), whichever comes first
    assert lines[0].startswith("error: could not write ") and f" {run_dir}" in lines[0], lines[0]
    assert "permission denied (read-only to this user: `ls -ld` it)" in lines[0], lines[0]
    resume = f"--resume {run_dir / 'checkpoint.pt'}"
    assert lines[0].endswith(f", is intact: make it writable, then run the same command with {resume}"), lines[0]
    step = int(lines[0].split("at global_step ")[1].split(",")[0])
    assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["global_step"] == step < 4096
    assert not list(run_dir.glob("*.tmp"))
    p = subprocess.run(tiny_minatar(tmp_path)[:2] + resume.split(), cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert json.loads((run_dir / "eval_results.json").read_text())["global_step"] == 4096
