"""An interrupted Trainer run resumed from its last checkpoint continues exactly as if it had never stopped."""

import os

import datasets
import pytest
import torch
import transformers
from helpers import LM_AUTO_CLASS, random_ids, tiny_config, word_tokenizer

from aiayn.collators import DataCollatorSeededByBatch

STEPS, CHECKPOINT_STEP, BATCH = 7, 3, 4


class Interrupted(Exception):
    pass


class InterruptAfterCheckpoint(transformers.TrainerCallback):
    """Crashes the run when the step after the checkpoint begins, as a killed process would."""

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == CHECKPOINT_STEP:
            raise Interrupted


def training_setup(family: str) -> tuple[datasets.Dataset, transformers.DataCollator | None, int]:
    """Twenty examples (five batches, so the run crosses an epoch boundary) and the family's collator: random
    masking for the encoder, as `scripts/run_mlm.py` sets it up."""
    ids = random_ids(20, 10, seed=5)
    if family == "encoder":
        tokenizer = word_tokenizer()
        tokenizer.add_special_tokens({"mask_token": "<mask>"})
        collator = DataCollatorSeededByBatch(
            transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3), seed=0
        )
        return datasets.Dataset.from_dict({"input_ids": ids.tolist()}), collator, len(tokenizer)
    columns = {"input_ids": ids.tolist(), "labels": ids.tolist()}
    if family == "seq2seq":
        columns["labels"] = random_ids(20, 6, seed=6).tolist()
    return datasets.Dataset.from_dict(columns), None, None


def run(family: str, output_dir: str, resume: bool = False, interrupt: bool = False) -> transformers.Trainer:
    dataset, collator, vocab_size = training_setup(family)
    overrides = {"dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1}
    config = tiny_config(family, **overrides, **({"vocab_size": vocab_size} if vocab_size else {}))
    torch.manual_seed(0)
    model = LM_AUTO_CLASS[family].from_config(config)
    args = transformers.TrainingArguments(
        output_dir=output_dir,
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        learning_rate=3e-3,
        warmup_steps=2,
        logging_steps=1,
        save_steps=CHECKPOINT_STEP,
        seed=0,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
    )
    callbacks = [InterruptAfterCheckpoint()] if interrupt else []
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, callbacks=callbacks
    )
    trainer.train(resume_from_checkpoint=os.path.join(output_dir, f"checkpoint-{CHECKPOINT_STEP}") if resume else None)
    return trainer


def logged_losses(trainer: transformers.Trainer) -> list[tuple[int, float, float]]:
    return [
        (entry["step"], entry["loss"], entry["grad_norm"]) for entry in trainer.state.log_history if "loss" in entry
    ]


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq"])
def test_resuming_an_interrupted_run_reproduces_it_exactly(family, tmp_path):
    uninterrupted = run(family, str(tmp_path / "whole"))
    with pytest.raises(Interrupted):
        run(family, str(tmp_path / "interrupted"), interrupt=True)
    assert os.path.isfile(tmp_path / "interrupted" / f"checkpoint-{CHECKPOINT_STEP}" / "model.safetensors")
    resumed = run(family, str(tmp_path / "interrupted"), resume=True)

    expected = logged_losses(uninterrupted)
    assert [step for step, _, _ in expected] == list(range(1, STEPS + 1))
    assert logged_losses(resumed) == expected
    final = uninterrupted.model.state_dict()
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, final[name]), name
