"""The calls of transformers' example `examples/pytorch/language-modeling/run_clm.py` for a folder and a text file,
with its command line (a subset of its options), then the next-token accuracy and the rate at which the trained model's
argmax copies the current token, over the training blocks, printed as JSON.

transformers' sdist holds no examples, so the script is reproduced by the calls it makes: `HfArgumentParser` over
its arguments and `TrainingArguments`, `load_dataset("text", ...)`, `AutoConfig`, `AutoTokenizer` and
`AutoModelForCausalLM.from_pretrained(..., trust_remote_code=...)`, tokenisation, `group_texts` (blocks of
`block_size` tokens, `labels` a copy of `input_ids`), `Trainer(..., processing_class=tokenizer,
data_collator=default_data_collator)`, `train()` and `save_model()`.

Several command lines separated by `--then` run one after the other in this process, each printed as an entry of the
JSON list. `--with_aiayn` imports aiayn before its command line runs. `--without_aiayn` makes aiayn unimportable
first, so that only the folder's own code can build the model: it is the process's only command line.
"""

import json
import sys
from dataclasses import dataclass, field
from itertools import chain

if "--without_aiayn" in sys.argv:
    assert "--then" not in sys.argv, "--without_aiayn runs alone"
    sys.argv.remove("--without_aiayn")
    sys.modules["aiayn"] = None

import torch  # noqa: E402
from datasets import load_dataset  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.models.auto import modeling_auto  # noqa: E402


@dataclass
class ScriptArguments:
    model_name_or_path: str
    train_file: str
    block_size: int
    trust_remote_code: bool = field(default=False)


def main(argv: list[str]) -> dict:
    if "--with_aiayn" in argv:
        argv.remove("--with_aiayn")
        import aiayn  # noqa: F401

    parser = HfArgumentParser((ScriptArguments, TrainingArguments))
    script_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    set_seed(training_args.seed)
    raw_datasets = load_dataset("text", data_files={"train": script_args.train_file}, keep_linebreaks=True)
    remote = {"trust_remote_code": script_args.trust_remote_code}
    config = AutoConfig.from_pretrained(script_args.model_name_or_path, **remote)
    tokenizer = AutoTokenizer.from_pretrained(script_args.model_name_or_path, **remote)
    model = AutoModelForCausalLM.from_pretrained(script_args.model_name_or_path, config=config, **remote)
    block_size = script_args.block_size

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = (len(concatenated["input_ids"]) // block_size) * block_size
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)] for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    tokenized = raw_datasets.map(lambda examples: tokenizer(examples["text"]), batched=True, remove_columns=["text"])
    train_dataset = tokenized.map(group_texts, batched=True)["train"]
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )
    trainer.train()
    trainer.save_model()

    model.eval()
    blocks = torch.tensor(train_dataset["input_ids"])
    with torch.no_grad():
        predicted = model(input_ids=blocks).logits.argmax(-1)
    result = {
        "model_class": f"{type(model).__module__}.{type(model).__name__}",
        "next_token_accuracy": (predicted[:, :-1] == blocks[:, 1:]).float().mean().item(),
        "copying": (predicted == blocks).float().mean().item(),
        # The model types of transformers' tables of class names that name an aiayn class.
        "aiayn_entries": sorted(
            {
                model_type
                for name, table in vars(modeling_auto).items()
                if name.endswith("_MAPPING_NAMES") and isinstance(table, dict)
                for model_type, class_name in table.items()
                if isinstance(class_name, str) and class_name.startswith("Aiayn")
            }
        ),
    }
    return result


if __name__ == "__main__":
    command_lines = [[]]
    for argument in sys.argv[1:]:
        if argument == "--then":
            command_lines.append([])
        else:
            command_lines[-1].append(argument)
    print("RESULT " + json.dumps([main(argv) for argv in command_lines]))
