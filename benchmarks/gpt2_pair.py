"""A GPT-2-shaped pair in one process: transformers' `GPT2LMHeadModel` and its conversion to aiayn's decoder (learned
positions, pre-LN, `gelu_new`, tied embeddings; d_model 512, 6 layers, 8 heads, d_ff 2048, vocabulary 8000 by
default; no dropout), same weights. It times

- the training step (forward with labels, backward, AdamW step) at batch 8 x 256 tokens,
- greedy cached `generate()` of 128 new tokens after a 32-token prompt at batch 1, as users call it,
- the first `generate()` call of each model (after a training step of each, which warms the process),

their repeats interleaved (A B B A ...); it prints medians, the ratio aiayn / GPT-2 of speeds (above 1: aiayn is
faster), and checks that both generate the same tokens. Two more rows time aiayn's generate() with its weights in
the single-row layout (`aiayn.decoding_layout`): entered for each call (what laying out and back costs included),
and held by a copy of the model for the whole run (the speed of a model whose weights always lay so).

    python benchmarks/gpt2_pair.py [--threads 1] [--repeats 7]
"""

import argparse
import contextlib
import copy
import statistics
import time

import torch
import transformers

import aiayn
from aiayn.conversion import convert_from_hf
from aiayn.experiments.machine import processor_name


def build(args) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=args.vocab,
        n_embd=args.d_model,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=4 * args.d_model,
        n_positions=max(args.train_length, args.prompt + args.new_tokens),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=args.vocab - 1,
        eos_token_id=args.vocab - 1,
    )
    reference = transformers.GPT2LMHeadModel(config)
    models = {"aiayn": convert_from_hf(reference), "GPT-2": reference}
    for model in models.values():
        model.set_attn_implementation("sdpa")
    return models


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--train-length", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = build(args)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, args.vocab - 1, (1, args.prompt), generator=generator)
    batch = torch.randint(0, args.vocab - 1, (args.train_batch, args.train_length), generator=generator)
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4) for name, model in models.items()}

    def generate(name: str) -> torch.Tensor:
        model = models[name].eval()
        with torch.inference_mode(), layouts[name]():
            return model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                do_sample=False,
            )

    def train(name: str):
        model = models[name].train()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)

    def seconds(work, name: str):
        start = time.perf_counter()
        result = work(name)
        return time.perf_counter() - start, result

    for name in models:  # the process's first products, kept out of the first generate() call
        train(name)
    layouts = dict.fromkeys(models, contextlib.nullcontext)
    first, tokens = {}, {}
    for name in models:
        first[name], tokens[name] = seconds(generate, name)
    if not torch.equal(tokens["aiayn"], tokens["GPT-2"]):
        raise RuntimeError("aiayn and GPT-2 generated different tokens from the same weights")
    laid_out = ["aiayn, laid out per call", "aiayn, laid out once"]
    models[laid_out[0]] = models["aiayn"]
    layouts[laid_out[0]] = lambda: aiayn.decoding_layout(models["aiayn"])
    models[laid_out[1]] = copy.deepcopy(models["aiayn"])
    layouts[laid_out[1]] = contextlib.nullcontext
    runs = {"generate": (generate, list(models)), "train": (train, ["aiayn", "GPT-2"])}
    times = {kind: {name: [] for name in names} for kind, (_, names) in runs.items()}
    with aiayn.decoding_layout(models[laid_out[1]]):  # held by the copy, which only decodes
        for kind, (work, names) in runs.items():
            for name in names:
                work(name)  # warm
            for repeat in range(args.repeats):
                for name in names if repeat % 2 == 0 else reversed(names):
                    times[kind][name].append(seconds(work, name)[0])
    print(
        f"{processor_name()}, {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}; {args.threads} thread(s); medians of {args.repeats} interleaved repeats"
    )
    print(f"{'':44} {'aiayn':>9} {'GPT-2':>9} {'aiayn / GPT-2 speed':>20}")
    medians = {kind: {name: statistics.median(runs) for name, runs in named.items()} for kind, named in times.items()}
    rows = [
        (f"training step, {args.train_batch} x {args.train_length} (s)", "train", "aiayn"),
        (f"generate, {args.new_tokens} new tokens, batch 1 (s)", "generate", "aiayn"),
        *((f"  generate, {name} (s)", "generate", name) for name in laid_out),
    ]
    for label, kind, name in rows:
        ours, reference = medians[kind][name], medians[kind]["GPT-2"]
        print(f"{label:44} {ours:9.3f} {reference:9.3f} {reference / ours:20.2f}")
    print(f"{'first generate() call (s)':44} {first['aiayn']:9.3f} {first['GPT-2']:9.3f}")


if __name__ == "__main__":
    main()
