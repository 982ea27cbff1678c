"""Cached `generate()` throughput of aiayn against transformers' GPT-2 and T5 of the same shape.

Each aiayn model is the conversion of its reference, so both hold the same weights and generate the same tokens
(checked). Each pair runs in one process with its repeats interleaved (A B B A ...), so that a neighbour's load
affects both alike; the table gives the median new tokens per second of each and their ratio, aiayn / reference. A
matmul probe beside it tells how fast this machine was during the run.

    python benchmarks/generate.py                    # 1 thread, 5 repeats
    python benchmarks/generate.py --quick --json generate.json
"""

import argparse
import json
import platform
import statistics
import time

import torch
import transformers

from aiayn.conversion import convert_from_hf

VOCAB = 32000


def gpt2_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """GPT-2 at the base size (d_model 512, 6 layers, 8 heads, d_ff 2048, learned positions, pre-LN) and its
    conversion: the same weights and the same arithmetic."""
    eos = VOCAB - 1
    reference = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=512, n_layer=6, n_head=8, n_positions=1024, bos_token_id=eos, eos_token_id=eos
        )
    )
    return convert_from_hf(reference), reference


def t5_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """t5-small's shape (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, relative positions, pre-RMSNorm) and its
    conversion."""
    config = transformers.T5Config(vocab_size=32128, decoder_start_token_id=0)
    reference = transformers.T5ForConditionalGeneration(config)
    return convert_from_hf(reference), reference


def matmul_gflops(seconds: float = 0.5) -> float:
    a, b = torch.randn(512, 2048), torch.randn(2048, 512)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * 512 * 2048 * 512 * count / (time.perf_counter() - start) / 1e9


def run_case(name, pair, batch, prompt_length, new_tokens, repeats, **generate_kwargs) -> dict:
    models = dict(zip(("aiayn", "reference"), pair(), strict=True))
    vocab = models["reference"].config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (batch, prompt_length), generator=generator)
    kwargs = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "use_cache": True, **generate_kwargs}
    times = {key: [] for key in models}

    def generate(key):
        with torch.inference_mode():
            return models[key].eval().generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)

    def timed(key):
        start = time.perf_counter()
        generate(key)
        return time.perf_counter() - start

    # The warm-up also checks that both models do the same work: the same weights give the same tokens.
    if not torch.equal(generate("aiayn"), generate("reference")):
        raise RuntimeError(f"{name}: aiayn and the reference generated different tokens")
    for repeat in range(repeats):
        for key in models if repeat % 2 == 0 else reversed(models):
            times[key].append(timed(key))
    tokens = batch * new_tokens
    result = {"case": name, "batch": batch, "prompt": prompt_length, "new_tokens": new_tokens, **generate_kwargs}
    for key, values in times.items():
        result[f"{key}_tokens_per_s"] = tokens / statistics.median(values)
        result[f"{key}_seconds"] = values
    result["ratio"] = result["aiayn_tokens_per_s"] / result["reference_tokens_per_s"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 repeats and 32 new tokens")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats, new_tokens = (3, 32) if args.quick else (args.repeats, 128)
    greedy = {"do_sample": False, "num_beams": 1}
    beam = {"do_sample": False, "num_beams": 4}
    cases = [
        ("GPT-2 greedy", gpt2_pair, 1, 32, new_tokens, greedy),
        ("GPT-2 greedy", gpt2_pair, 8, 32, new_tokens, greedy),
        ("T5 beam 4", t5_pair, 1, 32, new_tokens // 2, beam),
        ("T5 beam 4", t5_pair, 8, 32, new_tokens // 2, beam),
    ]
    probe_before = matmul_gflops()
    results = []
    print(f"{'case':14} {'batch':>5} {'new':>4} {'aiayn tok/s':>12} {'reference tok/s':>16} {'ratio':>6}")
    for name, pair, batch, prompt_length, tokens, kwargs in cases:
        torch.manual_seed(0)
        result = run_case(name, pair, batch, prompt_length, tokens, repeats, **kwargs)
        results.append(result)
        print(
            f"{name:14} {batch:5d} {tokens:4d} {result['aiayn_tokens_per_s']:12.1f} "
            f"{result['reference_tokens_per_s']:16.1f} {result['ratio']:6.2f}"
        )
    probe_after = matmul_gflops()
    print(f"matmul probe: {probe_before:.0f} GFLOP/s before, {probe_after:.0f} after ({args.threads} thread(s))")
    if args.json:
        environment = {
            "threads": args.threads,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "processor": platform.processor() or platform.machine(),
            "matmul_gflops": [probe_before, probe_after],
        }
        with open(args.json, "w") as f:
            json.dump({"environment": environment, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
