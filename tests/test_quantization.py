"""int8 CPU inference on the plain `nn.Linear` projections: torch.ao's dynamic quantisation, torchao's int8 configs
and transformers' `TorchAoConfig`, on every family, beside transformers' own models quantised the same way."""

import copy
import io
import os

import pytest
import torch
import transformers
from helpers import FAMILIES, LM_AUTO_CLASS, lm_inputs, lm_model, prompt_batch, random_ids
from torch import nn
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8Tensor, Int8WeightOnlyConfig, quantize_

import aiayn
from aiayn import data
from aiayn.conversion import convert_from_hf
from aiayn.tokenization import config_token_fields, train_tokenizer

TORCHAO_CONFIGS = {
    "int8-weight-only": Int8WeightOnlyConfig,
    "int8-dynamic-activation": Int8DynamicActivationInt8WeightConfig,
}
# Wide enough that every projection holds more weights than the rows it is quantised by.
SIZES = {"d_model": 64, "num_heads": 4, "d_ff": 128}
PIPELINE_TASKS = {"encoder": "fill-mask", "decoder": "text-generation", "seq2seq": "translation"}


def linear_names(model: nn.Module, kind: type = nn.Linear) -> list[str]:
    return sorted(name for name, module in model.named_modules() if type(module) is kind)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).norm() / expected.norm())


def state_dict_bytes(model: nn.Module) -> int:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def quantized_model(family: str) -> tuple[nn.Module, nn.Module]:
    model = lm_model(family, **SIZES)
    return model, torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)


@pytest.mark.parametrize("family", FAMILIES)
def test_dynamic_quantization_replaces_every_projection(family):
    """`quantize_dynamic(model, {nn.Linear})`: every linear layer becomes torch.ao's int8 `Linear` (none is left in
    float32), the state dict shrinks to below half, and the logits stay within 5% of the float model's."""
    model, quantized = quantized_model(family)
    assert linear_names(quantized) == []
    assert linear_names(quantized, torch.ao.nn.quantized.dynamic.Linear) == linear_names(model)
    assert state_dict_bytes(quantized) < 0.5 * state_dict_bytes(model)
    inputs = lm_inputs(family, random_ids(3, 10))
    with torch.no_grad():
        expected, got = model(**inputs).logits, quantized(**inputs).logits
    assert 1e-4 < relative_error(got, expected) < 0.05


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_dynamic_quantization_generates_with_the_cache_as_without_it(family):
    _, quantized = quantized_model(family)
    ids, mask = prompt_batch(family)
    arguments = {"attention_mask": mask, "max_new_tokens": 6, "do_sample": False}
    cached = quantized.generate(ids, use_cache=True, **arguments)
    assert cached.shape[1] > ids.shape[1] if family == "decoder" else cached.shape[1] > 1
    assert torch.equal(cached, quantized.generate(ids, use_cache=False, **arguments))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("config", TORCHAO_CONFIGS)
def test_torchao_int8_quantises_every_projection(family, config):
    """`quantize_` with torchao's int8 configs: every linear weight an `Int8Tensor`, a forward over 8 x 64 tokens
    within 5% of the float logits, and `generate()` of one sequence and of a batch, cached as uncached."""
    model = lm_model(family, **SIZES)
    quantized = copy.deepcopy(model)
    quantize_(quantized, TORCHAO_CONFIGS[config]())
    linears = [module for module in quantized.modules() if type(module) is nn.Linear]
    assert linears and all(type(module.weight) is Int8Tensor for module in linears)
    inputs = lm_inputs(family, random_ids(8, 64))
    with torch.no_grad():
        expected, got = model(**inputs).logits, quantized(**inputs).logits
    assert 1e-4 < relative_error(got, expected) < 0.05
    if family == "encoder":
        return
    ids, mask = prompt_batch(family)
    for rows in (1, 3):
        arguments = {"attention_mask": mask[:rows], "max_new_tokens": 5, "do_sample": False}
        cached = quantized.generate(ids[:rows], **arguments)
        assert torch.equal(cached, quantized.generate(ids[:rows], use_cache=False, **arguments))


def bert_and_t5() -> dict[str, nn.Module]:
    """transformers' BERT masked LM and T5, whose projections are `nn.Linear` modules, with std-0.5 weights so that
    the logits are of order 1 to 10."""
    bert = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
        )
    )
    t5 = transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=97, d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2, decoder_start_token_id=0
        )
    )
    references = {"BERT": bert, "T5": t5}
    for reference in references.values():
        with torch.no_grad():
            for parameter in reference.parameters():
                if parameter.dim() == 2:
                    parameter.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(parameter.numel()))
        reference.eval()
    return references


@pytest.mark.parametrize("reference_name", ["BERT", "T5"])
@pytest.mark.parametrize("config", TORCHAO_CONFIGS)
def test_torchao_int8_gives_the_logits_of_transformers_model_quantised_the_same_way(reference_name, config):
    """torchao quantises each output row of a weight by its own scale (and each input row of activations by its
    own), so aiayn's fused query-key-value projection quantises exactly as the reference's three: the converted
    model quantised gives the reference's quantised logits to float32 rounding."""
    reference = bert_and_t5()[reference_name]
    converted = convert_from_hf(reference)
    ids = random_ids(4, 12)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if reference_name == "T5":
        inputs["decoder_input_ids"] = ids
    for model in (reference, converted):
        quantize_(model, TORCHAO_CONFIGS[config]())
    with torch.no_grad():
        expected, got = reference(**inputs).logits, converted(**inputs).logits
    assert expected.abs().max() > 1.0
    # Measured 0.0 on an AMD EPYC; the slack is a few float32 ulps of logits up to 16, for products of another width.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def tokenizers():
    texts = data.pydoc()["train"]["text"]
    return {family: train_tokenizer(family, texts, vocab_size=400) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_from_pretrained_with_torchao_config_quantises_serves_saves_and_reloads(family, tokenizers, tmp_path):
    """`from_pretrained(folder, quantization_config=TorchAoConfig(Int8WeightOnlyConfig()))`: every projection int8
    but the output head, which transformers keeps in float as for its own models; the pipeline of the family
    answers; the quantised model saves as safetensors and reloads with the same logits."""
    tokenizer = tokenizers[family]
    config = aiayn.preset_config(
        {"encoder": "tiny-encoder", "decoder": "tiny-decoder", "seq2seq": "tiny"}[family],
        **SIZES,
        num_layers=2,
        dropout=0.0,
        **config_token_fields(tokenizer, family),
    )
    torch.manual_seed(0)
    LM_AUTO_CLASS[family].from_config(config).save_pretrained(tmp_path / "float")
    tokenizer.save_pretrained(tmp_path / "float")
    quantization = transformers.TorchAoConfig(Int8WeightOnlyConfig())
    model = LM_AUTO_CLASS[family].from_pretrained(tmp_path / "float", quantization_config=quantization)
    head = model.get_output_embeddings()
    quantized = {name for name, module in model.named_modules() if type(getattr(module, "weight", None)) is Int8Tensor}
    assert quantized == set(linear_names(model)) - {name for name, module in model.named_modules() if module is head}

    text = "The with statement wraps a [MASK]." if family == "encoder" else "The with statement wraps a block."
    answer = transformers.pipeline(PIPELINE_TASKS[family], model=model, tokenizer=tokenizer)
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        if family == "encoder":
            masked = encoded["input_ids"][0].tolist().index(tokenizer.mask_token_id)
            assert answer(text)[0]["token"] == int(model(**encoded).logits[0, masked].argmax())
        elif family == "decoder":
            expected = model.generate(**encoded, max_new_tokens=5, do_sample=False)[0].tolist()
            assert answer(text, max_new_tokens=5, do_sample=False, return_tensors=True)[0]["generated_token_ids"] == (
                expected
            )
        else:
            expected = tokenizer.decode(model.generate(**encoded, max_new_tokens=5)[0], skip_special_tokens=True)
            assert answer(text, max_new_tokens=5)[0]["translation_text"] == expected

    model.save_pretrained(tmp_path / "int8")
    assert "model.safetensors" in os.listdir(tmp_path / "int8")
    reloaded = LM_AUTO_CLASS[family].from_pretrained(tmp_path / "int8")
    assert {
        name for name, module in reloaded.named_modules() if type(getattr(module, "weight", None)) is Int8Tensor
    } == (quantized)
    inputs = lm_inputs(family, torch.randint(5, 400, (2, 9), generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, model(**inputs).logits)
