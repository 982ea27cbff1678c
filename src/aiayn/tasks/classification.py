"""A class per text (transformers' `run_classification`): one text column, or several joined
(`--text_column_names a,b` with `--text_column_delimiter`), and a label column of classes; accuracy beside the
majority class of the training labels."""

import datasets
import transformers

from .task import (
    Task,
    accuracy_metrics,
    check_seen,
    class_baseline,
    first_split,
    tokenized_splits,
    write_index_predictions,
)


def text_columns(data_args) -> list[str]:
    return data_args.text_column.split(",")


def joined_texts(examples, data_args) -> list[str]:
    """Each example's text columns joined by `text_column_delimiter`."""
    columns = [examples[column] for column in text_columns(data_args)]
    return [data_args.text_column_delimiter.join(map(str, texts)) for texts in zip(*columns, strict=True)]


def classification_texts(dataset: datasets.Dataset, data_args):
    yield from joined_texts(dataset, data_args)


def check_classes(corpus: datasets.DatasetDict, data_args) -> None:
    """A label column of classes (strings, integers or booleans), and every validation class a training class (a
    classifier cannot predict a class it never saw)."""
    feature = first_split(corpus).features[data_args.label_column]
    dtype = str(getattr(feature, "dtype", ""))
    classes = isinstance(feature, datasets.ClassLabel) or dtype.startswith(("string", "large_string", "int", "bool"))
    if not classes:
        raise ValueError(
            f"Classification needs classes (strings, integers or booleans) in the label column "
            f"{data_args.label_column!r}; it holds {feature}."
        )
    check_seen(corpus, data_args.label_column, "class", lambda label: label)


def class_labels(corpus: datasets.DatasetDict, data_args) -> dict:
    """The config fields of a classifier of the training labels (as strings, sorted)."""
    labels = sorted({str(label) for label in corpus["train"][data_args.label_column]})
    return {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}


def classification_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    label2id = {str(label): index for label, index in model.config.label2id.items()}

    def tokenize(examples, split):
        encoded = tokenizer(joined_texts(examples, data_args), max_length=data_args.block_size, truncation=True,
                            padding="max_length" if data_args.pad_to_max_length else False)  # fmt: skip
        if data_args.label_column in examples:
            encoded["labels"] = [known_label(label2id, label, split) for label in examples[data_args.label_column]]
        return encoded

    return tokenized_splits(corpus, tokenize, data_args)


def known_label(label2id: dict, label, split: str) -> int:
    """The id of a class the model knows; an error naming it otherwise (a saved classifier given new classes)."""
    if str(label) not in label2id:
        raise ValueError(f"The {split} data's class {label!r} is not a class of the model, {sorted(label2id)}.")
    return label2id[str(label)]


def classification_collator(tokenizer, model, data_args, seed: int):
    return transformers.DataCollatorWithPadding(tokenizer)


def write_class_predictions(output, trainer, corpus, dataset, data_args, folder: str) -> None:
    """`predict_results.txt`: `index<TAB>prediction` per test example, the predicted class by name
    (run_classification's file)."""
    id2label = trainer.model.config.id2label
    write_index_predictions(folder, (id2label[int(prediction)] for prediction in output.predictions.argmax(-1)))


TASK = Task(
    help="a class per text (run_classification)",
    script="run_classification",
    auto_class=transformers.AutoModelForSequenceClassification,
    dataset="shakespeare",
    pipeline_task="text-classification",
    preset="tiny-encoder",
    columns={"text_column": ("text", "sentence"), "label_column": ("label", "genre")},
    data_fields=("text_column", "text_column_delimiter", "label_column", "block_size", "pad_to_max_length"),
    defaults={"block_size": 128, "pad_to_max_length": True},
    stratify=True,
    joined_columns=("text_column",),
    target_columns=("label_column",),
    headline=("eval_accuracy",),
    check=check_classes,
    config_fields=class_labels,
    texts=classification_texts,
    preprocess=classification_dataset,
    collator=classification_collator,
    metrics=accuracy_metrics,
    baseline=class_baseline,
    write_predictions=write_class_predictions,
)
