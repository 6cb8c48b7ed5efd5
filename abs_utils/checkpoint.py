"""Checkpoints: the atomic writers (and the one error of a write the disk refused), every RNG's state, and a resume's
checks of the file before any of it is used.

A checkpoint holds only tensors, numbers, strings, lists and dicts, so that `--resume` loads it with
`torch.load(weights_only=True)`; a file with any other pickled object is refused without being built.
"""
import contextlib
import errno
import hashlib
import json
import math
import os
import random
import typing
from typing import Callable, Optional

import numpy as np
import torch

from .flags import flag_of, refuse


# ================================================================ writes that can be lost
# The errors of a write that the disk refused: full, over quota, a device or network filesystem gone, read-only (the
# file system, or the run directory or a file in it that this user may not write: `chmod -R a-w` mid-run).
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ESTALE, errno.ENXIO, errno.EACCES, errno.EPERM}
WRITE_FAILED_EXIT = 4  # docs/running.md, "Signals and exit codes"


class WriteFailed(Exception):
    """A file of the run could not be written (disk full, quota, filesystem lost); its older version is intact and
    nothing half-written is left. `need`: the bytes the file needed, where known; `free`: the bytes free then."""

    def __init__(self, path: str, error: OSError, need: Optional[int] = None):
        self.path, self.errno, self.need, self.free = path, error.errno, need, free_bytes(path)
        self.cause = cause_text(error.errno) if error.errno else str(error)
        super().__init__(f"could not write {path}: {self.cause}{self.sizes()}")

    def sizes(self) -> str:
        """The bytes needed and free, for a full disk only; a full disk with the bytes free is out of inodes."""
        if self.errno not in (errno.ENOSPC, errno.EDQUOT) or self.need is None or self.free is None:
            return ""
        if self.errno == errno.ENOSPC and self.free >= self.need:
            return f" ({size_text(self.free)} free, more than its {size_text(self.need)}: no free inodes, `df -i`)"
        return f" (it needs about {size_text(self.need)}; {size_text(self.free)} free)"


def cause_text(code: int) -> str:
    """What refused a write, as a user reads it: strerror, and for a permission what it means on a run directory."""
    text = os.strerror(code).lower()
    return f"{text} (read-only to this user: `ls -ld` it)" if code in (errno.EACCES, errno.EPERM) else text


def size_text(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.1f} kB"


def disk_error(e: Optional[BaseException]) -> Optional[OSError]:
    """The OSError of a refused write in e's chain of causes, or None. (torch.save into a file object reports the
    file's OSError as the context of a RuntimeError.)"""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            return e
        e = e.__cause__ or e.__context__
    return None


def free_bytes(path: str) -> Optional[int]:
    """The bytes an unprivileged write can still use on path's filesystem, or None where it cannot be read."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def stored_bytes(obj) -> int:
    """The bytes of the tensors and arrays in obj (each storage once): what torch.save will need, at least."""
    seen, total, todo = set(), 0, [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo += list(x.values())
        elif isinstance(x, (list, tuple)):
            todo += list(x)
        elif isinstance(x, torch.Tensor) and x.untyped_storage().data_ptr() not in seen:
            seen.add(x.untyped_storage().data_ptr())
            total += x.untyped_storage().nbytes()
        elif isinstance(x, np.ndarray):
            total += x.nbytes
    return total


def write_atomically(path: str, write: Callable, need: Optional[int] = None) -> None:
    """write(f) into path.tmp, flushed to the disk, then renamed over path: path holds the old file or the new one,
    never a half-written one. A refused write removes path.tmp and raises WriteFailed; the old file stays."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        error = disk_error(e)
        if error is None:
            raise
        raise WriteFailed(path, error, need) from e


def digest(obj) -> str:
    """A digest of a checkpoint's contents, in order: every key, number, string, and every tensor's dtype, shape and
    bytes. Written into the checkpoint (its "digest") and checked on every load, so that a bit flipped on a disk, a
    copy or a network filesystem is found before a resume trains on it."""
    h = hashlib.blake2b(digest_size=16)
    todo = [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            h.update(b"{%d" % len(x))
            for k, v in reversed(list(x.items())):  # popped in order
                todo += [v, k]
        elif isinstance(x, (list, tuple)):
            h.update(b"[%d" % len(x))
            todo += reversed(list(x))
        elif isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(x.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr((type(x).__name__, x)).encode())
    return h.hexdigest()


def remove_stale_temps(run_dir: str) -> None:
    """Remove the <file>.tmp a run killed inside a write left (SIGKILL, a lost node): its file is the older one, whole;
    called by the run that holds the directory's lock, so no live write is touched."""
    for name in os.listdir(run_dir):
        if name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(run_dir, name))


def atomic_torch_save(path: str, obj) -> None:
    """torch.save(obj) atomically (write_atomically); a dict gets its digest (digest) as "digest"."""
    if isinstance(obj, dict):  # (a digest it holds, of what it was read from, is replaced)
        body = {k: v for k, v in obj.items() if k != "digest"}
        obj = {**body, "digest": digest(body)}
    write_atomically(path, lambda f: torch.save(obj, f), stored_bytes(obj))


def atomic_json_save(path: str, obj) -> None:
    data = json.dumps(obj, indent=2).encode()
    write_atomically(path, lambda f: f.write(data), len(data))


def rng_state(device):
    """Every RNG's state as tensors, lists and plain numbers (checkpoints load with weights_only=True)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": [version, list(internal), gauss],
             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state, device):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def describe_error(e: Exception, limit: int = 300) -> str:
    """An exception as one short line: torch's load_state_dict lists every mismatch on its own line; the first is
    named, with how many more there are."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if isinstance(e, KeyError):
        lines = [f"no {e.args[0]!r}" if e.args else "a missing key"]
    lines = [line for line in lines if not line.startswith("Error(s) in loading")] or [type(e).__name__]
    text = lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_state(path: str, checkpoint: dict, key: str, load: Callable[[typing.Any], typing.Any]) -> None:
    """load(checkpoint[key]) (a network's, optimizer's or scheduler's load_state_dict, which checks its own shapes
    and keys), with what does not fit (weights of another network or env, an empty or damaged state) as one line
    naming the checkpoint, exit 2. Call it before anything is written, so that a refused resume changes nothing."""
    try:
        load(checkpoint[key])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        refuse(f"--resume: {path}'s {key!r} does not fit this run ({describe_error(e)}); the checkpoint is of "
               "another network or environment, or damaged")


def load_checkpoint(path: str, script: str) -> dict:
    """torch.load(weights_only=True): tensors, numbers, strings, lists and dicts only; any other pickled object
    (which could run code while it is unpickled) is refused without being built."""
    if not os.path.isfile(path):
        raise ValueError(f"--resume: no checkpoint file at {path!r}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:
            unsafe = []
        if unsafe:
            raise ValueError(f"--resume: refused {path!r}: it holds pickled objects ({', '.join(unsafe[:3])}) that "
                             "could run code when loaded; only tensors and plain data are accepted") from None
        raise ValueError(f"--resume: {path!r} is not a checkpoint of this script ({type(e).__name__})") from None
    if not (isinstance(checkpoint, dict) and isinstance(checkpoint.get("args"), dict) and "run_name" in checkpoint):
        raise ValueError(f"--resume: {path!r} is not a checkpoint of this script (no args or run_name)")
    written = checkpoint.pop("digest", None)  # None: a checkpoint written before digests, accepted as it is
    if written is not None and written != digest(checkpoint):
        raise ValueError(f"--resume: {path!r} is damaged: its contents differ from the digest written with them (a "
                         "bit flipped on the disk, in a copy or on a network filesystem); resume from an intact copy")
    checkpoint["digest"] = written  # kept to tell this file from a later one (unchanged_since_read)
    if checkpoint.get("algo") != script:
        raise ValueError(f"--resume: {path!r} is a checkpoint of {checkpoint['algo']}.py, not of {script}.py"
                         if isinstance(checkpoint.get("algo"), str) else
                         f"--resume: {path!r} is not a checkpoint of this script (no algo)")
    return checkpoint


def unchanged_since_read(path: str, checkpoint: dict) -> bool:
    """Whether the file at path is still the checkpoint read from it (its digest and step): a resume checks this
    once it holds the run directory's lock, since another resume may have trained from it and replaced it between
    the read and the lock. Reads only the file's small values (mmap)."""
    try:
        now = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return False
    return (isinstance(now, dict) and now.get("digest") == checkpoint.get("digest")
            and now.get("global_step") == checkpoint.get("global_step"))


def is_a(value, hint) -> bool:
    """`value` fits the flag type `hint`: int, float, bool, str, Optional[...] or Literal[...]."""
    origin, options = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return value in options
    if origin is typing.Union:
        return any(is_a(value, h) for h in options)
    return (not isinstance(value, bool) or hint is bool) and isinstance(value, (int, float) if hint is float else hint)


RUN_STATE = {"global_step": int, "train_seconds": (int, float), "perf": dict, "rng": dict}


def check_checkpoint(path: str, checkpoint: dict, cls, state: dict) -> None:
    """Before any of it is used: the keys a resume reads (`state`: the script's own) and every flag have their types."""
    for key, kind in {**RUN_STATE, **state}.items():
        if not isinstance(checkpoint.get(key), kind) or isinstance(checkpoint.get(key), bool):
            raise ValueError(f"--resume: {path!r} has no valid {key!r} ({type(checkpoint.get(key)).__name__}); "
                             "it is damaged or not a checkpoint of this script")
        # counters (global_step, iteration, grad_steps) and timings: a negative one is no step a run could reach
        if kind in (int, (int, float)) and not (0 <= checkpoint[key] < math.inf):
            raise ValueError(f"--resume: {path!r} holds {key} = {checkpoint[key]!r}, which must be a finite number "
                             ">= 0; it is damaged or not a checkpoint of this script")
    hints = typing.get_type_hints(cls)
    for name, value in checkpoint["args"].items():
        if name in hints and not is_a(value, hints[name]):
            raise ValueError(f"--resume: {path!r} holds {flag_of(name)} = {value!r}, which is not a "
                             f"{getattr(hints[name], '__name__', hints[name])}")
