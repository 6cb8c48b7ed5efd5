"""Every test starts from the same random state, whatever ran before it in its process: pytest-xdist hands tests
to its workers in no fixed order, so a test that draws from Python's, NumPy's or torch's global generator would
otherwise see different numbers from run to run, and one with a threshold could pass or fail by chance. The header of
a run names the device the device tests (tests/test_cuda.py, marker `cuda`) run on."""
import os
import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def same_random_state_for_every_test():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def pytest_report_header(config):
    gpu = torch.cuda.is_available() and os.environ.get("ABS_TEST_DEVICE") != "cpu"
    return "device tests on: " + (f"cuda ({torch.cuda.get_device_name(0)})" if gpu else "cpu")
