"""BigBird's random attention (Zaheer et al., 2020, "Big Bird: Transformers for Longer Sequences"), an attention
pattern (`attention_aiayn.AttentionPattern`) selected by `config.attention_random_blocks`, on top of the sliding window
and the global tokens of `local_attention_aiayn`: each block of queries also attends to `attention_random_blocks`
blocks of keys outside its window.

The blocks are the bands' blocks (`BandGeometry`: max(window, 32) positions). For each layer and each block of queries
the key blocks are drawn without replacement from the blocks its band does not reach (in causal stacks, from the
blocks before it only), by a hash of `(attention_random_seed, layer, query block, key block)` in exact integer
arithmetic: the draw is a function
of the config, so a forward is deterministic, gives the same outputs in every process and exports, and a causal
block's draw does not depend on the length of the sequence. transformers' `BigBirdModel` draws new blocks at every
forward in training and none in evaluation; here a model attends to the same blocks in training and evaluation.

With sdpa over a long sequence the random keys join each block's band (linear cost); elsewhere transformers' masks
take them as an overlay, which is the reference. A decoding cache keeps the window's keys only, so a causal stack
refuses cached decoding steps with a clear error (`generate(..., use_cache=False)` decodes).

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

from dataclasses import dataclass

import torch

from .attention_aiayn import PreparedAttention, holds_other_keys
from .field_validators_aiayn import non_negative, positive
from .local_attention_aiayn import BandGeometry, SlidingWindowAttention

# The hash's modulus, a prime below 2^31: every product of two residues fits in int64, so the arithmetic is exact on
# every backend (an ONNX runtime's too).
PRIME = 2**31 - 1


def mix(x: torch.Tensor) -> torch.Tensor:
    """A hash of non-negative int64 tensors into [0, PRIME): rounds of squaring (the nonlinear step) and a
    multiplicative congruential step modulo PRIME, the same on every device, process and runtime.

    The first step, a bitwise and that leaves non-negative values as they are, keeps the hash a computed value under
    torch.compile: inductor folds integer arithmetic on `arange` into indexing expressions, and simplified this hash
    as one for about 15 s per layer."""
    x = x & torch.iinfo(torch.int64).max
    for constant in (0x2545F491, 0x1B873593):
        x = x % PRIME
        x = (x * x + constant) % PRIME
        x = (x * 48271 + 1) % PRIME
    return x


def random_key_blocks(
    seed: int, layer: int, num_blocks: int, count: int, geometry: BandGeometry, is_causal: bool, device=None
) -> torch.Tensor:
    """`(num_blocks, count)` key blocks each block of queries attends to besides its band, in increasing order, -1
    where fewer blocks lie outside the band. The blocks with the `count` smallest hashes of
    `(seed, layer, query block, key block)` among those outside the band (before it, in causal stacks)."""
    blocks = torch.arange(num_blocks, device=device)
    before, after = geometry.before // geometry.block, geometry.after // geometry.block
    outside = blocks[None, :] < blocks[:, None] - before  # (query block, key block)
    if not is_causal:
        outside = outside | (blocks[None, :] > blocks[:, None] + after)
    seeded = mix(mix(torch.tensor(seed, device=device) + 1_000_003 * layer) + blocks[:, None])
    scores = mix(seeded + blocks[None, :]).masked_fill(~outside, torch.iinfo(torch.int64).max)
    order = scores.topk(min(count, num_blocks), dim=-1, largest=False).indices
    drawn = order.masked_fill(~outside.gather(1, order), num_blocks)  # inside the band: none
    drawn = drawn.topk(drawn.shape[1], dim=-1, largest=False).values  # in increasing order
    drawn = drawn.masked_fill(drawn == num_blocks, -1)
    if drawn.shape[1] < count:
        drawn = torch.nn.functional.pad(drawn, (0, count - drawn.shape[1]), value=-1)
    return drawn


def block_key_positions(key_blocks: torch.Tensor, block: int, length: int) -> torch.Tensor:
    """The positions of the keys in `key_blocks` `(..., count)` (-1: none), blocks of `block` positions:
    `(..., count * block)`, -1 where no block was drawn or past the sequence's `length`."""
    offsets = torch.arange(block, device=key_blocks.device)
    positions = (key_blocks.clamp(min=0)[..., None] * block + offsets).flatten(-2)
    drawn = (key_blocks >= 0).repeat_interleave(block, dim=-1) & (positions < length)
    return positions.masked_fill(~drawn, -1)


@dataclass(kw_only=True, repr=False, eq=False)
class RandomBlocksFields:
    """The config fields of BigBird's random attention (`RandomBlocksAttention.config_fields`).

    Attributes:
        attention_random_blocks: BigBird's random attention (Zaheer et al., 2020) on top of `sliding_window` and
            global tokens: each block of queries also attends to this many blocks of keys outside its window, drawn
            per layer and per block from `attention_random_seed` (past blocks only in causal stacks); None: none.
        attention_random_seed: The seed of those draws, saved with the config: the same model attends to the same
            blocks in every process, in training and in evaluation.
    """

    attention_random_blocks: int | None = positive(default=None)
    attention_random_seed: int = non_negative(default=0)


class RandomBlocksAttention(SlidingWindowAttention):
    """The sliding window and global tokens, with BigBird's random blocks of keys (module docstring)."""

    config_fields = RandomBlocksFields
    config_field = "attention_random_blocks"
    extends = "sliding_window"
    backends = ("eager", "sdpa", "flex_attention")  # flash attention takes a window, not the blocks' mask

    def __init__(self, config, is_causal: bool, num_layers: int):
        super().__init__(config, is_causal, num_layers)
        self.num_layers = num_layers

    def key_blocks(self, length: int, device) -> torch.Tensor:
        """`(layers, blocks, attention_random_blocks)`: each layer's drawn key blocks for a sequence of `length`."""
        geometry = BandGeometry(self.config.sliding_window, self.is_causal)
        num_blocks = -(-length // geometry.block)
        count, seed = self.config.attention_random_blocks, self.config.attention_random_seed
        return torch.stack(
            [
                random_key_blocks(seed, layer, num_blocks, count, geometry, self.is_causal, device)
                for layer in range(self.num_layers)
            ]  # fmt: skip
        )

    def prepare(self, inputs):
        length = inputs.hidden_states.shape[1]
        if holds_other_keys(inputs.cache, length):
            raise ValueError(
                "attention_random_blocks attends to blocks of earlier keys that a decoding cache, which keeps the "
                "window's keys only, no longer holds: decode with generate(..., use_cache=False)."
            )
        inputs = self.with_pooled_token(inputs)
        blocks = self.key_blocks(length, inputs.hidden_states.device)
        block = BandGeometry(self.config.sliding_window, self.is_causal).block
        if self.attends_in_bands(inputs):  # the blocks' keys, a section of each layer's bands
            return self.banded_attention(inputs, block_key_positions(blocks, block, length))
        layers = []
        for layer_blocks in blocks:
            table = torch.zeros(len(layer_blocks), len(layer_blocks) + 1, dtype=torch.bool, device=blocks.device)
            table.scatter_(1, layer_blocks.masked_fill(layer_blocks < 0, len(layer_blocks)), True)
            overlay = random_blocks_overlay(table[:, :-1], block)
            layers.append(self.masked_attention(inputs, overlay, sliding_window=self.flash_window()))
        return LayerByLayer(layers)


def random_blocks_overlay(table: torch.Tensor, block: int):
    """A mask function (`transformers.masking_utils`' signature) allowing the pairs whose key block `table`
    (query block x key block) marks."""

    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return table[q_idx // block, kv_idx // block]

    return inner_mask


class LayerByLayer(PreparedAttention):
    """One prepared attention per layer, each layer attending through its own."""

    def __init__(self, layers: list):
        self.layers = layers

    def attend(self, module, query, key, value, **kwargs):
        return self.layers[module.layer_idx].attend(module, query, key, value, **kwargs)
