"""The suite's own setup (tests/conftest.py): each test process runs on its share of the cores."""

import os

import torch


def test_each_test_process_runs_on_its_share_of_the_cores():
    """One torch thread a worker under pytest-xdist (one worker per core); a process without workers up to two."""
    expected = 1 if "PYTEST_XDIST_WORKER" in os.environ else min(2, os.cpu_count() or 1)
    assert torch.get_num_threads() == expected
