"""What additive attention scores cost beside dot products: the forward of one encoder layer (d_model 512, 8 heads of
64, d_ff 2048) over one sequence, dot products through sdpa and through eager attention, additive scores (which
compute themselves, a chunk of queries at a time), in seconds (median of the repeats, one thread) and in peak memory
beyond the weights (torch's CPU allocator, as `compare.py` measures it).

    python benchmarks/attention_scores.py [--lengths 512 2048] [--repeats 3] [--threads 1]
"""

import argparse
import statistics
import time

import torch
from compare import peak_allocated_mib

import aiayn

KINDS = {
    "dot product, sdpa": ("dot_product", "sdpa"),
    "dot product, eager": ("dot_product", "eager"),
    "additive": ("additive", "sdpa"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| length | score | seconds | x dot product (sdpa) | peak MiB |\n|---|---|---|---|---|")
    for length in args.lengths:
        ids = torch.randint(3, 1000, (1, length), generator=torch.Generator().manual_seed(0))
        models = {}
        for name, (score, implementation) in KINDS.items():
            config = aiayn.preset_config(
                "tiny-encoder", vocab_size=1000, d_model=512, num_heads=8, d_ff=2048, num_layers=1,
                max_position_embeddings=length, attention_score=score, dropout=0.0, attention_dropout=0.0,
            )  # fmt: skip
            torch.manual_seed(0)
            models[name] = aiayn.AiaynEncoderModel(config, add_pooling_layer=False).eval()
            models[name].set_attn_implementation(implementation)
        seconds = {name: [] for name in KINDS}
        with torch.no_grad():
            for model in models.values():
                model(ids)  # warm
            for _ in range(args.repeats):  # interleaved
                for name, model in models.items():
                    start = time.perf_counter()
                    model(ids)
                    seconds[name].append(time.perf_counter() - start)
            for name, model in models.items():
                median, reference = statistics.median(seconds[name]), statistics.median(seconds["dot product, sdpa"])
                peak = peak_allocated_mib(lambda model=model, ids=ids: model(ids))
                print(f"| {length} | {name} | {median:.3f} | {median / reference:.1f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
