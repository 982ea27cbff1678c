import math

import pytest
import torch
import transformers
from helpers import (
    FAMILIES,
    LM_AUTO_CLASS,
    POSITION_TYPES,
    VOCAB,
    lm_inputs,
    lm_model,
    padded_batch,
    random_ids,
    tiny_config,
)
from torch.nn import functional as F
from transformers.models.t5.modeling_t5 import T5Attention

import aiayn
from aiayn.attention_aiayn import AiaynSelfAttention, AttentionInputs, DotProductScore, MaskedAttention
from aiayn.losses_aiayn import LinearCrossEntropy
from aiayn.modeling_aiayn import AiaynFeedForward, AiaynLayer
from aiayn.modeling_aiayn_seq2seq import shift_tokens_right
from aiayn.positions_aiayn import (
    AiaynRotaryEmbedding,
    AiaynSinusoidalPositionEmbedding,
    apply_rotary,
    inverse_frequencies,
    relative_position_bucket,
)

# Each family's Auto classes and the class each builds.
HEAD_CLASSES = {
    "encoder": {
        "AutoModel": "AiaynEncoderModel",
        "AutoModelForMaskedLM": "AiaynEncoderForMaskedLM",
        "AutoModelForSequenceClassification": "AiaynEncoderForSequenceClassification",
        "AutoModelForTokenClassification": "AiaynEncoderForTokenClassification",
        "AutoModelForQuestionAnswering": "AiaynEncoderForQuestionAnswering",
        "AutoModelForMultipleChoice": "AiaynEncoderForMultipleChoice",
    },
    "decoder": {
        "AutoModel": "AiaynDecoderModel",
        "AutoModelForCausalLM": "AiaynDecoderForCausalLM",
        "AutoModelForSequenceClassification": "AiaynDecoderForSequenceClassification",
        "AutoModelForTokenClassification": "AiaynDecoderForTokenClassification",
        "AutoModelForQuestionAnswering": "AiaynDecoderForQuestionAnswering",
    },
    "seq2seq": {
        "AutoModel": "AiaynSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "AiaynSeq2SeqForConditionalGeneration",
        "AutoModelForSequenceClassification": "AiaynSeq2SeqForSequenceClassification",
        "AutoModelForQuestionAnswering": "AiaynSeq2SeqForQuestionAnswering",
        "AutoModelForTextEncoding": "AiaynSeq2SeqEncoderModel",
    },
}
HEADS = [(family, auto_name) for family in FAMILIES for auto_name in HEAD_CLASSES[family]]


def head_inputs(family: str, auto_name: str) -> dict:
    """Inputs with targets for the head that `auto_name` builds: 2 sequences of 7 tokens, the second padded."""
    ids, mask = random_ids(2, 7), torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if auto_name == "AutoModel" and family == "seq2seq":
        inputs["decoder_input_ids"] = random_ids(2, 4, seed=2)
    elif auto_name == "AutoModelForMaskedLM":
        inputs["labels"] = torch.full_like(ids, -100).index_put_(
            (torch.tensor([0, 1]), torch.tensor([2, 3])), ids[:, 2]
        )
    elif auto_name == "AutoModelForCausalLM":
        inputs["labels"] = ids.masked_fill(mask == 0, -100)
    elif auto_name == "AutoModelForSeq2SeqLM":
        inputs["labels"] = random_ids(2, 4, seed=2)
    elif auto_name == "AutoModelForSequenceClassification":
        inputs["labels"] = torch.tensor([2, 0])
    elif auto_name == "AutoModelForTokenClassification":
        inputs["labels"] = torch.randint(0, 3, ids.shape).masked_fill(mask == 0, -100)
    elif auto_name == "AutoModelForQuestionAnswering":
        inputs.update(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    elif auto_name == "AutoModelForMultipleChoice":
        inputs = {"input_ids": random_ids(2, 14).view(2, 2, 7), "labels": torch.tensor([1, 0])}
    return inputs


@pytest.mark.parametrize(("family", "auto_name"), HEADS)
def test_each_auto_class_builds_its_head_which_trains(family, auto_name):
    config = tiny_config(family, num_labels=3)
    model = getattr(transformers, auto_name).from_config(config)
    assert type(model).__name__ == HEAD_CLASSES[family][auto_name]
    outputs = model(**head_inputs(family, auto_name))
    if auto_name in ("AutoModel", "AutoModelForTextEncoding"):
        assert outputs.last_hidden_state.shape[-1] == config.d_model
        loss = outputs.last_hidden_state.pow(2).mean()
    else:
        assert outputs.loss.ndim == 0 and torch.isfinite(outputs.loss)
        loss = outputs.loss
    loss.backward()
    unused = {"pooler"} if auto_name == "AutoModel" and family == "encoder" else set()
    without_grad = [
        name for name, p in model.named_parameters() if p.grad is None and not any(u in name for u in unused)
    ]
    assert not without_grad


def test_head_output_shapes():
    ids = random_ids(2, 7)
    assert aiayn.AiaynEncoderForSequenceClassification(tiny_config("encoder", num_labels=3))(ids).logits.shape == (
        2,
        3,
    )
    assert aiayn.AiaynDecoderForTokenClassification(tiny_config("decoder", num_labels=5))(ids).logits.shape == (
        2,
        7,
        5,
    )
    qa = aiayn.AiaynSeq2SeqForQuestionAnswering(tiny_config("seq2seq"))(ids)
    assert qa.start_logits.shape == qa.end_logits.shape == (2, 7)
    choices = aiayn.AiaynEncoderForMultipleChoice(tiny_config("encoder"))(random_ids(2, 21).view(2, 3, 7))
    assert choices.logits.shape == (2, 3)
    encoded = aiayn.AiaynSeq2SeqEncoderModel(tiny_config("seq2seq"))(ids)
    assert encoded.last_hidden_state.shape == (2, 7, 32)


def test_causal_lm_loss_is_the_shifted_cross_entropy():
    model = lm_model("decoder")
    ids = random_ids(2, 8)
    labels = ids.clone()
    labels[0, :3] = -100
    outputs = model(ids, labels=labels)
    expected = F.cross_entropy(outputs.logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))
    torch.testing.assert_close(outputs.loss, expected, rtol=0, atol=1e-6)


def test_masked_lm_loss_is_the_unshifted_cross_entropy_on_labelled_tokens():
    model = lm_model("encoder")
    ids = random_ids(2, 8)
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[1, 6] = 7, 8, 9
    outputs = model(ids, labels=labels)
    expected = F.cross_entropy(outputs.logits.reshape(-1, VOCAB), labels.reshape(-1))
    torch.testing.assert_close(outputs.loss, expected, rtol=0, atol=1e-6)


def test_seq2seq_loss_teacher_forces_the_labels_shifted_right():
    model = lm_model("seq2seq")
    source, labels = random_ids(2, 8), random_ids(2, 5, seed=3)
    labels[1, 3:] = -100
    outputs = model(source, labels=labels)
    decoder_input_ids = torch.cat((torch.zeros(2, 1, dtype=torch.long), labels[:, :-1]), dim=1).clamp(min=0)
    assert torch.equal(shift_tokens_right(labels, 0, 0), decoder_input_ids)
    logits = model(source, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(outputs.logits, logits, rtol=0, atol=0)
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
    torch.testing.assert_close(outputs.loss, expected, rtol=0, atol=1e-6)


def _token_targets(ids):
    labels = ids.clone()
    labels[0, :2] = -100
    return labels


@pytest.mark.parametrize(
    ("model_factory", "make_inputs", "summed_loss"),
    [
        (
            lambda: lm_model("decoder"),
            lambda ids: {"input_ids": ids, "labels": _token_targets(ids)},
            lambda out, inp: F.cross_entropy(
                out.logits[:, :-1].reshape(-1, VOCAB), inp["labels"][:, 1:].reshape(-1), reduction="sum"
            ),
        ),
        (
            lambda: lm_model("encoder"),
            lambda ids: {"input_ids": ids, "labels": _token_targets(ids)},
            lambda out, inp: F.cross_entropy(
                out.logits.reshape(-1, VOCAB), inp["labels"].reshape(-1), reduction="sum"
            ),
        ),
        (
            lambda: lm_model("seq2seq"),
            lambda ids: {"input_ids": ids, "labels": _token_targets(ids)},
            lambda out, inp: F.cross_entropy(
                out.logits.reshape(-1, VOCAB), inp["labels"].reshape(-1), reduction="sum"
            ),
        ),
        (
            lambda: aiayn.AiaynEncoderForTokenClassification(tiny_config("encoder", num_labels=3)),
            lambda ids: {"input_ids": ids, "labels": (ids % 3).masked_fill(ids > 60, -100)},
            lambda out, inp: F.cross_entropy(out.logits.reshape(-1, 3), inp["labels"].reshape(-1), reduction="sum"),
        ),
        (
            lambda: aiayn.AiaynDecoderForSequenceClassification(tiny_config("decoder", num_labels=3)),
            lambda ids: {"input_ids": ids, "labels": torch.tensor([0, 2])},
            lambda out, inp: F.cross_entropy(out.logits, inp["labels"], reduction="sum"),
        ),
        (
            lambda: aiayn.AiaynEncoderForSequenceClassification(tiny_config("encoder", num_labels=1)),
            lambda ids: {"input_ids": ids, "labels": torch.tensor([0.5, -1.0])},
            lambda out, inp: F.mse_loss(out.logits.squeeze(-1), inp["labels"], reduction="sum"),
        ),
        (
            lambda: aiayn.AiaynSeq2SeqForSequenceClassification(
                tiny_config("seq2seq", num_labels=3, problem_type="multi_label_classification")
            ),
            lambda ids: {"input_ids": ids, "labels": torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])},
            lambda out, inp: F.binary_cross_entropy_with_logits(out.logits, inp["labels"], reduction="sum"),
        ),
        (
            lambda: aiayn.AiaynEncoderForMultipleChoice(tiny_config("encoder")),
            lambda ids: {"input_ids": ids.view(2, 2, 4), "labels": torch.tensor([1, 0])},
            lambda out, inp: F.cross_entropy(out.logits, inp["labels"], reduction="sum"),
        ),
    ],
)
def test_losses_divide_by_num_items_in_batch(model_factory, make_inputs, summed_loss):
    """With gradient accumulation the Trainer passes the number of labelled items of the whole accumulated batch;
    every head must return sum / num_items_in_batch, or the accumulated gradient is off by that ratio."""
    torch.manual_seed(0)
    model = model_factory().eval()
    inputs = make_inputs(random_ids(2, 8))
    outputs = model(**inputs, num_items_in_batch=torch.tensor(23))
    torch.testing.assert_close(outputs.loss, summed_loss(outputs, inputs) / 23, rtol=1e-6, atol=1e-7)


def loss_and_gradients(model, inputs: dict, **kwargs) -> dict[str, torch.Tensor]:
    """The loss and every parameter's gradient of one backward pass, with the model's other outputs."""
    model.zero_grad(set_to_none=True)
    outputs = model(**inputs, **kwargs)
    outputs.loss.backward()
    return outputs, {"loss": outputs.loss.detach(), **{k: p.grad for k, p in model.named_parameters()}}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("use_bias", [False, True])
def test_the_loss_without_logits_is_the_loss_over_the_logits(family, use_bias):
    """Training with labels skips the logits by default: the loss is computed a few rows at a time from the hidden
    states (only the labelled rows in eager mode), with the same value and gradients as over the logits, for the
    mean and for the Trainer's `num_items_in_batch`."""
    model = lm_model(family, use_bias=use_bias, tie_word_embeddings=not use_bias).train()
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, ::3] = -100
    inputs = lm_inputs(family, ids, mask) | {"labels": labels}
    for extra in ({}, {"num_items_in_batch": torch.tensor(29)}):
        outputs, fused = loss_and_gradients(model, inputs, **extra)
        assert outputs.logits is None
        outputs, reference = loss_and_gradients(model, inputs, skip_logits=False, **extra)
        assert outputs.logits.shape == (*ids.shape, VOCAB)
        torch.testing.assert_close(fused, reference, rtol=1e-5, atol=5e-7)
        with torch.no_grad():  # as the Trainer evaluates with Liger-Kernel: the loss alone
            torch.testing.assert_close(model(**inputs, **extra).loss, reference["loss"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("chunk_rows", [1, 4, 64])
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_linear_cross_entropy_in_chunks(chunk_rows, autocast, smoothing):
    """The chunked loss and its gradients equal cross-entropy over the full logits, with and without label smoothing,
    whatever the chunk (one row, some rows, all rows), ignored rows included; under bfloat16 autocast the products run
    in bfloat16 as they would over the logits, and the gradients come back in the parameters' dtype."""
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(13, 16, generator=generator, requires_grad=True)
    projection = torch.nn.Linear(16, 40)
    labels = torch.randint(0, 40, (13,), generator=generator)
    labels[[2, 7]] = -100
    results = {}
    for name in ("chunked", "reference"):
        hidden.grad = projection.weight.grad = projection.bias.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if name == "chunked":
                args = (hidden, projection.weight, projection.bias, labels, -100, smoothing, chunk_rows, True)
                loss = LinearCrossEntropy.apply(*args)
            else:
                logits = projection(hidden).float()
                loss = F.cross_entropy(logits, labels, reduction="sum", label_smoothing=smoothing)
        loss.backward()
        results[name] = [loss, hidden.grad, projection.weight.grad, projection.bias.grad]
    assert [grad.dtype for grad in results["chunked"][1:]] == [torch.float32] * 3
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if autocast else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(results["chunked"], results["reference"], **tolerance)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("skip_logits", [None, False])
def test_label_smoothing_in_the_model_is_the_trainers(family, skip_logits, tmp_path):
    """`config.label_smoothing` gives, in training, the loss and gradients of the Trainer's `label_smoothing_factor`
    (transformers' `LabelSmoother` over the full logits, the causal LM's labels shifted), computed without the logits
    (`skip_logits` None) or over them (False), for the mean and for the Trainer's `num_items_in_batch`; in evaluation
    the loss is the plain cross-entropy."""
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, ::3] = -100
    inputs = lm_inputs(family, ids, mask) | {"labels": labels}
    smoothed, reference = lm_model(family, label_smoothing=0.1).train(), lm_model(family).train()
    with torch.no_grad():  # confident predictions, whose smoothed loss is far from the plain one
        smoothed.get_output_embeddings().weight.mul_(8)
    reference.load_state_dict(smoothed.state_dict())
    args = transformers.TrainingArguments(str(tmp_path), report_to="none", use_cpu=True, label_smoothing_factor=0.1)
    trainer = transformers.Trainer(model=reference, args=args)
    losses = []
    for count in (None, torch.tensor(29)):
        extra = {} if count is None else {"num_items_in_batch": count}
        outputs, in_model = loss_and_gradients(smoothed, inputs, skip_logits=skip_logits, **extra)
        assert (outputs.logits is None) == (skip_logits is None)
        reference.zero_grad(set_to_none=True)
        loss = trainer.compute_loss(reference, dict(inputs), num_items_in_batch=count)
        loss.backward()
        by_trainer = {"loss": loss.detach(), **{k: p.grad for k, p in reference.named_parameters()}}
        torch.testing.assert_close(in_model, by_trainer, rtol=1e-5, atol=5e-7)
        losses.append(in_model["loss"])
    with torch.no_grad():
        evaluated, plain = smoothed.eval()(**inputs).loss, reference.eval()(**inputs).loss
    torch.testing.assert_close(evaluated, plain, rtol=0, atol=0)
    assert not torch.isclose(evaluated, losses[0], rtol=1e-3)  # smoothing moves the loss by 0.29% (decoder) or more


def test_the_loss_without_logits_calls_an_adapted_projection():
    """A projection with a hook (an adapter, accelerate's offloading) is called rather than read as a matrix."""
    model = lm_model("decoder").train()
    ids = random_ids(2, 8)
    model.lm_head.register_forward_hook(lambda module, inputs, output: output * 2)
    _, fused = loss_and_gradients(model, {"input_ids": ids, "labels": ids})
    _, reference = loss_and_gradients(model, {"input_ids": ids, "labels": ids}, skip_logits=False)
    torch.testing.assert_close(fused, reference, rtol=1e-6, atol=1e-7)


def test_the_loss_without_logits_backpropagates_once():
    """Its gradients are computed in the forward and handed over in place: a second backward is refused by name."""
    model = lm_model("decoder").train()
    ids = random_ids(2, 8)
    loss = model(ids, labels=ids).loss
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backpropagated once"):
        loss.backward()


def test_logits_are_returned_unless_training_with_labels_or_skipped():
    model = lm_model("decoder")
    ids = random_ids(2, 8)
    assert model(ids, labels=ids).logits is not None  # evaluation
    assert model.train()(ids).logits is not None  # no labels
    assert model(ids, labels=ids).logits is None
    assert model(ids, labels=ids, skip_logits=False).logits is not None
    assert model.eval()(ids, labels=ids, skip_logits=True).logits is None  # as the Trainer asks with Liger-Kernel
    with pytest.raises(ValueError, match="skip_logits=True .* no labels were given"):
        model(ids, skip_logits=True)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("position", POSITION_TYPES)
def test_eager_and_sdpa_agree_with_padding(family, position):
    """At every position, padding included (queries that may see no key attend to nothing on both)."""
    ids, mask = padded_batch()
    logits = {}
    for implementation in ("eager", "sdpa"):
        model = lm_model(family, implementation, position_embedding_type=position)
        with torch.no_grad():
            logits[implementation] = model(**lm_inputs(family, ids, mask)).logits
    torch.testing.assert_close(logits["eager"], logits["sdpa"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
@pytest.mark.parametrize("position", POSITION_TYPES)
def test_a_changed_future_token_leaves_earlier_decoder_outputs_unchanged(family, position):
    model = lm_model(family, position_embedding_type=position)
    ids = random_ids(2, 9)
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % VOCAB
    with torch.no_grad():
        if family == "seq2seq":
            before = model(ids, decoder_input_ids=ids).logits
            after = model(ids, decoder_input_ids=changed).logits
        else:
            before, after = model(ids).logits, model(changed).logits
    torch.testing.assert_close(before[:, :6], after[:, :6], rtol=0, atol=1e-6)
    assert (before[:, 6:] - after[:, 6:]).abs().max() > 1e-3


@pytest.mark.parametrize("position", POSITION_TYPES)
def test_the_encoder_sees_both_directions(position):
    model = lm_model("encoder", position_embedding_type=position, initializer_range=0.2)
    ids = random_ids(2, 9)
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(ids).logits, model(changed).logits
    assert (before[:, :6] - after[:, :6]).abs().amax(dim=(1, 2)).min() > 1e-3


@pytest.mark.parametrize("position", POSITION_TYPES)
def test_seq2seq_decoder_sees_the_whole_source(position):
    model = lm_model("seq2seq", position_embedding_type=position, initializer_range=0.2)
    source, target = random_ids(2, 9), random_ids(2, 4, seed=3)
    changed = source.clone()
    changed[:, -1] = (changed[:, -1] + 1) % VOCAB
    with torch.no_grad():
        before = model(source, decoder_input_ids=target).logits
        after = model(changed, decoder_input_ids=target).logits
    assert (before[:, 0] - after[:, 0]).abs().amax(dim=-1).min() > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("position", POSITION_TYPES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_leaves_real_positions_unchanged(family, position, side):
    """A padded row gives, at its real tokens, what the unpadded sequence gives alone: pads are masked and, with a
    2D attention mask, positions count real tokens only."""
    model = lm_model(family, position_embedding_type=position)
    ids = random_ids(1, 6)
    pad = torch.zeros(1, 3, dtype=torch.long)
    padded = torch.cat((ids, pad), dim=1) if side == "right" else torch.cat((pad, ids), dim=1)
    mask = (padded != 0).long() if side == "right" else torch.cat((pad, torch.ones_like(ids)), dim=1)
    real = mask.bool()[0]
    with torch.no_grad():
        alone = model(**lm_inputs(family, ids)).logits[0]
        in_batch = model(**lm_inputs(family, padded, mask)).logits[0]
    torch.testing.assert_close(in_batch[real], alone, rtol=0, atol=1e-5)


def test_sinusoidal_encoding_is_the_papers_formula():
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), section 3.5."""
    d_model, positions = 512, torch.arange(2048)
    encoding = AiaynSinusoidalPositionEmbedding(d_model)(positions[None])[0].double()
    angles = positions[:, None].double() / 10000 ** (torch.arange(0, d_model, 2).double() / d_model)
    expected = torch.empty(len(positions), d_model, dtype=torch.float64)
    expected[:, 0::2], expected[:, 1::2] = angles.sin(), angles.cos()
    # float32 rounds each angle pos * freq to within 2 * pos * 2^-24, and sin / cos add half a float32 ulp of 1.
    bound = 2 * positions.double()[:, None] * 2**-24 + 2**-24
    assert ((encoding - expected).abs() <= bound).all()


def test_sinusoidal_encoding_survives_from_pretrained(tmp_folder):
    model = lm_model("seq2seq", position_embedding_type="sinusoidal")
    model.save_pretrained(tmp_folder)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_folder)
    for stack in (loaded.model.encoder, loaded.model.decoder):
        table = stack.embeddings.position_embeddings
        torch.testing.assert_close(table.inv_freq, inverse_frequencies(32, 10000.0), rtol=0, atol=0)
        torch.testing.assert_close(
            table(torch.arange(64)[None]), AiaynSinusoidalPositionEmbedding(32)(torch.arange(64)[None])
        )


def test_rotary_scores_depend_only_on_relative_position():
    config = tiny_config("decoder", position_embedding_type="rotary")
    rotary = AiaynRotaryEmbedding(config)
    query, key = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(query_position, key_position):
        cos_q, sin_q = rotary(torch.tensor([[query_position]]), torch.float32)
        cos_k, sin_k = rotary(torch.tensor([[key_position]]), torch.float32)
        return (apply_rotary(query, cos_q, sin_q) * apply_rotary(key, cos_k, sin_k)).sum()

    torch.testing.assert_close(score(3, 1), score(40, 38), rtol=0, atol=1e-5)
    assert (score(3, 1) - score(3, 2)).abs() > 1e-4


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_buckets_are_t5s(bidirectional):
    relative = torch.arange(-300, 300)[None, :] - torch.arange(0, 40)[:, None]
    expected = T5Attention._relative_position_bucket(relative, bidirectional, 32, 128)
    assert torch.equal(relative_position_bucket(relative, bidirectional, 32, 128), expected)


def test_relative_bias_is_one_table_per_stack_shared_by_its_layers():
    model = lm_model("seq2seq", position_embedding_type="relative")
    tables = [name for name, _ in model.named_parameters() if "relative_position_bias" in name]
    assert tables == [
        "model.encoder.relative_position_bias.embedding.weight",
        "model.decoder.relative_position_bias.embedding.weight",
    ]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("autocast", [False, True])
def test_attention_masks_reach_sdpa_laid_out_for_its_fused_kernels(family, autocast, monkeypatch):
    """The masks sdpa receives, the relative bias folded in, are contiguous (batch, heads, queries, keys) tensors in
    the dtype the attention computes in (bfloat16 under autocast), or boolean: a mask laid out otherwise (heads
    innermost, as the bias table's rows are) or of another dtype sends GPUs' sdpa to its slow math path."""
    sdpa = transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS["sdpa"]
    received = []

    def recording_sdpa(module, query, key, value, attention_mask, **kwargs):
        received.append((query.dtype, attention_mask))
        return sdpa(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS, "sdpa", recording_sdpa)
    model = lm_model(family, position_embedding_type="relative")
    ids, mask = padded_batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(**lm_inputs(family, ids, mask))
    biased = [mask for _, mask in received if mask is not None and mask.shape[1] == model.config.num_heads]
    config = model.config
    assert len(biased) == config.num_layers + (config.num_decoder_layers if family == "seq2seq" else 0)
    for query_dtype, mask in received:
        if mask is not None:
            assert mask.is_contiguous() and mask.dtype in (query_dtype, torch.bool)
    assert all(mask.dtype == (torch.bfloat16 if autocast else torch.float32) for mask in biased)


@pytest.mark.parametrize("scale_attention", [True, False])
def test_attention_is_equation_1(scale_attention):
    """softmax(Q K^T / sqrt(d_k) + M) V, with the heads concatenated and projected by W^O (section 3.2)."""
    config = tiny_config("decoder", scale_attention=scale_attention, attn_implementation="eager")
    attention = AiaynSelfAttention(config, layer_idx=0, is_causal=True, score=DotProductScore(config)).eval()
    x = torch.randn(2, 5, 32)
    mask = torch.triu(torch.full((5, 5), torch.finfo(torch.float32).min), diagonal=1)
    output, weights = attention(x, AttentionInputs(MaskedAttention(mask[None, None])))

    q, k, v = attention.qkv_proj(x).split(32, dim=-1)
    heads = [slice(h * 8, (h + 1) * 8) for h in range(4)]
    scale = 1 / math.sqrt(8) if scale_attention else 1.0
    probabilities = [torch.softmax(q[..., s] @ k[..., s].transpose(1, 2) * scale + mask, dim=-1) for s in heads]
    concatenated = torch.cat([p @ v[..., s] for p, s in zip(probabilities, heads, strict=True)], dim=-1)
    torch.testing.assert_close(output, attention.o_proj(concatenated), rtol=0, atol=1e-6)
    torch.testing.assert_close(weights, torch.stack(probabilities, dim=1), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("hidden_act", "activation"),
    [
        ("relu", F.relu),
        ("gelu", F.gelu),
        ("gelu_new", lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
        ("gelu_pytorch_tanh", lambda x: F.gelu(x, approximate="tanh")),
        ("silu", F.silu),
    ],
)
def test_feed_forward_is_equation_2(hidden_act, activation):
    plain = AiaynFeedForward(tiny_config("encoder", hidden_act=hidden_act))
    gated = AiaynFeedForward(tiny_config("encoder", hidden_act=f"gated-{hidden_act}"))
    x = torch.randn(2, 5, 32)
    expected = plain.down_proj(activation(plain.up_proj(x)))
    torch.testing.assert_close(plain(x), expected, rtol=0, atol=1e-6)
    expected_gated = gated.down_proj(activation(gated.gate_proj(x)) * gated.up_proj(x))
    torch.testing.assert_close(gated(x), expected_gated, rtol=0, atol=1e-6)
    assert plain.gate_proj is None


@pytest.mark.parametrize("alias", ["geglu", "swiglu", "reglu"])
def test_gated_aliases(alias):
    assert AiaynFeedForward(tiny_config("encoder", hidden_act=alias)).gate_proj is not None


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_residual_and_norm_placement(norm_first, norm_type):
    """Post-LN: Norm(x + Sublayer(x)) (section 3.1); pre-LN: x + Sublayer(Norm(x))."""
    config = tiny_config("encoder", norm_first=norm_first, norm_type=norm_type)
    layer = AiaynLayer(config, layer_idx=0, is_causal=False, has_cross_attention=False).eval()
    for norm in (layer.self_attn_norm, layer.ffn_norm):
        torch.nn.init.normal_(norm.weight)
    x = torch.randn(2, 5, 32)

    def sublayer_block(h, sublayer, norm):
        return h + sublayer(norm(h)) if norm_first else norm(h + sublayer(h))

    h = sublayer_block(x, lambda h: layer.self_attn(h)[0], layer.self_attn_norm)
    h = sublayer_block(h, layer.ffn, layer.ffn_norm)
    torch.testing.assert_close(layer(x), h, rtol=0, atol=0)


def test_rmsnorm_has_no_mean_and_no_bias():
    norm = aiayn.modeling_aiayn.AiaynRMSNorm(32, eps=1e-6)
    x = torch.randn(3, 32) + 5
    torch.testing.assert_close(norm(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = lm_model("seq2seq", position_embedding_type="none")
    embeddings = model.model.encoder.embeddings
    ids = random_ids(1, 4)
    torch.testing.assert_close(
        embeddings(ids, None, torch.arange(4)[None]), model.model.shared(ids) * math.sqrt(32), rtol=0, atol=0
    )


def test_seq2seq_shares_one_embedding_three_ways():
    model = lm_model("seq2seq")
    stacks = (model.model.encoder, model.model.decoder)
    shared = model.get_input_embeddings().weight
    assert all(stack.get_input_embeddings().weight is shared for stack in stacks)
    assert model.lm_head.weight is shared
    untied = lm_model("seq2seq", tie_word_embeddings=False)
    shared = untied.get_input_embeddings().weight
    assert all(stack.get_input_embeddings().weight is shared for stack in (untied.model.encoder, untied.model.decoder))
    assert untied.lm_head.weight is not shared


@pytest.mark.parametrize("family", FAMILIES)
def test_output_attentions_hidden_states_and_cross_attentions(family):
    model = lm_model(family, "eager")
    ids, mask = padded_batch(length=7)
    outputs = model(**lm_inputs(family, ids, mask), output_attentions=True, output_hidden_states=True)
    if family == "seq2seq":
        stacks = [
            (outputs.encoder_hidden_states, outputs.encoder_attentions, 2),
            (outputs.decoder_hidden_states, outputs.decoder_attentions, 3),
        ]
        assert len(outputs.cross_attentions) == 3
        assert outputs.cross_attentions[0].shape == (3, 4, 7, 7)
    else:
        stacks = [(outputs.hidden_states, outputs.attentions, 2)]
    for hidden_states, attentions, num_layers in stacks:
        assert len(hidden_states) == num_layers + 1 and len(attentions) == num_layers
        assert hidden_states[0].shape == (3, 7, 32) and attentions[0].shape == (3, 4, 7, 7)
        real_rows = attentions[-1][mask.bool()[:, None, :].expand(3, 4, 7)]
        torch.testing.assert_close(real_rows.sum(-1), torch.ones(real_rows.shape[0]))


def test_sdpa_returns_no_attention_weights():
    outputs = lm_model("decoder", "sdpa")(random_ids(1, 5), output_attentions=True)
    assert outputs.attentions == ()


def test_return_dict_false_gives_tuples():
    logits = lm_model("decoder")(random_ids(1, 5), return_dict=False)[0]
    assert logits.shape == (1, 5, VOCAB)


@pytest.mark.parametrize("family", FAMILIES)
def test_activation_checkpointing_gives_the_same_gradients(family):
    ids, mask = padded_batch()
    inputs = lm_inputs(family, ids, mask)
    inputs["labels"] = ids.masked_fill(mask == 0, -100)
    gradients = []
    for checkpointing in (False, True):
        model = lm_model(family).train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        model(**inputs).loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters()})
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tie", [True, False])
def test_resize_token_embeddings_keeps_ties(family, tie):
    model = lm_model(family, tie_word_embeddings=tie)
    model.resize_token_embeddings(VOCAB + 8)
    embeddings, head = model.get_input_embeddings(), model.get_output_embeddings()
    assert embeddings.weight.shape[0] == head.weight.shape[0] == model.config.vocab_size == VOCAB + 8
    assert (head.weight is embeddings.weight) == tie
    if family == "seq2seq":
        assert model.model.encoder.get_input_embeddings() is embeddings is model.model.decoder.get_input_embeddings()
    ids = torch.tensor([[VOCAB + 7, 5, 6]])
    assert model(**lm_inputs(family, ids)).logits.shape == (1, 3, VOCAB + 8)


def test_flash_attention_is_refused_with_a_relative_bias():
    with pytest.raises(ValueError, match="relative position bias"):
        lm_model("seq2seq", "flash_attention_2", position_embedding_type="relative")


@pytest.mark.parametrize("family", FAMILIES)
def test_device_map_auto_in_bfloat16(family, tmp_folder):
    lm_model(family).save_pretrained(tmp_folder)
    model = transformers.AutoModel.from_pretrained(tmp_folder, device_map="auto", dtype=torch.bfloat16)
    ids, mask = padded_batch()
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = ids
    with torch.no_grad():
        hidden = model(**inputs).last_hidden_state
    assert hidden.dtype == torch.bfloat16 and torch.isfinite(hidden).all()
    assert model._no_split_modules == {"AiaynLayer"} or list(model._no_split_modules) == ["AiaynLayer"]


@pytest.mark.parametrize(
    ("family", "position"), [("decoder", "relative"), ("seq2seq", "relative"), ("seq2seq", "rotary")]
)
def test_flex_attention_agrees_with_eager(family, position):
    """Flex attention takes block masks and the relative bias as a score modification (compiled on first use)."""
    ids, mask = padded_batch()
    logits = {}
    for implementation in ("eager", "flex_attention"):
        model = lm_model(family, implementation, position_embedding_type=position)
        with torch.no_grad():
            logits[implementation] = model(**lm_inputs(family, ids, mask)).logits
    real = mask.bool()
    torch.testing.assert_close(logits["flex_attention"][real], logits["eager"][real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        ("encoder", {}),
        ("decoder", {}),
        ("seq2seq", {}),
        ("encoder", {"sliding_window": 2}),  # bands, whose masks hold the relative bias
        ("seq2seq", {"position_embedding_type": "rotary"}),
    ],
)
def test_gradient_checkpointing_gives_the_gradients_of_the_plain_backward(family, overrides, reentrant):
    """T5's `gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})`: the relative bias,
    computed once for every layer, reaches each checkpointed layer positionally, so the recomputed layers
    backpropagate into it once each; the gradients are those of the plain backward, bit for bit."""
    overrides = {"position_embedding_type": "relative", **overrides}
    ids, mask = padded_batch(length=12)
    gradients = []
    for checkpointing in (False, True):
        model = lm_model(family, **overrides).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        model(**lm_inputs(family, ids, mask), labels=ids, use_cache=False).loss.backward()
        gradients.append({name: parameter.grad for name, parameter in model.named_parameters()})
    assert all(gradient is not None for gradient in gradients[0].values())
    torch.testing.assert_close(gradients[1], gradients[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        ("encoder", {"linformer_k": 16, "position_embedding_type": "learned"}),
        ("decoder", {"attention_score": "additive", "position_embedding_type": "relative"}),
        ("seq2seq", {"position_embedding_type": "relative", "hidden_act": "swiglu", "norm_type": "rmsnorm"}),
    ],
)
def test_every_parameter_starts_with_the_statistics_its_docstring_states(family, overrides):
    """Projections, tables and the additive score's `v` from N(0, initializer_range) (transformers' `_init_weights`,
    `AdditiveScore.initialize_parameters`), scaled token tables from N(0, d_model^-0.5), Linformer's maps from
    N(0, (linformer_k + max_position_embeddings)^-0.5) (`LinformerAttention.initialize_parameters`), biases at zero,
    norms at one: each sample's mean and standard deviation within four standard errors of the stated ones."""
    d_model, std = 128, 0.05
    relative = {"relative_attention_num_buckets": 64} if overrides["position_embedding_type"] == "relative" else {}
    config = tiny_config(family, d_model=d_model, num_heads=4, d_ff=256, vocab_size=512, initializer_range=std,
                         max_position_embeddings=128, **relative, **overrides)  # fmt: skip
    torch.manual_seed(0)
    model = LM_AUTO_CLASS[family].from_config(config)
    stated = {}
    for name, _ in model.named_parameters():
        if name.endswith(".bias"):
            stated[name] = (0.0, 0.0)
        elif "norm" in name:
            stated[name] = (1.0, 0.0)
        elif config.scale_embedding and ("embed_tokens" in name or name.endswith("shared.weight")):
            stated[name] = (0.0, d_model**-0.5)
        elif "projections" in name:
            stated[name] = (0.0, (16 + 128) ** -0.5)
        else:
            stated[name] = (0.0, std)
    for name, parameter in model.named_parameters():
        mean, deviation = stated[name]
        values = parameter.detach().double()
        if deviation == 0.0:
            assert bool((values == mean).all()), name
            continue
        n = values.numel()
        assert abs(values.mean().item()) < 4 * deviation / n**0.5, (name, values.mean().item())
        assert abs(values.std().item() / deviation - 1) < 4 / (2 * n) ** 0.5, (name, values.std().item(), deviation)
