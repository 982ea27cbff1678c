"""Converted BERT, GPT-2, T5, BART and ViT checkpoints reproduce transformers' own models (built from random
weights)."""

import os
import subprocess
import sys

import pytest
import torch
import transformers
from helpers import hub_loading_environment, run_script, word_tokenizer
from test_hub import LOADER

import aiayn
from aiayn import cli
from aiayn.conversion import SUPPORTED_MODELS, convert_checkpoint, convert_from_hf

VOCAB = 97
TOLERANCE = {"rtol": 0, "atol": 1e-5}
# Weights 10 times the usual initialisation, so that attention logits, classifier scores and LM logits are of order 1
# to 10 rather than 0.01: a wrong attention scaling (1/sqrt(d_k)) then changes every compared output, greedy tokens
# and classification scores included, not only hidden states at the tolerance's edge.
INIT_STD = 0.2


def bert_config(**overrides):
    fields = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    return transformers.BertConfig(
        **{
            **fields,
            "intermediate_size": 64,
            "max_position_embeddings": 64,
            "num_labels": 3,
            "initializer_range": INIT_STD,
            **overrides,
        }
    )


def gpt2_config(**overrides):
    fields = {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}
    tokens = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    return transformers.GPT2Config(**{**fields, **tokens, "initializer_range": INIT_STD, **overrides})


def t5_config(**overrides):
    fields = {"vocab_size": VOCAB, "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 3}
    return transformers.T5Config(**{**fields, "num_heads": 4, "decoder_start_token_id": 0, **overrides})


def bart_config(**overrides):
    fields = {
        "vocab_size": VOCAB,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 3,
        "max_position_embeddings": 64,
    }
    sizes = {"encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}
    return transformers.BartConfig(**{**fields, **sizes, "init_std": INIT_STD, **overrides})


def vit_config(**overrides):
    fields = {"image_size": 32, "patch_size": 4, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    return transformers.ViTConfig(
        **{**fields, "intermediate_size": 64, "num_labels": 10, "initializer_range": INIT_STD, **overrides}
    )


def t5_v1_1(model_class, **overrides):
    """T5 v1.1: gated-GELU and an LM head of its own. transformers ties every freshly built T5 (it forces
    `tie_word_embeddings=True`) and unties a loaded v1.1 checkpoint whose head differs, as done here."""
    model = model_class(t5_config(feed_forward_proj="gated-gelu", tie_word_embeddings=False, **overrides))
    if hasattr(model, "lm_head"):
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    return model


REFERENCES = {
    "BertModel": lambda: transformers.BertModel(bert_config()),
    "BertForMaskedLM": lambda: transformers.BertForMaskedLM(bert_config()),
    "BertForSequenceClassification": lambda: transformers.BertForSequenceClassification(bert_config()),
    "GPT2Model": lambda: transformers.GPT2Model(gpt2_config()),
    "GPT2LMHeadModel": lambda: transformers.GPT2LMHeadModel(gpt2_config()),
    "T5Model": lambda: transformers.T5Model(t5_config()),
    "T5ForConditionalGeneration": lambda: transformers.T5ForConditionalGeneration(t5_config()),
    "T5Model v1.1": lambda: t5_v1_1(transformers.T5Model),
    "T5ForConditionalGeneration v1.1": lambda: t5_v1_1(transformers.T5ForConditionalGeneration),
    "BartModel": lambda: transformers.BartModel(bart_config()),
    "BartForConditionalGeneration": lambda: transformers.BartForConditionalGeneration(bart_config()),
    "ViTModel": lambda: transformers.ViTModel(vit_config()),
    "ViTForImageClassification": lambda: transformers.ViTForImageClassification(vit_config()),
}


REFERENCE_CONFIGS = {"T5ForConditionalGeneration": t5_config, "BartForConditionalGeneration": bart_config}


def reference(name: str) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    return REFERENCES[name]().eval()


def padded_inputs(name: str) -> dict:
    """Two right-padded rows (token types for BERT, a padded target for encoder-decoders); for ViT, three images."""
    generator = torch.Generator().manual_seed(1)
    if name.startswith("ViT"):
        return {"pixel_values": torch.randn(3, 3, 32, 32, generator=generator)}
    ids, mask = torch.randint(3, VOCAB, (2, 9), generator=generator), torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    pad = 1 if name.startswith("Bart") else 0
    inputs = {"input_ids": ids.masked_fill(mask == 0, pad), "attention_mask": mask}
    if name.startswith("Bert"):
        inputs["token_type_ids"] = (torch.arange(9) >= 4).long().expand(2, -1) * mask
    if name.startswith(("T5", "Bart")):
        target, target_mask = torch.randint(3, VOCAB, (2, 5), generator=generator), torch.ones(2, 5, dtype=torch.long)
        target_mask[0, 3:] = 0
        inputs.update(decoder_input_ids=target.masked_fill(target_mask == 0, pad), decoder_attention_mask=target_mask)
    return inputs


def compared_outputs(name: str, outputs) -> dict:
    """The outputs both implementations define, restricted to real (unpadded) positions."""
    names = ["logits" if "logits" in outputs else "last_hidden_state"]
    if "encoder_last_hidden_state" in outputs:
        names.append("encoder_last_hidden_state")
    if name.startswith(("Bert", "ViT")) and "pooler_output" in outputs:
        names.append("pooler_output")
    return {key: outputs[key] for key in names}


@pytest.mark.parametrize("name", REFERENCES)
def test_converted_models_reproduce_the_reference(name):
    model = reference(name)
    converted = convert_from_hf(model)
    assert type(converted).__name__.startswith("Aiayn") and not converted.training
    inputs = padded_inputs(name)
    with torch.no_grad():
        expected = compared_outputs(name, model(**inputs))
        got = compared_outputs(name, converted(**inputs))
    assert expected.keys() == got.keys()
    for key in expected:
        if expected[key].dim() == 3 and "input_ids" in inputs:  # positions: compare the real ones
            mask = inputs["decoder_attention_mask" if "decoder_attention_mask" in inputs else "attention_mask"]
            if key == "encoder_last_hidden_state":
                mask = inputs["attention_mask"]
            torch.testing.assert_close(got[key][mask.bool()], expected[key][mask.bool()], **TOLERANCE, msg=key)
        else:
            torch.testing.assert_close(got[key], expected[key], **TOLERANCE, msg=key)


def labelled_inputs(name: str) -> tuple[dict, torch.Tensor]:
    """`padded_inputs` and labels with -100 on the padding: of the tokens (GPT-2 scores position t on token t + 1), of
    every other token (BERT, as a masked LM scores a few), of the padded target (T5)."""
    inputs = padded_inputs(name)
    if name.startswith("T5"):
        return inputs, inputs["decoder_input_ids"].masked_fill(inputs["decoder_attention_mask"] == 0, -100)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    if name.startswith("Bert"):
        labels[:, ::2] = -100
    return inputs, labels


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(
    ("name", "labelled"),
    [("BertForMaskedLM", 7), ("GPT2LMHeadModel", 13), ("T5ForConditionalGeneration", 8)],
)
def test_the_loss_without_logits_is_the_references_loss_on_a_padded_batch(name, labelled, compiled):
    """The loss each language-model head computes without logits (`skip_logits=True`) is the loss transformers' own
    model computes over its logits, on a padded batch whose labels are partly -100: the mean over the labelled
    tokens (7 of BERT's 18, 13 predicted next tokens of GPT-2's, 8 of T5's 10 targets), or their sum over the
    Trainer's `num_items_in_batch`. In eager mode only the labelled rows are read; under `torch.compile` (where a
    data-dependent shape would break the graph) every row is, and the unlabelled ones must count for nothing, in the
    sum and in the mean's divisor."""
    model = reference(name)
    converted = convert_from_hf(model)
    inputs, labels = labelled_inputs(name)
    run = torch.compile(converted, backend="eager", fullgraph=True) if compiled else converted
    with torch.no_grad():
        expected = model(**inputs, labels=labels).loss
    for num_items_in_batch in (None,) if compiled else (None, 20):  # one graph compiled: the mean
        extra = {} if num_items_in_batch is None else {"num_items_in_batch": torch.tensor(num_items_in_batch)}
        outputs = run(**inputs, labels=labels, skip_logits=True, **extra)
        assert outputs.logits is None
        reference_loss = expected if num_items_in_batch is None else expected * labelled / num_items_in_batch
        torch.testing.assert_close(outputs.loss, reference_loss, rtol=5e-7, atol=0)  # measured at most 1.9e-7


def test_t5_conversion_keeps_ties_and_scaling_as_the_checkpoint_has_them():
    v1_0 = convert_from_hf(reference("T5ForConditionalGeneration"))
    assert v1_0.config.tie_word_embeddings and v1_0.config.scale_decoder_outputs
    assert v1_0.lm_head.weight is v1_0.get_input_embeddings().weight
    v1_1 = convert_from_hf(reference("T5ForConditionalGeneration v1.1"))
    assert not v1_1.config.tie_word_embeddings and not v1_1.config.scale_decoder_outputs
    assert v1_1.config.hidden_act == "gated-gelu_pytorch_tanh"


def test_converted_gpt2_greedy_decoding_gives_the_references_tokens():
    model = reference("GPT2LMHeadModel")
    converted = convert_from_hf(model)
    ids, mask = torch.randint(3, VOCAB, (3, 7), generator=torch.Generator().manual_seed(2)), torch.ones(3, 7).long()
    mask[1, :3] = 0  # left padding
    kwargs = {"attention_mask": mask, "max_new_tokens": 12, "do_sample": False}
    assert torch.equal(converted.generate(ids, **kwargs), model.generate(ids, **kwargs))


@pytest.mark.parametrize(
    "name", ["T5ForConditionalGeneration", "T5ForConditionalGeneration v1.1", "BartForConditionalGeneration"]
)
def test_converted_seq2seq_beam_search_gives_the_references_tokens(name):
    torch.manual_seed(0)
    # transformers' T5 sizes its generation cache by the encoder's depth, so its decoder must be as deep to generate.
    equal_depths = {"num_layers": 3} if name.startswith("T5") else {"encoder_layers": 3}
    if name.endswith("v1.1"):
        model = t5_v1_1(transformers.T5ForConditionalGeneration, **equal_depths).eval()
    else:
        model = type(reference(name))(REFERENCE_CONFIGS[name](**equal_depths)).eval()
    converted = convert_from_hf(model)
    inputs = padded_inputs(name)
    kwargs = {"attention_mask": inputs["attention_mask"], "max_new_tokens": 10, "num_beams": 4}
    kwargs.update(length_penalty=0.6, num_return_sequences=2)
    assert torch.equal(
        converted.generate(inputs["input_ids"], **kwargs), model.generate(inputs["input_ids"], **kwargs)
    )


def test_converted_t5_decoding_with_a_cache_gives_the_references_logits_at_every_step():
    """Greedy decoding with a cache, one token per step: the converted T5's logits at every step are T5's own, whose
    relative position bias places the single query at the cache's length."""
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(t5_config(num_layers=3)).eval()  # a cache as deep as the decoder
    converted = convert_from_hf(model)
    inputs = padded_inputs("T5ForConditionalGeneration")
    settings = {"attention_mask": inputs["attention_mask"], "max_new_tokens": 12, "min_new_tokens": 12,
                "do_sample": False, "use_cache": True, "output_logits": True,
                "return_dict_in_generate": True}  # fmt: skip
    expected = model.generate(inputs["input_ids"], **settings)
    got = converted.generate(inputs["input_ids"], **settings)
    assert torch.equal(got.sequences, expected.sequences) and len(got.logits) == 12
    # Measured equal; 1e-6 is two float32 steps at the logits' size (up to 4.2).
    torch.testing.assert_close(got.logits, expected.logits, rtol=0, atol=1e-6)


def test_unsupported_models_and_features_raise_clear_errors():
    with pytest.raises(ValueError, match="Cannot convert RobertaModel; supported models: BertModel"):
        convert_from_hf(transformers.RobertaModel(transformers.RobertaConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
        )))  # fmt: skip
    with pytest.raises(ValueError, match="position_embedding_type='relative_key'"):
        convert_from_hf(transformers.BertModel(bert_config(position_embedding_type="relative_key")))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        convert_from_hf(transformers.GPT2Model(gpt2_config(scale_attn_by_inverse_layer_idx=True)))
    bart = transformers.BartForConditionalGeneration(bart_config())
    bart.final_logits_bias.fill_(0.5)
    with pytest.raises(ValueError, match="final_logits_bias"):
        convert_from_hf(bart)


def test_converted_vit_interpolates_its_positions_as_vit_does():
    """48 x 48 images through a model built for 32 x 32: ViT's bicubic interpolation of the learned table."""
    model = reference("ViTForImageClassification")
    converted = convert_from_hf(model)
    images = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(pixel_values=images, interpolate_pos_encoding=True).logits
        got = converted(pixel_values=images, interpolate_pos_encoding=True).logits
    assert expected.abs().max() > 1  # logits of order 1 to 10: a wrong scale or position would show
    torch.testing.assert_close(got, expected, **TOLERANCE)


def test_every_supported_model_is_tested():
    assert set(SUPPORTED_MODELS) == {name.removesuffix(" v1.1") for name in REFERENCES}


def test_convert_checkpoint_writes_a_folder_that_loads_with_and_without_aiayn(tmp_path, monkeypatch):
    source, destination, workdir = tmp_path / "t5", tmp_path / "aiayn-t5", tmp_path / "elsewhere"
    workdir.mkdir()
    model = reference("T5ForConditionalGeneration v1.1")
    model.save_pretrained(source)
    word_tokenizer().save_pretrained(source)
    # in this process; the folder then loads without aiayn in a fresh one
    run_script("scripts/convert_checkpoint.py", [str(source), str(destination)], monkeypatch)
    assert {"config.json", "model.safetensors", "tokenizer.json", "modeling_aiayn_seq2seq.py"} <= set(
        os.listdir(destination)
    )
    inputs = padded_inputs("T5ForConditionalGeneration")
    with torch.no_grad():
        expected = model(**inputs).logits
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(destination)
    assert type(loaded) is aiayn.AiaynSeq2SeqForConditionalGeneration
    with torch.no_grad():
        logits = loaded(**inputs).logits
    torch.testing.assert_close(logits, expected, **TOLERANCE)
    base = transformers.AutoModel.from_pretrained(destination)
    assert type(base) is aiayn.AiaynSeq2SeqModel
    assert transformers.AutoTokenizer.from_pretrained(destination).decode([5, 6]) == "w5 w6"

    torch.save(
        {
            "auto_name": "AutoModelForSeq2SeqLM",
            "inputs": inputs,
            "outputs": {"logits": logits},
        },
        destination / "expected.pt",
    )
    environment = hub_loading_environment(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", LOADER, str(destination)], cwd=workdir, env=environment, capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "aiayn-t5 exact AutoModelForSeq2SeqLM" in result.stdout.splitlines()


def test_convert_checkpoint_refuses_what_it_cannot_convert(tmp_path, capsys):
    with pytest.raises(ValueError, match="no config.json"):
        convert_checkpoint(str(tmp_path), str(tmp_path / "out"))
    roberta = transformers.RobertaModel(transformers.RobertaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    ))  # fmt: skip
    roberta.save_pretrained(tmp_path / "roberta")
    with pytest.raises(ValueError, match=r"\['RobertaModel'\]; supported models"):
        convert_checkpoint(str(tmp_path / "roberta"), str(tmp_path / "out"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:  # `aiayn convert`: a usage error, not a traceback
        cli.main(["convert", str(tmp_path / "roberta"), str(tmp_path / "out")])
    printed = capsys.readouterr().err
    assert exited.value.code == 2 and "supported models" in printed and "Traceback" not in printed


def test_pickled_weights_are_read_only_when_allowed(tmp_path):
    model = reference("BertModel")
    model.config.architectures = ["BertModel"]
    model.config.save_pretrained(tmp_path / "bert")
    torch.save(model.state_dict(), tmp_path / "bert" / "pytorch_model.bin")  # a checkpoint of older transformers
    with pytest.raises(ValueError, match="no safetensors weights.*allow_pickle=True"):
        convert_checkpoint(str(tmp_path / "bert"), str(tmp_path / "out"))
    converted = convert_checkpoint(str(tmp_path / "bert"), str(tmp_path / "out"), allow_pickle=True)
    assert torch.equal(converted.get_input_embeddings().weight, model.get_input_embeddings().weight)
