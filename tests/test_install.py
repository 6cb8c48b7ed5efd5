"""The Python floor: pyproject.toml's requires-python, requirements.txt's "." that makes pip read it and the marker on
every other requirement, and the README's statement, kept equal; and a real pip on an older Python stopping with one
line that says so, before it downloads or fails on anything else (it fetches only setuptools, to read ".")."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
FLOOR = (3, 11)


def requirement_lines(name: str) -> list[str]:
    return [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()
            if line.split("#")[0].strip() and not line.startswith("-r")]


def test_pyproject_requires_the_floor():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={FLOOR[0]}.{FLOOR[1]}"
    assert sys.version_info[:2] >= FLOOR  # the Python running these tests is supported


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt"])
def test_every_requirement_is_skipped_below_the_floor_and_kept_from_it(name):
    lines = requirement_lines(name)
    if name == "requirements.txt":
        assert lines[0] == "."  # first: pip prepares this project, whose requires-python stops an older Python
        lines = lines[1:]
    for line in lines:
        marker = Requirement(line).marker
        assert marker is not None, line
        for minor, kept in ((FLOOR[1] - 1, False), (FLOOR[1], True), (FLOOR[1] + 2, True)):
            env = {**default_environment(), "python_version": f"{FLOOR[0]}.{minor}"}
            assert marker.evaluate(env) is kept, (line, minor)


def test_the_readme_states_the_floor():
    text = (ROOT / "README.md").read_text()
    assert re.search(rf"Python {FLOOR[0]}\.{FLOOR[1]} or newer", text)


def test_pip_on_an_older_python_stops_with_one_line_naming_it(tmp_path):
    name = f"python{FLOOR[0]}.{FLOOR[1] - 1}"  # on PATH, or one of pyenv's
    found = [shutil.which(name)] + sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/*/bin/{name}")))
    older = next((p for p in found if p and subprocess.run([p, "-c", "import venv, ensurepip"],
                                                           capture_output=True).returncode == 0), None)
    if older is None:
        pytest.skip(f"no {name} with venv here")
    venv = tmp_path / "old"
    subprocess.run([older, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "-r", "requirements.txt"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)  # (it fetches setuptools to read pyproject.toml)
    errors = [line for line in p.stderr.splitlines() if line.startswith("ERROR")]
    assert p.returncode == 1 and len(errors) == 1, p.stderr
    assert re.fullmatch(rf"ERROR: Package 'abs-rl' requires a different Python: {FLOOR[0]}\.{FLOOR[1] - 1}\.\d+ "
                        rf"not in '>={FLOOR[0]}\.{FLOOR[1]}'", errors[0]), errors
    for made in ("abs_rl.egg-info", "build"):  # (setuptools writes them beside pyproject.toml; .gitignore'd)
        shutil.rmtree(ROOT / made, ignore_errors=True)
