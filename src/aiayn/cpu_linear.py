"""`AiaynLinear`: `nn.Linear` whose float32 products on CPUs run through whichever of torch's two CPU matmul libraries
is faster for their shapes on this machine, as measured here.

torch's `nn.Linear` multiplies with its BLAS (MKL on x86); torch also ships oneDNN, whose inner-product primitive is
faster on some CPUs and shapes and slower on others (the README gives the figures: on an AMD EPYC Zen 1, 4-22% faster
at 512 rows and 8-40% slower for single rows; about twice as fast on a Zen 4; slower at every shape measured on an
Intel Xeon with AVX-512). So nothing is assumed: the first time a product of a new shape class (rows rounded up to
a power of two, sizes, which operands are transposed, threads) comes by, both libraries compute it a few times,
interleaved, and oneDNN is kept for that class only if it took at most 95% of MKL's time (the way
`torch.backends.cudnn.benchmark` picks convolution algorithms). The layer's forward `x W^T` and its backward `dy W`
and `dy^T x` are three classes.

Everything else is `nn.Linear`: other devices and dtypes, products too small to gain, `torch.compile` and
`torch.export` (whose graphs then hold standard ops only), and `torch.use_deterministic_algorithms(True)`, since the
choice is made per process. `CPU_LINEAR_ROUTE` overrides the choice: `"auto"` (the default), `"torch"` or `"onednn"`.

Decoding multiplies one row by each weight matrix per step, reading every weight from memory, and how fast a library
streams a matrix depends on how it lies there: on an AMD EPYC Zen 1, MKL reads a (out, in) matrix with out > in 30-50%
slower than the same matrix stored transposed, (in, out), the way GPT-2's `Conv1D` keeps it, and faster when out < in.
So `generate()` of one sequence without beams first calls `lay_out_for_decoding` on the modules every decoding step
runs (a seq2seq model's decoder and head): for each float32 CPU weight of a linear layer (output heads included) it
times a single-row product in both layouts, once per shape per process, with weights cycled from memory, and stores
the matrix transposed where that is at least 5% faster. A weight stored transposed multiplies through `nn.Linear`
(oneDNN would reorder it at every call). The parameter keeps its shape, its object (ties and optimizers hold on) and
its values; only its strides change. `model.train()` restores the standard layout (`restore_standard_layout`), and
saved checkpoints are always contiguous. `CPU_DECODING_LAYOUT` overrides the choice: `"auto"` (the default),
`"standard"` or `"transposed"`.
"""

import time

import torch
from torch import nn
from transformers.utils import is_torch_distributed_available

if is_torch_distributed_available():
    from torch.distributed.tensor import DTensor
else:
    DTensor = ()  # an empty tuple of classes: no tensor is an instance

CPU_LINEAR_ROUTE = "auto"
# Products of fewer multiply-adds are dominated by the call itself, where the two libraries do not differ much.
SMALLEST_TUNED_PRODUCT = 2**18
# A timing multiplies at most this many (rows are cut to fit): a few milliseconds on a slow core.
LARGEST_TIMED_PRODUCT = 2**27
ONEDNN_AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
CPU_DECODING_LAYOUT = "auto"
# Bytes of weights a layout timing cycles through, so that, as in decoding, caches do not hold them.
LAYOUT_TIMING_BYTES = 2**25

# (rows rounded up to a power of two, inner size, output size, a transposed, b transposed, bias, threads) -> whether
# oneDNN computes `a @ b^T (+ bias)` faster than torch
_onednn_is_faster: dict[tuple[int, int, int, bool, bool, bool, int], bool] = {}
# (output size, inner size, threads) -> whether a single-row product reads the weight faster stored (in, out)
_transposed_is_faster: dict[tuple[int, int, int], bool] = {}


def onednn_linear(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`a @ b^T + bias` for 2D `a` and `b` with oneDNN's inner-product primitive."""
    return torch.ops.mkldnn._linear_pointwise(a, b, bias, "none", [], "")


def _median_seconds(products, repeats: int = 5) -> list[float]:
    """The median time of each product, their repeats interleaved so that a neighbour's load affects all alike."""
    for product in products:
        product()
    times = [[] for _ in products]
    for repeat in range(repeats):
        order = range(len(products)) if repeat % 2 == 0 else reversed(range(len(products)))
        for index in order:
            start = time.perf_counter()
            products[index]()
            times[index].append(time.perf_counter() - start)
    return [sorted(values)[repeats // 2] for values in times]


def _operand(rows: int, columns: int, transposed: bool) -> torch.Tensor:
    return torch.randn(columns, rows).t() if transposed else torch.randn(rows, columns)


def _time_routes(rows: int, inner: int, out: int, a_transposed: bool, b_transposed: bool, bias: bool) -> bool:
    rows = max(1, min(rows, LARGEST_TIMED_PRODUCT // (inner * out)))
    a, b = _operand(rows, inner, a_transposed), _operand(out, inner, b_transposed)
    c = torch.randn(out) if bias else None
    with torch.no_grad():
        torch_seconds, onednn_seconds = _median_seconds(
            [lambda: nn.functional.linear(a, b, c), lambda: onednn_linear(a, b, c)]
        )
    return onednn_seconds <= 0.95 * torch_seconds


def routable(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether oneDNN may compute `a @ b^T`: plain float32 tensors on a CPU (a tensor-parallel shard, a `DTensor`,
    goes through torch), in eager mode, unless told otherwise."""
    return (
        CPU_LINEAR_ROUTE != "torch"
        and ONEDNN_AVAILABLE
        and a.device.type == "cpu"
        and a.dtype == b.dtype == torch.float32
        and not torch.compiler.is_compiling()
        and not torch.are_deterministic_algorithms_enabled()
        and not (isinstance(a, DTensor) or isinstance(b, DTensor))
    )


def uses_onednn(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Whether the product `a @ b^T` (`a` of any rank) goes through oneDNN (see the module's docstring)."""
    return routable(a, b) and _onednn_is_faster_for(a, b, bias)


def _onednn_is_faster_for(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """For a routable product: the forced route, or the measured one for its shape class."""
    out, inner = b.shape
    rows = a.numel() // inner
    if CPU_LINEAR_ROUTE == "onednn":
        return rows > 0
    if rows * inner * out < SMALLEST_TUNED_PRODUCT:
        return False
    transposed = (not a.is_contiguous(), not b.is_contiguous())  # timed as transposed, the backward's layouts
    key = (1 << (rows - 1).bit_length(), inner, out, *transposed, bias is not None, torch.get_num_threads())
    faster = _onednn_is_faster.get(key)
    if faster is None:
        faster = _onednn_is_faster[key] = _time_routes(*key[:6])
    return faster


def product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`a @ b^T + bias` for 2D `a` and `b`, through the faster library for its shape class."""
    return onednn_linear(a, b, bias) if uses_onednn(a, b, bias) else nn.functional.linear(a, b, bias)


def cpu_linear_routes() -> dict[str, str]:
    """The library chosen for each product measured so far: `"rows<=R (R x K) @ (K x N)"` (with the transposed
    operands and threads) -> `"onednn"` or `"torch"`."""
    routes = {}
    for (rows, inner, out, a_transposed, b_transposed, bias, threads), faster in sorted(_onednn_is_faster.items()):
        layout = "".join(
            (" a transposed" if a_transposed else "", " b transposed" if b_transposed else "", " bias" if bias else "")
        )
        routes[f"rows<={rows} ({rows} x {inner}) @ ({inner} x {out}){layout}, {threads} threads"] = (
            "onednn" if faster else "torch"
        )
    return routes


class _RoutedLinear(torch.autograd.Function):
    """`y = x W^T + b` and its gradients `dx = dy W`, `dW = dy^T x`, `db = sum(dy)`, each product routed."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return product(x.reshape(-1, x.shape[-1]), weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_rows = grad_output.reshape(-1, grad_output.shape[-1])
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = product(grad_rows, weight.t()).view(x.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = product(grad_rows.t(), x.reshape(-1, x.shape[-1]).t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_rows.sum(0)
        return grad_x, grad_weight, grad_bias


class AiaynLinear(nn.Linear):
    """`nn.Linear` (same parameters, same state dict) whose float32 CPU products take the faster of MKL and oneDNN
    for their shapes on this machine (see the module's docstring). Results agree with `nn.Linear` to float32
    rounding."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not routable(x, self.weight) or is_transposed(self.weight):
            return super().forward(x)
        if torch.is_grad_enabled() and any(p is not None and p.requires_grad for p in (x, self.weight, self.bias)):
            return _RoutedLinear.apply(x, self.weight, self.bias)
        if not _onednn_is_faster_for(x, self.weight, self.bias):
            return super().forward(x)
        return onednn_linear(x.reshape(-1, x.shape[-1]), self.weight, self.bias).view(
            *x.shape[:-1], self.weight.shape[0]
        )


def _time_layouts(out: int, inner: int) -> bool:
    """Whether one row times a float32 (out, inner) weight at least 5% faster stored transposed, weights read from
    memory."""
    count = max(1, LAYOUT_TIMING_BYTES // (4 * out * inner))
    standard = [torch.ones(out, inner) for _ in range(count)]
    transposed = [torch.ones(inner, out).t() for _ in range(count)]
    x = torch.ones(1, inner)
    with torch.no_grad():
        standard_seconds, transposed_seconds = _median_seconds(
            [
                lambda: [product(x, weight) for weight in standard],
                lambda: [nn.functional.linear(x, weight) for weight in transposed],
            ]
        )
    return transposed_seconds <= 0.95 * standard_seconds


def _decoding_weights(model: nn.Module):
    """The weights `lay_out_for_decoding` may lay out: float32 CPU matrices of linear layers, plain tensors (not
    sharded or quantised), large enough to be measured."""
    for module in model.modules():
        weight = getattr(module, "weight", None) if isinstance(module, nn.Linear) else None
        if (
            isinstance(weight, nn.Parameter)
            and type(weight.data) is torch.Tensor
            and weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and weight.numel() >= SMALLEST_TUNED_PRODUCT
        ):
            yield weight


def _transposed_layout_is_faster(weight: torch.Tensor) -> bool:
    if CPU_DECODING_LAYOUT != "auto":
        return CPU_DECODING_LAYOUT == "transposed"
    key = (*weight.shape, torch.get_num_threads())
    faster = _transposed_is_faster.get(key)
    if faster is None:
        faster = _transposed_is_faster[key] = _time_layouts(*weight.shape)
    return faster


def is_transposed(weight: torch.Tensor) -> bool:
    """Whether a matrix lies in memory transposed: (out, in) with the strides of an (in, out) contiguous tensor."""
    return not weight.is_contiguous() and weight.dim() == 2 and weight.shape[0] > 1 and weight.t().is_contiguous()


def _set_layout(weight: nn.Parameter, transposed: bool):
    if is_transposed(weight) != transposed:
        with torch.inference_mode(False), torch.no_grad():
            weight.data = weight.data.t().contiguous().t() if transposed else weight.data.contiguous()


def lay_out_for_decoding(model: nn.Module):
    """Stores each weight matrix of `model`'s linear layers in the layout a single-row product reads faster on this
    machine (see the module's docstring). Values, shapes, parameter objects and ties are unchanged."""
    if torch.compiler.is_compiling():
        return
    for weight in _decoding_weights(model):
        _set_layout(weight, _transposed_layout_is_faster(weight))


def restore_standard_layout(model: nn.Module):
    """Stores every linear layer's weight matrix that lies transposed (as `lay_out_for_decoding` leaves them) as a
    contiguous (out, in) tensor again. A contiguity check per layer when there is none: `model.train()` calls it, and
    the Trainer calls that at every step."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and is_transposed(module.weight):
            _set_layout(module.weight, transposed=False)


def cpu_decoding_layouts() -> dict[str, str]:
    """The layout chosen for each weight shape measured so far: `"(in -> out), T threads"` -> `"(out, in)"` or
    `"(in, out)"`."""
    return {
        f"({inner} -> {out}), {threads} threads": "(in, out)" if faster else "(out, in)"
        for (out, inner, threads), faster in sorted(_transposed_is_faster.items())
    }
