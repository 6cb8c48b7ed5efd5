"""The code is clean under the project's linter (ruff: pycodestyle and pyflakes at 120 columns, pyproject.toml's
[tool.ruff]), as .ci/run checks before the tests; here it runs with the README's test command too."""
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_linter_is_configured_and_run_by_ci():
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["line-length"] == 120 and {"E", "F", "W"} <= set(ruff["lint"]["select"])
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci.index("ruff check .") < next(i for i, line in enumerate(ci) if line.startswith("pytest"))
