"""A checkpoint carries the digest of what was written (abs_utils.checkpoint.digest), checked on every load: a bit
flipped in a saved weight, or bytes overwritten inside the file's tensor data, are refused by --resume in one line
naming the file, exit 2, before anything is written; an intact checkpoint, and one written before digests, resume."""
import os
import sys
import zipfile

import numpy as np
import torch

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, GENERIC, ROOT, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

sys.path.insert(0, ROOT)  # abs_utils, beside the scripts
import abs_utils as U  # noqa: E402

S = SCRIPTS[GENERIC]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(argv, cwd):
    return preloaded.run([sys.executable, S.path, *argv], capture_output=True, text=True, timeout=600, cwd=cwd, env=ENV)


def files_of(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_digest_follows_every_bit_and_survives_a_save_and_load(tmp_path):
    state = {"w": torch.randn(5, 3), "n": 3, "x": [1.5, "a", None, (True, 2)], "o": {"step": torch.tensor(4.0)}}
    U.atomic_torch_save(str(tmp_path / "c.pt"), state)
    back = torch.load(tmp_path / "c.pt", weights_only=True)
    written = back.pop("digest")
    assert written == U.checkpoint.digest(state) == U.checkpoint.digest(back)
    back["w"].view(torch.int32)[2, 1] ^= 1 << 20  # one bit of one float
    assert U.checkpoint.digest(back) != written
    assert U.checkpoint.digest({**state, "n": 4}) != written and U.checkpoint.digest({"n": 3, "w": state["w"]}) != \
        U.checkpoint.digest({"w": state["w"], "n": 3})  # values and order count


def test_a_flipped_bit_or_overwritten_bytes_are_refused_and_an_intact_checkpoint_resumes(tmp_path):
    p = run([*S.fixed, *CPU, "--total-timesteps", "128", "--stop-at-step", "64", "--eval-episodes", "1",
             "--output-dir", str(tmp_path), "--run-name", "r"], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    ckpt = tmp_path / "r" / "checkpoint.pt"
    original = ckpt.read_bytes()

    flipped = torch.load(ckpt, weights_only=True)  # one bit of one weight, the old digest kept
    name = next(k for k, v in flipped[S.network].items() if v.dtype == torch.float32 and v.numel() > 100)
    flipped[S.network][name].view(-1).view(torch.int32)[7] ^= 1 << 3
    torch.save(flipped, ckpt)

    # 64 random bytes in the middle of the largest tensor's data, in the file itself
    overwritten = tmp_path / "overwritten.pt"
    overwritten.write_bytes(original)
    with zipfile.ZipFile(overwritten) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(overwritten, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(f.read(4), dtype="<u2")
        f.seek(info.header_offset + 30 + int(name_len) + int(extra_len) + info.file_size // 2)
        f.write(np.random.default_rng(0).bytes(64))

    for path in (ckpt, overwritten):
        before = files_of(tmp_path / "r")
        p = run(["--resume", str(path)], tmp_path)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stdout[-1000:] + p.stderr[-2000:]
        assert str(path) in lines[0] and "damaged" in lines[0] and "digest" in lines[0], lines[0]
        assert files_of(tmp_path / "r") == before  # nothing written, the run's lock included

    ckpt.write_bytes(original)
    (tmp_path / "r" / "checkpoint.pt.tmp").write_bytes(original[: len(original) // 2])  # a write killed midway
    p = run(["--resume", str(ckpt)], tmp_path)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert not (tmp_path / "r" / "checkpoint.pt.tmp").exists()  # removed by the run that holds the lock


def test_a_checkpoint_written_before_digests_still_resumes(tmp_path):
    p = run([*S.fixed, *CPU, "--total-timesteps", "128", "--stop-at-step", "64", "--eval-episodes", "1",
             "--output-dir", str(tmp_path), "--run-name", "r"], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    ckpt = tmp_path / "r" / "checkpoint.pt"
    old = torch.load(ckpt, weights_only=True)
    del old["digest"]
    torch.save(old, ckpt)
    p = run(["--resume", str(ckpt)], tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
