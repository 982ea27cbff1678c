"""AiaynLinear: nn.Linear's results through whichever CPU matmul library is measured faster, never in a graph."""

import pytest
import torch

from aiayn import cpu_linear
from aiayn.cpu_linear import ONEDNN_AVAILABLE, AiaynLinear

needs_onednn = pytest.mark.skipif(not ONEDNN_AVAILABLE, reason="this torch build has no oneDNN linear operator")


@pytest.fixture
def route(monkeypatch):
    """Sets `CPU_LINEAR_ROUTE` for one test, with an empty table of measured choices."""
    monkeypatch.setattr(cpu_linear, "_onednn_is_faster", {})

    def set_route(value: str):
        monkeypatch.setattr(cpu_linear, "CPU_LINEAR_ROUTE", value)

    return set_route


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24), (2, 20, 24)])  # fewer and more tokens than inputs
def test_the_onednn_route_computes_what_nn_linear_computes(route, bias, shape):
    """Outputs and gradients (accumulated over two backward passes) of nn.Linear, the weight's gradient laid out as
    the weight; with and without autograd."""
    route("onednn")
    torch.manual_seed(0)
    reference = torch.nn.Linear(24, 40, bias=bias)
    linear = AiaynLinear(24, 40, bias=bias)
    linear.load_state_dict(reference.state_dict())
    results = {}
    for name, layer in (("reference", reference), ("aiayn", linear)):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
        for _ in range(2):
            output = layer(x)
            output.backward(torch.cos(output.detach()))
        with torch.no_grad():
            unrecorded = layer(x)
        results[name] = {"output": output, "unrecorded": unrecorded, "x": x.grad}
        results[name] |= {key: parameter.grad for key, parameter in layer.named_parameters()}
    assert "Routed" in type(results["aiayn"]["output"].grad_fn).__name__  # the route was taken
    assert results["aiayn"]["weight"].is_contiguous()
    torch.testing.assert_close(results["aiayn"], results["reference"], rtol=1e-6, atol=1e-6)


def test_the_torch_route_is_nn_linear(route):
    route("torch")
    linear = AiaynLinear(512, 1024)
    x = torch.randn(64, 512, requires_grad=True)
    assert torch.equal(linear(x), torch.nn.functional.linear(x, linear.weight, linear.bias))
    assert not cpu_linear._onednn_is_faster


@needs_onednn
def test_each_shape_class_is_measured_once(route, monkeypatch):
    """Small products stay with nn.Linear unmeasured; a larger one is measured once for its class (rows rounded up to
    a power of two, sizes, bias, threads) and the choice is reused."""
    route("auto")
    timings = []
    monkeypatch.setattr(cpu_linear, "_time_routes", lambda *key: timings.append(key) or True)
    small, large = AiaynLinear(32, 64), AiaynLinear(512, 1024)
    small(torch.randn(9, 32))
    assert timings == []
    for rows in (40, 64, 33):  # one class: at most 64 rows
        large(torch.randn(rows, 512))
    large(torch.randn(65, 512))
    assert timings == [(64, 512, 1024, False, False, True), (128, 512, 1024, False, False, True)]
    assert set(cpu_linear.cpu_linear_routes().values()) == {"onednn"}


@needs_onednn
def test_the_backward_products_are_classes_of_their_own(route, monkeypatch):
    """`x W^T`, `dy W` (W transposed) and `dy^T x` (both transposed) are measured as three classes."""
    route("auto")
    timings = []
    monkeypatch.setattr(cpu_linear, "_time_routes", lambda *key: timings.append(key) or True)
    output = AiaynLinear(512, 1024, bias=False)(torch.randn(64, 512, requires_grad=True))
    output.backward(torch.randn_like(output))
    assert timings == [(64, 512, 1024, False, False, False), (64, 1024, 512, False, True, False)] + [
        (1024, 64, 512, True, True, False)
    ]


@needs_onednn
def test_a_measured_choice_is_a_real_timing(route):
    route("auto")
    for transposed in (False, True):
        assert isinstance(cpu_linear._time_routes(64, 512, 1024, transposed, transposed, True), bool)
    AiaynLinear(512, 1024)(torch.randn(64, 512))
    threads = torch.get_num_threads()
    assert list(cpu_linear.cpu_linear_routes()) == [f"rows<=64 (64 x 512) @ (512 x 1024) bias, {threads} threads"]


@needs_onednn
def test_deterministic_algorithms_keep_nn_linear(route):
    route("onednn")
    torch.use_deterministic_algorithms(True)
    try:
        output = AiaynLinear(24, 40)(torch.randn(3, 24, requires_grad=True))
    finally:
        torch.use_deterministic_algorithms(False)
    assert "Routed" not in type(output.grad_fn).__name__
