"""The run machinery of the ABS scripts, written once; each script holds its algorithm top to bottom.

Flag checks and parsing (one line on stderr and exit 2 for bad input, before anything is created), resume from a
weights-only checkpoint, RNG state, atomic writers, and a `Run` that carries the run directory (locked while the run
lives), device, TensorBoard writer, per-phase timings and stop signals through the loop:

    args, checkpoint = U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, {"q_network": dict, ...})
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "update"))  # run directory, seeds, device, wandb
    run.begin(global_step)  # after loading the script's state from `checkpoint`; writer, signals, clocks
    ...  # the loop: run.timed(phase), run.log, run.progress, run.checkpoint(global_step, steps, state)
    run.end_training(); run.finish(global_step, returns, lengths, capped, action_counts)  # eval_results.json

docs/CONVENTIONS.md has the contract. A script copied to another folder takes this file along.
"""
import os
import signal
import sys


# ================================================================ stop signals outside the training loop
# Imported first by the scripts, so these lines run before torch's and envpool's imports, the slow first second.
# The training loop checkpoints on a signal (Run.checkpoint); outside it there is nothing to save, or it is saved
# (training is checkpointed at its end, before the evaluation), so the process ends at once, with one line.
_OUTSIDE_LOOP = {"when": "before training started", "then": "nothing was saved; run the same command again"}
_exit = os._exit  # not sys.exit: unwinding with envpool's evaluation threads alive can crash the interpreter


def _stop_outside_loop(signum, frame):
    print(f"stopped by signal {signum} {_OUTSIDE_LOOP['when']}: {_OUTSIDE_LOOP['then']}", flush=True)
    sys.stderr.flush()
    _exit(128 + signum)


def stop_outside_loop(when: str, then: str) -> None:
    """From now on SIGINT/SIGTERM print 'stopped by signal <n> <when>: <then>' and exit 128 + n (130, 143) at once."""
    _OUTSIDE_LOOP.update(when=when, then=then)
    signal.signal(signal.SIGINT, _stop_outside_loop)
    signal.signal(signal.SIGTERM, _stop_outside_loop)


# A script of this folder run as a program (not a test or a tool importing this file) gets them from its first line.
_main_file = getattr(sys.modules.get("__main__"), "__file__", None)
if _main_file and os.path.dirname(os.path.abspath(_main_file)) == os.path.dirname(os.path.abspath(__file__)):
    stop_outside_loop("before training started", "nothing was saved; run the same command again")

import contextlib  # noqa: E402 (after the handlers: the imports below take most of the first second)
import dataclasses
import fcntl
import importlib.util
import io
import itertools
import json
import math
import random
import re
import shutil
import time
import typing
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import torch
import tyro
from torch.utils.tensorboard import SummaryWriter


# ================================================================ flags
def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


DOMAINS = {">= 0": lambda v: v >= 0, ">= 1": lambda v: v >= 1, "> 0": lambda v: v > 0,
           "in [0, 1]": lambda v: 0 <= v <= 1, "in (0, 1]": lambda v: 0 < v <= 1,
           "in [1, 2^31)": lambda v: 1 <= v < 2**31,  # counts that envpool takes as int32
           "in (0, 1e37]": lambda v: 0 < v <= 1e37}  # Adam's learning rate: its first step, 10 x the rate, is a float32


def in_domain(args, domain: str, *names: str) -> Iterator[tuple[bool, str]]:
    """Rows (ok, '--flag must be <domain>, got <value>') for flags with one of the DOMAINS, e.g. ">= 1"."""
    for name in names:
        value = getattr(args, name)
        yield DOMAINS[domain](value), f"{flag_of(name)} must be {domain}, got {value!r}"


def memory_problem(what: str, nbytes: Callable[[], int], cuda: bool) -> tuple[bool, str]:
    """(ok, message): storage of nbytes() bytes (its estimate from the flags; an overflow counts as too many) fits
    in the free memory of the GPU it goes to (--cuda with a GPU) or else in the available RAM."""
    try:
        need = float(nbytes())
    except (RuntimeError, OverflowError, ValueError, TypeError):  # torch's size overflow is a TypeError
        need = math.inf
    if cuda and torch.cuda.is_available():
        free, where = torch.cuda.mem_get_info()[0], "free GPU memory"
    else:
        try:  # Linux's MemAvailable: what can be allocated without swapping; elsewhere the physical memory
            with open("/proc/meminfo") as f:
                free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration):
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        where = "available RAM"
    size = f"{need / 2**30:.1f} GiB" if need < 2**63 else "over 2^63 bytes"
    return need <= free, f"{what} needs {size}, more than the {free / 2**30:.1f} GiB of {where}"


def rollout_memory_problem(args, nbytes_at: Callable[[int], int]) -> tuple[bool, str]:
    """memory_problem for a rollout storage of nbytes_at(L) bytes, allocated at L_max (--num-steps-max; --num-steps
    with --no-adapt) for --num-envs environments."""
    L_max, flag = (args.num_steps_max, "--num-steps-max") if args.adapt else (args.num_steps, "--num-steps")
    return memory_problem(f"the rollout storage ({flag} {L_max} x --num-envs {args.num_envs})",
                          lambda: nbytes_at(L_max), args.cuda)


MAX_THREADS = 1024  # thread counts: far beyond any machine's cores, well inside what a thread pool can create
# Every other integer flag counts steps, iterations, measurements, epochs, episodes or rows, each of which takes at
# least one env step or one gradient step. No run takes 10^12 of them (11 days at a million steps per second, 20,000
# x the paper's longest run), so a larger count is a typo that would loop for ever or allocate what no machine holds
# (a deque of --window 2^63 is an OverflowError once the run directory exists).
MAX_COUNT = 10**12
MAX_EPOCHS = 1000  # epochs of one update: 25 x PPO's 40 at L = 8192; a longer update is never stopped by a signal


def has_cxx() -> bool:  # for torch.compile's kernels
    return any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++"))


def common_problems(args) -> Iterator[tuple[bool, str]]:
    """The rows every script checks first: the seed, the run name, --track."""
    # envpool takes signed 32-bit seeds, and evaluation runs on seed + 10_000
    yield 0 <= args.seed < 2**31 - 10_000, f"--seed must be in [0, 2^31 - 10000), got {args.seed!r}"
    name = args.run_name
    yield (name is None or (name not in ("", ".", "..") and os.path.basename(name) == name),
           f"--run-name must be a single path component (no '/', not '.' or '..'), got {name!r}")
    yield (not args.track or sys.modules.get("wandb", 0) is not None and importlib.util.find_spec("wandb") is not None,
           "--track needs the wandb package, which cannot be imported (pip install wandb)")
    stop = getattr(args, "stop_at_step", None)  # (a script without the flag runs to --total-timesteps)
    yield (stop is None or 1 <= stop <= args.total_timesteps, f"--stop-at-step must be in [1, --total-timesteps "
           f"({args.total_timesteps})] (or not given: run to the end), got {stop!r}")
    for name in ("torch_threads", "env_threads"):  # 0: the library's default
        if hasattr(args, name):
            yield 0 <= getattr(args, name) <= MAX_THREADS, (f"{flag_of(name)} must be in [0, {MAX_THREADS}] "
                                                             f"(0: the library's default), got {getattr(args, name)!r}")


def check_flags(args, problems: Callable[..., Iterable[tuple[bool, str]]]) -> None:
    """Raise ValueError with the first problem: a NaN or infinite float, then common_problems, count_problems, then
    the script's rows in order. The rows are generated lazily, so a row may divide by a flag that an earlier row
    checked."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{flag_of(name)} must be a finite number, got {value}")
    for ok, message in itertools.chain(common_problems(args), count_problems(args), problems(args)):
        if not ok:
            raise ValueError(message)


def count_problems(args) -> Iterator[tuple[bool, str]]:
    """Every integer flag at most MAX_COUNT (the seed and thread counts have their own, smaller bounds)."""
    for name, value in vars(args).items():
        if isinstance(value, int) and not isinstance(value, bool):
            yield value <= MAX_COUNT, (f"{flag_of(name)} must be at most 10^12 (no run takes that many steps, "
                                       f"iterations or episodes), got {value}")


def epochs_problem(most: int, flags: str) -> tuple[bool, str]:
    """(ok, message): the longest update's epochs, `most`, as the flags' epoch rule gives them, within MAX_EPOCHS."""
    return most <= MAX_EPOCHS, (f"{flags} give {most} epochs to the longest update, more than {MAX_EPOCHS} "
                                f"(a stop signal waits for the update to end)")


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
def atomic_torch_save(path, obj):
    torch.save(obj, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


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


def refuse(message: str) -> typing.NoReturn:
    """Bad input found after parsing (a checkpoint's contents): one line on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


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
    if checkpoint.get("algo") != script:
        raise ValueError(f"--resume: {path!r} is a checkpoint of {checkpoint['algo']}.py, not of {script}.py"
                         if isinstance(checkpoint.get("algo"), str) else
                         f"--resume: {path!r} is not a checkpoint of this script (no algo)")
    return checkpoint


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


def given_flags(argv) -> set:
    """The flags written on the command line (--flag, --flag=value, --no-flag, with - or _), as attribute names."""
    names = set()
    for token in argv:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            names |= {name, name[3:]} if name.startswith("no_") else {name}
    return names


def result_step(run_dir: str) -> Optional[int]:
    """The global_step of the run directory's eval_results.json; None without one or when it cannot be read."""
    try:
        with open(os.path.join(run_dir, "eval_results.json")) as f:
            step = json.load(f)["global_step"]
        return step if isinstance(step, int) and not isinstance(step, bool) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_args(cls, script: str, problems, run_control_flags, state: dict, argv=None):
    """(args, checkpoint or None), or exit 2 with one line. With --resume, the command line is parsed again with the
    checkpoint's flags as defaults: a given run-control flag wins, another given flag is ignored with a warning (it
    would change the algorithm mid-run). A new run gets a free, writable run directory of its own."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, checkpoint = tyro_cli(cls, argv), None
    saved, evaluated, pending = {}, None, False
    try:
        if args.resume is not None:
            checkpoint = load_checkpoint(args.resume, script)
            check_checkpoint(args.resume, checkpoint, cls, state)
            step, old = checkpoint["global_step"], checkpoint["args"]
            # A checkpoint at its own stop is the run's last; without a result at its step (eval_results.json), its
            # evaluation was stopped (a signal) or crashed, and the resume is that evaluation, at the same stop.
            evaluated = result_step(os.path.dirname(os.path.abspath(args.resume)))
            own_stop = min(old.get("stop_at_step") or math.inf, old.get("total_timesteps") or math.inf)
            pending = step >= own_stop and (evaluated is None or evaluated < step)
            # Every flag but the stop comes from the checkpoint: a resumed prefix run (--stop-at-step) runs on to
            # the end of its --total-timesteps unless a later stop is given again.
            saved = {k: v for k, v in old.items() if k in vars(args) and (k != "stop_at_step" or pending)}
            args = tyro_cli(cls, argv, default=dataclasses.replace(args, **saved))
            ignored = [f"{flag_of(k)} {getattr(args, k)} (checkpoint: {v})" for k, v in saved.items()
                       if k not in run_control_flags and getattr(args, k) != v]
            if ignored:
                print(f"warning: --resume keeps the checkpoint's algorithm flags; ignoring {', '.join(ignored)}",
                      file=sys.stderr)
            kept = {k: v for k, v in saved.items() if k not in run_control_flags}
            args = dataclasses.replace(args, **{**kept, "run_name": checkpoint["run_name"]})
        try:
            check_flags(args, problems)
        except ValueError as e:  # a value the user never typed is named as the checkpoint's
            from_checkpoint = sorted({flag for flag in re.findall(r"--[a-z0-9][a-z0-9-]*", str(e))
                                      if flag[2:].replace("-", "_") in set(saved) - given_flags(argv)})
            if not from_checkpoint:
                raise
            raise ValueError(f"{e}; {', '.join(from_checkpoint)} comes from the checkpoint {args.resume}, not from the "
                             "command line (the file is damaged or was written by another version)") from None
        if checkpoint is not None and args.total_timesteps < checkpoint["global_step"]:
            raise ValueError(f"--total-timesteps ({args.total_timesteps}) is below the checkpoint's global_step "
                             f"({checkpoint['global_step']}): give at least that many to --resume")
        stop = getattr(args, "stop_at_step", None)
        if (checkpoint is not None and stop is not None and stop <= checkpoint["global_step"]
                and not (pending and stop == saved.get("stop_at_step"))):  # (its own stop: evaluated again)
            raise ValueError(f"--stop-at-step ({stop}) must be above the checkpoint's global_step "
                             f"({checkpoint['global_step']}): the run has reached it already")
        if (checkpoint is not None and evaluated is not None and evaluated >= checkpoint["global_step"]
                and checkpoint["global_step"] >= min(stop or math.inf, args.total_timesteps)):
            # Resuming it would evaluate it again and overwrite its result, or with --eval-episodes 0 empty it.
            raise ValueError(f"--resume: {os.path.dirname(os.path.abspath(args.resume))} is a finished run "
                             f"(its checkpoint and eval_results.json are at global_step {checkpoint['global_step']}): "
                             "nothing to resume. To train on, give a larger --total-timesteps; to evaluate it again, "
                             "move its eval_results.json aside first")
        if checkpoint is None:
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
    except ValueError as e:
        refuse(str(e))
    return args, checkpoint


# An evaluation policy that chose one action on at least this share of its steps is reported as near-constant: its
# score says which action that is more than how it plays (PQN's greedy policy early in training can be one action).
NEAR_CONSTANT_SHARE = 0.9


def summarize_eval(returns, lengths, capped, action_counts=None) -> dict:
    r = np.asarray(returns, dtype=np.float64)
    stats = ({"mean": r.mean(), "std": r.std(), "median": np.median(r), "min": r.min(), "max": r.max()} if len(r)
             else dict.fromkeys(("mean", "std", "median", "min", "max")))
    counts = {} if action_counts is None else {"action_counts": [int(c) for c in action_counts]}
    return {"episodes": len(returns), "returns": [float(x) for x in returns], "lengths": [int(x) for x in lengths],
            **{k: None if v is None else float(v) for k, v in stats.items()}, "capped": int(capped), **counts}


def top_action(action_counts) -> tuple[int, float]:
    """(the most frequent action, its share of the steps) of an evaluation's action_counts (ties: the lowest index)."""
    counts = np.asarray(action_counts, dtype=np.int64)
    return int(counts.argmax()), float(counts.max() / counts.sum())


def action_names(env_id: str) -> list[str]:
    """The names of an Atari game's actions in envpool's order (the game's minimal action set): the index of an
    action in eval.action_counts names it, e.g. action_names("Breakout-v5") == ["NOOP", "FIRE", "RIGHT", "LEFT"]."""
    from ale_py import ALEInterface, LoggerMode, roms  # the Atari scripts' requirement, imported only here
    game = env_id.split("-")[0].lower()  # "MsPacman-v5" -> the ROM id "ms_pacman"
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(next(r for r in roms.get_all_rom_ids() if r.replace("_", "") == game)))
    return [a.name for a in ale.getMinimalActionSet()]


def fire_action(env_id: str) -> Optional[int]:  # FIRE's index in the Atari game's (envpool's) actions, or None
    names = action_names(env_id)
    return names.index("FIRE") if "FIRE" in names else None


def play_atari_games(envs, act: Callable, episodes: int, fire: Optional[int], protocol: str = "quota"):
    """(returns, lengths, capped, action_counts) of `episodes` whole games on envpool Atari envs, act(obs) -> actions.
    action_counts[a]: the steps, over every env and every step played, on which the policy chose action a (an index of
    envs.action_space, the game's minimal action set; before the FIRE below), to show a policy that barely depends on
    what it sees.
    protocol "quota": each env plays a fixed quota, so that short games are not favoured; "first-finished": the first
    `episodes` games to end on any env, in the order they end (env index within a step), as the authors' PQN and GNS
    code counts them: an env with short games ends more of them, so short games are over-represented. With `fire`
    (FIRE's index), an env presses it on the step after it lost a life, as envpool's reset does in training."""
    num_envs = envs.config["num_envs"]
    if protocol == "quota":
        quota = np.full(num_envs, episodes // num_envs)
        quota[: episodes % num_envs] += 1
    elif protocol == "first-finished":  # no env has a share: the first `episodes` games to end count
        quota = np.full(num_envs, episodes)
    else:
        raise ValueError(f"unknown evaluation protocol {protocol!r}")
    finished, ep_return = np.zeros(num_envs, dtype=np.int64), np.zeros(num_envs)
    returns, lengths, capped = [], [], 0
    action_counts = np.zeros(envs.action_space.n, dtype=np.int64)
    obs, info = envs.reset()
    lives = info["lives"]
    while len(returns) < episodes:
        actions = act(obs)
        action_counts += np.bincount(actions, minlength=len(action_counts))
        if fire is not None:  # a life was lost in the last step (or the game ended: the reset ignores the action)
            actions = np.where(info["lives"] < lives, fire, actions)
        lives = info["lives"]
        obs, reward, term, trunc, info = envs.step(actions)
        ep_return += reward
        ended = term | trunc
        counted = ended & (finished < quota)
        counted &= np.cumsum(counted) <= episodes - len(returns)  # first-finished: ties by env index, up to the end
        returns += ep_return[counted].tolist()
        lengths += info["elapsed_step"][counted].tolist()
        capped += int((counted & trunc & ~term).sum())
        finished += ended
        ep_return[ended] = 0.0
    envs.close()
    return returns, lengths, capped, action_counts.tolist()


def env_seed(seed: int, global_step: int) -> int:
    """The training environments' seed: --seed for a new run, seed + global_step for one resumed at global_step, so
    that its environments, which restart from a reset, do not replay the first run's episodes (mod 2^31: envpool
    takes int32 seeds)."""
    return (seed + global_step) % 2**31


# ================================================================ the run and its records
class NonFiniteLoss(RuntimeError):
    """Raised by an update before its optimizer step when the loss or gradient is not finite (see Run.fail)."""


# The flags (of those a script has) whose lower values shrink a loss term or a step: the learning rate, the weights of
# PPO's entropy and value terms and of BTR's Munchausen term, and the gradient clip. A non-finite loss names them all
# with their values, since the step that failed does not say which term grew.
LOSS_SCALES = ("learning_rate", "ent_coef", "vf_coef", "munchausen_alpha", "max_grad_norm")


def loss_scales(args) -> str:
    return ", ".join(f"{flag_of(n)} {getattr(args, n)}" for n in LOSS_SCALES if hasattr(args, n))


class Run:
    """One training run. The script loads its own state from `checkpoint` and hands it back to checkpoint() and fail()
    as a `state` function; the Run adds the RNGs, flags, run name, script name, train_seconds and perf sums."""

    def __init__(self, args, checkpoint: Optional[dict], script: str, phases: tuple, unit: str = "iteration"):
        self.args, self.script, self.unit, self.resumed_from = args, script, unit, checkpoint
        self.dir = (os.path.dirname(os.path.abspath(args.resume)) if checkpoint is not None
                    else os.path.join(args.output_dir, args.run_name))
        self.checkpoint_path = os.path.join(self.dir, "checkpoint.pt")
        try:  # one live run per directory: the OS drops the lock when the process ends, however it ends
            os.makedirs(self.dir, exist_ok=True)
            self.lock = open(os.path.join(self.dir, ".lock"), "a")
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            flag = ("--resume" if checkpoint is not None else "--run-name" if os.path.isdir(args.output_dir)
                    else "--output-dir")  # the folder could not be created
            print(f"error: {flag}: {self.dir} " + (
                "is in use by another live run" if isinstance(e, BlockingIOError) else f"cannot be written "
                f"({e.strerror})"), file=sys.stderr)
            sys.exit(2)
        if checkpoint is not None:  # a signal before the loop: the checkpoint is untouched (nothing is written yet)
            stop_outside_loop("before training resumed", f"{self.checkpoint_path} is unchanged (global_step "
                              f"{checkpoint['global_step']}); resume it again with --resume {self.checkpoint_path}")
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        torch.backends.cudnn.deterministic = args.torch_deterministic
        if getattr(args, "torch_threads", 0):  # runs side by side (reproduce/sweep.py's workers) share the cores
            torch.set_num_threads(args.torch_threads)
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
            self._keep_earlier_result(global_step)
            self.train_seconds = self.resumed_from["train_seconds"]
            self.perf.update(self.resumed_from["perf"])
        self.writer = SummaryWriter(self.dir, purge_step=global_step + 1 if self.resumed_from is not None else 0)
        if self.resumed_from is None:
            self.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
                f"|{k}|{v}|" for k, v in vars(self.args).items()))
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start_time, self.start_step, self.last_print = time.time(), global_step, 0.0
        self.last_perf = (global_step, self.start_time)  # (step, time) of the last log(perf=True)

    def _keep_earlier_result(self, global_step: int) -> None:
        """A resumed run that had written eval_results.json (a prefix run stopped by --stop-at-step, or a finished run
        extended) keeps that record as eval_results_at_<its step>.json: the new result never overwrites it."""
        path = os.path.join(self.dir, "eval_results.json")
        if os.path.exists(path):
            try:
                with open(path) as f:
                    step = int(json.load(f)["global_step"])
            except (OSError, ValueError, KeyError, TypeError):
                step = global_step
            kept, n = os.path.join(self.dir, f"eval_results_at_{step}.json"), 1
            while os.path.exists(kept):  # a record kept before (the same step evaluated twice) stays as it is
                n += 1
                kept = os.path.join(self.dir, f"eval_results_at_{step}_{n}.json")
            os.replace(path, kept)
            print(f"kept the earlier result (at global_step {step}) as {kept}")

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
            now, (last_step, last_time) = time.time(), self.last_perf
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
        return int((global_step - self.start_step) / max(time.time() - self.start_time, 1e-9))

    def progress(self, global_step: int, sps: int, fields: str, recent_returns) -> None:  # per --log-every-seconds
        now, total = time.time(), self.args.total_timesteps
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

    def _save_and_exit(self, path: str, state: dict, code: int, message: str):  # exit 128 + signal number, or 3
        self.save(path, state)
        print(message, file=sys.stdout if code >= 128 else sys.stderr, flush=True)
        self.writer.close()
        sys.exit(code)

    def checkpoint(self, global_step: int, steps: int, state: Callable[[], dict]) -> None:
        """After a unit of work of `steps` env steps: on a stop signal, checkpoint and exit 128 + n; at every multiple
        of --checkpoint-every and at the end (or at --stop-at-step), checkpoint (events flushed first, so a hard kill
        loses none of them)."""
        now = time.time()
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
        self.train_seconds += time.time() - self.start_time  # up to now, like the perf sums
        path = os.path.join(self.dir, "checkpoint_nonfinite.pt")
        self._save_and_exit(path, state(), 3, f"error: {error} at global_step {global_step}; state before that step "
                                              f"saved to {path}. Start again with lower values of the flags that "
                                              f"scale the loss or its steps ({loss_scales(self.args)}).")

    def end_training(self) -> None:
        """Count the time since the last checkpoint; from now on a signal (during the evaluation) ends the process
        with one line: training is in the checkpoint written at its end, and --resume of it evaluates again."""
        self.train_seconds += time.time() - self.start_time
        stop_outside_loop("during the evaluation", f"training is saved in {self.checkpoint_path} (global_step "
                          f"{self.start_step}, its end); --resume {self.checkpoint_path} evaluates it again")

    def save_model(self, obj: dict) -> None:  # model.pt
        atomic_torch_save(os.path.join(self.dir, "model.pt"), {**obj, "args": vars(self.args)})

    def finish(self, global_step: int, returns, lengths, capped: int, action_counts=None) -> dict:
        """Log the evaluation and write eval_results.json, whose existence marks the run as finished. action_counts:
        the evaluation policy's choices per action (Atari, play_atari_games), recorded and checked for one action."""
        summary = summarize_eval(returns, lengths, capped, action_counts)
        if summary["episodes"]:
            self.writer.add_scalar("eval/mean_return", summary["mean"], global_step)
            self.writer.flush()  # before the result is written: a signal after it loses nothing
            print(f"eval: mean {summary['mean']:.2f} +- {summary['std']:.2f} over {summary['episodes']} episodes "
                  f"({summary['capped']} hit the step cap)")
            if 2 * summary["capped"] > summary["episodes"]:
                print("warning: most evaluation episodes hit the step cap; their returns are those of games cut short")
            if action_counts is not None and sum(action_counts):
                action, share = top_action(action_counts)
                if share >= NEAR_CONSTANT_SHARE:
                    print(f"warning: the evaluation policy chose action {action} on {share:.1%} of its steps "
                          f"(eval.action_counts): a near-constant policy, whose score is that of one action")
        args, path = self.args, os.path.join(self.dir, "eval_results.json")
        with open(f"{path}.tmp", "w") as f:  # then renamed over it, like checkpoints: never a half-written file
            json.dump({"algo": self.script, "env_id": args.env_id, "seed": args.seed, "run_name": args.run_name,
                       "global_step": global_step, "total_timesteps": args.total_timesteps,
                       # a prefix run (--stop-at-step) holds the first global_step steps of a longer protocol
                       "complete": global_step >= args.total_timesteps,
                       "train_seconds": self.train_seconds, "eval": summary, "args": vars(args)}, f, indent=2)
        os.replace(f"{path}.tmp", path)
        stop_outside_loop("after the evaluation", f"the result is saved in {path}")
        self.writer.close()
        if args.track:
            sys.modules["wandb"].finish()
        return summary
