"""AiaynLinear: nn.Linear's results through whichever CPU matmul library is measured faster, never in a graph; weights
laid out for decoding in whichever layout a single row reads faster."""

import pytest
import torch
from conftest import lm_inputs, lm_model, prompt_batch

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


@pytest.fixture
def layout(monkeypatch):
    """Sets `CPU_DECODING_LAYOUT` for one test, with an empty table of measured layouts; every weight of the tiny
    models counts as large enough to lay out."""
    monkeypatch.setattr(cpu_linear, "_transposed_is_faster", {})
    monkeypatch.setattr(cpu_linear, "SMALLEST_TUNED_PRODUCT", 0)

    def set_layout(value: str):
        monkeypatch.setattr(cpu_linear, "CPU_DECODING_LAYOUT", value)

    return set_layout


def linear_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: module.weight for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_decoding_in_the_transposed_layout_gives_the_same_tokens(layout, family, tmp_path):
    """Weights laid out transposed by `generate()` (inside `inference_mode`, as pipelines call it): the same tokens and
    scores, the same parameter objects and values, the head still tied; training restores the standard layout and
    its gradients flow; a checkpoint saved after decoding loads the same values."""
    layout("standard")
    model = lm_model(family)
    ids, mask = (tensor[2:] for tensor in prompt_batch(family))  # one sequence: one row per step
    arguments = {"attention_mask": mask, "max_new_tokens": 6, "output_scores": True, "return_dict_in_generate": True}
    with torch.inference_mode():
        expected = model.generate(ids, **arguments)
    assert not any(map(cpu_linear.is_transposed, linear_weights(model).values()))
    parameters = dict(model.named_parameters(remove_duplicate=False))
    values = {name: parameter.detach().clone() for name, parameter in parameters.items()}

    layout("transposed")
    with torch.inference_mode():
        decoded = model.generate(ids, **arguments)
    per_step = set(linear_weights(model.decoding_step_modules()).values())
    assert per_step and all(map(cpu_linear.is_transposed, per_step))
    # A seq2seq model's encoder runs once per call, over many rows: its weights keep their layout.
    others = {weight for weight in linear_weights(model).values() if weight not in per_step}
    assert others == (set(linear_weights(model.model.encoder).values()) if family == "seq2seq" else set())
    assert not any(map(cpu_linear.is_transposed, others))
    assert torch.equal(decoded.sequences, expected.sequences)
    torch.testing.assert_close(decoded.scores, expected.scores, rtol=1e-6, atol=1e-6)  # float32 reordering
    assert all(model.get_parameter(name) is parameter for name, parameter in parameters.items())
    assert all(torch.equal(parameters[name], value) for name, value in values.items())
    assert model.lm_head.weight is model.get_input_embeddings().weight

    model.save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path)
    assert all(torch.equal(reloaded.get_parameter(name), value) for name, value in values.items())

    model.train()
    assert all(weight.is_contiguous() for weight in linear_weights(model).values())
    model(**lm_inputs(family, ids, mask), labels=ids).loss.backward()
    assert all(parameter.grad is not None for parameter in model.parameters())


def test_decoding_layouts_are_measured_once_per_shape(layout, monkeypatch):
    """The first `generate()` measures each weight shape of the model once; a second measures nothing."""
    layout("auto")
    timings = []
    monkeypatch.setattr(cpu_linear, "_time_layouts", lambda *shape: timings.append(shape) or len(timings) % 2 == 1)
    model = lm_model("decoder")
    ids, mask = (tensor[:1] for tensor in prompt_batch("decoder"))
    for _ in range(2):
        model.generate(ids, attention_mask=mask, max_new_tokens=2)
    shapes = {tuple(weight.shape) for weight in linear_weights(model).values()}
    assert sorted(timings) == sorted(shapes)
    layouts = cpu_linear.cpu_decoding_layouts()
    assert len(layouts) == len(shapes) and set(layouts.values()) == {"(in, out)", "(out, in)"}
    for name, weight in linear_weights(model).items():
        assert cpu_linear.is_transposed(weight) == (timings.index(tuple(weight.shape)) % 2 == 0), name


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
@pytest.mark.parametrize("arguments", [{}, {"num_beams": 2}, {"num_return_sequences": 2, "do_sample": True}])
def test_decoding_of_several_rows_per_step_keeps_the_layout(layout, family, arguments):
    """The layout is measured for one row: a batch, beams or several returned sequences leave it as it is."""
    layout("transposed")
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    rows = 1 if arguments else 3
    model.generate(ids[:rows], attention_mask=mask[:rows], max_new_tokens=2, **arguments)
    assert all(weight.is_contiguous() for weight in linear_weights(model).values())


def test_a_measured_layout_is_a_real_timing(monkeypatch):
    monkeypatch.setattr(cpu_linear, "LAYOUT_TIMING_BYTES", 2**20)
    assert isinstance(cpu_linear._time_layouts(512, 128), bool)


def test_only_float32_cpu_weights_are_laid_out(layout):
    layout("transposed")
    model = lm_model("decoder").to(torch.bfloat16)
    ids, mask = (tensor[:1] for tensor in prompt_batch("decoder"))
    model.generate(ids, attention_mask=mask, max_new_tokens=2)
    assert all(weight.is_contiguous() for weight in linear_weights(model).values())


@needs_onednn
def test_a_weight_stored_transposed_multiplies_through_nn_linear(route, layout):
    """oneDNN would reorder a transposed weight at every call: such a layer is `nn.Linear`, whatever the route."""
    route("onednn")
    layout("transposed")
    linear = AiaynLinear(24, 40)
    cpu_linear.lay_out_for_decoding(linear)
    assert cpu_linear.is_transposed(linear.weight)
    x = torch.randn(3, 24, requires_grad=True)
    output = linear(x)
    assert "Routed" not in type(output.grad_fn).__name__
    torch.testing.assert_close(output, torch.nn.functional.linear(x, linear.weight.contiguous(), linear.bias))
