"""The weights' layout for decoding one sequence on CPUs, inside `aiayn.decoding_layout(model)` only: a rule over their
shapes, the same tokens as the standard layout, restored on leaving the block; `generate()` alone changes nothing; the
projections are plain `nn.Linear` modules."""

import copy

import pytest
import torch
from helpers import lm_inputs, lm_model, prompt_batch

import aiayn
from aiayn import layout_aiayn


@pytest.fixture(autouse=True)
def every_weight_is_large_enough(monkeypatch):
    """Every weight of the tiny models counts as large enough to lay out."""
    monkeypatch.setattr(layout_aiayn, "SMALLEST_LAID_OUT_WEIGHT", 0)


def linear_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: module.weight for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def transposed_names(model: torch.nn.Module) -> set[str]:
    return {name for name, weight in linear_weights(model).items() if layout_aiayn.is_transposed(weight)}


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_decoding_in_the_layout_gives_the_same_tokens_and_leaves_the_standard_layout(family, tmp_path):
    """Inside the block (and `inference_mode`, as pipelines call it) the weights a decoding step reads lie transposed
    where they have more outputs than inputs, a seq2seq model's encoder keeps its layout; the same tokens and scores,
    the same parameter objects and values, the head still tied. Leaving the block restores the standard layout:
    training runs and a checkpoint saved then loads the same values."""
    model = lm_model(family)
    ids, mask = (tensor[2:] for tensor in prompt_batch(family))  # one sequence: one row per step
    arguments = {"attention_mask": mask, "max_new_tokens": 6, "output_scores": True, "return_dict_in_generate": True}
    with torch.inference_mode():
        expected = model.generate(ids, **arguments)
    assert not transposed_names(model)
    parameters = dict(model.named_parameters(remove_duplicate=False))
    values = {name: parameter.detach().clone() for name, parameter in parameters.items()}

    with aiayn.decoding_layout(model), torch.inference_mode():
        decoded = model.generate(ids, **arguments)
        inside = transposed_names(model)
    widening = {name for name, weight in linear_weights(model).items() if weight.shape[0] > weight.shape[1]}
    assert inside == {name for name in widening if not name.startswith("model.encoder.")}
    assert inside and (family == "decoder" or any(name.startswith("model.encoder.") for name in widening))
    assert torch.equal(decoded.sequences, expected.sequences)
    torch.testing.assert_close(decoded.scores, expected.scores, rtol=1e-6, atol=1e-6)  # float32 reordering
    assert all(model.get_parameter(name) is parameter for name, parameter in parameters.items())
    assert all(torch.equal(parameters[name], value) for name, value in values.items())
    assert model.lm_head.weight is model.get_input_embeddings().weight

    assert all(weight.is_contiguous() for weight in linear_weights(model).values())
    model.save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path)
    assert all(torch.equal(reloaded.get_parameter(name), value) for name, value in values.items())
    model.train()
    model(**lm_inputs(family, ids, mask), labels=ids).loss.backward()
    assert all(parameter.grad is not None for parameter in model.parameters())


def test_the_rule_transposes_the_weights_with_more_outputs_than_inputs():
    """By the rule: query-key-value, feed-forward in (and the gate) and the output head, whose matrices have more
    outputs than inputs, are stored (in, out); the attention output and feed-forward out keep (out, in)."""
    model = lm_model("decoder", hidden_act="swiglu")
    with aiayn.decoding_layout(model):
        transposed = transposed_names(model)
    layer = "model.decoder.layers.{}."
    expected = {"lm_head"} | {
        layer.format(index) + projection
        for index in range(model.config.num_layers)
        for projection in ("self_attn.qkv_proj", "ffn.up_proj", "ffn.gate_proj")
    }
    assert transposed == expected


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
@pytest.mark.parametrize("arguments", [{}, {"num_beams": 2}, {"num_return_sequences": 2, "do_sample": True}])
def test_generate_outside_the_block_keeps_the_standard_layout(family, arguments):
    """`generate()` changes no weight's layout, whatever it decodes: one sequence, beams, several returned ones."""
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    model.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=2, **arguments)
    assert all(weight.is_contiguous() for weight in linear_weights(model).values())


def test_only_float32_cpu_weights_are_laid_out():
    model = lm_model("decoder").to(torch.bfloat16)
    with aiayn.decoding_layout(model):
        assert not transposed_names(model)


def test_blocks_nest_and_the_outer_one_restores():
    """A block inside another lays out nothing more and restores nothing early: the outer block restores."""
    model = lm_model("decoder")
    with aiayn.decoding_layout(model):
        laid_out = transposed_names(model)
        with aiayn.decoding_layout(model):
            assert transposed_names(model) == laid_out
        assert transposed_names(model) == laid_out
    assert not transposed_names(model)


@pytest.mark.parametrize("quantiser", ["torch.ao", "torchao"])
@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_a_quantiser_after_the_block_quantises_the_standard_weights(family, quantiser):
    """The layout changes strides only: a model quantised after decoding in the block gives bit for bit the logits of
    the same model quantised before."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    def quantised(model: torch.nn.Module) -> torch.nn.Module:
        model = copy.deepcopy(model)
        if quantiser == "torchao":
            quantize_(model, Int8WeightOnlyConfig())
            return model
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    model = lm_model(family)
    ids, mask = prompt_batch(family)
    inputs = lm_inputs(family, ids, mask)
    with torch.no_grad():
        expected = quantised(model)(**inputs).logits
        with aiayn.decoding_layout(model):
            model.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=2)
        torch.testing.assert_close(quantised(model)(**inputs).logits, expected, rtol=0, atol=0)


def test_a_state_dict_after_the_block_is_in_the_standard_layout(tmp_path):
    """safetensors refuses non-contiguous tensors: a state dict taken after the block hands the weights out
    contiguous, so `safetensors.torch.save_model` writes the model's values."""
    import safetensors.torch

    model = lm_model("decoder")
    values = {name: parameter.detach().clone() for name, parameter in model.named_parameters(remove_duplicate=False)}
    with aiayn.decoding_layout(model):
        model.generate(prompt_batch("decoder")[0][:1], max_new_tokens=2)
    safetensors.torch.save_model(model, str(tmp_path / "model.safetensors"))
    saved = safetensors.torch.load_file(str(tmp_path / "model.safetensors"))
    assert saved.keys() <= values.keys() and all(torch.equal(saved[name], values[name]) for name in saved)


def test_the_block_restores_every_weight_when_its_body_raises():
    """An error inside the block (an interrupted `generate`) leaves the weights as they were: standard layout, the
    same values and the same parameter objects."""
    model = lm_model("seq2seq")
    before = {name: (parameter, parameter.detach().clone()) for name, parameter in model.named_parameters()}
    with pytest.raises(KeyboardInterrupt), aiayn.decoding_layout(model):
        assert transposed_names(model)
        raise KeyboardInterrupt
    assert not transposed_names(model)
    for name, parameter in model.named_parameters():
        assert parameter is before[name][0] and parameter.is_contiguous(), name
        assert torch.equal(parameter, before[name][1]), name


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_saving_inside_the_block_saves_untied_weights_and_refuses_tied_ones_by_name(tied, tmp_path):
    """transformers saves a weight several names share (the tied token table and output head) from contiguous memory
    only: inside the block `save_pretrained` refuses such a model with the names and what to do, before writing
    anything; with untied weights it saves the model's values, as after the block."""
    model = lm_model("decoder", tie_word_embeddings=tied)
    values = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    with aiayn.decoding_layout(model):
        assert "lm_head" in transposed_names(model)
        if tied:
            with pytest.raises(ValueError) as refused:
                model.save_pretrained(tmp_path)
            assert str(refused.value) == (
                "The tied weights model.decoder.embeddings.embed_tokens.weight = lm_head.weight are not contiguous in "
                "memory (laid out for decoding inside `aiayn.decoding_layout`), and transformers saves tied weights "
                "from contiguous memory only: save the model after the block."
            )
            assert not any(tmp_path.iterdir())
            return
        model.save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path)
    assert all(torch.equal(reloaded.get_parameter(name), value) for name, value in values.items())
