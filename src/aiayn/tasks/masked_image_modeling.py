"""ViT-style pretraining on masked patches (SimMIM, transformers' `run_mim`): the L1 error of the masked pixels
beside each pixel predicted by its median over the training images."""

import transformers

from ..baselines import median_pixel_error
from ..collators import DataCollatorForMaskedImageModeling
from .images import image_dataset
from .task import Task


def masked_image_dataset(corpus, processor, model, data_args):
    return image_dataset(corpus, processor, data_args, keep_labels=False)


def masked_image_collator(processor, model, data_args, seed: int):
    return DataCollatorForMaskedImageModeling(model.config.grid_size**2, data_args.mask_ratio, seed)


def masked_image_baseline(trainer, corpus, data_args) -> dict:
    """Each masked pixel predicted by its median over the training images."""
    train, validation = (split.with_format("numpy")[:] for split in (trainer.train_dataset, trainer.eval_dataset))
    return {"eval_baseline_loss": median_pixel_error(train["pixel_values"], validation["pixel_values"])}


TASK = Task(
    help="ViT-style pretraining on masked patches, as SimMIM (run_mim)",
    script="run_mim",
    family="vision",
    auto_class=transformers.AutoModelForMaskedImageModeling,
    dataset="digits",
    pipeline_task="image-feature-extraction",
    preset="tiny-vision",
    data_fields=("mask_ratio",),
    label_names=("bool_masked_pos",),
    preprocess=masked_image_dataset,
    collator=masked_image_collator,
    baseline=masked_image_baseline,
)
