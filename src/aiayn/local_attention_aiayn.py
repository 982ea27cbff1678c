"""Local attention, an attention pattern (`attention_aiayn.AttentionPattern`) selected by `config.sliding_window`:
sliding windows and global tokens, and the banded computation that makes their cost linear in the sequence length.

A sliding window (`config.sliding_window`, with the semantics of `transformers.masking_utils`) lets a causal query
attend to the `sliding_window` most recent positions, itself included (Mistral), and a bidirectional one to the
positions at most `sliding_window` away on either side. Global tokens (Longformer's `global_attention_mask`) attend
to every position, and every position attends to them.

A masked kernel scores every query against every key and discards what the mask excludes, so its cost grows with
the square of the length, window or not. `BandedAttention` cuts the queries into blocks and scores each block only
against the keys its window can reach (plus the global tokens), with the configured attention kernel (sdpa): the
cost then grows linearly with the length.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from transformers.masking_utils import (
    create_bidirectional_sliding_window_mask,
    create_sliding_window_causal_mask,
    sliding_window_bidirectional_mask_function,
    sliding_window_causal_mask_function,
)

from .attention_aiayn import (
    AttentionPatternInputs,
    FullAttention,
    PreparedAttention,
    additive_mask,
    attention_dtype,
    holds_other_keys,
    zero_fully_masked,
)
from .field_validators_aiayn import positive
from .policy_aiayn import check_global_attention_mask

# The fewest queries a block holds: smaller blocks make many small kernel calls.
MIN_BLOCK_SIZE = 32


def window_mask_function(window: int, is_causal: bool) -> Callable:
    """`transformers.masking_utils`' mask function of a sliding window: the `window` most recent keys, the query's
    own included (causal), or the keys at most `window` positions away on either side (bidirectional)."""
    if is_causal:
        return sliding_window_causal_mask_function(window)
    return sliding_window_bidirectional_mask_function(window)


class BandGeometry:
    """How a sequence is cut for the banded computation: blocks of `block` queries, each scored against the keys from
    `before` positions ahead of its first query to `after` positions past its last, whole blocks on either side (so
    that the bands are windows of the keys themselves, not copies)."""

    def __init__(self, window: int, is_causal: bool):
        self.block = max(window, MIN_BLOCK_SIZE)
        reach_before, reach_after = (window - 1, 0) if is_causal else (window, window)
        self.before = self.block * -(-reach_before // self.block)
        self.after = self.block * -(-reach_after // self.block)
        self.keys = self.block + self.before + self.after

    def is_cheaper(self, length: int) -> bool:
        """Whether the bands hold no more query-key scores than a masked kernel over `length` positions, which also
        builds and reads a `length` x `length` mask (a rule over the shapes, not a timing)."""
        return length >= self.keys


def with_section(allowed, bias, section_allowed, section_bias, batch_size: int):
    """The bands' `allowed` keys `(batch or 1, blocks, block, keys)` and their bias `(heads, batch or 1, blocks, block,
    keys)` (or None), with a section of keys after them: `section_allowed` `(batch or 1, blocks or 1, block or 1,
    extra)` and its bias `(heads, batch or 1, blocks, block, extra)`."""
    _, blocks, block, _ = allowed.shape
    shape = (batch_size, blocks, block, section_allowed.shape[-1])
    allowed = torch.cat((allowed.expand(batch_size, -1, -1, -1), section_allowed.expand(shape)), dim=-1)
    if bias is not None:
        bias = torch.cat(
            (bias.expand(-1, batch_size, blocks, -1, -1), section_bias.expand(-1, batch_size, -1, -1, -1)), dim=-1
        )
    return allowed, bias


def opened_masks(allowed, bias, batch_size: int, length: int, dtype: torch.dtype, global_fix=None):
    """The additive masks of the blocks, `(batch * blocks, heads or 1, block, keys)`, with the queries that may attend
    to no key opened (every backend stays finite, gradients too), and the flags of those queries, `(batch, 1, length,
    1)` (None when there are none). `global_fix` = (positions, rows, slots, fully masked) of the global queries, whose
    own rows decide theirs."""
    fully_masked = ~allowed.any(-1)  # (batch or 1, blocks, block)
    allowed = allowed | fully_masked[..., None]
    mask = additive_mask(allowed[:, :, None], bias.movedim(0, 2) if bias is not None else None, dtype)
    mask = mask.expand(batch_size, -1, -1, -1, -1).flatten(0, 1)
    fully_masked = fully_masked.expand(batch_size, -1, -1).flatten(1)[:, :length]
    if global_fix is not None:
        positions, rows, slots, global_fully_masked = global_fix
        fully_masked = fully_masked.index_put((rows, positions[rows, slots]), global_fully_masked[rows])
    if torch.compiler.is_compiling() or bool(fully_masked.any()):
        return mask, fully_masked[:, None, :, None]
    return mask, None


def global_rows_mask(real: torch.Tensor, positions: torch.Tensor, position_bias, dtype: torch.dtype):
    """The mask of the global queries at `positions` `(batch, count)`, which attend to every real key: `(batch, heads
    or 1, count, length)`, and whether each row has no real key at all."""
    no_key = ~real.any(-1)
    allowed = (real | no_key[:, None])[:, None, None, :]
    bias = None
    if position_bias is not None:
        keys = torch.arange(real.shape[1], device=positions.device)
        bias = position_bias(keys[None, None, :] - positions[:, :, None]).transpose(0, 1)
    return additive_mask(allowed.expand(-1, -1, positions.shape[1], -1), bias, dtype), no_key


class BandedAttention(PreparedAttention):
    """Local attention computed block by block, for one sequence length, built once per forward and shared by the
    layers of a stack. Queries are cut into blocks (`BandGeometry`); each block attends to the band of keys its
    window can reach and to the sections of keys that the pattern adds after the band. Masks hold what the band
    holds besides the window (the sequence's ends, padding, the keys scored in a section), additively with the
    relative position bias where the model has one (torch's CPU kernels would turn a boolean mask into such a float
    mask on every call).

    The rows of a batch are laid end to end on one padded line of keys, so that the band of every block is a window
    of that line (a view). Without padding or sections, every block inside a row has the same mask: one mask serves
    them all, and the blocks at the ends of each row (`edge_blocks`) are computed again with their own. With them,
    each block has its own mask.

    Two kinds of section, each built by the pattern that owns it:

    - global tokens (`SlidingWindowAttention`, from Longformer's `global_attention_mask`): keys every block attends
      to, whose queries attend to every key;
    - layer keys (e.g. `bigbird_aiayn`'s blocks): for each layer, keys each block of queries attends to besides its
      band; each layer then has its own masks.

    Args:
        window: The sliding window (`config.sliding_window`).
        is_causal: Causal (the most recent keys) or bidirectional (either side) windows.
        batch_size: The number of rows.
        length: The sequence length.
        attention_mask: The padding mask, `(batch, length)` (1 at real tokens), or None.
        position_bias: Maps relative positions (key minus query) to a `(heads, ...)` bias, or None.
        dtype: The dtype of the masks (the attention's).
        device: The device of the masks.
        global_tokens: `(batch, length)`, True at global tokens, or None.
        layer_keys: `(layers, blocks, count)` positions of the keys each block of queries attends to besides its band,
            layer by layer (-1: none), or None.

    Attributes:
        fully_masked: Flags of the queries that may attend to no key, as `open_fully_masked_queries` gives for
            materialised masks, or None.
    """

    def __init__(
        self,
        window: int,
        is_causal: bool,
        batch_size: int,
        length: int,
        attention_mask: torch.Tensor | None,
        position_bias: Callable[[torch.Tensor], torch.Tensor] | None,
        dtype: torch.dtype,
        device: torch.device,
        global_tokens: torch.Tensor | None = None,
        layer_keys: torch.Tensor | None = None,
    ):
        geometry = BandGeometry(window, is_causal)
        self.geometry, self.length = geometry, length
        self.num_blocks = -(-length // geometry.block)
        self.allows = window_mask_function(window, is_causal)
        self.position_bias, self.dtype = position_bias, dtype
        padding = attention_mask.bool() if attention_mask is not None else None
        if padding is not None and not torch.compiler.is_compiling() and bool(padding.all()):
            padding = None
        if global_tokens is not None and not bool(global_tokens.any()):
            global_tokens = None  # no global token
        self.fully_masked = self.global_positions = self.edge_blocks = self.layer_sections = None
        # Block-relative coordinates: query i of block b is at b * block + i, its key j at b * block + j - before.
        self.query_offsets = torch.arange(geometry.block, device=device)
        self.key_offsets = torch.arange(geometry.keys, device=device) - geometry.before
        # The window at every distance a band spans, key minus query from (-before - block + 1) up, then each query's
        # row of it (query i reads the `keys` distances starting at -before - i): a window depends on the distance
        # between query and key only, so every block shares it.
        distances = torch.arange(geometry.keys + geometry.block - 1, device=device)
        origin = distances.new_zeros(())
        along = self.allows(origin, origin, origin, distances - (geometry.before + geometry.block - 1))
        self.window = along.unfold(0, geometry.keys, 1).flip(0).contiguous()  # (block, keys), rows as sdpa reads them
        # The blocks of each row whose band reaches past the row: the first ones, and the last ones (with one more
        # for a row that ends inside its last block).
        first, last = geometry.before // geometry.block, geometry.after // geometry.block + 1
        shared = padding is None and global_tokens is None and layer_keys is None
        if shared and self.num_blocks > first + last:
            self._build_shared_masks(batch_size, first, last)
        else:
            self._build_block_masks(batch_size, padding, global_tokens, layer_keys)

    def _band_bias(self) -> torch.Tensor | None:
        """The relative position bias of every block, `(heads, block, keys)`: relative positions do not depend on
        the block."""
        if self.position_bias is None:
            return None
        return self.position_bias(self.key_offsets[None, :] - self.query_offsets[:, None])

    def _band_allowed(self, blocks: torch.Tensor) -> torch.Tensor:
        """Which keys of each band the window allows: `(len(blocks), block, keys)`; keys outside the sequence never."""
        keys = blocks[:, None, None] * self.geometry.block + self.key_offsets  # (blocks, 1, keys)
        return self.window & (keys >= 0) & (keys < self.length)

    def _build_shared_masks(self, batch_size: int, first: int, last: int):
        """One mask for every block (`(1, heads or 1, block, keys)`), and one per block at the ends of a row."""
        bias = self._band_bias()
        device = self.query_offsets.device
        interior = additive_mask(self._band_allowed(torch.tensor([first], device=device)), bias, self.dtype)
        self.mask = interior if bias is not None else interior[:, None]
        edges = torch.cat((torch.arange(first), torch.arange(self.num_blocks - last, self.num_blocks))).to(device)
        self.edge_mask = additive_mask(self._band_allowed(edges)[:, None], bias, self.dtype).repeat(
            batch_size, 1, 1, 1
        )
        self.edge_blocks = (torch.arange(batch_size, device=device)[:, None] * self.num_blocks + edges).flatten()

    def _build_block_masks(self, batch_size: int, padding, is_global, layer_keys):
        """One mask per block, `(batch * blocks, heads or 1, block, keys)`: padding, global tokens; with layer keys,
        one such mask per layer (`layer_sections`)."""
        geometry, length = self.geometry, self.length
        blocks = torch.arange(self.num_blocks, device=self.query_offsets.device)
        queries = blocks[:, None] * geometry.block + self.query_offsets  # (blocks, block)
        allowed = self._band_allowed(blocks)[None]  # (1, blocks, block, keys)
        keys = (blocks[:, None, None] * geometry.block + self.key_offsets).clamp(0, length - 1)  # (blocks, 1, keys)
        if padding is not None:
            allowed = allowed & padding[:, keys]
        real = padding if padding is not None else torch.ones(batch_size, length, dtype=torch.bool, device=keys.device)
        bias = self._band_bias()
        band_bias = bias[:, None, None] if bias is not None else None  # (heads, 1, 1, block, keys)
        if is_global is not None:
            allowed = allowed & ~is_global[:, keys]  # global keys are scored in their own section
            count = int(is_global.sum(-1).max())
            order = torch.sort(is_global.to(torch.uint8), dim=-1, descending=True, stable=True).indices[:, :count]
            self.global_positions = order  # (batch, count): each row's global tokens, then filler
            slots = is_global.gather(1, order)  # which of them are global tokens
            global_bias = (
                self.position_bias(order[:, None, None, :] - queries[None, :, :, None]) if bias is not None else None
            )
            section = (slots & real.gather(1, order))[:, None, None, :]
            allowed, band_bias = with_section(allowed, band_bias, section, global_bias, batch_size)
            self.global_mask, global_fully_masked = global_rows_mask(real, order, self.position_bias, self.dtype)
            self.global_rows, self.global_slots = slots.nonzero(as_tuple=True)
            global_fix = (order, self.global_rows, self.global_slots, global_fully_masked)
        else:
            global_fix = None
        if layer_keys is None:
            self.mask, self.fully_masked = opened_masks(allowed, band_bias, batch_size, length, self.dtype, global_fix)
            return
        self.layer_sections = []
        for positions in layer_keys:  # (blocks, count): each layer's keys
            present = positions >= 0
            positions = positions.clamp(min=0)
            section = (
                present[None] & real[:, positions] & (~is_global[:, positions] if is_global is not None else True)
            )
            section_bias = (
                self.position_bias(positions[:, None, :] - queries[:, :, None])[:, None] if bias is not None else None
            )
            layer = with_section(allowed, band_bias, section[:, :, None], section_bias, batch_size)
            self.layer_sections.append((positions, *opened_masks(*layer, batch_size, length, self.dtype, global_fix)))

    def rows(self, states: torch.Tensor) -> torch.Tensor:
        """`(batch, heads, length, d)` states as `(batch, length padded to whole blocks, heads, d)`, a copy: sdpa's
        backward then keeps it, not the whole query-key-value projection a view would keep alive."""
        return F.pad(states.transpose(1, 2), (0, 0, 0, 0, 0, self.num_blocks * self.geometry.block - self.length))

    def blocks(self, query: torch.Tensor) -> torch.Tensor:
        """`(batch, heads, length, d)` queries as blocks, `(batch * blocks, heads, block, d)`."""
        batch, heads, _, dim = query.shape
        return self.rows(query).reshape(-1, self.geometry.block, heads, dim).transpose(1, 2)

    def bands(self, states: torch.Tensor, layer_positions: torch.Tensor | None = None) -> torch.Tensor:
        """`(batch, heads, length, d)` keys or values as the band of each block, `(batch * blocks, heads, keys, d)`:
        windows of one padded line of the rows (views of one copy), the global tokens' after them, then the keys at
        each block's `layer_positions` `(blocks, count)`."""
        geometry = self.geometry
        batch, heads, _, dim = states.shape
        rows = self.rows(states)
        line = F.pad(rows.flatten(0, 1), (0, 0, 0, 0, geometry.before, geometry.after))
        sections = [line.unfold(0, geometry.keys, geometry.block).permute(0, 1, 3, 2)]
        if self.global_positions is not None:
            positions = self.global_positions[:, None, :, None].expand(-1, heads, -1, dim)
            gathered = states.gather(2, positions)[:, None].expand(-1, self.num_blocks, -1, -1, -1).flatten(0, 1)
            sections.append(gathered)
        if layer_positions is not None:  # (batch, blocks, count, heads, d) -> (batch * blocks, heads, count, d)
            sections.append(rows[:, layer_positions].flatten(0, 1).transpose(1, 2))
        return torch.cat(sections, dim=2) if len(sections) > 1 else sections[0]

    def attend(self, module, query, key, value, **kwargs) -> tuple[torch.Tensor, None]:
        """Attention of `(batch, heads, length, d)` queries over keys and values through `module.score` (the sdpa
        wrapper's signature), block by block. Returns the output `(batch, length, heads, d)`, as the attention
        interfaces do, and no weights; queries that may attend to no key get zero output."""
        batch, heads, length, dim = query.shape
        if self.layer_sections is not None:
            layer_positions, mask, fully_masked = self.layer_sections[module.layer_idx]
        else:
            layer_positions, mask, fully_masked = None, self.mask, self.fully_masked
        blocks = self.blocks(query)
        key_bands, value_bands = self.bands(key, layer_positions), self.bands(value, layer_positions)
        # One mask for every block is passed as a view of every block's (sdpa's backward then holds no expanded copy).
        mask = module.heads_of_this_rank(mask, heads).expand(len(blocks), -1, -1, -1)
        output = module.score(module, blocks, key_bands, value_bands, mask, **kwargs)[0]  # (blocks, block, ...)
        if self.edge_blocks is not None:
            edges, edge_mask = self.edge_blocks, module.heads_of_this_rank(self.edge_mask, heads)
            edge_inputs = (blocks[edges], key_bands[edges], value_bands[edges], edge_mask)
            at_edges = module.score(module, *edge_inputs, **kwargs)[0]
            if output.requires_grad:  # sdpa's backward reads its output, which this may be a view of
                output = output.index_copy(0, edges, at_edges)
            else:
                output.index_copy_(0, edges, at_edges)
        output = output.view(batch, -1, heads, dim)[:, :length]
        if self.global_positions is not None:
            positions = self.global_positions[:, None, :, None].expand(-1, heads, -1, dim)
            global_mask = module.heads_of_this_rank(self.global_mask, heads)
            global_output = module.score(module, query.gather(2, positions), key, value, global_mask, **kwargs)[0]
            rows, slots = self.global_rows, self.global_slots
            output = output.index_put((rows, self.global_positions[rows, slots]), global_output[rows, slots])
        return zero_fully_masked(output, None, fully_masked)


@dataclass(kw_only=True, repr=False, eq=False)
class SlidingWindowFields:
    """The config field of local attention (`SlidingWindowAttention.config_fields`).

    Attributes:
        sliding_window: Local self-attention (transformers' `sliding_window`, with `transformers.masking_utils`'
            semantics): a causal position attends to the `sliding_window` most recent positions, itself included
            (Mistral); a bidirectional one to the positions at most `sliding_window` away on either side
            (Longformer's window). None (the default) is the paper's full attention. Encoder-decoder attention stays
            full; decoding caches keep at most `sliding_window` keys and values per layer; encoders also take a
            `global_attention_mask` (Longformer's global tokens). With sdpa, long sequences are attended block by
            block, at a cost linear in their length.
    """

    sliding_window: int | None = positive(default=None)


class SlidingWindowAttention(FullAttention):
    """Local attention (`config.sliding_window`): each query sees the keys within its window and the global tokens,
    through transformers' sliding-window masks, or, with sdpa, block by block (`BandedAttention`) where the bands
    hold no more scores than a masked kernel computes (`BandGeometry.is_cheaper`) and the queries attend to their own
    keys only (no cache, or a cache's first call). A program exported for a dynamic length takes transformers' mask,
    which serves every length with one graph (the bands' shapes depend on the length's multiples of a block); global
    tokens, whose number depends on the values of the mask, take it while compiling."""

    config_fields = SlidingWindowFields
    config_field = "sliding_window"
    causal_mask = staticmethod(create_sliding_window_causal_mask)
    bidirectional_mask = staticmethod(create_bidirectional_sliding_window_mask)

    def prepare(self, inputs):
        inputs = self.with_pooled_token(inputs)
        if self.attends_in_bands(inputs):
            return self.banded_attention(inputs)
        return self.masked_attention(inputs, sliding_window=self.flash_window())

    def with_pooled_token(self, inputs: AttentionPatternInputs) -> AttentionPatternInputs:
        """The inputs with the first token global where a head reads it for the whole sequence (`inputs.pooled`,
        BERT's pooler) and no `global_attention_mask` says otherwise (Longformer's classifiers): through the window
        alone it would read its neighbours only. The inputs are those of one forward, completed in place."""
        if not inputs.pooled or inputs.global_attention_mask is not None:
            return inputs
        shape = tuple(inputs.hidden_states.shape[:2])
        first = torch.zeros(shape, dtype=torch.long, device=inputs.hidden_states.device)
        first[:, 0] = 1
        check_global_attention_mask(first, shape, self.is_causal, self.config)
        inputs.global_attention_mask = first
        return inputs

    def banded_attention(self, inputs, layer_keys: torch.Tensor | None = None) -> BandedAttention:
        """The inputs' attention block by block, with each layer's extra `layer_keys` where given
        (`BandedAttention`)."""
        batch_size, length = inputs.hidden_states.shape[:2]
        bias = inputs.relative_position_bias.bias_of if inputs.relative_position_bias is not None else None
        marks = inputs.global_attention_mask
        return BandedAttention(
            self.config.sliding_window, self.is_causal, batch_size, length, inputs.attention_mask, bias,
            attention_dtype(inputs.hidden_states), inputs.hidden_states.device,
            global_tokens=marks.bool() if marks is not None else None, layer_keys=layer_keys,
        )  # fmt: skip

    def flash_window(self) -> int:
        """The window in flash attention's terms, which the other backends ignore (their masks hold it): it spans
        `sliding_window - 1` keys on either side, so a bidirectional window of distance w is w + 1."""
        return self.config.sliding_window + (0 if self.is_causal else 1)

    def attends_in_bands(self, inputs: AttentionPatternInputs) -> bool:
        """Whether to attend block by block (class docstring) rather than through transformers' mask."""
        batch_size, length = inputs.hidden_states.shape[:2]
        if batch_size == 0 or self.config._attn_implementation != "sdpa":
            return False
        if torch.compiler.is_exporting() and not isinstance(length, int):
            return False
        if inputs.global_attention_mask is not None and torch.compiler.is_compiling():
            return False
        if holds_other_keys(inputs.cache, length):
            return False  # decoding steps, a paged cache
        return BandGeometry(self.config.sliding_window, self.is_causal).is_cheaper(length)
