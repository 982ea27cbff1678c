"""The right ending, SWAG-style (transformers' `run_swag`): a context (`sent1`), the start of the answer (`sent2`),
endings `ending0` ... `endingN` and the right one's index (`label`); accuracy beside the ending most often right in
training."""

import datasets
import numpy as np
import transformers

from ..baselines import majority_accuracy
from .task import Task, accuracy_metrics, first_split, tokenized_splits, write_index_predictions


def ending_columns(dataset: datasets.Dataset) -> list[str]:
    """SWAG's `ending0`, `ending1`, ... columns, in order."""
    return sorted((c for c in dataset.column_names if c.startswith("ending") and c[6:].isdigit()),
                  key=lambda c: int(c[6:]))  # fmt: skip


def check_choices(corpus: datasets.DatasetDict, data_args) -> None:
    """The same endings `ending0` ... `endingN` (N >= 1, none missing) in every split, and labels that are the index
    of one of them."""
    endings = ending_columns(first_split(corpus))
    expected = [f"ending{i}" for i in range(max(len(endings), 2))]
    for split, examples in corpus.items():
        found = ending_columns(examples)
        if found != expected:
            raise ValueError(f"Multiple choice needs the columns {', '.join(expected)} in every split; the {split} "
                             f"data's columns are {examples.column_names}.")  # fmt: skip
        # A CSV without a column the other files have reads it as None in every row (datasets' csv builder).
        empty = [column for column in expected if any(value is None for value in examples[column])]
        if empty:
            raise ValueError(f"Multiple choice needs the columns {', '.join(expected)} in every split; the {split} "
                             f"data has no {', '.join(empty)} (or an empty one) in some rows.")  # fmt: skip
        if data_args.label_column not in examples.column_names:
            continue
        feature = examples.features[data_args.label_column]
        if not isinstance(feature, datasets.ClassLabel) and not str(getattr(feature, "dtype", "")).startswith("int"):
            raise ValueError(f"Multiple choice needs the index of the right ending (an integer) in the label column "
                             f"{data_args.label_column!r}; it holds {feature}.")  # fmt: skip
        labels = np.asarray(examples[data_args.label_column])
        if len(labels) and (labels.min() < 0 or labels.max() >= len(expected)):
            raise ValueError(f"The {split} data's labels run from {labels.min()} to {labels.max()}; with "
                             f"{len(expected)} endings they are 0 ... {len(expected) - 1}.")  # fmt: skip


def multiple_choice_texts(dataset: datasets.Dataset, data_args):
    yield from dataset[data_args.context_column]
    for column in (data_args.question_column, *ending_columns(dataset)):
        yield from dataset[column]


def multiple_choice_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    """Each example as one pair of texts per ending, the context first and the answer's start with the ending second
    (run_swag's pairs), `block_size` tokens at most; `labels` is the index of the right ending."""
    endings = ending_columns(first_split(corpus))

    def tokenize(examples, split):
        count = len(examples[data_args.context_column])
        firsts = [context for context in examples[data_args.context_column] for _ in endings]
        seconds = [f"{examples[data_args.question_column][i]} {examples[e][i]}" for i in range(count) for e in endings]
        encoded = tokenizer(firsts, seconds, max_length=data_args.block_size, truncation=True,
                            padding="max_length" if data_args.pad_to_max_length else False)  # fmt: skip
        grouped = {key: [values[i : i + len(endings)] for i in range(0, len(values), len(endings))]
                   for key, values in encoded.items()}  # fmt: skip
        if data_args.label_column in examples:
            grouped["labels"] = examples[data_args.label_column]
        return grouped

    return tokenized_splits(corpus, tokenize, data_args)


def multiple_choice_collator(tokenizer, model, data_args, seed: int):
    return transformers.DataCollatorForMultipleChoice(tokenizer)


def multiple_choice_baseline(trainer, corpus, data_args) -> dict:
    """Always the ending that is most often right in training."""
    labels = corpus["train"][data_args.label_column], corpus["validation"][data_args.label_column]
    return {"eval_baseline_accuracy": majority_accuracy(*labels)}


def write_choice_predictions(output, trainer, corpus, dataset, data_args, folder: str) -> None:
    """`predict_results.txt`: `index<TAB>prediction` (the chosen ending's index) per test example."""
    write_index_predictions(folder, (int(choice) for choice in output.predictions.argmax(-1)))


TASK = Task(
    help="the right ending, SWAG-style (run_swag)",
    script="run_swag",
    family="encoder",
    auto_class=transformers.AutoModelForMultipleChoice,
    pipeline_task="multiple-choice",
    preset="tiny-encoder",
    columns={
        "context_column": ("sent1", "context"),
        "question_column": ("sent2", "question"),
        "label_column": ("label",),
    },
    data_fields=("context_column", "question_column", "label_column", "block_size", "pad_to_max_length"),
    defaults={"block_size": None},
    stratify=True,
    target_columns=("label_column",),
    headline=("eval_accuracy",),
    check=check_choices,
    texts=multiple_choice_texts,
    preprocess=multiple_choice_dataset,
    collator=multiple_choice_collator,
    metrics=accuracy_metrics,
    baseline=multiple_choice_baseline,
    write_predictions=write_choice_predictions,
)
