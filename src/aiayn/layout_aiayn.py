"""The layout of the weights for decoding one sequence on CPUs, chosen by a rule over their shapes, for the length of a
`with decoding_layout(model):` block.

Each step of decoding one sequence without beams multiplies a single row by every weight matrix that the step runs,
reading each matrix from memory; how fast a CPU BLAS streams a matrix for one row depends on how it lies there.
`nn.Linear` stores its weight (out, in); GPT-2's `Conv1D` stores (in, out). On every CPU measured
(`benchmarks/single_row_products.py`; the CPUs and figures are in `benchmarks/README.md`), a matrix with more
outputs than inputs is read faster for one row stored (in, out), and one with fewer outputs than inputs faster
stored (out, in). So inside the block each float32 CPU weight of a linear layer that a decoding step runs, with
`out_features > in_features` (query-key-value, feed-forward in, output head), is stored transposed: the parameter keeps
its shape, values and object (ties and optimizers hold), only its strides change. Leaving the block stores them as
they were. Nothing is timed: the same model and inputs give the same layout, and so the same bits, on every run.

Laying the weights out and back costs about as much as copying them, each time: the block pays off over many decoded
tokens (one `generate()` of a few dozen tokens or more, or many calls inside one block). Batches and beams multiply
several rows per step, for which the standard layout is as fast. A state dict taken inside the block hands out the
transposed tensors, which safetensors' `save_file` refuses, and `save_pretrained` refuses a model whose tied weights
lie so: save after it.

Why a block the caller opens, and not `generate()`'s default (`benchmarks/gpt2_pair.py` and
`benchmarks/decoding_layout.py` time both; the figures per CPU are in `benchmarks/README.md`):

- Laid out by `generate()` for each call and back after it, the layout would cost two transposed copies of the
  weights per call, as much as decoding about eight tokens, and gain at each token what the CPU's BLAS loses on the
  (out, in) layout: a GPT-style model decodes 1.44 times as fast in the layout on an AMD EPYC Zen 4, 1.09 times on
  an Intel Xeon. A call of fewer than about 100 new tokens would be slower with it on that Xeon, and no rule over
  shapes and lengths alone tells the CPUs apart (choices timed at run time are ruled out). And a layout changed
  inside `generate()` would swap the storage of parameters that another thread may be reading.
- Stored so from the start (strides only), even for the decoder's layers alone: FSDP2's `fully_shard` refuses
  non-contiguous parameters ("FSDP does not support non-contiguous parameters yet"); transformers sets each tensor
  `from_pretrained` loads as the parameter, contiguous, so the layout would have to be laid again after loading;
  safetensors' `save_file` refuses a state dict of such tensors, and transformers' `save_pretrained` tied ones.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

# Smaller weights keep their layout: the rule was measured on 512 x 512 (1 MiB in float32) matrices and larger.
SMALLEST_LAID_OUT_WEIGHT = 2**18


def is_transposed(weight: torch.Tensor) -> bool:
    """Whether a matrix lies in memory transposed: (out, in) with the strides of an (in, out) contiguous tensor."""
    return not weight.is_contiguous() and weight.dim() == 2 and weight.shape[0] > 1 and weight.t().is_contiguous()


def reads_faster_transposed(weight: torch.Tensor) -> bool:
    """Whether a single-row product reads `weight` (out, in) faster stored (in, out): by the rule, when it has more
    outputs than inputs."""
    out_features, in_features = weight.shape
    return out_features > in_features


def decoding_step_modules(model: nn.Module) -> nn.Module:
    """The modules each decoding step runs: an encoder-decoder model's decoder and output projection (its encoder runs
    once per call, over many rows), or the whole model."""
    if getattr(model.config, "is_encoder_decoder", False):
        return nn.ModuleList([model.get_decoder(), model.get_output_embeddings()])
    return model


def laid_out_weights(model: nn.Module) -> Iterator[nn.Parameter]:
    """The weights the rule lays out: float32 CPU matrices of linear layers, plain tensors (not sharded or
    quantised), of the sizes the rule was measured on, with more outputs than inputs."""
    for module in decoding_step_modules(model).modules():
        weight = module.weight if type(module) is nn.Linear else None
        if (
            isinstance(weight, nn.Parameter)
            and type(weight.data) is torch.Tensor
            and weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and weight.numel() >= SMALLEST_LAID_OUT_WEIGHT
            and reads_faster_transposed(weight)
        ):
            yield weight


def _set_layout(weight: nn.Parameter, transposed: bool):
    with torch.inference_mode(False), torch.no_grad():
        weight.data = weight.data.t().contiguous().t() if transposed else weight.data.contiguous()


@contextmanager
def decoding_layout(model: nn.Module):
    """Stores the weights a decoding step of `model` reads in the layout a single-row product reads faster, for the
    length of a `with` block.

    On leaving the block the weights are in the standard layout again (see the module's docstring). Values, shapes,
    parameter objects and ties are unchanged throughout.

    Args:
        model: The model that decodes inside the block.

    Yields:
        model (nn.Module): The model, its weights laid out for decoding.

    Examples:
        ```py
        with decoding_layout(model):
            tokens = model.generate(prompt, max_new_tokens=64)
        ```
    """
    weights = {id(weight): weight for weight in laid_out_weights(model) if not is_transposed(weight)}.values()
    for weight in weights:
        _set_layout(weight, transposed=True)
    try:
        yield model
    finally:
        for weight in weights:
            _set_layout(weight, transposed=False)
