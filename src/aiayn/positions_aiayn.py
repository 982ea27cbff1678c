"""Position information (section 3.5 and what followed it): the paper's sinusoids, rotary embeddings (RoPE), T5's
relative position bias, and the positions of new tokens.

Absolute encodings (sinusoidal, learned) are added to the token embeddings (`modeling_aiayn.AiaynEmbeddings`); the
relative bias and the rotary tables are read by attention (`attention_aiayn.prepare_attention_inputs`).

This module imports nothing but torch: `save_pretrained` copies it next to the weights with the
modeling code.
"""

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .configuration_aiayn import AiaynTextConfig


def inverse_frequencies(dim: int, base: float) -> torch.Tensor:
    """`base^(-2i/dim)` for `i = 0 .. dim/2 - 1`: the angular frequencies of the paper's sinusoids and of RoPE."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


class AiaynSinusoidalPositionEmbedding(nn.Module):
    """The paper's position encodings (section 3.5), computed for any position, with sines and cosines interleaved:

    `PE(pos, 2i) = sin(pos / 10000^(2i/d_model))`, `PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))`.
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.inv_freq = nn.Buffer(inverse_frequencies(d_model, 10000.0), persistent=False)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """`(batch, seq)` positions to `(batch, seq, d_model)` float32 encodings."""
        angles = position_ids[..., None].float() * self.inv_freq
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


class AiaynRotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al., 2021): rotates feature pairs of queries and keys by `pos * theta_i`.

    Uses the half-split pairing `(x_i, x_{i + d/2})` of GPT-NeoX and Llama.
    """

    def __init__(self, config: "AiaynTextConfig"):
        super().__init__()
        self.head_dim = config.d_kv
        self.base = config.rope_theta
        self.inv_freq = nn.Buffer(inverse_frequencies(self.head_dim, self.base), persistent=False)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """`(batch, seq)` positions to `(cos, sin)`, each `(batch, 1, seq, d_kv)` so that they broadcast over heads."""
        angles = position_ids[..., None].float() * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's bucket of `memory_position - query_position`: exact buckets for small distances, logarithmic ones up to
    `max_distance`, one bucket beyond; a bidirectional stack gives each direction half of the buckets."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # A float64 scalar, like T5's math.log: a 0-dim tensor leaves the float32 arithmetic in float32.
    log_range = torch.tensor(max_distance / max_exact, dtype=torch.float64, device=distance.device).log()
    # Distances below max_exact take the exact bucket; clamped, they also stay out of log(0) in the unused branch.
    log_distance = torch.log(distance.clamp(min=max_exact).float() / max_exact)
    log_bucket = max_exact + (log_distance / log_range * (num_buckets - max_exact)).long()
    log_bucket = torch.clamp(log_bucket, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, log_bucket)


class AiaynRelativePositionBias(nn.Module):
    """T5's relative position bias: one learned scalar per head and distance bucket, added to the attention logits.

    A stack owns one and all its layers share it (T5's layer 0 owns the table and passes the bias on).
    """

    def __init__(self, config: "AiaynTextConfig", bidirectional: bool):
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.embedding = nn.Embedding(self.num_buckets, config.num_heads)

    def forward(
        self,
        query_length: int,
        key_length: int,
        past_length: int | torch.Tensor = 0,
        key_offset: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """The `(1, heads, query_length, key_length)` bias of queries at `past_length + i` over keys at
        `key_offset + j` (a sliding-window cache holds the most recent keys only)."""
        device = self.embedding.weight.device
        query_position = torch.arange(query_length, device=device)[:, None] + past_length
        key_position = torch.arange(key_length, device=device)[None, :] + key_offset
        # Made contiguous with the heads outermost: laid out as the embedding rows (heads innermost), the bias would
        # pass that layout on to the (batch, heads, queries, keys) mask, which the fused sdpa kernels do not take.
        return self.bias_of(key_position - query_position).contiguous().unsqueeze(0)

    def bias_of(self, relative_position: torch.Tensor) -> torch.Tensor:
        """The bias of each `key_position - query_position` in `relative_position`, heads first: `(heads, *shape)`."""
        buckets = relative_position_bucket(relative_position, self.bidirectional, self.num_buckets, self.max_distance)
        return self.embedding(buckets).movedim(-1, 0)


def position_ids_from_mask(
    attention_mask: torch.Tensor | None, past_length: int | torch.Tensor, seq_length: int, device: torch.device
) -> torch.Tensor:
    """Positions of the `seq_length` new tokens: their index among the unmasked tokens so far when a 2D mask is given
    (so left padding shifts nothing), else `past_length + arange(seq_length)`."""
    if attention_mask is not None and attention_mask.dim() == 2:
        positions = attention_mask.long().cumsum(-1) - 1
        return positions[:, -seq_length:].clamp(min=0)
    return (torch.arange(seq_length, device=device) + past_length).unsqueeze(0)
