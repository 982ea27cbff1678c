"""Seq2seq pretraining by T5's span corruption (transformers' `run_t5_mlm_flax`): blocks whose corrupted input is
`max_source_length` tokens; translation pairs are read as plain text in both languages."""

import datasets
import transformers

from ..collators import DataCollatorForSpanCorruption, span_corruption_lengths
from .blocks import language_model_blocks
from .task import Task, first_split, pair_texts


def span_corruption_dataset(corpus, tokenizer, model, data_args) -> datasets.DatasetDict:
    tokens_length, _ = span_corruption_lengths(
        data_args.max_source_length, data_args.noise_density, data_args.mean_noise_span_length
    )
    if "translation" in first_split(corpus).column_names:  # pretraining reads both languages as plain text
        corpus = corpus.map(lambda e: {data_args.text_column: list(pair_texts(e, data_args))}, batched=True,
                            remove_columns=first_split(corpus).column_names)  # fmt: skip
    return language_model_blocks(corpus, tokenizer, data_args, tokens_length, append_eos=False)


def span_corruption_collator(tokenizer, model, data_args, seed: int):
    return DataCollatorForSpanCorruption(
        tokenizer, data_args.noise_density, data_args.mean_noise_span_length, seed, model
    )


TASK = Task(
    help="seq2seq pretraining by T5's span corruption (run_t5_mlm_flax)",
    script="run_t5_mlm_flax",
    family="seq2seq",
    auto_class=transformers.AutoModelForSeq2SeqLM,
    dataset="bible-en-de",
    pipeline_task="text2text-generation",
    preset="tiny",
    trainer_class=transformers.Seq2SeqTrainer,
    columns={"text_column": ("translation", "text")},
    data_fields=(
        "text_column",
        "source_lang",
        "target_lang",
        "max_source_length",
        "noise_density",
        "mean_noise_span_length",
    ),
    texts=pair_texts,
    preprocess=span_corruption_dataset,
    collator=span_corruption_collator,
)
