"""Every grid of reproduce/experiments.toml evaluates each run with the number of episodes of the protocol it claims:
the paper's Section 5 ("the mean score over 100 evaluation episodes per seed", 20M steps, 5M for MuJoCo; Section 5.7
for BTR), or, for a grid beyond the paper, the protocol its page fixes. Each run's command line is expanded by
reproduce/experiments.py as the sweep expands it, and its effective --eval-episodes read from it (the last one
given, as the scripts' parser takes it) or else from its script's Args default. Reads files only."""
import ast
import functools
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reproduce package
from reproduce import experiment_file  # noqa: E402
from reproduce import experiments  # noqa: E402

PAPER = "the paper's Section 5: 100 evaluation episodes per seed"
# experiment -> (evaluation episodes of every run, the protocol that fixes the number). A new grid must say here
# which protocol it follows.
PROTOCOL = {
    "atari10-batches": (100, PAPER),
    "atari10-early": (100, PAPER + " (its runs are the first 2M steps of the 20M protocol)"),
    "atari57": (100, PAPER),
    "scale": (100, PAPER),
    "sensitivity": (100, PAPER),
    "mujoco": (100, PAPER + ", as the published 5M runs (docs/results-mujoco-5m.md)"),
    "mujoco-authors": (100, "the mujoco grid's, whose PPO and PPO+ABS runs it reuses"),
    "mujoco-ess": (100, "the mujoco grid's: the same tasks, seeds and length"),
    "btr-atari5": (100, "the paper's Section 5.7: 100 episodes per seed"),
    "ppo-atari5": (100, "beyond the paper: the paper's Atari evaluation"),
    "minatar-batches": (100, "docs/results-minatar-batches.md, fixed before the runs: the mean over 100 episodes"),
    "minatar-anchor": (100, "the minatar-batches grid's"),
}
FLAG = re.compile(r"^--eval[-_]episodes(?:=(.*))?$")


@functools.cache
def default_episodes(script: str) -> int:
    """The --eval-episodes default of a script's Args, read from its source."""
    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args")
    return next(ast.literal_eval(node.value) for node in cls.body
                if isinstance(node, ast.AnnAssign) and node.target.id == "eval_episodes")


def effective_episodes(command: list[str], script: str) -> int:
    """The --eval-episodes a run's command line gives its script: the last one on it, else the script's default."""
    given = None
    for i, token in enumerate(command):
        match = FLAG.match(token)
        if match:
            given = match.group(1) if match.group(1) is not None else command[i + 1]
    return default_episodes(script) if given is None else int(given)


def builtin():
    """(game lists, experiments) of the built-in reproduce/experiments.toml."""
    return experiment_file.load_config()


def test_every_grid_declares_its_protocol():
    assert set(builtin()[1]) == set(PROTOCOL), "a grid of reproduce/experiments.toml is not in PROTOCOL, or the reverse"


@pytest.mark.parametrize("name", PROTOCOL)
def test_grid_evaluates_as_its_protocol(name):
    games, exps = builtin()
    episodes, protocol = PROTOCOL[name]
    runs = experiments.expand(name, exps, games, "/r")
    assert runs
    given = {(r.label, r.script, effective_episodes(r.command(), r.script)) for r in runs}
    wrong = {g for g in given if g[2] != episodes}
    assert not wrong, f"{name} must evaluate {episodes} episodes a run ({protocol}); (label, script, episodes): {wrong}"


def test_the_reader_takes_the_last_flag_and_the_default():
    """effective_episodes reads the command as tyro does (the last value given wins) and falls back on the default,
    which differs between scripts: a grid of abs_ppo_mujoco.py must give the paper's 100 itself."""
    assert default_episodes("abs_ppo_mujoco.py") == 10 and default_episodes("abs_pqn_atari.py") == 100
    assert effective_episodes(["python", "abs_ppo_mujoco.py", "--seed", "1"], "abs_ppo_mujoco.py") == 10
    assert effective_episodes(["--eval-episodes", "100", "--eval_episodes=7"], "abs_ppo_mujoco.py") == 7
    games, exps = builtin()
    runs = experiments.expand("mujoco", exps, games, "/r", experiments.Selection(extra_args=["--eval-episodes", "10"]))
    assert {effective_episodes(r.command(), r.script) for r in runs} == {10}  # --extra-args comes last and wins


def test_reproducing_page_names_the_script_that_does_not_default_to_100():
    """docs/reproducing.md says which scripts' default is not the paper's 100 (and so which grids give it in flags)."""
    scripts = sorted(p.name for p in ROOT.glob("*.py") if "class Args" in p.read_text(encoding="utf-8"))
    other = [s for s in scripts if default_episodes(s) != 100]
    page = " ".join((ROOT / "docs" / "reproducing.md").read_text(encoding="utf-8").split())
    assert other == ["abs_ppo_mujoco.py"] and "Every script defaults to 100 but `abs_ppo_mujoco.py`" in page
