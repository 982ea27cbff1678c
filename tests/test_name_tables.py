"""A folder loaded with `trust_remote_code=True` where aiayn is not installed is treated by transformers and PEFT as
with aiayn imported, and as the built-in counterpart (BERT, GPT-2, T5, ViT) is, wherever they decide by class name or
model type: the Trainer's label smoothing, the pipelines' supported-model checks, PEFT's default LoRA targets. The
tables hold aiayn's entries once, and nothing else in them changes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from helpers import VOCAB, hub_loading_environment, tiny_config, word_tokenizer

import aiayn
from aiayn.families import FAMILIES as FAMILIES_TABLE
from aiayn.name_tables_aiayn import NAME_TABLES

TESTS = Path(__file__).parent
BUILTIN = {
    "encoder": lambda: transformers.BertForMaskedLM(
        transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=64)
    ),
    "decoder": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    ),
    "seq2seq": lambda: transformers.T5ForConditionalGeneration(
        transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                              decoder_start_token_id=0)
    ),
    "vision": lambda: transformers.ViTForImageClassification(
        transformers.ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, num_labels=3)
    ),
}  # fmt: skip


def aiayn_model(family: str):
    if family == "vision":
        config = aiayn.preset_config("tiny-vision", image_size=16, patch_size=4, d_model=32, num_labels=3)
        return aiayn.AiaynVisionForImageClassification(config)
    return {"encoder": aiayn.AiaynEncoderForMaskedLM, "decoder": aiayn.AiaynDecoderForCausalLM,
            "seq2seq": aiayn.AiaynSeq2SeqForConditionalGeneration}[family](tiny_config(family))  # fmt: skip


def save_folders(root: Path):
    """Each family's aiayn model and its built-in counterpart, each with the tokenizer or image processor its
    pipelines load."""
    tokenizer = word_tokenizer()
    tokenizer.mask_token = "w96"  # a fill-mask pipeline needs one
    for family in BUILTIN:
        for kind, build in (("aiayn", aiayn_model), ("builtin", lambda family: BUILTIN[family]())):
            torch.manual_seed(0)
            folder = root / f"{family}-{kind}"
            build(family).save_pretrained(folder)
            if family == "vision":
                transformers.ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(folder)
            else:
                tokenizer.save_pretrained(folder)


def run_worker(script: str, *arguments: str, tmp_path: Path) -> dict | list:
    """Runs a worker in a fresh process, from a folder where `tests/` is not on the path, and returns its result."""
    workdir = tmp_path / "elsewhere"
    workdir.mkdir(exist_ok=True)
    result = subprocess.run(
        [sys.executable, str(TESTS / script), *arguments],
        cwd=workdir,
        env=hub_loading_environment(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")] or [result.stdout[-2000:]]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def decisions(tmp_path_factory) -> dict:
    """The worker's report in each of its three modes, over the same folders: `without_aiayn` in a process of its own,
    `builtin` then `with_aiayn` in another (the built-in models before aiayn is imported)."""
    tmp_path = tmp_path_factory.mktemp("name_tables")
    save_folders(tmp_path)
    return {
        **run_worker("name_tables_worker.py", str(tmp_path), "without_aiayn", tmp_path=tmp_path),
        **run_worker("name_tables_worker.py", str(tmp_path), "builtin", "with_aiayn", tmp_path=tmp_path),
    }


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq", "vision"])
def test_a_folder_without_aiayn_is_treated_as_with_aiayn_and_as_the_builtin_model(decisions, family):
    without, with_aiayn, builtin = (decisions[mode][family] for mode in ("without_aiayn", "with_aiayn", "builtin"))
    assert without == with_aiayn
    assert without["unsupported"] == builtin["unsupported"] == []
    assert without["lora_adapts_attention"][0]
    # PEFT names default targets for BERT, GPT-2 and T5, none for ViT (its guides pass target_modules); aiayn's vision
    # family has them (the attention's input projection, as for the other families).
    assert builtin["lora_adapts_attention"][0] if family != "vision" else builtin["lora_adapts_attention"] is None
    if family in ("decoder", "seq2seq"):
        assert without["smoothing_shifts"] is builtin["smoothing_shifts"] is (family == "decoder")


def test_run_clm_with_label_smoothing_learns_the_next_token_from_a_folder_without_aiayn(tmp_path):
    """transformers' run_clm.py example (its calls, `run_clm_calls.py`) with `--label_smoothing_factor 0.1` on a
    decoder folder, 20 steps over a text that cycles through 20 words: the model predicts the next token, not the
    current one, without aiayn (the folder's code, in a process of its own), as GPT-2 does and with aiayn imported (the
    two, in that order, in another process). Trained without the shift, the model copies its input instead."""
    text = tmp_path / "train.txt"
    text.write_text("\n".join(" ".join(f"w{i}" for i in range(3, 23)) for _ in range(120)) + "\n")
    save_folders(tmp_path)

    def command_line(mode: str, folder: str) -> list[str]:
        return [
            f"--model_name_or_path={tmp_path / folder}", f"--train_file={text}", "--block_size=32",
            "--trust_remote_code", f"--output_dir={tmp_path / 'out' / mode}", "--max_steps=20",
            "--per_device_train_batch_size=8", "--learning_rate=3e-3", "--lr_scheduler_type=constant",
            "--label_smoothing_factor=0.1", "--save_strategy=no", "--report_to=none", "--use_cpu",
            "--disable_tqdm=True", "--seed=0",
        ]  # fmt: skip

    (without_aiayn,) = run_worker(
        "run_clm_calls.py", *command_line("without_aiayn", "decoder-aiayn"), "--without_aiayn", tmp_path=tmp_path
    )
    builtin, with_aiayn = run_worker(
        "run_clm_calls.py", *command_line("builtin", "decoder-builtin"),
        "--then", *command_line("with_aiayn", "decoder-aiayn"), "--with_aiayn", tmp_path=tmp_path,
    )  # fmt: skip
    results = {"without_aiayn": without_aiayn, "with_aiayn": with_aiayn, "builtin": builtin}
    assert results["without_aiayn"]["model_class"].startswith("transformers_modules.")
    assert results["without_aiayn"]["aiayn_entries"] == ["aiayn_decoder"]  # only the loaded family's classes
    assert results["with_aiayn"]["model_class"].startswith("aiayn.")
    assert results["builtin"]["model_class"] == "transformers.models.gpt2.modeling_gpt2.GPT2LMHeadModel"
    for mode, result in results.items():
        assert result["next_token_accuracy"] >= 0.8 and result["copying"] <= 0.2, (mode, result)


TABLES_AFTER_LOADING = """
import sys
import aiayn
from transformers.dynamic_module_utils import get_class_from_dynamic_module
from aiayn.name_tables_aiayn import NAME_TABLES

before = {auto_class: dict(table) for auto_class, table in NAME_TABLES.items()}
for folder in sys.argv[1:]:  # the folder's own classes, as trust_remote_code=True defines them
    model_class = get_class_from_dynamic_module("modeling_aiayn_decoder.AiaynDecoderForCausalLM", folder)
    assert model_class.__module__.startswith("transformers_modules."), model_class.__module__
    assert model_class is not aiayn.AiaynDecoderForCausalLM
assert {auto_class: dict(table) for auto_class, table in NAME_TABLES.items()} == before
print("unchanged")
"""


def test_the_tables_hold_each_aiayn_class_once_and_no_builtin_entry_changes(tmp_path):
    """`import aiayn` enters each family's classes in the tables, under aiayn's model types only; defining them again
    from two folders' code (as `trust_remote_code=True` does) changes no entry."""
    entries = {
        (auto_class, model_type): class_name
        for auto_class, table in NAME_TABLES.items()
        for model_type, class_name in table.items()
        if class_name in {name for family in aiayn.FAMILIES.values() for name in family.auto_classes.values()}
    }
    expected = {
        (auto_class, family_class.config_class.model_type): class_name
        for family_class in aiayn.FAMILIES.values()
        for auto_class, class_name in family_class.auto_classes.items()
    }
    assert entries == expected
    folders = [str(tmp_path / name) for name in ("first", "second")]
    for folder in folders:
        aiayn_model("decoder").save_pretrained(folder)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", TABLES_AFTER_LOADING, *folders],
        cwd=workdir,
        env=hub_loading_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and "unchanged" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq", "vision"])
def test_each_class_is_in_exactly_the_table_its_auto_class_reads(family):
    """Read from transformers' Auto classes themselves (their `_model_mapping`), not from aiayn's list of tables:
    each class of a family is named under its model type by the Auto class that builds it, and by no other."""
    model_type = f"aiayn_{family}"
    serving = FAMILIES_TABLE[family].auto_classes
    auto_classes = [name for name in dir(transformers) if name.startswith("AutoModel")]
    for name in auto_classes:
        mapping = getattr(getattr(transformers, name), "_model_mapping", None)
        if mapping is None:
            continue
        entry = mapping._model_mapping.get(model_type)
        assert entry == serving.get(name), (name, entry)
