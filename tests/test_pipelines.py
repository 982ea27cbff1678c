"""Hub folders, model cards and every pipeline, with aiayn and in a process where only transformers is importable."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from helpers import hub_loading_environment
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

import aiayn
from aiayn import data
from aiayn.hub import save_hub_folder
from aiayn.tokenization import config_token_fields, train_tokenizer

PRESET = {"encoder": "tiny-encoder", "decoder": "tiny-decoder", "seq2seq": "transformer-base"}
SMALL = {"d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "dropout": 0.0, "attention_dropout": 0.0}
LABELS = {"id2label": {0: "NEG", 1: "NEU", 2: "POS"}, "label2id": {"NEG": 0, "NEU": 1, "POS": 2}}
# (family, Auto class, pipeline task, input)
PIPELINES = [
    ("encoder", "AutoModel", "feature-extraction", "The with statement wraps a block."),
    ("encoder", "AutoModelForMaskedLM", "fill-mask", "The with statement wraps a [MASK]."),
    ("encoder", "AutoModelForSequenceClassification", "text-classification", "The with statement wraps a block."),
    ("encoder", "AutoModelForTokenClassification", "token-classification", "The with statement wraps a block."),
    ("decoder", "AutoModelForCausalLM", "text-generation", "The with statement"),
    ("decoder", "AutoModelForSequenceClassification", "text-classification", "The with statement wraps a block."),
    ("seq2seq", "AutoModelForSeq2SeqLM", "translation", "The with statement wraps a block."),
    ("seq2seq", "AutoModelForSeq2SeqLM", "summarization", "The with statement wraps a block."),
    ("seq2seq", "AutoModelForSeq2SeqLM", "text2text-generation", "The with statement wraps a block."),
]
CALL_ARGUMENTS = {"text-generation": {"max_new_tokens": 5, "do_sample": False}, "translation": {"max_len_b": 4},
                  "summarization": {"max_new_tokens": 4}, "text2text-generation": {"max_new_tokens": 4}}  # fmt: skip


@pytest.fixture(scope="module")
def tokenizers():
    texts = data.pydoc()["train"]["text"]
    return {family: train_tokenizer(family, texts, vocab_size=400) for family in ("encoder", "decoder", "seq2seq")}


@pytest.fixture(scope="module")
def folders(tokenizers, tmp_path_factory):
    """A hub folder for each (family, Auto class) of PIPELINES, from small random models with trained tokenizers."""
    root = tmp_path_factory.mktemp("hub")
    made = {}
    for family, auto_name, _, _ in PIPELINES:
        if (family, auto_name) in made:
            continue
        tokenizer = tokenizers[family]
        config = aiayn.preset_config(PRESET[family], **SMALL, **LABELS, **config_token_fields(tokenizer, family))
        torch.manual_seed(0)
        model = getattr(transformers, auto_name).from_config(config)
        folder = root / f"{family}-{auto_name}"
        save_hub_folder(model, tokenizer, str(folder), repo_id=f"aiayn/{folder.name}")
        made[(family, auto_name)] = str(folder)
    return made


def run_pipeline(folder: str, task: str, text: str, **pipeline_kwargs):
    pipe = transformers.pipeline(task, model=folder, **pipeline_kwargs)
    outputs = pipe(text, **CALL_ARGUMENTS.get(task, {}))
    if task == "feature-extraction":
        return torch.tensor(outputs).flatten()[:32].tolist()
    return json.loads(json.dumps(outputs, default=float))


def test_card_metadata_and_sections_follow_the_hub_template(tmp_path):
    tokenizer = train_tokenizer("seq2seq", data.pydoc()["train"]["text"], vocab_size=400)
    config = aiayn.preset_config("transformer-base", **SMALL, **config_token_fields(tokenizer, "seq2seq"))
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    metrics = {"eval_loss": 3.6241, "eval_bleu": 10.3, "eval_chrf": 26.9, "eval_runtime": 2.1}
    arguments = {"learning_rate": 7e-4, "lr_scheduler_type": "inverse_sqrt", "adam_beta2": 0.98, "max_steps": 1000}
    card_fields = {"task": "translation", "datasets": ["bible-en-de"], "language": ["en", "de"]}
    save_hub_folder(model, tokenizer, str(tmp_path), repo_id="aiayn/transformer-en-de", metrics=metrics,
                    training_arguments=arguments, **card_fields)  # fmt: skip
    card = ModelCard.load(tmp_path / "README.md")
    metadata = card.data.to_dict()
    assert metadata["library_name"] == "transformers" and metadata["pipeline_tag"] == "translation"
    assert {"aiayn", "aiayn-seq2seq"} <= set(metadata["tags"]) and metadata["license"] == "apache-2.0"
    assert metadata["datasets"] == ["bible-en-de"] and metadata["language"] == ["en", "de"]
    name, results = model_index_to_eval_results(metadata["model-index"])
    assert name == "transformer-en-de"
    assert {(r.metric_type, r.metric_value, r.task_type, r.dataset_split) for r in results} == {
        ("loss", 3.624, "translation", "validation"),
        ("bleu", 10.3, "translation", "validation"),
        ("chrf", 26.9, "translation", "validation"),
    }
    text = card.text
    for section in ("## Model Details", "## Uses", "## Bias, Risks, and Limitations",
                    "## How to Get Started with the Model", "## Training Details", "## Evaluation",
                    "## Technical Specifications", "## Citation"):  # fmt: skip
        assert section in text
    parameters = sum(p.numel() for p in model.parameters())
    assert f"{parameters:,}" in text and "sinusoidal position encodings" in text and "post-LN" in text
    assert "| `lr_scheduler_type` |" not in text and "| lr_scheduler_type | `inverse_sqrt` |" in text
    assert 'pipeline("translation", model="aiayn/transformer-en-de", trust_remote_code=True)' in text


@pytest.mark.parametrize(("family", "auto_name"), sorted({(f, a) for f, a, _, _ in PIPELINES}))
def test_hub_folders_hold_everything_push_to_hub_uploads(family, auto_name, folders):
    files = set(os.listdir(folders[(family, auto_name)]))
    expected = {"README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "configuration_aiayn.py", "modeling_aiayn.py", f"modeling_aiayn_{family}.py"}  # fmt: skip
    assert expected <= files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth", ".pkl"))]
    with open(os.path.join(folders[(family, auto_name)], "config.json")) as f:
        config = json.load(f)
    assert auto_name in config["auto_map"]
    if family == "seq2seq":
        assert "pipeline_aiayn.py" in files and "generation_config.json" in files
        assert set(config["custom_pipelines"]) == {"text2text-generation", "translation", "summarization"}
    if family == "decoder" and auto_name == "AutoModelForCausalLM":
        assert "generation_config.json" in files


@pytest.mark.parametrize(("family", "auto_name", "task", "text"), PIPELINES)
def test_pipelines_run_from_saved_folders_with_aiayn(family, auto_name, task, text, folders):
    outputs = run_pipeline(folders[(family, auto_name)], task, text)
    assert outputs
    if task == "fill-mask":
        assert len(outputs) == 5 and all("token_str" in o for o in outputs)
    if task == "text-classification":
        assert outputs[0]["label"] in LABELS["label2id"]
    if task in ("text-generation", "translation", "summarization", "text2text-generation"):
        # The text of the folder's model's own `generate`, with the same arguments.
        folder = folders[(family, auto_name)]
        model = getattr(transformers, auto_name).from_pretrained(folder)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        generated = model.generate(**tokenizer(text, return_tensors="pt"), **CALL_ARGUMENTS[task])
        key = {"translation": "translation_text", "summarization": "summary_text"}.get(task, "generated_text")
        assert outputs == [{key: tokenizer.decode(generated[0], skip_special_tokens=True)}]


def test_seq2seq_pipelines_take_the_models_generation_config(folders):
    """The paper preset decodes with beam 4 and at most source length + max_len_b tokens, which calls override."""
    folder = folders[("seq2seq", "AutoModelForSeq2SeqLM")]
    pipe = transformers.pipeline("translation", model=folder)
    assert type(pipe).__name__ == "AiaynText2TextGenerationPipeline" and pipe.model.generation_config.num_beams == 4
    source = "The with statement."
    length = len(pipe.tokenizer(source).input_ids)
    generated = pipe.tokenizer(pipe(source, max_len_b=3)[0]["translation_text"]).input_ids
    assert len(generated) <= length + 3 + 1
    two = pipe(source, num_beams=2, num_return_sequences=2, max_new_tokens=3)
    assert len(two) == 2


NO_AIAYN = textwrap.dedent(
    """
    import json, sys
    sys.modules["aiayn"] = None  # only transformers: the folders' own code must serve
    import torch, transformers

    cases, call_arguments = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    results = []
    for folder, task, text in cases:
        pipe = transformers.pipeline(task, model=folder, trust_remote_code=True)
        assert type(pipe.model).__module__.startswith("transformers_modules."), type(pipe.model).__module__
        outputs = pipe(text, **call_arguments.get(task, {}))
        if task == "feature-extraction":
            outputs = torch.tensor(outputs).flatten()[:32].tolist()
        results.append(json.loads(json.dumps(outputs, default=float)))
    print(json.dumps(results))
    """
)


def test_every_pipeline_runs_without_aiayn_and_gives_the_same_outputs(folders, tmp_path):
    cases = [(folders[(family, auto_name)], task, text) for family, auto_name, task, text in PIPELINES]
    expected = [run_pipeline(folder, task, text) for folder, task, text in cases]
    environment = hub_loading_environment(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", NO_AIAYN, json.dumps(cases), json.dumps(CALL_ARGUMENTS)],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    for (_, task, _), mine, theirs in zip(cases, expected, got, strict=True):
        assert json.dumps(theirs, sort_keys=True) == json.dumps(mine, sort_keys=True), task


@pytest.mark.parametrize(
    ("family", "auto_name"),
    [("encoder", "AutoModelForMaskedLM"), ("decoder", "AutoModelForCausalLM"), ("seq2seq", "AutoModelForSeq2SeqLM")],
)
def test_accelerate_device_map_auto_in_bfloat16(family, auto_name, folders, tokenizers):
    model = getattr(transformers, auto_name).from_pretrained(
        folders[(family, auto_name)], device_map="auto", dtype=torch.bfloat16
    )
    assert model.dtype == torch.bfloat16
    inputs = tokenizers[family](["The with statement.", "A block"], return_tensors="pt", padding=True)
    if family == "seq2seq":
        inputs["decoder_input_ids"] = inputs["input_ids"]
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
