"""Linformer (Wang et al., 2020, "Linformer: Self-Attention with Linear Complexity"), an attention pattern
(`attention_aiayn.AttentionPattern`) selected by `config.linformer_k`: keys and values projected along the sequence
to `linformer_k` rows, so that each query scores k rows rather than n keys, at a cost linear in n.

`head_i = Attention(Q W_i^Q, E K W_i^K, F V W_i^V)` with E, F of shape (k, n) over the `max_position_embeddings`
positions a stack reads. Of the paper's sharing schemes (per head, key-value, per layer), aiayn shares one projection
per layer between keys and values and across heads (E = F): the paper reports this scheme within a fraction of the
unshared one, and each layer keeps its own choice of what to summarise. Padding is kept out of the projection (padded
keys and values are zero before it), and an input shorter than n reads the first columns of E, which is the paper's
zero padding to n. The projection mixes every position into each projected row, future ones included, so causal
stacks cannot take it: a seq2seq decoder attends fully, and a decoder-only config refuses `linformer_k`.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from .attention_aiayn import AttentionPattern, PreparedAttention
from .field_validators_aiayn import positive
from .policy_aiayn import IndexOutOfRangeError


@dataclass(kw_only=True, repr=False, eq=False)
class LinformerFields:
    """The config field of Linformer (`LinformerAttention.config_fields`) and its check across fields.

    Attributes:
        linformer_k: Linformer (Wang et al., 2020) in bidirectional stacks: keys and values projected along the
            sequence to `linformer_k` rows by a learned map over `max_position_embeddings` positions per layer;
            None: none. A seq2seq decoder attends fully; decoder-only models refuse it.
    """

    linformer_k: int | None = positive(default=None)

    def validate_linformer_positions(self):
        """A relative bias needs the keys' positions, which the projection mixes."""
        if self.linformer_k is not None and getattr(self, "position_embedding_type", None) == "relative":
            raise ValueError(
                "position_embedding_type='relative' adds a bias for each key's distance to the query, and linformer_k "
                "projects the keys along the sequence, mixing their positions: use another position type."
            )


class LinformerAttention(AttentionPattern):
    """Keys and values of `linformer_k` rows, projected along the sequence (module docstring). One projection per
    layer: `projections`, `(num_layers, linformer_k, max_positions)`."""

    config_fields = LinformerFields
    config_field = "linformer_k"
    stacks = ("bidirectional",)  # a projection along the sequence mixes later positions into every row
    inputs = ("global_attention_mask",)  # read to refuse it: projected rows are not tokens

    def __init__(self, config, is_causal: bool, num_layers: int):
        super().__init__(config, is_causal, num_layers)
        self.max_positions = config.max_position_embeddings
        self.projections = nn.Parameter(torch.empty(num_layers, config.linformer_k, self.max_positions))

    def initialize_parameters(self):
        """Xavier's normal initialisation of a (k, n) map, as the paper's implementation (fairseq) initialises it: the
        projected rows keep the keys' scale."""
        init.normal_(self.projections, mean=0.0, std=(self.projections.shape[1] + self.max_positions) ** -0.5)

    def prepare(self, inputs):
        length = inputs.hidden_states.shape[1]
        if not torch.compiler.is_compiling() and length > self.max_positions:
            raise IndexOutOfRangeError(
                f"The sequence is {length} tokens long; Linformer projects keys and values along "
                f"max_position_embeddings={self.max_positions} positions. Truncate the input, or build the model with "
                "more positions."
            )
        if inputs.global_attention_mask is not None:
            raise ValueError("linformer_k attends to projected rows, not tokens: it takes no global_attention_mask.")
        return ProjectedAttention(self, inputs.attention_mask, length)


class ProjectedAttention(PreparedAttention):
    """Attention of every query over the `linformer_k` rows each layer's projection makes of the real keys and values,
    for one forward."""

    def __init__(self, pattern: LinformerAttention, attention_mask: torch.Tensor | None, length: int):
        self.pattern, self.length = pattern, length
        self.real = self.fully_masked = None
        if attention_mask is not None:  # a row without real tokens has nothing to project: its queries get zero output
            self.real = attention_mask.bool()[:, None, :, None]
            self.fully_masked = ~self.real.any(2, keepdim=True)  # (batch, 1, 1, 1)

    def attend(self, module, query, key, value, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        projection = self.pattern.projections[module.layer_idx, :, : self.length].to(key.dtype)
        if self.real is not None:
            key, value = key * self.real, value * self.real
        key, value = projection @ key, projection @ value  # (batch, heads, k, d)
        return module.score(module, query, key, value, None, fully_masked=self.fully_masked, **kwargs)
