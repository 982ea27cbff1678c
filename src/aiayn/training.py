"""The runner behind `aiayn train TASK`, `scripts/run_*.py` and `aiayn demo`, in the conventions of transformers'
example scripts: it reads the data (before anything is written), checks it, draws its samples (a seeded shuffle,
stratified by label), loads or trains a tokenizer, builds a model from a preset or loads one, trains with the
`Trainer` or `Seq2SeqTrainer`, evaluates beside a baseline that learns nothing, predicts on `--test_file`, and saves
a folder that loads through the Auto classes, with the scripts' results files and a model card.

What varies by task (columns, preprocessing, collator, metrics, baseline, predictions files) is the task's own, one
module each in `aiayn.tasks`; this module names no task. The flags are in `aiayn.train_arguments`.

Recipes: `--paper_recipe` applies the paper's (`PaperRecipe`, sections 5.3 and 5.4; dropout stays the preset's). A
new model trained without `--learning_rate` gets `from_scratch_recipe` rather than transformers' fine-tuning default
(5e-5), and the log and the card say so; `--model_name_or_path` keeps transformers' defaults.
"""

import collections
import dataclasses
import json
import logging
import math
import os

import datasets
import huggingface_hub
import numpy as np
import pyarrow.compute
import torch
import transformers
from transformers import AutoImageProcessor, AutoTokenizer, Trainer

from .configuration_aiayn import preset_config
from .data import BUILT_IN, load_corpus, load_files, load_image_folders, with_validation
from .hub import beats, beside_baseline, head_of, verdict_metric
from .metrics import perplexity
from .recipes import FromScratch, PaperRecipe, describe_recipe, from_scratch_recipe
from .tasks import TASKS, Task
from .tasks.blocks import group_texts
from .tokenization import config_token_fields, train_tokenizer
from .train_arguments import DataArguments, ModelArguments, TrainingArguments, task_arguments, task_parser

logger = logging.getLogger(__name__)


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


def _hub_arguments(model_args: ModelArguments) -> dict:
    """The loading arguments of a hub or saved model: cache, revision, token, remote code."""
    return {"cache_dir": model_args.cache_dir, "revision": model_args.model_revision, "token": model_args.token,
            "trust_remote_code": model_args.trust_remote_code}  # fmt: skip


def load_model_and_tokenizer(task: str, model_args: ModelArguments, corpus: datasets.DatasetDict, data_args, **fields):
    """The tokenizer (saved, the model's, or trained on the training split) and the model (loaded, or built from
    `--config_name` or the preset with the tokenizer's vocabulary and special tokens, the overrides and `fields`).
    Image tasks take an image processor instead (`load_model_and_image_processor`)."""
    definition = TASKS[task]
    tokenizer_source = model_args.tokenizer_name or model_args.model_name_or_path
    kwargs = {"attn_implementation": model_args.attn_implementation} if model_args.attn_implementation else {}
    if definition.family == "vision":
        return load_model_and_image_processor(definition.auto_class, model_args, kwargs, **fields)
    hub = _hub_arguments(model_args)
    overrides = parse_overrides(model_args.config_overrides)
    if model_args.model_name_or_path is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, use_fast=model_args.use_fast_tokenizer, **hub)
        model = definition.auto_class.from_pretrained(
            model_args.model_name_or_path, **overrides, **fields, **kwargs, **hub,
            ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
            **({"dtype": model_args.dtype} if model_args.dtype else {}),
        )  # fmt: skip
        return model, tokenizer
    if model_args.config_name is not None:
        saved = transformers.AutoConfig.from_pretrained(model_args.config_name, **hub)
        preset, base = None, saved.to_dict()
    else:
        preset = model_args.preset or definition.preset
        base = None
    family = definition.family or (base["model_type"] if base else preset_config(preset).model_type)
    family = family.removeprefix("aiayn_")
    if tokenizer_source is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, use_fast=model_args.use_fast_tokenizer, **hub)
    else:
        texts = definition.texts(_spread(corpus["train"], data_args.tokenizer_train_samples), data_args)
        tokenizer = train_tokenizer(family, texts, model_args.vocab_size)
    fields = {**config_token_fields(tokenizer, family), **overrides, **fields}
    if base is not None:
        config = transformers.AutoConfig.for_model(base.pop("model_type"), **{**base, **fields})
    else:
        config = preset_config(preset, **fields)
    if config.model_type != f"aiayn_{family}":
        raise ValueError(f"The {task} task needs a {family} model; {preset or model_args.config_name!r} is a "
                         f"{config.model_type}.")  # fmt: skip
    return definition.auto_class.from_config(config, **kwargs), tokenizer


def load_model_and_image_processor(auto_class, model_args: ModelArguments, kwargs: dict, **fields):
    """A saved model and its folder's image processor, or a new model from `--config_name` or the preset and the
    image processor of `--image_processor_name` (`tokenizer_name`), else transformers' ViT image processor at its
    image size (resizing, scaling to [0, 1], normalising by mean and deviation 0.5)."""
    overrides = parse_overrides(model_args.config_overrides)
    if model_args.model_name_or_path is not None:
        hub = _hub_arguments(model_args)
        processor = AutoImageProcessor.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path,
                                                       **hub)  # fmt: skip
        model = auto_class.from_pretrained(model_args.model_name_or_path, **overrides, **fields, **kwargs, **hub,
                                           ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
                                           **({"dtype": model_args.dtype} if model_args.dtype else {}))  # fmt: skip
        return model, processor
    preset = model_args.preset or "tiny-vision"
    if model_args.config_name is not None:
        saved = transformers.AutoConfig.from_pretrained(model_args.config_name, **_hub_arguments(model_args)).to_dict()
        preset = model_args.config_name
        config = transformers.AutoConfig.for_model(saved.pop("model_type"), **{**saved, **overrides, **fields})
    else:
        config = preset_config(preset, **{**overrides, **fields})
    if config.model_type != "aiayn_vision":
        raise ValueError(f"Image tasks need a vision preset; {preset!r} is a {config.model_type}.")
    if model_args.tokenizer_name is not None:  # --image_processor_name: a saved image processor
        processor = AutoImageProcessor.from_pretrained(model_args.tokenizer_name, **_hub_arguments(model_args))
        return auto_class.from_config(config, **kwargs), processor
    # Resolved here, not at import: without torchvision, transformers warns on resolving the name that it falls back
    # to the PIL processor, which every `aiayn` command would print.
    processor = transformers.ViTImageProcessor(size={"height": config.image_size, "width": config.image_size})
    return auto_class.from_config(config, **kwargs), processor


LENGTH_FIELDS = ("block_size", "max_source_length", "max_target_length", "val_max_target_length")


def fit_lengths(data_args: DataArguments, model: transformers.PreTrainedModel, read: tuple[str, ...]) -> DataArguments:
    """`data_args` with every sequence length at most the model's `max_position_embeddings` (a length the model
    cannot read is lowered, with a warning, as the scripts do; of the flags the task `read`s) and `--max_seq_length`
    unset given the model's (at most 1024, as run_clm takes it)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return data_args
    lengths = {}
    for name in (name for name in LENGTH_FIELDS if name in read):
        value = getattr(data_args, name)
        if value is not None and value > limit:
            logger.warning(f"--{name} {value} is longer than the model reads (max_position_embeddings {limit}): "
                           f"using {limit}.")  # fmt: skip
            lengths[name] = limit
    if data_args.block_size is None:
        lengths["block_size"] = min(limit, 1024)
    return dataclasses.replace(data_args, **lengths)


def load_data(task: str, data_args: DataArguments, training: bool = True):
    """The train, validation and (with `--test_file`) test data: `--train_file` (and `--validation_file`), else
    `--dataset_name`, else `--train_dir` (and `--validation_dir`), else the task's bundled corpus. Where there is no
    validation split, `--train_val_split` (else `--validation_split_percentage`) of the training data is held out.
    Without `training` (a saved model evaluated or predicting, as the scripts' `--do_eval` / `--do_predict` alone),
    `--validation_file` and `--test_file` are read without training data where none is named."""
    options = {"keep_linebreaks": data_args.keep_linebreaks}
    held_out = held_out_fraction(data_args)
    given = (data_args.train_file, data_args.dataset_name, data_args.train_dir)
    if data_args.validation_dir is not None and data_args.train_dir is None:
        raise ValueError("--validation_dir needs --train_dir, the training images.")
    if data_args.train_dir is not None and (data_args.dataset_name or data_args.train_file) is not None:
        raise ValueError("--train_dir is the training data: give it or --dataset_name / --train_file, not both.")
    evaluated = data_args.validation_file is not None or data_args.test_file is not None
    if not training and evaluated and all(source is None for source in given):
        corpus = datasets.DatasetDict()
        if data_args.validation_file is not None:
            corpus["validation"] = load_files(data_args.validation_file, **options)["train"]
    elif data_args.train_file is not None:
        files = load_files(data_args.train_file, data_args.validation_file, **options)
        corpus = with_validation(files, held_out)
    elif data_args.train_dir is not None:
        corpus = with_validation(load_image_folders(data_args.train_dir, data_args.validation_dir), held_out)
    else:
        name = data_args.dataset_name or TASKS[task].dataset
        if not name:
            raise ValueError(f"The {task} task has no bundled corpus; give --train_file or --dataset_name.")
        corpus = load_corpus(name, data_args.dataset_config_name, held_out)
    if data_args.test_file is not None:
        corpus["test"] = load_files(data_args.test_file, **options)["train"]
    return corpus


def held_out_fraction(data_args: DataArguments) -> float:
    """The share of the training data held out for validation where there is none: `--train_val_split`, else
    `--validation_split_percentage`."""
    if data_args.train_val_split is not None:
        return data_args.train_val_split
    return data_args.validation_split_percentage / 100


def evaluation_data(definition: Task, data_args: DataArguments) -> str:
    """What `load_data` reads as the validation split of a training run, as the card names it: the validation file
    or folder given beside the training data, else the share of it held out (`with_validation`), or the validation
    split of the corpus named."""
    held_out = f"a seeded {held_out_fraction(data_args) * 100:g}% of the training data, held out from training"
    if data_args.train_file is not None:
        return f"the validation file `{named(data_args.validation_file)}`" if data_args.validation_file else held_out
    if data_args.train_dir is not None:
        return f"the images of `{named(data_args.validation_dir)}`" if data_args.validation_dir else held_out
    name = data_args.dataset_name or definition.dataset
    if name in BUILT_IN:
        return f"the validation split of `{name}`"
    return f"the validation split of `{named(name)}` (where it has none, its test split, else {held_out})"


def named(path: str) -> str:
    """The name a file, folder or dataset is shown by: its last path component."""
    return os.path.basename(os.path.normpath(path))


def joined_columns(definition: Task, data_args: DataArguments) -> list[str] | None:
    """The columns the task joined into one text (`Task.joined_columns` given several, comma-separated), if any."""
    given = [getattr(data_args, role) for role in definition.joined_columns]
    return next((column.split(",") for column in given if column and "," in column), None)


def resolve_columns(task: str, corpus: datasets.DatasetDict, data_args: DataArguments) -> DataArguments:
    """`data_args` with each column the task reads named: the flag's column (several, comma-separated, where the
    task joins them), or the first of the task's usual names found in the first split. A column missing from a split
    (a test split may lack the task's targets, `Task.target_columns`), or empty in some of its rows, is an error that
    names the split, the column and the rows."""
    definition, chosen = TASKS[task], {}
    for role, candidates in definition.columns.items():
        given = getattr(data_args, role)
        if given and "," in given and role not in definition.joined_columns:
            raise ValueError(f"--{role} names one column for the {task} task; it is {given!r}.")
        names, column = (given,) if given else candidates, None
        for split, examples in corpus.items():
            found = examples.column_names
            present = [name for name in names if all(part in found for part in name.split(","))]
            if column is None and present:
                column = present[0]
            if column not in present:
                if split == "test" and role in definition.target_columns:
                    continue
                wanted = " or ".join(repr(name) for name in ((column,) if column else names))
                raise ValueError(f"The {task} task reads a column {wanted} (--{role}); the {split} data's columns "
                                 f"are {found}.")  # fmt: skip
            for part in column.split(","):
                check_filled(examples, split, part, role)
        chosen[role] = column
    return dataclasses.replace(data_args, **chosen)


def check_filled(examples: datasets.Dataset, split: str, column: str, role: str) -> None:
    """An error naming the rows of `split` where `column` is empty (a CSV cell left blank, a JSON key missing): read
    on, they would be the text "None" or a crash mid-run."""
    empty = pyarrow.compute.is_null(examples.with_format("arrow")[column]).to_pylist()
    rows = [index for index, missing in enumerate(empty) if missing]
    if rows and len(rows) == len(empty):  # a CSV read with others lacks their column: datasets fills it with nulls
        raise ValueError(f"The {split} data has no {column!r} (--{role}): it is empty in every one of its "
                         f"{len(rows)} rows.")  # fmt: skip
    if rows:
        raise ValueError(f"The {split} data's column {column!r} (--{role}) is empty in {len(rows)} row(s) (rows "
                         f"{rows[:10]}, counted from 0); every example needs it.")  # fmt: skip


def sampled(definition: Task, corpus: datasets.DatasetDict, data_args: DataArguments, seed: int):
    """The splits as drawn by `--max_train_samples`, `--max_eval_samples` (seeded, stratified) and
    `--max_predict_samples` (the first rows, as the scripts take them)."""
    label = data_args.label_column if definition.stratify else None
    counts = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples}
    splits = {split: sample(corpus[split], count, seed, label) for split, count in counts.items() if split in corpus}
    if "test" in corpus:
        count = min(data_args.max_predict_samples or len(corpus["test"]), len(corpus["test"]))
        splits["test"] = corpus["test"].select(range(count))
    return datasets.DatasetDict(splits)


def prepare(task: str, model_args: ModelArguments, data_args: DataArguments, training_args, recipe=None):
    """Everything up to `trainer.train()`: data (read and checked before anything is written), samples, tokenizer,
    model, preprocessing, collator, metrics and trainer, as the task declares them, with `recipe` applied to the
    model and `training_args` (`PaperRecipe.apply`; `model_args.paper_recipe` builds the paper's). Returns the
    trainer, the sampled data, the preprocessed data and `data_args` with the columns named."""
    definition = TASKS[task]
    transformers.set_seed(training_args.seed)
    corpus = load_data(task, data_args, training=training_args.do_train)
    if "train" not in corpus and model_args.model_name_or_path is None:
        raise ValueError("Without training data there is nothing to evaluate: give the trained model, "
                         "--model_name_or_path.")  # fmt: skip
    if training_args.do_eval and "validation" not in corpus:
        raise ValueError("--do_eval evaluates on --validation_file (or the data's validation split); give one.")
    data_args = resolve_columns(task, corpus, data_args)
    definition.check(corpus, data_args)
    corpus = sampled(definition, corpus, data_args, training_args.seed)
    fields = definition.config_fields(corpus, data_args) if "train" in corpus else {}
    model, tokenizer = load_model_and_tokenizer(task, model_args, corpus, data_args, **fields)
    data_args = fit_lengths(data_args, model, definition.data_fields)
    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(tokenizer, transformers.PreTrainedTokenizerBase) and limit and tokenizer.model_max_length > limit:
        tokenizer.model_max_length = limit  # saved with the folder: its pipelines cut or window longer texts
    if recipe is None and model_args.paper_recipe:  # transformers' --warmup_steps, where given, replaces the 4000
        given = training_args.warmup_steps
        recipe = PaperRecipe(warmup_steps=int(given)) if given >= 1 else PaperRecipe()
    if recipe is not None:
        recipe.apply(training_args, model)
    definition.configure(model, training_args, data_args)
    dataset = definition.preprocess(corpus, tokenizer, model, data_args)
    if definition.label_names is not None and training_args.label_names is None:
        training_args.label_names = list(definition.label_names)
    trainer = definition.trainer_class(
        model=model,
        args=training_args,
        train_dataset=dataset.get("train"),
        eval_dataset=dataset.get("validation"),
        processing_class=tokenizer,
        data_collator=definition.collator(tokenizer, model, data_args, training_args.seed),
        **definition.metrics(tokenizer, training_args, model, corpus, dataset, data_args, "validation"),
    )
    return trainer, corpus, dataset, data_args


def build_trainer(task: str, model_args, data_args, training_args, recipe=None) -> Trainer:
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


def run(task: str, model_args: ModelArguments, data_args: DataArguments, training_args, recipe=None) -> dict:
    """Builds the trainer, trains (resuming from `resume_from_checkpoint` when given), evaluates beside the task's
    baseline (`eval_baseline_*`; `eval_beats_baseline` says whether the task's headline metric, `Task.headline`,
    beats it), predicts on the test split and writes the task's predictions files, and saves the model with its
    tokenizer and card to `output_dir`. The metrics are printed and written as the scripts write them
    (`train_results.json`, `eval_results.json`, `predict_results.json`, and all of them in `all_results.json`), the
    sample counts those of the rows the model read (windows, blocks), as the scripts count them. Returns them."""
    definition = TASKS[task]
    if training_args.do_predict and definition.write_predictions is None:
        raise ValueError(f"--do_predict: the {task} task has no predictions to write ({definition.script} has none).")
    if training_args.do_predict and data_args.test_file is None:
        raise ValueError("--do_predict predicts on --test_file; give one.")
    trainer, corpus, dataset, data_args = prepare(task, model_args, data_args, training_args, recipe)
    if isinstance(recipe, FromScratch):
        logger.warning(
            f"A new model without --learning_rate: the from-scratch recipe, {describe_recipe(trainer.args)}."
        )
    metrics, world_zero = {}, trainer.is_world_process_zero()
    if training_args.do_train:
        result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        train_metrics = {**result.metrics, "train_samples": len(dataset["train"])}
        trainer.log_metrics("train", train_metrics)
        trainer.save_metrics("train", train_metrics)
        metrics.update(train_metrics)
    if training_args.do_eval:
        baseline = definition.baseline(trainer, corpus, data_args) if "train" in corpus else {}
        evaluated = {**evaluate(trainer), **baseline, "eval_samples": len(dataset["validation"])}
        headline = verdict_metric(evaluated, definition.headline)
        if headline is not None:
            evaluated["eval_beats_baseline"] = beats(evaluated, headline)
        trainer.log_metrics("eval", evaluated)
        trainer.save_metrics("eval", evaluated)
        metrics.update(evaluated)
        for warning in evaluation_warnings(task, corpus, data_args):
            logger.warning(warning)
        if evaluated.get("eval_beats_baseline") is False:
            logger.warning("This model does not beat the baseline that learns nothing on "
                           f"{beside_baseline(evaluated, headline)}.")  # fmt: skip
    if training_args.do_predict:
        trainer.compute_metrics = definition.metrics(trainer.processing_class, training_args, trainer.model, corpus,
                                                     dataset, data_args, "test").get("compute_metrics")  # fmt: skip
        output = trainer.predict(dataset["test"], metric_key_prefix=definition.predict_prefix)
        predicted = {**output.metrics, "predict_samples": len(dataset["test"])}
        trainer.log_metrics("predict", predicted)
        trainer.save_metrics("predict", predicted)
        metrics.update(predicted)
        if world_zero:
            os.makedirs(training_args.output_dir, exist_ok=True)
            definition.write_predictions(output, trainer, corpus, dataset, data_args, training_args.output_dir)
    if training_args.do_train:
        source = data_args.train_file or data_args.train_dir or data_args.dataset_name or definition.dataset
        card = {"task": definition.pipeline_task, "datasets": [named(source)], "metrics": metrics,
                "headline": definition.headline, "evaluation_data": evaluation_data(definition, data_args),
                "joined_columns": joined_columns(definition, data_args),
                "column_delimiter": data_args.text_column_delimiter}  # fmt: skip
        if isinstance(recipe, FromScratch):
            card["recipe"] = f"A new model, trained with the from-scratch recipe: {describe_recipe(trainer.args)}."
        save_model_folder(trainer, training_args.output_dir, **card)
        trainer.save_state()
    if world_zero:
        trainer.save_metrics("all", metrics)
    return metrics


def given_flags(argv: list[str] | None) -> set[str]:
    """The flag names (`learning_rate`) given on the command line or in its .json file."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        with open(argv[0]) as f:
            return set(json.load(f))
    return {arg[2:].split("=")[0].replace("-", "_") for arg in argv if arg.startswith("--")}


def check_launch(training_args) -> None:
    """An error, before anything is written, where the processes a launcher started would not train as one job (on
    CPUs, transformers joins them in a process group only with `--use_cpu`: without it each trains a model of its own
    into the same folder), or where `--push_to_hub` cannot reach the hub."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and training_args.world_size != launched:
        raise ValueError(f"{launched} processes were launched (torchrun, accelerate), but on CPUs they join in one "
                         "job only with --use_cpu: without it each would train a model of its own into the same "
                         "folder. Give --use_cpu.")  # fmt: skip
    if not training_args.push_to_hub:
        return
    later = "train without it and upload the folder later (`aiayn hub-folder`, then `hf upload`)"
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise ValueError(f"--push_to_hub needs the hub, and HF_HUB_OFFLINE is set: {later}.")
    try:
        huggingface_hub.HfApi().whoami(token=training_args.hub_token)
    except Exception as error:  # not logged in, no network, a refused token: what the upload would meet at the end
        reason = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(f"--push_to_hub cannot reach the hub ({type(error).__name__}: {reason}): log in "
                         f"(`hf auth login`) or give --hub_token, or {later}.") from error  # fmt: skip


def pins_memory(training_args) -> bool:
    """Whether the data loaders pin their batches' memory by default: where the batches go to an accelerator, the
    check torch's DataLoader makes (elsewhere pinning does nothing, and torch warns of it)."""
    return not training_args.use_cpu and torch.accelerator.is_available()


def parse(task: str, argv: list[str] | None = None) -> tuple:
    """The flags of `aiayn train TASK` (`argv`, or a single .json file of them): `ModelArguments`, `DataArguments`,
    `TrainingArguments` and the recipe a new model trained without `--learning_rate` gets (`FromScratch`), else
    None. Launches that would not train as one job are refused here (`check_launch`). Unless given,
    `--dataloader_pin_memory` is `pins_memory`'s."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; the tasks are {sorted(TASKS)}.")
    parser = task_parser(task, prog=f"aiayn train {task}", usage=f"aiayn train {task} [FLAGS]")
    if argv is not None and len(argv) == 1 and argv[0].endswith(".json"):
        model_args, task_data, training_args = parser.parse_json_file(os.path.abspath(argv[0]))
    else:
        model_args, task_data, training_args = parser.parse_args_into_dataclasses(argv)
    data_args = DataArguments(**dataclasses.asdict(task_data))
    check_launch(training_args)
    given = given_flags(argv)
    if not {"dataloader_pin_memory", "no_dataloader_pin_memory"} & given:
        training_args.dataloader_pin_memory = pins_memory(training_args)
    from_scratch = model_args.model_name_or_path is None and not model_args.paper_recipe
    recipe = FromScratch(frozenset(given)) if from_scratch and "learning_rate" not in given else None
    return model_args, data_args, training_args, recipe


def main(task: str, argv: list[str] | None = None) -> dict:
    """Command-line entry point of a task (`aiayn train TASK`): parses `ModelArguments`, the task's
    `DataArguments` and `Seq2SeqTrainingArguments` (transformers' training flags), or a single .json file of them
    (`parse`), and runs it; a new model trained without `--learning_rate` gets `from_scratch_recipe`."""
    model_args, data_args, training_args, recipe = parse(task, argv)
    try:
        return run(task, model_args, data_args, training_args, recipe)
    finally:
        # Under torchrun or accelerate: leaving the process group alive lets its threads abort the exit (SIGABRT).
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


__all__ = [
    "ModelArguments",
    "DataArguments",
    "TrainingArguments",
    "PaperRecipe",
    "TASKS",
    "Task",
    "build_trainer",
    "from_scratch_recipe",
    "group_texts",
    "parse",
    "prepare",
    "sample",
    "task_arguments",
    "task_parser",
    "evaluate",
    "save_model_folder",
    "run",
    "main",
]
