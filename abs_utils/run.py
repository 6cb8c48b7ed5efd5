"""The run: its directory (locked while it lives), seeds, device, TensorBoard writer, timings, progress line,
checkpoints and stop signals; the faults that end it early (faults.py) and its result (results.py) are written
through it (how a script drives it: abs_utils/__init__.py)."""
import contextlib
import os
import random
import signal
import sys
import threading
import time
from typing import Callable, Optional

import numpy as np
import torch

from .checkpoint import (WRITE_FAILED_EXIT, atomic_json_save, atomic_torch_save, cause_text, describe_error,
                         disk_error, remove_stale_temps, rng_state, set_rng_state, unchanged_since_read)
from .evaluation import summarize_eval
from .faults import non_finite_line, refused_write_line
from .flags import refuse
from .parsing import lock_run_directory
from .results import keep_earlier_result, print_eval, result_record
from .signals import stop_outside_loop
from .video import remove_stale_videos
from .writer import event_writer


def env_seed(seed: int, global_step: int) -> int:
    """The training environments' seed: --seed for a new run, seed + global_step for one resumed at global_step, so
    that its environments, which restart from a reset, do not replay the first run's episodes (mod 2^31: envpool
    takes int32 seeds)."""
    return (seed + global_step) % 2**31


def seed_everything(args) -> None:
    """Python's, NumPy's and torch's RNGs from --seed; cuDNN's determinism; torch's threads (--torch-threads: runs
    side by side, as reproduce/sweep.py's workers are, share the cores)."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if getattr(args, "torch_threads", 0):
        torch.set_num_threads(args.torch_threads)


class Run:
    """One training run. The script loads its own state from `checkpoint` and hands it back to checkpoint() and fail()
    as a `state` function; the Run adds the RNGs, flags, run name, script name, train_seconds and perf sums."""

    def __init__(self, args, checkpoint: Optional[dict], script: str, phases: tuple, unit: str = "iteration"):
        self.args, self.script, self.unit, self.resumed_from = args, script, unit, checkpoint
        self.dir = (os.path.dirname(os.path.abspath(args.resume)) if checkpoint is not None
                    else os.path.join(args.output_dir, args.run_name))
        self.checkpoint_path = os.path.join(self.dir, "checkpoint.pt")
        self.saved_step = None if checkpoint is None else checkpoint["global_step"]  # of checkpoint.pt, intact
        self.lock = lock_run_directory(self.dir, checkpoint is not None, args.output_dir)
        remove_stale_temps(self.dir)  # a write killed midway (its file is the older one, whole)
        if checkpoint is not None and not unchanged_since_read(args.resume, checkpoint):  # another resume, meanwhile
            refuse(f"--resume: {args.resume} changed after it was read (another run resumed it in the meantime); "
                   f"nothing was written: run the same command again to go on from the new checkpoint")
        self.excepthook, sys.excepthook = sys.excepthook, self._on_uncaught  # writes the disk refuses: exit 4
        self.thread_excepthook, threading.excepthook = threading.excepthook, self._on_uncaught_in_thread
        if checkpoint is not None:  # a signal before the loop: the checkpoint is untouched (nothing is written yet)
            stop_outside_loop("before training resumed", f"{self.checkpoint_path} is unchanged (global_step "
                              f"{checkpoint['global_step']}); resume it again with --resume {self.checkpoint_path}")
        seed_everything(args)
        if args.track:  # wandb is imported only then
            import wandb
            wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                       config=vars(args), name=args.run_name, id=args.run_name, resume="allow", dir=self.dir)
        self.device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
        self.perf, self.train_seconds, self.stop_signal = dict.fromkeys(phases, 0.0), 0.0, []  # carried across resumes
        # Training stops at --stop-at-step when given: a prefix of the --total-timesteps protocol, whose schedules
        # (epsilon, learning rate, PER beta, ...) the loop still computes from --total-timesteps.
        stop = getattr(args, "stop_at_step", None)
        self.stop_step = args.total_timesteps if stop is None else min(stop, args.total_timesteps)
        self.env_seed = env_seed(args.seed, 0 if checkpoint is None else checkpoint["global_step"])

    def begin(self, global_step: int) -> None:
        """Restore a resumed run's RNGs and timings, open the event file (dropping the events logged after the
        checkpoint, or on a new run all earlier ones) and catch SIGTERM/SIGINT."""
        if self.resumed_from is not None:
            try:  # before anything is written: a damaged RNG state is one line, exit 2
                set_rng_state(self.resumed_from["rng"], self.device)
            except (KeyError, ValueError, TypeError, RuntimeError, AttributeError, IndexError) as e:
                refuse(f"--resume: {self.checkpoint_path} holds an RNG state that cannot be restored "
                       f"({describe_error(e)}); it is damaged or not a checkpoint of this script")
            keep_earlier_result(self.dir, global_step)
            self.train_seconds = self.resumed_from["train_seconds"]
            self.perf.update(self.resumed_from["perf"])
        self.lock.used = True  # from here the run writes: its .lock stays
        self.writer = event_writer(self.dir, purge_step=global_step + 1 if self.resumed_from is not None else 0)
        if self.resumed_from is None:
            self.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
                f"|{k}|{v}|" for k, v in vars(self.args).items()))
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start_time, self.start_step, self.last_print = time.monotonic(), global_step, float("-inf")
        self.last_perf = (global_step, self.start_time)  # (step, time) of the last log(perf=True)

    def _on_uncaught(self, kind, error, traceback) -> None:
        """A write the disk refused (a checkpoint, eval_results.json, model.pt, the events, the output) ends the run
        with one line and exit 4; the last complete checkpoint is intact. Anything else: Python's traceback."""
        line = refused_write_line(error, self.dir, self.checkpoint_path, self.saved_step)
        if line is None:
            return self.excepthook(kind, error, traceback)
        with contextlib.suppress(Exception):  # the output may be on the full disk too
            print(line, file=sys.stderr, flush=True)
        os._exit(WRITE_FAILED_EXIT)  # as a signal outside the loop does: the writer's threads cannot flush

    def _on_uncaught_in_thread(self, hook_args) -> None:
        """The TensorBoard writer's thread: its refused write comes back to the loop with the next event or flush,
        which ends the run as above; its traceback would only precede that line."""
        if disk_error(hook_args.exc_value) is None:
            self.thread_excepthook(hook_args)

    def _on_signal(self, signum, frame):
        """The loop checks the signal, checkpoints and exits at the end of the current unit of work, so that nothing
        is lost; more signals (Slurm, Ctrl-C twice) change nothing, even during the write. SIGKILL stops at once."""
        self.stop_signal.append(signum)
        print(f"signal {signum}: checkpointing at the end of this {self.unit}" if len(self.stop_signal) == 1 else
              f"signal {signum}: already stopping (SIGKILL stops at once, losing the work since the last checkpoint)",
              flush=True)

    @contextlib.contextmanager
    def timed(self, phase: str):
        """Add the block's seconds to perf[phase] (perf/<phase>_seconds); a block left by an exception adds nothing."""
        start = time.perf_counter()
        yield
        self.perf[phase] += time.perf_counter() - start

    def log(self, step: int, scalars: dict, perf: bool = False) -> None:
        """One event per tag; with perf, also charts/SPS_interval, every phase's seconds and the CUDA peak memory."""
        if perf:
            now, (last_step, last_time) = time.monotonic(), self.last_perf
            scalars = {**scalars, "charts/SPS_interval": int((step - last_step) / max(now - last_time, 1e-9)),
                       **{f"perf/{phase}_seconds": s for phase, s in self.perf.items()}}
            self.last_perf = (step, now)
            if self.device.type == "cuda":
                scalars["perf/cuda_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)

    def log_games(self, returns, lengths, step: int) -> None:
        """One charts/episodic_return and _length event per finished game at the step where it ended (CleanRL's)."""
        for episode_return, episode_length in zip(np.asarray(returns).tolist(), np.asarray(lengths).tolist()):
            self.writer.add_scalar("charts/episodic_return", episode_return, step)
            self.writer.add_scalar("charts/episodic_length", episode_length, step)

    def sps(self, global_step: int) -> int:  # since the start or the last checkpoint
        return int((global_step - self.start_step) / max(time.monotonic() - self.start_time, 1e-9))

    def progress(self, global_step: int, sps: int, fields: str, recent_returns) -> None:  # per --log-every-seconds
        now, total = time.monotonic(), self.args.total_timesteps
        if now - self.last_print >= self.args.log_every_seconds or global_step >= self.stop_step:
            self.last_print = now
            minutes, seconds = divmod(int(max(self.stop_step - global_step, 0) / max(sps, 1)), 60)  # the ETA
            ret = f"{np.mean(recent_returns):.1f}" if recent_returns else "n/a"
            steps = f"{global_step}/{total}" + (f" (stop at {self.stop_step})" if self.stop_step < total else "")
            print(f"step {steps} | SPS {sps} | {fields} | return {ret} "
                  f"| ETA {minutes // 60}:{minutes % 60:02d}:{seconds:02d}", flush=True)

    def save(self, path: str, state: dict) -> None:
        atomic_torch_save(path, {**state, "train_seconds": self.train_seconds, "perf": dict(self.perf),
                                 "rng": rng_state(self.device), "args": vars(self.args),
                                 "run_name": self.args.run_name, "algo": self.script})
        if path == self.checkpoint_path:
            self.saved_step = state["global_step"]

    def _save_and_exit(self, path: str, state: dict, code: int, message: str):  # exit 128 + signal number, or 3
        self.save(path, state)
        print(message, file=sys.stdout if code >= 128 else sys.stderr, flush=True)
        self.writer.close()
        sys.exit(code)

    def checkpoint(self, global_step: int, steps: int, state: Callable[[], dict]) -> None:
        """After a unit of work of `steps` env steps: on a stop signal, checkpoint and exit 128 + n; at every multiple
        of --checkpoint-every and at the end (or at --stop-at-step), checkpoint (events flushed first, so a hard kill
        loses none of them)."""
        now = time.monotonic()
        if self.stop_signal:
            self.train_seconds += now - self.start_time
            self._save_and_exit(self.checkpoint_path, state(), 128 + self.stop_signal[0],
                                f"stopped by signal {self.stop_signal[0]} at global_step {global_step}; "
                                f"resume with --resume {self.checkpoint_path}")
        every = self.args.checkpoint_every  # 0: only at the end (and on a signal)
        if (every > 0 and global_step // every > (global_step - steps) // every  # passed a multiple of it
                or global_step >= self.stop_step):
            self.train_seconds += now - self.start_time
            self.start_time, self.start_step = now, global_step
            self.writer.flush()
            self.save(self.checkpoint_path, state())

    def fail(self, global_step: int, error: Exception, state: Callable[[], dict]) -> None:
        """A non-finite loss or gradient: save the state before the failed step to checkpoint_nonfinite.pt (the last
        good checkpoint.pt stays) and exit 3."""
        self.train_seconds += time.monotonic() - self.start_time  # up to now, like the perf sums
        path = os.path.join(self.dir, "checkpoint_nonfinite.pt")
        self._save_and_exit(path, state(), 3, non_finite_line(error, global_step, path, self.args))

    def end_training(self) -> None:
        """Count the time since the last checkpoint; from now on a signal (during the evaluation) ends the process
        with one line: training is in the checkpoint written at its end, and --resume of it evaluates again. The
        videos of an evaluation such a signal stopped are removed, with or without --capture-video now."""
        self.train_seconds += time.monotonic() - self.start_time
        stop_outside_loop("during the evaluation", f"training is saved in {self.checkpoint_path} (global_step "
                          f"{self.start_step}, its end); --resume {self.checkpoint_path} evaluates it again")
        remove_stale_videos(self.dir)

    def save_model(self, obj: dict) -> None:  # model.pt; play.py evaluates it again, by its algo and flags
        atomic_torch_save(os.path.join(self.dir, "model.pt"), {**obj, "args": vars(self.args), "algo": self.script,
                                                               "run_name": self.args.run_name,
                                                               "global_step": self.saved_step})

    def finish(self, global_step: int, returns, lengths, capped: int, action_counts=None) -> dict:
        """Log the evaluation and write eval_results.json, whose existence marks the run as finished. action_counts:
        the evaluation policy's choices per action (Atari, play_atari_games), recorded and checked for one action."""
        summary = summarize_eval(returns, lengths, capped, action_counts)
        print_eval(summary)
        args, path = self.args, os.path.join(self.dir, "eval_results.json")
        # The result first, then its event: a result the disk refuses leaves no event behind, so the resume that
        # evaluates again logs eval/mean_return once. A signal waits until both are written.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        atomic_json_save(path, result_record(self.script, args, global_step, self.train_seconds, summary))
        stop_outside_loop("after the evaluation", f"the result is saved in {path}")
        try:
            if summary["episodes"]:
                self.writer.add_scalar("eval/mean_return", summary["mean"], global_step)
            self.writer.close()
        except Exception as e:  # the run is finished: a refused event only leaves the curve without its last point
            if (lost := disk_error(e)) is None:
                raise
            print(f"warning: could not write eval/mean_return to the events in {self.dir}: "
                  f"{cause_text(lost.errno)}; the result is saved in {path}", file=sys.stderr)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        sys.excepthook, threading.excepthook = self.excepthook, self.thread_excepthook
        if args.track:
            sys.modules["wandb"].finish()
        return summary
