"""Greedy decoding of one sequence with and without `aiayn.decoding_layout`, and what entering and leaving the block
costs: a GPT-style decoder (d_model 512, 6 layers, 8 heads, d_ff 2048, vocabulary 32000 by default) with random
weights, new tokens per second over repeats that alternate the two layouts (medians), and the seconds the block takes
to lay the weights out and back.

    python benchmarks/decoding_layout.py [--threads 1] [--new-tokens 64] [--repeats 3]
"""

import argparse
import statistics
import time

import torch

import aiayn
from aiayn import layout_aiayn


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = aiayn.preset_config(
        "gpt2-small", d_model=args.d_model, num_heads=8, d_ff=4 * args.d_model, num_layers=args.layers,
        vocab_size=args.vocab, bos_token_id=1, eos_token_id=2, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = aiayn.AiaynDecoderForCausalLM(config).eval()
    prompt = torch.randint(3, args.vocab, (1, 16), generator=torch.Generator().manual_seed(0))

    def tokens_per_second() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(prompt, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
        return args.new_tokens / (time.perf_counter() - start)

    speeds, costs = {"standard": [], "decoding_layout": []}, {"lay out": [], "restore": []}
    for _ in range(args.repeats):
        tokens_per_second()  # warm
        speeds["standard"].append(tokens_per_second())
        start = time.perf_counter()
        with aiayn.decoding_layout(model):
            entered = time.perf_counter()
            costs["lay out"].append(entered - start)
            speeds["decoding_layout"].append(tokens_per_second())
            leaving = time.perf_counter()
        costs["restore"].append(time.perf_counter() - leaving)
    assert not any(map(layout_aiayn.is_transposed, (p for p in model.parameters() if p.dim() == 2)))
    print(f"greedy batch 1, {args.new_tokens} new tokens, {args.threads} thread(s), median of {args.repeats}:")
    for name, values in speeds.items():
        print(f"  {name:16s} {statistics.median(values):7.1f} tokens/s")
    ratio = statistics.median(speeds["decoding_layout"]) / statistics.median(speeds["standard"])
    print(f"  ratio {ratio:.2f}")
    for name, values in costs.items():
        print(f"  {name:16s} {statistics.median(values):7.3f} s")


if __name__ == "__main__":
    main()
