"""Local attention: sliding windows and global tokens, and the banded computation that makes their cost linear in the
sequence length.

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

import torch
from torch.nn import functional as F
from transformers.masking_utils import (
    sliding_window_bidirectional_mask_function,
    sliding_window_causal_mask_function,
)

# The fewest queries a block holds: smaller blocks make many small kernel calls.
MIN_BLOCK_SIZE = 32


def window_mask_function(window: int, is_causal: bool) -> Callable:
    """`transformers.masking_utils`' mask function of a sliding window: the `window` most recent keys, the query's
    own included (causal), or the keys at most `window` positions away on either side (bidirectional)."""
    if is_causal:
        return sliding_window_causal_mask_function(window)
    return sliding_window_bidirectional_mask_function(window)


def global_tokens_overlay(global_attention_mask: torch.Tensor) -> Callable:
    """A mask function (`transformers.masking_utils`' signature) that lets global queries attend to every key and
    every query attend to the global keys; `global_attention_mask` is `(batch, length)`, 1 at global tokens."""
    is_global = global_attention_mask.bool()

    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return is_global[batch_idx, q_idx] | is_global[batch_idx, kv_idx]

    return inner_mask


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
        """Whether the bands hold at most half of the query-key scores of a masked kernel over `length` positions (a
        rule over the shapes, not a timing)."""
        return length >= 2 * self.keys


def additive(allowed: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask for sdpa: the position bias (or 0) where attention is allowed, the dtype's minimum elsewhere.
    (torch's CPU kernels turn a boolean mask into such a float mask on every call.)"""
    allowed_value = bias.to(dtype) if bias is not None else torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, allowed_value, torch.finfo(dtype).min)


class BandedAttention:
    """Local attention computed block by block, for one sequence length, built once per forward and shared by the
    layers of a stack. Queries are cut into blocks (`BandGeometry`); each block attends to the band of keys its
    window can reach and to the global tokens, and each global query attends to every key. Masks hold what the
    band holds besides the window (the sequence's ends, padding, the keys scored as global), additively with the
    relative position bias where the model has one.

    The rows of a batch are laid end to end: the band of block `b` is then the window of keys starting `before`
    positions ahead of it, a view. The blocks at the two ends of that line, whose bands would reach past it, gather
    theirs (`extra_blocks`). Without padding or global tokens every block inside a row has the same mask, so one
    mask serves them all and the blocks at the ends of each row are computed again with their own.

    `position_bias` maps relative positions (key minus query) to a `(heads, ...)` bias, or is None. `fully_masked`
    flags the queries that may attend to no key, as `open_fully_masked_queries` does for materialised masks.
    """

    def __init__(
        self,
        window: int,
        is_causal: bool,
        batch_size: int,
        length: int,
        attention_mask: torch.Tensor | None,
        global_attention_mask: torch.Tensor | None,
        position_bias: Callable[[torch.Tensor], torch.Tensor] | None,
        dtype: torch.dtype,
        device: torch.device,
    ):
        geometry = BandGeometry(window, is_causal)
        self.geometry, self.length = geometry, length
        self.num_blocks = -(-length // geometry.block)
        self.allows = window_mask_function(window, is_causal)
        self.position_bias, self.dtype = position_bias, dtype
        padding = attention_mask.bool() if attention_mask is not None else None
        if padding is not None and not torch.compiler.is_compiling() and bool(padding.all()):
            padding = None
        if global_attention_mask is not None and not bool(global_attention_mask.any()):
            global_attention_mask = None  # no global token
        self.fully_masked = self.global_positions = None
        # Block-relative coordinates: query i of block b is at b * block + i, its key j at b * block + j - before.
        self.query_offsets = torch.arange(geometry.block, device=device)
        self.key_offsets = torch.arange(geometry.keys, device=device) - geometry.before
        # Blocks on the line of rows: those in `windowed` read their band as a window of the keys.
        total = batch_size * self.num_blocks
        self.windowed = slice(geometry.before // geometry.block, total - geometry.after // geometry.block)
        if padding is None and global_attention_mask is None:
            self._build_shared_masks(batch_size)
        else:
            self._build_block_masks(batch_size, padding, global_attention_mask)
        self.extra_keys = (self.extra_blocks[:, None] * geometry.block + self.key_offsets).clamp(
            0, total * geometry.block - 1
        )

    def _band_bias(self) -> torch.Tensor | None:
        """The relative position bias of every block, `(heads, block, keys)`: relative positions do not depend on
        the block."""
        if self.position_bias is None:
            return None
        return self.position_bias(self.key_offsets[None, :] - self.query_offsets[:, None])

    def _band_allowed(self, blocks: torch.Tensor) -> torch.Tensor:
        """Which keys of each band the window allows: `(len(blocks), block, keys)`; keys outside the sequence never."""
        starts = blocks[:, None, None] * self.geometry.block
        queries = starts + self.query_offsets[:, None]
        keys = starts + self.key_offsets[None, :]
        return self.allows(0, 0, queries, keys) & (keys >= 0) & (keys < self.length)

    def _build_shared_masks(self, batch_size: int):
        """One mask for every block whose band lies inside its row, and one per block at a row's ends."""
        geometry = self.geometry
        blocks = torch.arange(self.num_blocks, device=self.query_offsets.device)
        starts = blocks * geometry.block
        edges = blocks[(starts - geometry.before < 0) | (starts + geometry.block + geometry.after > self.length)]
        bias = self._band_bias()
        interior = self.allows(0, 0, self.query_offsets[:, None], self.key_offsets[None, :])
        interior = additive(interior, bias, self.dtype)
        self.mask = interior[None] if bias is not None else interior[None, None]  # (1, heads or 1, block, keys)
        edge_mask = additive(self._band_allowed(edges)[:, None], bias, self.dtype)
        self.extra_mask = edge_mask.repeat(batch_size, 1, 1, 1)
        self.extra_blocks = (
            torch.arange(batch_size, device=edges.device)[:, None] * self.num_blocks + edges
        ).flatten()

    def _build_block_masks(self, batch_size: int, padding: torch.Tensor | None, global_attention_mask):
        """One mask per block (`(batch * blocks, heads or 1, block, keys)`), for padding and global tokens."""
        geometry, length = self.geometry, self.length
        blocks = torch.arange(self.num_blocks, device=self.query_offsets.device)
        allowed = self._band_allowed(blocks)[None]  # (1, blocks, block, keys)
        keys = (blocks[:, None, None] * geometry.block + self.key_offsets).clamp(0, length - 1)  # (blocks, 1, keys)
        if padding is not None:
            allowed = allowed & padding[:, keys]
        real = padding if padding is not None else torch.ones(batch_size, length, dtype=torch.bool, device=keys.device)
        bias = self._band_bias()
        band_bias = bias[:, None, None] if bias is not None else None  # (heads, 1, 1, block, keys)
        if global_attention_mask is not None:
            is_global = global_attention_mask.bool()
            allowed = allowed & ~is_global[:, keys]  # global keys are scored in their own section
            count = int(is_global.sum(-1).max())
            order = torch.sort(is_global.to(torch.uint8), dim=-1, descending=True, stable=True).indices[:, :count]
            self.global_positions = order  # (batch, count): each row's global tokens, then filler
            slots = is_global.gather(1, order)  # which of them are global tokens
            global_keys = (slots & real.gather(1, order))[:, None, None, :]
            shape = (batch_size, self.num_blocks, geometry.block, count)
            allowed = torch.cat((allowed.expand(batch_size, -1, -1, -1), global_keys.expand(shape)), dim=-1)
            if bias is not None:
                queries = blocks[:, None] * geometry.block + self.query_offsets  # (blocks, block)
                global_bias = self.position_bias(order[:, None, None, :] - queries[None, :, :, None])
                band_bias = torch.cat((band_bias.expand(-1, batch_size, self.num_blocks, -1, -1), global_bias), -1)
            self.global_mask, global_fully_masked = self._global_rows(real, order)
            self.global_rows, self.global_slots = slots.nonzero(as_tuple=True)
        fully_masked = ~allowed.any(-1)  # (batch or 1, blocks, block)
        allowed = allowed | fully_masked[..., None]  # opened: every backend stays finite, gradients too
        mask = additive(allowed[:, :, None], band_bias.movedim(0, 2) if band_bias is not None else None, self.dtype)
        self.mask = mask.expand(batch_size, -1, -1, -1, -1).flatten(0, 1)  # (batch * blocks, heads or 1, block, keys)
        total = len(self.mask)
        self.extra_blocks = torch.cat((torch.arange(self.windowed.start), torch.arange(self.windowed.stop, total))).to(
            self.mask.device
        )
        self.extra_mask = self.mask[self.extra_blocks]
        self.mask = self.mask[self.windowed]
        fully_masked = fully_masked.expand(batch_size, -1, -1).flatten(1)[:, :length]
        if self.global_positions is not None:
            columns = self.global_positions[self.global_rows, self.global_slots]
            fully_masked = fully_masked.index_put((self.global_rows, columns), global_fully_masked[self.global_rows])
        if torch.compiler.is_compiling() or bool(fully_masked.any()):
            self.fully_masked = fully_masked[:, None, :, None]

    def _global_rows(self, real: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mask of the global queries at `positions`, which attend to every real key: `(batch, heads or 1,
        count, length)`, and whether each row has no real key at all."""
        no_key = ~real.any(-1)
        allowed = (real | no_key[:, None])[:, None, None, :]
        bias = None
        if self.position_bias is not None:
            keys = torch.arange(self.length, device=positions.device)
            bias = self.position_bias(keys[None, None, :] - positions[:, :, None]).transpose(0, 1)
        return additive(allowed.expand(-1, -1, positions.shape[1], -1), bias, self.dtype), no_key

    def rows(self, states: torch.Tensor) -> torch.Tensor:
        """`(batch, heads, length, d)` states as one line of rows, each padded to whole blocks: `(batch * blocks *
        block, heads, d)`; a view of the projection's output where no padding is needed."""
        batch, heads, _, dim = states.shape
        rows = states.transpose(1, 2)
        padded = self.num_blocks * self.geometry.block
        if padded != self.length:
            rows = F.pad(rows, (0, 0, 0, 0, 0, padded - self.length))
        return rows.reshape(batch * padded, heads, dim)

    def bands(self, line: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The bands of keys or values on the line of rows: `(windowed blocks, heads, keys, d)`, windows of the line
        (views), and `(extra blocks, heads, keys, d)`, gathered; with the global tokens' after them."""
        geometry = self.geometry
        windowed = line.unfold(0, geometry.keys, geometry.block).permute(0, 1, 3, 2)
        extra = line[self.extra_keys].transpose(1, 2)
        if self.global_positions is None:
            return windowed, extra
        batch = len(self.global_positions)
        positions = (
            torch.arange(batch, device=line.device)[:, None] * self.num_blocks * geometry.block + self.global_positions
        )
        gathered = line[positions].transpose(1, 2)[:, None].expand(-1, self.num_blocks, -1, -1, -1).flatten(0, 1)
        return (
            torch.cat((windowed, gathered[self.windowed]), dim=2),
            torch.cat((extra, gathered[self.extra_blocks]), dim=2),
        )

    def attend(
        self,
        attention_interface: Callable,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        **kwargs,
    ) -> torch.Tensor:
        """Attention of `(batch, heads, length, d)` queries over keys and values through `attention_interface` (sdpa
        wrapper signature), block by block. Returns `(batch, length, heads, d)`, as the attention interfaces do."""
        geometry = self.geometry
        batch, heads, length, dim = query.shape
        blocks = self.rows(query).view(-1, geometry.block, heads, dim).transpose(1, 2)  # (blocks, heads, block, d)
        windowed_keys, extra_keys = self.bands(self.rows(key))
        windowed_values, extra_values = self.bands(self.rows(value))
        windowed_output = attention_interface(
            module,
            blocks[self.windowed],
            windowed_keys,
            windowed_values,
            module.heads_of_this_rank(self.mask, heads),
            **kwargs,
        )[0]
        output = windowed_output.new_empty((len(blocks), geometry.block, heads, dim))
        output[self.windowed] = windowed_output
        if len(self.extra_blocks):
            output[self.extra_blocks] = attention_interface(
                module,
                blocks[self.extra_blocks],
                extra_keys,
                extra_values,
                module.heads_of_this_rank(self.extra_mask, heads),
                **kwargs,
            )[0]
        output = output.view(batch, -1, heads, dim)[:, :length]
        if self.global_positions is None:
            return output
        positions = self.global_positions[:, None, :, None].expand(-1, heads, -1, dim)
        global_output = attention_interface(
            module,
            query.gather(2, positions),
            key,
            value,
            module.heads_of_this_rank(self.global_mask, heads),
            **kwargs,
        )[0]  # (batch, count, heads, d)
        rows, slots = self.global_rows, self.global_slots
        return output.index_put((rows, self.global_positions[rows, slots]), global_output[rows, slots])
