"""The experiments' TOML files (reproduce/experiments.toml and --config): reading them, and checking every game
list and experiment in them, so that a malformed entry is one line naming its file (SweepError, exit 2 in sweep.py)
before anything is run or created. experiments.py expands a checked experiment into its runs.
"""
from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path

from .runs import is_int, reference_pairs

BUILTIN_CONFIG = Path(__file__).resolve().parent / "experiments.toml"
EXPERIMENT_KEYS = {"description", "script", "games", "seeds", "total_timesteps", "checkpoint_every",
                   "env_suffix", "benchmark", "flags", "labels", "reference", "comparisons", "stop_at_step"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")  # an experiment's or a label's name: one path component
NAME_BYTES = 200  # at most, for a name that is a path component (file systems take 255)
GAME_RE = re.compile(r"^[A-Za-z0-9][^/\\\x00]*$")  # one path component: see check_games
# The flags the sweep gives every command itself (Run.command): neither --extra-args nor an experiment's flags may
# set them, or a run would not be the one its directory, log and status stand for.
SWEEP_FLAGS = ("--env-id", "--seed", "--total-timesteps", "--output-dir", "--run-name", "--checkpoint-every",
               "--resume", "--stop-at-step")
# Seeds are below this: envpool takes signed 32-bit seeds, and the scripts evaluate on seed + 10,000 (abs_utils).
SEED_LIMIT = 2 ** 31 - 10000


class SweepError(Exception):
    """Bad experiment definition or command line: printed as one line, exit code 2."""


def load_config(extra: str | Path | None = None) -> tuple[dict, dict]:
    """(game lists, experiments) of the built-in file, updated by the user's --config file. Every game list and
    experiment is checked here, where its file is known, so that a malformed entry is one line naming the file (the
    built-in one as such: the user did not give it)."""
    files = [(BUILTIN_CONFIG, f"the built-in experiments file {BUILTIN_CONFIG}")]
    files += [(Path(extra), f"--config {extra}")] if extra else []
    games, experiments, sources = {}, {}, {}
    for path, where in files:
        data = read_toml(path, where)
        unknown = sorted(set(data) - {"games", "experiments"})
        if unknown:  # e.g. [experiment.x]: a typo that would otherwise define nothing
            raise SweepError(f"{where}: unknown key(s) {unknown}; a file holds [games] and [experiments.NAME] tables")
        lists, exps = data.get("games", {}), data.get("experiments", {})
        for key, table, form in (("games", lists, "NAME = [env ids]"), ("experiments", exps, "[experiments.NAME]")):
            if not isinstance(table, dict):
                raise SweepError(f"{where}: [{key}] must be a table of {form} entries, got {table!r}")
        for name, value in lists.items():
            check_games(value, f"{where}: game list {name}")
        for name, exp in exps.items():
            check_name("experiment", name, where)
            check_experiment(name, exp, f"{where}: experiment {name}")
        games.update(lists)
        experiments.update(exps)
        sources.update(dict.fromkeys(exps, where))
    for name, exp in experiments.items():  # (a list may come from another file than the experiment naming it)
        if isinstance(exp["games"], str) and exp["games"] not in games:
            raise SweepError(f"{sources[name]}: experiment {name}: games {exp['games']!r} names no [games] list; "
                             f"lists: {', '.join(games)}")
    return games, experiments


def read_toml(path: Path, where: str) -> dict:
    """The TOML file's tables; a file that cannot be read, decoded or parsed is one line naming `where`."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise SweepError(f"{where}: cannot be read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:  # tomllib decodes the whole file first
        raise SweepError(f"{where}: is not UTF-8 text (byte {e.start}: {e.reason}), as a TOML file must be") from e
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{where}: is not valid TOML: {e}") from e
    except RecursionError as e:  # arrays or inline tables nested thousands deep
        raise SweepError(f"{where}: is nested too deeply to read") from e


def check_name(kind: str, name, where: str) -> str:
    """An experiment's or a label's name (kind), which names a directory: one path component of letters, digits,
    '.', '_', '+' and '-', a letter or digit first, at most NAME_BYTES bytes (SweepError otherwise), so that no name
    puts runs, checkpoints or logs outside the sweep's root."""
    if not (isinstance(name, str) and NAME_RE.match(name) and len(name.encode()) <= NAME_BYTES):
        raise SweepError(f"{where}: {kind} name {name!r} is not one path component (letters, digits, '.', '_', '+', "
                         f"'-'; a letter or digit first; at most {NAME_BYTES} bytes)")
    return name


def sweep_flag(tokens) -> str | None:
    """The first of tokens that sets a flag the sweep sets itself (SWEEP_FLAGS), in any spelling the scripts' parser
    (tyro) takes: `--run-name x`, `--run-name=x`, `--run_name x`; None when there is none."""
    for token in tokens:
        if token.startswith("--") and token.split("=", 1)[0].replace("_", "-") in SWEEP_FLAGS:
            return token
    return None


def check_flags(tokens, where: str) -> tuple[str, ...]:
    """tokens, unless one sets a flag the sweep sets itself (SweepError naming it)."""
    token = sweep_flag(tokens)
    if token is not None:
        raise SweepError(f"{where}: {token.split('=', 1)[0]} is set by the sweep itself for every run ("
                         f"{', '.join(SWEEP_FLAGS)}); use the sweep's --games, --seeds, --scale, --checkpoint-every "
                         "or --root instead")
    return tuple(tokens)


def parse_flags(value, where: str) -> tuple[str, ...]:
    """An experiment's or a label's flags, a string (split as a shell would) or a list of strings, checked by
    check_flags."""
    if isinstance(value, str):
        try:
            return check_flags(shlex.split(value), where)
        except ValueError as e:  # an unclosed quote
            raise SweepError(f"{where}: flags {value!r}: {e}") from e
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return check_flags(value, where)
    raise SweepError(f"{where}: flags must be a string or a list of strings, got {value!r}")


def check_seeds(seeds, where: str) -> list[int]:
    """Seeds as integers in [0, SEED_LIMIT), each once (SweepError otherwise)."""
    if not isinstance(seeds, list) or not seeds:
        raise SweepError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    out = []
    for seed in seeds:
        if not is_int(seed) or not 0 <= seed < SEED_LIMIT:
            raise SweepError(f"{where}: seed {seed!r} is not an integer in [0, 2^31 - 10000 = {SEED_LIMIT})")
        if seed in out:
            raise SweepError(f"{where}: seed {seed} is given twice")
        out.append(seed)
    return out


def check_games(games, where: str) -> list[str]:
    """Env ids, each once and each one path component (SweepError otherwise): a game names its runs' directory
    and log, <game>__<seed>, so a '/' in it would put them outside the sweep's root."""
    if not isinstance(games, list) or not games:
        raise SweepError(f"{where} must be a non-empty list of env ids, got {games!r}")
    for i, game in enumerate(games):
        if not (isinstance(game, str) and GAME_RE.match(game) and len(os.fsencode(game)) <= 200):
            raise SweepError(f"{where}: game {game!r} is not an env id that is one path component (a string of at "
                             "most 200 bytes that starts with a letter or digit and has no '/' or '\\')")
        if game in games[:i]:  # two runs in one directory
            raise SweepError(f"{where}: {game} is given twice")
    return games


def _check_int(exp: dict, key: str, low: int, where: str, high: int | None = None) -> None:
    value = exp.get(key)
    if value is not None and not (is_int(value) and low <= value and (high is None or value <= high)):
        domain = f">= {low}" if high is None else f"in [{low}, total_timesteps = {high}]"
        raise SweepError(f"{where}: {key} {value!r} is not an integer {domain}")


def check_experiment(name: str, exp, where: str) -> None:
    """One experiment's keys in their types and domains (SweepError naming `where`, the key and what it takes).
    The name of a [games] list and the command line's selections are checked by load_config and expand."""
    if not isinstance(exp, dict):
        raise SweepError(f"{where}: must be a table [experiments.{name}] with the keys of "
                         f"reproduce/experiments.toml's header, got {exp!r}")
    unknown = set(exp) - EXPERIMENT_KEYS
    missing = {"script", "games", "seeds", "total_timesteps", "labels"} - set(exp)
    if unknown or missing:
        raise SweepError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    for key in ("description", "script", "env_suffix", "benchmark", "reference"):
        if key in exp and not (isinstance(exp[key], str) and (exp[key] or key == "env_suffix")):
            raise SweepError(f"{where}: {key} must be a non-empty string, got {exp[key]!r}")
    if not isinstance(exp["games"], (str, list)):
        raise SweepError(f"{where}: games must be a non-empty list of env ids, or the name of a [games] list, "
                         f"got {exp['games']!r}")
    if isinstance(exp["games"], list):
        check_games(exp["games"], f"{where}: games")
    check_seeds(exp["seeds"], where)
    _check_int(exp, "total_timesteps", 1, where)
    _check_int(exp, "checkpoint_every", 0, where)
    _check_int(exp, "stop_at_step", 1, where, exp["total_timesteps"])
    parse_flags(exp.get("flags", ""), where)
    labels = exp["labels"]
    if not isinstance(labels, dict) or not labels:
        raise SweepError(f"{where}: labels must be a non-empty table [experiments.{name}.labels] of "
                         f"LABEL = \"flags\" or LABEL = {{ script = \"...\", flags = \"...\" }}, got {labels!r}")
    for label, spec in labels.items():
        check_name("label", label, where)
        if isinstance(spec, dict):
            if set(spec) - {"script", "flags"} or not isinstance(spec.get("script", "x"), str) \
                    or not spec.get("script", "x"):
                raise SweepError(f"{where}, label {label}: only 'script' (a non-empty string) and 'flags' allowed, "
                                 f"got {spec!r}")
            spec = spec.get("flags", "")
        parse_flags(spec, f"{where}, label {label}")
    reference_and_comparisons(name, exp, where)


def reference_and_comparisons(name: str, exp: dict, where: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The experiment's reference label (default: its first) and its comparisons, a list of [A, B] label pairs
    (A against the baseline B; default: the reference against every other label)."""
    where = where or f"experiment {name}"
    labels = list(exp["labels"])
    ref = exp.get("reference", labels[0])
    if ref not in labels:
        raise SweepError(f"{where}: reference {ref!r} is not one of its labels {labels}")
    pairs = exp.get("comparisons")
    if pairs is None:
        return ref, reference_pairs(ref, labels)
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and all(x in labels for x in p)
                                              for p in pairs):
        raise SweepError(f"{where}: comparisons must be a list of [label, label] pairs of {labels}")
    return ref, [tuple(p) for p in pairs]
