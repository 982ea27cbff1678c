"""Images as `pixel_values` for the vision tasks (run_image_classification, SimMIM)."""

import datasets

from .task import first_split


def image_dataset(corpus, processor, data_args, keep_labels: bool) -> datasets.DatasetDict:
    """`pixel_values` from the image processor (of the images of `image_column`); the labels where the task scores
    them."""

    def process(examples):
        processed = {"pixel_values": processor(examples[data_args.image_column], return_tensors="np")["pixel_values"]}
        if keep_labels:
            processed["labels"] = examples[data_args.label_column]
        return processed

    processed = corpus.map(process, batched=True, remove_columns=first_split(corpus).column_names, desc="Processing")
    # As a fixed-shape array column, a batch of images becomes one tensor; as nested lists (what `map` stores), the
    # torch formatter builds a tensor per pixel, which took most of a small ViT's training step.
    shape = tuple(first_split(processed).with_format("numpy")[0]["pixel_values"].shape)
    processed = processed.cast_column("pixel_values", datasets.Array3D(shape, "float32"))
    return processed.with_format("torch")
