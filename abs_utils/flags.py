"""Flag checks: every flag's domain, the rows every script checks, tyro's errors as one line.

Bad input is one line on stderr (`error: ...`) and exit 2, before anything is created (docs/CONVENTIONS.md, "Flag
domains"). The scripts' own rows (`flag_problems`) are built from `in_domain` and the helpers here.
"""
import contextlib
import importlib.util
import io
import itertools
import math
import os
import shutil
import sys
import typing
from typing import Callable, Iterable, Iterator

import torch
import tyro


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
    """The rows every script checks first: the seed, the run name, --track, --stop-at-step, --extend-schedules,
    --video-episodes and --capture-video, the thread counts."""
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
    yield (not getattr(args, "extend_schedules", False) or args.resume is not None,
           "--extend-schedules goes with --resume and another --total-timesteps than the checkpoint's")
    if hasattr(args, "video_episodes"):  # --capture-video records evaluation games
        yield args.video_episodes >= 1, f"--video-episodes must be >= 1, got {args.video_episodes!r}"
        yield (not args.capture_video or args.eval_episodes >= 1,
               "--capture-video records evaluation games: it needs --eval-episodes >= 1, got "
               f"{args.eval_episodes!r}")
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


def refuse(message: str) -> typing.NoReturn:
    """Bad input found after parsing (a checkpoint's contents): one line on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def given_flags(argv) -> set:
    """The flags written on the command line (--flag, --flag=value, --no-flag, with - or _), as attribute names."""
    names = set()
    for token in argv:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            names |= {name, name[3:]} if name.startswith("no_") else {name}
    return names
