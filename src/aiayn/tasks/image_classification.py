"""A class per image (transformers' `run_image_classification`): an image folder by class, or `image` and `label`
columns; accuracy beside the majority class."""

import datasets
import transformers

from .images import image_dataset
from .task import Task, accuracy_metrics, class_baseline


def image_class_labels(corpus: datasets.DatasetDict, data_args) -> dict:
    """The config fields of a classifier of the label column's classes (a `ClassLabel` feature)."""
    names = corpus["train"].features[data_args.label_column].names
    return {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}


def image_classification_dataset(corpus, processor, model, data_args) -> datasets.DatasetDict:
    return image_dataset(corpus, processor, data_args, keep_labels=True)


def image_classification_collator(processor, model, data_args, seed: int):
    return transformers.DefaultDataCollator()


TASK = Task(
    help="a class per image (run_image_classification)",
    script="run_image_classification",
    family="vision",
    auto_class=transformers.AutoModelForImageClassification,
    dataset="digits",
    pipeline_task="image-classification",
    preset="tiny-vision",
    columns={"image_column": ("image",), "label_column": ("label",)},
    data_fields=("image_column", "label_column", "train_dir", "validation_dir", "train_val_split"),
    defaults={"validation_split_percentage": 15},  # run_image_classification's --train_val_split 0.15
    stratify=True,
    headline=("eval_accuracy",),
    config_fields=image_class_labels,
    preprocess=image_classification_dataset,
    collator=image_classification_collator,
    metrics=accuracy_metrics,
    baseline=class_baseline,
)
