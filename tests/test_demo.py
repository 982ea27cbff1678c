"""The demo's stages end to end at test size, and the figures."""

import json
import math
import os
from dataclasses import replace

import torch
import transformers
from helpers import lm_model, word_tokenizer

from aiayn.configuration_aiayn import preset_config
from aiayn.experiments import demo, plots
from aiayn.training import parse_overrides


# The demo's stages at test size: `demo.QUICK`'s runs and models, on a few hundred examples for a few steps (the
# translation run for 32, so that its last checkpoints, 1/32 of the run apart, are averaged). Whether the runs learn is
# `make demo`'s question (docs/results/demo.md has its figures); this test asks whether every stage is wired.
def at_test_size(run: demo.Run) -> demo.Run:
    if run.task == "translation":
        return replace(run, steps=32, warmup_steps=4, train_samples=400, eval_samples=8)
    if run.dataset == "digits":
        return replace(run, steps=4, warmup_steps=1, batch_size=16)
    return replace(run, steps=4, warmup_steps=1, batch_size=8, train_samples=300, eval_samples=16,
                   vocab_size=min(run.vocab_size, 300))  # fmt: skip


def test_the_demo_pretrains_fine_tunes_evaluates_deploys_saves_and_reloads(tmp_path, capsys):
    verbosity = transformers.logging.get_verbosity()
    try:  # on this worker's share of the cores (one thread under pytest-xdist)
        demo.main(str(tmp_path), threads=torch.get_num_threads(), runs=tuple(map(at_test_size, demo.QUICK)))
    finally:
        transformers.logging.set_verbosity(verbosity)  # the demo quiets transformers' warnings
    stdout = capsys.readouterr().out
    assert "=== summary" in stdout and "ROMEO" in stdout and "[MASK]" in stdout
    assert "The same genres through trust_remote_code=True in a process without aiayn." in stdout
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert list(summary) == ["gpt-shakespeare", "bert-shakespeare", "genre-finetuned", "genre-from-scratch",
                             "transformer-en-de", "vit-digits", "vit-digits-mim", "vit-100-labels-pretrained",
                             "vit-100-labels-from-scratch"]  # fmt: skip
    gpt = summary["gpt-shakespeare"]
    assert math.isclose(gpt["eval_perplexity"], math.exp(gpt["eval_loss"]), rel_tol=1e-6)
    assert {"eval_bleu", "eval_chrf"} <= set(summary["transformer-en-de"])
    # Every metric beside its baseline, a classifier's loss without a perplexity.
    for name, metrics in summary.items():
        shown = {key for key in metrics if key in ("eval_loss", "eval_perplexity", "eval_accuracy", "eval_bleu",
                                                   "eval_chrf")}  # fmt: skip
        assert shown == set(metrics["baselines"]) - {"linear_accuracy"}, name
        assert all(math.isfinite(metrics[key]) for key in shown), name
    assert "eval_perplexity" not in summary["genre-finetuned"]
    table = stdout.split("=== summary")[1]
    assert all(name in table for name in summary) and "baseline" in table
    # The control starts from the fine-tuned run's architecture and tokenizer, not from its weights.
    finetuned, scratch = (tmp_path / name for name in ("genre-finetuned", "genre-from-scratch"))
    assert summary["genre-finetuned"]["parameters"] == summary["genre-from-scratch"]["parameters"]
    assert (finetuned / "tokenizer.json").read_text() == (scratch / "tokenizer.json").read_text()
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(finetuned)
    assert set(classifier.config.id2label.values()) == {"comedies", "histories", "tragedies"}
    for name, auto_class in (
        ("gpt-shakespeare", transformers.AutoModelForCausalLM),
        ("bert-shakespeare", transformers.AutoModelForMaskedLM),
        ("transformer-en-de", transformers.AutoModelForSeq2SeqLM),
        ("genre-finetuned", transformers.AutoModelForSequenceClassification),
    ):
        folder = tmp_path / name
        assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "loss.png", "attention.png"} <= set(
            os.listdir(folder)
        )
        model = auto_class.from_pretrained(folder)
        assert model.config.vocab_size == len(transformers.AutoTokenizer.from_pretrained(folder))
    # The digit classifier answers through the image-classification pipeline; the few-label runs share an
    # architecture, the pretrained one starting from the masked-image model.
    assert "the pipeline says" in stdout
    assert summary["vit-100-labels-pretrained"]["parameters"] == summary["vit-100-labels-from-scratch"]["parameters"]
    assert {"model.safetensors", "preprocessor_config.json", "README.md"} <= set(os.listdir(tmp_path / "vit-digits"))
    assert transformers.AutoImageProcessor.from_pretrained(tmp_path / "vit-digits").size == {"height": 16, "width": 16}
    translation = tmp_path / "transformer-en-de"
    assert transformers.AutoModelForSeq2SeqLM.from_pretrained(translation).generation_config.num_beams == 4
    assert (translation / "positional_encoding.png").exists()
    # The translation folder exported to CTranslate2 in float32 and int8 answers through ctranslate2.Translator.
    deployed = summary["transformer-en-de"]["ctranslate2"]
    assert "CTranslate2 (float32), God spoke all these words, saying," in stdout
    assert deployed["held_out"] == 3 and deployed["sentences"] > 0
    assert 0 <= deployed["int8_identical_sentences"] <= 1 and 0 < deployed["int8_equal_tokens"] <= 1
    assert math.isfinite(deployed["float32_bleu"]) and math.isfinite(deployed["int8_bleu"])
    for quantization in ("float32", "int8"):
        exported = set(os.listdir(tmp_path / f"transformer-en-de-ctranslate2-{quantization}"))
        assert {"model.bin", "config.json", "shared_vocabulary.json", "tokenizer.json"} <= exported


def test_figures_are_written(tmp_path):
    paths = [plots.positional_encoding_heatmap(str(tmp_path / "pe.png"), d_model=64, positions=50)]
    history = [{"step": s, "loss": 5.0 / s, "learning_rate": 1e-3 * s} for s in range(1, 6)] + [
        {"step": 5, "eval_loss": 1.2}
    ]
    paths.append(plots.loss_curves(str(tmp_path / "loss.png"), history))
    paths.append(plots.learning_rate_plot(str(tmp_path / "lr.png"), history))
    model = lm_model("encoder", "sdpa")
    paths.append(plots.attention_heatmaps(str(tmp_path / "attention.png"), model, word_tokenizer(), "w5 w6 w7 w8"))
    assert model.config._attn_implementation == "sdpa"  # restored after drawing with eager attention
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def parameter_count(run: demo.Run) -> int:
    vocabulary = {} if run.dataset == "digits" else {"vocab_size": run.vocab_size}
    config = preset_config(run.preset, **vocabulary, **parse_overrides(run.overrides))
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    return sum(parameter.numel() for parameter in model.parameters())


def test_a_gpu_runs_the_same_stages_on_larger_models(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert demo.demo_runs(quick=False) == demo.GPU and demo.demo_runs(quick=True) == demo.QUICK
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert demo.demo_runs(quick=False) == demo.FULL
    for cpu, gpu in zip(demo.FULL, demo.GPU, strict=True):
        assert (gpu.name, gpu.task, gpu.weights_from, gpu.tokenizer_from) == (
            cpu.name, cpu.task, cpu.weights_from, cpu.tokenizer_from
        )  # fmt: skip
        assert parameter_count(gpu) > 2 * parameter_count(cpu), gpu.name

    # The control from scratch has the architecture of the encoder the other genre run fine-tunes, and its recipe:
    # the dropout the fine-tuned run sets over the pretrained config, the steps, batches and rates.
    def architecture(overrides: str) -> dict:
        return {key: value for key, value in parse_overrides(overrides).items() if "dropout" not in key}

    for runs in (demo.FULL, demo.GPU, demo.QUICK):
        stages = {run.name: run for run in runs}
        scratch, fine_tuned = stages["genre-from-scratch"], stages["genre-finetuned"]
        assert architecture(scratch.overrides) == architecture(stages["bert-shakespeare"].overrides)
        assert scratch.vocab_size == stages["bert-shakespeare"].vocab_size
        assert parse_overrides(fine_tuned.fine_tuning_overrides).items() <= parse_overrides(scratch.overrides).items()
        recipe = ("steps", "batch_size", "learning_rate", "warmup_steps", "length")
        assert [getattr(scratch, f) for f in recipe] == [getattr(fine_tuned, f) for f in recipe]
