"""Tiny models of each family and inputs for them, built from configs (nothing is downloaded), and what the tests
share to run scripts and load saved folders."""

import os
import runpy
import sys

import torch
import transformers

import aiayn

FAMILIES = ("encoder", "decoder", "seq2seq")
POSITION_TYPES = ("sinusoidal", "learned", "relative", "rotary", "none")
TINY_PRESET = {"encoder": "tiny-encoder", "decoder": "tiny-decoder", "seq2seq": "tiny"}
# The head each family is usually used with, and the Auto class that builds it.
LM_AUTO_CLASS = {
    "encoder": transformers.AutoModelForMaskedLM,
    "decoder": transformers.AutoModelForCausalLM,
    "seq2seq": transformers.AutoModelForSeq2SeqLM,
}
VOCAB = 97
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# transformers' example scripts at a known commit, beside the repository (they are not on PyPI).
REFERENCE_EXAMPLES = os.path.join(os.path.dirname(ROOT), "shared", "reference", "transformers-examples", "examples",
                                  "pytorch")  # fmt: skip


def example_scripts() -> str:
    """transformers' examples/pytorch folder: `TRANSFORMERS_EXAMPLES`, else the reference copy beside the repository;
    a test that needs them fails where neither is there."""
    folder = os.environ.get("TRANSFORMERS_EXAMPLES") or REFERENCE_EXAMPLES
    assert os.path.isdir(folder), (f"transformers' example scripts are not at {folder}: set TRANSFORMERS_EXAMPLES to "
                                   "a checkout's examples/pytorch")  # fmt: skip
    return folder


def hub_loading_environment(tmp_path) -> dict:
    """The environment of a subprocess that loads a saved folder as from the hub, without aiayn on its path: offline,
    with its own module cache, and with this process's number of threads, so that its results match bit for bit."""
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "OMP_NUM_THREADS": str(torch.get_num_threads()),
    }
    environment.pop("PYTHONPATH", None)
    return environment


def run_script(path: str, arguments: list[str], monkeypatch) -> None:
    """`python PATH ARGUMENTS` (PATH relative to the repository) in this process: its arguments in `sys.argv`, its
    folder first on `sys.path` as Python puts it for a script, and torch's threads as they were before it."""
    script = os.path.join(ROOT, path)
    monkeypatch.syspath_prepend(os.path.dirname(script))
    monkeypatch.setattr(sys, "argv", [script, *arguments])
    threads = torch.get_num_threads()
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch.set_num_threads(threads)  # a benchmark runs at its --threads


def tiny_config(family: str, **overrides) -> aiayn.AiaynConfig:
    """A 2-layer, 32-wide model of `family` with dropout off, so that outputs are deterministic."""
    fields = {
        "vocab_size": VOCAB,
        "d_model": 32,
        "num_heads": 4,
        "d_ff": 64,
        "num_layers": 2,
        "max_position_embeddings": 64,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
    }
    if family == "seq2seq":
        fields["num_decoder_layers"] = 3
    return aiayn.preset_config(TINY_PRESET[family], **{**fields, **overrides})


def lm_model(family: str, attn_implementation: str = "sdpa", seed: int = 0, **overrides):
    """The language-model head of `family` in eval mode, built through its Auto class."""
    torch.manual_seed(seed)
    config = tiny_config(family, **overrides)
    return LM_AUTO_CLASS[family].from_config(config, attn_implementation=attn_implementation).eval()


def one_layer(family: str) -> dict:
    """Overrides for one layer a stack: compiling, exporting or translating a model to ONNX treats every layer alike,
    so a check of those paths needs one layer, and compiles in a fraction of the time."""
    return {"num_layers": 1} | ({"num_decoder_layers": 1} if family == "seq2seq" else {})


def random_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


def padded_batch(batch: int = 3, length: int = 9, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and a mask with one unpadded row, then right- and left-padded rows (pad id 0)."""
    ids = random_ids(batch, length, seed)
    mask = torch.ones_like(ids)
    mask[1, length - 3 :] = 0
    mask[2, :2] = 0
    return ids.masked_fill(mask == 0, 0), mask


def prompt_batch(family: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of up to 8 tokens: left-padded for the decoder family, right-padded sources for seq2seq."""
    ids, mask = random_ids(3, 8, seed=5), torch.ones(3, 8, dtype=torch.long)
    if family == "decoder":
        mask[1, :3], mask[2, :1] = 0, 0
    else:
        mask[1, 5:], mask[2, 7:] = 0, 0
    return ids.masked_fill(mask == 0, 0), mask


def lm_inputs(family: str, ids: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    """Forward arguments: seq2seq models get the same ids as source and as decoder input."""
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family == "seq2seq":
        inputs.update(decoder_input_ids=ids, decoder_attention_mask=mask)
    return inputs


def word_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer over the tiny models' vocabulary: `<pad>`, `<s>`, `</s>`, then `w3` ... `w96`."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
