"""Saved folders: exact round trips, and loading with trust_remote_code in a process where aiayn is absent."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
import transformers
from helpers import FAMILIES, LM_AUTO_CLASS, VOCAB, hub_loading_environment, padded_batch, prompt_batch, tiny_config
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results
from safetensors import safe_open
from test_modeling import HEAD_CLASSES, HEADS, head_inputs

from aiayn.hub import model_card


def _outputs(model, inputs) -> dict:
    """Every tensor a forward returns, by name, in eval mode."""
    with torch.no_grad():
        outputs = model.eval()(**inputs)
    return {k: v for k, v in outputs.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize(("family", "auto_name"), HEADS)
def test_save_and_load_are_exact(family, auto_name, tmp_folder):
    auto_class = getattr(transformers, auto_name)
    torch.manual_seed(0)
    model = auto_class.from_config(tiny_config(family, num_labels=3, position_embedding_type="relative"))
    model.save_pretrained(tmp_folder)
    loaded = auto_class.from_pretrained(tmp_folder)
    assert type(loaded) is type(model)
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    for name, tensor in state.items():
        assert torch.equal(loaded_state[name], tensor), name
    inputs = head_inputs(family, auto_name)
    for name, tensor in _outputs(model, inputs).items():
        assert torch.equal(_outputs(loaded, inputs)[name], tensor), name


@pytest.mark.parametrize("family", FAMILIES)
def test_folder_holds_safetensors_code_and_the_full_auto_map(family, tmp_folder):
    config = tiny_config(family)
    model = transformers.AutoModel.from_config(config)
    model.save_pretrained(tmp_folder)
    files = set(os.listdir(tmp_folder))
    family_module = f"modeling_aiayn_{family}.py"
    assert {"config.json", "model.safetensors", "configuration_aiayn.py", "modeling_aiayn.py", family_module} <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    with open(os.path.join(tmp_folder, "config.json")) as f:
        auto_map = json.load(f)["auto_map"]
    expected = {name: f"modeling_aiayn_{family}.{cls}" for name, cls in HEAD_CLASSES[family].items()}
    assert auto_map == {"AutoConfig": f"configuration_aiayn.{type(config).__name__}", **expected}


@pytest.mark.parametrize("family", FAMILIES)
def test_tied_embeddings_are_stored_once_and_tied_again(family, tmp_folder):
    auto_class = LM_AUTO_CLASS[family]
    auto_class.from_config(tiny_config(family)).save_pretrained(tmp_folder)
    with safe_open(os.path.join(tmp_folder, "model.safetensors"), "pt") as f:
        embedding_tables = [name for name in f.keys() if f.get_slice(name).get_shape() == [VOCAB, 32]]  # noqa: SIM118
    assert len(embedding_tables) == 1, embedding_tables
    loaded = auto_class.from_pretrained(tmp_folder)
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight


LOADER = textwrap.dedent(
    """
    import json, os, sys
    sys.modules["aiayn"] = None  # aiayn cannot be imported: only the folders' own code can build the models
    import torch, transformers

    for folder in sys.argv[1:]:
        name = os.path.basename(folder)
        expected = torch.load(folder + "/expected.pt")
        auto_map = json.load(open(folder + "/config.json"))["auto_map"]
        for auto_name in auto_map:
            if auto_name == "AutoConfig":
                continue
            model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
            assert type(model).__name__ == auto_map[auto_name].split(".")[1]
            if auto_name == expected["auto_name"]:
                with torch.no_grad():
                    outputs = model(**expected["inputs"])
                for output, tensor in expected["outputs"].items():
                    assert torch.equal(outputs[output], tensor), (name, output)
                if "smoothed_training_loss" in expected:
                    assert torch.equal(model.train()(**expected["inputs"]).loss, expected["smoothed_training_loss"])
                if "beam_search" in expected:
                    search = expected["beam_search"]
                    found = model.eval().generate(**search["inputs"], **search["settings"])
                    assert torch.equal(found.sequences, search["sequences"]), name
                    assert torch.equal(found.sequences_scores, search["sequences_scores"]), name
                    print(name, "beam search", auto_name)
                print(name, "exact", auto_name)
            print(name, "loaded", auto_name)
    """
)  # each folder given: every head it maps loads; the head `expected.pt` names gives its outputs ("NAME exact HEAD")
GENERATING = ("decoder", "seq2seq")
BEAM_SEARCH = {
    "num_beams": 3,
    "max_new_tokens": 5,
    "min_new_tokens": 5,
    "do_sample": False,
    "output_scores": True,
    "return_dict_in_generate": True,
}
SAVED_HEADS = {
    "encoder": "AutoModelForMaskedLM",
    "decoder": "AutoModelForCausalLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
}


@pytest.fixture(scope="module")
def loaded_without_aiayn(tmp_path_factory) -> list[str]:
    """A folder of each family, of the head `SAVED_HEADS` names, with its outputs in evaluation and its label-smoothed
    training loss (`expected.pt`), loaded by `LOADER` in one process where aiayn cannot be imported: its lines."""
    tmp_path = tmp_path_factory.mktemp("hub_loading")
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    for family, auto_name in SAVED_HEADS.items():
        torch.manual_seed(0)
        config = tiny_config(family, position_embedding_type="sinusoidal", label_smoothing=0.1)
        model = getattr(transformers, auto_name).from_config(config)
        model.save_pretrained(tmp_path / family)
        ids, mask = padded_batch()
        inputs = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
        if family == "seq2seq":
            inputs["decoder_input_ids"] = ids
        with torch.no_grad():
            smoothed = model.train()(**inputs).loss
        expected = {"auto_name": auto_name, "inputs": inputs, "outputs": _outputs(model, inputs)}
        assert not torch.equal(smoothed, expected["outputs"]["loss"])  # without smoothing the folder would fail below
        if family in GENERATING:  # the folder's code reorders the caches (`_reorder_cache`)
            prompt, prompt_mask = prompt_batch(family)
            search = {"inputs": {"input_ids": prompt, "attention_mask": prompt_mask}, "settings": BEAM_SEARCH}
            found = model.eval().generate(**search["inputs"], **BEAM_SEARCH)
            search.update(sequences=found.sequences, sequences_scores=found.sequences_scores)
            expected["beam_search"] = search
        torch.save({**expected, "smoothed_training_loss": smoothed}, tmp_path / family / "expected.pt")
    result = subprocess.run(
        [sys.executable, "-c", LOADER, *(str(tmp_path / family) for family in SAVED_HEADS)],
        cwd=workdir,
        env=hub_loading_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


@pytest.mark.parametrize("family", SAVED_HEADS)
def test_trust_remote_code_loads_every_head_without_aiayn_exactly(family, loaded_without_aiayn):
    """Every head of the folder loads without aiayn; the saved one gives the same outputs and loss in evaluation, in
    training the same loss label-smoothed by its config, and, where it generates, the same beam-search sequences and
    scores."""
    assert f"{family} exact {SAVED_HEADS[family]}" in loaded_without_aiayn
    searched = f"{family} beam search {SAVED_HEADS[family]}" in loaded_without_aiayn
    assert searched == (family in GENERATING)
    loaded = {line.split()[2] for line in loaded_without_aiayn if line.startswith(f"{family} loaded ")}
    assert loaded == set(HEAD_CLASSES[family])


def test_the_wheel_carries_the_model_card_template_and_the_code(tmp_path):
    """`hub_card/` at the top of the project is installed as `aiayn.hub_card`: a wheel built from the project holds the
    template `aiayn.hub` renders, beside the modules."""
    project = Path(__file__).parents[1]
    source = tmp_path / "project"  # the build writes its scratch next to the sources
    for name in ("src", "hub_card"):
        shutil.copytree(project / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(project / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", tmp_path]
    subprocess.run([*command, source], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("aiayn-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert {"aiayn/hub_card/modelcard_template.md", "aiayn/modeling_aiayn.py", "aiayn/hub.py"} <= set(
            archive.namelist()
        )
        packaged = archive.read("aiayn/hub_card/modelcard_template.md")
    assert packaged == (project / "hub_card" / "modelcard_template.md").read_bytes()


def test_card_metadata_holds_each_metric_as_its_table_shows_it(tmp_path):
    """Four significant digits in the table and the model-index alike: a loss of 2.461e-05 is not 0."""
    model = transformers.AutoModelForSequenceClassification.from_config(tiny_config("encoder", num_labels=3))
    metrics = {"eval_loss": 2.461e-05, "eval_baseline_loss": 1.0986123, "eval_accuracy": 5 / 6,
               "eval_baseline_accuracy": 0.5}  # fmt: skip
    model_card(model, "aiayn/topics", metrics=metrics).save(tmp_path / "README.md")
    card = ModelCard.load(tmp_path / "README.md")
    _, results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    assert {(result.metric_name, result.metric_value) for result in results} == {
        ("Validation loss: cross-entropy per example (nats)", 2.461e-05),
        ("Accuracy", 0.8333),
    }
    assert "| Validation loss: cross-entropy per example (nats) | 2.461e-05 | 1.099 |" in card.text
    assert "| Accuracy | 0.8333 | 0.5 |" in card.text


@pytest.mark.parametrize(
    ("fields", "loss"),
    [({"num_labels": 3}, "cross-entropy per example (nats)"),
     ({"num_labels": 3, "problem_type": "multi_label_classification"},
      "binary cross-entropy per label of each example (nats)"),
     ({"num_labels": 1}, "squared error per predicted value")],
)  # fmt: skip
def test_a_classifiers_card_names_the_loss_of_its_problem_type(fields, loss):
    """The loss `sequence_classification_loss` computes for the config's `problem_type` (unset: as the loss would
    set it for class ids, one label being a regression)."""
    model = transformers.AutoModelForSequenceClassification.from_config(tiny_config("encoder", **fields))
    card = model_card(model, "aiayn/classifier", metrics={"eval_loss": 0.25})
    assert f"| Validation loss: {loss} | 0.25 | not computed |" in card.text


@pytest.mark.parametrize(
    ("auto_name", "tie", "tied"),
    [("AutoModelForCausalLM", True, True), ("AutoModelForCausalLM", False, False),
     ("AutoModelForTokenClassification", True, False)],
)  # fmt: skip
def test_a_card_states_tying_where_the_models_weights_are_tied(auto_name, tie, tied):
    """Tying as the weights are: a tagger has no output projection over the vocabulary, whatever its config says."""
    model = getattr(transformers, auto_name).from_config(tiny_config("decoder", tie_word_embeddings=tie, num_labels=3))
    output = model.get_output_embeddings()
    assert (output is not None and output.weight is model.get_input_embeddings().weight) is tied
    card = model_card(model, "aiayn/model")
    assert ("the output projection is tied to the token embedding" in card.text) is tied
