"""Where a training step of each `aiayn demo` run spends its time: the data (the collator's batch), the forward of the
base model, the head and loss (the forward with labels, less the base model's; the fused losses compute their
gradients there), the backward, and the optimizer (gradient clipping, AdamW, the schedule, zeroing the gradients).
Each part is timed on the run's own trainer, data and batch size; medians over `--steps` steps after two warm-up
steps, at `--threads` threads.

The runs that fine-tune a saved model (or take its tokenizer) read it from `--demo`, a finished demo's folder.

    python benchmarks/demo_steps.py [--runs transformer-en-de bert-shakespeare] [--demo runs/demo] [--threads 1]
"""

import argparse
import os
import statistics
import tempfile
import time

import torch
import transformers

from aiayn.experiments.demo import FULL, run_trainer
from aiayn.experiments.machine import matmul_throughput, processor_name

PARTS = ("data", "base forward", "head and loss", "backward", "optimizer")


def base_inputs(batch: dict) -> dict:
    """The batch without what only the head reads."""
    return {key: value for key, value in batch.items() if key not in ("labels", "bool_masked_pos")}


def step_parts(trainer: transformers.Trainer, steps: int) -> dict[str, float]:
    """Median seconds of each part of a training step."""
    trainer.create_optimizer_and_scheduler(num_training_steps=trainer.args.max_steps)
    model, optimizer = trainer.model.train(), trainer.optimizer
    base = getattr(model, model.base_model_prefix)
    batches = iter(trainer.get_train_dataloader())
    times = {part: [] for part in PARTS}
    for step in range(steps + 2):
        start = time.perf_counter()
        batch = next(batches)
        loaded = time.perf_counter()
        base(**base_inputs(batch))  # the base model's forward alone, its graph dropped
        based = time.perf_counter()
        loss = model(**batch).loss
        forwarded = time.perf_counter()
        loss.backward()
        backwarded = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)
        optimizer.step()
        trainer.lr_scheduler.step()
        optimizer.zero_grad()
        done = time.perf_counter()
        if step >= 2:
            for part, seconds in zip(
                PARTS, (loaded - start, based - loaded, forwarded - based - (based - loaded), backwarded - forwarded,
                        done - backwarded), strict=True
            ):  # fmt: skip
                times[part].append(seconds)
    return {part: statistics.median(values) for part, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", default=[run.name for run in FULL])
    parser.add_argument("--demo", default="runs/demo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    runs = {run.name: run for run in FULL}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.runs:
            run = runs[name]
            source = run.weights_from or run.tokenizer_from
            if source and not os.path.isdir(os.path.join(args.demo, source)):
                raise SystemExit(f"{name} reads the folder of {source}: run `aiayn demo --out {args.demo}` first.")
            trainer = run_trainer(run, os.path.join(scratch, name), source and os.path.join(args.demo, source))
            parts = step_parts(trainer, args.steps)
            rows.append((name, run.steps, parts))
    print(f"{processor_name()}, {args.threads} thread(s), float32 products at {matmul_throughput():.0f} GFLOP/s")
    print(f"median milliseconds per step over {args.steps} steps; 'run s' = steps x step")
    header = ("run", *PARTS, "step", "steps", "run s")
    print("  ".join(f"{h:>13}" if i else f"{h:28}" for i, h in enumerate(header)))
    for name, steps, parts in rows:
        total = sum(parts.values())
        cells = [f"{1000 * parts[p]:13.1f}" for p in PARTS] + [f"{1000 * total:13.1f}", f"{steps:13d}",
                                                                 f"{steps * total:13.1f}"]  # fmt: skip
        print(f"{name:28}" + "  ".join(cells))


if __name__ == "__main__":
    main()
