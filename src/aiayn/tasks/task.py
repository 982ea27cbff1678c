"""What a task of `aiayn train` declares (`Task`), and the pieces several tasks share.

A task names its head, its data and its defaults, and brings the functions the runner (`aiayn.training`) calls in
order: `check` (the data, before anything is written), `config_fields` (read off the data: a classifier's labels),
`texts` (what a new tokenizer learns from), `preprocess`, `collator`, `metrics`, `baseline` and, for `--do_predict`,
`write_predictions`. The runner names no task; each task is one module of this package, registered in
`aiayn.tasks.TASKS`.

Signatures (`data_args` is `aiayn.training.DataArguments`, `corpus` the sampled raw splits, `dataset` the
preprocessed ones):

- `check(corpus, data_args) -> None`, raising `ValueError` that names what is wrong;
- `config_fields(corpus, data_args) -> dict`;
- `texts(dataset, data_args) -> Iterator[str]`;
- `preprocess(corpus, tokenizer, model, data_args) -> DatasetDict`;
- `collator(tokenizer, model, data_args, seed)`;
- `configure(model, training_args, data_args) -> None`: what the task sets on the model or the arguments before
  the trainer is built (the generation lengths of text-to-text tasks);
- `metrics(tokenizer, training_args, model, corpus, dataset, data_args, split) -> dict` of the Trainer's
  `compute_metrics` (and `preprocess_logits_for_metrics`) for the examples of `split`;
- `baseline(trainer, corpus, data_args) -> dict` of `eval_baseline_<metric>`: what a model that learns nothing
  scores;
- `write_predictions(output, trainer, corpus, dataset, data_args, folder) -> None`: the predictions on the test
  split, in the files transformers' example scripts write.
"""

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import datasets
from transformers import Trainer

from ..baselines import majority_accuracy, unigram_cross_entropy
from ..metrics import Accuracy


def first_split(corpus: datasets.DatasetDict) -> datasets.Dataset:
    """The training split, else the first split there is (a saved model evaluated without training data): the split
    whose columns and features the others must match."""
    return corpus["train"] if "train" in corpus else next(iter(corpus.values()))


def column_texts(dataset: datasets.Dataset, data_args) -> Iterator[str]:
    """The text column's texts."""
    yield from dataset[data_args.text_column]


def pair_texts(examples, data_args) -> Iterator[str]:
    """Both sides of `{"translation": {source_lang: ..., target_lang: ...}}` pairs, else the text column."""
    columns = examples.column_names if isinstance(examples, datasets.Dataset) else examples
    if "translation" in columns:
        for pair in examples["translation"]:
            yield pair[data_args.source_lang]
            yield pair[data_args.target_lang]
    else:
        yield from examples[data_args.text_column]


def no_check(corpus: datasets.DatasetDict, data_args) -> None:
    return None


def no_config_fields(corpus: datasets.DatasetDict, data_args) -> dict:
    return {}


def no_configuration(model, training_args, data_args) -> None:
    return None


def no_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    return {}


def no_baseline(trainer: Trainer, corpus, data_args) -> dict:
    return {}


def baseline_names(scores: dict) -> dict:
    """`eval_<metric>` scores as `eval_baseline_<metric>`."""
    return {key.replace("eval_", "eval_baseline_", 1): value for key, value in scores.items()}


def prefixed(scores: dict, prefix: str) -> dict:
    return {f"{prefix}{name}": value for name, value in scores.items()}


def classification_accuracy(eval_prediction) -> dict:
    """Accuracy of the argmax of the logits."""
    predictions = eval_prediction.predictions.argmax(-1)
    return Accuracy().compute(predictions=predictions, references=eval_prediction.label_ids)


def accuracy_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    return {"compute_metrics": classification_accuracy}


def class_baseline(trainer: Trainer, corpus, data_args) -> dict:
    """The most frequent training class: its accuracy, and the cross-entropy of the training classes' frequencies."""
    labels = tuple(list(split.with_format(None)["labels"]) for split in (trainer.train_dataset, trainer.eval_dataset))
    return {
        "eval_baseline_loss": unigram_cross_entropy(*labels, trainer.model.config.num_labels),
        "eval_baseline_accuracy": majority_accuracy(*labels),
    }


@dataclass(frozen=True, kw_only=True)
class Task:
    """A task of `aiayn train`, declared by keyword in its module.

    Attributes:
        help: The task's line in `aiayn train --help`, naming the example script it follows.
        auto_class: The Auto class of its head.
        pipeline_task: The pipeline task its saved folder serves (the card's `pipeline_tag`).
        preset: The preset of a new model unless `--preset` is given.
        family: The family it needs (None: the preset's or the loaded model's).
        dataset: The bundled corpus it reads by default ("": none, `--train_file` is needed).
        script: transformers' example script whose flags and files it follows.
        columns: The column roles it reads (`DataArguments` fields) and the names tried when the flag is not given.
        data_fields: The further `DataArguments` flags it reads.
        defaults: `DataArguments` defaults of its own (those of its example script).
        stratify: Whether samples are drawn by `label_column`.
        label_names: The Trainer's `label_names` where `labels` is not the target (it then scores the eval loss).
        joined_columns: The column roles that may name several columns, comma-separated (joined by the task).
        target_columns: The column roles a test split may lack (what `--do_predict` predicts: labels, answers,
            targets); every other role is read in every split.
        headline: The metrics a run's verdict against its baseline is decided on, in order of preference: the first
            reported beside a baseline (`eval_beats_baseline`); counts and secondary scores never decide it.
        predict_prefix: The prefix of the test metrics (`predict_`, or run_qa's `test_`).
        check, config_fields, texts, preprocess, collator, configure, metrics, baseline, write_predictions: see the
            module's docstring; `write_predictions` None: `--do_predict` is refused, as its script has none.
    """

    help: str
    auto_class: type
    pipeline_task: str
    preset: str
    preprocess: Callable[..., datasets.DatasetDict]
    collator: Callable
    family: str | None = None
    dataset: str = ""
    script: str = ""
    trainer_class: type[Trainer] = Trainer
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    data_fields: tuple[str, ...] = ()
    defaults: dict = field(default_factory=dict)
    stratify: bool = False
    label_names: tuple[str, ...] | None = None
    joined_columns: tuple[str, ...] = ()
    target_columns: tuple[str, ...] = ()
    headline: tuple[str, ...] = ("eval_loss",)
    predict_prefix: str = "predict"
    check: Callable[[datasets.DatasetDict, object], None] = no_check
    config_fields: Callable[[datasets.DatasetDict, object], dict] = no_config_fields
    texts: Callable[[datasets.Dataset, object], Iterator[str]] = column_texts
    configure: Callable[..., None] = no_configuration
    metrics: Callable[..., dict] = no_metrics
    baseline: Callable[..., dict] = no_baseline
    write_predictions: Callable[..., None] | None = None


def tokenized_splits(corpus: datasets.DatasetDict, tokenize: Callable, data_args) -> datasets.DatasetDict:
    """Each split of `corpus` through `tokenize(examples, split)` in batches, its columns replaced by what that
    returns."""
    return datasets.DatasetDict({
        split: examples.map(tokenize, batched=True, fn_kwargs={"split": split}, remove_columns=examples.column_names,
                            desc="Tokenizing", **map_options(data_args))
        for split, examples in corpus.items()
    })  # fmt: skip


def write_index_predictions(folder: str, predictions) -> None:
    """`predict_results.txt`: `index<TAB>prediction` per test example (run_classification's and run_swag's file)."""
    with open(os.path.join(folder, "predict_results.txt"), "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        f.writelines(f"{index}\t{prediction}\n" for index, prediction in enumerate(predictions))


def map_options(data_args) -> dict:
    """`Dataset.map`'s processes (`--preprocessing_num_workers`) and cache (`--overwrite_cache`)."""
    return {
        "num_proc": data_args.preprocessing_num_workers,
        "load_from_cache_file": False if data_args.overwrite_cache else None,
    }


def check_seen(corpus: datasets.DatasetDict, column: str, kind: str, values: Callable) -> None:
    """An error naming the `kind`s (classes, tags) of `column` in the validation or test split that the training
    split never holds: a model cannot learn them, and its scores would count them as errors without a word. `values`
    turns a column's entry into the values it holds (a list of tags, or the class itself). A split without the column
    (test data to predict) is not checked."""
    if "train" not in corpus:  # a saved model evaluated: its preprocessing names labels it does not know
        return
    seen = {str(value) for entry in corpus["train"][column] for value in _as_list(values(entry))}
    for split in (split for split in ("validation", "test") if split in corpus):
        if column not in corpus[split].column_names:
            continue
        found = {str(value) for entry in corpus[split][column] for value in _as_list(values(entry))}
        unseen = sorted(found - seen)
        if unseen:
            raise ValueError(f"The {split} data's {column!r} holds {len(unseen)} {kind}(s) the training data never "
                             f"holds: {unseen[:10]}; a model cannot learn them. Add examples of them to the training "
                             f"data, or leave them out of the {split} data.")  # fmt: skip


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]
