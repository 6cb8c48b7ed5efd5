"""reproduce/train_alike.py: commits that train alike are reported "same" (two commits made here, in a repository of
the current abs_pqn_atari.py and abs_utils.py, one only re-commented), the first differing number of two runs is
named, and bad input is one line, exit 2."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "reproduce" / "train_alike.py"
sys.path.insert(0, str(ROOT / "reproduce"))
import train_alike  # noqa: E402


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def commits(tmp_path_factory):
    """(repo, {name: commit}): base, and comment (a comment added: trains the same)."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    script = (ROOT / "abs_pqn_atari.py").read_text()
    (repo / "abs_utils.py").write_text((ROOT / "abs_utils.py").read_text())
    made = {}
    for name, text in (("base", script),
                       ("comment", script.replace("import copy\n", "import copy  # a comment changes nothing\n", 1))):
        assert text != script or name == "base"
        (repo / "abs_pqn_atari.py").write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", name)
        made[name] = git(repo, "rev-parse", "--short", "HEAD")
    return repo, made


def test_a_comment_trains_alike(commits, tmp_path):
    """Two commits that differ in a comment: every logged number and evaluation game the same, exit 0."""
    repo, c = commits
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, str(TOOL), c["base"], c["comment"], "--cases", "abs", "--steps", "512",
                          "--repo", str(repo), "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"| {c['comment']} |"))
    assert row.startswith(f"| {c['comment']} | same (") and row.endswith(" points, 4 games, checkpoint) |"), row
    for commit in (c["base"], c["comment"]):  # --out keeps both runs
        assert (out / commit / "runs" / "abs" / "eval_results.json").is_file()


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
    (["HEAD", "no-such-commit-here"], "commits: 'no-such-commit-here' is not a commit of"),
    (["HEAD", "HEAD", "--steps", "100"], "--steps must be at least 512, got 100"),
    (["HEAD", "HEAD", "--cases", "fast"], "argument --cases: invalid choice: 'fast'"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    res = subprocess.run([sys.executable, str(TOOL), *args, "--repo", str(ROOT), "--out", str(tmp_path / "new")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert not (tmp_path / "new").exists()


def test_an_existing_out_is_refused(tmp_path):
    res = subprocess.run([sys.executable, str(TOOL), "HEAD", "HEAD", "--repo", str(ROOT), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
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
    assert train_alike.checkpoint_difference(ca, checkpoint(q_network={"w": torch.arange(4)})) == "/q_network/w"  # dtype
    assert train_alike.checkpoint_difference(ca, checkpoint(scheduler={"L": 16.25, "window": [0.5, 0.1]})) \
        == "/scheduler/window[1]"
    assert train_alike.checkpoint_difference(ca, checkpoint(rng={"python": (3, (1, 3), None)})) == "/rng/python[1][1]"
    assert train_alike.checkpoint_difference(ca, checkpoint(iteration=7)) == "top level: keys only in one: iteration"
