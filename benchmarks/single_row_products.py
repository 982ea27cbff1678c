"""Single-row products, the work of each step of batch-1 decoding, in the two weight layouts and both CPU libraries.

A decoding step multiplies one row by every weight matrix of the model: memory-bound products whose speed depends on
how the weights lie in memory. `nn.Linear` (aiayn, BERT, T5, Marian) stores (out, in); GPT-2's `Conv1D` stores
(in, out). For each product of a model of the benchmark's shape this times, one row at a time, with weights read
from memory (copies of about `--megabytes` cycled, so that no cache holds them):

- `nn.Linear`: `F.linear(x, W)` with `W` (out, in), MKL on x86;
- `(in, out)`: `x @ W_t` with `W_t` (in, out), as GPT-2's `Conv1D` computes;
- `oneDNN`: oneDNN's inner product on `W` (out, in).

Repeats are interleaved; the table gives medians in microseconds per product.

    python benchmarks/single_row_products.py
    python benchmarks/single_row_products.py --d-model 768 --d-ff 3072 --vocab 50257 --threads 2
"""

import argparse
import statistics
import time

import torch

from aiayn.experiments.machine import processor_name


def median_microseconds(products: dict, count: int, repeats: int) -> dict[str, float]:
    """The median time of each of `products` (each computing `count` products), their repeats interleaved."""
    for product in products.values():
        product()
    times = {name: [] for name in products}
    for repeat in range(repeats):
        for name in products if repeat % 2 == 0 else reversed(list(products)):
            start = time.perf_counter()
            products[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) / count * 1e6 for name, values in times.items()}


def time_shape(out_features: int, in_features: int, megabytes: int, repeats: int) -> dict[str, float]:
    count = max(1, megabytes * 2**20 // (out_features * in_features * 4))
    weights = [torch.randn(out_features, in_features) for _ in range(count)]
    transposed = [weight.t().contiguous() for weight in weights]
    x = torch.randn(1, in_features)
    with torch.inference_mode():
        products = {
            "nn.Linear (out, in)": lambda: [torch.nn.functional.linear(x, weight) for weight in weights],
            "(in, out)": lambda: [torch.mm(x, weight) for weight in transposed],
        }
        if torch.backends.mkldnn.is_available():
            products["oneDNN (out, in)"] = lambda: [
                torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "") for weight in weights
            ]
        return median_microseconds(products, count, repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--d-ff", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--megabytes", type=int, default=128, help="weights cycled per timing (default 128)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    d = args.d_model
    shapes = {
        "query-key-value": (3 * d, d),
        "attention output": (d, d),
        "feed-forward in": (args.d_ff, d),
        "feed-forward out": (d, args.d_ff),
        "output head": (args.vocab, d),
    }
    print(
        f"{processor_name()}, {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}, "
        f"{args.threads} thread(s); microseconds per single-row product, weights read from memory"
    )
    rows = {name: time_shape(*shape, args.megabytes, args.repeats) for name, shape in shapes.items()}
    columns = list(next(iter(rows.values())))
    print(f"{'product':18} {'in -> out':>13} | " + " | ".join(f"{column:>18}" for column in columns))
    for name, times in rows.items():
        out_features, in_features = shapes[name]
        sizes = f"{in_features} -> {out_features}"
        print(f"{name:18} {sizes:>13} | " + " | ".join(f"{times[column]:18.1f}" for column in columns))
    layer = [name for name in shapes if name != "output head"]
    for column in columns:
        print(f"one layer's products, {column}: {sum(rows[name][column] for name in layer):.0f} us")


if __name__ == "__main__":
    main()
