"""The tests' fixtures and torch's threads. pytest-xdist's controller loads this file too but runs no test, so torch
is imported where a test process needs it and nowhere here at import: the workers start without waiting on the
controller's imports. What tests share besides fixtures is in helpers.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock


def pytest_configure(config):
    """One torch thread per test process under pytest-xdist (one process per core), else up to two."""
    if config.getoption("numprocesses", None):
        return  # pytest-xdist's controller (its workers run with the option unset)
    import torch

    torch.set_num_threads(1 if hasattr(config, "workerinput") else min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """Fails a test that leaves its process at another number of torch threads (and restores it): under pytest-xdist
    the tests after it on that worker would compete with the other workers for the cores."""
    import torch

    threads = torch.get_num_threads()
    yield
    left = torch.get_num_threads()
    if left != threads:
        torch.set_num_threads(threads)
        pytest.fail(f"the test left torch at {left} threads; the suite runs at {threads}")


@pytest.fixture(scope="session")
def site(tmp_path_factory, worker_id):
    """The documentation site, built with `mkdocs build --strict` (a broken link or an unresolved reference fails
    it) once per test run: the first worker to need it builds it, under a lock, in the folder the workers share."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    folder = shared / "site"
    with FileLock(str(shared / "site.lock")):
        if not (folder / "index.html").exists():
            result = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-4000:]
    return folder


@pytest.fixture
def tmp_folder(tmp_path):
    return str(tmp_path)
