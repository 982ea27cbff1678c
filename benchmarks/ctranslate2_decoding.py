"""Decoding speed against the machine's memory-bandwidth limit: aiayn in PyTorch (float32, torch.ao dynamic int8,
torchao int8 weight-only) beside its CTranslate2 export (float32, int8), all with the same weights.

A decoding step reads every weight it multiplies once, whatever the batch: at batch 1 and 8 the step is bound by
memory, and the fastest a step can run is the bytes of those weights over the bandwidth with which this machine
streams memory. The script measures that bandwidth first (`torch.sum` over 1 GiB, best of 5, at the benchmark's
threads), counts the bytes each step reads (the decoder's projections and the output head: 4 bytes a weight in
float32, 1 byte and a float32 scale per row in int8; the encoder-decoder attention's keys and values are projected
once per sentence and not counted), and reports each form's tokens per second beside its limit,
`batch x bandwidth / bytes per step`, and the fraction of it reached. Where a step's weights fit in the processor's
caches they need not come from memory at all: the 'cached' limit takes the bandwidth of reading a buffer of the
step's size again and again. Caches, activations and the encoder's work are left out of both limits.

Families (`--family`):
- `decoder` (default): the conversion of a random `GPT2LMHeadModel` (d_model 512, 6 layers, 8 heads, d_ff 2048,
  vocabulary 32000), 64 new tokens after a 64-token prompt, through `ctranslate2.Generator`;
- `seq2seq`: the paper's base translation model (transformer-base, vocabulary 32000, random weights), 64 new tokens
  for 64-token sources, through `ctranslate2.Translator`.

Greedy and beam 4 at batch 1 and 8; outputs are forced to the full length (`min_new_tokens`, the engine's
`min_length`), repeats of all forms interleaved, medians. The last column is the share of greedy tokens (batch 8,
position by position) equal to aiayn's float32 ones: CTranslate2's float32 export must give 100%; int8 forms differ
where random weights leave logits nearly tied.

    python benchmarks/ctranslate2_decoding.py                    # 1 thread, the decoder
    python benchmarks/ctranslate2_decoding.py --family seq2seq --new-tokens 32 --repeats 3
"""

import argparse
import copy
import os
import statistics
import tempfile
import time
import warnings

import ctranslate2
import torch
import transformers
from torch import nn
from torchao.quantization import Int8WeightOnlyConfig, quantize_

from aiayn import preset_config
from aiayn.conversion import convert_from_hf
from aiayn.ctranslate2_export import ctranslate2_spec
from aiayn.experiments.machine import processor_name

TORCH_FORMS = {
    "aiayn float32": lambda model: model,
    "aiayn torch.ao dynamic int8": lambda model: torch.ao.quantization.quantize_dynamic(
        model, {nn.Linear}, dtype=torch.qint8
    ),
    "aiayn torchao int8 weight-only": lambda model: quantize_(model, Int8WeightOnlyConfig()) or model,
}
ENGINE_FORMS = {"CTranslate2 float32": "float32", "CTranslate2 int8": "int8"}
INT8_FORMS = {"aiayn torch.ao dynamic int8", "aiayn torchao int8 weight-only", "CTranslate2 int8"}


def streaming_read_gbps(nbytes: int = 2**30, repeats: int = 5) -> float:
    """Bytes per second (1e9) with which `torch.sum` reads `nbytes` of float32 (best of `repeats`, after a first
    read): 1 GiB streams from memory; a buffer of a step's size may stay in the caches between reads, as a step's
    weights may between steps."""
    data = torch.ones(nbytes // 4)
    data.sum()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best / 1e9


def step_bytes(model: nn.Module, int8: bool) -> int:
    """Bytes of the weights one decoding step reads: every projection of the decoder stack and the output head (not
    the encoder-decoder attention's keys and values, projected once per sentence): float32, or int8 with one float32
    scale per output row; biases stay float32."""
    decoder = model.get_decoder() if model.config.is_encoder_decoder else model.model.decoder
    linears = [m for name, m in decoder.named_modules() if isinstance(m, nn.Linear) and "kv_proj" not in name]
    linears.append(model.get_output_embeddings())
    total = 0
    for linear in linears:
        weight = linear.weight.numel() * 1 + linear.out_features * 4 if int8 else linear.weight.numel() * 4
        total += weight + (linear.bias.numel() * 4 if linear.bias is not None else 0)
    return total


def vocabulary_tokenizer(size: int) -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer whose tokens are `<unk>`, `t1` ... `t{size-1}`: the engine reads token strings."""
    from tokenizers import Tokenizer, models

    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, size)}}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "<unk>")))


def random_model(args) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    sizes = {"d_model": args.d_model, "num_heads": args.d_model // 64, "d_ff": 4 * args.d_model}
    if args.family == "seq2seq":
        config = preset_config(
            "transformer-base", vocab_size=args.vocab, num_layers=args.layers, num_decoder_layers=args.layers,
            dropout=0.0, generation_defaults=None, **sizes,
        )  # fmt: skip
        return transformers.AutoModelForSeq2SeqLM.from_config(config).eval()
    config = transformers.GPT2Config(
        vocab_size=args.vocab, n_embd=args.d_model, n_layer=args.layers, n_head=sizes["num_heads"],
        n_inner=sizes["d_ff"],
        n_positions=args.prompt + args.new_tokens, bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1,
    )  # fmt: skip
    return convert_from_hf(transformers.GPT2LMHeadModel(config).eval()).eval()


def torch_decode(model, prompts: torch.Tensor, new_tokens: int, beams: int) -> list[list[int]]:
    with torch.inference_mode():
        out = model.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
            do_sample=False, num_beams=beams, length_penalty=1.0,
        )  # fmt: skip
    start = 1 if model.config.is_encoder_decoder else prompts.shape[1]
    return out[:, start:].tolist()


def engine_decode(runner, prompts: torch.Tensor, new_tokens: int, beams: int) -> list[list[int]]:
    batch = [[f"t{i}" for i in row] for row in prompts.tolist()]
    if isinstance(runner, ctranslate2.Translator):
        results = runner.translate_batch(
            batch, beam_size=beams, max_decoding_length=new_tokens, min_decoding_length=new_tokens
        )
        hypotheses = [result.hypotheses[0] for result in results]
    else:
        results = runner.generate_batch(
            batch, beam_size=beams, max_length=new_tokens, min_length=new_tokens, include_prompt_in_result=False
        )
        hypotheses = [result.sequences[0] for result in results]
    return [[0 if token == "<unk>" else int(token[1:]) for token in hypothesis] for hypothesis in hypotheses]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=["decoder", "seq2seq"], default="decoder")
    parser.add_argument("--d-model", type=int, default=512, help="width (heads of 64, d_ff 4 times the width)")
    parser.add_argument("--layers", type=int, default=6, help="layers (of each stack)")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--prompt", type=int, default=64, help="prompt (decoder) or source (seq2seq) tokens")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per_tensor).*")  # torch.ao's notices
    torch.set_num_threads(args.threads)
    bandwidth = streaming_read_gbps()
    model = random_model(args)
    tokenizer = vocabulary_tokenizer(args.vocab)
    decoders = {name: (torch_decode, quantise(copy.deepcopy(model))) for name, quantise in TORCH_FORMS.items()}
    engine_class = ctranslate2.Translator if args.family == "seq2seq" else ctranslate2.Generator
    folder = tempfile.mkdtemp()
    for name, quantization in ENGINE_FORMS.items():
        with torch.no_grad():
            spec = ctranslate2_spec(model, tokenizer, max_positions=args.prompt + args.new_tokens + 1)
        spec.validate()
        spec.optimize(quantization=quantization)
        path = os.path.join(folder, quantization)
        os.makedirs(path)
        spec.save(path)
        runner = engine_class(path, device="cpu", inter_threads=1, intra_threads=args.threads)
        decoders[name] = (engine_decode, runner)
    prompts = torch.randint(1, args.vocab - 1, (8, args.prompt), generator=torch.Generator().manual_seed(1))
    print(
        f"{processor_name()}, {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}, ctranslate2 {ctranslate2.__version__}; {args.threads} thread(s); {args.family}, "
        f"prompt {args.prompt}, {args.new_tokens} new tokens; streaming read {bandwidth:.1f} GB/s"
    )
    reference = torch_decode(decoders["aiayn float32"][1], prompts, args.new_tokens, 1)
    agreement = {}
    for name, (decode, runner) in decoders.items():
        tokens = decode(runner, prompts, args.new_tokens, 1)
        equal = sum(a == b for row, ref in zip(tokens, reference, strict=True) for a, b in zip(row, ref, strict=True))
        agreement[name] = equal / (len(reference) * args.new_tokens)
    print(f"{'form':31} | {'MiB/step':>8} | {'search':6} | {'batch':>5} | {'tok/s':>7} | {'limit':>9} | "
          f"{'of limit':>8} | {'cached':>9} | {'of it':>6} | greedy tokens = aiayn float32")  # fmt: skip
    cached = {int8: streaming_read_gbps(step_bytes(model, int8), repeats=20) for int8 in (False, True)}
    for beams in (1, 4):
        for batch in (1, 8):
            times = {name: [] for name in decoders}
            names = list(decoders)
            for name in names:
                decode, runner = decoders[name]
                decode(runner, prompts[:batch], 2, beams)  # warm-up
            for repeat in range(args.repeats):
                for name in names if repeat % 2 == 0 else reversed(names):
                    decode, runner = decoders[name]
                    start = time.perf_counter()
                    decode(runner, prompts[:batch], args.new_tokens, beams)
                    times[name].append(time.perf_counter() - start)
            for name in names:
                speed = batch * args.new_tokens / statistics.median(times[name])
                int8 = name in INT8_FORMS
                read = step_bytes(model, int8)
                limit, cached_limit = (batch * gbps * 1e9 / read for gbps in (bandwidth, cached[int8]))
                search = "greedy" if beams == 1 else f"beam {beams}"
                print(f"{name:31} | {read / 2**20:8.1f} | {search:6} | {batch:5} | {speed:7.1f} | {limit:9.1f} | "
                      f"{speed / limit:8.1%} | {cached_limit:9.1f} | {speed / cached_limit:6.1%} | "
                      f"{agreement[name]:.1%}")  # fmt: skip
    print(
        f"streaming read of a step's weights, read again and again: float32 {cached[False]:.1f} GB/s, "
        f"int8 {cached[True]:.1f} GB/s (the 'cached' limit)"
    )


if __name__ == "__main__":
    main()
