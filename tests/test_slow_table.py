"""tests/slow.py, the table of the tests marked `slow`, against what pytest collects: a test renamed, or a parameter
changed, would otherwise drop out of the table, and so run in `pytest` again, without a word."""
import re
import subprocess
import sys
from pathlib import Path

import slow
from scripts import SCRIPTS as ALL_SCRIPTS  # the scripts (tests/scripts.py)

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_marked_slow_is_a_test_of_its_file():
    """tests/slow.py names tests that exist (a renamed test or parameter would otherwise leave the table silently):
    pytest, collecting the tables' files with `-m slow`, selects every name in them, a "name[param]" as that one test,
    and the shared checks on every script of tests/scripts.py but the quick ones, which stay in `pytest`."""
    assert set(slow.QUICK_SCRIPTS) < set(ALL_SCRIPTS)
    files = sorted(set(slow.EVERY_SCRIPT) | set(slow.SLOW))
    collect = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p",
                              "no:cacheprovider", "-m", "slow", *(f"tests/{file}" for file in files)],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert collect.returncode == 0, collect.stdout[-2000:] + collect.stderr[-2000:]
    selected = {line for line in collect.stdout.split("\n") if line.startswith("tests/")}
    for file, names in slow.SLOW.items():
        for name in names:
            ids = {f"tests/{file}::{name}"} if "[" in name else {f"tests/{file}::{name}"} | {
                test for test in selected if test.startswith(f"tests/{file}::{name}[")}
            assert ids & selected, (file, name)
    for file, names in slow.EVERY_SCRIPT.items():
        for function in names:
            scripts = {re.match(r"[\w.]+", test.split("[", 1)[1]).group() for test in selected
                       if test.startswith(f"tests/{file}::{function}[")}
            assert scripts == set(ALL_SCRIPTS) - set(slow.QUICK_SCRIPTS), (file, function, scripts)
