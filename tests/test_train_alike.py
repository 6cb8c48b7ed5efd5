"""reproduce/train_alike.py: commits that train alike are reported "same", a commit that trains differently is
caught with the first differing number, and bad input is one line, exit 2. The commits are made here, in a
repository of the current abs_pqn_atari.py and abs_utils.py: one only re-commented, one with another learning rate."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "reproduce" / "train_alike.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def commits(tmp_path_factory):
    """(repo, {name: commit}): base, comment (a comment added: trains the same) and lr (another learning rate)."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    script = (ROOT / "abs_pqn_atari.py").read_text()
    (repo / "abs_utils.py").write_text((ROOT / "abs_utils.py").read_text())
    made = {}
    for name, text in (("base", script),
                       ("comment", script.replace("import copy\n", "import copy  # a comment changes nothing\n", 1)),
                       ("lr", script.replace("learning_rate: float = 2.5e-4", "learning_rate: float = 1e-3", 1))):
        assert text != script or name == "base"
        (repo / "abs_pqn_atari.py").write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", name)
        made[name] = git(repo, "rev-parse", "--short", "HEAD")
    return repo, made


def test_a_comment_trains_alike_and_another_learning_rate_does_not(commits, tmp_path):
    repo, c = commits
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, str(TOOL), c["base"], c["comment"], c["lr"], "--cases", "abs",
                          "--steps", "512", "--repo", str(repo), "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stdout + res.stderr  # one commit differs
    rows = {ln.split(" | ")[0][2:]: ln for ln in res.stdout.splitlines() if ln.startswith("| ")}
    assert rows[c["comment"]].startswith(f"| {c['comment']} | same (") and " 4 games)" in rows[c["comment"]]
    assert rows[c["lr"]].startswith(f"| {c['lr']} | differs: "), rows[c["lr"]]
    assert (out / c["lr"] / "runs" / "abs" / "eval_results.json").is_file()  # --out keeps the runs


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
