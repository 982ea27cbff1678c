"""The same seed and inputs give the same bits in every process, whatever the machine's load: nothing in a model's
forward, loss, backward or decoding is chosen by timing."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Keeps every core busy with float32 products, the work the worker's own products compete with.
BUSY = "import torch\ntorch.set_num_threads(1)\nx = torch.randn(1024, 1024)\nwhile True:\n    x = (x @ x).tanh_()\n"


def run_worker() -> dict:
    environment = {**os.environ, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, os.path.join(HERE, "reproducibility_worker.py")]
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_two_processes_one_beside_busy_ones_give_the_same_bits():
    """Every family at d_model 512: forward logits, the training loss and gradient norms (dropout on), the greedy
    tokens and scores of one sequence (weights laid out for decoding) and of a batch, in a quiet process and in one
    that shares the cores with as many busy processes as there are cores."""
    quiet = run_worker()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 2)]
    try:
        loaded = run_worker()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert set(quiet) == {"encoder", "decoder", "seq2seq"}
    assert set(quiet["decoder"]) == {"logits", "loss", "gradient norms", "greedy scores of 1", "greedy scores of 4"}
    assert loaded == quiet
