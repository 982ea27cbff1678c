"""The same seed and inputs give the same bits in every process, whatever the machine's load: nothing in a model's
forward, loss, backward or decoding is chosen by timing."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Keeps every core busy with float32 products, the work the worker's own products compete with; says "busy" once busy.
BUSY = """import torch
torch.set_num_threads(1)
x = torch.randn(1024, 1024)
x = (x @ x).tanh_()
print("busy", flush=True)
while True:
    x = (x @ x).tanh_()
"""


def started_worker(stderr) -> subprocess.Popen:
    """A worker process, on 2 threads, once it has imported aiayn: it measures when told (`measured`)."""
    environment = {**os.environ, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, os.path.join(HERE, "reproducibility_worker.py")]
    return subprocess.Popen(command, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            text=True)  # fmt: skip


def ready(worker: subprocess.Popen, stderr) -> None:
    assert worker.stdout.readline() == "ready\n", stderr.read_text()[-4000:]


def measured(worker: subprocess.Popen, stderr) -> dict:
    output, _ = worker.communicate("measure\n", timeout=600)
    assert worker.returncode == 0, stderr.read_text()[-4000:]
    return json.loads(output.strip().splitlines()[-1])


def test_two_processes_one_beside_busy_ones_give_the_same_bits(tmp_path):
    """Every family at d_model 512: forward logits, the training loss and gradient norms (dropout on), the greedy
    tokens and scores of one sequence (weights laid out for decoding) and of a batch, in a quiet process and in one
    that shares the cores with as many busy processes as there are cores. The two processes start (import) together;
    the first measures while the second waits, the second once every busy process is busy."""
    logs = [tmp_path / "quiet.stderr", tmp_path / "loaded.stderr"]
    with open(logs[0], "w") as quiet_log, open(logs[1], "w") as loaded_log:
        workers = [started_worker(quiet_log), started_worker(loaded_log)]
    try:
        for worker, log in zip(workers, logs, strict=True):
            ready(worker, log)
        quiet = measured(workers[0], logs[0])
        busy = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
                for _ in range(os.cpu_count() or 2)]  # fmt: skip
        try:
            assert all(process.stdout.readline() == "busy\n" for process in busy)
            loaded = measured(workers[1], logs[1])
        finally:
            for process in busy:
                process.kill()
                process.wait()
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    assert set(quiet) == {"encoder", "decoder", "seq2seq"}
    assert set(quiet["decoder"]) == {"logits", "loss", "gradient norms", "greedy scores of 1", "greedy scores of 4"}
    assert loaded == quiet
