"""reproduce/train_alike.py: commits that train alike are reported "same" (two commits made here, in a repository of
the current abs_pqn_atari.py and abs_utils, one only re-commented), the first differing number of two runs is
named, and bad input is one line, exit 2."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import train_alike  # noqa: E402
from reproduce_cli import tool, tool_env  # noqa: E402

TOOL = tool("train_alike")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def commits(tmp_path_factory):
    """(repo, {name: commit}): base; comment (a comment added: trains the same); broken (the script exits 5 at once);
    noscript (no abs_pqn_atari.py)."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    script = (ROOT / "abs_pqn_atari.py").read_text()
    shutil.copytree(ROOT / "abs_utils", repo / "abs_utils", ignore=shutil.ignore_patterns("__pycache__"))
    made = {}
    for name, text in (("base", script),
                       ("comment", script.replace("import copy\n", "import copy  # a comment changes nothing\n", 1)),
                       ("broken", "import sys\nsys.exit(5)\n"), ("noscript", None)):
        if text is None:
            (repo / "abs_pqn_atari.py").unlink()
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", name)
            made[name] = git(repo, "rev-parse", "--short", "HEAD")
            continue
        assert text != script or name == "base"
        (repo / "abs_pqn_atari.py").write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", name)
        made[name] = git(repo, "rev-parse", "--short", "HEAD")
    return repo, made


def test_a_comment_trains_alike_and_a_commit_trains_as_itself(commits, tmp_path):
    """Commits that differ in a comment, and a commit given twice: every logged number, evaluation game and the final
    checkpoint the same, exit 0. A relative --out is the caller's, though the runs start in each commit's tree."""
    repo, c = commits
    res = subprocess.run([*TOOL, c["base"], c["comment"], c["base"], "--cases", "abs", "abs", "--steps", "512",
                          "--repo", str(repo), "--out", "runs"], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env=tool_env())
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("| ") and "same" in ln]
    assert [r.split(" | ")[0] for r in rows] == [f"| {c['comment']}", f"| {c['base']}"]  # one column: abs once
    assert all(r.endswith(" points, 4 games, checkpoint) |") and r.count("same (") == 1 for r in rows), rows
    kept = sorted(p.relative_to(tmp_path / "runs").parts[0] for p in (tmp_path / "runs").glob("*/runs/abs"))
    assert [k.split("-")[0] for k in kept] == ["1", "2", "3"]  # by position, each run kept


def test_a_failed_run_is_exit_3_with_its_log_kept(commits, tmp_path):
    repo, c = commits
    res = subprocess.run([*TOOL, c["broken"], c["base"], "--cases", "vanilla", "--repo", str(repo)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=tool_env())
    assert res.returncode == 3 and "exited 5 (log: " in res.stderr, res.stderr
    log = Path(res.stderr.split("(log: ")[1].split(")")[0])
    assert log.is_file() and log.name == "vanilla.log"  # kept for reading, with the temporary directory
    shutil.rmtree(log.parents[2])


def test_sigterm_stops_the_run_in_progress_and_removes_the_temporary_copies(commits, tmp_path):
    """A SIGTERM while a run trains: exit 143, the training subprocess killed, and nothing left in the temporary
    directory (each commit's copy is tens of MB)."""
    repo, c = commits
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen([*TOOL, c["base"], c["comment"], "--cases", "vanilla", "--steps", "100000", "--repo",
                          str(repo)], stdout=subprocess.PIPE, text=True,
                         env=tool_env(dict(os.environ, TMPDIR=str(tmp))))
    assert p.stdout.readline().startswith("training vanilla at ")
    log = next(tmp.glob("train_alike_*/1-*/runs")) / "vanilla.log"
    deadline = time.time() + 120
    while "step" not in (log.read_text() if log.exists() else "") and time.time() < deadline:  # training has begun
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    assert list(tmp.glob("train_alike_*")) == []  # (torch keeps its own cache beside it)
    ps = subprocess.run(["pgrep", "-f", str(tmp)], capture_output=True, text=True)
    assert ps.stdout == "", ps.stdout  # no training process left behind


def write_run(run_dir: Path, losses, returns, tags=("losses/td_loss",)):
    """A run directory as the scripts leave it: its scalars (one value per step 100, 200, ...) and its evaluation."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(run_dir))
    for i, x in enumerate(losses):
        for tag in tags:
            w.add_scalar(tag, x, 100 * (i + 1))
        w.add_scalar("charts/SPS", 1000 + i, 100 * (i + 1))  # wall clock: never compared
    w.close()
    result = {"global_step": 100 * len(losses), "eval": {"returns": returns, "lengths": [10] * len(returns)}}
    (run_dir / "eval_results.json").write_text(json.dumps(result))


def test_compare_names_the_first_difference(tmp_path):
    """What a commit that trains differently leaves: another value, other steps, another tag or other games."""
    def run(name, losses=(0.5, 0.25, 0.125), returns=(1.0, 2.0), **kw):
        write_run(tmp_path / name, list(losses), list(returns), **kw)
        return tmp_path / name
    base = run("base")
    assert train_alike.compare(base, run("same")) == "same (1 tags, 3 points, 2 games)"  # SPS differs, not counted
    assert train_alike.compare(base, run("value", losses=(0.5, 0.3, 0.125))) == \
        "differs: losses/td_loss at step 200: 0.25 vs 0.30000001192092896"
    assert train_alike.compare(base, run("steps", losses=(0.5, 0.25))).startswith(
        "differs: losses/td_loss logged at other steps (3 vs 2 points)")
    assert train_alike.compare(base, run("tag", tags=("losses/td_loss", "losses/q_values"))) == \
        "differs: tags only in one run: losses/q_values"
    assert train_alike.compare(base, run("games", returns=(1.0, 3.0))) == \
        "differs: evaluation returns [1.0, 2.0] vs [1.0, 3.0]"


@pytest.mark.parametrize("args, message", [
    (["HEAD"], "give two or more commits"),
    (["HEAD~1", "no-such-commit-here"], "commits: 'no-such-commit-here' is not a commit of"),
    (["HEAD~1", "HEAD"], "commits: 'HEAD' has no abs_pqn_atari.py"),  # the fixture's last commit removed it
    (["HEAD~1", "HEAD~1", "--steps", "100"], "--steps must be at least 512, got 100"),
    (["HEAD~1", "HEAD~1", "--cases", "fast"], "argument --cases: invalid choice: 'fast'"),
    (["HEAD", "HEAD", "--repo", "/"], "--repo / is not a git repository"),
])
def test_bad_input_is_one_line_and_exit_2(commits, args, message, tmp_path):
    repo, _ = commits
    res = subprocess.run([*TOOL, *args, "--out", str(tmp_path / "new"),
                          *(["--repo", str(repo)] if "--repo" not in args else [])],
                         capture_output=True, text=True, timeout=60, env=tool_env())
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert not (tmp_path / "new").exists()


def test_an_existing_out_is_refused(commits, tmp_path):
    res = subprocess.run([*TOOL, "HEAD~1", "HEAD~2", "--repo", str(commits[0]), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=tool_env())
    assert res.returncode == 2 and f"--out {tmp_path} exists" in res.stderr


def test_checkpoint_difference_names_the_first_place():
    """Two checkpoints are the same but for their flags and timings; otherwise the first differing entry is named."""
    def checkpoint(**changes):
        c = {"global_step": 512, "q_network": {"w": torch.arange(4.0)}, "rng": {"python": (3, (1, 2), None)},
             "scheduler": {"L": 16.25, "window": [0.5, float("nan")]}, "args": {"output_dir": "a"},
             "perf": {"env": 1.0}, "train_seconds": 3.0}
        c.update(changes)
        return c
    ca = checkpoint()
    assert train_alike.checkpoint_difference(ca, checkpoint(args={"output_dir": "b", "eval_protocol": "quota"},
                                                            perf={"env": 2.0}, train_seconds=4.0)) is None
    assert train_alike.checkpoint_difference(ca, checkpoint(q_network={"w": torch.tensor([0.0, 1, 2, 3.5])})) \
        == "/q_network/w"
    other_dtype = checkpoint(q_network={"w": torch.arange(4)})  # the same numbers as integers
    assert train_alike.checkpoint_difference(ca, other_dtype) == "/q_network/w"
    assert train_alike.checkpoint_difference(ca, checkpoint(scheduler={"L": 16.25, "window": [0.5, 0.1]})) \
        == "/scheduler/window[1]"
    assert train_alike.checkpoint_difference(ca, checkpoint(rng={"python": (3, (1, 3), None)})) == "/rng/python[1][1]"
    assert train_alike.checkpoint_difference(ca, checkpoint(iteration=7)) == "top level: keys only in one: iteration"


@pytest.mark.parametrize("script", list(train_alike.SETUPS))
def test_every_scripts_setup_is_a_valid_run_of_it(script, tmp_path):
    """Each case's flags are accepted by the script as it is now (an adaptive run, a fixed one): a commit that
    refuses them cannot be compared, and this one must not be such a commit."""
    from scripts import SCRIPTS
    assert set(train_alike.SETUPS) == set(SCRIPTS)
    module = SCRIPTS[script].module()
    for case in train_alike.CASES:
        flags = [*train_alike.common_flags(script, 512), *train_alike.case_flags(script, case)]
        args, checkpoint = module.parse_args([*flags, "--output-dir", str(tmp_path), "--run-name", case])
        assert checkpoint is None and args.adapt == (case != "vanilla") and args.total_timesteps == 4 * 512
    assert not list(tmp_path.iterdir())  # parsing creates nothing
