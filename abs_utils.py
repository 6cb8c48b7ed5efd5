"""The run machinery of the ABS scripts, written once: not the algorithm, which each script holds top to bottom.

Flag checking and parsing (one-line errors, exit 2, before anything is created), resume from a weights-only
checkpoint, RNG state, atomic writers, and a small `Run` that carries the run directory, device, TensorBoard
writer, per-phase clocks and the stop signal through the training loop (docs/CONVENTIONS.md has the contract):

    args, checkpoint = U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS)
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "update"))  # run directory, seeds, device, wandb
    ...  # build the algorithm's objects; load them from `checkpoint` on --resume
    run.begin(global_step)  # RNG, clocks and timings from the checkpoint; writer; SIGTERM/SIGINT caught
    while global_step < args.total_timesteps:
        with run.timed("env"): ...
        run.log(global_step, {"losses/loss": loss}, perf=True)
        run.progress(global_step, f"L {L}", recent_returns)
        run.checkpoint(global_step, steps, state)  # periodic, final, and on a stop signal (then exit 128 + n)
    run.end_training()
    run.finish(global_step, returns, lengths, capped)  # eval/mean_return, eval_results.json

A script copied to another folder takes this file along.
"""
import contextlib
import dataclasses
import importlib
import io
import itertools
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import torch
import tyro
from torch.utils.tensorboard import SummaryWriter


# ================================================================ flags
def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


DOMAINS = {">= 0": lambda v: v >= 0, ">= 1": lambda v: v >= 1, "> 0": lambda v: v > 0,
           "in [0, 1]": lambda v: 0 <= v <= 1, "in (0, 1]": lambda v: 0 < v <= 1}


def in_domain(args, domain: str, *names: str) -> Iterator[tuple[bool, str]]:
    """Rows (ok, '--flag must be <domain>, got <value>') for flags with one of the DOMAINS, e.g. ">= 1"."""
    for name in names:
        value = getattr(args, name)
        yield DOMAINS[domain](value), f"{flag_of(name)} must be {domain}, got {value!r}"


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except Exception:
        return False


def has_cxx() -> bool:
    """A C++ compiler for torch.compile's kernels is on PATH."""
    return any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++"))


def common_problems(args) -> Iterator[tuple[bool, str]]:
    """The rows every script checks first: the seed, the run name, --track, and the run-control numbers."""
    # envpool takes signed 32-bit seeds, and evaluation runs on seed + 10_000
    yield 0 <= args.seed < 2**31 - 10_000, f"--seed must be in [0, 2^31 - 10000), got {args.seed!r}"
    name = args.run_name
    yield (name is None or (name not in ("", ".", "..") and os.path.basename(name) == name),
           f"--run-name must be a single path component (no '/', not '.' or '..'), got {name!r}")
    yield (not args.track or importable("wandb"),
           "--track needs the wandb package, which cannot be imported (pip install wandb)")


def check_flags(args, problems: Callable[..., Iterable[tuple[bool, str]]]) -> None:
    """Raise ValueError with the first problem: a NaN or infinite float, then common_problems, then the script's
    rows in order. The rows are generated lazily, so a row may divide by a flag that an earlier row checked."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{flag_of(name)} must be a finite number, got {value}")
    for ok, message in itertools.chain(common_problems(args), problems(args)):
        if not ok:
            raise ValueError(message)


def tyro_cli(cls, argv, default=None):
    """tyro.cli, with its boxed error (an unknown choice, a value of the wrong type) turned into one line on stderr."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(cls, args=argv, **({} if default is None else {"default": default}))
    except SystemExit as e:
        if e.code:
            text = []  # the box's title ("Invalid choice"), then the message up to the help; rules left out
            for line in captured.getvalue().splitlines():
                line = line.strip("│╭╮╰╯|+ ")
                if "helptext" in line:
                    break
                if line.strip("─- "):
                    text.append(line.strip("─- ") if line[0] in "─-" else line)
            print("error: " + " ".join(text[1:] or text or ["invalid command line"]), file=sys.stderr)
        raise


# ================================================================ checkpoints and resume
def atomic_write_json(path, obj):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def atomic_torch_save(path, obj):
    tmp = f"{path}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


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
    if checkpoint.get("algo") != script:
        raise ValueError(f"--resume: {path!r} is a checkpoint of {checkpoint.get('algo')}.py, not of {script}.py")
    return checkpoint


def parse_args(cls, script: str, problems, run_control_flags, argv=None):
    """Parse and check the flags into `cls` (the script's Args); exit 2 with one line on stderr on bad input, before
    anything is created. Returns (args, checkpoint or None).

    With --resume, a flag not on the command line comes from the checkpoint (the command line is parsed again with
    the checkpoint's flags as defaults). A run-control flag that is given overrides the checkpoint's; another flag
    that is given is ignored with a warning, since it would change the algorithm mid-run. A new run never reuses a
    run directory that holds a checkpoint or results."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro_cli(cls, argv)
    checkpoint = None
    try:
        if args.resume is not None:
            checkpoint = load_checkpoint(args.resume, script)
            saved = {k: v for k, v in checkpoint["args"].items() if k in vars(args)}
            args = tyro_cli(cls, argv, default=dataclasses.replace(args, **saved))
            ignored = [f"{flag_of(k)} {getattr(args, k)} (checkpoint: {v})" for k, v in saved.items()
                       if k not in run_control_flags and getattr(args, k) != v]
            if ignored:
                print(f"warning: --resume keeps the checkpoint's algorithm flags; ignoring {', '.join(ignored)}",
                      file=sys.stderr)
            kept = {k: v for k, v in saved.items() if k not in run_control_flags}
            args = dataclasses.replace(args, **{**kept, "run_name": checkpoint["run_name"]})
        check_flags(args, problems)
        if checkpoint is None:
            args.run_name = args.run_name or f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
            run_dir = os.path.join(args.output_dir, args.run_name)
            for name in ("checkpoint.pt", "eval_results.json"):
                if os.path.exists(os.path.join(run_dir, name)):
                    raise ValueError(f"--run-name: {run_dir} already holds an earlier run's {name}; continue it with "
                                     f"--resume {os.path.join(run_dir, 'checkpoint.pt')} or choose another --run-name")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    return args, checkpoint


# ================================================================ evaluation records
def summarize_eval(returns, lengths, capped) -> dict:
    r = np.asarray(returns, dtype=np.float64)
    stats = ({"mean": r.mean(), "std": r.std(), "median": np.median(r), "min": r.min(), "max": r.max()} if len(r)
             else dict.fromkeys(("mean", "std", "median", "min", "max")))
    return {"episodes": len(returns), "returns": [float(x) for x in returns], "lengths": [int(x) for x in lengths],
            **{k: None if v is None else float(v) for k, v in stats.items()}, "capped": int(capped)}


def crossed(every: int, before: int, after: int) -> bool:
    """True when a multiple of `every` (0: never) lies in (before, after]: a checkpoint boundary was passed."""
    return every > 0 and after // every > before // every


def progress_line(global_step: int, total_timesteps: int, sps: int, fields: str, recent_returns) -> str:
    eta = max(total_timesteps - global_step, 0) / max(sps, 1)
    ret = f"{np.mean(recent_returns):.1f}" if recent_returns else "n/a"
    return (f"step {global_step}/{total_timesteps} | SPS {sps} | {fields} | return {ret} "
            f"| ETA {int(eta // 3600)}:{time.strftime('%M:%S', time.gmtime(eta))}")


# ================================================================ the run
class NonFiniteLoss(RuntimeError):
    """Raised by an update before its optimizer step when the loss or gradient is not finite (see Run.fail)."""


class Run:
    """One training run: its directory, device, writer, clocks, per-phase timings and stop signal.

    The script's own state (networks, optimizer, scheduler, counters) comes from `checkpoint` in the script and goes
    back into checkpoints through the `state` function given to checkpoint() and fail(); the Run adds the RNG state,
    the flags, the run name, the script's name, train_seconds and the perf sums."""

    def __init__(self, args, checkpoint: Optional[dict], script: str, phases: tuple, unit: str = "iteration"):
        self.args, self.script, self.unit, self.resumed_from = args, script, unit, checkpoint
        self.dir = (os.path.dirname(os.path.abspath(args.resume)) if checkpoint is not None
                    else os.path.join(args.output_dir, args.run_name))
        self.checkpoint_path = os.path.join(self.dir, "checkpoint.pt")
        os.makedirs(self.dir, exist_ok=True)
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        torch.backends.cudnn.deterministic = args.torch_deterministic
        if args.track:
            import wandb

            wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                       config=vars(args), name=args.run_name, id=args.run_name, resume="allow", dir=self.dir)
        self.device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
        # Cumulative seconds per phase (perf/* tags), carried across resumes like train_seconds.
        self.perf = dict.fromkeys(phases, 0.0)
        self.train_seconds = 0.0
        self.stop_signal: list = []

    def begin(self, global_step: int) -> None:
        """Restore the RNGs, timings and train_seconds of a resumed run, open the event file and catch SIGTERM/SIGINT.
        On resume the writer drops the events logged after the checkpoint (its own step was logged before it); a new
        run in a directory left with only event files (stopped before its first checkpoint) hides their events."""
        checkpoint = self.resumed_from
        if checkpoint is not None:
            self.train_seconds = checkpoint["train_seconds"]
            self.perf.update(checkpoint.get("perf", {}))
            set_rng_state(checkpoint["rng"], self.device)
        self.writer = SummaryWriter(self.dir, purge_step=global_step + 1 if checkpoint is not None else 0)
        if checkpoint is None:
            self.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
                f"|{k}|{v}|" for k, v in vars(self.args).items()))
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start_time, self.start_step, self.last_print = time.time(), global_step, 0.0

    def _on_signal(self, signum, frame):
        """The loop checks the signal, checkpoints and exits at the end of the current unit of work, so that nothing
        is lost. A second signal stops at once."""
        if self.stop_signal:
            raise KeyboardInterrupt
        self.stop_signal.append(signum)
        print(f"signal {signum}: checkpointing at the end of this {self.unit}", flush=True)

    @contextlib.contextmanager
    def timed(self, phase: str):
        """Add the block's wall-clock seconds to perf[phase] (the cumulative perf/<phase>_seconds tags). A block left
        by an exception adds nothing: a failing step is not part of the measured time."""
        start = time.perf_counter()
        yield
        self.perf[phase] += time.perf_counter() - start

    def log(self, step: int, scalars: dict, perf: bool = False) -> None:
        """One event per tag; with perf, also every phase's cumulative seconds, and on a CUDA device its peak memory
        (logged with the phase sums each iteration, so that a run stopped by a signal reports them too)."""
        if perf:
            scalars = {**scalars, **{f"perf/{phase}_seconds": s for phase, s in self.perf.items()}}
            if self.device.type == "cuda":
                scalars["perf/cuda_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)

    def log_games(self, returns, lengths, step: int) -> None:
        """One `charts/episodic_return` and `charts/episodic_length` event per finished game, at the global step where
        it ended (CleanRL's convention): several games may share a step, and every game weighs the same in a curve."""
        for episode_return, episode_length in zip(np.asarray(returns).tolist(), np.asarray(lengths).tolist()):
            self.writer.add_scalar("charts/episodic_return", episode_return, step)
            self.writer.add_scalar("charts/episodic_length", episode_length, step)

    def sps(self, global_step: int) -> int:
        """Environment steps per second since the start or the last checkpoint."""
        return int((global_step - self.start_step) / max(time.time() - self.start_time, 1e-9))

    def progress(self, global_step: int, sps: int, fields: str, recent_returns) -> None:
        """Print the progress line at most once per --log-every-seconds, and at the end."""
        now = time.time()
        if now - self.last_print >= self.args.log_every_seconds or global_step >= self.args.total_timesteps:
            self.last_print = now
            print(progress_line(global_step, self.args.total_timesteps, sps, fields, recent_returns), flush=True)

    def save(self, path: str, state: dict) -> None:
        """A checkpoint: the script's state plus every RNG, the timings, the flags, the run name and the script."""
        atomic_torch_save(path, {**state, "train_seconds": self.train_seconds, "perf": dict(self.perf),
                                 "rng": rng_state(self.device), "args": vars(self.args),
                                 "run_name": self.args.run_name, "algo": self.script})

    def _save_and_exit(self, path: str, state: dict, code: int, message: str):
        """Say why (a signal's stop on stdout, an error on stderr) after the checkpoint is written, close the event
        file and exit with `code` (docs/CONVENTIONS.md: 128 + signal number, or 3 for a non-finite loss)."""
        self.save(path, state)
        print(message, file=sys.stdout if code >= 128 else sys.stderr, flush=True)
        self.writer.close()
        sys.exit(code)

    def checkpoint(self, global_step: int, steps: int, state: Callable[[], dict]) -> None:
        """After a unit of work of `steps` env steps: on a stop signal, checkpoint and exit 128 + n; at every multiple
        of --checkpoint-every and at the end, checkpoint (events flushed first, so a hard kill loses none of them)."""
        now = time.time()
        if self.stop_signal:
            self.train_seconds += now - self.start_time
            self._save_and_exit(self.checkpoint_path, state(), 128 + self.stop_signal[0],
                                f"stopped by signal {self.stop_signal[0]} at global_step {global_step}; "
                                f"resume with --resume {self.checkpoint_path}")
        if (crossed(self.args.checkpoint_every, global_step - steps, global_step)
                or global_step >= self.args.total_timesteps):
            self.train_seconds += now - self.start_time
            self.start_time, self.start_step = now, global_step
            self.writer.flush()
            self.save(self.checkpoint_path, state())

    def fail(self, global_step: int, error: Exception, state: Callable[[], dict]) -> None:
        """A non-finite loss or gradient: save the state before the failed step to checkpoint_nonfinite.pt (the last
        good checkpoint.pt stays) and exit 3."""
        self.train_seconds += time.time() - self.start_time  # up to now, like the perf sums
        path = os.path.join(self.dir, "checkpoint_nonfinite.pt")
        self._save_and_exit(path, state(), 3, f"error: {error} at global_step {global_step}; state before that step "
                                              f"saved to {path}. Start again with a lower --learning-rate.")

    def end_training(self) -> None:
        """After the last checkpoint: count the time since, and let a signal during evaluation end the process."""
        self.train_seconds += time.time() - self.start_time
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def save_model(self, obj: dict) -> None:
        atomic_torch_save(os.path.join(self.dir, "model.pt"), {**obj, "args": vars(self.args)})

    def finish(self, global_step: int, returns, lengths, capped: int) -> dict:
        """Log the evaluation and write eval_results.json, whose existence marks the run as finished."""
        summary = summarize_eval(returns, lengths, capped)
        if summary["episodes"]:
            self.writer.add_scalar("eval/mean_return", summary["mean"], global_step)
            print(f"eval: mean {summary['mean']:.2f} +- {summary['std']:.2f} over {summary['episodes']} episodes "
                  f"({summary['capped']} hit the step cap)")
        args = self.args
        atomic_write_json(os.path.join(self.dir, "eval_results.json"), {
            "algo": self.script, "env_id": args.env_id, "seed": args.seed, "run_name": args.run_name,
            "global_step": global_step, "total_timesteps": args.total_timesteps, "train_seconds": self.train_seconds,
            "eval": summary, "args": vars(args)})
        self.writer.close()
        if args.track:
            import wandb

            wandb.finish()
        return summary
