"""Training with transformers' `Trainer` and `Seq2SeqTrainer`: the arguments and the task runners behind the
scripts in `scripts/` and `aiayn demo`, in the conventions of transformers' example scripts (run_clm, run_mlm,
run_translation, run_t5_mlm).

Tasks (`aiayn train --help`): `causal-lm` (decoder family), `masked-lm` (encoder), `translation` (seq2seq),
`span-corruption` (seq2seq pretraining, T5's objective), `classification` (any family), `token-classification`,
`question-answering`, `multiple-choice`, `summarization` (text to text) and the image tasks. Each run loads the data
(`aiayn.data`), draws its samples (a seeded shuffle, stratified by label), loads or trains a tokenizer
(`aiayn.tokenization`), builds a model from a preset or loads one, trains, evaluates beside a baseline that learns
nothing (`aiayn.baselines`) and saves a folder that loads through the Auto classes. Each task is an entry of `TASKS`,
which names its columns, its preprocessing, its collator, its trainer class, its metrics and its baseline; the tasks
beyond language modelling, translation and classification are in `aiayn.head_tasks`.

`--paper_recipe` applies the paper's training recipe (`PaperRecipe`, sections 5.3 and 5.4). Dropout is the preset's
(the paper's P_drop: 0.1 for `transformer-base`, 0.3 for `transformer-big`).
"""

import collections
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain

import datasets
import numpy as np
import torch
import transformers
from transformers import (
    AutoImageProcessor,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    DataCollatorForSeq2Seq,
    DataCollatorWithPadding,
    DefaultDataCollator,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
)

from . import head_tasks
from .baselines import (
    copy_source_scores,
    language_model_baselines,
    majority_accuracy,
    masked_lm_baselines,
    median_pixel_error,
    unigram_cross_entropy,
)
from .collators import (
    DataCollatorForMaskedImageModeling,
    DataCollatorForSpanCorruption,
    DataCollatorSeededByBatch,
    span_corruption_lengths,
)
from .configuration_aiayn import preset_config
from .data import load_corpus, load_files, with_validation
from .heads_aiayn import AiaynLanguageModel
from .hub import head_of
from .metrics import Accuracy, ChrF, SacreBleu, perplexity
from .tokenization import config_token_fields, train_tokenizer

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """Which model to train: a saved one (`model_name_or_path`) or a new one from a preset."""

    _argument_group_name = "model"

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A folder saved by save_pretrained to fine-tune; otherwise --preset is built."}
    )
    preset: str | None = field(
        default=None, metadata={"help": "The preset of a new model (see `aiayn presets`); default: the task's."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Config fields over the preset's, e.g. 'd_model=256,num_layers=4,dropout=0.2'; with "
            "--model_name_or_path, over the saved config's (e.g. the dropout of fine-tuning)."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "A folder with a saved tokenizer; otherwise the model's, or a new one."}
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of a tokenizer trained on the data."})
    attn_implementation: str | None = field(default=None, metadata={"help": "eager, sdpa, flex_attention, ..."})
    paper_recipe: bool = field(
        default=False,
        metadata={"help": "The paper's Adam, inverse-sqrt schedule (4000 warmup steps unless --warmup_steps is given) "
                  "and label smoothing (sections 5.3, 5.4); dropout stays the preset's."},
    )  # fmt: skip


@dataclass
class DataArguments:
    """Which data to train on and how to cut it. A flag that means what a flag of transformers' example scripts
    means also answers to that script's name (`--train_file`, `--text_column_name`, `--max_seq_length`, ...)."""

    _argument_group_name = "data"

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A built-in corpus (shakespeare, shakespeare-genres, bible-en-de, pydoc, digits), a "
                  ".txt/.csv/.json/.jsonl/.parquet file, a folder saved with save_to_disk, a folder of images by "
                  "class, or a hub dataset; defaults to the task's corpus."},
    )  # fmt: skip
    dataset_config_name: str | None = field(default=None, metadata={"help": "Configuration of a hub dataset."})
    validation_split_percentage: int = field(
        default=5, metadata={"help": "Percent of the training data held out for validation where there is none."}
    )
    train_file: str | None = field(
        default=None, metadata={"help": "A .txt/.csv/.json/.jsonl/.parquet file of training examples."}
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "The validation examples (default: a seeded twentieth of the training file)."}
    )
    text_column: str | None = field(
        default=None,
        metadata={"help": "Column of the text (a list of words for token classification, the source for "
                  "summarization); default: the task's usual name.", "aliases": ["--text_column_name"]},
    )  # fmt: skip
    label_column: str | None = field(
        default=None,
        metadata={"help": "Column of the class (classification), the tags (token classification) or the right "
                  "ending (multiple choice); default: the task's usual name.", "aliases": ["--label_column_name"]},
    )  # fmt: skip
    question_column: str | None = field(
        default=None,
        metadata={"help": "Column of the question (question answering) or of the answer's start (multiple choice).",
                  "aliases": ["--question_column_name"]},
    )  # fmt: skip
    context_column: str | None = field(
        default=None,
        metadata={"help": "Column of the context (question answering, multiple choice).",
                  "aliases": ["--context_column_name"]},
    )  # fmt: skip
    answer_column: str | None = field(
        default=None,
        metadata={"help": "Column of the answers, {text: [...], answer_start: [...]} (question answering).",
                  "aliases": ["--answer_column_name"]},
    )  # fmt: skip
    summary_column: str | None = field(
        default=None,
        metadata={"help": "Column of the target text (summarization)."},
    )
    source_lang: str = field(default="en", metadata={"help": "Source language key of the `translation` column."})
    target_lang: str = field(default="de", metadata={"help": "Target language key of the `translation` column."})
    source_prefix: str = field(default="", metadata={"help": "Text put before every source (e.g. 'summarize: ')."})
    block_size: int = field(
        default=128,
        metadata={"help": "Tokens per training block (language modelling), or per example (classification, token "
                  "classification, question answering windows, multiple choice).", "aliases": ["--max_seq_length"]},
    )  # fmt: skip
    doc_stride: int = field(
        default=32,
        metadata={
            "help": "Tokens shared by the overlapping windows of a long context (question answering; run_qa "
            "takes 128 of 384)."
        },
    )
    n_best_size: int = field(
        default=20, metadata={"help": "Start and end tokens tried per window (question answering)."}
    )
    max_answer_length: int = field(default=30, metadata={"help": "Tokens of the longest answer (question answering)."})
    max_source_length: int = field(default=128, metadata={"help": "Source tokens kept per example."})
    max_target_length: int = field(default=128, metadata={"help": "Target tokens kept per example."})
    max_pair_tokens: int | None = field(
        default=None, metadata={"help": "Translation: leave out pairs with more tokens than this on either side."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked for masked LM."})
    mask_ratio: float = field(default=0.5, metadata={"help": "Share of patches masked (masked-image modelling)."})
    noise_density: float = field(default=0.15, metadata={"help": "Share of tokens corrupted (span corruption)."})
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "Mean corrupted span length."})
    max_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train on this many examples, drawn by a seeded shuffle (--seed), stratified by label "
                  "where there are labels."},
    )  # fmt: skip
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on this many examples, drawn as --max_train_samples are."}
    )
    tokenizer_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train a new tokenizer on this many training examples, every k-th of the split (all when "
                  "unset); the Unigram trainer's time grows with the text it reads."},
    )  # fmt: skip


# The data flags every task reads; each task adds its own (`Task.data_fields`).
COMMON_DATA_FIELDS = (
    "dataset_name", "dataset_config_name", "train_file", "validation_file", "validation_split_percentage",
    "max_train_samples", "max_eval_samples", "tokenizer_train_samples",
)  # fmt: skip


def parse_overrides(text: str | None) -> dict:
    """`'d_model=256,dropout=0.2,norm_first=true,hidden_act=silu'` as a dict of typed config fields."""
    fields = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, separator, value = (part.strip() for part in item.partition("="))
        if not separator:
            raise ValueError(f"config override {item!r} is not of the form key=value.")
        try:
            fields[key] = json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
        except json.JSONDecodeError:
            fields[key] = value
    return fields


@dataclass(frozen=True)
class PaperRecipe:
    """The paper's training recipe (sections 5.3 and 5.4) as `TrainingArguments` fields.

    Adam with beta1 = 0.9, beta2 = 0.98 and eps = 1e-9, no weight decay, label smoothing `label_smoothing` (0.1), and
    eq. (3)'s learning rate, `lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`: transformers'
    `inverse_sqrt` schedule, which rises linearly over `warmup_steps` to its peak and then falls as `step^-0.5`, with
    the peak `d_model^-0.5 * warmup_steps^-0.5` (eq. (3) at `step = warmup_steps`) unless `peak_learning_rate` is
    given. Shorter runs keep the shape and scale `warmup_steps` and `peak_learning_rate`.

    Attributes:
        warmup_steps: Steps of the linear warm-up (the paper: 4000).
        peak_learning_rate: The learning rate at the end of the warm-up; None: eq. (3)'s, from `d_model`.
        label_smoothing: The label-smoothing factor (the paper: 0.1).

    Examples:
        >>> round(PaperRecipe().training_arguments(d_model=512)["learning_rate"], 6)
        0.000699
    """

    warmup_steps: int = 4000
    peak_learning_rate: float | None = None
    label_smoothing: float = 0.1

    def training_arguments(self, d_model: int | None = None) -> dict:
        """The `TrainingArguments` fields of the recipe; `d_model` gives the peak when `peak_learning_rate` is None."""
        if self.peak_learning_rate is None and d_model is None:
            raise ValueError("The paper's peak learning rate needs d_model when peak_learning_rate is not given.")
        peak = self.peak_learning_rate
        if peak is None:
            peak = d_model**-0.5 * self.warmup_steps**-0.5
        return {
            "learning_rate": peak,
            "warmup_steps": self.warmup_steps,
            "lr_scheduler_type": "inverse_sqrt",
            "adam_beta1": 0.9,
            "adam_beta2": 0.98,
            "adam_epsilon": 1e-9,
            "weight_decay": 0.0,
            "label_smoothing_factor": self.label_smoothing,
        }

    def apply(self, training_args: transformers.TrainingArguments, model: transformers.PreTrainedModel) -> None:
        """Sets the recipe for training `model` (its width, `config.hidden_size`, gives the peak when
        `peak_learning_rate` is None), before the `Trainer` is built: the optimizer and schedule on `training_args`,
        and the label smoothing where the loss is computed. An aiayn language model smooths its own loss
        (`config.label_smoothing`), computed without the batch's logits; for any other model the Trainer's
        `label_smoothing_factor` smooths the logits."""
        fields = self.training_arguments(model.config.hidden_size if self.peak_learning_rate is None else None)
        if isinstance(model, AiaynLanguageModel):
            model.config.label_smoothing = fields["label_smoothing_factor"]
            fields["label_smoothing_factor"] = 0.0
        for name, value in fields.items():
            setattr(training_args, name, value)


def _texts(examples, data_args: DataArguments, pairs: bool) -> Iterator[str]:
    """The text of a dataset or batch: both sides of translation pairs (`pairs`), else the text column."""
    columns = examples.column_names if isinstance(examples, datasets.Dataset) else examples
    if pairs and "translation" in columns:
        for pair in examples["translation"]:
            yield pair[data_args.source_lang]
            yield pair[data_args.target_lang]
    else:
        yield from examples[data_args.text_column]


def _column_texts(dataset: datasets.Dataset, data_args: DataArguments) -> Iterator[str]:
    return _texts(dataset, data_args, pairs=False)


def _pair_texts(dataset: datasets.Dataset, data_args: DataArguments) -> Iterator[str]:
    return _texts(dataset, data_args, pairs=True)


def sample(dataset: datasets.Dataset, count: int | None, seed: int, label_column: str | None = None):
    """At most `count` examples of `dataset` drawn by a shuffle seeded with `seed` (never its first rows, which a file
    ordered by class or by source would make one-sided), stratified by `label_column` where given: each class keeps
    its share, rounded by largest remainder. The chosen rows keep their order."""
    if count is None or count >= len(dataset):
        return dataset
    generator = np.random.default_rng(seed)
    if label_column is None:
        return dataset.select(sorted(generator.permutation(len(dataset))[:count].tolist()))
    classes = collections.defaultdict(list)
    for index, label in enumerate(dataset[label_column]):
        classes[label].append(index)
    labels = sorted(classes, key=str)
    shares = [count * len(classes[label]) / len(dataset) for label in labels]
    quotas = [math.floor(share) for share in shares]
    by_remainder = sorted(range(len(labels)), key=lambda i: quotas[i] - shares[i])
    for i in by_remainder[: count - sum(quotas)]:
        quotas[i] += 1
    chosen = [i for label, quota in zip(labels, quotas, strict=True)
              for i in generator.permutation(classes[label])[:quota].tolist()]  # fmt: skip
    return dataset.select(sorted(chosen))


def _spread(dataset: datasets.Dataset, count: int | None) -> datasets.Dataset:
    """At most `count` examples spread evenly over `dataset` (every k-th), or all of it."""
    if count is None or count >= len(dataset):
        return dataset
    return dataset.select(range(0, len(dataset), math.ceil(len(dataset) / count)))


def load_model_and_tokenizer(task: str, model_args: ModelArguments, corpus: datasets.DatasetDict, data_args, **fields):
    """The tokenizer (saved, the model's, or trained on the training split) and the model (loaded, or built from the
    preset with the tokenizer's vocabulary and special tokens, the overrides and `fields`). Image tasks take an image
    processor instead (`load_model_and_image_processor`)."""
    tokenizer_source = model_args.tokenizer_name or model_args.model_name_or_path
    auto_class = TASKS[task].auto_class
    kwargs = {"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}
    if TASKS[task].family == "vision":
        return load_model_and_image_processor(auto_class, model_args, kwargs, **fields)
    if model_args.model_name_or_path is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        overrides = parse_overrides(model_args.config_overrides)
        model = auto_class.from_pretrained(model_args.model_name_or_path, **overrides, **fields, **kwargs)
        return model, tokenizer
    preset = model_args.preset or TASKS[task].preset
    family = TASKS[task].family or preset_config(preset).model_type.removeprefix("aiayn_")
    if tokenizer_source is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    else:
        texts = TASKS[task].texts(_spread(corpus["train"], data_args.tokenizer_train_samples), data_args)
        tokenizer = train_tokenizer(family, texts, model_args.vocab_size)
    overrides = parse_overrides(model_args.config_overrides)
    config = preset_config(preset, **{**config_token_fields(tokenizer, family), **overrides, **fields})
    if config.model_type != f"aiayn_{family}":
        raise ValueError(f"The {task} task needs a {family} preset; {preset!r} is a {config.model_type}.")
    return auto_class.from_config(config, **kwargs), tokenizer


def load_model_and_image_processor(auto_class, model_args: ModelArguments, kwargs: dict, **fields):
    """A saved model and its folder's image processor, or a new model from the preset and transformers' ViT image
    processor at its image size (resizing, scaling to [0, 1], normalising by mean and deviation 0.5)."""
    if model_args.model_name_or_path is not None:
        processor = AutoImageProcessor.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path)
        overrides = parse_overrides(model_args.config_overrides)
        return auto_class.from_pretrained(model_args.model_name_or_path, **overrides, **fields, **kwargs), processor
    preset = model_args.preset or "tiny-vision"
    config = preset_config(preset, **{**parse_overrides(model_args.config_overrides), **fields})
    if config.model_type != "aiayn_vision":
        raise ValueError(f"Image tasks need a vision preset; {preset!r} is a {config.model_type}.")
    # Resolved here, not at import: without torchvision, transformers warns on resolving the name that it falls back
    # to the PIL processor, which every `aiayn` command would print.
    processor = transformers.ViTImageProcessor(size={"height": config.image_size, "width": config.image_size})
    return auto_class.from_config(config, **kwargs), processor


def group_texts(examples: dict, block_size: int) -> dict:
    """Concatenates tokenized texts and cuts them into blocks of `block_size` tokens (the remainder is dropped)."""
    concatenated = {key: list(chain(*examples[key])) for key in examples}
    total = len(concatenated["input_ids"]) // block_size * block_size
    return {
        key: [value[i : i + block_size] for i in range(0, total, block_size)] for key, value in concatenated.items()
    }


def _language_model_blocks(corpus, tokenizer, data_args, block_size: int, append_eos: bool) -> datasets.DatasetDict:
    def tokenize(examples):
        texts = examples[data_args.text_column]
        if append_eos:  # documents are separated by EOS in the token stream
            texts = [text + tokenizer.eos_token for text in texts]
        return tokenizer(texts, return_attention_mask=False)

    columns = next(iter(corpus.values())).column_names  # any split: the held-out one alone is prepared too
    tokenized = corpus.map(tokenize, batched=True, remove_columns=columns, desc="Tokenizing")
    return tokenized.map(lambda e: group_texts(e, block_size), batched=True, desc=f"Grouping into {block_size}")


# Preprocessing: (corpus, tokenizer, model, data arguments) -> the tokenized train and validation splits.


def _causal_lm_dataset(corpus, tokenizer, model, data_args: DataArguments) -> datasets.DatasetDict:
    return _language_model_blocks(corpus, tokenizer, data_args, data_args.block_size, append_eos=True)


def _masked_lm_dataset(corpus, tokenizer, model, data_args: DataArguments) -> datasets.DatasetDict:
    return _language_model_blocks(corpus, tokenizer, data_args, data_args.block_size, append_eos=False)


def _span_corruption_dataset(corpus, tokenizer, model, data_args: DataArguments) -> datasets.DatasetDict:
    """Blocks of the length whose corrupted input is `max_source_length` tokens; pairs are read as plain text."""
    tokens_length, _ = span_corruption_lengths(
        data_args.max_source_length, data_args.noise_density, data_args.mean_noise_span_length
    )
    if "translation" in corpus["train"].column_names:  # pretraining reads both languages as plain text
        corpus = corpus.map(lambda e: {data_args.text_column: list(_texts(e, data_args, pairs=True))}, batched=True,
                            remove_columns=corpus["train"].column_names)  # fmt: skip
    return _language_model_blocks(corpus, tokenizer, data_args, tokens_length, append_eos=False)


def _translation_dataset(corpus, tokenizer, model, data_args: DataArguments) -> datasets.DatasetDict:
    """Source tokens as inputs, target tokens as labels; pairs longer than `max_pair_tokens` left out."""
    source, target = data_args.source_lang, data_args.target_lang

    def tokenize(examples):
        pairs = examples["translation"]
        encoded = tokenizer([p[source] for p in pairs], max_length=data_args.max_source_length, truncation=True)
        targets = [pair[target] for pair in pairs]
        encoded["labels"] = tokenizer(text_target=targets, max_length=data_args.max_target_length, truncation=True)[
            "input_ids"
        ]
        return encoded

    dataset = corpus.map(tokenize, batched=True, remove_columns=corpus["train"].column_names, desc="Tokenizing")
    if data_args.max_pair_tokens is not None:
        limit = data_args.max_pair_tokens
        dataset = dataset.filter(lambda e: len(e["input_ids"]) <= limit and len(e["labels"]) <= limit)
    return dataset


def _classification_dataset(corpus, tokenizer, model, data_args: DataArguments) -> datasets.DatasetDict:
    label2id = {str(label): index for label, index in model.config.label2id.items()}

    def tokenize(examples):
        encoded = tokenizer(examples[data_args.text_column], max_length=data_args.block_size, truncation=True)
        encoded["labels"] = [label2id[str(label)] for label in examples[data_args.label_column]]
        return encoded

    return corpus.map(tokenize, batched=True, remove_columns=corpus["train"].column_names, desc="Tokenizing")


def _image_dataset(corpus, processor, model, data_args: DataArguments, keep_labels: bool) -> datasets.DatasetDict:
    """`pixel_values` from the image processor; the labels where the task scores them."""

    def process(examples):
        processed = {"pixel_values": processor(examples["image"], return_tensors="np")["pixel_values"]}
        if keep_labels:
            processed["labels"] = examples[data_args.label_column]
        return processed

    processed = corpus.map(process, batched=True, remove_columns=corpus["train"].column_names, desc="Processing")
    # As a fixed-shape array column, a batch of images becomes one tensor; as nested lists (what `map` stores), the
    # torch formatter builds a tensor per pixel, which took most of a small ViT's training step.
    shape = tuple(processed["train"].with_format("numpy")[0]["pixel_values"].shape)
    processed = processed.cast_column("pixel_values", datasets.Array3D(shape, "float32"))
    return processed.with_format("torch")


def _image_classification_dataset(corpus, processor, model, data_args: DataArguments) -> datasets.DatasetDict:
    return _image_dataset(corpus, processor, model, data_args, keep_labels=True)


def _masked_image_dataset(corpus, processor, model, data_args: DataArguments) -> datasets.DatasetDict:
    return _image_dataset(corpus, processor, model, data_args, keep_labels=False)


def _image_class_labels(corpus: datasets.DatasetDict, data_args: DataArguments) -> dict:
    """The config fields of a classifier of the label column's classes (a `ClassLabel` feature)."""
    names = corpus["train"].features[data_args.label_column].names
    return {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}


def _class_labels(corpus: datasets.DatasetDict, data_args: DataArguments) -> dict:
    """The config fields of a classifier of the label column's values (as strings, sorted); a label column that does
    not hold classes (strings, integers or booleans) is an error that names it."""
    feature = corpus["train"].features[data_args.label_column]
    dtype = str(getattr(feature, "dtype", ""))
    classes = isinstance(feature, datasets.ClassLabel) or dtype.startswith(("string", "large_string", "int", "bool"))
    if not classes:
        raise ValueError(
            f"Classification needs classes (strings, integers or booleans) in the label column "
            f"{data_args.label_column!r}; it holds {feature}."
        )
    labels = sorted({str(label) for split in corpus.values() for label in split[data_args.label_column]})
    return {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}


def _no_config_fields(corpus: datasets.DatasetDict, data_args: DataArguments) -> dict:
    return {}


# Collators: (tokenizer, model, data arguments, seed) -> the batches' collator.


def _causal_lm_collator(tokenizer, model, data_args: DataArguments, seed: int):
    return DataCollatorForLanguageModeling(tokenizer, mlm=False)


def _masked_lm_collator(tokenizer, model, data_args: DataArguments, seed: int):
    masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=data_args.mlm_probability)
    return DataCollatorSeededByBatch(masking, seed)


def _span_corruption_collator(tokenizer, model, data_args: DataArguments, seed: int):
    return DataCollatorForSpanCorruption(
        tokenizer, data_args.noise_density, data_args.mean_noise_span_length, seed, model
    )


def _translation_collator(tokenizer, model, data_args: DataArguments, seed: int):
    return DataCollatorForSeq2Seq(tokenizer, model=model)


def _classification_collator(tokenizer, model, data_args: DataArguments, seed: int):
    return DataCollatorWithPadding(tokenizer)


def _image_classification_collator(processor, model, data_args: DataArguments, seed: int):
    return DefaultDataCollator()


def _masked_image_collator(processor, model, data_args: DataArguments, seed: int):
    return DataCollatorForMaskedImageModeling(model.config.grid_size**2, data_args.mask_ratio, seed)


# Metrics: (tokenizer, training arguments, model, data, prepared data, data arguments) -> the Trainer's metric
# arguments.


def _masked_accuracy(eval_prediction) -> dict:
    predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
    selected = labels != -100
    return Accuracy().compute(predictions=predictions[selected], references=labels[selected])


def _argmax_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


def _translation_scores(tokenizer) -> Callable:
    def compute(eval_prediction) -> dict:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        predictions = predictions.clip(min=0)  # generated sequences are padded with -100 by the trainer
        labels = labels.clip(min=0).copy()
        labels[eval_prediction.label_ids == -100] = tokenizer.pad_token_id
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [[text.strip()] for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = SacreBleu().compute(predictions=hypotheses, references=references)
        return {"bleu": scores["bleu"], "chrf": ChrF().compute(predictions=hypotheses, references=references)["chrf"]}

    return compute


def _classification_accuracy(eval_prediction) -> dict:
    predictions = eval_prediction.predictions.argmax(-1)
    return Accuracy().compute(predictions=predictions, references=eval_prediction.label_ids)


def _no_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    return {}


def _masked_lm_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    """Accuracy on the masked tokens, from the logits' argmax (not the logits) kept per batch."""
    return {"compute_metrics": _masked_accuracy, "preprocess_logits_for_metrics": _argmax_logits}


def _translation_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    """BLEU and chrF of the generated translations, where the evaluation generates (`predict_with_generate`)."""
    generates = getattr(training_args, "predict_with_generate", False)
    return {"compute_metrics": _translation_scores(tokenizer)} if generates else {}


def _classification_metrics(tokenizer, training_args, model, corpus, dataset, data_args) -> dict:
    return {"compute_metrics": _classification_accuracy}


# Baselines: (trainer, data, data arguments) -> what a model that learns nothing scores, as `eval_baseline_<metric>`.


def _named(scores: dict) -> dict:
    return {key.replace("eval_", "eval_baseline_", 1): value for key, value in scores.items()}


def _no_baseline(trainer: Trainer, corpus, data_args: DataArguments) -> dict:
    return {}


def _class_baseline(trainer: Trainer, corpus, data_args: DataArguments) -> dict:
    """The most frequent training class: its accuracy, and the cross-entropy of the training classes' frequencies."""
    labels = tuple(list(split.with_format(None)["labels"]) for split in (trainer.train_dataset, trainer.eval_dataset))
    return {
        "eval_baseline_loss": unigram_cross_entropy(*labels, trainer.model.config.num_labels),
        "eval_baseline_accuracy": majority_accuracy(*labels),
    }


def _causal_lm_baseline(trainer: Trainer, corpus, data_args: DataArguments) -> dict:
    """The unigram model of the training tokens (every token of a block but the first is predicted)."""
    splits = (trainer.train_dataset, trainer.eval_dataset)
    tokens = ([token for ids in split["input_ids"] for token in ids[1:]] for split in splits)
    return _named(language_model_baselines(*tokens, trainer.model.config.vocab_size))


def _masked_lm_baseline(trainer: Trainer, corpus, data_args: DataArguments) -> dict:
    """The best context-free masked LM under the collator's masking (`aiayn.baselines.masked_lm_baselines`)."""
    special = set(trainer.processing_class.all_special_ids)  # never masked
    splits = (trainer.train_dataset, trainer.eval_dataset)
    tokens = ([t for ids in split["input_ids"] for t in ids if t not in special] for split in splits)
    masking = trainer.data_collator.collator
    return _named(masked_lm_baselines(*tokens, trainer.model.config.vocab_size, masking.mask_replace_prob,
                                      masking.random_replace_prob))  # fmt: skip


def _translation_baseline(trainer: Trainer, corpus, data_args: DataArguments) -> dict:
    """The unigram cross-entropy of the target tokens and, where the evaluation generates, the BLEU and chrF of each
    source copied as its own translation."""
    splits = (trainer.train_dataset, trainer.eval_dataset)
    train_targets, targets = ([[t for t in ids if t != -100] for ids in split["labels"]] for split in splits)
    flat = ([token for ids in split for token in ids] for split in (train_targets, targets))
    scores = {"eval_baseline_loss": unigram_cross_entropy(*flat, trainer.model.config.vocab_size)}
    if getattr(trainer.args, "predict_with_generate", False):
        decode = trainer.processing_class.batch_decode
        sources = decode(list(trainer.eval_dataset["input_ids"]), skip_special_tokens=True)
        references = decode(targets, skip_special_tokens=True)
        scores.update(_named(copy_source_scores([t.strip() for t in sources], [t.strip() for t in references])))
    return scores


def _masked_image_baseline(trainer: Trainer, corpus, data_args: DataArguments) -> dict:
    """Each masked pixel predicted by its median over the training images."""
    train, validation = (split.with_format("numpy")[:] for split in (trainer.train_dataset, trainer.eval_dataset))
    return {"eval_baseline_loss": median_pixel_error(train["pixel_values"], validation["pixel_values"])}


@dataclass(frozen=True)
class Task:
    """What a training task trains and with what: its help line, the family (None: the preset's or the loaded
    model's), the Auto class of its head, the bundled corpus it uses by default, the pipeline task its saved folder
    serves, the preprocessing that builds its dataset, its collator, its trainer class, its metrics and its baseline
    (what a model that learns nothing scores). `preset` is the preset of a new model unless `--preset` is given;
    `columns` the column roles it reads (`DataArguments` fields) with the names tried when the flag is not given;
    `data_fields` the further `DataArguments` flags it reads; `texts` the texts a new tokenizer learns from;
    `config_fields` config fields read off the corpus (a classifier's labels); `stratify` whether samples are drawn
    by label; `label_names` what the Trainer takes for labels where the head has no `labels` (it then scores the
    evaluation loss)."""

    help: str
    family: str | None
    auto_class: type
    dataset: str
    pipeline_task: str
    preprocess: Callable[..., datasets.DatasetDict]
    collator: Callable
    trainer_class: type[Trainer]
    metrics: Callable[..., dict]
    baseline: Callable[..., dict]
    preset: str
    columns: dict = field(default_factory=dict)
    data_fields: tuple[str, ...] = ()
    texts: Callable[[datasets.Dataset, DataArguments], Iterator[str]] = _column_texts
    config_fields: Callable[[datasets.DatasetDict, DataArguments], dict] = _no_config_fields
    stratify: bool = False
    label_names: tuple[str, ...] | None = None  # the Trainer's `label_names` where `labels` is not the target


TEXT = {"text_column": ("text",)}
LANGUAGE_MODEL_FIELDS = ("text_column", "block_size")
SEQ2SEQ_FIELDS = ("max_source_length", "max_target_length")
# task name -> Task(help, family, Auto class, default corpus, pipeline task, preprocessing, collator, trainer class,
# metrics, baseline, default preset, ...)
TASKS = {
    "causal-lm": Task(
        "GPT-style language model on text (run_clm)",
        "decoder", transformers.AutoModelForCausalLM, "shakespeare", "text-generation",
        _causal_lm_dataset, _causal_lm_collator, Trainer, _no_metrics, _causal_lm_baseline, "tiny-decoder",
        TEXT, LANGUAGE_MODEL_FIELDS,
    ),
    "masked-lm": Task(
        "BERT-style masked language model on text (run_mlm)",
        "encoder", transformers.AutoModelForMaskedLM, "shakespeare", "fill-mask",
        _masked_lm_dataset, _masked_lm_collator, Trainer, _masked_lm_metrics, _masked_lm_baseline, "tiny-encoder",
        TEXT, (*LANGUAGE_MODEL_FIELDS, "mlm_probability"),
    ),
    "translation": Task(
        "seq2seq model on translation pairs (run_translation)",
        "seq2seq", transformers.AutoModelForSeq2SeqLM, "bible-en-de", "translation",
        _translation_dataset, _translation_collator, Seq2SeqTrainer, _translation_metrics, _translation_baseline,
        "tiny", {}, ("source_lang", "target_lang", *SEQ2SEQ_FIELDS, "max_pair_tokens"), _pair_texts,
    ),
    "span-corruption": Task(
        "seq2seq pretraining by T5's span corruption (run_t5_mlm)",
        "seq2seq", transformers.AutoModelForSeq2SeqLM, "bible-en-de", "text2text-generation",
        _span_corruption_dataset, _span_corruption_collator, Seq2SeqTrainer, _no_metrics, _no_baseline, "tiny",
        {"text_column": ("translation", "text")},
        ("text_column", "source_lang", "target_lang", "max_source_length", "noise_density", "mean_noise_span_length"),
        _pair_texts,
    ),
    "classification": Task(
        "a class per text (run_classification)",
        None, transformers.AutoModelForSequenceClassification, "shakespeare", "text-classification",
        _classification_dataset, _classification_collator, Trainer, _classification_metrics, _class_baseline,
        "tiny-encoder", {"text_column": ("text", "sentence"), "label_column": ("label", "genre")},
        ("text_column", "label_column", "block_size"), config_fields=_class_labels, stratify=True,
    ),
    "token-classification": Task(
        "a tag per word, e.g. named entities (run_ner)",
        None, transformers.AutoModelForTokenClassification, "", "token-classification",
        head_tasks.token_classification_dataset, head_tasks.token_classification_collator, Trainer,
        head_tasks.token_classification_metrics, head_tasks.token_classification_baseline, "tiny-encoder",
        {"text_column": ("tokens", "words"), "label_column": ("ner_tags", "tags", "labels")},
        ("text_column", "label_column", "block_size"), head_tasks.token_texts, head_tasks.token_classification_fields,
    ),
    "question-answering": Task(
        "answer spans in SQuAD's format (run_qa)",
        None, transformers.AutoModelForQuestionAnswering, "", "question-answering",
        head_tasks.question_answering_dataset, head_tasks.question_answering_collator, Trainer,
        head_tasks.question_answering_metrics, head_tasks.question_answering_baseline, "tiny-encoder",
        {"question_column": ("question",), "context_column": ("context",), "answer_column": ("answers",)},
        ("question_column", "context_column", "answer_column", "block_size", "doc_stride", "n_best_size",
         "max_answer_length"), head_tasks.question_answering_texts,
    ),
    "multiple-choice": Task(
        "the right ending, SWAG-style (run_swag)",
        "encoder", transformers.AutoModelForMultipleChoice, "", "multiple-choice",
        head_tasks.multiple_choice_dataset, head_tasks.multiple_choice_collator, Trainer,
        head_tasks.multiple_choice_metrics, head_tasks.multiple_choice_baseline, "tiny-encoder",
        {"context_column": ("sent1", "context"), "question_column": ("sent2", "question"), "label_column": ("label",)},
        ("context_column", "question_column", "label_column", "block_size"), head_tasks.multiple_choice_texts,
        head_tasks.check_choice_labels, stratify=True,
    ),
    "summarization": Task(
        "source text to target text (run_summarization)",
        "seq2seq", transformers.AutoModelForSeq2SeqLM, "", "summarization",
        head_tasks.summarization_dataset, _translation_collator, Seq2SeqTrainer, head_tasks.summarization_metrics,
        head_tasks.summarization_baseline, "tiny",
        {"text_column": ("text", "document", "article", "source"),
         "summary_column": ("summary", "target", "highlights")},
        ("text_column", "summary_column", "source_prefix", *SEQ2SEQ_FIELDS), head_tasks.text_pair_texts,
    ),
    "image-classification": Task(
        "a class per image (run_image_classification)",
        "vision", transformers.AutoModelForImageClassification, "digits", "image-classification",
        _image_classification_dataset, _image_classification_collator, Trainer, _classification_metrics,
        _class_baseline, "tiny-vision", {"label_column": ("label",)}, ("label_column",),
        config_fields=_image_class_labels, stratify=True,
    ),
    "masked-image-modeling": Task(
        "ViT-style pretraining on masked patches (SimMIM)",
        "vision", transformers.AutoModelForMaskedImageModeling, "digits", "image-feature-extraction",
        _masked_image_dataset, _masked_image_collator, Trainer, _no_metrics, _masked_image_baseline, "tiny-vision",
        data_fields=("mask_ratio",), label_names=("bool_masked_pos",),
    ),
}  # fmt: skip


def load_data(task: str, data_args: DataArguments) -> datasets.DatasetDict:
    """The training and validation data: `--train_file` (and `--validation_file`), else `--dataset_name`, else the
    task's bundled corpus."""
    if data_args.train_file is not None:
        files = load_files(data_args.train_file, data_args.validation_file)
        return with_validation(files, data_args.validation_split_percentage / 100)
    name = data_args.dataset_name or TASKS[task].dataset
    if not name:
        raise ValueError(f"The {task} task has no bundled corpus; give --train_file or --dataset_name.")
    return load_corpus(name, data_args.dataset_config_name, data_args.validation_split_percentage / 100)


def resolve_columns(task: str, corpus: datasets.DatasetDict, data_args: DataArguments) -> DataArguments:
    """`data_args` with each column the task reads named: the flag's column, or the first of the task's usual names
    found; a column missing from a split is an error that lists the columns found."""
    chosen = {}
    for role, candidates in TASKS[task].columns.items():
        given = getattr(data_args, role)
        names = (given,) if given else candidates
        for split, dataset in corpus.items():
            found = dataset.column_names
            column = next((name for name in names if name in found), None)
            if column is None:
                wanted = " or ".join(repr(name) for name in names)
                raise ValueError(f"The {task} task reads a column {wanted} (--{role}); the {split} data's columns "
                                 f"are {found}.")  # fmt: skip
        chosen[role] = column
    return dataclasses.replace(data_args, **chosen)


def prepare(
    task: str,
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args,
    recipe: PaperRecipe | None = None,
):
    """Everything up to `trainer.train()`: data (read before anything is written), samples, tokenizer, model,
    preprocessing, collator, metrics and trainer, as the task's entry of `TASKS` names them, with `recipe` applied
    to the model and `training_args` (`PaperRecipe.apply`; `model_args.paper_recipe` builds the paper's). Returns the
    trainer, the sampled data and `data_args` with the columns named."""
    definition = TASKS[task]
    transformers.set_seed(training_args.seed)
    corpus = load_data(task, data_args)
    data_args = resolve_columns(task, corpus, data_args)
    label = data_args.label_column if definition.stratify else None
    seed = training_args.seed
    corpus = datasets.DatasetDict(
        train=sample(corpus["train"], data_args.max_train_samples, seed, label),
        validation=sample(corpus["validation"], data_args.max_eval_samples, seed, label),
    )
    model, tokenizer = load_model_and_tokenizer(
        task, model_args, corpus, data_args, **definition.config_fields(corpus, data_args)
    )
    if recipe is None and model_args.paper_recipe:  # transformers' --warmup_steps, where given, replaces the 4000
        given = training_args.warmup_steps
        recipe = PaperRecipe(warmup_steps=int(given)) if given >= 1 else PaperRecipe()
    if recipe is not None:
        recipe.apply(training_args, model)
    dataset = definition.preprocess(corpus, tokenizer, model, data_args)
    if definition.label_names is not None and training_args.label_names is None:
        training_args.label_names = list(definition.label_names)
    trainer = definition.trainer_class(
        model=model,
        args=training_args,
        train_dataset=dataset["train"],
        eval_dataset=dataset["validation"],
        processing_class=tokenizer,
        data_collator=definition.collator(tokenizer, model, data_args, training_args.seed),
        **definition.metrics(tokenizer, training_args, model, corpus, dataset, data_args),
    )
    return trainer, corpus, data_args


def build_trainer(
    task: str,
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args,
    recipe: PaperRecipe | None = None,
) -> Trainer:
    """The trainer of `prepare`, ready for `trainer.train()`."""
    return prepare(task, model_args, data_args, training_args, recipe)[0]


def evaluate(trainer: Trainer, **kwargs) -> dict:
    """`trainer.evaluate()` with the plain cross-entropy as `eval_loss` (label smoothing is a training device), and
    its exponential, `eval_perplexity`, for language models."""
    smoother, trainer.label_smoother = trainer.label_smoother, None
    try:
        metrics = trainer.evaluate(**kwargs)
    finally:
        trainer.label_smoother = smoother
    if head_of(trainer.model) in ("ForCausalLM", "ForMaskedLM") and "eval_loss" in metrics:
        metrics["eval_perplexity"] = perplexity(metrics["eval_loss"])
    return metrics


def save_model_folder(trainer: Trainer, folder: str, **card_fields) -> None:
    """The trained model, its tokenizer and its card as a folder to share (see `aiayn.hub`): `trainer.save_model`
    (which gathers the weights under any distributed strategy), the training arguments as `training_args.json`
    instead of the pickled `training_args.bin`, and `README.md` from `card_fields`."""
    from .hub import model_card

    trainer.save_model(folder)
    if not trainer.is_world_process_zero():
        return
    pickled = os.path.join(folder, "training_args.bin")
    if os.path.exists(pickled):
        os.remove(pickled)
    with open(os.path.join(folder, "training_args.json"), "w") as f:
        f.write(trainer.args.to_json_string())
    arguments = trainer.args.to_dict()
    model_card(
        trainer.model, os.path.basename(os.path.abspath(folder)), training_arguments=arguments, **card_fields
    ).save(os.path.join(folder, "README.md"))


# Fewer validation examples than this, and one example moves a rate by more than a point.
MIN_EVAL_EXAMPLES = 100


def evaluation_warnings(task: str, corpus: datasets.DatasetDict, data_args: DataArguments) -> list[str]:
    """What makes an evaluation mean little: a single class in the validation labels, or too few examples."""
    validation, warnings = corpus["validation"], []
    if TASKS[task].stratify and len(set(validation[data_args.label_column])) < 2:
        warnings.append(f"The evaluation set holds a single class ({validation[0][data_args.label_column]!r}): its "
                        "accuracy says nothing the majority class does not.")  # fmt: skip
    if len(validation) < MIN_EVAL_EXAMPLES:
        warnings.append(f"The evaluation set holds {len(validation)} examples: one example moves a rate by "
                        f"{100 / max(len(validation), 1):.1f} points; its metrics mean little.")  # fmt: skip
    return warnings


def run(task: str, model_args: ModelArguments, data_args: DataArguments, training_args) -> dict:
    """Builds the trainer, trains (resuming from `resume_from_checkpoint` when given), evaluates beside the task's
    baseline (`eval_baseline_*`), and saves the model with its tokenizer and card to `output_dir`. Returns the
    training and evaluation metrics, which `all_results.json` holds too."""
    trainer, corpus, data_args = prepare(task, model_args, data_args, training_args)
    metrics = {}
    if training_args.do_train:
        metrics.update(trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint).metrics)
    if training_args.do_eval:
        metrics.update(evaluate(trainer))
        metrics.update(TASKS[task].baseline(trainer, corpus, data_args))
        metrics["eval_samples"] = len(corpus["validation"])
        for warning in evaluation_warnings(task, corpus, data_args):
            logger.warning(warning)
    if training_args.do_train:
        dataset = data_args.train_file or data_args.dataset_name or TASKS[task].dataset
        card = {"task": TASKS[task].pipeline_task, "datasets": [os.path.basename(dataset)], "metrics": metrics}
        save_model_folder(trainer, training_args.output_dir, **card)
        trainer.save_state()
    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
    return metrics


class TrainingArguments(Seq2SeqTrainingArguments):
    """transformers' `Seq2SeqTrainingArguments`, as a group of flags of its own in `aiayn train TASK --help`."""

    _argument_group_name = "training (transformers' Seq2SeqTrainingArguments)"


def task_arguments(task: str) -> tuple[type, type, type]:
    """The dataclasses of a task's flags: `ModelArguments`, the `DataArguments` fields the task reads (a dataclass of
    its own, so that its help lists only those) and transformers' `Seq2SeqTrainingArguments`."""
    wanted = (*COMMON_DATA_FIELDS, *TASKS[task].data_fields)
    data_fields = [(f.name, f.type, field(default=f.default, metadata=f.metadata))
                   for f in dataclasses.fields(DataArguments) if f.name in wanted]  # fmt: skip
    name = "".join(part.title() for part in task.split("-")) + "DataArguments"
    data_class = dataclasses.make_dataclass(name, data_fields, namespace={"_argument_group_name": "data"})
    return ModelArguments, data_class, TrainingArguments


def task_parser(task: str, **kwargs) -> transformers.HfArgumentParser:
    """The parser of `aiayn train TASK`: model, data and training flags in groups."""
    return transformers.HfArgumentParser(task_arguments(task), **kwargs)


def main(task: str, argv: list[str] | None = None) -> dict:
    """Command-line entry point of a task (`aiayn train TASK`): parses `ModelArguments`, the task's
    `DataArguments` and `Seq2SeqTrainingArguments` (transformers' training flags), or a single .json file of them,
    and runs it."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; the tasks are {sorted(TASKS)}.")
    parser = task_parser(task, prog=f"aiayn train {task}", usage=f"aiayn train {task} [FLAGS]")
    if argv is not None and len(argv) == 1 and argv[0].endswith(".json"):
        model_args, task_data, training_args = parser.parse_json_file(os.path.abspath(argv[0]))
    else:
        model_args, task_data, training_args = parser.parse_args_into_dataclasses(argv)
    data_args = DataArguments(**dataclasses.asdict(task_data))
    try:
        return run(task, model_args, data_args, training_args)
    finally:
        # Under torchrun or accelerate: leaving the process group alive lets its threads abort the exit (SIGABRT).
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


__all__ = [
    "ModelArguments",
    "DataArguments",
    "PaperRecipe",
    "TASKS",
    "Task",
    "build_trainer",
    "prepare",
    "sample",
    "task_parser",
    "evaluate",
    "save_model_folder",
    "run",
    "main",
]
