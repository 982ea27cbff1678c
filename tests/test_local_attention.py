"""Local attention: `sliding_window` with transformers' semantics in every family and on every backend, global tokens,
the banded computation that makes long sequences cost linearly, and decoding with sliding-window caches."""

import math
import subprocess
import sys
from dataclasses import replace
from unittest import mock

import datasets
import onnx
import onnxruntime
import pytest
import torch
import transformers
from helpers import POSITION_TYPES, VOCAB, hub_loading_environment, lm_model, one_layer, random_ids, tiny_config
from torch.export import Dim
from torch.nn.attention.flex_attention import BlockMask

from aiayn.attention_aiayn import AiaynSelfAttention, AttentionPatternInputs, DotProductScore
from aiayn.local_attention_aiayn import BandedAttention, BandGeometry, SlidingWindowAttention
from aiayn.positions_aiayn import AiaynRelativePositionBias

WINDOW = 8
# Long enough for the bands: blocks of 32 queries against 96 keys (bidirectional) or 64 (causal); 230 % 32 = 6.
LONG = 230
GENERATING = ("decoder", "seq2seq")


def windowed(family: str, implementation: str = "sdpa", **overrides):
    """A tiny language model of `family` with a window of 8 and positions for 256 tokens."""
    fields = {"position_embedding_type": "sinusoidal", "max_position_embeddings": 256, "sliding_window": WINDOW}
    return lm_model(family, implementation, **{**fields, **overrides})


def padded(length: int = LONG, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows: one whole, one padded (on the left for causal models, as generation pads, else on the right)."""
    ids, mask = random_ids(2, length), torch.ones(2, length, dtype=torch.long)
    if causal:
        mask[1, :37] = 0
    else:
        mask[1, length - 45 :] = 0
    return ids.masked_fill(mask == 0, 0), mask


def global_tokens(length: int = LONG) -> torch.Tensor:
    """The first token of both rows, one more in the first and two more in the second: rows with different numbers
    of global tokens, whose shorter lists the banded computation fills with slots that are not global."""
    marks = torch.zeros(2, length, dtype=torch.long)
    marks[:, 0], marks[0, 77], marks[1, 60], marks[1, length - 70] = 1, 1, 1, 1
    return marks


def model_inputs(family: str, ids: torch.Tensor, mask: torch.Tensor, marks: torch.Tensor | None = None) -> dict:
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family == "seq2seq":
        inputs.update(decoder_input_ids=ids, decoder_attention_mask=mask)
    if marks is not None:
        inputs["global_attention_mask"] = marks
    return inputs


def counting_bands():
    """A patch that counts the calls of `BandedAttention.attend` (one per layer that attends block by block)."""
    return mock.patch.object(BandedAttention, "attend", autospec=True, side_effect=BandedAttention.attend)


def test_sliding_window_is_off_by_default_and_saved(tmp_path):
    assert all(tiny_config(family).sliding_window is None for family in ("encoder", "decoder", "seq2seq"))
    config = tiny_config("decoder", sliding_window=WINDOW)
    config.save_pretrained(tmp_path)
    assert transformers.AutoConfig.from_pretrained(tmp_path).sliding_window == WINDOW


def reference_attention(query, key, value, is_causal, padding, marks, bias):
    """Attention through a dense mask written from the definitions, independently of the code under test: a key is
    allowed when it is real and within the window (`0 <= query - key < WINDOW` causal, `|query - key| <= WINDOW`
    bidirectional), or when the query or the key is a global token; queries with no allowed key get zero output.
    Returns `(batch, length, heads, d)`."""
    batch, _, length, _ = query.shape
    distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]  # query minus key
    window = (distance >= 0) & (distance < WINDOW) if is_causal else distance.abs() <= WINDOW
    allowed = window[None].expand(batch, -1, -1)
    if marks is not None:
        is_global = marks.bool()
        allowed = allowed | is_global[:, :, None] | is_global[:, None, :]
    if padding is not None:
        allowed = allowed & padding.bool()[:, None, :]
    scores = query @ key.transpose(-1, -2)  # scale 1.0
    if bias is not None:
        scores = scores + bias(-distance)[None]
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    fully_masked = ~allowed.any(-1)[:, None, :, None]
    weights = torch.softmax(scores.masked_fill(fully_masked, 0.0), dim=-1)
    output = (weights @ value).masked_fill(fully_masked, 0.0)
    return output.transpose(1, 2)


@pytest.mark.parametrize("length", [LONG, 192])
@pytest.mark.parametrize(
    ("is_causal", "padding", "marks", "relative"),
    [
        (False, False, False, False),
        (False, True, False, False),
        (False, False, False, True),
        (False, True, True, False),
        (False, True, True, True),
        (True, False, False, False),
        (True, True, False, False),
        (True, True, False, True),
    ],
    ids=[
        "bidirectional",
        "bidirectional-padded",
        "bidirectional-relative",
        "bidirectional-padded-global",
        "bidirectional-padded-global-relative",
        "causal",
        "causal-padded",
        "causal-padded-relative",
    ],
)
def test_banded_and_masked_attention_are_attention_through_a_dense_mask_from_the_definitions(
    length, is_causal, padding, marks, relative
):
    """Block by block, with the blocks at the ends recomputed (no padding, no global tokens) or one mask per block,
    and through transformers' sliding-window mask: the output of attention through the dense mask
    `reference_attention` writes from distances, padding, global tokens (different numbers per row), the position
    bias and the fully masked queries (an all-padding stretch longer than the window) included."""
    torch.manual_seed(0)
    config = tiny_config("encoder", sliding_window=WINDOW)
    config._attn_implementation = "sdpa"
    query, key, value = torch.randn(3, 2, 4, length, 8).unbind(0)
    mask = padded(length, is_causal)[1] if padding else None
    global_marks = global_tokens(length) if marks else None
    bias = AiaynRelativePositionBias(tiny_config("encoder", position_embedding_type="relative"), not is_causal)
    bias_of = bias.bias_of if relative else None
    marked = global_marks.bool() if marks else None
    band = BandedAttention(WINDOW, is_causal, 2, length, mask, bias_of, torch.float32, "cpu", global_tokens=marked)
    masked = SlidingWindowAttention(config, is_causal, 1).masked_attention(
        AttentionPatternInputs(torch.zeros(2, length, 32), mask, None, torch.arange(length)[None],
                               bias if relative else None, global_attention_mask=global_marks)
    )  # fmt: skip
    module = AiaynSelfAttention(config, 0, is_causal, DotProductScore(config))
    with torch.no_grad():
        output, weights = band.attend(module, query, key, value, scaling=1.0)
        through_mask = masked.attend(module, query, key, value, scaling=1.0)[0]
        expected = reference_attention(query, key, value, is_causal, mask, global_marks, bias_of)
    assert weights is None
    # Measured at most 1.1e-6 (bands) and 9.5e-7 (mask) over these cases, with outputs up to 3.
    torch.testing.assert_close(output, expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(through_mask, expected, rtol=0, atol=2e-6)
    assert (band.fully_masked is not None) == (padding and not marks)  # padding queries see the global tokens


@pytest.mark.parametrize("family", ["encoder", "decoder"])
@pytest.mark.parametrize(
    ("implementation", "length"),
    [("eager", 40), ("sdpa", 40), ("sdpa", LONG), ("flex_attention", LONG)],
    ids=["eager", "sdpa-masked", "sdpa-banded", "flex"],
)
def test_a_window_is_exactly_local(family, implementation, length):
    """One layer: a causal position's output keeps its bits when the token `window` positions back (or any later
    one) changes and changes with the token `window - 1` back; a bidirectional position's keeps them when a token
    `window + 1` away changes and changes with one `window` away."""
    model = windowed(family, implementation, num_layers=1)
    ids = random_ids(1, length)
    position = length - 20
    if family == "decoder":
        outside, inside = (position - WINDOW, position + 1), (position - WINDOW + 1,)
    else:
        outside, inside = (position - WINDOW - 1, position + WINDOW + 1), (position - WINDOW, position + WINDOW)
    with torch.no_grad(), counting_bands() as bands:
        expected = model(ids).logits[0, position]
        for changed in outside + inside:
            other = ids.clone()
            other[0, changed] = 3 + (ids[0, changed] - 2) % (VOCAB - 3)
            got = model(other).logits[0, position]
            assert torch.equal(got, expected) == (changed in outside), changed
    assert bands.call_count == (len(outside + inside) + 1 if implementation == "sdpa" and length == LONG else 0)


@pytest.mark.parametrize("family", ["encoder", "decoder", "seq2seq"])
@pytest.mark.parametrize("position", POSITION_TYPES)
def test_banded_models_give_the_masked_models_outputs(family, position):
    """sdpa attends block by block; eager through transformers' sliding-window mask: the same logits, padding and
    (in the encoders) global tokens included."""
    ids, mask = padded(causal=family == "decoder")
    marks = global_tokens() if family != "decoder" else None
    inputs = model_inputs(family, ids, mask, marks)
    logits = {}
    for implementation in ("eager", "sdpa"):
        model = windowed(family, implementation, position_embedding_type=position)
        with torch.no_grad(), counting_bands() as bands:
            logits[implementation] = model(**inputs).logits
        layers = model.config.num_layers + (model.config.num_decoder_layers if family == "seq2seq" else 0)
        assert bands.call_count == (layers if implementation == "sdpa" else 0)
    # Seq2seq logits reach 7; the others stay below 1. Measured at most 1.4e-6 (seq2seq) and 1.8e-7.
    torch.testing.assert_close(logits["sdpa"], logits["eager"], rtol=0, atol=4e-6 if family == "seq2seq" else 5e-7)


@pytest.mark.parametrize("family", ["encoder", "decoder"])
@pytest.mark.parametrize("padding", [False, True], ids=["one-mask", "padded"])
def test_banded_training_gives_the_masked_models_loss_and_gradients(family, padding):
    """Gradients flow through the bands, the relative position bias inside their masks included: with one mask for
    every block (the blocks at the ends computed again), and with a mask per block (padding, global tokens)."""
    ids, mask = padded(causal=family == "decoder")
    if not padding:
        ids, mask = random_ids(2, LONG), None
    marks = global_tokens() if family == "encoder" and padding else None
    labels = ids if mask is None else ids.masked_fill(mask == 0, -100)
    results = {}
    for implementation in ("eager", "sdpa"):
        model = windowed(family, implementation, position_embedding_type="relative").train()
        with counting_bands() as bands:
            loss = model(**model_inputs(family, ids, mask, marks), labels=labels).loss
        loss.backward()
        assert bands.call_count == (model.config.num_layers if implementation == "sdpa" else 0)
        results[implementation] = {"loss": loss.detach(), **{k: p.grad for k, p in model.named_parameters()}}
    torch.testing.assert_close(results["sdpa"], results["eager"], rtol=0, atol=1e-7)  # measured at most 4.1e-8


def test_gradient_checkpointing_recomputes_the_bands_exactly():
    ids = random_ids(2, LONG)
    gradients = []
    for checkpointing in (False, True):
        model = windowed("decoder").train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        model(ids, labels=ids).loss.backward()
        gradients.append({name: parameter.grad for name, parameter in model.named_parameters()})
    torch.testing.assert_close(gradients[1], gradients[0], rtol=0, atol=0)


def test_a_pooled_classifier_reads_the_whole_sequence_through_its_global_first_token():
    """With a window, the first token of a sequence classifier is global by default: its logits change with a token
    far outside the window, unless `global_attention_mask` makes no token global."""
    torch.manual_seed(0)
    config = tiny_config("encoder", sliding_window=WINDOW, num_layers=1, max_position_embeddings=256, num_labels=3)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    ids, mask = padded()
    other = ids.clone()
    other[:, 100] = 3 + (ids[:, 100] - 2) % (VOCAB - 3)
    none_global = torch.zeros_like(ids)
    first_global = none_global.clone()
    first_global[:, 0] = 1
    with torch.no_grad(), counting_bands() as bands:
        default = model(ids, attention_mask=mask).logits
        assert torch.equal(model(ids, attention_mask=mask, global_attention_mask=first_global).logits, default)
        assert not torch.equal(model(other, attention_mask=mask).logits[:, 0], default[:, 0])
        local = model(ids, attention_mask=mask, global_attention_mask=none_global).logits
        assert torch.equal(model(other, attention_mask=mask, global_attention_mask=none_global).logits, local)
    assert bands.call_count == 5


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_global_tokens_attend_to_every_position_and_every_position_to_them(implementation):
    model = windowed("encoder", implementation, num_layers=1)
    ids = random_ids(1, LONG)
    marks = torch.zeros_like(ids)
    marks[0, 75] = 1
    with torch.no_grad():
        expected = model(ids, global_attention_mask=marks).logits
        far_token = ids.clone()
        far_token[0, 140] = 3 + (ids[0, 140] - 2) % (VOCAB - 3)
        changed = model(far_token, global_attention_mask=marks).logits
        global_token = ids.clone()
        global_token[0, 75] = 3 + (ids[0, 75] - 2) % (VOCAB - 3)
        through_global = model(global_token, global_attention_mask=marks).logits
    assert not torch.equal(changed[0, 75], expected[0, 75])  # the global token sees position 140
    assert torch.equal(changed[0, 10], expected[0, 10])  # position 10 does not
    assert not torch.equal(through_global[0, 10], expected[0, 10])  # but it sees the global token


def test_seq2seq_generate_hands_global_tokens_to_the_encoder():
    """`generate()` runs the encoder once with the forward's arguments: global tokens reach it."""
    model = windowed("seq2seq")
    ids, marks = random_ids(2, LONG), global_tokens()
    settings = {"max_new_tokens": 4, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, global_attention_mask=marks)
    through_generate = model.generate(ids, global_attention_mask=marks, **settings)
    from_encoder = model.generate(ids, encoder_outputs=encoded, **settings)
    without = model.generate(ids, **settings)
    torch.testing.assert_close(through_generate.scores, from_encoder.scores, rtol=0, atol=0)
    assert not torch.equal(through_generate.scores[0], without.scores[0])


def test_global_tokens_and_sliding_cross_attention_caches_are_refused_with_clear_errors():
    ids = random_ids(2, 12)
    with pytest.raises(ValueError, match="global_attention_mask marks tokens .* bidirectional"):
        windowed("decoder")(ids, global_attention_mask=torch.ones_like(ids))
    with pytest.raises(ValueError, match=r"global_attention_mask has shape \(2, 5\)"):
        windowed("encoder")(ids, global_attention_mask=torch.ones(2, 5, dtype=torch.long))
    model = windowed("seq2seq")
    sliding = transformers.EncoderDecoderCache(
        transformers.DynamicCache(config=model.config), transformers.DynamicCache(config=model.config)
    )
    with pytest.raises(ValueError, match="cross-attention cache has sliding-window layers"):
        model(ids, decoder_input_ids=ids[:, :3], cache=sliding, use_cache=True)


GREEDY_PAST_THE_WINDOW = {
    "max_new_tokens": 38,
    "min_new_tokens": 38,
    "do_sample": False,
    "output_scores": True,
    "return_dict_in_generate": True,
    "suppress_tokens": [0],
}


@pytest.mark.parametrize("family", GENERATING)
@pytest.mark.parametrize("position", POSITION_TYPES)
@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_cached_greedy_decoding_equals_uncached_far_past_the_window(family, position, cache_implementation):
    """38 tokens after prompts of up to 8 (left-padded for the decoder, right-padded sources), with a window of 8: the
    cached tokens are the uncached ones, their scores agree within 1e-4, the self-attention cache holds at most 8
    keys per layer and the cross-attention cache the whole source."""
    model = windowed(family, position_embedding_type=position)
    ids, mask = random_ids(2, 8, seed=5), torch.ones(2, 8, dtype=torch.long)
    if family == "decoder":
        mask[1, :3] = 0
    else:
        mask[1, 6:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    settings = {"attention_mask": mask, "cache_implementation": cache_implementation, **GREEDY_PAST_THE_WINDOW}
    cached = model.generate(ids, **settings)
    settings.pop("cache_implementation")
    uncached = model.generate(ids, use_cache=False, **settings)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.scores, uncached.scores, rtol=0, atol=1e-4)
    cache = cached.cache.self_attention_cache if family == "seq2seq" else cached.cache
    assert len(cache.layers) == model.config.get_text_config(decoder=True).num_layers
    assert all(layer.keys.shape[-2] <= WINDOW for layer in cache.layers)
    if family == "seq2seq":
        assert all(layer.keys.shape[-2] == ids.shape[1] for layer in cached.cache.cross_attention_cache.layers)


@pytest.mark.parametrize("family", GENERATING)
def test_beam_search_with_a_window_equals_uncached_beam_search(family):
    model = windowed(family)
    ids = random_ids(2, 6, seed=5)
    settings = {"num_beams": 3, "num_return_sequences": 2, **GREEDY_PAST_THE_WINDOW}
    cached, uncached = model.generate(ids, **settings), model.generate(ids, use_cache=False, **settings)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, rtol=1e-6, atol=0)


def test_continuous_batching_with_a_window_gives_generates_tokens():
    """transformers' paged cache keeps each request's window; 30 new tokens run far past it. The prefill packs the 6
    prompts into one sequence of 94 tokens, longer than one sequence needs to be attended in bands: packed requests
    must stay masked from each other."""
    model = windowed("decoder", pad_token_id=0)
    generator = torch.Generator().manual_seed(11)
    lengths = (3, 8, 12, 17, 24, 30)
    prompts = [torch.randint(3, VOCAB, (length,), generator=generator).tolist() for length in lengths]
    assert BandGeometry(WINDOW, is_causal=True).is_cheaper(sum(lengths))
    config = transformers.GenerationConfig(max_new_tokens=30, do_sample=False, eos_token_id=None)
    paged_cache = transformers.ContinuousBatchingConfig(num_blocks=32, page_size=16, max_batch_tokens=128)
    outputs = model.generate_batch(inputs=prompts, generation_config=config, continuous_batching_config=paged_cache)
    batched = [outputs[request].generated_tokens for request in sorted(outputs)]
    alone = [model.generate(torch.tensor([p]), generation_config=config)[0, len(p) :].tolist() for p in prompts]
    assert batched == alone and all(len(tokens) == 30 for tokens in batched)


def test_flex_attention_skips_the_blocks_outside_the_band():
    """The block mask of a window of 16 over 1024 tokens holds, for each block of 128 queries, at most the 3 key
    blocks its window reaches, of 8: the scores of the others are never computed."""
    model = windowed("encoder", "flex_attention", sliding_window=16, max_position_embeddings=1024)
    stack = model.model.encoder
    states = torch.zeros(1, 1024, 32)
    pattern = stack.attention_pattern
    mask = pattern.mask(AttentionPatternInputs(states, position_ids=torch.arange(1024)[None]))
    assert isinstance(mask, BlockMask)
    query_blocks, key_blocks = -(-1024 // mask.BLOCK_SIZE[0]), -(-1024 // mask.BLOCK_SIZE[1])
    computed = int(mask.kv_num_blocks.sum()) + int(mask.full_kv_num_blocks.sum())
    assert computed <= 3 * query_blocks < query_blocks * key_blocks


def test_banded_attention_compiles_and_exports():
    """The bands under `torch.compile` (inductor) and `torch.export` give eager's outputs; global tokens, whose count
    depends on the mask's values, take the masked path when compiled; a program exported for a dynamic length takes
    transformers' mask and serves lengths on both sides of the bands' threshold."""
    model = windowed("encoder", **one_layer("encoder"))
    ids, mask = padded()
    compiled = torch.compile(model, fullgraph=True)
    program = torch.export.export(model, (), kwargs={"input_ids": ids, "attention_mask": mask})
    length = Dim("length", min=2, max=512)
    dynamic = torch.export.export(
        model,
        (),
        kwargs={"input_ids": ids, "attention_mask": mask},
        dynamic_shapes={"input_ids": {1: length}, "attention_mask": {1: length}},
    )
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(program.module()(input_ids=ids, attention_mask=mask).logits, expected)
        with_globals = model(ids, attention_mask=mask, global_attention_mask=global_tokens()).logits
        got = compiled(ids, attention_mask=mask, global_attention_mask=global_tokens()).logits
        torch.testing.assert_close(got, with_globals, rtol=0, atol=1e-5)
        for other_length in (40, LONG, 300):
            other_ids, other_mask = padded(other_length)
            got = dynamic.module()(input_ids=other_ids, attention_mask=other_mask).logits
            torch.testing.assert_close(got, model(other_ids, attention_mask=other_mask).logits, rtol=0, atol=1e-6)


def test_banded_attention_runs_in_onnxruntime():
    """`torch.onnx.export(dynamo=True)` of a windowed encoder at a length the bands serve: onnxruntime on CPU gives
    PyTorch's logits."""
    model = windowed("encoder", **one_layer("encoder"))
    ids, mask = padded()
    inputs = {"input_ids": ids, "attention_mask": mask}
    with counting_bands() as bands:
        exported = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False)
    assert bands.call_count == model.config.num_layers
    onnx.checker.check_model(exported.model_proto, full_check=True)
    session = onnxruntime.InferenceSession(
        exported.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (logits,) = session.run(None, {name: tensor.numpy() for name, tensor in inputs.items()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(logits), model(**inputs).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("quantiser", ["torch.ao", "torchao"])
def test_int8_models_attend_in_bands_with_the_masked_models_outputs(quantiser):
    """Quantisers replace the `nn.Linear` projections only: the int8 model still attends block by block (sdpa), and
    gives the int8 model's logits through transformers' mask (eager) to float32 rounding."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    ids, mask = padded()
    logits = {}
    for implementation in ("eager", "sdpa"):
        model = windowed("encoder", implementation)
        if quantiser == "torch.ao":
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        else:
            quantize_(model, Int8WeightOnlyConfig())
        with torch.no_grad(), counting_bands() as bands:
            logits[implementation] = model(ids, attention_mask=mask).logits
        assert bands.call_count == (model.config.num_layers if implementation == "sdpa" else 0)
    torch.testing.assert_close(logits["sdpa"], logits["eager"], rtol=0, atol=3e-7)  # measured 0.0 and 1.2e-7


def test_the_trainer_hands_global_attention_mask_to_the_model(tmp_path):
    """The Trainer keeps only the columns the model's forward names: `global_attention_mask` is one of them."""
    ids, mask = padded()
    rows = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "global_attention_mask": global_tokens()}
    dataset = datasets.Dataset.from_dict({**rows, "global_attention_mask": rows["global_attention_mask"].tolist()})
    dataset = dataset.add_column("labels", [0, 1])
    config = tiny_config("encoder", sliding_window=WINDOW, max_position_embeddings=256, num_labels=2)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    arguments = transformers.TrainingArguments(tmp_path, per_device_train_batch_size=2, use_cpu=True, report_to=[])
    trainer = transformers.Trainer(model, arguments, train_dataset=dataset)
    batch = next(iter(trainer.get_train_dataloader()))
    assert torch.equal(batch["global_attention_mask"], global_tokens())


CLASSIFIER_LOADER = """
import sys
sys.modules["aiayn"] = None  # aiayn cannot be imported: only the folder's own code can build the model
import torch, transformers

folder = sys.argv[1]
expected = torch.load(folder + "/expected.pt")
model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
with torch.no_grad():
    assert torch.equal(model(**expected["inputs"]).logits, expected["logits"])
print("exact")
"""


def test_a_windowed_classifier_folder_loads_without_aiayn_and_gives_the_same_outputs(tmp_path):
    """The folder carries the local attention's code: the bands and the global first token run where only
    transformers is installed, with the same logits."""
    folder, workdir = tmp_path / "model", tmp_path / "elsewhere"
    workdir.mkdir()
    torch.manual_seed(0)
    config = tiny_config("encoder", sliding_window=WINDOW, max_position_embeddings=256, num_labels=3)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    model.save_pretrained(folder)
    assert (folder / "local_attention_aiayn.py").exists()
    ids, mask = padded()
    inputs = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        torch.save({"inputs": inputs, "logits": model(**inputs).logits}, folder / "expected.pt")
    result = subprocess.run(
        [sys.executable, "-c", CLASSIFIER_LOADER, str(folder)],
        cwd=workdir,
        env=hub_loading_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exact" in result.stdout


def test_the_long_inputs_comparison_trains_the_runs_and_saves_the_windowed_model(tmp_path):
    """`aiayn long-inputs`, smaller than `--quick`: full attention and the window on short blocks and, on long blocks,
    the window and BigBird's random blocks for as many steps and full attention for as long; each scored at both
    lengths; the windowed folder loads with its window."""
    from aiayn.experiments.long_inputs import QUICK, main

    setting = replace(QUICK, short=64, long=512, window=16, tokens_per_step=1024, steps=6, eval_tokens=1024,
                      train_samples=400)  # fmt: skip
    results = main(str(tmp_path), threads=torch.get_num_threads(), setting=setting)
    short, long = f"full-{setting.short}", f"full-{setting.long}"
    window_short, window_long = (f"window-{setting.window}-{length}" for length in (setting.short, setting.long))
    bigbird = f"bigbird-{setting.window}+{setting.random_blocks}-{setting.long}"
    assert list(results) == [short, window_short, window_long, bigbird, long]
    assert {results[name]["steps"] for name in (short, window_short, window_long, bigbird)} == {setting.steps}
    assert results[long]["steps"] >= 1
    uniform = math.log(setting.vocab_size)
    assert all(0 < loss < uniform for result in results.values() for loss in result["eval"].values())
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / window_long)
    assert model.config.sliding_window == setting.window
    assert (tmp_path / "long_inputs.md").read_text().startswith("run")
