"""Every flag of transformers' example scripts is a flag of the matching `aiayn train` task, with its meaning, or
refused by name with the reason; and the flags implemented for them do what the scripts' do."""

import argparse
import ast
import functools
import os
import types

import datasets
import pytest
import transformers
from helpers import example_scripts

from aiayn.tasks import TASKS
from aiayn.train_arguments import EXAMPLE_SCRIPT_FLAGS, REFUSED_FLAGS, DataArguments, RefusedFlag, task_parser

TASK_OF_SCRIPT = {task.script: name for name, task in TASKS.items() if task.script}
# The folders of transformers' examples/pytorch that hold each script.
SCRIPT_FOLDERS = {
    "run_clm": "language-modeling",
    "run_mlm": "language-modeling",
    "run_classification": "text-classification",
    "run_ner": "token-classification",
    "run_qa": "question-answering",
    "run_swag": "multiple-choice",
    "run_summarization": "summarization",
    "run_translation": "translation",
    "run_image_classification": "image-classification",
}
SCRIPT_FLAGS = [(script, flag) for script, flags in EXAMPLE_SCRIPT_FLAGS.items() for flag in flags]


@functools.cache
def parser_of(task: str) -> argparse.ArgumentParser:
    return task_parser(task)


def accepting_action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    """The action of `--flag` where the parser takes it, None where it refuses it or does not know it."""
    action = parser._option_string_actions.get(f"--{flag}")
    return None if action is None or isinstance(action, RefusedFlag) else action


def sample_value(action: argparse.Action) -> tuple[str, object]:
    """A value to give the flag on the command line, and what the parser makes of it."""
    if action.type is int:
        return "3", 3
    if action.type is float:
        return "0.25", 0.25
    if action.type is str or action.type is None:
        return "somewhere", "somewhere"
    return "false", False  # transformers' string_to_bool


def test_every_example_script_has_its_task():
    assert set(EXAMPLE_SCRIPT_FLAGS) == set(SCRIPT_FOLDERS)
    assert set(EXAMPLE_SCRIPT_FLAGS) <= set(TASK_OF_SCRIPT)


@pytest.mark.parametrize(("script", "flag"), SCRIPT_FLAGS, ids=[f"{s}-{f}" for s, f in SCRIPT_FLAGS])
def test_each_flag_of_the_example_scripts_is_accepted_or_refused_with_its_reason(script, flag, capsys):
    parser = parser_of(TASK_OF_SCRIPT[script])
    action = accepting_action(parser, flag)
    if action is not None:
        assert flag not in REFUSED_FLAGS, f"--{flag} is taken by {TASK_OF_SCRIPT[script]} and refused in REFUSED_FLAGS"
        text, value = sample_value(action)
        assert getattr(parser.parse_args([f"--{flag}", text]), action.dest) == value
        assert action.help and action.help != argparse.SUPPRESS, f"--{flag} has no help"
        return
    assert flag in REFUSED_FLAGS, f"--{flag} of {script} is neither a flag of {TASK_OF_SCRIPT[script]} nor refused"
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([f"--{flag}", "1"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"--{flag} is not supported: {REFUSED_FLAGS[flag]}." in error, error


def script_flags(folder: str) -> dict[str, tuple[str, ...]]:
    """The fields of each script's argument dataclasses (the classes decorated with `@dataclass`), in order."""
    flags = {}
    for script, subfolder in SCRIPT_FOLDERS.items():
        with open(os.path.join(folder, subfolder, f"{script}.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        names = []
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                names += [item.target.id for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]  # fmt: skip
        flags[script] = tuple(names)
    return flags


def test_the_flags_are_those_of_transformers_example_scripts():
    assert script_flags(example_scripts()) == EXAMPLE_SCRIPT_FLAGS


def test_the_scripts_defaults_are_the_tasks():
    defaults = {task: parser_of(task).parse_args([]) for task in TASKS}
    assert defaults["classification"].pad_to_max_length is True  # run_classification's default
    assert defaults["question-answering"].pad_to_max_length is True
    assert defaults["token-classification"].pad_to_max_length is False
    assert defaults["summarization"].num_beams == 1
    assert defaults["translation"].num_beams is None  # the paper's models decode with their generation config's 4
    assert defaults["summarization"].ignore_pad_token_for_loss is True
    assert defaults["image-classification"].image_column == "image"
    assert defaults["image-classification"].validation_split_percentage == 15  # --train_val_split 0.15
    assert defaults["causal-lm"].validation_split_percentage == 5


@functools.cache
def tokenizer_of(family: str):
    from aiayn.tokenization import train_tokenizer

    texts = ["the cat sat on the mat", "a dog ran in the park today", "Anna met Ben in Paris"] * 20
    return train_tokenizer(family, texts, 80, num_sentinels=2)


def lengths(split: datasets.Dataset, column: str = "input_ids") -> set[int]:
    return {len(ids) for ids in split[column]}


def test_pad_to_max_length_pads_each_example_to_the_length_flag():
    from aiayn.tasks import classification, multiple_choice, token_classification

    tokenizer = tokenizer_of("encoder")
    model = types.SimpleNamespace(config=types.SimpleNamespace(label2id={"a": 0, "b": 1, "O": 0, "B-PER": 1}))
    texts = {"text": ["the cat", "a dog ran in the park today"], "label": ["a", "b"]}
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict(texts))
    for pad, expected in ((True, {16}), (False, {4, 9})):
        data_args = DataArguments(text_column="text", label_column="label", block_size=16, pad_to_max_length=pad)
        assert lengths(classification.classification_dataset(corpus, tokenizer, model, data_args)["train"]) == expected
    words = {
        "tokens": [["Anna", "met"], ["Ben", "in", "the", "park"]],
        "tags": [["B-PER", "O"], ["B-PER"] + ["O"] * 3],
    }
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict(words))
    data_args = DataArguments(text_column="tokens", label_column="tags", block_size=12, pad_to_max_length=True)
    tagged = token_classification.token_classification_dataset(corpus, tokenizer, model, data_args)["train"]
    assert lengths(tagged) == lengths(tagged, "labels") == {12}
    assert tagged[0]["labels"][-1] == -100  # padding is not scored
    swag = {"sent1": ["the cat", "a dog"], "sent2": ["sat", "ran"], "ending0": ["on", "in"],
            "ending1": ["the mat", "the park today"], "label": [0, 1]}  # fmt: skip
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict(swag))
    data_args = DataArguments(context_column="sent1", question_column="sent2", label_column="label", block_size=10,
                              pad_to_max_length=True)  # fmt: skip
    choices = multiple_choice.multiple_choice_dataset(corpus, tokenizer, model, data_args)["train"]
    assert {len(ids) for example in choices["input_ids"] for ids in example} == {10}


def test_pad_to_max_length_and_ignore_pad_token_for_loss_of_text_to_text():
    from aiayn.tasks import summarization

    tokenizer = tokenizer_of("seq2seq")
    texts = {"text": ["the cat sat on the mat", "a dog"], "summary": ["a cat", "a dog ran in the park today"]}
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict(texts))
    for ignore, label_pad in ((True, -100), (False, tokenizer.pad_token_id)):
        data_args = DataArguments(text_column="text", summary_column="summary", max_source_length=12,
                                  max_target_length=9, pad_to_max_length=True,
                                  ignore_pad_token_for_loss=ignore)  # fmt: skip
        split = summarization.summarization_dataset(corpus, tokenizer, None, data_args)["train"]
        assert lengths(split) == {12} and lengths(split, "labels") == {9}
        assert split[0]["labels"][-1] == label_pad
    unpadded = DataArguments(text_column="text", summary_column="summary", max_source_length=12, max_target_length=9)
    assert len(lengths(summarization.summarization_dataset(corpus, tokenizer, None, unpadded)["train"])) == 2


def test_ignore_pad_token_for_loss_false_keeps_the_pad_token_in_the_collated_labels():
    from aiayn.tasks.generation import seq2seq_collator

    tokenizer = tokenizer_of("seq2seq")
    features = [{"input_ids": [5, 6, 1], "labels": [7, 1]}, {"input_ids": [5, 1], "labels": [7, 8, 9, 1]}]
    kept = seq2seq_collator(tokenizer, None, DataArguments(ignore_pad_token_for_loss=False), 0)(features)
    assert kept["labels"][0].tolist() == [7, 1, tokenizer.pad_token_id, tokenizer.pad_token_id]
    ignored = seq2seq_collator(tokenizer, None, DataArguments(), 0)(features)
    assert ignored["labels"][0].tolist() == [7, 1, -100, -100]


def image_folders(root, count: int = 6) -> None:
    from PIL import Image

    for split in ("train", "validation"):
        for label in ("cats", "dogs"):
            (root / split / label).mkdir(parents=True)
            for i in range(count if split == "train" else 2):
                color = (i * 20, 0, 90 if label == "dogs" else 0)
                Image.new("RGB", (8, 8), color).save(root / split / label / f"{i}.png")


def test_image_flags_of_run_image_classification(tmp_path):
    from PIL import Image

    from aiayn.tasks.image_classification import image_classification_dataset
    from aiayn.training import load_data, resolve_columns

    parser = parser_of("image-classification")
    parsed = parser.parse_args(["--image_column_name", "img", "--image_processor_name", "saved/processor"])
    assert parsed.image_column == "img" and parsed.tokenizer_name == "saved/processor"
    with pytest.raises(SystemExit):
        parser_of("classification").parse_args(["--image_processor_name", "saved/processor"])

    images = [Image.new("RGB", (8, 8), (i * 40, 0, 0)) for i in range(4)]
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    split = datasets.Dataset.from_dict({"img": images, "label": [0, 1, 0, 1]}, features=features)
    corpus = datasets.DatasetDict(train=split, validation=split)
    with pytest.raises(ValueError, match="'image'"):
        resolve_columns("image-classification", corpus, DataArguments())
    data_args = resolve_columns("image-classification", corpus, DataArguments(image_column="img"))
    processor = transformers.ViTImageProcessor(size={"height": 8, "width": 8})
    processed = image_classification_dataset(corpus, processor, None, data_args)
    assert tuple(processed["train"][:]["pixel_values"].shape) == (4, 3, 8, 8)

    image_folders(tmp_path)
    both = load_data("image-classification", DataArguments(train_dir=str(tmp_path / "train"),
                                                           validation_dir=str(tmp_path / "validation")))  # fmt: skip
    assert both["train"].num_rows == 12 and both["validation"].num_rows == 4
    assert both["train"].features["label"].names == both["validation"].features["label"].names == ["cats", "dogs"]
    split_off = DataArguments(train_dir=str(tmp_path / "train"), train_val_split=0.25)
    held_out = load_data("image-classification", split_off)
    assert held_out["train"].num_rows == 9 and held_out["validation"].num_rows == 3
    with pytest.raises(ValueError, match="--validation_dir needs --train_dir"):
        load_data("image-classification", DataArguments(validation_dir=str(tmp_path / "validation")))


def test_a_new_image_model_from_config_name_and_image_processor_name(tmp_path):
    import aiayn
    from aiayn.train_arguments import ModelArguments
    from aiayn.training import load_model_and_image_processor

    aiayn.preset_config("tiny-vision", d_model=48, image_size=16).save_pretrained(tmp_path / "config")
    transformers.ViTImageProcessor(size={"height": 12, "width": 12}).save_pretrained(tmp_path / "processor")
    model_args = ModelArguments(config_name=str(tmp_path / "config"), tokenizer_name=str(tmp_path / "processor"))
    auto_class = transformers.AutoModelForImageClassification
    model, processor = load_model_and_image_processor(auto_class, model_args, {}, num_labels=3)
    assert (model.config.d_model, model.config.image_size, model.config.num_labels) == (48, 16, 3)
    assert processor.size["height"] == 12
