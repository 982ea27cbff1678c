"""What the text-to-text tasks share (transformers' `run_translation` and `run_summarization`): source and target
tokenized, the generation lengths and beams of evaluation and of the saved generation config, generated texts
decoded, and the predictions file."""

import os

import numpy as np
import transformers

# The data flags of the text-to-text tasks: source and target lengths, the evaluation's generation, padding.
GENERATION_FIELDS = (
    "source_prefix", "max_source_length", "max_target_length", "val_max_target_length", "num_beams",
    "pad_to_max_length", "ignore_pad_token_for_loss",
)  # fmt: skip


def source_target_features(tokenizer, sources: list[str], targets: list[str] | None, data_args, split: str) -> dict:
    """`source_prefix` + each source as inputs (`max_source_length` tokens) and each target as labels
    (`max_target_length` tokens in training, `val_max_target_length` in evaluation and prediction, as the scripts
    do); no labels where the split has no targets. With `pad_to_max_length`, each padded to its length, the labels'
    padding -100 where `ignore_pad_token_for_loss`."""
    sources = [data_args.source_prefix + text for text in sources]
    padding = "max_length" if data_args.pad_to_max_length else False
    encoded = tokenizer(sources, max_length=data_args.max_source_length, truncation=True, padding=padding)
    if targets is not None:
        length = data_args.max_target_length if split == "train" else evaluation_target_length(data_args)
        labels = tokenizer(text_target=targets, max_length=length, truncation=True, padding=padding)["input_ids"]
        if padding and data_args.ignore_pad_token_for_loss:
            labels = [[-100 if token == tokenizer.pad_token_id else token for token in ids] for ids in labels]
        encoded["labels"] = labels
    return encoded


def evaluation_target_length(data_args) -> int:
    """`--val_max_target_length`, else `--max_target_length`."""
    return data_args.val_max_target_length or data_args.max_target_length


def configure_generation(model, training_args, data_args, length_from_script: bool) -> None:
    """`--source_prefix` as the config's `prefix`, and the evaluation's and the saved generation config's beams
    (`--num_beams`, else `--generation_num_beams`) and length (`--generation_max_length`, else
    `--val_max_target_length`, else `--max_target_length`, as the scripts decide; where not `length_from_script`, a
    model whose generation config bounds the output by its source, the paper's `max_len_a * source + max_len_b`,
    keeps that bound unless a length flag is given)."""
    if data_args.source_prefix:  # saved in the config, where the folder's pipeline reads it (T5's convention)
        model.config.prefix = data_args.source_prefix
    if data_args.num_beams is not None:
        training_args.generation_num_beams = data_args.num_beams
    own_bound = getattr(model.generation_config, "max_len_b", None) is not None
    if training_args.generation_max_length is None and (length_from_script or data_args.val_max_target_length
                                                        or not own_bound):  # fmt: skip
        training_args.generation_max_length = evaluation_target_length(data_args)
    if training_args.generation_max_length is not None:
        model.generation_config.max_length = training_args.generation_max_length
    if training_args.generation_num_beams is not None:
        model.generation_config.num_beams = training_args.generation_num_beams


def decoded_texts(tokenizer, ids: np.ndarray) -> list[str]:
    """Token ids as texts: -100 (the Trainer's padding of generated sequences and labels) read as padding, special
    tokens left out, each text stripped."""
    ids = np.where(ids == -100, tokenizer.pad_token_id, ids)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def generated_and_references(tokenizer, eval_prediction) -> tuple[list[str], list[str]]:
    """The generated and the reference texts of an evaluation."""
    predictions = eval_prediction.predictions
    if isinstance(predictions, tuple):
        predictions = predictions[0]
    return decoded_texts(tokenizer, predictions), decoded_texts(tokenizer, eval_prediction.label_ids)


def write_generated_predictions(output, trainer, corpus, dataset, data_args, folder: str) -> None:
    """`generated_predictions.txt`: one generated text per line, as the scripts write it (where the evaluation
    generates, `--predict_with_generate`)."""
    if not getattr(trainer.args, "predict_with_generate", False):
        raise ValueError("--do_predict writes generated texts: give --predict_with_generate, as the scripts need.")
    texts = decoded_texts(trainer.processing_class, output.predictions)
    with open(os.path.join(folder, "generated_predictions.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(texts))


def seq2seq_collator(tokenizer, model, data_args, seed: int):
    """Padded sources and labels (-100 in the labels' padding, or the pad token without `ignore_pad_token_for_loss`)
    and the decoder inputs they shift into."""
    label_pad = -100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id
    return transformers.DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=label_pad)
