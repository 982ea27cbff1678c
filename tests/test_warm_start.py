"""Warm-started encoder-decoders: aiayn decoders with encoder-decoder attention (`add_cross_attention`) inside
transformers' `EncoderDecoderModel` and `VisionEncoderDecoderModel`, beside aiayn or built-in encoders; no stack
ignores encoder states."""

import json
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import transformers
from helpers import VOCAB, hub_loading_environment, random_ids

import aiayn
from aiayn.conversion import convert_from_hf

SIZES = {"vocab_size": VOCAB, "d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "dropout": 0.0,
         "attention_dropout": 0.0}  # fmt: skip


def decoder(seed: int = 0, **overrides) -> aiayn.AiaynDecoderForCausalLM:
    torch.manual_seed(seed)
    config = aiayn.preset_config("tiny-decoder", **SIZES, add_cross_attention=True, pad_token_id=0, bos_token_id=1,
                                 eos_token_id=2, **overrides)  # fmt: skip
    return aiayn.AiaynDecoderForCausalLM(config)


def encoder(kind: str):
    torch.manual_seed(1)
    if kind == "aiayn":
        return aiayn.AiaynEncoderModel(aiayn.preset_config("tiny-encoder", **SIZES))
    if kind == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64)  # fmt: skip
        return transformers.BertModel(config)
    if kind == "aiayn-vision":
        return aiayn.AiaynVisionModel(aiayn.preset_config("tiny-vision", image_size=16, patch_size=4, d_model=32))
    config = transformers.ViTConfig(image_size=16, patch_size=4, hidden_size=48, num_hidden_layers=1,
                                    num_attention_heads=4, intermediate_size=64)  # fmt: skip
    return transformers.ViTModel(config)  # 48 wide: the wrapper projects its states to the decoder's 32


def warm_started(kind: str):
    """`EncoderDecoderModel` (text encoders) or `VisionEncoderDecoderModel` (image encoders) with an aiayn decoder,
    and inputs for it."""
    wrapper = transformers.VisionEncoderDecoderModel if "vision" in kind or kind == "vit" else (
        transformers.EncoderDecoderModel
    )  # fmt: skip
    model = wrapper(encoder=encoder(kind), decoder=decoder())
    model.config.decoder_start_token_id, model.config.pad_token_id, model.config.eos_token_id = 1, 0, 2
    model.generation_config.decoder_start_token_id = 1
    if wrapper is transformers.VisionEncoderDecoderModel:
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))}
    else:
        inputs = {"input_ids": random_ids(2, 7, seed=2)}
    return model, inputs


def test_the_fields_are_gpt2s_and_a_decoder_stays_causal_whatever_is_decoder_says():
    config = decoder().config
    assert (config.add_cross_attention, config.is_decoder) == (True, True)
    assert aiayn.preset_config("tiny-decoder").add_cross_attention is False
    # transformers' generic causal-LM tester passes is_decoder=False, as GPT-2's config accepts it: the same decoder.
    causal = transformers.AutoModelForCausalLM.from_config(aiayn.preset_config("tiny-decoder", **SIZES))
    flagged = transformers.AutoModelForCausalLM.from_config(
        aiayn.preset_config("tiny-decoder", is_decoder=False, **SIZES)
    )
    flagged.load_state_dict(causal.state_dict())
    ids = random_ids(2, 7, seed=3)
    logits = flagged(ids).logits
    torch.testing.assert_close(logits, causal(ids).logits, rtol=0, atol=0)
    changed = ids.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % causal.config.vocab_size
    torch.testing.assert_close(flagged(changed).logits[:, :4], logits[:, :4], rtol=0, atol=0)  # no look ahead
    names = set(decoder().state_dict())
    assert {
        "model.decoder.layers.0.cross_attn.q_proj.weight",
        "model.decoder.layers.0.cross_attn_norm.weight",
    } <= names


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_a_stack_without_encoder_decoder_attention_refuses_encoder_states(family):
    preset = {"encoder": "tiny-encoder", "decoder": "tiny-decoder"}[family]
    model = transformers.AutoModel.from_config(aiayn.preset_config(preset, **SIZES))
    states = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="add_cross_attention=True"):
        model(random_ids(2, 6), encoder_hidden_states=states)


@pytest.mark.parametrize("kind", ["aiayn", "bert", "aiayn-vision", "vit"])
def test_a_training_step_reaches_encoder_decoder_attention_and_the_encoders_input_matters(kind):
    model, inputs = warm_started(kind)
    labels = random_ids(2, 5, seed=3)
    model(**inputs, labels=labels).loss.backward()
    gradients = [module.weight.grad for name, module in model.decoder.named_modules()
                 if "cross_attn" in name and isinstance(module, torch.nn.Linear)]  # fmt: skip
    assert gradients and all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in gradients)
    model.eval()
    other = {name: value.flip(0) for name, value in inputs.items()}  # the other row's source
    with torch.no_grad():
        logits = model(**inputs, labels=labels).logits
        swapped = model(**other, labels=labels).logits
    assert not torch.allclose(logits, swapped)


@pytest.mark.parametrize("kind", ["aiayn", "aiayn-vision"])
def test_generate_greedy_and_beam_with_the_cache_equal_without(kind):
    model, inputs = warm_started(kind)
    model.eval()
    for search in ({"num_beams": 1}, {"num_beams": 3}):
        cached = model.generate(**inputs, max_new_tokens=8, do_sample=False, **search)
        uncached = model.generate(**inputs, max_new_tokens=8, do_sample=False, use_cache=False, **search)
        assert torch.equal(cached, uncached), search
    model.decoder.set_attn_implementation("eager")  # the backend that returns attention weights
    with torch.no_grad():
        outputs = model(**inputs, decoder_input_ids=cached[:, :4], output_attentions=True)
    assert len(outputs.cross_attentions) == 2 and outputs.cross_attentions[0].shape[:3] == (2, 4, 4)


@pytest.mark.parametrize("kind", ["aiayn", "bert"])
@pytest.mark.parametrize("beams", [1, 3])
def test_cached_decoding_gives_the_uncached_logits_scores_and_a_cache_that_holds_the_source_once(kind, beams):
    """With a padded source: every step's logits (and the beams' scores) as without a cache, to float32 rounding
    (measured at most 1.2e-7), and a cross-attention cache as long as the source, filled once."""
    model, inputs = warm_started(kind)
    model.eval()
    source_length = inputs["input_ids"].shape[1]
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    inputs["attention_mask"][1, 4:] = 0
    search = {"max_new_tokens": 6, "num_beams": beams, "do_sample": False, "return_dict_in_generate": True,
              "output_logits": True, "output_scores": True}  # fmt: skip
    cached = model.generate(**inputs, use_cache=True, **search)
    uncached = model.generate(**inputs, use_cache=False, **search)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.logits, uncached.logits, rtol=0, atol=3e-7)
    if beams > 1:
        torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, rtol=3e-7, atol=0)
    assert cached.cache.cross_attention_cache.get_seq_length() == source_length
    assert cached.cache.self_attention_cache.get_seq_length() == cached.sequences.shape[1] - 1


def test_the_seq2seq_trainer_trains_a_warm_started_model(tmp_path):
    model, _ = warm_started("aiayn")
    rows = [{"input_ids": random_ids(1, 7, seed=i)[0], "labels": random_ids(1, 5, seed=100 + i)[0]} for i in range(8)]
    before = model.decoder.model.decoder.layers[0].cross_attn.kv_proj.weight.detach().clone()
    arguments = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-2, report_to="none",
        use_cpu=True, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    result = transformers.Seq2SeqTrainer(model=model, args=arguments, train_dataset=rows).train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(model.decoder.model.decoder.layers[0].cross_attn.kv_proj.weight, before)


ASSEMBLE = textwrap.dedent(
    """
    import json, sys
    sys.modules["aiayn"] = None  # only the folders' code
    import torch, transformers

    folder, encoder_folder, decoder_folder = sys.argv[1:4]
    expected = torch.load(folder + "/expected.pt")
    try:
        transformers.EncoderDecoderModel.from_pretrained(folder)
        first = "loaded"
    except ValueError as error:
        first = str(error).splitlines()[0][:80]
    encoder = transformers.AutoModel.from_pretrained(encoder_folder, trust_remote_code=True)
    decoder = transformers.AutoModelForCausalLM.from_pretrained(decoder_folder, trust_remote_code=True)
    same = []
    for model in (transformers.EncoderDecoderModel(encoder=encoder, decoder=decoder),
                  transformers.EncoderDecoderModel.from_pretrained(folder)):
        with torch.no_grad():
            same.append(torch.equal(model.eval()(**expected["inputs"]).logits, expected["logits"]))
    print(json.dumps({"first": first, "same": same}))
    """
)


def test_a_saved_model_reloads_and_loads_where_aiayn_is_not_installed_once_its_parts_are_loaded(tmp_path):
    """With aiayn imported, `EncoderDecoderModel.from_pretrained` reloads the folder with the same logits. Without it,
    transformers builds a composite model's parts from its tables of model types, which remote code enters only as it
    is loaded: loaded first, the composite folder is refused (no code of its own names the parts); once the encoder's
    and the decoder's own folders are loaded with `trust_remote_code=True` (their code enters their configs and
    classes in the tables), the parts assemble, and the composite folder loads, with the same logits."""
    model, inputs = warm_started("aiayn")
    model.eval()
    inputs["decoder_input_ids"] = random_ids(2, 5, seed=4)
    with torch.no_grad():
        logits = model(**inputs).logits
    model.save_pretrained(tmp_path / "whole")
    reloaded = transformers.EncoderDecoderModel.from_pretrained(tmp_path / "whole").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, logits)
    model.encoder.save_pretrained(tmp_path / "encoder")
    model.decoder.save_pretrained(tmp_path / "decoder")
    torch.save({"inputs": inputs, "logits": logits}, tmp_path / "whole" / "expected.pt")
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", ASSEMBLE, *(str(tmp_path / name) for name in ("whole", "encoder", "decoder"))],
        cwd=workdir, env=hub_loading_environment(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["first"].startswith("Unrecognized model type for subconfig: aiayn_encoder"), report
    assert report["same"] == [True, True]


def test_a_gpt2_with_cross_attention_converts_with_the_same_logits_given_the_same_encoder_states():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     add_cross_attention=True, bos_token_id=1, eos_token_id=2)  # fmt: skip
    gpt2 = transformers.GPT2LMHeadModel(config).eval()
    converted = convert_from_hf(gpt2).eval()
    assert converted.config.add_cross_attention
    ids, states = random_ids(2, 9), torch.randn(2, 6, 32)
    source_mask = torch.ones(2, 6, dtype=torch.long)
    source_mask[1, 4:] = 0
    with torch.no_grad():
        expected = gpt2(ids, encoder_hidden_states=states, encoder_attention_mask=source_mask).logits
        logits = converted(ids, encoder_hidden_states=states, encoder_attention_mask=source_mask).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=2e-6)


def test_from_encoder_decoder_pretrained_loads_both_checkpoints_and_starts_only_the_new_attention(tmp_path):
    """transformers' warm start: the decoder folder loads with `add_cross_attention=True`, its own weights as saved,
    and only the encoder-decoder attention (and its norm) newly initialised."""
    torch.manual_seed(0)
    masked_lm = aiayn.AiaynEncoderForMaskedLM(aiayn.preset_config("tiny-encoder", **SIZES))
    causal_lm = aiayn.AiaynDecoderForCausalLM(aiayn.preset_config("tiny-decoder", **SIZES))
    masked_lm.save_pretrained(tmp_path / "encoder")
    causal_lm.save_pretrained(tmp_path / "decoder")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new attention is expected, not a faulty checkpoint
        model = transformers.EncoderDecoderModel.from_encoder_decoder_pretrained(
            str(tmp_path / "encoder"), str(tmp_path / "decoder")
        )
    assert isinstance(model.encoder, aiayn.AiaynEncoderModel) and model.decoder.config.add_cross_attention
    new = model.decoder.state_dict()
    added = set(new) - set(causal_lm.state_dict())
    assert added and all(".cross_attn" in name for name in added), added
    for name, value in causal_lm.state_dict().items():
        assert torch.equal(new[name], value), name
    for name, value in masked_lm.model.state_dict().items():
        assert torch.equal(model.encoder.state_dict()[name], value), name


WARM_START_WITHOUT_AIAYN = textwrap.dedent(
    """
    import json, sys
    sys.modules["aiayn"] = None  # only the folders' code
    import torch, transformers

    encoder_folder, decoder_folder = sys.argv[1:3]
    expected = torch.load(encoder_folder + "/../expected.pt")
    try:
        transformers.EncoderDecoderModel.from_encoder_decoder_pretrained(
            encoder_folder, decoder_folder, trust_remote_code=True
        )
        first = "loaded"
    except ValueError as error:
        first = str(error).splitlines()[0]
    encoder = transformers.AutoModel.from_pretrained(encoder_folder, trust_remote_code=True)
    decoder = transformers.AutoModelForCausalLM.from_pretrained(
        decoder_folder, trust_remote_code=True, add_cross_attention=True
    )
    same = []
    for model in (
        transformers.EncoderDecoderModel(encoder=encoder, decoder=decoder),
        transformers.EncoderDecoderModel.from_encoder_decoder_pretrained(
            encoder_folder, decoder_folder, trust_remote_code=True
        ),
    ):
        new = ("cross_attn", "pooler")  # initialised here: not in the folders
        state = {name: value for name, value in model.state_dict().items() if not any(n in name for n in new)}
        same.append(all(torch.equal(value, expected["state"][name]) for name, value in state.items()))
    print()  # after transformers' unanswered prompt
    print("report:", json.dumps({"first": first, "same": same}))
    """
)


def test_the_documented_warm_start_runs_where_aiayn_is_not_installed(tmp_path):
    """docs/how-to/encoder-decoder.md: `from_encoder_decoder_pretrained(..., trust_remote_code=True)` fails without
    aiayn (transformers does not pass the flag on to the parts); the parts loaded by their Auto classes put together
    hold the folders' weights, and afterwards `from_encoder_decoder_pretrained` loads them as well."""
    torch.manual_seed(0)
    aiayn.AiaynEncoderForMaskedLM(aiayn.preset_config("tiny-encoder", **SIZES)).save_pretrained(tmp_path / "encoder")
    aiayn.AiaynDecoderForCausalLM(aiayn.preset_config("tiny-decoder", **SIZES)).save_pretrained(tmp_path / "decoder")
    model = transformers.EncoderDecoderModel.from_encoder_decoder_pretrained(
        str(tmp_path / "encoder"), str(tmp_path / "decoder")
    )
    torch.save({"state": model.state_dict()}, tmp_path / "expected.pt")
    result = subprocess.run(
        [sys.executable, "-c", WARM_START_WITHOUT_AIAYN, str(tmp_path / "encoder"), str(tmp_path / "decoder")],
        cwd=tmp_path, env=hub_loading_environment(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("report:")[-1])
    assert "contains custom code which must be executed" in report["first"], report
    assert report["same"] == [True, True]
