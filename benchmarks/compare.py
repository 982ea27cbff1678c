"""Speed and memory of aiayn against transformers' own models of the same shape, side by side.

Pairs (d_model 512, 6 layers per stack, 8 heads, d_ff 2048, vocabulary 32000, the models' default dropout 0.1):

    AiaynEncoderForMaskedLM             vs  BertForMaskedLM            (the conversion of the reference: same weights)
    AiaynDecoderForCausalLM             vs  GPT2LMHeadModel            (the conversion of the reference)
    AiaynSeq2SeqForConditionalGeneration vs T5ForConditionalGeneration (the conversion of the reference)
    AiaynSeq2SeqForConditionalGeneration vs MarianMTModel              (transformer-base; same shapes, own weights)

For each pair and sequence length it measures
- the training step (forward, backward, AdamW step) in tokens per second, and its model FLOPs utilisation: the
  matmul FLOPs of the step (`training_flops`) per second over this machine's matmul ceiling, measured at the start
  with both of torch's CPU matmul libraries (MKL through `torch.matmul`, oneDNN through its linear primitive);
- the inference forward in tokens per second;
- cached `generate()` in new tokens per second (greedy for GPT-2; beam 4, the paper's decoding, for seq2seq), the
  prompt or source being the sequence length;
- the peak memory of each of the three: the model's parameters and buffers, the optimizer's state, and the most a
  call allocates beyond them (activations, gradients, cache, logits), each model in a fresh process of its own.

Speed: both models of a pair run in one fresh process with the same inputs and the same attention backend (sdpa),
their repeats interleaved (A B B A ...) so that a neighbour's load affects both alike; the table gives medians and
the ratio aiayn / reference. Memory: what a call allocates is read from the allocation trace of torch's profiler
(`peak_allocated_mib`), after a warm-up call; it is exact and the same from run to run.

    python benchmarks/compare.py                           # lengths 128 to 2048, 1 thread
    python benchmarks/compare.py --quick                   # lengths 128 and 512, smaller batches: a few minutes
    python benchmarks/compare.py --pairs gpt2 t5 --lengths 1024 --threads 2 --json results.json
"""

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import transformers

import aiayn
from aiayn.conversion import convert_from_hf

VOCAB = 32000
SHAPE = {"d_model": 512, "layers": 6, "heads": 8, "d_ff": 2048}
# In the order they run: training changes the weights, and the generated tokens are compared before it.
KINDS = ("generate", "forward", "train")


def bert_pair(max_length: int):
    reference = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=SHAPE["d_model"],
            num_hidden_layers=SHAPE["layers"],
            num_attention_heads=SHAPE["heads"],
            intermediate_size=SHAPE["d_ff"],
            max_position_embeddings=max_length,
        )
    )
    return convert_from_hf(reference), reference


def gpt2_pair(max_length: int):
    reference = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=VOCAB,
            n_embd=SHAPE["d_model"],
            n_layer=SHAPE["layers"],
            n_head=SHAPE["heads"],
            n_inner=SHAPE["d_ff"],
            n_positions=max_length,
            bos_token_id=VOCAB - 1,
            eos_token_id=VOCAB - 1,
        )
    )
    return convert_from_hf(reference), reference


def t5_pair(max_length: int):
    reference = transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=VOCAB,
            d_model=SHAPE["d_model"],
            d_kv=SHAPE["d_model"] // SHAPE["heads"],
            num_layers=SHAPE["layers"],
            num_heads=SHAPE["heads"],
            d_ff=SHAPE["d_ff"],
            decoder_start_token_id=0,
        )
    )
    return convert_from_hf(reference), reference


def marian_pair(max_length: int):
    """The paper's base model (post-LN, sinusoidal positions, ReLU, shared and tied embeddings) in both libraries,
    with the same dropout everywhere. transformers has no conversion from Marian, so the weights differ."""
    dropout = {"dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1}
    special = {"pad_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 0}
    reference = transformers.MarianMTModel(
        transformers.MarianConfig(
            vocab_size=VOCAB,
            d_model=SHAPE["d_model"],
            encoder_layers=SHAPE["layers"],
            decoder_layers=SHAPE["layers"],
            encoder_attention_heads=SHAPE["heads"],
            decoder_attention_heads=SHAPE["heads"],
            encoder_ffn_dim=SHAPE["d_ff"],
            decoder_ffn_dim=SHAPE["d_ff"],
            activation_function="relu",
            scale_embedding=True,
            max_position_embeddings=max_length,
            forced_eos_token_id=None,
            **dropout,
            **special,
        )
    )
    config = aiayn.preset_config(
        "transformer-base", vocab_size=VOCAB, max_position_embeddings=max_length, **dropout, **special
    )
    return aiayn.AiaynSeq2SeqForConditionalGeneration(config), reference


# name: (builder, family, the reference's name, whether the two hold the same weights)
PAIRS = {
    "bert": (bert_pair, "encoder", "BertForMaskedLM", True),
    "gpt2": (gpt2_pair, "decoder", "GPT2LMHeadModel", True),
    "t5": (t5_pair, "seq2seq", "T5ForConditionalGeneration", True),
    "marian": (marian_pair, "seq2seq", "MarianMTModel", False),
}


def training_flops(config: aiayn.AiaynConfig, batch: int, length: int) -> int:
    """Model FLOPs of one training step: 3 times the forward's matmul FLOPs (the backward does two matmuls for each of
    the forward's), counting the projections, the attention products QK^T and AV over every query-key pair (also
    the causal ones, as PaLM's and nanoGPT's utilisation figures do), the output projection to the vocabulary and,
    for the encoder, the masked LM's d x d transform before it (torch's `FlopCounterMode` counts the same, tested).
    Norms, softmax and activations are left out. Seq2seq: source and target both `length` tokens long."""
    d, inner, d_ff = config.d_model, config.num_heads * config.d_kv, config.d_ff
    feed_forward = 2 * d * d_ff * (3 if config.is_gated_act else 2)

    def self_attention(queries: int) -> int:
        return 2 * queries * d * 4 * inner + 4 * queries * queries * inner

    per_layer = self_attention(length) + length * feed_forward
    if config.model_type != "aiayn_seq2seq":
        head = 2 * length * d * (config.vocab_size + (d if config.model_type == "aiayn_encoder" else 0))
        return 3 * batch * (config.num_layers * per_layer + head)
    cross_attention = 2 * length * d * 2 * inner + 2 * length * d * 2 * inner + 4 * length * length * inner
    forward = (
        config.num_layers * per_layer
        + config.num_decoder_layers * (per_layer + cross_attention)
        + 2 * length * d * config.vocab_size
    )
    return 3 * batch * forward


def matmul_ceiling(seconds: float = 1.0) -> dict[str, float]:
    """GFLOP/s of a (4096 x 512) @ (512 x 2048) product, a feed-forward layer of the training step, with MKL
    (`torch.matmul`) and with oneDNN (its linear primitive, when this torch build has it)."""
    x, weight = torch.randn(4096, 512), torch.randn(2048, 512)
    products = {"mkl": lambda: torch.matmul(x, weight.t())}
    if hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        products["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
    ceilings = {}
    for name, product in products.items():
        product()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            product()
            count += 1
        ceilings[name] = 2 * 4096 * 512 * 2048 * count / (time.perf_counter() - start) / 1e9
    return ceilings


class Workload:
    """The inputs of one pair at one sequence length, and the three things timed on a model."""

    def __init__(self, family: str, length: int, batch: int, generate_batch: int, new_tokens: int):
        generator = torch.Generator().manual_seed(0)
        self.family, self.length, self.batch, self.generate_batch = family, length, batch, generate_batch
        self.new_tokens = new_tokens
        ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
        self.inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if family == "encoder":
            masked = torch.rand(ids.shape, generator=generator) < 0.15
            self.labels = ids.masked_fill(~masked, -100)
        elif family == "decoder":
            self.labels = ids
        else:
            self.labels = torch.randint(3, VOCAB, (batch, length), generator=generator)
            self.inputs["decoder_input_ids"] = torch.cat(
                [torch.zeros(batch, 1, dtype=torch.long), self.labels[:, :-1]], dim=1
            )
        self.prompt = ids[:generate_batch]
        self.optimizers = {}

    def tokens(self, kind: str) -> int:
        """Tokens per call: input tokens of both sides for train and forward, new tokens for generate."""
        if kind == "generate":
            return self.generate_batch * self.new_tokens
        return self.batch * self.length * (2 if self.family == "seq2seq" else 1)

    def optimizer_state(self, model: torch.nn.Module) -> list[dict]:
        optimizer = self.optimizers.get(id(model))
        return list(optimizer.state.values()) if optimizer else []

    def run(self, kind: str, model: torch.nn.Module):
        if kind == "train":
            model.train()
            optimizer = self.optimizers.setdefault(id(model), torch.optim.AdamW(model.parameters(), lr=1e-4))
            model(**self.inputs, labels=self.labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return None
        model.eval()
        with torch.inference_mode():
            if kind == "forward":
                return model(**self.inputs).logits
            greedy = self.family == "decoder"
            return model.generate(
                self.prompt,
                attention_mask=torch.ones_like(self.prompt),
                max_new_tokens=self.new_tokens,
                min_new_tokens=self.new_tokens,
                num_beams=1 if greedy else 4,
                do_sample=False,
                use_cache=True,
            )


def kinds_of(family: str) -> tuple[str, ...]:
    return KINDS if family != "encoder" else KINDS[1:]


def build(spec: dict):
    builder, family, _, _ = PAIRS[spec["pair"]]
    torch.manual_seed(0)
    aiayn_model, reference = builder(spec["length"] + spec["new_tokens"])
    models = {"aiayn": aiayn_model, "reference": reference}
    for model in models.values():
        model.set_attn_implementation("sdpa")
    workload = Workload(family, spec["length"], spec["batch"], spec["generate_batch"], spec["new_tokens"])
    return models, workload


def measure_speed(spec: dict) -> dict:
    """Both models in this process, repeats interleaved; the training step's model FLOPs utilisation against
    `spec["ceiling_gflops"]`."""
    models, workload = build(spec)
    _, family, _, same_weights = PAIRS[spec["pair"]]
    results = {}
    for kind in kinds_of(family):
        outputs = {key: workload.run(kind, model) for key, model in models.items()}  # warm-up
        if kind == "generate" and same_weights and not torch.equal(outputs["aiayn"], outputs["reference"]):
            raise RuntimeError(f"{spec['pair']}: aiayn and the reference generated different tokens")
        times = {key: [] for key in models}
        for repeat in range(spec["repeats"]):
            for key in models if repeat % 2 == 0 else reversed(models):
                start = time.perf_counter()
                workload.run(kind, models[key])
                times[key].append(time.perf_counter() - start)
        results[kind] = {key: workload.tokens(kind) / statistics.median(values) for key, values in times.items()}
        results[kind]["seconds"] = times
    train = results["train"]
    train["flops"] = training_flops(models["aiayn"].config, workload.batch, workload.length)
    steps_per_second = {key: train[key] / workload.tokens("train") for key in models}
    train["mfu"] = {
        key: steps * train["flops"] / 1e9 / spec["ceiling_gflops"] for key, steps in steps_per_second.items()
    }
    return results


def tensor_mib(tensors) -> float:
    """The memory of `tensors` (shared ones once), in MiB."""
    unique = {tensor.data_ptr(): tensor for tensor in tensors if torch.is_tensor(tensor)}
    return sum(tensor.numel() * tensor.element_size() for tensor in unique.values()) / 2**20


def peak_allocated_mib(call) -> float:
    """The most memory `call()` holds at once beyond what was allocated before it, in MiB: the running sum of the
    allocations and frees that torch's profiler records from torch's CPU allocator (every tensor, and oneDNN's
    scratch memory), in their order. The CPU analogue of `torch.cuda.max_memory_allocated`."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as profile:
        call()
    events = [event for event in profile.profiler.kineto_results.events() if event.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda event: event.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak / 2**20


def measure_memory(spec: dict) -> dict:
    """One model in this process (the other one is built for the same weights and freed). For each kind, after a
    warm-up call: the model's parameters and buffers, the optimizer's state, and the most a call allocates beyond
    them (activations, gradients, cache, logits)."""
    models, workload = build(spec)
    model = models.pop(spec["model"])
    models.clear()
    gc.collect()
    results = {}
    for kind in kinds_of(PAIRS[spec["pair"]][1]):
        workload.run(kind, model)
        optimizer_state = [value for state in workload.optimizer_state(model) for value in state.values()]
        held = tensor_mib([*model.parameters(), *model.buffers(), *optimizer_state])
        results[kind] = held + peak_allocated_mib(lambda kind=kind: workload.run(kind, model))
    return results


def worker(spec: dict):
    torch.set_num_threads(spec["threads"])
    result = measure_speed(spec) if spec["mode"] == "speed" else measure_memory(spec)
    print(json.dumps(result))


def in_fresh_process(spec: dict) -> dict:
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)], capture_output=True, text=True
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{spec} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", choices=list(PAIRS), default=list(PAIRS))
    parser.add_argument("--lengths", nargs="+", type=int, help="sequence lengths (default 128 256 512 1024 2048)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, help="timed repeats of each model (default 5; --quick 3)")
    parser.add_argument("--tokens-per-step", type=int, help="batch x length of a step (default 2048; --quick 512)")
    parser.add_argument("--new-tokens", type=int, help="new tokens per generate() call (default 64; --quick 16)")
    parser.add_argument("--no-memory", action="store_true", help="measure speed only")
    parser.add_argument("--quick", action="store_true", help="lengths 128 and 512, 3 repeats, smaller batches")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))

    quick = args.quick
    lengths = args.lengths or ([128, 512] if quick else [128, 256, 512, 1024, 2048])
    repeats = args.repeats or (3 if quick else 5)
    tokens_per_step = args.tokens_per_step or (512 if quick else 2048)
    new_tokens = args.new_tokens or (16 if quick else 64)
    torch.set_num_threads(args.threads)
    ceiling = matmul_ceiling()
    print(
        f"matmul ceiling ({args.threads} thread(s)): "
        + ", ".join(f"{name} {value:.0f} GFLOP/s" for name, value in ceiling.items())
    )
    header = (
        f"{'pair':7} {'len':>5} {'batch':>5} | {'train tok/s a/ref':>19} {'ratio':>5} {'MFU a/ref':>11} | "
        f"{'forward tok/s a/ref':>19} {'ratio':>5} | {'generate tok/s a/ref':>20} {'ratio':>5} | "
        f"{'peak MiB train a/ref':>20} {'fwd a/ref':>13} {'gen a/ref':>13}"
    )
    print(header)
    rows = []
    for name in args.pairs:
        for length in lengths:
            spec = {
                "pair": name,
                "length": length,
                "batch": max(1, tokens_per_step // length),
                "generate_batch": max(1, tokens_per_step // 4 // length),
                "new_tokens": new_tokens,
                "repeats": repeats,
                "threads": args.threads,
                "ceiling_gflops": max(ceiling.values()),
            }
            row = dict(spec, speed=in_fresh_process(dict(spec, mode="speed")))
            if not args.no_memory:
                row["memory"] = {
                    key: in_fresh_process(dict(spec, mode="memory", model=key)) for key in ("aiayn", "reference")
                }
            rows.append(row)
            print(format_row(row), flush=True)
    ceiling_after = matmul_ceiling()
    print("matmul ceiling after: " + ", ".join(f"{name} {value:.0f} GFLOP/s" for name, value in ceiling_after.items()))
    if args.json:
        environment = {
            "threads": args.threads,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "processor": platform.processor() or platform.machine(),
            "matmul_gflops_before": ceiling,
            "matmul_gflops_after": ceiling_after,
            "shape": SHAPE,
            "vocab_size": VOCAB,
        }
        with open(args.json, "w") as f:
            json.dump({"environment": environment, "results": rows}, f, indent=2)


def format_row(row: dict) -> str:
    speed, memory = row["speed"], row.get("memory")

    def pair(values: dict, digits: int = 0, percent: bool = False) -> str:
        spec = f".{digits}{'%' if percent else 'f'}"
        return f"{values['aiayn']:{spec}}/{values['reference']:{spec}}"

    def ratio(values: dict) -> str:
        return f"{values['aiayn'] / values['reference']:.2f}"

    train = speed["train"]
    cells = [
        f"{row['pair']:7} {row['length']:5d} {row['batch']:5d} |",
        f"{pair(train):>19} {ratio(train):>5} {pair(train['mfu'], percent=True):>11} |",
        f"{pair(speed['forward']):>19} {ratio(speed['forward']):>5} |",
        f"{pair(speed['generate'], 1):>20} {ratio(speed['generate']):>5} |" if "generate" in speed else f"{'-':>26} |",
    ]
    for kind, width in (("train", 20), ("forward", 13), ("generate", 13)) if memory else ():
        peaks = {key: values[kind] for key, values in memory.items() if kind in values}
        cells.append(f"{pair(peaks, 1) if peaks else '-':>{width}}")
    return " ".join(cells)


if __name__ == "__main__":
    main()
