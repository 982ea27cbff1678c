"""Additive attention (Bahdanau et al., 2015), a score (`attention_aiayn`) selected by `config.attention_score =
"additive"`: the alternative to dot products that section 3.2.1 of the paper weighs.

Bahdanau scores a decoder state s against an encoder state h with `v^T tanh(W_s s + W_h h)`. Per head, the query and
key projections play `W_s` and `W_h`, so that head i scores `score(q, k) = v_i^T tanh(q + k)` with a learned `v_i` of
size d_k; the softmax over the keys, the mask and the values are those of eq. (1). Unlike `q . k`, whose variance
grows with d_k (footnote 4), each term of the sum is bounded: the paper's case for the 1/sqrt(d_k) of scaled
dot products is that without it dot products outgrow the softmax's useful range for large d_k, which additive scores
do not.

The scores need the (queries x keys x d_k) sums per head, which the module computes a chunk of queries at a time
(`CHUNK_BYTES` of them at most), recomputing each chunk in the backward rather than keeping it: memory grows with
queries x keys, as for dot products in eager attention, not with queries x keys x d_k. Time grows with
queries x keys x d_k tanh evaluations: far more than dot products cost (`benchmarks/attention_scores.py`).

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init

from .attention_aiayn import additive_mask, weighted_values

if TYPE_CHECKING:
    from .configuration_aiayn import AiaynConfig

# The most bytes of (queries x keys x d_k) sums one chunk of queries holds.
CHUNK_BYTES = 2**26


def head_scores(query: torch.Tensor, key: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`v_h^T tanh(q + k)` for every head h, query and key: `(batch, heads, queries, keys)`."""
    return torch.einsum("bhqkd,hd->bhqk", torch.tanh(query[:, :, :, None] + key[:, :, None]), v)


def score_mask(
    attention_mask: torch.Tensor | None, is_causal: bool, shape: tuple[int, int], dtype, device
) -> torch.Tensor | None:
    """The mask added to the scores: the backend's boolean mask (True where allowed; `additive_mask`) or additive
    one, or, without a mask in a causal module, the causal pattern (queries the last of the keys), as sdpa reads
    `is_causal`."""
    queries, keys = shape
    if attention_mask is None:
        if not is_causal or queries == 1:
            return None
        positions = torch.arange(keys, device=device)
        attention_mask = positions[None, :] <= positions[keys - queries :, None]
    if attention_mask.dtype == torch.bool:
        return additive_mask(attention_mask, None, dtype)
    return attention_mask.to(dtype)


class AdditiveScore(nn.Module):
    """Multi-head additive attention: `softmax(v^T tanh(q + k) + M) V` per head (module docstring). Called as
    transformers' attention functions are; returns the output `(batch, queries, heads, d_kv)` and the weights."""

    # It computes its scores itself, under these backends (both give the same result); the others compute dot
    # products inside their kernels.
    backends = ("eager", "sdpa")
    config_fields = None  # it adds no config field: `v` is a parameter

    def __init__(self, config: "AiaynConfig"):
        super().__init__()
        self.v = nn.Parameter(torch.empty(config.num_heads, config.d_kv))
        self.std = config.initializer_range

    def initialize_parameters(self):
        """`v` from a normal distribution of the config's `initializer_range`, as the projections."""
        init.normal_(self.v, mean=0.0, std=self.std)

    def forward(
        self, module, query, key, value, attention_mask, dropout: float = 0.0, fully_masked=None, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, heads, queries, dim = query.shape
        if heads != self.v.shape[0]:
            raise ValueError(
                f"attention_score='additive' scores {self.v.shape[0]} heads, the queries have {heads}: it does not "
                "run under tensor parallelism."
            )
        keys = key.shape[2]
        rows = max(1, CHUNK_BYTES // max(1, batch * heads * keys * dim * query.element_size()))
        v = self.v.to(query.dtype)
        if rows >= queries:  # one chunk: its sums are what the backward keeps
            scores = head_scores(query, key, v)
        else:  # each chunk's sums are recomputed in the backward rather than kept
            recompute = torch.is_grad_enabled()
            chunks = [query[:, :, start : start + rows] for start in range(0, queries, rows)]
            scores = torch.cat(
                [checkpoint(head_scores, c, key, v, use_reentrant=False) if recompute else head_scores(c, key, v)
                 for c in chunks],
                dim=2,
            )  # fmt: skip
        mask = score_mask(attention_mask, module.is_causal, (queries, keys), scores.dtype, scores.device)
        if mask is not None:
            scores = scores + mask
        return weighted_values(module, scores, value, dropout, fully_masked)
