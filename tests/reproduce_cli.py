"""How the tests start the tools of reproduce/: as the docs do, `python -m reproduce.NAME` (tool), with the
repository root on PYTHONPATH (tool_env) so that the package is found from any working directory, a test's tmp_path
as much as the repository root the docs run them from."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> list[str]:
    """The command line of reproduce's tool `name` (sweep, report, ...), without its arguments."""
    return [sys.executable, "-m", f"reproduce.{name}"]


def tool_env(env: dict | None = None) -> dict:
    """`env` (default: this process's environment) with the repository root first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env
