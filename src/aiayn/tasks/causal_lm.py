"""A GPT-style language model on text (transformers' `run_clm`): the text in blocks of `block_size` tokens, each
document ended by EOS; its baseline the unigram model of the training tokens."""

import transformers

from ..baselines import language_model_baselines
from .blocks import language_model_blocks
from .task import Task, baseline_names


def causal_lm_dataset(corpus, tokenizer, model, data_args):
    return language_model_blocks(corpus, tokenizer, data_args, data_args.block_size, append_eos=True)


def causal_lm_collator(tokenizer, model, data_args, seed: int):
    return transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False)


def causal_lm_baseline(trainer, corpus, data_args) -> dict:
    """The unigram model of the training tokens (every token of a block but the first is predicted)."""
    splits = (trainer.train_dataset, trainer.eval_dataset)
    tokens = ([token for ids in split["input_ids"] for token in ids[1:]] for split in splits)
    return baseline_names(language_model_baselines(*tokens, trainer.model.config.vocab_size))


TASK = Task(
    help="GPT-style language model on text (run_clm)",
    script="run_clm",
    family="decoder",
    auto_class=transformers.AutoModelForCausalLM,
    dataset="shakespeare",
    pipeline_task="text-generation",
    preset="tiny-decoder",
    columns={"text_column": ("text",)},
    data_fields=("text_column", "block_size"),
    preprocess=causal_lm_dataset,
    collator=causal_lm_collator,
    baseline=causal_lm_baseline,
)
