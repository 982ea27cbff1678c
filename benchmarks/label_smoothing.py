"""The paper's label smoothing (0.1) in a training step of its base model (by default d_model 512, 6 + 6 layers, 8
heads, d_ff 2048, a shared vocabulary of 32000), where the smoothing is computed:

- `Trainer`: transformers' `Trainer` with `label_smoothing_factor=0.1`, which takes the labels from the batch and
  smooths the model's full logits (`LabelSmoother`), as with any model; for aiayn and for `MarianMTModel` (the same
  shapes, other weights);
- `model`: aiayn with `config.label_smoothing=0.1` (what `PaperRecipe.apply` sets) and the Trainer's factor 0: the
  model smooths its own loss, computed without the batch's logits (`losses_aiayn.token_prediction_loss`).

Each step is the Trainer's `compute_loss` with the batch's labels, the backward and an AdamW step; the three run in
one fresh process, their repeats interleaved, at `--threads` threads (medians, and their ratio to Marian's). Then the
peak memory of each step, as `compare.py` measures it: parameters, optimizer state and the most the step allocates
beyond them, from the allocation trace of torch's profiler (exact, the same from run to run).

    python benchmarks/label_smoothing.py [--length 128] [--batch 8] [--repeats 5] [--threads 1] [--vocab 32000]
"""

import argparse
import json
import statistics
import time

import torch
import transformers
from compare import SHAPES, in_fresh_process, marian_pair, peak_allocated_mib, tensor_mib

from aiayn.experiments.machine import machine_description, matmul_throughput

SMOOTHING = 0.1
VARIANTS = ("Marian, Trainer", "aiayn, Trainer", "aiayn, model")


class Step:
    """One variant's training step: its model, a Trainer holding the smoothing, and an AdamW optimizer."""

    def __init__(self, variant: str, models: dict):
        self.in_model = variant.endswith("model")
        self.model = models["reference" if variant.startswith("Marian") else "aiayn"]  # aiayn's two steps share one
        arguments = transformers.TrainingArguments(
            "unused", report_to="none", use_cpu=True, label_smoothing_factor=0.0 if self.in_model else SMOOTHING
        )
        self.trainer = transformers.Trainer(model=self.model, args=arguments)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def __call__(self, batch: dict):
        if hasattr(self.model.config, "label_smoothing"):
            self.model.config.label_smoothing = SMOOTHING if self.in_model else 0.0
        self.model.train()
        self.trainer.compute_loss(self.model, dict(batch)).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def models_and_batch(spec: dict) -> tuple[dict, dict]:
    """Both models (dropout 0.1) and a batch of `spec["batch"]` random pairs of `spec["length"]` tokens a side."""
    torch.manual_seed(0)
    length, batch_size, vocab = spec["length"], spec["batch"], spec["vocab"]
    d_model = spec["d_model"]
    shape = {"d_model": d_model, "layers": spec["layers"], "heads": d_model // 64, "d_ff": 4 * d_model, "vocab": vocab}
    aiayn_model, reference = marian_pair(shape, length)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (batch_size, length), generator=generator)
    labels = torch.randint(3, vocab, (batch_size, length), generator=generator)
    decoder_input_ids = torch.cat([torch.zeros(batch_size, 1, dtype=torch.long), labels[:, :-1]], dim=1)
    batch = {"input_ids": ids, "decoder_input_ids": decoder_input_ids, "labels": labels}
    return {"aiayn": aiayn_model, "reference": reference}, batch


def measure(spec: dict) -> dict:
    """Each variant's median step seconds and peak MiB."""
    models, batch = models_and_batch(spec)
    steps = {variant: Step(variant, models) for variant in VARIANTS}
    for step in steps.values():  # warm-up: the optimizers' state exists from here
        step(batch)
    times = {variant: [] for variant in VARIANTS}
    for repeat in range(spec["repeats"]):
        for variant in VARIANTS if repeat % 2 == 0 else reversed(VARIANTS):
            start = time.perf_counter()
            steps[variant](batch)
            times[variant].append(time.perf_counter() - start)
    results = {}
    for variant, step in steps.items():
        state = [value for values in step.optimizer.state.values() for value in values.values()]
        held = tensor_mib([*step.model.parameters(), *step.model.buffers(), *state])
        peak = held + peak_allocated_mib(lambda step=step: step(batch))
        results[variant] = {"seconds": statistics.median(times[variant]), "peak_mib": peak}
    return results


def worker(spec: dict):
    torch.set_num_threads(spec["threads"])
    transformers.logging.set_verbosity_error()
    print(json.dumps(measure(spec)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=128, help="tokens a side (default 128)")
    parser.add_argument("--batch", type=int, default=8, help="pairs a step (default 8)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    base = SHAPES["512"]
    parser.add_argument("--d-model", type=int, default=base["d_model"], help="heads of 64, d_ff 4 d_model")
    parser.add_argument("--layers", type=int, default=base["layers"], help="layers a stack")
    parser.add_argument("--vocab", type=int, default=base["vocab"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    torch.set_num_threads(args.threads)
    spec = {"length": args.length, "batch": args.batch, "repeats": args.repeats, "threads": args.threads,
            "d_model": args.d_model, "layers": args.layers, "vocab": args.vocab}  # fmt: skip
    print(f"{machine_description('cpu')}, {args.threads} thread(s): float32 products at "
          f"{matmul_throughput('cpu'):.0f} GFLOP/s")  # fmt: skip
    results = in_fresh_process(spec, __file__)
    seconds = {variant: result["seconds"] for variant, result in results.items()}
    memory = {variant: result["peak_mib"] for variant, result in results.items()}
    print(f"d_model {args.d_model}, {args.layers} + {args.layers} layers, vocabulary {args.vocab}; batches of "
          f"{args.batch} pairs of {args.length} tokens a side; label smoothing {SMOOTHING}")  # fmt: skip
    print(f"{'model, smoothed by':<18} {'step s':>7} {'speed / Marian':>14} {'peak MiB':>9} {'/ Marian':>8}")
    marian = VARIANTS[0]
    for variant in VARIANTS:
        print(f"{variant:<18} {seconds[variant]:7.2f} {seconds[marian] / seconds[variant]:14.2f} "
              f"{memory[variant]:9.1f} {memory[variant] / memory[marian]:8.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
