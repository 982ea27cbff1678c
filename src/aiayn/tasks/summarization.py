"""Source text to target text (transformers' `run_summarization`): a source and a target column; ROUGE of the
generated texts beside each source copied as its own output."""

import datasets
import numpy as np
import transformers

from ..metrics import Rouge
from .generation import (
    GENERATION_FIELDS,
    configure_generation,
    generated_and_references,
    seq2seq_collator,
    source_target_features,
    write_generated_predictions,
)
from .task import Task, prefixed, tokenized_splits


def text_pair_texts(dataset: datasets.Dataset, data_args):
    yield from dataset[data_args.text_column]
    yield from dataset[data_args.summary_column]


def summarization_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    def tokenize(examples, split):
        targets = examples.get(data_args.summary_column)
        return source_target_features(tokenizer, examples[data_args.text_column], targets, data_args, split)

    return tokenized_splits(corpus, tokenize, data_args)


def configure_summarization(model, training_args, data_args) -> None:
    configure_generation(model, training_args, data_args, length_from_script=True)


def summarization_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    """ROUGE-1, -2, -L and -Lsum of the generated texts and their mean length in tokens (`gen_len`, as
    run_summarization reports it), where the evaluation generates (`predict_with_generate`)."""

    def compute(eval_prediction) -> dict:
        predictions, references = generated_and_references(tokenizer, eval_prediction)
        scores = Rouge().compute(predictions=predictions, references=references)
        generated = np.where(eval_prediction.predictions == -100, tokenizer.pad_token_id, eval_prediction.predictions)
        scores["gen_len"] = float(np.count_nonzero(generated != tokenizer.pad_token_id, axis=-1).mean())
        return scores

    return {"compute_metrics": compute} if getattr(training_args, "predict_with_generate", False) else {}


def summarization_baseline(trainer, corpus, data_args) -> dict:
    """ROUGE of each source copied as its own output, where the evaluation generates."""
    if not getattr(trainer.args, "predict_with_generate", False):
        return {}
    validation = corpus["validation"]
    scores = Rouge().compute(predictions=validation[data_args.text_column],
                             references=validation[data_args.summary_column])  # fmt: skip
    return prefixed(scores, "eval_baseline_")


TASK = Task(
    help="source text to target text (run_summarization)",
    script="run_summarization",
    family="seq2seq",
    auto_class=transformers.AutoModelForSeq2SeqLM,
    pipeline_task="summarization",
    preset="tiny",
    trainer_class=transformers.Seq2SeqTrainer,
    columns={
        "text_column": ("text", "document", "article", "source"),
        "summary_column": ("summary", "target", "highlights"),
    },
    data_fields=("text_column", "summary_column", *GENERATION_FIELDS),
    defaults={"num_beams": 1},
    target_columns=("summary_column",),
    headline=("eval_rougeLsum",),
    texts=text_pair_texts,
    preprocess=summarization_dataset,
    collator=seq2seq_collator,
    configure=configure_summarization,
    metrics=summarization_metrics,
    baseline=summarization_baseline,
    write_predictions=write_generated_predictions,
)
