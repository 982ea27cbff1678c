"""int8 against float32 CPU decoding: speed, size and greedy agreement, aiayn beside transformers' GPT-2.

Both models have the same weights (`AiaynDecoderForCausalLM` is the conversion of a random `GPT2LMHeadModel`, d_model
512, 6 layers, 8 heads, d_ff 2048, vocabulary 32000 by default). Each is decoded in four forms:

- `float32`: as built;
- `torch.ao dynamic`: `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`;
- `torchao int8 weight-only`: `torchao.quantization.quantize_(model, Int8WeightOnlyConfig())`;
- `torchao int8 dynamic`: `quantize_(model, Int8DynamicActivationInt8WeightConfig())`.

Both tools replace `nn.Linear` modules only, so GPT-2, whose attention and feed-forward projections are `Conv1D`, keeps
those in float32 and has only its output head quantised; aiayn's projections are all `nn.Linear`. For each form it
measures greedy `generate()` at batch 1 and 8 (new tokens per second; repeats of all forms interleaved, medians), the
size of the saved state dict, the number of linear layers quantised, and how many of the greedy tokens equal the
float32 model's (position by position, over the batch of 8). With random weights the logits are nearly flat, so
one flipped choice changes the rest of a sequence; a trained model's agreement was not measured here.

    python benchmarks/int8_decoding.py                      # 1 thread
    python benchmarks/int8_decoding.py --new-tokens 32 --repeats 3 --threads 2
"""

import argparse
import copy
import io
import statistics
import time
import warnings

import torch
import transformers
from torch import nn
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

from aiayn.conversion import convert_from_hf
from aiayn.experiments.machine import processor_name


def torchao(config_class):
    def quantise(model: nn.Module) -> nn.Module:
        quantize_(model, config_class())
        return model

    return quantise


FORMS = {
    "float32": lambda model: model,
    "torch.ao dynamic": lambda model: torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8),
    "torchao int8 weight-only": torchao(Int8WeightOnlyConfig),
    "torchao int8 dynamic": torchao(Int8DynamicActivationInt8WeightConfig),
}


def reference_model(args) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=args.vocab,
        n_embd=args.d_model,
        n_layer=args.layers,
        n_head=args.d_model // 64,
        n_inner=4 * args.d_model,
        n_positions=args.prompt + args.new_tokens,
        bos_token_id=args.vocab - 1,
        eos_token_id=args.vocab - 1,
    )
    return transformers.GPT2LMHeadModel(config).eval()


def state_dict_mib(model: nn.Module) -> float:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell() / 2**20


def quantised_linears(model: nn.Module) -> str:
    """Quantised linear layers / all linear layers and `Conv1D` projections."""
    float_linears = [m for m in model.modules() if type(m) is nn.Linear and type(m.weight) is nn.Parameter]
    conv1d = [m for m in model.modules() if type(m).__name__ == "Conv1D"]
    quantised = [m for m in model.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    quantised += [m for m in model.modules() if type(m) is nn.Linear and type(m.weight) is not nn.Parameter]
    return f"{len(quantised)}/{len(quantised) + len(float_linears) + len(conv1d)}"


def greedy(model: nn.Module, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
        )[:, prompts.shape[1] :]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    parser.add_argument("--new-tokens", type=int, default=64, help="new tokens per call (default 64)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch.ao's notice that torchao replaces it
    torch.set_num_threads(args.threads)
    reference = reference_model(args)
    bases = {"aiayn": convert_from_hf(reference).eval(), "GPT-2": reference}
    models = {
        (name, form): quantise(copy.deepcopy(base)) for name, base in bases.items() for form, quantise in FORMS.items()
    }
    prompts = torch.randint(0, args.vocab - 1, (8, args.prompt), generator=torch.Generator().manual_seed(1))
    print(
        f"{processor_name()}, {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}; {args.threads} thread(s); greedy, prompt {args.prompt}, "
        f"{args.new_tokens} new tokens"
    )
    float_tokens = {name: greedy(models[(name, "float32")], prompts, args.new_tokens) for name in bases}
    results = {
        key: {"size": state_dict_mib(model), "quantised": quantised_linears(model)} for key, model in models.items()
    }
    for key, model in models.items():
        tokens = greedy(model, prompts, args.new_tokens)
        results[key]["agreement"] = float((tokens == float_tokens[key[0]]).float().mean())
    for batch in (1, 8):
        times = {key: [] for key in models}
        keys = list(models)
        for key in keys:
            greedy(models[key], prompts[:batch], 2)  # warm-up
        for repeat in range(args.repeats):
            for key in keys if repeat % 2 == 0 else reversed(keys):
                start = time.perf_counter()
                greedy(models[key], prompts[:batch], args.new_tokens)
                times[key].append(time.perf_counter() - start)
        for key in keys:
            results[key][f"batch {batch}"] = batch * args.new_tokens / statistics.median(times[key])
    print(f"{'model':6} {'form':25} | {'quantised':>9} | {'state dict MiB':>14} | {'b1 tok/s':>8} {'x fp32':>6} | "
          f"{'b8 tok/s':>8} {'x fp32':>6} | greedy tokens equal to float32")  # fmt: skip
    for (name, form), result in results.items():
        base = results[(name, "float32")]
        cells = [f"{name:6} {form:25}", f"{result['quantised']:>9}", f"{result['size']:14.1f}"]
        for batch in (1, 8):
            speed = result[f"batch {batch}"]
            cells.append(f"{speed:8.1f} {speed / base[f'batch {batch}']:6.2f}")
        cells.append(f"{result['agreement']:.1%}")
        print(" | ".join(cells))


if __name__ == "__main__":
    main()
