"""The training scripts under torchrun: two CPU processes (gloo) take the step one process takes on the same batch."""

import json
import os
import subprocess
import sys

import pytest
import torch
import transformers
from helpers import run_script, word_tokenizer
from safetensors.torch import load_file

from aiayn.data import load_corpus
from aiayn.training import DataArguments, ModelArguments, load_model_and_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_DROPOUT = "dropout=0.0,attention_dropout=0.0,activation_dropout=0.0,classifier_dropout=0.0"


# Two CPU processes under each launcher. accelerate's `--cpu` starts one process (its multi-CPU launch needs MPI);
# `--multi_gpu` starts torch's launcher, and `--use_cpu` makes the processes talk through gloo.
LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
    "accelerate": [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"],
}  # fmt: skip


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_two_processes_take_the_single_process_step(tmp_path, monkeypatch, launcher):
    """9 examples: one held out, 8 trained on in one step of a global batch of 8, as 1 x 8 in this process or as 2
    processes x 4 (torchrun or accelerate launch, gloo). The processes average their gradients, so loss and weights
    must agree. Plain SGD keeps the step linear in the gradient (Adam's first step is about lr * sign(g), which float
    rounding can flip for g ~ 0); logging at the step makes the Trainer report the loss gathered over the processes."""
    texts = ["w5 w6 w7", "w8 w9", "w10 w11 w12 w13 w14", "w15", "w16 w17 w18", "w19 w20 w21 w22", "w23 w24",
             "w25 w26 w27 w28 w29 w30", "w31 w32"]  # fmt: skip
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("\n".join(json.dumps({"text": t, "label": f"class{i % 3}"}) for i, t in enumerate(texts)))
    word_tokenizer().save_pretrained(tmp_path / "tokenizer")
    arguments = [
        "--dataset_name", str(dataset), "--label_column", "label", "--tokenizer_name", str(tmp_path / "tokenizer"),
        "--preset", "tiny-decoder", "--config_overrides", NO_DROPOUT, "--do_train", "--max_steps", "1",
        "--learning_rate", "0.1", "--optim", "sgd", "--logging_steps", "1", "--report_to", "none",
        "--disable_tqdm", "true", "--save_strategy", "no", "--dataloader_pin_memory", "false", "--seed", "3",
        "--use_cpu",  # without an accelerator, the processes talk through gloo
    ]  # fmt: skip
    script = os.path.join("scripts", "run_classification.py")
    single, double = tmp_path / "single", tmp_path / "double"
    monkeypatch.chdir(tmp_path)
    run_script(script, ["--output_dir", str(single), "--per_device_train_batch_size", "8", *arguments], monkeypatch)
    launch = [*LAUNCHERS[launcher], os.path.join(ROOT, script), "--output_dir", str(double),
              "--per_device_train_batch_size", "4", *arguments]  # fmt: skip
    result = subprocess.run(launch, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-8000:]
    with open(double / "trainer_state.json") as f:
        state = json.load(f)
    assert state["train_batch_size"] == 4 and state["epoch"] == 1.0  # each process read half of the 8 examples
    losses = []
    for folder in (single, double):
        with open(folder / "all_results.json") as f:
            losses.append(json.load(f)["train_loss"])
    assert abs(losses[0] - losses[1]) <= 1e-6 * abs(losses[0])
    weights = [load_file(folder / "model.safetensors") for folder in (single, double)]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, rtol=0, atol=1e-6, msg=name)
    # The step did move the weights: the model the runs started from, rebuilt the same way, differs.
    transformers.set_seed(3)
    corpus = load_corpus(str(dataset))
    model_args = ModelArguments(
        preset="tiny-decoder", config_overrides=NO_DROPOUT, tokenizer_name=str(tmp_path / "tokenizer")
    )
    labels = {"id2label": {0: "class0", 1: "class1", 2: "class2"}, "label2id": {"class0": 0, "class1": 1, "class2": 2}}
    initial, _ = load_model_and_tokenizer("classification", model_args, corpus, DataArguments(), **labels)
    assert not torch.equal(
        initial.state_dict()["classifier.out_proj.weight"], weights[0]["classifier.out_proj.weight"]
    )
