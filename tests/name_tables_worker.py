"""What transformers and PEFT decide by a model's class name or model type, for the models of four folders, printed as
JSON by mode: `python name_tables_worker.py FOLDERS_DIR MODE [MODE ...]`, the modes in the order given.

MODE `without_aiayn` loads aiayn's folders where aiayn cannot be imported (the folders' own code, through
`trust_remote_code=True`): it makes aiayn unimportable, so it is the process's only mode. `builtin` loads the built-in
counterparts' folders (BERT, GPT-2, T5, ViT) and `with_aiayn` imports aiayn and loads aiayn's folders: `builtin
with_aiayn` measures the built-in models before aiayn is imported, as a process of their own would. For each family
it reports:

- `unsupported`: the pipeline tasks whose `check_model_type` logs "is not supported" for the loaded model;
- `lora_adapts_attention`: whether `get_peft_model(model, LoraConfig())`, without `target_modules`, adapts the
  attention's input projections (and nothing else), and how many; None where PEFT refuses for want of a default;
- `smoothing_shifts`: for the language models, whether the Trainer's label-smoothed loss scores position i on label
  i + 1 (True), on label i (False), or neither.
"""

import json
import logging
import sys

FOLDERS, MODES = sys.argv[1], sys.argv[2:]
assert "without_aiayn" not in MODES or MODES == ["without_aiayn"], MODES
if MODES == ["without_aiayn"]:
    sys.modules["aiayn"] = None

import torch  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers.trainer_pt_utils import LabelSmoother  # noqa: E402

TASKS = {
    "encoder": {
        "fill-mask": "AutoModelForMaskedLM",
        "text-classification": "AutoModelForSequenceClassification",
        "token-classification": "AutoModelForTokenClassification",
        "feature-extraction": "AutoModel",
    },
    "decoder": {
        "text-generation": "AutoModelForCausalLM",
        "text-classification": "AutoModelForSequenceClassification",
        "token-classification": "AutoModelForTokenClassification",
    },
    "seq2seq": {"text-classification": "AutoModelForSequenceClassification"},
    "vision": {"image-classification": "AutoModelForImageClassification"},
}
LANGUAGE_MODEL = {"decoder": "AutoModelForCausalLM", "seq2seq": "AutoModelForSeq2SeqLM"}
# The attention's input projections: aiayn's, GPT-2's, BERT's and ViT's, T5's.
ATTENTION_INPUTS = {"qkv_proj", "q_proj", "kv_proj", "c_attn", "query", "value", "q", "v"}


class Messages(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def load(auto_name: str, folder: str):
    remote = {"trust_remote_code": True} if "without_aiayn" in MODES else {}
    return getattr(transformers, auto_name).from_pretrained(folder, **remote)


def unsupported_tasks(family: str, folder: str) -> list[str]:
    messages = Messages()
    transformers.logging.get_logger("transformers").addHandler(messages)
    unsupported = []
    for task, auto_name in TASKS[family].items():
        messages.lines.clear()
        if family == "vision":
            processor = {"image_processor": transformers.AutoImageProcessor.from_pretrained(folder)}
        else:  # the tokenizer needs no code (see README: AutoTokenizer asks unless told)
            processor = {"tokenizer": transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False)}
        transformers.pipeline(task, model=load(auto_name, folder), **processor)
        if any("is not supported for" in line for line in messages.lines):
            unsupported.append(task)
    transformers.logging.get_logger("transformers").removeHandler(messages)
    return unsupported


def lora_adapts_attention(family: str, folder: str) -> list | None:
    """None where PEFT has no default for the model type (it asks for `target_modules`)."""
    auto_name = LANGUAGE_MODEL.get(family) or next(iter(TASKS[family].values()))
    try:
        model = get_peft_model(load(auto_name, folder), LoraConfig())
    except ValueError as error:
        if "target_modules" not in str(error):
            raise
        return None
    adapted = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    count = sum(1 for _, module in model.named_modules() if hasattr(module, "lora_A"))
    return [bool(adapted) and adapted <= ATTENTION_INPUTS, count]


def smoothing_shifts(family: str, folder: str):
    model = load(LANGUAGE_MODEL[family], folder).eval()
    torch.manual_seed(0)
    ids = torch.randint(3, 90, (2, 8))
    inputs = {"input_ids": ids, "labels": ids.clone()}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(labels=ids)
    arguments = transformers.TrainingArguments(output_dir=folder + "/trainer", report_to="none", use_cpu=True)
    arguments.label_smoothing_factor = 0.1
    trainer = transformers.Trainer(model=model, args=arguments)
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(inputs)).item()
        outputs = model(**{name: value for name, value in inputs.items() if name != "labels"})
    smoother = LabelSmoother(epsilon=0.1)
    shifted = smoother(outputs, ids, shift_labels=True).item()
    unshifted = smoother(outputs, ids).item()
    return True if abs(loss - shifted) < 1e-5 else False if abs(loss - unshifted) < 1e-5 else None


def report(mode: str) -> dict:
    reports = {}
    for family in TASKS:
        folder = f"{FOLDERS}/{family}-{'builtin' if mode == 'builtin' else 'aiayn'}"
        reports[family] = {
            "unsupported": unsupported_tasks(family, folder),
            "lora_adapts_attention": lora_adapts_attention(family, folder),
        }
        if family in LANGUAGE_MODEL:
            reports[family]["smoothing_shifts"] = smoothing_shifts(family, folder)
    return reports


reports = {}
for mode in MODES:
    if mode == "with_aiayn":
        import aiayn  # noqa: F401
    reports[mode] = report(mode)
print("RESULT " + json.dumps(reports))
