"""A seq2seq model on translation pairs (transformers' `run_translation`): `{"translation": {en: ..., de: ...}}`;
BLEU and chrF of the generated translations beside each source copied as its own translation."""

import transformers

from ..baselines import copy_source_scores, unigram_cross_entropy
from ..metrics import ChrF, SacreBleu
from .generation import (
    GENERATION_FIELDS,
    configure_generation,
    generated_and_references,
    seq2seq_collator,
    source_target_features,
    write_generated_predictions,
)
from .task import Task, baseline_names, pair_texts, tokenized_splits


def translation_dataset(corpus, tokenizer, model, data_args):
    """Source tokens as inputs, target tokens as labels; pairs longer than `max_pair_tokens` left out."""
    source, target = data_args.source_lang, data_args.target_lang

    def tokenize(examples, split):
        pairs = examples["translation"]
        return source_target_features(tokenizer, [p[source] for p in pairs], [p[target] for p in pairs], data_args,
                                      split)  # fmt: skip

    dataset = tokenized_splits(corpus, tokenize, data_args)
    if data_args.max_pair_tokens is not None:
        limit, padding = data_args.max_pair_tokens, (-100, tokenizer.pad_token_id)  # --pad_to_max_length's padding

        def length(ids):
            return sum(token not in padding for token in ids)

        dataset = dataset.filter(lambda e: length(e["input_ids"]) <= limit and length(e["labels"]) <= limit)
    return dataset


def configure_translation(model, training_args, data_args) -> None:
    configure_generation(model, training_args, data_args, length_from_script=False)


def bleu_and_chrf(tokenizer):
    def compute(eval_prediction) -> dict:
        hypotheses, references = generated_and_references(tokenizer, eval_prediction)
        streams = [[reference] for reference in references]
        bleu = SacreBleu().compute(predictions=hypotheses, references=streams)["bleu"]
        return {"bleu": bleu, "chrf": ChrF().compute(predictions=hypotheses, references=streams)["chrf"]}

    return compute


def translation_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    """BLEU and chrF of the generated translations, where the evaluation generates (`predict_with_generate`)."""
    generates = getattr(training_args, "predict_with_generate", False)
    return {"compute_metrics": bleu_and_chrf(tokenizer)} if generates else {}


def translation_baseline(trainer, corpus, data_args) -> dict:
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
        scores.update(baseline_names(copy_source_scores([t.strip() for t in sources],
                                                        [t.strip() for t in references])))  # fmt: skip
    return scores


TASK = Task(
    help="seq2seq model on translation pairs (run_translation)",
    script="run_translation",
    family="seq2seq",
    auto_class=transformers.AutoModelForSeq2SeqLM,
    dataset="bible-en-de",
    pipeline_task="translation",
    preset="tiny",
    trainer_class=transformers.Seq2SeqTrainer,
    data_fields=("source_lang", "target_lang", *GENERATION_FIELDS, "max_pair_tokens"),
    headline=("eval_bleu", "eval_loss"),
    texts=pair_texts,
    preprocess=translation_dataset,
    collator=seq2seq_collator,
    configure=configure_translation,
    metrics=translation_metrics,
    baseline=translation_baseline,
    write_predictions=write_generated_predictions,
)
