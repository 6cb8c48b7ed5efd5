"""Faults of reproduce/sweep.py: what the sweep reads and is given (command lines, experiment files and the names
in them), two sweeps of one grid at once, and a sweep killed with SIGKILL (docs/running.md#faults). Each fault ends
in one line and a documented exit code, and no run is started twice, lost or written outside --root. The runs are
those of the stand-in (tests/sweep_standin.py), which locks its run directory as the training scripts do; one test
checks that lock against a real script's."""
import errno
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:  # at collection, not first inside a test: importing submitit runs logging.config.dictConfig, which closes every
    # logging handler, and inside a capsys test that closes absl's (imported through rliable by the report tests) on
    # pytest's own capture stream, failing every later test of the process
    import submitit  # noqa: F401
except ImportError:  # (its tests skip)
    pass

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import execution  # noqa: E402
from reproduce import experiment_file  # noqa: E402
from reproduce import experiments  # noqa: E402
from reproduce import sweep  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402
from sweep_standin import make_tiny, starts, sweep_cli  # noqa: E402

SWEEP = tool("sweep")
# The summaries of the two sweeps of one grid (the first is docs/running.md#faults's example)
FIRST_SUMMARY = "2 of 4 runs finished, 0 failed, 2 running elsewhere, 0 interrupted, 0 not started"
SECOND_SUMMARY = "4 of 4 runs finished, 0 failed, 0 running elsewhere, 0 interrupted, 0 not started"


@pytest.fixture
def tiny(tmp_path):
    """A tiny experiment (two labels, one game, two seeds) on the stand-in, in its own TOML."""
    return make_tiny(tmp_path)


def faults_section() -> str:
    text = (ROOT / "docs" / "running.md").read_text()
    return text.split("\n## Faults\n")[1].split("\n## ")[0]


DOCS_ELSEWHERE = next(line.strip() for line in faults_section().splitlines() if "] running elsewhere " in line)


def builtin(name, **kw):
    games, exps = experiment_file.load_config()
    return experiments.expand(name, exps, games, "/r", experiments.Selection(**kw))


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def has(path: Path, text: str, count: int = 1) -> bool:
    return path.exists() and path.read_text().count(text) >= count


def pids(log: Path) -> list[int]:
    """The stand-in's pid of every attempt logged."""
    return [int(p) for p in re.findall(r"^training \S+ \d+ pid (\d+)$", log.read_text(), re.M)]


def attempts(log: Path) -> list[str]:
    """A run's log as the sweep wrote it: "start", "source" and "exit N" for its own lines, "script" for a run of
    the script's lines."""
    kinds = []
    for line in log.read_text().splitlines():
        m = experiments.EXIT.match(line)
        kind = ("start" if experiments.START.match(line) else f"exit {m.group(1)}" if m
                else "source" if line.startswith("[sweep] source: ") else line if line.startswith("[sweep]")
                else "script" if line else None)
        if kind and not (kind == "script" and kinds[-1:] == ["script"]):
            kinds.append(kind)
    return kinds


def row(status_out: str, label: str) -> list[int]:
    """A label's counts in `status`: done running interrupted failed missing queued other-length."""
    m = re.search(rf"^{label}\s+Pong-v5((?:\s+\d+){{7}})$", status_out, re.M)
    assert m, status_out
    return [int(x) for x in m.group(1).split()]


# ----------------------------------------------------------------------------- refused command lines
def refused(argv, capsys) -> str:
    """The one line main() writes to stderr for a refused command line (exit 2); nothing runs or is printed."""
    assert sweep.main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith("error: "), out
    return out.err


# Every flag Run.command sets, in the spellings the scripts' parser (tyro) takes.
SET_BY_THE_SWEEP = ("--env-id", "--seed", "--total-timesteps", "--output-dir", "--run-name", "--checkpoint-every",
                    "--resume")
SPELLINGS = [(flag, spelling) for flag in SET_BY_THE_SWEEP
             for spelling in dict.fromkeys(((flag, "x"), (f"{flag}=x",), ("--" + flag[2:].replace("-", "_"), "x")))]


@pytest.mark.parametrize("flag,tokens", SPELLINGS, ids=[" ".join(t) for _, t in SPELLINGS])
def test_extra_args_that_set_what_the_sweep_sets_are_refused(tiny, capsys, flag, tokens):
    opts, exp_dir = tiny
    err = refused(["run", "tiny", *opts, "--dry-run", "--extra-args", " ".join(("--no-cuda", *tokens))], capsys)
    assert err.startswith(f"error: --extra-args: {tokens[0].split('=')[0]} is set by the sweep itself"), err
    assert not exp_dir.exists()


def test_extra_args_refused_on_the_command_line_and_in_an_experiment(tiny, tmp_path, capsys):
    opts, exp_dir = tiny
    out = sweep_cli("run", "tiny", *opts, "--extra-args=--run_name=mine --no-cuda")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error: --extra-args: --run_name is set by the sweep itself") and not exp_dir.exists()
    # the same flags are what a run's --extra-args may not repeat; others pass through
    assert sweep.main(["run", "tiny", *opts, "--dry-run", "--seeds", "1", "--extra-args", "--seedling 3"]) == 0
    assert capsys.readouterr().out.count("--seedling 3") == 2
    assert "No closing quotation" in refused(["run", "tiny", *opts, "--dry-run", "--extra-args", '"--no-cuda'], capsys)
    config = tmp_path / "bad.toml"
    config.write_text('[experiments.bad]\nscript = "x.py"\ngames = ["Pong-v5"]\nseeds = [1]\ntotal_timesteps = 10\n'
                      '[experiments.bad.labels]\nA = "--lr 1"\nB = "--seed 7"\n')
    err = refused(["run", "bad", "--config", str(config), "--root", str(tmp_path / "r"), "--dry-run"], capsys)
    assert err.startswith(f"error: --config {config}: experiment bad, label B: --seed is set by the sweep"), err
    with pytest.raises(experiment_file.SweepError, match="--extra-args: --resume is set by the sweep itself"):
        builtin("mujoco", extra_args=["--resume=/tmp/c.pt"])


BAD_NUMBERS = [
    (["--scale", "inf"], "--scale inf: must be a finite number > 0"),
    (["--scale", "nan"], "--scale nan: must be a finite number > 0"),
    (["--scale", "0"], "--scale 0.0: must be a finite number > 0"),
    (["--scale", "-1"], "--scale -1.0: must be a finite number > 0"),
    (["--scale", "1e300"], "total timesteps is more than a 64-bit step counter holds"),
    (["--seeds", "-1"], "--seeds: seed -1 is not an integer in [0, 2^31 - 10000 = 2147473648)"),
    (["--seeds", "1", "2147473648"], "--seeds: seed 2147473648 is not an integer in [0, 2^31 - 10000"),
    (["--seeds", "1", "1"], "--seeds: seed 1 is given twice"),
    (["--seeds", "x"], "argument --seeds: invalid int value: 'x'"),
    (["--games", "Pong", "Pong-v5"], "--games: Pong-v5 is given twice"),
    (["--workers", "0"], "--workers 0: must be at least 1"),
    (["--checkpoint-every", "-1"], "--checkpoint-every -1: must be at least 0"),
    (["--gpus", "0,,1"], "--gpus '0,,1': must be distinct, comma-separated GPU ids"),
    (["--gpus", "0,0"], "--gpus '0,0': must be distinct"),
    (["--gpus-per-job", "-1"], "--gpus-per-job -1: must be at least 0"),
    (["--cpus-per-job", "0"], "--cpus-per-job 0: must be at least 1"),
    (["--time-min", "0"], "--time-min 0: must be at least 1"),
    (["--mem-gb", "0"], "--mem-gb 0.0: must be a finite number > 0"),
    (["--mem-gb", "inf"], "--mem-gb inf: must be a finite number > 0"),
    (["--signal-delay-s", "-1"], "--signal-delay-s -1: must be at least 0"),
    (["--time-min", "2", "--signal-delay-s", "120"], "--signal-delay-s 120: must be shorter than the time limit"),
    (["--max-requeues", "-1"], "--max-requeues -1: must be at least 0"),
    (["--slurm-arg", "=x"], "--slurm-arg takes KEY=VALUE"),
]


@pytest.mark.parametrize("extra,message", BAD_NUMBERS, ids=[" ".join(b[0]) for b in BAD_NUMBERS])
def test_numbers_out_of_their_domain_are_refused(tiny, capsys, extra, message):
    opts, exp_dir = tiny
    argv = ["run", "tiny", *opts, "--dry-run", *extra]
    if extra[0] == "--seeds" and extra[1] == "x":  # argparse's own error, one line too
        with pytest.raises(SystemExit) as e:
            sweep.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and message in err, err
        return
    assert message in refused(argv, capsys)
    assert not exp_dir.exists()


def test_numbers_at_the_edge_of_their_domain_are_accepted_and_status_and_report_check_them_too(tiny, capsys):
    opts, _ = tiny
    assert sweep.main(["run", "tiny", *opts, "--dry-run", "--seeds", "0", str(2 ** 31 - 10001), "--workers", "1",
                       "--checkpoint-every", "0", "--gpus-per-job", "0", "--max-requeues", "0", "--signal-delay-s",
                       "0", "--time-min", "1", "--mem-gb", "0.5", "--scale", "1e-9"]) == 0
    assert f"--seed {2 ** 31 - 10001} --total-timesteps 1 " in capsys.readouterr().out
    for command in ("status", "report"):
        assert "--seeds: seed -1 is not an integer" in refused([command, "tiny", *opts, "--seeds", "-1"], capsys)
        assert "--scale inf: must be a finite number > 0" in refused([command, "tiny", *opts, "--scale", "inf"],
                                                                     capsys)


def test_refused_numbers_on_the_real_command_line_are_one_line(tiny):
    opts, exp_dir = tiny
    for extra in (["--scale", "inf"], ["--seeds", "-1"], ["--workers", "0"], ["--seeds", "x"]):
        out = sweep_cli("run", "tiny", *opts, *extra)
        assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr and extra[0] in out.stderr
    assert not exp_dir.exists()


def test_seeds_and_steps_of_an_experiment_file_are_checked(tmp_path):
    games = {}
    base = {"script": "x.py", "games": ["Pong-v5"], "seeds": [1], "total_timesteps": 10, "labels": {"A": ""}}
    for change, message in (({"seeds": [1, -2]}, "experiment e: seed -2 is not an integer"),
                            ({"seeds": ["1"]}, "experiment e: seed '1' is not an integer"),
                            ({"total_timesteps": 0}, "experiment e: total_timesteps 0 is not an integer >= 1"),
                            ({"checkpoint_every": -1}, "experiment e: checkpoint_every -1 is not an integer >= 0"),
                            ({"games": ["Pong-v5", "Pong-v5"]}, "experiment e: games: Pong-v5 is given twice")):
        with pytest.raises(experiment_file.SweepError, match=re.escape(message)):
            experiments.expand("e", {"e": {**base, **change}}, games, tmp_path)
    assert [r.seed for r in experiments.expand("e", {"e": base}, games, tmp_path)] == [1]


# ----------------------------------------------------------------------------- malformed experiment files
GOOD = {"script": '"x.py"', "games": '["Pong-v5"]', "seeds": "[1]", "total_timesteps": "10", "labels": '{A = ""}'}
# (key, TOML value, what the message says): every key of an experiment in a shape or domain it does not take
MALFORMED = [
    ("labels", "{}", "labels must be a non-empty table"),
    ("labels", '["A"]', "labels must be a non-empty table"),
    ("labels", "5", "labels must be a non-empty table"),
    ("labels", '{A = 3}', "label A: flags must be a string or a list of strings"),
    ("labels", '{A = [1]}', "label A: flags must be a string or a list of strings"),
    ("labels", '{A = {script = 3}}', "label A: only 'script' (a non-empty string) and 'flags' allowed"),
    ("labels", '{A = {script = ""}}', "label A: only 'script' (a non-empty string) and 'flags' allowed"),
    ("labels", '{A = {script = "x.py", seed = 1}}', "label A: only 'script'"),
    ("labels", '{".." = ""}', "label name '..' is not one path component"),
    ("labels", '{"a/b" = ""}', "label name 'a/b' is not one path component"),
    ("labels", f'{{"{"x" * 201}" = ""}}', f"label name '{'x' * 201}' is not one path component"),
    ("games", "3", "games must be a non-empty list of env ids, or the name of a [games] list, got 3"),
    ("games", "[]", "games must be a non-empty list of env ids"),
    ("games", "[1, 2]", "games: game 1 is not an env id that is one path component"),
    ("games", "[true]", "games: game True is not an env id"),
    ("games", '["../../x"]', "games: game '../../x' is not an env id that is one path component"),
    ("games", '["a/b"]', "games: game 'a/b' is not an env id"),
    ("games", '[".."]', "games: game '..' is not an env id"),
    ("games", '[""]', "games: game '' is not an env id"),
    ("games", '["-v5"]', "games: game '-v5' is not an env id"),
    ("games", '["Pong-v5", "Pong-v5"]', "games: Pong-v5 is given twice"),
    ("games", '"nolist"', "games 'nolist' names no [games] list"),
    ("games", "{a = 1}", "games must be a non-empty list of env ids, or the name of a [games] list"),
    ("seeds", "3", "seeds must be a non-empty list of integers, got 3"),
    ("seeds", "[]", "seeds must be a non-empty list of integers"),
    ("seeds", '"1"', "seeds must be a non-empty list of integers, got '1'"),
    ("seeds", "[1.5]", "seed 1.5 is not an integer"),
    ("seeds", "[true]", "seed True is not an integer"),
    ("total_timesteps", '"10"', "total_timesteps '10' is not an integer >= 1"),
    ("total_timesteps", "1.5", "total_timesteps 1.5 is not an integer >= 1"),
    ("total_timesteps", "nan", "total_timesteps nan is not an integer >= 1"),
    ("checkpoint_every", "true", "checkpoint_every True is not an integer >= 0"),
    ("stop_at_step", "11", "stop_at_step 11 is not an integer in [1, total_timesteps = 10]"),
    ("stop_at_step", "0", "stop_at_step 0 is not an integer in [1, total_timesteps = 10]"),
    ("script", "3", "script must be a non-empty string, got 3"),
    ("script", '""', "script must be a non-empty string"),
    ("script", '["x.py"]', "script must be a non-empty string"),
    ("env_suffix", "3", "env_suffix must be a non-empty string, got 3"),
    ("benchmark", "[1]", "benchmark must be a non-empty string"),
    ("description", "{}", "description must be a non-empty string"),
    ("reference", "[1]", "reference must be a non-empty string"),
    ("reference", '"B"', "reference 'B' is not one of its labels"),
    ("comparisons", '[["A"]]', "comparisons must be a list of [label, label] pairs"),
    ("comparisons", "3", "comparisons must be a list of [label, label] pairs"),
    ("flags", "3", "flags must be a string or a list of strings"),
    ("flags", '"--x \\"y"', "No closing quotation"),
    ("flags", '"--seed 3"', "--seed is set by the sweep itself"),
    ("gamez", "[1]", "unknown keys ['gamez']"),
    ("script", None, "missing keys ['script']"),
]


@pytest.mark.parametrize("key,value,message", MALFORMED, ids=[f"{k}={v}" for k, v, _ in MALFORMED])
def test_a_malformed_experiment_is_one_line_naming_its_file_experiment_and_key(tmp_path, capsys, key, value, message):
    """Every command reads the file: each refuses it in one line that names the file, the experiment and the key,
    exit 2, before anything is created."""
    entries = {**GOOD, key: value} if value is not None else {k: v for k, v in GOOD.items() if k != key}
    config = tmp_path / "mine.toml"
    config.write_text("[experiments.e]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))
    for command in ("run", "status", "report"):
        err = refused([command, "e", "--config", str(config), "--root", str(tmp_path / "r")], capsys)
        assert err.startswith(f"error: --config {config}: experiment e") and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


MALFORMED_FILES = [
    ("experiments = 3", "[experiments] must be a table of [experiments.NAME] entries, got 3"),
    ("games = 3", "[games] must be a table of NAME = [env ids] entries, got 3"),
    ("[experiments]\ne = 3", "experiment e: must be a table [experiments.e]"),
    ("[experiments]\ne = [1]", "experiment e: must be a table [experiments.e]"),
    ("[games]\nfoo = 3", "game list foo must be a non-empty list of env ids, got 3"),
    ("[games]\nfoo = [1]", "game list foo: game 1 is not an env id"),
    ("[games]\nfoo = ['../x']", "game list foo: game '../x' is not an env id"),
    ("[experiment.e]\nscript = 'x.py'", "unknown key(s) ['experiment']"),
    ("[experiments.e\n", "Expected ']'"),
]


@pytest.mark.parametrize("text,message", MALFORMED_FILES, ids=[t for t, _ in MALFORMED_FILES])
def test_a_malformed_experiments_file_is_one_line_naming_it(tmp_path, capsys, text, message):
    config = tmp_path / "mine.toml"
    config.write_text(text)
    err = refused(["run", "e", "--config", str(config), "--root", str(tmp_path / "r"), "--dry-run"], capsys)
    assert err.startswith(f"error: --config {config}: ") and message in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("game", ["../../../x", "a/b", "..", "-x", ".hidden", "a\\b", "x" * 201])
def test_a_game_that_is_not_one_path_component_is_refused_before_anything_is_written(tmp_path, game):
    """A game names its runs' directory and log: a '/' in it would write them outside --root."""
    root = tmp_path / "deep" / "er" / "root"
    out = sweep_cli("run", "mujoco", f"--games={game}", "--seeds", "1", "--root", str(root))
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out
    assert out.stderr.startswith(f"error: --games: game {game!r} is not an env id that is one path component")
    assert list(tmp_path.rglob("*")) == []  # no log, no directory: neither under --root nor beside it


# ----------------------------------------------------------------------------- names that are paths
@pytest.mark.parametrize("name", ["../esc", "..", ".", "a/b", "-x", ".hidden", "a b", "x" * 201])
def test_an_experiment_name_that_is_not_one_path_component_is_refused_before_anything_is_written(tmp_path, name):
    """An experiment names the directory of its runs, checkpoints and logs (ROOT/EXPERIMENT/...): "../esc" would put
    them beside --root. Every command refuses it in one line naming the file, exit 2, and writes nothing."""
    (tmp_path / "noop.py").write_text("")
    config = tmp_path / "mine.toml"
    config.write_text(f'[experiments."{name}"]\nscript = "{tmp_path / "noop.py"}"\ngames = ["Hopper-v4"]\n'
                      'seeds = [1]\ntotal_timesteps = 10\nlabels = {A = ""}\n')
    root = tmp_path / "deep" / "root"
    for command in ("run", "status", "report"):
        out = sweep_cli(command, "--config", str(config), "--root", str(root), "--", name)
        assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out
        assert out.stderr.startswith(f"error: --config {config}: experiment name {name!r} is not one path component")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["mine.toml", "noop.py"]
    with pytest.raises(experiment_file.SweepError, match="experiment name .* is not one path component"):
        experiments.expand(name, {name: builtin_experiment()}, {}, root)


def builtin_experiment() -> dict:
    return experiment_file.load_config()[1]["mujoco"]


def test_a_config_that_cannot_be_read_decoded_or_parsed_is_one_line_naming_it(tmp_path, capsys):
    cases = [(b'[experiments.e]\ndescription = "caf\xe9"\n', "is not UTF-8 text (byte 34: invalid continuation byte)"),
             (b"\xff\xfe[\x00", "is not UTF-8 text (byte 0: invalid start byte)"),
             (b"a = " + b"[" * 100_000, "is nested too deeply to read"),
             (b"[experiments.e\n", "is not valid TOML: Expected ']'")]
    for i, (data, message) in enumerate(cases):
        config = tmp_path / f"c{i}.toml"
        config.write_bytes(data)
        err = refused(["status", "e", "--config", str(config), "--root", str(tmp_path / "r")], capsys)
        assert err.startswith(f"error: --config {config}: {message}"), err
    err = refused(["status", "e", "--config", str(tmp_path), "--root", str(tmp_path / "r")], capsys)
    assert err == f"error: --config {tmp_path}: cannot be read (Is a directory)\n"
    err = refused(["status", "e", "--config", str(tmp_path / "none.toml")], capsys)
    assert err == f"error: --config {tmp_path / 'none.toml'}: cannot be read (No such file or directory)\n"
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("text,message", [
    (b"[experiments.e\n", "is not valid TOML: Expected ']'"),
    (b"\xe9", "is not UTF-8 text"),
    (b'[experiments."../esc"]\n', "experiment name '../esc' is not one path component"),
    (b"[games]\nfoo = 3", "game list foo must be a non-empty list of env ids")])
def test_errors_of_the_builtin_experiments_file_name_it_as_such_not_a_flag(tmp_path, monkeypatch, capsys, text,
                                                                           message):
    """With no --config, a broken built-in file is the project's, not the user's: the line names that file."""
    broken = tmp_path / "experiments.toml"
    broken.write_bytes(text)
    monkeypatch.setattr(experiment_file, "BUILTIN_CONFIG", broken)
    err = refused(["status", "mujoco", "--root", str(tmp_path / "r")], capsys)
    assert err.startswith(f"error: the built-in experiments file {broken}: {message}") and "--config" not in err, err
    monkeypatch.setattr(experiment_file, "BUILTIN_CONFIG", tmp_path / "gone.toml")
    err = refused(["status", "mujoco", "--root", str(tmp_path / "r")], capsys)
    assert err == f"error: the built-in experiments file {tmp_path / 'gone.toml'}: cannot be read (No such file or " \
        "directory)\n"


# ----------------------------------------------------------------------------- two sweeps of one grid
def test_two_sweeps_of_one_grid_started_a_second_apart_share_it_without_a_failure(tiny, tmp_path):
    """The same command in two terminals. The first sweep runs seed 1 (both labels, two workers); the second, a
    second later, finds them running elsewhere (a sweep holds their claim) and runs seed 2; the first then finds
    seed 2 running elsewhere. Every run starts once, each log holds one attempt, written by the sweep that ran it;
    no run is reported failed, the counts are those of `status`, and the first sweep exits 75 (the rest of its
    runs are another process's), the second 0."""
    opts, exp_dir = tiny
    hold = tmp_path / "hold-{seed}"  # each run waits while hold-<its seed> exists
    for seed in (1, 2):
        Path(str(hold).format(seed=seed)).touch()
    logs = {(label, seed): exp_dir / label / "logs" / f"Pong-v5__{seed}.log" for label in "AB" for seed in (1, 2)}
    cmd = [*SWEEP, "run", "tiny", *opts, "--workers", "2", "--extra-args", f"--hold {hold}"]
    outs = [tmp_path / "first.out", tmp_path / "second.out"]
    with open(outs[0], "w") as out:
        first = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=tool_env())
    try:
        wait_for(lambda: all(has(logs[label, 1], "training") for label in "AB"), "the first sweep's seed 1")
        time.sleep(1)
        with open(outs[1], "w") as out:
            second = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=tool_env())
        wait_for(lambda: all(has(logs[label, 2], "training") for label in "AB"), "the second sweep's seed 2")
        wait_for(lambda: has(outs[1], "running elsewhere", 2), "the second sweep to leave seed 1")
        assert sorted(re.findall(r"running elsewhere (\w) Pong-v5__(\d) \(another process holds its lock",
                                 outs[1].read_text())) == [("A", "1"), ("B", "1")], outs[1].read_text()
        status = sweep_cli("status", "tiny", *opts).stdout
        assert row(status, "A") == row(status, "B") == [0, 2, 0, 0, 0, 0, 0], status  # running, not failed
        Path(str(hold).format(seed=1)).unlink()
        assert first.wait(timeout=60) == sweep.RUNNING_ELSEWHERE, outs[0].read_text()
        Path(str(hold).format(seed=2)).unlink()
        assert second.wait(timeout=60) == 0, outs[1].read_text()
    finally:
        for seed in (1, 2):
            Path(str(hold).format(seed=seed)).unlink(missing_ok=True)
    text = [o.read_text() for o in outs]
    assert "FAILED" not in text[0] + text[1], text
    assert sorted(re.findall(r"\] ok +(\w) Pong-v5__(\d)", text[0])) == [("A", "1"), ("B", "1")], text[0]
    assert sorted(re.findall(r"running elsewhere (\w) Pong-v5__(\d)", text[0])) == [("A", "2"), ("B", "2")]
    assert sorted(re.findall(r"\] ok +(\w) Pong-v5__(\d)", text[1])) == [("A", "2"), ("B", "2")], text[1]
    assert f"\n{FIRST_SUMMARY}\n" in text[0] and f"\n{SECOND_SUMMARY}\n" in text[1]
    elsewhere = re.search(r"^\[\d/4\] running elsewhere A Pong-v5__2 .*$", text[0], re.M).group(0)
    assert re.sub(r"\d+ s", "N s", elsewhere) == re.sub(r"\d+ s", "N s", DOCS_ELSEWHERE).replace("[3/4]", elsewhere[:5])
    for log in logs.values():  # one attempt each, its lines in order, no line of the other sweep
        assert attempts(log) == ["start", "source", "script", "exit 0"], log.read_text()
        assert len(pids(log)) == 1
    status = sweep_cli("status", "tiny", *opts).stdout
    assert row(status, "A") == row(status, "B") == [2, 0, 0, 0, 0, 0, 0], status


# ----------------------------------------------------------------------------- a sweep killed with SIGKILL
def start_and_kill(opts, exp_dir, hold: Path, out: Path, scripts_too: bool):
    """Start a sweep of A's seeds 1 to 3 on two workers, each run checkpointing once it starts and then waiting on
    its hold file; once seeds 1 and 2 have checkpointed, SIGKILL the sweep (and with scripts_too, their scripts as
    well: a node failure). Returns the command, the logs and the scripts' pids."""
    cmd = [*SWEEP, "run", "tiny", *opts, "--labels", "A", "--seeds", "1", "2", "3", "--workers", "2",
           "--checkpoint-every", "1", "--extra-args", f"--hold {hold}"]
    for seed in (1, 2, 3):
        Path(str(hold).format(seed=seed)).touch()
    logs = [exp_dir / "A" / "logs" / f"Pong-v5__{seed}.log" for seed in (1, 2, 3)]
    with open(out, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=tool_env())
    wait_for(lambda: all(has(log, "checkpoint written") for log in logs[:2]), "seeds 1 and 2 to checkpoint")
    scripts = [pids(log)[0] for log in logs[:2]]
    proc.kill()
    proc.wait(timeout=60)
    if scripts_too:
        for pid in scripts:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(execution.live(r) for r in runs_of(opts, [1, 2])), "the killed scripts' locks")
    return cmd, logs, scripts


def runs_of(opts, seeds):
    games, exps = experiment_file.load_config(opts[1])
    return experiments.expand("tiny", exps, games, opts[3], experiments.Selection(seeds=seeds, labels=["A"]))


def release(hold: Path, *seeds) -> None:
    for seed in seeds:
        Path(str(hold).format(seed=seed)).unlink(missing_ok=True)


def test_a_sweep_killed_with_its_scripts_then_the_same_command_resumes_each_run_once(tiny, tmp_path):
    """A node failure mid-grid: the sweep and its two scripts are killed with SIGKILL, leaving no exit line. `status`
    shows the two as interrupted (started, never ended, no process holds their locks) and the third as missing; the
    same command again resumes the two from their checkpoints and starts the third, once each, and counts each run
    once."""
    opts, exp_dir = tiny
    hold = tmp_path / "hold-{seed}"
    try:
        cmd, logs, _ = start_and_kill(opts, exp_dir, hold, tmp_path / "killed.out", scripts_too=True)
    finally:
        release(hold, 1, 2, 3)
    assert [attempts(log) for log in logs[:2]] == [["start", "source", "script"]] * 2 and not logs[2].exists()
    assert row(sweep_cli("status", "tiny", *opts, "--seeds", "1", "2", "3").stdout, "A") == [0, 0, 2, 0, 1, 0, 0]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=tool_env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tiny: 3 runs, 0 already done, 3 to run" in out.stdout
    assert "\n3 of 3 runs finished, 0 failed, 0 running elsewhere, 0 interrupted, 0 not started\n" in out.stdout
    for seed, log in zip((1, 2, 3), logs):
        result = json.loads((exp_dir / "A" / f"Pong-v5__{seed}" / "eval_results.json").read_text())
        if seed < 3:  # killed, then resumed from its checkpoint: two starts, one exit
            assert attempts(log) == ["start", "source", "script", "start", "source", "script", "exit 0"]
            assert result["resumed_from"] == str(exp_dir / "A" / f"Pong-v5__{seed}" / "checkpoint.pt")
        else:
            assert attempts(log) == ["start", "source", "script", "exit 0"] and result["resumed_from"] is None
    again = sweep_cli(*cmd[len(SWEEP):])
    assert again.returncode == 0 and "3 already done, 0 to run" in again.stdout, again.stdout


def test_a_sweep_killed_alone_leaves_its_scripts_running_and_the_same_command_leaves_them_to_them(tiny, tmp_path):
    """SIGKILL to the sweep alone: its scripts, in sessions of their own, go on and hold their locks. `status` shows
    them running; the same command again (and its dry run) leaves them alone as running elsewhere, writes nothing in
    their logs, runs the third run, and exits 75; once they end, every run is done once and a rerun starts none."""
    opts, exp_dir = tiny
    hold = tmp_path / "hold-{seed}"
    try:
        cmd, logs, scripts = start_and_kill(opts, exp_dir, hold, tmp_path / "killed.out", scripts_too=False)
        before = [log.read_text() for log in logs[:2]]
        assert row(sweep_cli("status", "tiny", *opts, "--seeds", "1", "2", "3").stdout, "A") == [0, 2, 0, 0, 1, 0, 0]
        dry = sweep_cli(*cmd[len(SWEEP):], "--dry-run")
        assert "# skipping 2 run(s) running elsewhere (a process holds their lock): A/Pong-v5__1, A/Pong-v5__2" \
            in dry.stdout and "; 2 running elsewhere" in dry.stdout, dry.stdout
        assert [line for line in dry.stdout.splitlines() if line.startswith("python")][0].count("--seed 3 ") == 1
        with open(tmp_path / "rerun.out", "w") as f:
            rerun = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=tool_env())
        wait_for(lambda: has(tmp_path / "rerun.out", "running elsewhere", 2) and has(logs[2], "training"),
                 "the rerun to leave seeds 1 and 2 and start seed 3")
        release(hold, 3)
        assert rerun.wait(timeout=60) == sweep.RUNNING_ELSEWHERE
        assert [log.read_text() for log in logs[:2]] == before  # not a line of the rerun in their logs
        release(hold, 1, 2)
        wait_for(lambda: all((exp_dir / "A" / f"Pong-v5__{s}" / "eval_results.json").exists() for s in (1, 2)),
                 "the first sweep's scripts to finish")
    finally:
        release(hold, 1, 2, 3)
    text = (tmp_path / "rerun.out").read_text()
    assert sorted(re.findall(r"running elsewhere A Pong-v5__(\d) \(another process holds its lock", text)) == ["1", "2"]
    assert "\n1 of 3 runs finished, 0 failed, 2 running elsewhere, 0 interrupted, 0 not started\n" in text, text
    for seed in (1, 2):  # run once, by the first sweep's script, to its end
        assert pids(logs[seed - 1]) == [scripts[seed - 1]] and starts(logs[seed - 1]) == 1
        result = json.loads((exp_dir / "A" / f"Pong-v5__{seed}" / "eval_results.json").read_text())
        assert result["resumed_from"] is None
    assert attempts(logs[2]) == ["start", "source", "script", "exit 0"]
    again = sweep_cli(*cmd[len(SWEEP):])
    assert again.returncode == 0 and "3 already done, 0 to run" in again.stdout, again.stdout
    assert row(sweep_cli("status", "tiny", *opts, "--seeds", "1", "2", "3").stdout, "A") == [3, 0, 0, 0, 0, 0, 0]


@pytest.mark.skipif(not (ROOT / "abs_pqn_atari.py").exists(), reason="abs_pqn_atari.py not written yet")
def test_the_lock_the_sweep_probes_is_the_one_the_training_scripts_take(tmp_path):
    """A process holding <run>/.lock as the sweep probes it (a shared flock) keeps a real script off the run (exit 2):
    the script's lock is an exclusive flock of that file, which fails the probe. The sweep leaves a run whose lock is
    held so alone: running elsewhere, exit 75, no log."""
    pytest.importorskip("envpool")
    root = tmp_path / "sweeps"
    label_dir = root / "atari10-batches" / "ABS"
    (label_dir / "Pong-v5__1").mkdir(parents=True)
    grid = ["atari10-batches", "--games", "Pong", "--seeds", "1", "--labels", "ABS", "--scale", "0.0000016",
            "--root", str(root)]
    with open(label_dir / "Pong-v5__1" / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # the probe's lock: a shared flock
        script = subprocess.run([sys.executable, str(ROOT / "abs_pqn_atari.py"), "--env-id", "Pong-v5", "--no-cuda",
                                 "--output-dir", str(label_dir), "--run-name", "Pong-v5__1"],
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert script.returncode == 2 and script.stderr.strip() == (
            f"error: --run-name: {label_dir / 'Pong-v5__1'} is in use by another live run"), script.stderr
        # So the script's lock is an exclusive flock of that file, which fails the probe while the script lives.
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a live script holds it
        out = sweep_cli("run", *grid)
        assert out.returncode == sweep.RUNNING_ELSEWHERE, out.stdout + out.stderr
        assert "[1/1] running elsewhere ABS Pong-v5__1 (another process holds its lock" in out.stdout
        assert "0 of 1 runs finished, 0 failed, 1 running elsewhere, 0 interrupted, 0 not started" in out.stdout
        assert not (label_dir / "logs" / "Pong-v5__1.log").exists()
        assert re.search(r"ABS\s+Pong-v5\s+0\s+1\s+0\s+0\s+0", sweep_cli("status", *grid).stdout)
    assert re.search(r"ABS\s+Pong-v5\s+0\s+0\s+0\s+0\s+1", sweep_cli("status", *grid).stdout)  # missing once freed


def test_a_slurm_job_whose_run_is_running_elsewhere_leaves_it_alone(tiny, capsys):
    """A second submission of a run (a resubmitted array) whose run another process owns: the job says so on its
    stderr and ends without starting the script or writing the run's log."""
    pytest.importorskip("submitit")
    from reproduce import slurm

    opts, exp_dir = tiny
    run = runs_of(opts, [1])[0]
    claim = execution.claim(run)  # as the sweep running it holds it
    try:
        assert slurm.RunJob(run)() == 0
        assert execution.claim(run) is None  # (this process's own claim excludes a second one too)
    finally:
        claim.close()
    assert "A Pong-v5__1: running elsewhere (another process holds its lock); this job leaves it to that " \
        "process" in capsys.readouterr().err
    assert not run.log.exists() and not run.dir.exists()


def test_the_faults_section_of_the_docs_says_what_the_sweep_does(tmp_path, monkeypatch):
    """docs/running.md#faults quotes the sweep's summary, its exit codes, the name rule and two refusals: the same as
    the code prints and returns (the two sweeps' test checks its running-elsewhere line)."""
    section = faults_section()
    assert f"\n    {FIRST_SUMMARY}\n" in section
    codes = dict(re.findall(r"^\| (\d+(?: \+ N)?) \| (.+) \|$", section, re.M))
    assert list(codes) == ["0", "1", "2", str(sweep.WRITE_FAILED), str(sweep.RUNNING_ELSEWHERE), "128 + N"]
    assert codes["4"].startswith("the file system refused a write of the sweep's own")
    assert codes["75"].startswith("no run failed, and each run it did not finish is running elsewhere")
    assert section.count(f"at most {experiment_file.NAME_BYTES}\n  bytes") == 1
    monkeypatch.chdir(tmp_path)
    for data in (b'[experiments."../esc"]\n', b'[experiments.e]\ndescription = "caf\xe9"\n'):
        (tmp_path / "mine.toml").write_bytes(data)
        with pytest.raises(experiment_file.SweepError) as e:
            experiment_file.load_config("mine.toml")
        assert f"error: {e.value}" in section, e.value


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on device (a full disk, or no free inodes"),
                                          (errno.EROFS, "read-only file system"),
                                          (errno.EDQUOT, "disk quota exceeded"),
                                          (errno.EACCES, "permission denied (read-only to this user")])
def test_a_write_the_file_system_refuses_under_the_sweep_is_one_line_and_exit_4(tiny, monkeypatch, capsys, code,
                                                                                 words):
    """The sweep writes each run's log before and after its script: a refused write there (injected into the log's
    first line) ends the sweep with one line naming the cause, exit 4, and no traceback."""
    opts, exp_dir = tiny

    def refused():
        raise OSError(code, os.strerror(code), str(exp_dir / "A" / "logs" / "Pong-v5__1.log"))
    monkeypatch.setattr(execution, "now", refused)
    assert sweep.main(["run", "tiny", *opts, "--workers", "1"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the sweep could not write ") and words in err[0], err
    assert "run the same command again" in err[0]
