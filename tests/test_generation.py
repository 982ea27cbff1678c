"""generate() for the GPT-style and T5-style families: caches, decoding modes and the paper's decoding recipe."""

import json
import os

import pytest
import torch
import transformers
from helpers import POSITION_TYPES, VOCAB, lm_model, prompt_batch, random_ids, word_tokenizer
from huggingface_hub.errors import StrictDataclassError
from transformers import CompileConfig, DynamicCache, EncoderDecoderCache, StaticCache

import aiayn

GENERATING = ("decoder", "seq2seq")
NEW_TOKENS = 8
# Every row generates exactly NEW_TOKENS tokens, so that comparisons cover whole outputs.
FULL_LENGTH = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS}
BEAM = {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.6, "do_sample": False}
GREEDY = {"do_sample": False}
# generate() returning every step's logits besides the tokens, never choosing the pad token 0: the tiny seq2seq
# models would choose it (their start token) at every step, and a decoder input of one repeated token attends to
# identical keys and values wherever the positions put them.
WITH_LOGITS = {"output_logits": True, "output_scores": True, "return_dict_in_generate": True, "suppress_tokens": [0]}
# The largest difference of any step's logits allowed between decoding with and without a cache, and between the
# static and the dynamic cache, about 2.5 times the largest measured over every position type, greedy and beam
# search (decoder: 1.8e-7 and 1.2e-7; seq2seq, whose logits reach 7: 1.9e-6 and 9.5e-7).
CACHED_LOGITS_ATOL = {"decoder": 5e-7, "seq2seq": 5e-6}
STATIC_LOGITS_ATOL = {"decoder": 3e-7, "seq2seq": 2.5e-6}


def new_tokens(family: str, outputs: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """What generate added: decoder-only outputs start with the prompt, seq2seq outputs with the start token."""
    return outputs[:, prompt_length:] if family == "decoder" else outputs[:, 1:]


@pytest.mark.parametrize("family", GENERATING)
@pytest.mark.parametrize("position", POSITION_TYPES)
@pytest.mark.parametrize("mode", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_outputs_are_the_same_with_and_without_cache(family, position, mode):
    """The same tokens, and at every step the same logits (and beam scores) to float32 rounding: a cached step that
    computes positions differently from the full forward changes the logits even where the tokens stay the same."""
    model = lm_model(family, position_embedding_type=position)
    ids, mask = prompt_batch(family)
    cached = model.generate(ids, attention_mask=mask, use_cache=True, **mode, **FULL_LENGTH, **WITH_LOGITS)
    uncached = model.generate(ids, attention_mask=mask, use_cache=False, **mode, **FULL_LENGTH, **WITH_LOGITS)
    assert torch.equal(cached.sequences, uncached.sequences)
    assert len(cached.logits) == len(uncached.logits) == NEW_TOKENS
    torch.testing.assert_close(cached.logits, uncached.logits, rtol=0, atol=CACHED_LOGITS_ATOL[family])
    if "num_beams" in mode:
        # Sums of log-probabilities of up to 10: measured within 1.1e-7 of each other, relatively.
        torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, rtol=3e-7, atol=0)


@pytest.mark.parametrize("family", GENERATING)
@pytest.mark.parametrize("position", POSITION_TYPES)
@pytest.mark.parametrize("mode", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_static_cache_gives_the_dynamic_caches_outputs(family, position, mode):
    model = lm_model(family, position_embedding_type=position)
    ids, mask = prompt_batch(family)
    dynamic = model.generate(ids, attention_mask=mask, **mode, **FULL_LENGTH, **WITH_LOGITS)
    static = model.generate(
        ids, attention_mask=mask, cache_implementation="static", **mode, **FULL_LENGTH, **WITH_LOGITS
    )
    assert torch.equal(static.sequences, dynamic.sequences)
    torch.testing.assert_close(static.logits, dynamic.logits, rtol=0, atol=STATIC_LOGITS_ATOL[family])


@pytest.mark.parametrize("family", GENERATING)
@pytest.mark.parametrize("position", POSITION_TYPES)
@pytest.mark.parametrize("mode", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_a_padded_batch_gives_each_prompts_own_outputs(family, position, mode):
    model = lm_model(family, position_embedding_type=position)
    ids, mask = prompt_batch(family)
    batched = model.generate(ids, attention_mask=mask, **mode, **FULL_LENGTH)
    per_row = mode.get("num_return_sequences", 1)
    for row in range(len(ids)):
        alone = ids[row][mask[row].bool()][None]
        expected = model.generate(alone, **mode, **FULL_LENGTH)
        got = batched[row * per_row : (row + 1) * per_row]
        assert torch.equal(new_tokens(family, got, ids.shape[1]), new_tokens(family, expected, alone.shape[1]))


@pytest.mark.parametrize("position", POSITION_TYPES)
def test_incremental_decoder_logits_equal_full_sequence_logits(position):
    """Prefill with a left-padded prompt, then one token at a time with a growing mask: every step's logits are the
    full forward's logits at that position."""
    model = lm_model("decoder", position_embedding_type=position)
    ids, mask = random_ids(2, 12, seed=6), torch.ones(2, 12, dtype=torch.long)
    mask[1, :4] = 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask).logits
        cache = DynamicCache(config=model.config)
        steps = [model(ids[:, :6], attention_mask=mask[:, :6], cache=cache, use_cache=True).logits]
        for t in range(6, 12):
            steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache, use_cache=True).logits)
    incremental = torch.cat(steps, dim=1)
    real = mask.bool()
    torch.testing.assert_close(incremental[real], full[real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("position", POSITION_TYPES)
def test_incremental_seq2seq_logits_equal_full_sequence_logits(position):
    model = lm_model("seq2seq", position_embedding_type=position)
    source, mask = random_ids(2, 9, seed=6), torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    target = random_ids(2, 7, seed=7)
    with torch.no_grad():
        full = model(source, attention_mask=mask, decoder_input_ids=target).logits
        encoder_outputs = model.get_encoder()(input_ids=source, attention_mask=mask)
        cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
        steps = []
        for t in range(7):
            outputs = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=target[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            steps.append(outputs.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_cross_attention_keys_and_values_are_computed_once_per_source():
    model = lm_model("seq2seq")
    projections = []
    for layer in model.model.decoder.layers:
        layer.cross_attn.kv_proj.register_forward_hook(lambda module, args, output: projections.append(output))
    model.generate(random_ids(2, 6), **FULL_LENGTH)
    assert len(projections) == len(model.model.decoder.layers)


def test_past_key_values_is_an_alias_of_cache():
    model = lm_model("decoder")
    ids = random_ids(1, 6)
    with torch.no_grad():
        cache = model(ids[:, :5], use_cache=True).cache
        aliased = model(ids[:, 5:], past_key_values=cache).logits
        full = model(ids).logits[:, 5:]
    torch.testing.assert_close(aliased, full, rtol=0, atol=1e-5)


def test_a_static_cache_passed_by_hand():
    model = lm_model("decoder", position_embedding_type="relative")
    ids = random_ids(2, 7)
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        model(ids[:, :4], cache=cache, use_cache=True)
        stepped = model(ids[:, 4:], cache=cache, use_cache=True).logits
        full = model(ids).logits[:, 4:]
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", GENERATING)
@pytest.mark.parametrize("position", POSITION_TYPES)
def test_compiled_static_cache_decoding_gives_the_same_tokens(family, position):
    """The decoding step is captured as one graph (`fullgraph=True`: any graph break raises)."""
    model = lm_model(family, position_embedding_type=position)
    ids, mask = prompt_batch(family)
    expected = model.generate(ids, attention_mask=mask, cache_implementation="static", **FULL_LENGTH)
    compile_config = CompileConfig(fullgraph=True, backend="eager", dynamic=False)
    compile_config._compile_all_devices = True  # generate() compiles automatically on accelerators only
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = model.generate(
        ids, attention_mask=mask, cache_implementation="static", compile_config=compile_config, **FULL_LENGTH
    )
    assert torch.equal(compiled, expected)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("family", GENERATING)
def test_max_new_tokens_is_respected(family):
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    outputs = model.generate(ids, attention_mask=mask, max_new_tokens=5, min_new_tokens=5)
    assert new_tokens(family, outputs, ids.shape[1]).shape == (3, 5)


@pytest.mark.parametrize("family", GENERATING)
def test_generation_stops_at_eos(family):
    """Make the token row 0 greedily produces third the EOS token: row 0 then ends there, every row is padded after
    its first EOS, and generation stops once all rows have ended."""
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    free = new_tokens(family, model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS), ids.shape[1])
    eos = int(free[0, 2])
    outputs = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=eos)
    stopped = new_tokens(family, outputs, ids.shape[1])
    end = (free[0] == eos).nonzero()[0].item() + 1
    assert torch.equal(stopped[0, :end], free[0, :end])
    pad = model.generation_config.pad_token_id
    for row in stopped:
        first_eos = (row == eos).nonzero()
        if len(first_eos):
            assert (row[first_eos[0] + 1 :] == pad).all()
    assert stopped.shape[1] < NEW_TOKENS or not (stopped == eos).any(-1).all()


@pytest.mark.parametrize("family", GENERATING)
@pytest.mark.parametrize(
    "sampling", [{"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.8}, {"temperature": 1.3, "top_k": 20, "top_p": 0.95}]
)
def test_seeded_sampling_is_reproducible(family, sampling):
    # An untied head keeps the untrained distribution flat, so that different seeds draw different tokens.
    model = lm_model(family, tie_word_embeddings=False)
    ids, mask = prompt_batch(family)

    def sample(seed):
        torch.manual_seed(seed)
        return model.generate(ids, attention_mask=mask, do_sample=True, **sampling, **FULL_LENGTH)

    assert torch.equal(sample(0), sample(0))
    assert not torch.equal(sample(0), sample(1))


@pytest.mark.parametrize("family", GENERATING)
def test_no_repeat_ngram_size_bans_repeated_bigrams(family):
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    outputs = model.generate(
        ids, attention_mask=mask, no_repeat_ngram_size=2, repetition_penalty=1.5, max_new_tokens=24, min_new_tokens=24
    )
    start = ids.shape[1] if family == "decoder" else 1
    for row in outputs.tolist():
        bigrams = list(zip(row, row[1:], strict=False))
        for t in range(start, len(row)):
            assert bigrams[t - 1] not in bigrams[: t - 1]


@pytest.mark.parametrize("family", GENERATING)
def test_beam_search_returns_the_requested_sequences_with_scores(family):
    model = lm_model(family)
    ids, mask = prompt_batch(family)
    outputs = model.generate(
        ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **BEAM, **FULL_LENGTH
    )
    assert outputs.sequences.shape[0] == 3 * BEAM["num_return_sequences"]
    scores = outputs.sequences_scores.view(3, BEAM["num_return_sequences"])
    assert (scores[:, :-1] >= scores[:, 1:]).all()


def reordering_every_cache(model: torch.nn.Module, reordered: list) -> torch.nn.Module:
    """`model` with transformers' own reordering of the whole cache at every beam-search step (both caches of an
    encoder-decoder one), recording each step's cache after it in `reordered`."""

    def reorder(cache, beam_idx):
        cache.reorder_cache(beam_idx)
        reordered.append([(layer.keys, layer.values) for layer in cache.cross_attention_cache.layers])
        return cache

    model._reorder_cache = reorder
    return model


@pytest.mark.parametrize("position", ["sinusoidal", "relative"])
def test_beam_search_keeps_the_encoder_decoder_cache_where_reordering_would_copy_it_unchanged(position, monkeypatch):
    """Beam search reorders only the self-attention cache: the same sequences and scores, to the bit, as reordering
    the encoder-decoder attention cache too, whose rows for a source's beams are equal at every step (so that
    reordering them among those beams copied them unchanged) and which keeps the values it was built with."""
    ids, mask = prompt_batch("seq2seq")
    settings = {**BEAM, **FULL_LENGTH, "output_scores": True, "return_dict_in_generate": True}
    model = lm_model("seq2seq", position_embedding_type=position)
    reordered_layers = []
    reorder_layer = transformers.cache_utils.DynamicLayer.reorder_cache
    monkeypatch.setattr(
        transformers.cache_utils.DynamicLayer,
        "reorder_cache",
        lambda layer, beam_idx: reordered_layers.append(layer) or reorder_layer(layer, beam_idx),
    )
    kept = model.generate(ids, attention_mask=mask, **settings)
    monkeypatch.undo()
    cache = kept.past_key_values
    assert {id(layer) for layer in reordered_layers} == {id(layer) for layer in cache.self_attention_cache.layers}
    reordered = []
    full = reordering_every_cache(lm_model("seq2seq", position_embedding_type=position), reordered)
    expected = full.generate(ids, attention_mask=mask, **settings)
    assert torch.equal(kept.sequences, expected.sequences)
    assert torch.equal(kept.sequences_scores, expected.sequences_scores)
    assert torch.equal(torch.stack(kept.scores), torch.stack(expected.scores))
    assert len(reordered) == NEW_TOKENS  # after every step
    beams = BEAM["num_beams"]
    first_step = reordered[0]
    for step in reordered:
        for (keys, values), (first_keys, first_values) in zip(step, first_step, strict=True):
            for tensor, first in ((keys, first_keys), (values, first_values)):
                by_source = tensor.unflatten(0, (ids.shape[0], beams))  # (sources, beams, heads, length, d_kv)
                assert torch.equal(by_source, by_source[:, :1].expand_as(by_source))
                assert torch.equal(tensor, first)
    for layer, (keys, values) in zip(cache.cross_attention_cache.layers, first_step, strict=True):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)


@pytest.mark.parametrize("family", GENERATING)
def test_text_streamer_prints_the_generated_text(family, capsys):
    tokenizer = word_tokenizer()
    model = lm_model(family, tie_word_embeddings=False)
    prompt = tokenizer("w5 w6 w7 w8", return_tensors="pt")
    streamer = transformers.TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    outputs = model.generate(**prompt, streamer=streamer, **FULL_LENGTH)
    printed = capsys.readouterr().out
    generated = new_tokens(family, outputs, prompt["input_ids"].shape[1])[0]
    assert printed.strip() == tokenizer.decode(generated, skip_special_tokens=True).strip()
    assert printed.strip()


def paper_model(**overrides):
    config = aiayn.preset_config(
        "transformer-base",
        **{
            "vocab_size": VOCAB,
            "d_model": 32,
            "num_heads": 4,
            "d_ff": 64,
            "num_layers": 1,
            "num_decoder_layers": 1,
            "dropout": 0.0,
            **overrides,
        },
    )
    torch.manual_seed(0)
    return transformers.AutoModelForSeq2SeqLM.from_config(config).eval()


def test_paper_presets_decode_with_the_papers_recipe(tmp_folder):
    """Section 6.1: beam size 4, length penalty 0.6, outputs of at most input length + 50 tokens, the search ended
    once 4 hypotheses have ended."""
    for name in ("transformer-base", "transformer-big"):
        config = aiayn.preset_config(name)
        assert (
            config.generation_defaults
            == aiayn.configuration_aiayn.PAPER_DECODING
            == {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "max_len_a": 1, "max_len_b": 50}
        )
    model = paper_model()
    generation_config = model.generation_config
    assert (generation_config.num_beams, generation_config.length_penalty) == (4, 0.6)
    assert generation_config.early_stopping is True  # "terminate early when possible"
    assert (generation_config.max_len_a, generation_config.max_len_b) == (1, 50)
    model.save_pretrained(tmp_folder)
    with open(os.path.join(tmp_folder, "generation_config.json")) as f:
        saved = json.load(f)
    assert {k: saved[k] for k in ("num_beams", "length_penalty", "early_stopping", "max_len_a", "max_len_b")} == {
        "num_beams": 4,
        "length_penalty": 0.6,
        "early_stopping": True,
        "max_len_a": 1,
        "max_len_b": 50,
    }
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_folder)
    assert reloaded.generation_config.max_len_b == 50


@pytest.mark.parametrize("mode", [{}, {"num_beams": 1}, {"num_beams": 1, "do_sample": True}], ids=str)
def test_outputs_end_by_input_length_plus_max_len_b(mode):
    """With EOS never chosen freely, every output runs to its own limit of max_len_a * source_length + max_len_b
    tokens and ends there with EOS; the paper's rule is max_len_a = 1, max_len_b = 50 (tested with 3 here)."""
    model = paper_model()
    source, mask = random_ids(3, 6, seed=8), torch.ones(3, 6, dtype=torch.long)
    mask[1, 2:], mask[2, 4:] = 0, 0
    eos, pad = model.generation_config.eos_token_id, VOCAB - 1
    never_chosen = transformers.SuppressTokensLogitsProcessor([eos, pad])  # runs before the length limit
    outputs = model.generate(
        source, attention_mask=mask, max_len_b=3, logits_processor=[never_chosen], pad_token_id=pad, **mode
    )
    lengths = (outputs[:, 1:] != pad).sum(-1)
    assert lengths.tolist() == [6 + 3, 2 + 3, 4 + 3]
    assert [outputs[row, lengths[row]].item() for row in range(3)] == [eos] * 3


def test_the_length_rule_is_off_without_max_len_settings():
    model = lm_model("seq2seq")
    assert not hasattr(model.generation_config, "max_len_b")
    assert model.generate(random_ids(1, 3), max_new_tokens=12, min_new_tokens=12).shape[1] == 13
    switched_off = {"max_len_a": None, "max_len_b": None, "num_beams": 1}
    assert (
        paper_model().generate(random_ids(1, 3), max_new_tokens=60, min_new_tokens=60, **switched_off).shape[1] == 61
    )


def test_invalid_generation_defaults_are_refused():
    with pytest.raises(StrictDataclassError, match="length_penalty"):
        aiayn.preset_config("tiny", generation_defaults={"length_penalty": 0.6})
    with pytest.raises(StrictDataclassError, match="beam_size"):
        aiayn.preset_config("tiny", generation_defaults={"beam_size": 4})
    with pytest.raises(StrictDataclassError, match="max_len_b"):
        aiayn.preset_config("tiny-decoder", generation_defaults={"max_len_b": 50})


def test_data_collator_for_seq2seq_builds_decoder_inputs_from_labels():
    tokenizer = word_tokenizer()
    model = lm_model("seq2seq")
    collator = transformers.DataCollatorForSeq2Seq(tokenizer, model=model)
    features = [
        {"input_ids": [5, 6, 7, 2], "labels": [8, 9, 2]},
        {"input_ids": [5, 2], "labels": [10, 11, 12, 13, 2]},
    ]
    batch = collator(features)
    assert batch["labels"].tolist() == [[8, 9, 2, -100, -100], [10, 11, 12, 13, 2]]
    assert batch["decoder_input_ids"].tolist() == [[0, 8, 9, 2, 0], [0, 10, 11, 12, 13]]
    with torch.no_grad():
        outputs = model(**batch)
        from_labels = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        )
    # The model builds the same decoder inputs from the labels, and its loss is the mean over the 7 labelled tokens.
    torch.testing.assert_close(from_labels.logits, outputs.logits, rtol=0, atol=0)
    expected = torch.nn.functional.cross_entropy(outputs.logits.reshape(-1, VOCAB), batch["labels"].reshape(-1))
    torch.testing.assert_close(outputs.loss, expected, rtol=0, atol=0)  # the same cross-entropy call


def test_generation_config_takes_the_special_tokens_of_the_config():
    model = lm_model("seq2seq", pad_token_id=0, eos_token_id=2, decoder_start_token_id=1)
    generation_config = model.generation_config
    assert (generation_config.pad_token_id, generation_config.eos_token_id) == (0, 2)
    assert generation_config.decoder_start_token_id == 1
    assert model.generate(random_ids(1, 4), max_new_tokens=2)[0, 0].item() == 1
