"""The FLOP count behind the benchmark's model FLOPs utilisation, checked against torch's own count; the memory the
loss without logits saves, by the benchmark's measure; the single-row benchmark."""

import importlib.util
import os
import sys

import pytest
import torch
from helpers import FAMILIES, lm_inputs, lm_model, random_ids, run_script
from torch.utils.flop_counter import FlopCounterMode

COMPARE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "compare.py")


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path, monkeypatch):
    """What a benchmark writes where it runs (the Trainer's output folder) goes into the test's own folder."""
    monkeypatch.chdir(tmp_path)


def run_benchmark(name: str, arguments: list[str], monkeypatch, capsys) -> str:
    """`python benchmarks/NAME ARGUMENTS` in this process (the worker processes a benchmark starts for its
    measurements are fresh ones still): what it printed."""
    run_script(os.path.join("benchmarks", name), arguments, monkeypatch)
    return capsys.readouterr().out


def load_compare():
    spec = importlib.util.spec_from_file_location("compare", COMPARE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("hidden_act", ["relu", "swiglu"])
def test_training_flops_are_the_matmul_flops_torch_counts(family, hidden_act):
    """With the logits, as the references compute them: the head at every position."""
    model = lm_model(family, "eager", hidden_act=hidden_act).train()
    ids = random_ids(2, 12)
    inputs = lm_inputs(family, ids)
    with FlopCounterMode(display=False) as counter:
        model(**inputs, labels=ids, skip_logits=False).loss.backward()
    assert counter.get_total_flops() == load_compare().training_flops(model.config, batch=2, length=12)


@pytest.mark.parametrize("family", FAMILIES)
def test_training_flops_count_the_head_where_a_label_is_scored(family):
    """aiayn's step without logits does exactly the counted FLOPs: the head only at the scored positions (a causal
    LM scores position i on label i + 1, so its first label is never scored)."""
    model = lm_model(family, "eager").train()
    ids = random_ids(2, 12)
    labels = ids.clone()
    labels[0, 3:9] = -100
    labels[1, 1] = -100
    scored = (labels[:, 1:] if family == "decoder" else labels).ne(-100).sum().item()
    with FlopCounterMode(display=False) as counter:
        model(**lm_inputs(family, ids), labels=labels, skip_logits=True).loss.backward()
    expected = load_compare().training_flops(model.config, batch=2, length=12, scored=scored)
    # The masked LM's projection has a bias, whose gradient LinearCrossEntropy takes as a product (kept^T @ dlogits).
    bias_gradient = 2 * scored * model.config.vocab_size if family == "encoder" else 0
    assert counter.get_total_flops() == expected + bias_gradient
    assert expected < load_compare().training_flops(model.config, batch=2, length=12)


def test_the_decoding_layout_benchmark_runs_and_leaves_the_standard_layout(monkeypatch, capsys):
    arguments = ["--d-model", "64", "--layers", "1", "--vocab", "97", "--new-tokens", "4", "--repeats", "1"]
    printed = run_benchmark("decoding_layout.py", arguments, monkeypatch, capsys)
    assert "decoding_layout" in printed and "restore" in printed


def test_the_gpt2_pair_benchmark_times_each_row_and_both_models_decode_the_same_tokens(monkeypatch, capsys):
    arguments = ["--d-model", "32", "--layers", "1", "--heads", "4", "--vocab", "97", "--train-batch", "2"]
    arguments += ["--train-length", "8", "--prompt", "4", "--new-tokens", "3", "--repeats", "1"]
    printed = run_benchmark("gpt2_pair.py", arguments, monkeypatch, capsys)
    rows = ["training step, 2 x 8 (s)", "generate, 3 new tokens, batch 1 (s)", "generate, aiayn, laid out per call"]
    rows += ["generate, aiayn, laid out once", "first generate() call (s)"]
    assert all(row in printed for row in rows)


def test_the_attention_scores_benchmark_runs_every_score(monkeypatch, capsys):
    printed = run_benchmark("attention_scores.py", ["--lengths", "16", "--repeats", "1"], monkeypatch, capsys)
    assert all(f"| 16 | {name} |" in printed for name in ("dot product, sdpa", "dot product, eager", "additive"))


def test_the_single_row_benchmark_runs_and_prints_every_product(monkeypatch, capsys):
    arguments = ["--d-model", "32", "--d-ff", "64", "--vocab", "97", "--megabytes", "1", "--repeats", "1"]
    printed = run_benchmark("single_row_products.py", arguments, monkeypatch, capsys)
    for product in ("query-key-value", "attention output", "feed-forward in", "feed-forward out", "output head"):
        assert product in printed
    assert "one layer's products, (in, out)" in printed


def test_the_int8_benchmark_quantises_every_aiayn_projection_and_only_gpt2s_head(monkeypatch, capsys):
    arguments = ["--d-model", "64", "--layers", "2", "--vocab", "300", "--prompt", "8", "--new-tokens", "4"]
    printed = run_benchmark("int8_decoding.py", [*arguments, "--repeats", "1"], monkeypatch, capsys)
    cells = [[cell.strip() for cell in line.split("|")] for line in printed.splitlines()[2:]]
    rows = {tuple(cell[0].split(maxsplit=1)): cell[1] for cell in cells}
    assert rows[("aiayn", "float32")] == "0/9" and rows[("GPT-2", "float32")] == "0/9"
    for form in ("torch.ao dynamic", "torchao int8 weight-only", "torchao int8 dynamic"):
        assert rows[("aiayn", form)] == "9/9" and rows[("GPT-2", form)] == "1/9", form


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_the_ctranslate2_benchmark_decodes_every_form_and_the_engines_float32_as_aiayn(family, monkeypatch, capsys):
    arguments = ["--family", family, "--d-model", "64", "--layers", "2", "--vocab", "300", "--prompt", "8"]
    printed = run_benchmark("ctranslate2_decoding.py", [*arguments, "--new-tokens", "4", "--repeats", "1"],
                            monkeypatch, capsys)  # fmt: skip
    rows = [[cell.strip() for cell in line.split("|")] for line in printed.splitlines() if line.count("|") == 9]
    by_form = {(row[0], row[2], row[3]): row for row in rows[1:]}
    assert len(by_form) == 5 * 2 * 2  # forms x searches x batches
    assert by_form[("CTranslate2 float32", "greedy", "1")][-1] == "100.0%"
    float32, int8 = (float(by_form[(form, "greedy", "1")][1]) for form in ("aiayn float32", "CTranslate2 int8"))
    assert int8 < float32 / 3  # a byte and a row scale per weight, against four bytes


@pytest.mark.parametrize("family", FAMILIES)
def test_the_loss_without_logits_holds_at_least_one_logits_buffer_less(family):
    """The training step's peak memory (the benchmark's allocation trace), with and without the logits: the step
    without them never holds the batch's logits next to their log-probabilities and gradients."""
    compare = load_compare()
    model = lm_model(family, vocab_size=4096).train()
    ids = torch.randint(3, 4096, (4, 64), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    if family == "encoder":
        labels[torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) > 0.15] = -100

    def step(skip_logits: bool):
        model(**lm_inputs(family, ids), labels=labels, skip_logits=skip_logits).loss.backward()
        model.zero_grad(set_to_none=True)

    peaks = {}
    for skip_logits in (False, True):
        step(skip_logits)  # warm-up
        peaks[skip_logits] = compare.peak_allocated_mib(lambda skip_logits=skip_logits: step(skip_logits))
    logits_mib = ids.numel() * 4096 * 4 / 2**20
    assert peaks[True] + 0.9 * logits_mib <= peaks[False], peaks


def test_the_label_smoothing_benchmark_runs_and_the_step_without_logits_holds_less(monkeypatch, capsys):
    """Marian and aiayn smoothed by the Trainer, aiayn by its own loss: a row each, and the step without logits holds
    less than the Trainer's smoothing of the same model, which holds the batch's logits and their log-probabilities
    (here one chunk of the loss without logits is the whole batch, so the difference is under one logits buffer)."""
    arguments = ["--d-model", "64", "--layers", "1", "--vocab", "4096", "--length", "16", "--batch", "4"]
    printed = run_benchmark("label_smoothing.py", [*arguments, "--repeats", "1"], monkeypatch, capsys)
    rows = {line[:18].strip(): line[18:].split() for line in printed.splitlines()[3:]}
    assert list(rows) == ["Marian, Trainer", "aiayn, Trainer", "aiayn, model"], printed
    assert float(rows["aiayn, model"][2]) < float(rows["aiayn, Trainer"][2]), printed


def test_the_long_inputs_benchmark_runs_and_names_each_configurations_path(monkeypatch, capsys):
    """Full attention, a window the bands serve at this length, one they do not (the masked path), BigBird's random
    blocks in bands, and Linformer's projection, timed in one fresh process (the memory of each, a fresh process
    apiece, is the next test's, in this one)."""
    arguments = ["--lengths", "256", "--windows", "32", "128", "--bigbird", "32", "2", "--linformer-k", "16",
                 "--d-model", "32", "--repeats", "1", "--no-memory"]  # fmt: skip
    printed = run_benchmark("long_inputs.py", arguments, monkeypatch, capsys)
    lines = [line for line in printed.splitlines() if line.startswith("| 256 ")]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines]
    assert [row[:3] for row in rows] == [
        ["256", "full", "full"],
        ["256", "window 32", "banded"],
        ["256", "window 128", "masked"],
        ["256", "BigBird 32 + 2 random", "banded"],
        ["256", "Linformer k=16", "projected"],
    ]
    for row in rows:
        forward, forward_speedup, forward_peak, train, train_speedup, train_peak = row[3:]
        assert float(forward) > 0 and float(train) > 0 and forward_peak == train_peak == "-"
        assert float(forward_speedup) > 0 and float(train_speedup) > 0
    assert rows[0][4] == rows[0][7] == "1.00"  # full attention against itself


def test_the_long_inputs_benchmarks_memory_is_the_weights_the_optimizer_and_the_peak_of_a_call():
    sys.path.insert(0, os.path.dirname(COMPARE))
    try:
        spec = importlib.util.spec_from_file_location("long_inputs", os.path.join(os.path.dirname(COMPARE),
                                                                                  "long_inputs.py"))  # fmt: skip
        long_inputs = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(long_inputs)
    finally:
        sys.path.remove(os.path.dirname(COMPARE))
    settings = {"family": "encoder", "lengths": [256], "length": 256, "windows": [32], "bigbird": None,
                "linformer_k": 0, "d_model": 32, "heads": 4, "layers": 1, "device": "cpu",
                "kinds": ["forward", "train"], "attention": "window 32"}  # fmt: skip
    peaks = long_inputs.measure_memory(settings)
    model = long_inputs.build(settings, {"sliding_window": 32})
    weights = sum(tensor.numel() * tensor.element_size() for tensor in [*model.parameters(), *model.buffers()])
    # Training holds AdamW's two moments of every parameter beside the weights, and a call's activations on top.
    adam = 2 * sum(parameter.numel() * 4 for parameter in model.parameters())
    assert weights / 2**20 < peaks["forward"] and (weights + adam) / 2**20 < peaks["train"]


def test_aiayn_train_scores_what_transformers_example_scripts_score(monkeypatch, capsys):
    """`benchmarks/example_scripts.py` on the copy of transformers' example scripts beside the repository: run_ner.py
    and run_qa.py trained from the same starting folder, on the same files, flags and seed as `aiayn train`, report
    the same eval metrics and losses, to float noise."""
    printed = run_benchmark("example_scripts.py", ["--tasks", "token-classification", "question-answering", "--rows",
                                                   "45", "--steps", "3"], monkeypatch, capsys)  # fmt: skip
    rows = [line.strip("|").split("|") for line in printed.splitlines() if line.startswith("| ") and "---" not in line]
    compared = {(task.strip(), metric.strip()): difference.strip() for task, metric, _, _, difference in rows[1:]}
    assert {metric for _, metric in compared} >= {"eval_f1", "eval_exact_match", "eval_precision", "train_loss"}
    for (task, metric), difference in compared.items():
        assert abs(float(difference)) <= 1e-6, (task, metric, printed)
