"""Properties that hold for every valid configuration and input, checked on random ones (hypothesis): the model runs,
its outputs are finite, eager and sdpa attention agree at every position, and padding changes no real position."""

import pytest
import torch
from helpers import FAMILIES, LM_AUTO_CLASS, TINY_PRESET
from hypothesis import given, settings
from hypothesis import strategies as st

import aiayn

VOCAB = 50
# Derandomised: the same examples on every run, so that the suite is reproducible; bounded to stay fast.
PROPERTY_SETTINGS = settings(max_examples=100, deadline=None, derandomize=True)


@st.composite
def configs(draw, family: str) -> aiayn.AiaynConfig:
    """Any valid architecture of `family`, small enough to run in milliseconds."""
    num_heads = draw(st.sampled_from([1, 2, 4]))
    d_kv = draw(st.sampled_from([2, 4, 8]))
    position = draw(st.sampled_from(["sinusoidal", "learned", "relative", "rotary", "none"]))
    fields = {
        "vocab_size": VOCAB,
        "num_heads": num_heads,
        "d_model": num_heads * d_kv * draw(st.sampled_from([1, 2])),
        "d_kv": d_kv,
        "d_ff": draw(st.sampled_from([8, 24])),
        "num_layers": draw(st.integers(1, 2)),
        "max_position_embeddings": 32,
        "position_embedding_type": position,
        "norm_first": draw(st.booleans()),
        "norm_type": draw(st.sampled_from(["layernorm", "rmsnorm"])),
        "hidden_act": draw(st.sampled_from(["relu", "gelu", "gelu_new", "silu", "geglu", "swiglu"])),
        "use_bias": draw(st.booleans()),
        "scale_attention": draw(st.booleans()),
        "scale_embedding": draw(st.booleans()),
        "embedding_norm": draw(st.booleans()),
        "tie_word_embeddings": draw(st.booleans()),
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
    }
    if family == "encoder":
        fields["type_vocab_size"] = draw(st.sampled_from([0, 2]))
    if family == "seq2seq":
        fields["num_decoder_layers"] = draw(st.integers(1, 2))
    return aiayn.preset_config(TINY_PRESET[family], **fields)


@st.composite
def padded_inputs(draw, max_length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of 1 to 3 rows of random ids, each right- or left-padded to the longest (pad id 0)."""
    rows = draw(st.lists(st.lists(st.integers(3, VOCAB - 1), min_size=1, max_size=max_length), min_size=1, max_size=3))
    longest = max(map(len, rows))
    ids = torch.zeros(len(rows), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for index, row in enumerate(rows):
        start = longest - len(row) if draw(st.booleans()) else 0
        ids[index, start : start + len(row)] = torch.tensor(row)
        mask[index, start : start + len(row)] = 1
    return ids, mask


def build(family: str, config: aiayn.AiaynConfig, implementation: str, seed: int):
    torch.manual_seed(seed)
    return LM_AUTO_CLASS[family].from_config(config, attn_implementation=implementation).eval()


def forward(family: str, model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family == "seq2seq":
        inputs.update(decoder_input_ids=ids, decoder_attention_mask=mask)
    with torch.no_grad():
        return model(**inputs).logits


@pytest.mark.parametrize("family", FAMILIES)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_random_configs_and_inputs(family, data):
    config, (ids, mask) = data.draw(configs(family)), data.draw(padded_inputs())
    seed = data.draw(st.integers(0, 2**16))
    eager = forward(family, build(family, config, "eager", seed), ids, mask)
    sdpa_model = build(family, config, "sdpa", seed)
    sdpa = forward(family, sdpa_model, ids, mask)
    assert eager.shape == (*ids.shape, VOCAB)
    assert torch.isfinite(eager).all() and torch.isfinite(sdpa).all()
    torch.testing.assert_close(sdpa, eager, rtol=1e-5, atol=1e-5)
    for row in range(len(ids)):  # each row alone, unpadded, gives the same outputs at its real positions
        real = mask[row].bool()
        alone = forward(family, sdpa_model, ids[row, real][None], mask[row, real][None])
        torch.testing.assert_close(sdpa[row, real], alone[0], rtol=1e-5, atol=1e-5)
