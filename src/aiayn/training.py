"""Training with transformers' `Trainer` and `Seq2SeqTrainer`: the arguments and the task runners behind the
scripts in `scripts/` and `aiayn demo`, in the conventions of transformers' example scripts (run_clm, run_mlm,
run_translation, run_t5_mlm).

Tasks: `causal-lm` (decoder family), `masked-lm` (encoder), `translation` (seq2seq), `span-corruption` (seq2seq
pretraining, T5's objective) and `classification` (any family). Each run loads a corpus (`aiayn.data`), loads or
trains a tokenizer (`aiayn.tokenization`), builds a model from a preset or loads one, trains, evaluates and saves a
folder that loads through the Auto classes. Each task is an entry of `TASKS`, which names its preprocessing, its
collator, its trainer class and its metrics.

`--paper_recipe` applies the paper's training recipe (`PaperRecipe`, sections 5.3 and 5.4). Dropout is the preset's
(the paper's P_drop: 0.1 for `transformer-base`, 0.3 for `transformer-big`).
"""

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain

import datasets
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

from .collators import (
    DataCollatorForMaskedImageModeling,
    DataCollatorForSpanCorruption,
    DataCollatorSeededByBatch,
    span_corruption_lengths,
)
from .configuration_aiayn import preset_config
from .data import load_corpus
from .hub import head_of
from .metrics import Accuracy, ChrF, SacreBleu, perplexity
from .tokenization import config_token_fields, train_tokenizer


@dataclass
class ModelArguments:
    """Which model to train: a saved one (`model_name_or_path`) or a new one from a preset."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A folder saved by save_pretrained to fine-tune; otherwise --preset is built."}
    )
    preset: str = field(default="tiny", metadata={"help": "The preset of a new model (see `aiayn presets`)."})
    config_overrides: str | None = field(
        default=None, metadata={"help": "Config fields for a new model, e.g. 'd_model=256,num_layers=4,dropout=0.2'."}
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
    """Which data to train on and how to cut it."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A built-in corpus (shakespeare, bible-en-de, pydoc), a .txt/.json/.jsonl/.csv file or a "
                  "hub dataset; defaults to the task's corpus."},
    )  # fmt: skip
    dataset_config_name: str | None = field(default=None, metadata={"help": "Configuration of a hub dataset."})
    text_column: str = field(default="text", metadata={"help": "Column of the text (language modelling, labels)."})
    label_column: str = field(default="genre", metadata={"help": "Column of the class (classification)."})
    source_lang: str = field(default="en", metadata={"help": "Source language key of the `translation` column."})
    target_lang: str = field(default="de", metadata={"help": "Target language key of the `translation` column."})
    block_size: int = field(default=128, metadata={"help": "Tokens per training block (language modelling)."})
    max_source_length: int = field(default=128, metadata={"help": "Source tokens kept per example."})
    max_target_length: int = field(default=128, metadata={"help": "Target tokens kept per example."})
    max_pair_tokens: int | None = field(
        default=None, metadata={"help": "Translation: leave out pairs with more tokens than this on either side."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked for masked LM."})
    mask_ratio: float = field(default=0.5, metadata={"help": "Share of patches masked (masked-image modelling)."})
    noise_density: float = field(default=0.15, metadata={"help": "Share of tokens corrupted (span corruption)."})
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "Mean corrupted span length."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only this many training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only this many validation examples."})
    tokenizer_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train a new tokenizer on this many training examples, every k-th of the split (all when "
                  "unset); the Unigram trainer's time grows with the text it reads."},
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

    def apply(self, training_args: transformers.TrainingArguments, d_model: int | None = None) -> None:
        """Sets the recipe's fields on `training_args`."""
        for name, value in self.training_arguments(d_model).items():
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


def _select(dataset: datasets.Dataset, count: int | None) -> datasets.Dataset:
    return dataset.select(range(min(count, len(dataset)))) if count is not None else dataset


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
        model = auto_class.from_pretrained(model_args.model_name_or_path, **fields, **kwargs)
        return model, tokenizer
    family = TASKS[task].family or preset_config(model_args.preset).model_type.removeprefix("aiayn_")
    if tokenizer_source is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    else:
        texts = _texts(_spread(corpus["train"], data_args.tokenizer_train_samples), data_args, TASKS[task].reads_pairs)
        tokenizer = train_tokenizer(family, texts, model_args.vocab_size)
    overrides = parse_overrides(model_args.config_overrides)
    config = preset_config(model_args.preset, **{**config_token_fields(tokenizer, family), **overrides, **fields})
    if config.model_type != f"aiayn_{family}":
        raise ValueError(f"The {task} task needs a {family} preset; {model_args.preset!r} is a {config.model_type}.")
    return auto_class.from_config(config, **kwargs), tokenizer


def load_model_and_image_processor(auto_class, model_args: ModelArguments, kwargs: dict, **fields):
    """A saved model and its folder's image processor, or a new model from the preset and transformers' ViT image
    processor at its image size (resizing, scaling to [0, 1], normalising by mean and deviation 0.5)."""
    if model_args.model_name_or_path is not None:
        processor = AutoImageProcessor.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path)
        return auto_class.from_pretrained(model_args.model_name_or_path, **fields, **kwargs), processor
    config = preset_config(model_args.preset, **{**parse_overrides(model_args.config_overrides), **fields})
    if config.model_type != "aiayn_vision":
        raise ValueError(f"Image tasks need a vision preset; {model_args.preset!r} is a {config.model_type}.")
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
    label2id = model.config.label2id

    def tokenize(examples):
        encoded = tokenizer(examples[data_args.text_column], max_length=data_args.block_size, truncation=True)
        encoded["labels"] = [label2id[label] for label in examples[data_args.label_column]]
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
    """The config fields of a classifier of the label column's values."""
    labels = sorted({label for split in corpus.values() for label in split[data_args.label_column]})
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


# Metrics: (tokenizer, training arguments) -> the Trainer's metric arguments.


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


def _no_metrics(tokenizer, training_args) -> dict:
    return {}


def _masked_lm_metrics(tokenizer, training_args) -> dict:
    """Accuracy on the masked tokens, from the logits' argmax (not the logits) kept per batch."""
    return {"compute_metrics": _masked_accuracy, "preprocess_logits_for_metrics": _argmax_logits}


def _translation_metrics(tokenizer, training_args) -> dict:
    """BLEU and chrF of the generated translations, where the evaluation generates (`predict_with_generate`)."""
    generates = getattr(training_args, "predict_with_generate", False)
    return {"compute_metrics": _translation_scores(tokenizer)} if generates else {}


def _classification_metrics(tokenizer, training_args) -> dict:
    return {"compute_metrics": _classification_accuracy}


@dataclass(frozen=True)
class Task:
    """What a training task trains and with what: the family (None: the preset's or the loaded model's), the Auto
    class of its head, the bundled corpus it uses by default, the pipeline task its saved folder serves, the
    preprocessing that builds its dataset, its collator, its trainer class and its metrics; `config_fields` are
    config fields read off the corpus (a classifier's labels), `reads_pairs` whether it reads both sides of
    translation pairs, `label_names` what the Trainer takes for labels where the head has no `labels` (it then scores
    the evaluation loss)."""

    family: str | None
    auto_class: type
    dataset: str
    pipeline_task: str
    preprocess: Callable[..., datasets.DatasetDict]
    collator: Callable
    trainer_class: type[Trainer]
    metrics: Callable[..., dict]
    config_fields: Callable[[datasets.DatasetDict, DataArguments], dict] = _no_config_fields
    reads_pairs: bool = False
    label_names: tuple[str, ...] | None = None  # the Trainer's `label_names` where `labels` is not the target


# task name -> Task(family, Auto class, default corpus, pipeline task, preprocessing, collator, trainer class, metrics,
# config fields read off the corpus, whether it reads translation pairs)
TASKS = {
    "causal-lm": Task(
        "decoder", transformers.AutoModelForCausalLM, "shakespeare", "text-generation",
        _causal_lm_dataset, _causal_lm_collator, Trainer, _no_metrics,
    ),
    "masked-lm": Task(
        "encoder", transformers.AutoModelForMaskedLM, "shakespeare", "fill-mask",
        _masked_lm_dataset, _masked_lm_collator, Trainer, _masked_lm_metrics,
    ),
    "translation": Task(
        "seq2seq", transformers.AutoModelForSeq2SeqLM, "bible-en-de", "translation",
        _translation_dataset, _translation_collator, Seq2SeqTrainer, _translation_metrics, reads_pairs=True,
    ),
    "span-corruption": Task(
        "seq2seq", transformers.AutoModelForSeq2SeqLM, "bible-en-de", "text2text-generation",
        _span_corruption_dataset, _span_corruption_collator, Seq2SeqTrainer, _no_metrics, reads_pairs=True,
    ),
    "classification": Task(
        None, transformers.AutoModelForSequenceClassification, "shakespeare", "text-classification",
        _classification_dataset, _classification_collator, Trainer, _classification_metrics, _class_labels,
    ),
    "image-classification": Task(
        "vision", transformers.AutoModelForImageClassification, "digits", "image-classification",
        _image_classification_dataset, _image_classification_collator, Trainer, _classification_metrics,
        _image_class_labels,
    ),
    "masked-image-modeling": Task(
        "vision", transformers.AutoModelForMaskedImageModeling, "digits", "image-feature-extraction",
        _masked_image_dataset, _masked_image_collator, Trainer, _no_metrics, label_names=("bool_masked_pos",),
    ),
}  # fmt: skip


def build_trainer(task: str, model_args: ModelArguments, data_args: DataArguments, training_args) -> Trainer:
    """Everything up to `trainer.train()`: data, tokenizer, model, preprocessing, collator, metrics, trainer, as the
    task's entry of `TASKS` names them."""
    definition = TASKS[task]
    transformers.set_seed(training_args.seed)
    corpus = load_corpus(data_args.dataset_name or definition.dataset, data_args.dataset_config_name)
    corpus = datasets.DatasetDict(
        train=_select(corpus["train"], data_args.max_train_samples),
        validation=_select(corpus["validation"], data_args.max_eval_samples),
    )
    model, tokenizer = load_model_and_tokenizer(
        task, model_args, corpus, data_args, **definition.config_fields(corpus, data_args)
    )
    if model_args.paper_recipe:  # transformers' --warmup_steps, where given, replaces the paper's 4000
        given = training_args.warmup_steps
        recipe = PaperRecipe(warmup_steps=int(given)) if given >= 1 else PaperRecipe()
        recipe.apply(training_args, model.config.d_model)
    dataset = definition.preprocess(corpus, tokenizer, model, data_args)
    if definition.label_names is not None and training_args.label_names is None:
        training_args.label_names = list(definition.label_names)
    return definition.trainer_class(
        model=model,
        args=training_args,
        train_dataset=dataset["train"],
        eval_dataset=dataset["validation"],
        processing_class=tokenizer,
        data_collator=definition.collator(tokenizer, model, data_args, training_args.seed),
        **definition.metrics(tokenizer, training_args),
    )


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


def run(task: str, model_args: ModelArguments, data_args: DataArguments, training_args) -> dict:
    """Builds the trainer, trains (resuming from `resume_from_checkpoint` when given), evaluates, and saves the model
    with its tokenizer and card to `output_dir`. Returns the training and evaluation metrics."""
    trainer = build_trainer(task, model_args, data_args, training_args)
    metrics = {}
    if training_args.do_train:
        metrics.update(trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint).metrics)
    if training_args.do_eval:
        metrics.update(evaluate(trainer))
    if training_args.do_train:
        dataset = data_args.dataset_name or TASKS[task].dataset
        card = {"task": TASKS[task].pipeline_task, "datasets": [dataset], "metrics": metrics}
        save_model_folder(trainer, training_args.output_dir, **card)
        trainer.save_state()
    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics)
    return metrics


def main(task: str, argv: list[str] | None = None) -> dict:
    """Command-line entry point of a task: parses `ModelArguments`, `DataArguments` and `Seq2SeqTrainingArguments`
    (transformers' training flags) and runs it."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; the tasks are {sorted(TASKS)}.")
    parser = transformers.HfArgumentParser((ModelArguments, DataArguments, Seq2SeqTrainingArguments))
    if argv is not None and len(argv) == 1 and argv[0].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(os.path.abspath(argv[0]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)
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
    "evaluate",
    "save_model_folder",
    "run",
    "main",
]
