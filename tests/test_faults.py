"""Bad input and broken files: a clear error naming the problem, finite numbers, never a silently wrong model."""

import json
import os

import pytest
import torch
import transformers
from helpers import FAMILIES, LM_AUTO_CLASS, VOCAB, lm_inputs, lm_model, padded_batch, random_ids, tiny_config
from huggingface_hub.errors import StrictDataclassError
from safetensors.torch import load_file

import aiayn

EXTRAPOLATING_POSITIONS = ("sinusoidal", "relative", "rotary")


def family_inputs(family: str, ids: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    return {key: value for key, value in lm_inputs(family, ids, mask).items() if value is not None}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("bad_id", [VOCAB, VOCAB + 100, -1])
def test_token_ids_outside_the_vocabulary_are_named(family, bad_id):
    model = lm_model(family)
    ids = random_ids(2, 6)
    ids[1, 3] = bad_id
    with pytest.raises(
        IndexError, match=rf"input_ids contain {bad_id}, outside \[0, {VOCAB}\) \(vocab_size={VOCAB}\)"
    ) as raised:
        model(ids, **({"decoder_input_ids": random_ids(2, 3)} if family == "seq2seq" else {}))
    assert isinstance(raised.value, ValueError)  # IndexError as in transformers' models, ValueError as before


def test_seq2seq_names_the_decoder_input_ids():
    model = lm_model("seq2seq")
    target = random_ids(2, 4)
    target[0, 0] = VOCAB
    with pytest.raises(ValueError, match=rf"decoder_input_ids contain {VOCAB}, outside"):
        model(random_ids(2, 5), decoder_input_ids=target)


def test_token_types_are_checked():
    model = lm_model("encoder", type_vocab_size=2)
    ids = random_ids(2, 5)
    with pytest.raises(ValueError, match=r"token_type_ids contain 2, outside \[0, 2\) \(type_vocab_size=2\)"):
        model(ids, token_type_ids=torch.full_like(ids, 2))
    with pytest.raises(ValueError, match=r"token_type_ids have shape \(2, 4\); the inputs have shape \(2, 5\)"):
        model(ids, token_type_ids=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="no token types"):
        lm_model("encoder", type_vocab_size=0)(ids, token_type_ids=torch.zeros_like(ids))


@pytest.mark.parametrize("family", FAMILIES)
def test_learned_positions_refuse_sequences_longer_than_they_learned(family):
    model = lm_model(family, position_embedding_type="learned", max_position_embeddings=16)
    with pytest.raises(IndexError, match=r"17 tokens long .* max_position_embeddings=16"):
        model(**family_inputs(family, random_ids(1, 17)))
    with torch.no_grad():
        assert model(**family_inputs(family, random_ids(1, 16))).logits.shape[1] == 16


def test_learned_positions_count_cached_tokens():
    model = lm_model("decoder", position_embedding_type="learned", max_position_embeddings=16)
    with torch.no_grad():
        cache = model(random_ids(1, 12), use_cache=True).cache
        with pytest.raises(ValueError, match=r"17 tokens long \(cached tokens included\).*max_position_embeddings=16"):
            model(random_ids(1, 5), cache=cache)
        with pytest.raises(ValueError, match="max_position_embeddings=16"):
            model.generate(random_ids(1, 12), max_new_tokens=8, do_sample=False)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("position", EXTRAPOLATING_POSITIONS)
def test_other_position_types_run_past_their_training_length(family, position):
    model = lm_model(family, position_embedding_type=position, max_position_embeddings=16)
    with torch.no_grad():
        logits = model(**family_inputs(family, random_ids(2, 40))).logits
    assert logits.shape[1] == 40 and torch.isfinite(logits).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_masks_of_the_wrong_shape_are_named(family):
    model = lm_model(family)
    ids = random_ids(2, 6)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 5\), but a padding mask over 6 tokens has"):
        model(**family_inputs(family, ids, torch.ones(2, 5, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 6\).* \(2, 6\)"):
        model(**family_inputs(family, ids, torch.ones(1, 6, dtype=torch.long)))


def test_seq2seq_masks_are_checked_on_both_sides_and_after_the_cache():
    model = lm_model("seq2seq")
    source, target = random_ids(2, 6), random_ids(2, 4)
    with pytest.raises(ValueError, match=r"decoder_attention_mask has shape \(2, 3\).*over 4 tokens"):
        model(source, decoder_input_ids=target, decoder_attention_mask=torch.ones(2, 3, dtype=torch.long))
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(source)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 5\).*over 6 source tokens"):
        model(encoder_outputs=encoder_outputs, attention_mask=torch.ones(2, 5), decoder_input_ids=target)
    decoder = lm_model("decoder")
    with torch.no_grad():
        cache = decoder(target, use_cache=True).cache
        with pytest.raises(ValueError, match=r"over 1 tokens after 4 cached ones has shape \(2, 5\)"):
            decoder(target[:, :1], cache=cache, attention_mask=torch.ones(2, 1, dtype=torch.long))


@pytest.mark.parametrize(
    ("family", "head", "labels", "message"),
    [
        ("encoder", "AiaynEncoderForMaskedLM", torch.zeros(2, 5), r"one label per token: shape \(2, 6\)"),
        ("encoder", "AiaynEncoderForTokenClassification", torch.zeros(2, 7), r"one label per token"),
        ("encoder", "AiaynEncoderForSequenceClassification", torch.zeros(3), r"one label .* per example"),
        ("decoder", "AiaynDecoderForCausalLM", torch.zeros(2, 5), r"one label per input token: shape \(2, 6\)"),
        ("decoder", "AiaynDecoderForSequenceClassification", torch.zeros(1), r"per example: shape \(2, \.\.\.\)"),
        ("seq2seq", "AiaynSeq2SeqForConditionalGeneration", None, r"one label per decoder input token"),
    ],
)
def test_labels_of_the_wrong_shape_are_named(family, head, labels, message):
    model = getattr(aiayn, head)(tiny_config(family)).eval()
    ids = random_ids(2, 6)
    inputs = {"input_ids": ids}
    if family == "seq2seq":
        inputs["decoder_input_ids"], labels = random_ids(2, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match=rf"labels have shape .*, but the model needs .*{message}"):
        model(**inputs, labels=labels.long())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_empty_batches_and_single_tokens(family, implementation):
    model = lm_model(family, implementation)
    with torch.no_grad():
        empty = model(**family_inputs(family, torch.zeros(0, 5, dtype=torch.long)))
        single = model(**family_inputs(family, random_ids(2, 1)))
    assert empty.logits.shape == (0, 5, VOCAB)
    assert single.logits.shape == (2, 1, VOCAB) and torch.isfinite(single.logits).all()
    if family != "encoder":
        generated = model.generate(random_ids(2, 1), max_new_tokens=3, do_sample=False)
        assert generated.shape[0] == 2


def unattended_attention_outputs(model, family: str, inputs: dict) -> list[torch.Tensor]:
    """The heads' concatenated outputs (the input of W^O) of every attention module, in call order."""
    captured = []
    hooks = [
        module.o_proj.register_forward_hook(lambda module, args, output: captured.append(args[0]))
        for module in model.modules()
        if isinstance(module, aiayn.attention_aiayn.AiaynAttention)
    ]
    try:
        model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return captured


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("position", ["learned", "relative"])
def test_fully_masked_queries_attend_to_nothing_on_every_backend(family, position):
    """Row 0 is all padding and row 2 is left-padded: their queries that may see no key get a zero attention output
    and zero weights, on every backend, so eager, sdpa and flex attention agree everywhere, padding included."""
    ids, mask = padded_batch()
    mask[0] = 0
    inputs = lm_inputs(family, ids, mask)
    results = {}
    # Flex attention compiles a kernel per configuration: tested where its mask is hardest, with the bias added.
    for implementation in ("eager", "sdpa") + (("flex_attention",) if position == "relative" else ()):
        model = lm_model(family, implementation, position_embedding_type=position)
        with torch.no_grad():
            results[implementation] = model(**inputs, output_attentions=implementation == "eager")
            heads = unattended_attention_outputs(model, family, inputs)
        assert all(output[0].abs().max() == 0 for output in heads)  # every attention of the all-padding row
        if family == "decoder":  # causal self-attention: the left-padded row's first two queries see only padding
            assert all(output[2, :2].abs().max() == 0 for output in heads)
    for implementation in set(results) - {"eager"}:
        torch.testing.assert_close(results["eager"].logits, results[implementation].logits, rtol=0, atol=1e-5)
    weights = results["eager"].attentions if family != "seq2seq" else results["eager"].cross_attentions
    assert all(layer[0].abs().max() == 0 for layer in weights)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_outputs_and_gradients_are_finite(family, implementation, dtype):
    ids, mask = padded_batch()
    mask[0] = 0
    for position, skip_logits in (("sinusoidal", False), ("relative", False), ("relative", True)):
        model = lm_model(family, implementation, position_embedding_type=position).to(dtype).train()
        outputs = model(**lm_inputs(family, ids, mask), labels=ids, skip_logits=skip_logits)
        outputs.loss.backward()
        if not skip_logits:
            assert outputs.logits.dtype == dtype and torch.isfinite(outputs.logits).all()
        assert torch.isfinite(outputs.loss)
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def save(model, folder) -> str:
    model.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("damage", ["truncated", "corrupted header"])
def test_a_damaged_weights_file_is_named(damage, tmp_path):
    folder = save(lm_model("decoder"), tmp_path / "model")
    path = os.path.join(folder, "model.safetensors")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[10:20] = b"\x00" * 10
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(OSError, match=rf"{folder} cannot be read .* truncated or corrupted"):
        transformers.AutoModelForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("hidden_act", "swish2", r"field 'hidden_act':\s+ValueError: Value must be one of .*got 'swish2'"),
        ("num_heads", 5, r"d_model \(32\) must be divisible by num_heads \(5\)"),
        ("dropout", 1.5, r"field 'dropout':\s+ValueError: Value must be a probability in \[0, 1\), got 1.5"),
        (
            "position_embedding_type",
            "alibi",
            r"field 'position_embedding_type':\s+TypeError: .* expected one of .*got alibi",
        ),
        ("vocab_size", 0, r"field 'vocab_size':\s+ValueError: Value must be positive, got 0"),
    ],
)
def test_a_config_with_an_invalid_value_is_refused(field, value, message, tmp_path):
    folder = save(lm_model("encoder"), tmp_path / "model")
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config[field] = value
    if field == "num_heads":
        del config["d_kv"]
    with open(config_path, "w") as f:
        json.dump(config, f)
    with pytest.raises(StrictDataclassError, match=message):
        transformers.AutoModelForMaskedLM.from_pretrained(folder)


@pytest.mark.parametrize("saved", FAMILIES)
def test_another_familys_checkpoint_is_refused(saved, tmp_path):
    folder = save(lm_model(saved), tmp_path / "model")
    for family, auto_class in LM_AUTO_CLASS.items():
        if family == saved:
            continue
        model_class = auto_class._model_mapping[type(tiny_config(family))]
        with pytest.raises(ValueError, match=rf"model_type 'aiayn_{saved}', but .* builds 'aiayn_{family}' models"):
            model_class.from_pretrained(folder)


def test_a_transformers_checkpoint_is_refused_with_the_way_to_convert_it(tmp_path):
    bert = transformers.BertForMaskedLM(
        transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    )
    folder = save(bert, tmp_path / "bert")
    with pytest.raises(ValueError, match=r"model_type 'bert'.*convert it first: .*aiayn convert"):
        aiayn.AiaynEncoderForMaskedLM.from_pretrained(folder)


def test_weights_of_another_size_are_refused_and_of_another_depth_named(tmp_path):
    folder = save(lm_model("decoder"), tmp_path / "model")
    with pytest.raises(
        RuntimeError, match=r"ffn.up_proj.weight has shape \(64, 32\) in the checkpoint and \(128, 32\)"
    ):
        aiayn.AiaynDecoderForCausalLM.from_pretrained(folder, config=tiny_config("decoder", d_ff=128))
    with pytest.warns(UserWarning, match=r"layers.2.ffn.down_proj.weight is missing.*randomly initialised"):
        aiayn.AiaynDecoderForCausalLM.from_pretrained(folder, config=tiny_config("decoder", num_layers=3))
    resized = aiayn.AiaynDecoderForCausalLM.from_pretrained(
        folder, config=tiny_config("decoder", d_ff=128), ignore_mismatched_sizes=True
    )
    assert resized.config.d_ff == 128


def test_a_new_head_may_be_missing(tmp_path):
    """A masked-LM checkpoint fine-tuned for classification: the new classifier is initialised, as usual."""
    folder = save(lm_model("encoder"), tmp_path / "model")
    model, info = aiayn.AiaynEncoderForSequenceClassification.from_pretrained(folder, output_loading_info=True)
    assert info["missing_keys"] and all(
        key.startswith(("classifier.", "model.pooler.")) for key in info["missing_keys"]
    )


def test_only_safetensors_are_written_and_by_default_read(tmp_path):
    model = lm_model("seq2seq")
    folder = save(model, tmp_path / "model")
    assert not [name for name in os.listdir(folder) if name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in os.listdir(folder):
        if name != "model.safetensors":
            os.link(os.path.join(folder, name), pickled / name)
    torch.save(load_file(os.path.join(folder, "model.safetensors")), pickled / "pytorch_model.bin")
    with pytest.raises(OSError, match=r"no file named model.safetensors.*Only safetensors weights are read unless"):
        transformers.AutoModelForSeq2SeqLM.from_pretrained(pickled)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(pickled, use_safetensors=False).eval()
    ids = random_ids(2, 5)
    with torch.no_grad():
        assert torch.equal(loaded(ids, decoder_input_ids=ids).logits, model(ids, decoder_input_ids=ids).logits)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("score", ["dot_product", "additive"])
def test_attention_weights_of_a_padded_batch_keep_their_gradient(family, score):
    """T5's `test_retain_grad_hidden_states_attentions` on a batch with fully masked queries (an all-padding row, a
    left-padded row): the returned weights are those the output was computed from, so they get a gradient, and the
    fully masked queries' weights are zero."""
    ids, mask = padded_batch()
    mask[0] = 0
    model = lm_model(family, "eager", attention_score=score).train()
    outputs = model(**lm_inputs(family, ids, mask), output_attentions=True)
    weights = outputs.attentions[0] if family != "seq2seq" else outputs.cross_attentions[0]
    weights.retain_grad()
    outputs.logits.flatten()[0].backward()
    assert weights.grad is not None
    assert weights[0].abs().max() == 0


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("value", [2, 9])
def test_a_mask_that_is_not_zeros_and_ones_is_named(family, value):
    """Positions count a mask's ones: a mask of 2s or 9s would otherwise read as a sequence too long."""
    ids, mask = padded_batch()
    mask[0, 1] = value
    model = lm_model(family)
    with pytest.raises(ValueError, match=rf"attention_mask holds values other than 0 and 1 \(\[0, 1, {value}\]\)"):
        model(**lm_inputs(family, ids, mask))
