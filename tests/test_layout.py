"""The weights' layout for decoding one sequence on CPUs: a rule over their shapes, the same tokens as the standard
layout, restored for training and saving; the projections are plain `nn.Linear` modules."""

import copy

import pytest
import torch
from conftest import lm_inputs, lm_model, prompt_batch

from aiayn import layout_aiayn


@pytest.fixture
def layout(monkeypatch):
    """Sets `DECODING_LAYOUT` for one test; every weight of the tiny models counts as large enough to lay out."""
    monkeypatch.setattr(layout_aiayn, "SMALLEST_LAID_OUT_WEIGHT", 0)

    def set_layout(value: str):
        monkeypatch.setattr(layout_aiayn, "DECODING_LAYOUT", value)

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
    assert not any(map(layout_aiayn.is_transposed, linear_weights(model).values()))
    parameters = dict(model.named_parameters(remove_duplicate=False))
    values = {name: parameter.detach().clone() for name, parameter in parameters.items()}

    layout("transposed")
    with torch.inference_mode():
        decoded = model.generate(ids, **arguments)
    per_step = set(linear_weights(model.decoding_step_modules()).values())
    assert per_step and all(map(layout_aiayn.is_transposed, per_step))
    # A seq2seq model's encoder runs once per call, over many rows: its weights keep their layout.
    others = {weight for weight in linear_weights(model).values() if weight not in per_step}
    assert others == (set(linear_weights(model.model.encoder).values()) if family == "seq2seq" else set())
    assert not any(map(layout_aiayn.is_transposed, others))
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


def test_the_rule_transposes_the_weights_with_more_outputs_than_inputs(layout):
    """By the rule: query-key-value, feed-forward in (and the gate) and the output head, whose matrices have more
    outputs than inputs, are stored (in, out); the attention output and feed-forward out keep (out, in)."""
    layout("by_shape")
    model = lm_model("decoder", hidden_act="swiglu")
    ids, mask = (tensor[:1] for tensor in prompt_batch("decoder"))
    model.generate(ids, attention_mask=mask, max_new_tokens=2)
    transposed = {name for name, weight in linear_weights(model).items() if layout_aiayn.is_transposed(weight)}
    layer = "model.decoder.layers.{}."
    expected = {"lm_head"} | {
        layer.format(index) + projection
        for index in range(model.config.num_layers)
        for projection in ("self_attn.qkv_proj", "ffn.up_proj", "ffn.gate_proj")
    }
    assert transposed == expected
    assert all(linear_weights(model)[name].shape[0] > linear_weights(model)[name].shape[1] for name in transposed)


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


def test_only_float32_cpu_weights_are_laid_out(layout):
    layout("transposed")
    model = lm_model("decoder").to(torch.bfloat16)
    ids, mask = (tensor[:1] for tensor in prompt_batch("decoder"))
    model.generate(ids, attention_mask=mask, max_new_tokens=2)
    assert all(weight.is_contiguous() for weight in linear_weights(model).values())


@pytest.mark.parametrize("quantiser", ["torch.ao", "torchao"])
@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_a_quantiser_after_decoding_quantises_the_standard_weights(layout, family, quantiser):
    """The layout changes strides only: a model quantised after `generate()` laid its weights out for one row gives
    bit for bit the logits of the same model quantised before decoding."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    def quantised(model: torch.nn.Module) -> torch.nn.Module:
        model = copy.deepcopy(model)
        if quantiser == "torchao":
            quantize_(model, Int8WeightOnlyConfig())
            return model
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    layout("by_shape")
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    inputs = lm_inputs(family, ids, mask)
    with torch.no_grad():
        expected = quantised(model)(**inputs).logits
        model.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=2)
        assert any(map(layout_aiayn.is_transposed, linear_weights(model).values()))
        torch.testing.assert_close(quantised(model)(**inputs).logits, expected, rtol=0, atol=0)


def test_a_state_dict_after_decoding_is_in_the_standard_layout(layout, tmp_path):
    """safetensors refuses non-contiguous tensors: a state dict taken after `generate()` laid the weights out for one
    row hands them out contiguous, so `safetensors.torch.save_model` writes the model's values."""
    import safetensors.torch

    layout("by_shape")
    model = lm_model("decoder")
    ids, mask = prompt_batch("decoder")
    model.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=2)
    assert any(map(layout_aiayn.is_transposed, linear_weights(model).values()))
    values = {name: parameter.detach().clone() for name, parameter in model.named_parameters(remove_duplicate=False)}
    safetensors.torch.save_model(model, str(tmp_path / "model.safetensors"))
    saved = safetensors.torch.load_file(str(tmp_path / "model.safetensors"))
    assert saved.keys() <= values.keys() and all(torch.equal(saved[name], values[name]) for name in saved)
    assert all(weight.is_contiguous() for weight in linear_weights(model).values())
