"""`attention_score`: dot products (eq. 1) or Bahdanau's additive score per head, `v^T tanh(q + k)`, in every family,
every pattern and every way a model runs."""

import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from helpers import (
    VOCAB,
    hub_loading_environment,
    lm_inputs,
    lm_model,
    one_layer,
    padded_batch,
    prompt_batch,
    random_ids,
    tiny_config,
)
from huggingface_hub.errors import StrictDataclassError

import aiayn
from aiayn.additive_attention_aiayn import AdditiveScore
from aiayn.attention_aiayn import AiaynSelfAttention, AttentionInputs, MaskedAttention
from aiayn.ctranslate2_export import unsupported_options

FAMILIES = ("encoder", "decoder", "seq2seq")


def test_attention_score_is_a_declared_field_that_refuses_an_unknown_value(tmp_path):
    config = tiny_config("decoder", attention_score="additive")
    config.save_pretrained(tmp_path)
    assert transformers.AutoConfig.from_pretrained(tmp_path).attention_score == "additive"
    assert tiny_config("decoder").attention_score == "dot_product"
    with pytest.raises(StrictDataclassError, match="attention_score"):
        tiny_config("decoder", attention_score="bilinear")


def bahdanau_attention(x, attention, mask):
    """Multi-head additive attention written from the formula with the module's weights, in plain tensor code:
    per head h, `e_ij = v_h . tanh(q_i + k_j)` over the keys the boolean `mask[i, j]` allows, softmax over j, the
    values' weighted sum, the heads concatenated and projected by W^O."""
    q, k, v = attention.qkv_proj(x).split(32, dim=-1)
    heads = []
    for h in range(4):
        qh, kh, vh = (t[..., 8 * h : 8 * (h + 1)] for t in (q, k, v))
        scores = torch.zeros(x.shape[0], x.shape[1], x.shape[1])
        for i in range(x.shape[1]):
            for j in range(x.shape[1]):
                scores[:, i, j] = (attention.score.v[h] * torch.tanh(qh[:, i] + kh[:, j])).sum(-1)
        scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ vh)
    return attention.o_proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_the_additive_score_is_bahdanaus_score_per_head(implementation):
    config = tiny_config("decoder", attention_score="additive")
    config._attn_implementation = implementation
    torch.manual_seed(0)
    attention = AiaynSelfAttention(config, 0, True, AdditiveScore(config)).eval()
    with torch.no_grad():
        attention.score.v.normal_()
    x = torch.randn(2, 6, 32)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    with torch.no_grad():
        output, _ = attention(x, AttentionInputs(MaskedAttention(causal[None, None])))
        expected = bahdanau_attention(x, attention, causal)
        # Without a mask, a causal module attends causally (as sdpa does with `is_causal`).
        unmasked, _ = attention(x, AttentionInputs(MaskedAttention()))
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(unmasked, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", [*FAMILIES, "vision"])
def test_additive_scores_build_in_every_family_and_eager_equals_sdpa(family):
    if family == "vision":
        config = aiayn.preset_config("tiny-vision", image_size=16, patch_size=4, attention_score="additive")
        models = [transformers.AutoModelForImageClassification.from_config(config, attn_implementation=i).eval()
                  for i in ("eager", "sdpa")]  # fmt: skip
        models[1].load_state_dict(models[0].state_dict())
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16)}
    else:
        models = [lm_model(family, implementation, attention_score="additive") for implementation in ("eager", "sdpa")]
        inputs = lm_inputs(family, *padded_batch())
    assert any(name.endswith("self_attn.score.v") for name in models[0].state_dict())
    with torch.no_grad():
        eager, sdpa = (model(**inputs).logits for model in models)
    assert torch.isfinite(eager).all()
    torch.testing.assert_close(sdpa, eager, rtol=0, atol=0)  # the score computes itself under both


def test_sliding_windows_attend_in_bands_with_the_masked_outputs():
    """With a window, sdpa attends a long sequence block by block; the additive score gives the masked (eager)
    model's outputs there too, padding and global tokens included."""
    fields = {"attention_score": "additive", "sliding_window": 8, "max_position_embeddings": 256}
    eager, sdpa = (lm_model("encoder", implementation, **fields) for implementation in ("eager", "sdpa"))
    ids, mask = random_ids(2, 200), torch.ones(2, 200, dtype=torch.long)
    mask[1, 150:] = 0
    marks = torch.zeros_like(ids)
    marks[0, 0], marks[1, [0, 90]] = 1, 1
    with torch.no_grad():
        expected = eager(ids, attention_mask=mask, global_attention_mask=marks).logits
        got = sdpa(ids, attention_mask=mask, global_attention_mask=marks).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


def test_fully_masked_rows_stay_finite_and_the_gradients_too():
    model = lm_model("encoder", "eager", attention_score="additive")
    ids, mask = padded_batch()
    mask[1] = 0  # a row that is all padding
    model.train()
    loss = model(ids, attention_mask=mask, labels=ids, skip_logits=False).logits.sum()
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_cached_greedy_decoding_equals_uncached(family):
    model = lm_model(family, attention_score="additive")
    ids, mask = prompt_batch(family)
    arguments = {"attention_mask": mask, "max_new_tokens": 20, "min_new_tokens": 20, "do_sample": False}
    cached = model.generate(ids, use_cache=True, **arguments)
    uncached = model.generate(ids, use_cache=False, **arguments)
    assert torch.equal(cached, uncached)


def test_long_inputs_are_scored_a_chunk_of_queries_at_a_time_with_the_same_result_and_gradients(monkeypatch):
    """With chunks of a few queries (each recomputed in the backward), the outputs and gradients are those of one
    chunk."""
    results = []
    for chunk_bytes in (2**40, 4 * 8 * 40 * 4):  # everything at once; 4 queries of 40 keys per chunk
        monkeypatch.setattr(aiayn.additive_attention_aiayn, "CHUNK_BYTES", chunk_bytes)
        model = lm_model("decoder", "eager", attention_score="additive")
        ids = random_ids(2, 40)
        loss = model(ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=1e-6)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, rtol=0, atol=1e-6, msg=name)


def test_backends_that_compute_dot_products_only_refuse_it_by_name():
    """At load time and when the backend changes, never at a forward that would quietly compute dot products."""
    message = r"attention_score='additive' \(AdditiveScore\) runs under attn_implementation 'eager', 'sdpa'"
    with pytest.raises(ValueError, match=message + "; 'flex_attention'"):
        lm_model("encoder", "flex_attention", attention_score="additive")
    model = lm_model("encoder", "sdpa", attention_score="additive")
    with pytest.raises(ValueError, match=message):
        model.set_attn_implementation("flex_attention")
    assert model.config._attn_implementation == "sdpa"
    assert any("attention_score='additive'" in reason for reason in unsupported_options(model.config))


def test_compile_export_and_onnx_run_it():
    import onnxruntime

    model = lm_model("decoder", attention_score="additive", **one_layer("decoder"))
    ids, mask = padded_batch()
    inputs = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
    with torch.no_grad():
        expected = model(**inputs).logits
        compiled = torch.compile(model)(**inputs).logits
        exported = torch.export.export(model, (), kwargs=inputs).module()(**inputs).logits
    torch.testing.assert_close(compiled, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(exported, expected, rtol=0, atol=0)
    program = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString())
    logits = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(logits), expected, rtol=0, atol=1e-5)


LOADER = textwrap.dedent(
    """
    import sys
    sys.modules["aiayn"] = None  # only the folder's own code can build the model
    import torch, transformers

    folder = sys.argv[1]
    expected = torch.load(folder + "/expected.pt")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    with torch.no_grad():
        logits = model(**expected["inputs"]).logits
    assert torch.equal(logits, expected["logits"])
    print("same logits")
    """
)


def test_a_saved_decoder_folder_gives_the_same_logits_without_aiayn(tmp_path):
    folder, workdir = tmp_path / "model", tmp_path / "elsewhere"
    workdir.mkdir()
    model = lm_model("decoder", attention_score="additive")
    model.save_pretrained(folder)
    assert (folder / "additive_attention_aiayn.py").exists()
    ids, mask = padded_batch()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    torch.save({"inputs": {"input_ids": ids, "attention_mask": mask}, "logits": logits}, folder / "expected.pt")
    result = subprocess.run(
        [sys.executable, "-c", LOADER, str(folder)],
        cwd=workdir,
        env=hub_loading_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and "same logits" in result.stdout, result.stderr[-3000:]


def test_a_2048_token_forward_stays_within_a_few_hundred_mib():
    """8 heads of 8, one layer: the (queries x keys x d_k) sums of 2048 tokens would be 1 GiB, and as much again their
    tanh; scored a chunk at a time, the forward allocates less than 512 MiB beyond the weights. Eight heads, so that a
    chunk sized without its heads would hold 512 MiB."""
    from test_benchmarks import load_compare

    peak_allocated_mib = load_compare().peak_allocated_mib

    config = aiayn.preset_config(
        "tiny-encoder", vocab_size=VOCAB, d_model=64, num_heads=8, d_ff=512, num_layers=1,
        max_position_embeddings=2048, attention_score="additive",
    )  # fmt: skip
    model = aiayn.AiaynEncoderModel(config, add_pooling_layer=False).eval()
    ids = random_ids(1, 2048)
    with torch.no_grad():
        peak = peak_allocated_mib(lambda: model(ids))
    assert peak < 512, peak
