"""Every test starts from the same random state, whatever ran before it in its process: pytest-xdist hands tests
to its workers in no fixed order, so a test that draws from Python's, NumPy's or torch's global generator would
otherwise see different numbers from run to run, and one with a threshold could pass or fail by chance. The header of
a run names the device the device tests (tests/test_cuda.py, marker `cuda`) run on. `made_once` makes a long-to-make
directory once for all the workers of a run."""
import fcntl
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from slow import is_slow  # the table of the tests marked `slow` (tests/slow.py)


@pytest.fixture(autouse=True)
def same_random_state_for_every_test():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def made_once(tmp_path_factory):
    """made_once(name, fill) -> a directory that fill(directory) filled once in this pytest run, whichever worker asked
    first: a module-scoped fixture is made again in every pytest-xdist worker that runs one of its tests, and the
    published reports take up to half a minute each to make. The others wait on a lock and read it; a fill that
    failed leaves no directory, so the next asker fills it again (and fails the same way, in its own test)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, which holds every worker's own

    def make(name: str, fill) -> Path:
        out = root / f"made-once-{name}"
        with open(root / f"made-once-{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on an exception
            if not (root / f"made-once-{name}.done").exists():
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                fill(out)
                (root / f"made-once-{name}.done").touch()
        return out
    return make


def pytest_report_header(config):
    gpu = torch.cuda.is_available() and os.environ.get("ABS_TEST_DEVICE") != "cpu"
    return "device tests on: " + (f"cuda ({torch.cuda.get_device_name(0)})" if gpu else "cpu")


# Modules of long end-to-end runs first and modules of quick unit tests last: pytest-xdist hands tests out in the
# order collected, so a long test collected last runs while the other worker has nothing left (the README's test
# time). The order within a module, and so its module-scoped fixtures, is kept.
FIRST = ("test_stop_at_step.py", "test_runs_all_scripts.py", "test_train_alike.py", "test_sweep.py",
         "test_results.py", "test_hardening_runs.py", "test_bench.py")
LAST = ("test_report.py", "test_abs_utils.py", "test_docs.py", "test_divergence_study.py", "test_gpu_call.py",
        "test_copies.py")
# the report's unit tests, one file per module of reproduce/ beside test_report.py
LAST += ("test_stats.py", "test_measures.py", "test_sections.py", "test_figures.py", "test_runs.py", "test_events.py")
LAST += ("test_grid_protocol.py",)  # reads experiments.toml and the scripts' sources only


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if is_slow(item.path.name, item.name):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: 0 if item.path.name in FIRST else 2 if item.path.name in LAST else 1)
