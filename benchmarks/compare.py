"""Speed and memory of aiayn against transformers' own models of the same shape, side by side.

Pairs (by default d_model 512, 6 layers per stack, 8 heads, d_ff 2048, vocabulary 32000; `--shape 768`: d_model 768,
12 layers, 12 heads, d_ff 3072, vocabulary 50257, the size of GPT-2 small and BERT base; the models' default dropout
0.1):

    AiaynEncoderForMaskedLM             vs  BertForMaskedLM            (the conversion of the reference: same weights)
    AiaynDecoderForCausalLM             vs  GPT2LMHeadModel            (the conversion of the reference)
    AiaynSeq2SeqForConditionalGeneration vs T5ForConditionalGeneration (the conversion of the reference)
    AiaynSeq2SeqForConditionalGeneration vs MarianMTModel              (transformer-base; same shapes, own weights)
    AiaynVisionForImageClassification    vs ViTForImageClassification  (the conversion of the reference; patches of
                                                                         16, a sequence length of n patches meaning
                                                                         images of 16 * floor(sqrt(n)) pixels a side,
                                                                         1000 classes)

For each pair and sequence length it measures
- the training step (forward with labels, backward, AdamW step) in tokens per second, each model as its users call
  it (aiayn then computes its loss without the logits), and its model FLOPs utilisation: the matmul FLOPs the
  step needs (`training_flops`, the same count for both models; the output head only where a label is scored)
  per second over this machine's matmul ceiling, measured at the start;
- the inference forward in tokens per second;
- cached `generate()` at batch 1 and batch 8 in new tokens per second (greedy for GPT-2; beam 4, the paper's
  decoding, for seq2seq), the prompt or source being the sequence length;
- the peak memory of each: on CPUs the model's parameters and buffers, the optimizer's state, and the most a call
  allocates beyond them (activations, gradients, cache, logits); on GPUs `torch.cuda.max_memory_allocated`. Each
  model is measured in a fresh process of its own.

On a GPU (`--device cuda`) training runs under bfloat16 autocast with fused AdamW, inference with bfloat16 weights,
and the ceiling is a bfloat16 matmul's. `--compile` compiles both models with `torch.compile` (default backend) for
training and the forward, and decodes with a static cache whose decoding step is compiled.

Speed: both models of a pair run in one fresh process with the same inputs and the same attention backend (sdpa),
their repeats interleaved (A B B A ...) so that a neighbour's load affects both alike; the table gives medians and
the ratio aiayn / reference. CPU memory: what a call allocates is read from the allocation trace of torch's profiler
(`peak_allocated_mib`), after a warm-up call; it is exact and the same from run to run.

    python benchmarks/compare.py                           # lengths 128 to 2048, 1 thread
    python benchmarks/compare.py --quick                   # lengths 128 and 512, smaller batches
    python benchmarks/compare.py --pairs gpt2 t5 --lengths 1024 --threads 2 --json results.json
    python benchmarks/compare.py --device cuda --shape 768 --tokens-per-step 8192 --compile
"""

import argparse
import copy
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import transformers

import aiayn
from aiayn.conversion import convert_from_hf
from aiayn.experiments.machine import machine_description, matmul_throughput, synchronize

SHAPES = {
    "512": {"d_model": 512, "layers": 6, "heads": 8, "d_ff": 2048, "vocab": 32000},
    "768": {"d_model": 768, "layers": 12, "heads": 12, "d_ff": 3072, "vocab": 50257},
}
GENERATE_BATCHES = (1, 8)
# In the order they run: training changes the weights, and the generated tokens are compared before it. aiayn decodes
# as `generate()` does by default, in the standard layout (`aiayn.decoding_layout` is not used).
KINDS = ("forward", *(f"generate_{batch}" for batch in GENERATE_BATCHES), "train")


def bert_pair(shape: dict, max_length: int):
    reference = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=shape["vocab"],
            hidden_size=shape["d_model"],
            num_hidden_layers=shape["layers"],
            num_attention_heads=shape["heads"],
            intermediate_size=shape["d_ff"],
            max_position_embeddings=max_length,
        )
    )
    return convert_from_hf(reference), reference


def gpt2_pair(shape: dict, max_length: int):
    reference = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=shape["vocab"],
            n_embd=shape["d_model"],
            n_layer=shape["layers"],
            n_head=shape["heads"],
            n_inner=shape["d_ff"],
            n_positions=max_length,
            bos_token_id=shape["vocab"] - 1,
            eos_token_id=shape["vocab"] - 1,
        )
    )
    return convert_from_hf(reference), reference


def t5_pair(shape: dict, max_length: int):
    reference = transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=shape["vocab"],
            d_model=shape["d_model"],
            d_kv=shape["d_model"] // shape["heads"],
            num_layers=shape["layers"],
            num_heads=shape["heads"],
            d_ff=shape["d_ff"],
            decoder_start_token_id=0,
        )
    )
    return convert_from_hf(reference), reference


def marian_pair(shape: dict, max_length: int):
    """The paper's base model (post-LN, sinusoidal positions, ReLU, shared and tied embeddings) in both libraries,
    with the same dropout everywhere. transformers has no conversion from Marian, so the weights differ."""
    dropout = {"dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1}
    special = {"pad_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 0}
    reference = transformers.MarianMTModel(
        transformers.MarianConfig(
            vocab_size=shape["vocab"],
            d_model=shape["d_model"],
            encoder_layers=shape["layers"],
            decoder_layers=shape["layers"],
            encoder_attention_heads=shape["heads"],
            decoder_attention_heads=shape["heads"],
            encoder_ffn_dim=shape["d_ff"],
            decoder_ffn_dim=shape["d_ff"],
            activation_function="relu",
            scale_embedding=True,
            max_position_embeddings=max_length,
            forced_eos_token_id=None,
            **dropout,
            **special,
        )
    )
    sizes = {
        "d_model": shape["d_model"],
        "num_layers": shape["layers"],
        "num_decoder_layers": shape["layers"],
        "num_heads": shape["heads"],
        "d_ff": shape["d_ff"],
    }
    config = aiayn.preset_config(
        "transformer-base",
        vocab_size=shape["vocab"],
        max_position_embeddings=max_length,
        **sizes,
        **dropout,
        **special,
    )
    return aiayn.AiaynSeq2SeqForConditionalGeneration(config), reference


def vit_pair(shape: dict, length: int):
    reference = transformers.ViTForImageClassification(
        transformers.ViTConfig(
            image_size=image_side(length),
            patch_size=VIT_PATCH,
            hidden_size=shape["d_model"],
            num_hidden_layers=shape["layers"],
            num_attention_heads=shape["heads"],
            intermediate_size=shape["d_ff"],
            num_labels=1000,
        )
    )
    return convert_from_hf(reference), reference


VIT_PATCH = 16


def image_side(length: int) -> int:
    """The side of the square images whose patches of `VIT_PATCH` make a sequence of about `length` (at most)."""
    return VIT_PATCH * math.isqrt(length)


# name: (builder, family, the reference's name, whether the two hold the same weights)
PAIRS = {
    "bert": (bert_pair, "encoder", "BertForMaskedLM", True),
    "gpt2": (gpt2_pair, "decoder", "GPT2LMHeadModel", True),
    "t5": (t5_pair, "seq2seq", "T5ForConditionalGeneration", True),
    "marian": (marian_pair, "seq2seq", "MarianMTModel", False),
    "vit": (vit_pair, "vision", "ViTForImageClassification", True),
}


def training_flops(config: aiayn.AiaynConfig, batch: int, length: int, scored: int | None = None) -> int:
    """Model FLOPs of one training step: 3 times the forward's matmul FLOPs (the backward does two matmuls for each of
    the forward's), counting the projections, the attention products QK^T and AV over every query-key pair (also
    the causal ones, as PaLM's and nanoGPT's utilisation figures do), and the output head at the `scored` positions
    the loss reads (default: all `batch * length`): the projection to the vocabulary and, for the encoder, the masked
    LM's d x d transform before it. Logits at positions no label scores (the masked LM's unmasked 85%, a causal LM's
    last position) are work the task does not need, so they are not counted; torch's `FlopCounterMode` counts the
    same on aiayn's step without logits (tested). Norms, softmax and activations are left out. Seq2seq: source and
    target both `length` tokens long."""
    d, inner, d_ff = config.d_model, config.num_heads * config.d_kv, config.d_ff
    feed_forward = 2 * d * d_ff * (3 if config.is_gated_act else 2)
    scored = batch * length if scored is None else scored

    def self_attention(queries: int) -> int:
        return 2 * queries * d * 4 * inner + 4 * queries * queries * inner

    if (
        config.model_type == "aiayn_vision"
    ):  # `length` patches and the class token; the patch projection and classifier
        tokens = length + 1
        patches = 2 * length * config.num_channels * config.patch_size**2 * d
        per_image = config.num_layers * (self_attention(tokens) + tokens * feed_forward) + patches
        return 3 * batch * (per_image + 2 * d * config.num_labels)
    per_layer = self_attention(length) + length * feed_forward
    if config.model_type != "aiayn_seq2seq":
        head = 2 * scored * d * (config.vocab_size + (d if config.model_type == "aiayn_encoder" else 0))
        return 3 * (batch * config.num_layers * per_layer + head)
    cross_attention = 2 * length * d * 2 * inner + 2 * length * d * 2 * inner + 4 * length * length * inner
    stacks = config.num_layers * per_layer + config.num_decoder_layers * (per_layer + cross_attention)
    return 3 * (batch * stacks + 2 * scored * d * config.vocab_size)


class Workload:
    """The inputs of one pair at one sequence length, and the things timed on a model."""

    def __init__(self, spec: dict, family: str):
        generator = torch.Generator().manual_seed(0)
        self.family, self.device, self.compiled = family, spec["device"], spec["compile"]
        self.length, self.batch, self.new_tokens = spec["length"], spec["batch"], spec["new_tokens"]
        vocab = SHAPES[spec["shape"]]["vocab"]
        if family == "vision":  # images whose patches are the sequence, and a class for each
            side = image_side(self.length)
            self.length = (side // VIT_PATCH) ** 2
            pixels = torch.randn(self.batch, 3, side, side, generator=generator)
            self.inputs = {"pixel_values": pixels.to(self.device)}
            self.labels = torch.randint(0, 1000, (self.batch,), generator=generator).to(self.device)
            self.scored, self.optimizers, self.compiled_models = self.batch, {}, {}
            return
        ids = torch.randint(3, vocab, (self.batch, self.length), generator=generator)
        self.inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if family == "encoder":
            masked = torch.rand(ids.shape, generator=generator) < 0.15
            self.labels = ids.masked_fill(~masked, -100)
        elif family == "decoder":
            self.labels = ids
        else:
            self.labels = torch.randint(3, vocab, (self.batch, self.length), generator=generator)
            self.inputs["decoder_input_ids"] = torch.cat(
                [torch.zeros(self.batch, 1, dtype=torch.long), self.labels[:, :-1]], dim=1
            )
        prompts = torch.randint(3, vocab, (max(GENERATE_BATCHES), self.length), generator=generator)
        self.prompts = {batch: prompts[:batch].to(self.device) for batch in GENERATE_BATCHES}
        self.inputs = {key: value.to(self.device) for key, value in self.inputs.items()}
        self.labels = self.labels.to(self.device)
        scored_labels = self.labels[:, 1:] if family == "decoder" else self.labels  # a causal LM scores i on i + 1
        self.scored = int((scored_labels != -100).sum())
        self.optimizers = {}
        self.compiled_models = {}

    def tokens(self, kind: str) -> int:
        """Tokens per call: input tokens of both sides for train and forward, new tokens for generate."""
        if kind.startswith("generate"):
            return int(kind.split("_")[1]) * self.new_tokens
        return self.batch * self.length * (2 if self.family == "seq2seq" else 1)

    def optimizer_state(self, model: torch.nn.Module) -> list[dict]:
        optimizer = self.optimizers.get(id(model))
        return list(optimizer.state.values()) if optimizer else []

    def callable(self, model: torch.nn.Module):
        """The model, compiled once with `--compile`."""
        if not self.compiled:
            return model
        return self.compiled_models.setdefault(id(model), torch.compile(model))

    def run(self, kind: str, model: torch.nn.Module):
        if kind == "train":
            model.train()
            optimizer = self.optimizers.setdefault(
                id(model), torch.optim.AdamW(model.parameters(), lr=1e-4, fused=self.device == "cuda")
            )
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device == "cuda"):
                loss = self.callable(model)(**self.inputs, labels=self.labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return None
        model.eval()
        with torch.inference_mode():
            if kind == "forward":
                return self.callable(model)(**self.inputs).logits
            prompt = self.prompts[int(kind.split("_")[1])]
            greedy = self.family == "decoder"
            extra = {}
            if self.compiled:
                compile_config = transformers.CompileConfig()
                compile_config._compile_all_devices = True  # generate() compiles by itself on accelerators only
                extra = {"cache_implementation": "static", "compile_config": compile_config}
            return model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=self.new_tokens,
                min_new_tokens=self.new_tokens,
                num_beams=1 if greedy else 4,
                do_sample=False,
                use_cache=True,
                **extra,
            )


def kinds_of(family: str) -> tuple[str, ...]:
    generates = family in ("decoder", "seq2seq")
    return KINDS if generates else tuple(kind for kind in KINDS if not kind.startswith("generate"))


def build(spec: dict):
    """The pair's two models on the device (float32), and the workload."""
    builder, family, _, _ = PAIRS[spec["pair"]]
    torch.manual_seed(0)
    extent = spec["length"] if family == "vision" else spec["length"] + spec["new_tokens"]  # what the models read
    aiayn_model, reference = builder(SHAPES[spec["shape"]], extent)
    models = {"aiayn": aiayn_model, "reference": reference}
    for model in models.values():
        model.set_attn_implementation("sdpa")
        model.to(spec["device"])
    return models, Workload(spec, family)


def inference_models(models: dict, device: str) -> dict:
    """The models inference runs on: on GPUs bfloat16 copies, on CPUs the float32 models themselves."""
    if device == "cpu":
        return models
    return {key: copy.deepcopy(model).to(torch.bfloat16) for key, model in models.items()}


def timed(workload: Workload, kind: str, model: torch.nn.Module) -> float:
    synchronize(workload.device)
    start = time.perf_counter()
    workload.run(kind, model)
    synchronize(workload.device)
    return time.perf_counter() - start


def measure_speed(spec: dict) -> dict:
    """Both models in this process, repeats interleaved; the training step's model FLOPs utilisation against
    `spec["ceiling_gflops"]`."""
    models, workload = build(spec)
    _, family, _, same_weights = PAIRS[spec["pair"]]
    results = {}
    inference = inference_models(models, spec["device"])
    for kind in kinds_of(family):
        run_on = models if kind == "train" else inference
        outputs = {key: workload.run(kind, model) for key, model in run_on.items()}  # warm-up
        # Float32 on CPUs: the same weights give the same tokens (in bfloat16 rounding may tip a close choice).
        compare_tokens = kind.startswith("generate") and same_weights and spec["device"] == "cpu"
        if compare_tokens and not torch.equal(outputs["aiayn"], outputs["reference"]):
            raise RuntimeError(f"{spec['pair']}: aiayn and the reference generated different tokens")
        times = {key: [] for key in run_on}
        for repeat in range(spec["repeats"]):
            for key in run_on if repeat % 2 == 0 else reversed(run_on):
                times[key].append(timed(workload, kind, run_on[key]))
        results[kind] = {key: workload.tokens(kind) / statistics.median(values) for key, values in times.items()}
        results[kind]["seconds"] = times
    train = results["train"]
    train["flops"] = training_flops(models["aiayn"].config, workload.batch, workload.length, workload.scored)
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
    allocations and frees that torch's profiler records from torch's CPU allocator, in their order. The CPU
    analogue of `torch.cuda.max_memory_allocated`."""
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
    warm-up call: on CPUs the model's parameters and buffers, the optimizer's state, and the most a call allocates
    beyond them; on GPUs the peak of `torch.cuda.max_memory_allocated` during the call."""
    models, workload = build(spec)
    model = models.pop(spec["model"])
    models.clear()
    gc.collect()
    inference = inference_models({"model": model}, spec["device"])["model"]
    results = {}
    for kind in kinds_of(PAIRS[spec["pair"]][1]):
        run_on = model if kind == "train" else inference
        workload.run(kind, run_on)
        if spec["device"] == "cuda":
            torch.cuda.reset_peak_memory_stats()
            workload.run(kind, run_on)
            results[kind] = torch.cuda.max_memory_allocated() / 2**20
            continue
        optimizer_state = [value for state in workload.optimizer_state(run_on) for value in state.values()]
        held = tensor_mib([*run_on.parameters(), *run_on.buffers(), *optimizer_state])
        results[kind] = held + peak_allocated_mib(lambda kind=kind, run_on=run_on: workload.run(kind, run_on))
    return results


def worker(spec: dict):
    torch.set_num_threads(spec["threads"])
    result = measure_speed(spec) if spec["mode"] == "speed" else measure_memory(spec)
    print(json.dumps(result))


def in_fresh_process(spec: dict, script: str = __file__) -> dict:
    """`script --worker SPEC` (the script's own measurement of `spec`) in a fresh process: its printed JSON."""
    completed = subprocess.run(
        [sys.executable, os.path.abspath(script), "--worker", json.dumps(spec)], capture_output=True, text=True
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{spec} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", choices=list(PAIRS), default=list(PAIRS))
    parser.add_argument("--lengths", nargs="+", type=int, help="sequence lengths (default 128 256 512 1024 2048)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--shape", choices=list(SHAPES), default="512", help="the models' width (default 512)")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models; static-cache decoding")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, help="timed repeats of each model (default 5)")
    parser.add_argument("--tokens-per-step", type=int, help="batch x length of a step (default 2048; --quick 512)")
    parser.add_argument("--new-tokens", type=int, help="new tokens per generate() call (default 64; --quick 16)")
    parser.add_argument("--no-memory", action="store_true", help="measure speed only")
    parser.add_argument("--quick", action="store_true", help="lengths 128 and 512, smaller batches")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))

    quick = args.quick
    lengths = args.lengths or ([128, 512] if quick else [128, 256, 512, 1024, 2048])
    repeats = args.repeats or 5
    tokens_per_step = args.tokens_per_step or (512 if quick else 2048)
    new_tokens = args.new_tokens or (16 if quick else 64)
    torch.set_num_threads(args.threads)
    ceiling = matmul_throughput(args.device)
    print(f"{machine_description(args.device)}; torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"matmul ceiling ({args.device}, {args.threads} thread(s)): {ceiling:.0f} GFLOP/s")
    generate_header = " | ".join(f"{f'gen b{batch} tok/s a/ref':>20} {'ratio':>5}" for batch in GENERATE_BATCHES)
    memory_header = " ".join(f"{f'{kind} a/ref':>15}" for kind in ("train", "fwd", "gen b1", "gen b8"))
    print(
        f"{'pair':7} {'len':>5} {'batch':>5} | {'train tok/s a/ref':>19} {'ratio':>5} {'MFU a/ref':>11} | "
        f"{'forward tok/s a/ref':>19} {'ratio':>5} | {generate_header} | peak MiB {memory_header}"
    )
    rows = []
    for name in args.pairs:
        for length in lengths:
            spec = {
                "pair": name,
                "shape": args.shape,
                "device": args.device,
                "compile": args.compile,
                "length": length,
                "batch": max(1, tokens_per_step // length),
                "new_tokens": new_tokens,
                "repeats": repeats,
                "threads": args.threads,
                "ceiling_gflops": ceiling,
            }
            row = dict(spec, speed=in_fresh_process(dict(spec, mode="speed")))
            if not args.no_memory:
                row["memory"] = {
                    key: in_fresh_process(dict(spec, mode="memory", model=key)) for key in ("aiayn", "reference")
                }
            rows.append(row)
            print(format_row(row), flush=True)
    ceiling_after = matmul_throughput(args.device)
    print(f"matmul ceiling after: {ceiling_after:.0f} GFLOP/s")
    if args.json:
        environment = {
            "machine": machine_description(args.device),
            "device": args.device,
            "threads": args.threads,
            "compile": args.compile,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "matmul_gflops_before": ceiling,
            "matmul_gflops_after": ceiling_after,
            "shape": SHAPES[args.shape],
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
    ]
    for batch in GENERATE_BATCHES:
        values = speed.get(f"generate_{batch}")
        cells.append(f"{pair(values, 1):>20} {ratio(values):>5} |" if values else f"{'-':>26} |")
    cells.append("        ")
    for kind in ("train", "forward", *(f"generate_{batch}" for batch in GENERATE_BATCHES)) if memory else ():
        peaks = {key: values[kind] for key, values in memory.items() if kind in values}
        cells.append(f"{pair(peaks, 1) if peaks else '-':>15}")
    return " ".join(cells)


if __name__ == "__main__":
    main()
