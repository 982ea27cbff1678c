"""A BERT-style masked language model on text (transformers' `run_mlm`): blocks of `block_size` tokens masked by
BERT's rule, seeded by batch; its metric the accuracy on the masked tokens, its baseline the best context-free
masked LM."""

import transformers

from ..baselines import masked_lm_baselines
from ..collators import DataCollatorSeededByBatch
from ..metrics import Accuracy
from .blocks import language_model_blocks
from .task import Task, baseline_names


def masked_lm_dataset(corpus, tokenizer, model, data_args):
    return language_model_blocks(corpus, tokenizer, data_args, data_args.block_size, append_eos=False)


def masked_lm_collator(tokenizer, model, data_args, seed: int):
    masking = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=data_args.mlm_probability)
    return DataCollatorSeededByBatch(masking, seed)


def masked_accuracy(eval_prediction) -> dict:
    predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
    selected = labels != -100
    return Accuracy().compute(predictions=predictions[selected], references=labels[selected])


def argmax_logits(logits, labels):
    return logits.argmax(dim=-1)


def masked_lm_metrics(tokenizer, training_args, model, corpus, dataset, data_args, split: str) -> dict:
    """Accuracy on the masked tokens, from the logits' argmax (not the logits) kept per batch."""
    return {"compute_metrics": masked_accuracy, "preprocess_logits_for_metrics": argmax_logits}


def masked_lm_baseline(trainer, corpus, data_args) -> dict:
    """The best context-free masked LM under the collator's masking (`aiayn.baselines.masked_lm_baselines`)."""
    special = set(trainer.processing_class.all_special_ids)  # never masked
    splits = (trainer.train_dataset, trainer.eval_dataset)
    tokens = ([t for ids in split["input_ids"] for t in ids if t not in special] for split in splits)
    masking = trainer.data_collator.collator
    return baseline_names(masked_lm_baselines(*tokens, trainer.model.config.vocab_size, masking.mask_replace_prob,
                                              masking.random_replace_prob))  # fmt: skip


TASK = Task(
    help="BERT-style masked language model on text (run_mlm)",
    script="run_mlm",
    family="encoder",
    auto_class=transformers.AutoModelForMaskedLM,
    dataset="shakespeare",
    pipeline_task="fill-mask",
    preset="tiny-encoder",
    columns={"text_column": ("text",)},
    data_fields=("text_column", "block_size", "mlm_probability", "pad_to_max_length"),  # blocks are full length
    preprocess=masked_lm_dataset,
    collator=masked_lm_collator,
    metrics=masked_lm_metrics,
    baseline=masked_lm_baseline,
)
