"""The layout of the weights for decoding one sequence on CPUs, chosen by a rule over their shapes.

Each step of decoding one sequence without beams multiplies a single row by every weight matrix that the step runs,
reading each matrix from memory; how fast a CPU BLAS streams a matrix for one row depends on how it lies there.
`nn.Linear` stores its weight (out, in); GPT-2's `Conv1D` stores (in, out). On every CPU measured
(`benchmarks/single_row_products.py`; the CPUs and figures are in `benchmarks/README.md`), a matrix with more
outputs than inputs is read faster for one row stored (in, out), and one with fewer outputs than inputs faster
stored (out, in). So `generate()` of one row first stores each float32 CPU weight of
a linear layer with `out_features > in_features` (query-key-value, feed-forward in, output head) transposed: the
parameter keeps its shape, values and object (ties, optimizers and `state_dict` names hold), only its strides
change. Nothing is timed: the same model and inputs give the same layout, and so the same bits, on every run.

`model.train()` and every `state_dict()` (through which `save_pretrained` and safetensors' `save_model`, among
others, read the weights) restore the standard layout (`restore_standard_layout`). `DECODING_LAYOUT` overrides the
rule: `"by_shape"` (the default), `"standard"` or `"transposed"`.
"""

import torch
from torch import nn

DECODING_LAYOUT = "by_shape"
# Smaller weights keep their layout: the rule was measured on 512 x 512 (1 MiB in float32) matrices and larger.
SMALLEST_LAID_OUT_WEIGHT = 2**18


def is_transposed(weight: torch.Tensor) -> bool:
    """Whether a matrix lies in memory transposed: (out, in) with the strides of an (in, out) contiguous tensor."""
    return not weight.is_contiguous() and weight.dim() == 2 and weight.shape[0] > 1 and weight.t().is_contiguous()


def reads_faster_transposed(weight: torch.Tensor) -> bool:
    """Whether a single-row product reads `weight` (out, in) faster stored (in, out): by the rule, when it has more
    outputs than inputs."""
    if DECODING_LAYOUT != "by_shape":
        return DECODING_LAYOUT == "transposed"
    out_features, in_features = weight.shape
    return out_features > in_features


def _decoding_weights(model: nn.Module):
    """The weights `lay_out_for_decoding` may lay out: float32 CPU matrices of linear layers, plain tensors (not
    sharded or quantised), of the sizes the rule was measured on."""
    for module in model.modules():
        weight = module.weight if type(module) is nn.Linear else None
        if (
            isinstance(weight, nn.Parameter)
            and type(weight.data) is torch.Tensor
            and weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and weight.numel() >= SMALLEST_LAID_OUT_WEIGHT
        ):
            yield weight


def _set_layout(weight: nn.Parameter, transposed: bool):
    if is_transposed(weight) != transposed:
        with torch.inference_mode(False), torch.no_grad():
            weight.data = weight.data.t().contiguous().t() if transposed else weight.data.contiguous()


def lay_out_for_decoding(model: nn.Module):
    """Stores each weight matrix of `model`'s linear layers in the layout a single-row product reads faster (see the
    module's docstring). Values, shapes, parameter objects and ties are unchanged."""
    if torch.compiler.is_compiling():
        return
    for weight in _decoding_weights(model):
        _set_layout(weight, reads_faster_transposed(weight))


def restore_standard_layout(model: nn.Module):
    """Stores every linear layer's weight matrix that lies transposed (as `lay_out_for_decoding` leaves them) as a
    contiguous (out, in) tensor again. A contiguity check per layer when there is none: `model.train()` calls it, and
    the Trainer calls that at every step."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and is_transposed(module.weight):
            _set_layout(module.weight, transposed=False)


def restore_standard_layout_hook(module: nn.Module, prefix: str, keep_vars: bool):
    """A `state_dict` pre-hook: the tensors a state dict hands out are in the standard layout, contiguous, as
    safetensors requires."""
    restore_standard_layout(module)
