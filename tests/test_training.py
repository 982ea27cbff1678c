"""Training with the Trainer: the paper's recipe, label smoothing and gradient accumulation, the task scripts."""

import json
import math

import pytest
import torch
import transformers
from helpers import VOCAB, lm_model, random_ids, run_script, tiny_config, word_tokenizer
from torch.nn import functional as F

import aiayn
from aiayn.training import DataArguments, ModelArguments, PaperRecipe


def trainer_for(model, output_dir, **arguments) -> transformers.Trainer:
    args = transformers.TrainingArguments(output_dir=str(output_dir), report_to="none", use_cpu=True, **arguments)
    return transformers.Trainer(model=model, args=args)


def equation_3(step: int, d_model: int = 512, warmup: int = 4000) -> float:
    """The paper's learning rate after `step` optimizer steps: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_paper_recipe_uses_transformers_inverse_sqrt_schedule_which_is_equation_3(tmp_path):
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) after `step` optimizer steps, for d_model 512 and
    4000 warmup steps, through transformers' own `inverse_sqrt` scheduler."""
    model = aiayn.AiaynSeq2SeqForConditionalGeneration(tiny_config("seq2seq", d_model=512, num_heads=8, dropout=0.1))
    trainer = trainer_for(model, tmp_path)
    PaperRecipe().apply(trainer.args, model)
    trainer.create_optimizer_and_scheduler(num_training_steps=100_000)
    optimizer, scheduler = trainer.optimizer, trainer.lr_scheduler
    assert (
        type(scheduler).__module__ == "torch.optim.lr_scheduler" and trainer.args.lr_scheduler_type == "inverse_sqrt"
    )
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    assert trainer.args.warmup_steps == 4000
    base = trainer.args.learning_rate
    for step in [1, 2, 10, 1000, 3999, 4000, 4001, 10_000, 99_999]:
        assert math.isclose(scheduler.lr_lambdas[0](step) * base, equation_3(step), rel_tol=1e-12)
    peak = equation_3(4000)
    assert math.isclose(peak, 512**-0.5 * 4000**-0.5, rel_tol=1e-12) and math.isclose(base, peak, rel_tol=1e-12)
    for step in range(1, 4):  # the rate the scheduler reports after each optimizer step
        optimizer.step()
        scheduler.step()
        assert math.isclose(scheduler.get_last_lr()[0], equation_3(step), rel_tol=1e-12)


def test_paper_recipe_keeps_the_presets_dropout(tmp_path):
    """`--paper_recipe` sets the optimizer, schedule and label smoothing; dropout stays the preset's (Table 3:
    P_drop 0.3 for the big model), and an explicit override still wins."""
    shrunk = "d_model=32,d_ff=64,num_heads=4,num_layers=1,num_decoder_layers=1"
    data = DataArguments(dataset_name="bible-en-de", max_train_samples=8, max_eval_samples=2)
    arguments = transformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to="none", max_steps=1)
    for overrides, dropout in ((shrunk, 0.3), (shrunk + ",dropout=0.0", 0.0)):
        model_args = ModelArguments(
            preset="transformer-big", vocab_size=300, config_overrides=overrides, paper_recipe=True
        )
        trainer = aiayn.training.build_trainer("translation", model_args, data, arguments)
        assert trainer.model.config.dropout == dropout and trainer.model.config.attention_dropout == 0.0
    assert trainer.args.lr_scheduler_type == "inverse_sqrt" and trainer.args.adam_beta2 == 0.98
    assert trainer.args.adam_epsilon == 1e-9
    # The language model smooths its own loss, without the batch's logits: the Trainer does not smooth again.
    assert trainer.model.config.label_smoothing == 0.1 and trainer.label_smoother is None


def test_the_paper_recipe_smooths_in_the_loss_of_aiayn_language_models_and_in_the_trainer_otherwise(tmp_path):
    """`PaperRecipe.apply` puts the label smoothing where the loss is computed: an aiayn language model's config, or
    the Trainer's `label_smoothing_factor` for another head (an aiayn classifier, transformers' own models)."""
    for model, in_model in (
        (lm_model("seq2seq"), True),
        (lm_model("decoder"), True),
        (aiayn.AiaynEncoderForSequenceClassification(tiny_config("encoder", num_labels=3)), False),
        (transformers.BertForMaskedLM(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
                                                              num_attention_heads=2, intermediate_size=64)), False),
    ):  # fmt: skip
        args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
        PaperRecipe(warmup_steps=10, peak_learning_rate=1e-3).apply(args, model)
        assert args.label_smoothing_factor == (0.0 if in_model else 0.1)
        assert getattr(model.config, "label_smoothing", 0.0) == (0.1 if in_model else 0.0)
        assert args.learning_rate == 1e-3 and args.adam_beta2 == 0.98


def smoothed_causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, epsilon: float, shift=True) -> torch.Tensor:
    """By hand: position t predicts labels[t + 1]; (1 - eps) * NLL + eps * mean over the vocabulary of -log p,
    averaged over the predicted (non -100) tokens. `shift=False` is the mistake of scoring position t on labels[t]."""
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    logits, targets = logits.reshape(-1, VOCAB), labels.reshape(-1)
    kept = targets != -100
    log_probs = F.log_softmax(logits[kept].double(), dim=-1)
    nll = -log_probs.gather(1, targets[kept, None]).squeeze(1)
    return ((1 - epsilon) * nll - epsilon * log_probs.mean(-1)).mean()


def padded_lm_batch(lengths: list[int]) -> dict:
    ids = random_ids(len(lengths), max(lengths), seed=11)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def test_trainer_label_smoothing_shifts_the_labels_of_aiayn_causal_lms(tmp_path):
    """transformers' Trainer shifts the labels for label smoothing only for causal LMs it knows by name; importing
    aiayn adds AiaynDecoderForCausalLM, so plain TrainingArguments(label_smoothing_factor=0.1) is right."""
    model = lm_model("decoder")
    trainer = trainer_for(model, tmp_path, label_smoothing_factor=0.1)
    batch = padded_lm_batch([7, 5, 3])
    loss = trainer.compute_loss(model, dict(batch))
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    expected = smoothed_causal_lm_loss(logits, batch["labels"], 0.1)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=0)
    unshifted = smoothed_causal_lm_loss(logits, batch["labels"], 0.1, shift=False)
    assert not math.isclose(loss.item(), unshifted.item(), rel_tol=1e-3)


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


@pytest.mark.parametrize(("smoothing", "smoothed_by"), [(0.0, None), (0.1, "trainer"), (0.1, "model")])
def test_gradient_accumulation_gives_the_full_batch_step(smoothing, smoothed_by, tmp_path):
    """One step over 4 sequences of different lengths: one batch of 4, or 2 accumulated micro-batches of 2, give the
    same loss (the hand-computed full-batch loss) and the same weights: every micro-batch is divided by the token
    count of the whole accumulated batch, not by its own; label smoothing by the Trainer (`label_smoothing_factor`)
    or in the model's loss (`config.label_smoothing`)."""
    batch = padded_lm_batch([9, 2, 6, 3])
    rows = [{key: value[i] for key, value in batch.items()} for i in range(4)]
    results = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        model = lm_model("decoder", label_smoothing=smoothing if smoothed_by == "model" else 0.0)
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        expected = smoothed_causal_lm_loss(logits, batch["labels"], smoothing)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / f"{batch_size}"), report_to="none", use_cpu=True, max_steps=1,
            per_device_train_batch_size=batch_size, gradient_accumulation_steps=accumulation, learning_rate=0.5,
            optim="sgd", lr_scheduler_type="constant", save_strategy="no",
            label_smoothing_factor=smoothing if smoothed_by == "trainer" else 0.0,
            logging_steps=1, disable_tqdm=True,
        )  # fmt: skip
        trainer = transformers.Trainer(model=model, args=args, train_dataset=ListDataset(rows))
        loss = trainer.train().training_loss
        assert math.isclose(loss, expected.item(), rel_tol=1e-5), (batch_size, loss, expected.item())
        results.append({name: p.detach().clone() for name, p in model.named_parameters()})
    for name, weight in results[0].items():
        torch.testing.assert_close(results[1][name], weight, rtol=0, atol=1e-6, msg=name)


def test_translation_script_with_the_paper_recipe_from_the_command_line(tmp_path, monkeypatch):
    run_script("scripts/run_translation.py", [
        "--output_dir", str(tmp_path), "--do_train", "--preset", "transformer-base", "--config_overrides",
        "d_model=32,num_heads=4,d_ff=64,num_layers=1,num_decoder_layers=1", "--paper_recipe", "--max_steps", "2",
        "--vocab_size", "300", "--max_train_samples", "32", "--per_device_train_batch_size", "4", "--report_to",
        "none", "--max_source_length", "24", "--dataloader_pin_memory", "false",
    ], monkeypatch)  # fmt: skip
    with open(tmp_path / "trainer_state.json") as f:
        state = json.load(f)
    assert state["global_step"] == 2
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert model.generation_config.num_beams == 4 and model.generation_config.max_len_b == 50


def test_causal_lm_and_seq2seq_trainers_smooth_labels_without_nan(tmp_path):
    """Seq2SeqTrainer smooths unshifted labels; DataCollatorForSeq2Seq supplies the decoder inputs it then needs."""
    model = lm_model("seq2seq")
    trainer = trainer_for(model, tmp_path, label_smoothing_factor=0.1)
    collator = transformers.DataCollatorForSeq2Seq(word_tokenizer(), model=model)
    batch = collator([{"input_ids": [5, 6, 7, 2], "labels": [8, 9, 2]}, {"input_ids": [5, 2], "labels": [4, 2]}])
    loss = trainer.compute_loss(model, dict(batch))
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       decoder_input_ids=batch["decoder_input_ids"]).logits  # fmt: skip
    labels = batch["labels"].reshape(-1)
    kept = labels != -100
    log_probs = F.log_softmax(logits.reshape(-1, VOCAB)[kept].double(), -1)
    expected = (0.9 * -log_probs.gather(1, labels[kept, None]).squeeze(1) - 0.1 * log_probs.mean(-1)).mean()
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=0)
