"""Every test starts from the same random state, whatever ran before it in its process: pytest-xdist hands tests
to its workers in no fixed order, so a test that draws from Python's, NumPy's or torch's global generator would
otherwise see different numbers from run to run, and one with a threshold could pass or fail by chance."""
import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def same_random_state_for_every_test():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
