"""The code is clean under the project's linter (ruff: pycodestyle and pyflakes at 120 columns, pyproject.toml's
[tool.ruff]), as .ci/run checks before the tests; here it runs with the README's test command too."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


def scripts():
    return sorted(ROOT.glob("abs_*.py")) + sorted(ROOT.glob("gns_*.py"))


def test_each_script_catches_signals_first_and_imports_everything_next():
    """What E402 would check, which pyproject.toml turns off for the scripts because of their first statement: after
    the docstring, `import abs_utils as U` and `U.catch_signals()`, then every module-level import, then the code."""
    import ast
    assert len(scripts()) >= 6
    for path in scripts():
        body = ast.parse(path.read_text()).body
        assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), path.name  # the docstring
        assert ast.unparse(body[1]) == "import abs_utils as U" and ast.unparse(body[2]) == "U.catch_signals()", path
        code = next(i for i, node in enumerate(body[3:], 3) if not isinstance(node, (ast.Import, ast.ImportFrom)))
        assert code > 3 and not [ast.unparse(n) for n in body[code:] if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_importing_the_package_imports_none_of_its_files_until_a_name_is_used():
    """So that `U.catch_signals()` runs before torch is imported (the slow first second of a script)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import abs_utils as U; a = set(sys.modules); "
            "U.catch_signals(); b = set(sys.modules); U.Run; c = set(sys.modules); "
            "print('torch' in a, 'torch' in b, 'torch' in c, sorted(m for m in b if m.startswith('abs_utils')))")
    p = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["False", "False", "True", "['abs_utils',", "'abs_utils.signals']"], p.stdout + p.stderr


def test_every_name_of_the_package_loads_from_its_file():
    sys.path.insert(0, str(ROOT))
    import abs_utils as U
    for name in U.__all__:
        assert getattr(U, name) is getattr(sys.modules[f"abs_utils.{U._FILE_OF[name]}"], name)
    assert U.run is sys.modules["abs_utils.run"] and set(U._NAMES) <= set(dir(U))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        U.nothing
