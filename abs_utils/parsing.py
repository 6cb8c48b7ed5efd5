"""The command line of a run: flags checked, a resume's flags taken from its checkpoint, a new run's directory.

`parse_args` applies these rules in order; the first that fails is one line on stderr and exit 2, before anything
is created:
- a new run: its flags (`check_flags`), then its run directory (`new_run_directory`);
- a resume: the checkpoint's flags (`resume_flags`), checked as a new run's are, then the rules that relate the
  command line to the checkpoint (`resume_problems`: the step budget, another total only with --extend-schedules,
  the stop, a run that has finished).
"""
import atexit
import errno
import dataclasses
import fcntl
import json
import math
import os
import re
import sys
import time
from typing import NamedTuple, Optional

from .checkpoint import WRITE_FAILED_EXIT, check_checkpoint, disk_error, load_checkpoint
from .flags import check_flags, flag_of, given_flags, refuse, tyro_cli


class Resume(NamedTuple):
    """What a resume's rules need of its checkpoint."""
    checkpoint: dict
    saved: dict  # the checkpoint's flags that the command line was parsed against
    evaluated: Optional[int]  # the global_step of the run directory's eval_results.json, if any
    pending: bool  # the checkpoint is at its run's stop and that stop has no result yet: the resume evaluates it


def result_step(run_dir: str) -> Optional[int]:
    """The global_step of the run directory's eval_results.json; None without one or when it cannot be read."""
    try:
        with open(os.path.join(run_dir, "eval_results.json")) as f:
            step = json.load(f)["global_step"]
        return step if isinstance(step, int) and not isinstance(step, bool) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resume_flags(cls, script: str, state: dict, run_control_flags, args, argv):
    """(args, Resume) of --resume: the command line parsed again with the checkpoint's flags as defaults. A given
    run-control flag wins; another given flag is ignored with a warning (it would change the algorithm mid-run)."""
    checkpoint = load_checkpoint(args.resume, script)
    check_checkpoint(args.resume, checkpoint, cls, state)
    step, old = checkpoint["global_step"], checkpoint["args"]
    # A checkpoint at its own stop is the run's last; without a result at its step (eval_results.json), its
    # evaluation was stopped (a signal) or crashed, and the resume is that evaluation, at the same stop.
    evaluated = result_step(os.path.dirname(os.path.abspath(args.resume)))
    own_stop = min(old.get("stop_at_step") or math.inf, old.get("total_timesteps") or math.inf)
    pending = step >= own_stop and (evaluated is None or evaluated < step)
    # Every flag but the stop comes from the checkpoint: a resumed prefix run (--stop-at-step) runs on to the end of
    # its --total-timesteps unless a later stop is given again. --extend-schedules holds for one resume only.
    saved = {k: v for k, v in old.items()
             if k in vars(args) and (k != "stop_at_step" or pending) and k != "extend_schedules"}
    args = tyro_cli(cls, argv, default=dataclasses.replace(args, **saved))
    ignored = [f"{flag_of(k)} {getattr(args, k)} (checkpoint: {v})" for k, v in saved.items()
               if k not in run_control_flags and getattr(args, k) != v]
    if ignored:
        print(f"warning: --resume keeps the checkpoint's algorithm flags; ignoring {', '.join(ignored)}",
              file=sys.stderr)
    kept = {k: v for k, v in saved.items() if k not in run_control_flags}
    args = dataclasses.replace(args, **{**kept, "run_name": checkpoint["run_name"]})
    return args, Resume(checkpoint, saved, evaluated, pending)


def check_resumed_flags(args, problems, saved: dict, argv) -> None:
    """check_flags, with a bad value that the user never typed named as the checkpoint's."""
    try:
        check_flags(args, problems)
    except ValueError as e:
        from_checkpoint = sorted({flag for flag in re.findall(r"--[a-z0-9][a-z0-9-]*", str(e))
                                  if flag[2:].replace("-", "_") in set(saved) - given_flags(argv)})
        if not from_checkpoint:
            raise
        raise ValueError(f"{e}; {', '.join(from_checkpoint)} comes from the checkpoint {args.resume}, not from the "
                         "command line (the file is damaged or was written by another version)") from None


def resume_problems(args, resume: Resume) -> None:
    """The rules that relate a resume's command line to its checkpoint: ValueError with the first that fails."""
    step = resume.checkpoint["global_step"]
    if args.total_timesteps < step:
        raise ValueError(f"--total-timesteps ({args.total_timesteps}) is below the checkpoint's global_step "
                         f"({step}): give at least that many to --resume")
    total = resume.checkpoint["args"].get("total_timesteps")
    if args.total_timesteps != total and not getattr(args, "extend_schedules", False):
        # The learning rate's annealing, epsilon's decay, PER's beta are fractions of the total: another total moves
        # them mid-run (an annealed learning rate near 0 jumps back up). A user asks for that, or is told.
        raise ValueError(f"--total-timesteps ({args.total_timesteps}) is not the checkpoint's ({total}): the schedules "
                         "computed from it (an annealed learning rate, epsilon's decay, ...) would change mid-run. To "
                         "stop a run early and go on later, give --stop-at-step to its first command instead; to go on "
                         "with every schedule over the new total, add --extend-schedules")
    stop = getattr(args, "stop_at_step", None)
    if (stop is not None and stop <= step
            and not (resume.pending and stop == resume.saved.get("stop_at_step"))):  # (its own stop: evaluated again)
        raise ValueError(f"--stop-at-step ({stop}) must be above the checkpoint's global_step "
                         f"({step}): the run has reached it already")
    if resume.evaluated is not None and resume.evaluated >= step and step >= min(stop or math.inf,
                                                                                  args.total_timesteps):
        # Resuming it would evaluate it again and overwrite its result, or with --eval-episodes 0 empty it.
        raise ValueError(f"--resume: {os.path.dirname(os.path.abspath(args.resume))} is a finished run "
                         f"(its checkpoint and eval_results.json are at global_step {step}): "
                         "nothing to resume. To train on, give a larger --total-timesteps with --extend-schedules; to "
                         "evaluate it again, move its eval_results.json aside first")


def extension_note(args, resume: Resume) -> Optional[str]:
    """With --extend-schedules and another total: what the schedules do from the checkpoint on."""
    step, total = resume.checkpoint["global_step"], resume.checkpoint["args"].get("total_timesteps")
    if args.total_timesteps == total or not isinstance(total, int) or total <= 0:
        return None
    return (f"warning: --extend-schedules: the schedules computed from --total-timesteps go on over "
            f"{args.total_timesteps} steps instead of {total}: at global_step {step} the run moves from "
            f"{step / total:.1%} to {step / args.total_timesteps:.1%} of them (a linearly annealed learning rate "
            f"from {1 - step / total:.1%} to {1 - step / args.total_timesteps:.1%} of its start)")


def new_run_directory(args) -> None:
    """Name a new run (--run-name, or one built from --exp-name) and check that its directory can be made and holds
    no earlier run: ValueError otherwise."""
    flag = "--run-name" if args.run_name else "--exp-name"
    args.run_name = args.run_name or f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    if "/" in args.run_name or "\0" in args.run_name or len(os.fsencode(args.run_name)) > 255:
        raise ValueError(f"{flag} must make a run name that is one path component of at most 255 bytes "
                         f"(no '/'), got {args.run_name!r}")
    run_dir = os.path.join(args.output_dir, args.run_name)
    place = run_dir  # the run directory, or the nearest folder above it that exists, must be a folder
    while not os.path.exists(place) and os.path.dirname(place) != place:
        place = os.path.dirname(place) or "."
    if not os.path.isdir(place) or not os.access(place, os.W_OK | os.X_OK):
        raise ValueError(f"{'--run-name' if place == run_dir else '--output-dir'}: {place} is "
                         f"{'not a directory' if not os.path.isdir(place) else 'not writable'}")
    for name in ("checkpoint.pt", "eval_results.json"):
        if os.path.exists(os.path.join(run_dir, name)):
            raise ValueError(f"--run-name: {run_dir} already holds an earlier run's {name}; continue it with "
                             f"--resume {os.path.join(run_dir, 'checkpoint.pt')} or choose another --run-name")


def lock_run_directory(run_dir: str, resumed: bool, output_dir: str):
    """Create run_dir and hold an exclusive flock on run_dir/.lock: one live run per directory; the OS drops the
    lock when the process ends, however it ends. Another live run, or a directory that cannot be made, is one line
    naming the flag that chose it, exit 2. Returns the open lock file (keep it; Run.begin marks it `used`). A .lock
    made here is removed again when the process ends before the run began (a refused resume writes nothing)."""
    path = os.path.join(run_dir, ".lock")
    try:
        os.makedirs(run_dir, exist_ok=True)
        made = not os.path.exists(path)
        lock = open(path, "a")
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        # a full disk is no bad input: the same command works once there is space (a permission is the flag's)
        if disk_error(e) and e.errno not in (errno.EACCES, errno.EPERM):
            print(f"error: could not write {run_dir}/.lock: {os.strerror(e.errno).lower()}; nothing was written: free "
                  "space, then run the same command again", file=sys.stderr)
            sys.exit(WRITE_FAILED_EXIT)
        flag = "--resume" if resumed else "--run-name" if os.path.isdir(output_dir) else "--output-dir"
        print(f"error: {flag}: {run_dir} " + ("is in use by another live run" if isinstance(e, BlockingIOError)
                                              else f"cannot be written ({e.strerror})"), file=sys.stderr)
        sys.exit(2)
    lock.used = False
    if made and resumed:
        atexit.register(lambda: getattr(lock, "used", True) or os.path.exists(path) and os.remove(path))
    return lock


def parse_args(cls, script: str, problems, run_control_flags, state: dict, argv=None):
    """(args, checkpoint or None), or exit 2 with one line. `problems(args)`: the script's rows of (ok, message);
    `state`: the types of the script's own keys in a checkpoint."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro_cli(cls, argv)
    try:
        if args.resume is None:
            check_flags(args, problems)
            new_run_directory(args)
            return args, None
        args, resume = resume_flags(cls, script, state, run_control_flags, args, argv)
        check_resumed_flags(args, problems, resume.saved, argv)
        resume_problems(args, resume)
    except ValueError as e:
        refuse(str(e))
    note = extension_note(args, resume)
    if note:
        print(note, file=sys.stderr)
    return args, resume.checkpoint
