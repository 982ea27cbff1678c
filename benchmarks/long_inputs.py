"""Long inputs: time and peak memory of full attention against sliding windows, BigBird's random blocks and
Linformer, as the sequence grows.

One model shape (by default an encoder of d_model 64, 4 heads, d_ff 256, 1 layer, vocabulary 1000, sinusoidal
positions, sdpa attention, dropout off) with full attention, with each window, with BigBird (a window, global first
token, random blocks) and with Linformer (encoders), at each length, batch 1:

- the inference forward (masked-LM logits), in seconds;
- the training step (forward with labels, backward, AdamW step), in seconds: 15% of the tokens masked for the
  encoder, every next token for the decoder (`--family decoder`, causal windows);
- the peak memory of each: the model's parameters and buffers, the optimizer's state, and the most a call allocates
  beyond them (`compare.peak_allocated_mib`, read from the allocation trace of torch's profiler: exact and the same
  from run to run), each configuration in a fresh process; on GPUs `torch.cuda.max_memory_allocated`.

Which computation each configuration takes is printed beside it: `full` (no window: sdpa without a mask), `masked`
(a window through transformers' sliding-window mask, which scores every pair of positions), `banded`
(`aiayn.local_attention_aiayn.BandedAttention`: blocks of queries against the keys their window reaches, and the
random blocks), chosen by `BandGeometry.is_cheaper`, a rule over the shapes, or `projected` (Linformer: every query
against `linformer_k` rows). The models of one length share their weights and run in one fresh process, their
repeats interleaved (full, w1, w2, ..., full, ...) so that a neighbour's load affects them alike; the table gives
medians and each configuration's speed-up over full attention.

    python benchmarks/long_inputs.py     # lengths 1024 4096 16384; windows 256 512; BigBird 64 + 2; Linformer 64
    python benchmarks/long_inputs.py --lengths 16384 --windows 256 --no-train
    python benchmarks/long_inputs.py --family decoder --json results.json
"""

import argparse
import gc
import json
import statistics
import time

import torch
import transformers
from compare import in_fresh_process, peak_allocated_mib, tensor_mib

import aiayn
from aiayn.experiments.machine import machine_description, synchronize
from aiayn.local_attention_aiayn import BandGeometry

AUTO_CLASSES = {"encoder": transformers.AutoModelForMaskedLM, "decoder": transformers.AutoModelForCausalLM}
KINDS = ("forward", "train")


def attentions(spec: dict) -> dict[str, dict]:
    """Each configuration's label and config fields: full attention, each window, BigBird, Linformer (encoders)."""
    configurations = {"full": {}}
    configurations.update({f"window {window}": {"sliding_window": window} for window in spec["windows"]})
    if spec["bigbird"]:
        window, blocks = spec["bigbird"]
        configurations[f"BigBird {window} + {blocks} random"] = {
            "sliding_window": window, "attention_random_blocks": blocks,
        }  # fmt: skip
    if spec["linformer_k"] and spec["family"] == "encoder":
        configurations[f"Linformer k={spec['linformer_k']}"] = {"linformer_k": spec["linformer_k"]}
    return configurations


def build(spec: dict, fields: dict) -> torch.nn.Module:
    """The model of `spec` with the attention `fields`, from the same seed: the same weights for all."""
    config = aiayn.preset_config(
        {"encoder": "tiny-encoder", "decoder": "tiny-decoder"}[spec["family"]],
        vocab_size=1000,
        d_model=spec["d_model"],
        num_heads=spec["heads"],
        d_ff=4 * spec["d_model"],
        num_layers=spec["layers"],
        position_embedding_type="sinusoidal",
        max_position_embeddings=max(spec["lengths"]),
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        **fields,
    )
    torch.manual_seed(0)
    model = AUTO_CLASSES[spec["family"]].from_config(config, attn_implementation="sdpa")
    return model.to(spec["device"])


def path(spec: dict, fields: dict, length: int) -> str:
    if "linformer_k" in fields:
        return "projected"
    if "sliding_window" not in fields:
        return "full"
    cheaper = BandGeometry(fields["sliding_window"], spec["family"] == "decoder").is_cheaper(length)
    return "banded" if cheaper else "masked"


class Workload:
    """One sequence of `length` tokens and what is timed on a model."""

    def __init__(self, spec: dict, length: int):
        generator = torch.Generator().manual_seed(0)
        self.device = spec["device"]
        self.ids = torch.randint(3, 1000, (1, length), generator=generator).to(self.device)
        if spec["family"] == "encoder":
            masked = torch.rand(self.ids.shape, generator=generator).to(self.device) < 0.15
            self.labels = self.ids.masked_fill(~masked, -100)
        else:
            self.labels = self.ids
        self.optimizers = {}

    def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        if model not in self.optimizers:
            self.optimizers[model] = torch.optim.AdamW(model.parameters(), lr=1e-4)
        return self.optimizers[model]

    def run(self, kind: str, model: torch.nn.Module):
        if kind == "forward":
            model.eval()
            with torch.no_grad():
                model(input_ids=self.ids)
            return
        model.train()
        optimizer = self.optimizer(model)
        model(input_ids=self.ids, labels=self.labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def measure_speed(spec: dict) -> dict:
    """Every attention of one length in this process, repeats interleaved; median seconds per call."""
    length = spec["length"]
    models = {label: build(spec, fields) for label, fields in attentions(spec).items()}
    workload = Workload(spec, length)
    times = {kind: {key: [] for key in models} for kind in spec["kinds"]}
    for kind in spec["kinds"]:
        for model in models.values():  # warm-up
            workload.run(kind, model)
        for _ in range(spec["repeats"]):
            for key, model in models.items():
                synchronize(workload.device)
                start = time.perf_counter()
                workload.run(kind, model)
                synchronize(workload.device)
                times[kind][key].append(time.perf_counter() - start)
    return {
        kind: {key: statistics.median(values) for key, values in per_model.items()}
        for kind, per_model in times.items()
    }


def measure_memory(spec: dict) -> dict:
    """One attention of one length in this process: peak MiB of each kind, after a warm-up call."""
    model = build(spec, attentions(spec)[spec["attention"]])
    workload = Workload(spec, spec["length"])
    results = {}
    for kind in spec["kinds"]:
        workload.run(kind, model)
        gc.collect()
        if spec["device"] == "cuda":
            torch.cuda.reset_peak_memory_stats()
            workload.run(kind, model)
            results[kind] = torch.cuda.max_memory_allocated() / 2**20
            continue
        state = [tensor for per_weight in workload.optimizer(model).state.values() for tensor in per_weight.values()]
        held = tensor_mib([*model.parameters(), *model.buffers(), *(state if kind == "train" else [])])
        results[kind] = held + peak_allocated_mib(lambda kind=kind: workload.run(kind, model))
    return results


def worker(spec: dict):
    torch.set_num_threads(spec["threads"])
    result = measure_speed(spec) if spec["mode"] == "speed" else measure_memory(spec)
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=list(AUTO_CLASSES), default="encoder")
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--windows", nargs="+", type=int, default=[256, 512])
    parser.add_argument("--bigbird", nargs=2, type=int, default=[64, 2], metavar=("WINDOW", "BLOCKS"),
                        help="BigBird's window and random blocks (default 64 2; 0 0: none)")  # fmt: skip
    parser.add_argument("--linformer-k", type=int, default=64, help="Linformer's k, encoders (default 64; 0: none)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each model (default 3)")
    parser.add_argument("--no-train", action="store_true", help="the forward only")
    parser.add_argument("--no-memory", action="store_true", help="measure speed only")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))

    spec = {
        "family": args.family,
        "lengths": args.lengths,
        "windows": args.windows,
        "bigbird": args.bigbird if all(args.bigbird) else None,
        "linformer_k": args.linformer_k,
        "d_model": args.d_model,
        "heads": args.heads,
        "layers": args.layers,
        "device": args.device,
        "threads": args.threads,
        "repeats": args.repeats,
        "kinds": ["forward"] if args.no_train else list(KINDS),
    }
    print(f"{machine_description(args.device)}; torch {torch.__version__}, transformers {transformers.__version__}")
    print(
        f"{args.family}, d_model {args.d_model}, {args.heads} heads, d_ff {4 * args.d_model}, {args.layers} layer(s), "
        f"batch 1, {args.threads} thread(s), medians of {args.repeats}"
    )
    kinds = spec["kinds"]
    header = " | ".join(f"{kind} s | speed-up | peak MiB" for kind in kinds)
    print(f"| length | attention | path | {header} |")
    print("|---|---|---|" + "---|---|---|" * len(kinds))
    rows = []
    for length in args.lengths:
        speed = in_fresh_process({**spec, "mode": "speed", "length": length}, __file__)
        for label, fields in attentions(spec).items():
            memory = (
                {}
                if args.no_memory
                else in_fresh_process({**spec, "mode": "memory", "length": length, "attention": label}, __file__)
            )
            row = {"length": length, "attention": label, "path": path(spec, fields, length)}
            cells = []
            for kind in kinds:
                seconds, speedup = speed[kind][label], speed[kind]["full"] / speed[kind][label]
                row[kind] = {"seconds": seconds, "speedup": speedup, "peak_mib": memory.get(kind)}
                peak = f"{memory[kind]:.1f}" if kind in memory else "-"
                cells.append(f"{seconds:.3f} | {speedup:.2f} | {peak}")
            print(f"| {length} | {label} | {row['path']} | {' | '.join(cells)} |", flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_description(args.device), "spec": spec, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
