"""Attention (section 3.2) and the two axes along which aiayn's attention varies, each an extension point.

- The score: how a query scores a key and turns the scores into an output. `DotProductScore` is eq. (1), computed by
  the configured backend (transformers' attention interface: eager, sdpa, flex, flash). A score is a module of every
  attention layer (`AiaynAttention.score`), called like transformers' attention functions.
- The pattern: which keys each query sees. `FullAttention` is the paper's (causal in decoders). A pattern is a module
  of each stack (`AiaynStack.attention_pattern`); once per forward it prepares, from the stack's inputs, an object
  whose `attend` every layer calls (`MaskedAttention` here: attention through transformers' masks).

`attention_variants_aiayn` registers the variants and picks them from the config; the stack, the layers and the heads
name none. What a pattern reads, the stack's inputs and a model's `global_attention_mask`, arrives in one
`AttentionPatternInputs`.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.utils._pytree import register_pytree_node
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask, or_masks
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .policy_aiayn import check_global_attention_mask
from .positions_aiayn import AiaynRelativePositionBias, apply_rotary

if TYPE_CHECKING:
    from .configuration_aiayn import AiaynConfig


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    fully_masked: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, eq. (1), with the mask added before the softmax:

    `softmax(Q K^T * scaling + M) V`, where `M` is 0 where attention is allowed and the dtype's minimum elsewhere
    (plus any position bias). Returns the output `(batch, seq, heads, d_kv)` and the attention probabilities
    `(batch, heads, seq, key_length)` (`weighted_values`).
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    return weighted_values(module, scores, value, dropout, fully_masked)


def weighted_values(
    module: nn.Module, scores: torch.Tensor, value: torch.Tensor, dropout: float, fully_masked: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The end of eq. (1) from masked scores `(batch, heads, queries, keys)`: the softmax over the keys (in float32),
    dropout, the weighted sum of the values. Queries flagged `fully_masked` (`open_fully_masked_queries`) get zero
    weights, hence zero output, in the graph of what is returned: their weights keep a gradient. Returns the output
    `(batch, queries, heads, d)` and the weights."""
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    if fully_masked is not None:
        weights = weights.masked_fill(fully_masked, 0.0)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def zero_fully_masked(
    output: torch.Tensor, weights: torch.Tensor | None, fully_masked: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A backend's output `(batch, queries, heads, d)` and weights with the `fully_masked` queries' rows zeroed, for
    backends that do not take the flags (`weighted_values` does)."""
    if fully_masked is None:
        return output, weights
    output = output.masked_fill(fully_masked.transpose(1, 2), 0.0)
    return output, weights.masked_fill(fully_masked, 0.0) if weights is not None else None


class DotProductScore(nn.Module):
    """Scaled dot-product attention, eq. (1), through the backend `config._attn_implementation` names (transformers'
    attention interface), or `eager_attention_forward`. Called as the backends are: `(attention module, query, key,
    value, mask, dropout=..., scaling=..., **kwargs)` to `(output, weights)`. Like every score, it is built from the
    config; dot products need nothing of it (the scale is the attention module's `scaling`)."""

    backends: tuple[str, ...] | None = None  # every backend (a score's declaration, as a pattern's `backends`)
    config_fields = None  # the config fields it adds (as a pattern's `config_fields`): none

    def __init__(self, config: "AiaynConfig"):
        super().__init__()

    def forward(
        self, module, query, key, value, attention_mask, fully_masked=None, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`fully_masked`: `(batch, 1, queries, 1)` flags of the queries that attend to no key, whose output and
        weights are zero (`open_fully_masked_queries`), or None."""
        implementation = module.config._attn_implementation
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        if query.shape[0] == 0:  # transformers' sdpa and flash wrappers cannot reshape an empty batch
            attention_interface = eager_attention_forward
        if attention_interface is eager_attention_forward:
            return eager_attention_forward(
                module, query, key, value, attention_mask, fully_masked=fully_masked, **kwargs
            )
        if kwargs.get("dropout") and value.device.type == "cpu" and implementation == "sdpa":
            # With dropout, torch's CPU sdpa runs its math path, which copies the queries and keys but saves the
            # values for the backward as given: a view of the fused projection would keep all of its output alive.
            value = value.contiguous()
        return zero_fully_masked(
            *attention_interface(module, query, key, value, attention_mask, **kwargs), fully_masked
        )


def attention_dtype(hidden_states: torch.Tensor) -> torch.dtype:
    """The dtype attention computes in: autocast's where it is on (the projections' outputs), else the states'. Masks
    and biases built in it reach the attention kernel as they are, rather than cast again in every layer."""
    device_type = hidden_states.device.type
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden_states.dtype


def additive_mask(allowed: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True where attention is allowed) as the mask added to the scores: the position bias (or 0)
    where allowed, the dtype's minimum elsewhere.

    Args:
        allowed: The boolean mask, broadcastable with `bias`.
        bias: The position bias, or None.
        dtype: The dtype of the additive mask (the scores').

    Returns:
        The additive mask, of `dtype`.
    """
    allowed_value = bias.to(dtype) if bias is not None else torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, allowed_value, torch.finfo(dtype).min)


def open_fully_masked_queries(attention_mask) -> tuple[torch.Tensor | object | None, torch.Tensor | None]:
    """Finds the queries that a materialised `(batch, 1, queries, keys)` mask (boolean, True where allowed, or
    additive, the dtype's minimum where not) lets attend to no key: padding left of every real token, or a row that
    is all padding. A softmax over no key is NaN with `-inf` masks and an arbitrary mean of the values with finite
    ones, and differs between backends; so their rows are opened (every backend stays finite, gradients too) and
    the attention zeroes their output and weights. Returns `(mask, fully_masked)`, `fully_masked` being
    `(batch, 1, queries, 1)` flags, or None when every query has a key (or the mask is not materialised)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:
        return attention_mask, None
    if attention_mask.dtype == torch.bool:
        fully_masked = ~attention_mask.any(-1, keepdim=True)
    else:
        fully_masked = (attention_mask == torch.finfo(attention_mask.dtype).min).all(-1, keepdim=True)
    if not torch.compiler.is_compiling() and not fully_masked.any():
        return attention_mask, None
    if attention_mask.dtype == torch.bool:
        return attention_mask | fully_masked, fully_masked
    return attention_mask.masked_fill(fully_masked, 0.0), fully_masked


def global_tokens_overlay(global_attention_mask: torch.Tensor) -> Callable:
    """A mask function (`transformers.masking_utils`' signature) that lets global queries attend to every key and
    every query attend to the global keys; `global_attention_mask` is `(batch, length)`, 1 at global tokens."""
    is_global = global_attention_mask.bool()

    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return is_global[batch_idx, q_idx] | is_global[batch_idx, kv_idx]

    return inner_mask


class SharedByLayers:
    """What a stack prepares once per forward for all of its layers (masks, position biases, rotary tables), as a
    pytree node of its attributes: the stack hands each layer its tensors as positional arguments (`tree_flatten`)
    and the layer rebuilds it (`tree_unflatten`). Reentrant gradient checkpointing recomputes a layer from its
    positional tensors; a tensor that needs a gradient and reached the layer inside an object (the relative position
    bias, computed once for every layer) would be backpropagated through once per layer, its graph freed after the
    first."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_pytree_node(cls, _flatten_shared, partial(_unflatten_shared, cls))


def _flatten_shared(shared: SharedByLayers) -> tuple[list, list[str]]:
    return list(vars(shared).values()), list(vars(shared))


def _unflatten_shared(cls: type, values, names: list[str]) -> SharedByLayers:
    shared = object.__new__(cls)
    for name, value in zip(names, values, strict=True):
        setattr(shared, name, value)
    return shared


class AttentionPatternInputs:
    """What a stack's attention pattern reads, once per forward, in one object.

    Args:
        hidden_states: The layers' input states, `(batch, length, d_model)`.
        attention_mask: The padding mask, `(batch, length)` (1 at real tokens), or None.
        cache: The self-attention cache, or None.
        position_ids: The positions of the queries, `(batch, length)`.
        relative_position_bias: The stack's relative position bias, or None without relative positions.
        pooled: Whether a head reads the first token's final state for the whole sequence (BERT's pooler): a pattern
            that does not let every query see every key may give that token more (`SlidingWindowAttention` makes it
            global).
        **pattern_inputs: The inputs of a model's forward that patterns read (`AttentionPattern.inputs`, all of them
            in `attention_variants_aiayn.PATTERN_INPUTS`), each an attribute of the same name; None where not given.
            `global_attention_mask`: `(batch, length)`, 1 at global tokens (Longformer's), which attend to every
            position and which every position attends to; bidirectional stacks only.
    """

    global_attention_mask: torch.Tensor | None = None

    def __init__(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        position_ids: torch.Tensor | None = None,
        relative_position_bias: AiaynRelativePositionBias | None = None,
        pooled: bool = False,
        **pattern_inputs: torch.Tensor | None,
    ):
        self.hidden_states, self.attention_mask, self.cache = hidden_states, attention_mask, cache
        self.position_ids, self.relative_position_bias = position_ids, relative_position_bias
        self.pooled = pooled
        for name, value in pattern_inputs.items():
            setattr(self, name, value)


class PreparedAttention(SharedByLayers):
    """What a pattern prepares once per forward for the layers of its stack (`AttentionPattern.prepare`): each
    layer's attention calls `attend`. A pytree node of its attributes, as every `SharedByLayers`."""

    def attend(self, module, query, key, value, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of queries over keys and values.

        Args:
            module: The calling attention module (`AiaynAttention`): its `score`, its `layer_idx`, its
                `heads_of_this_rank`.
            query: `(batch, heads, queries, d)` queries.
            key: `(batch, heads, keys, d)` keys.
            value: `(batch, heads, keys, d)` values.
            **kwargs: What goes to the score (`dropout`, `scaling`, transformers' keyword arguments).

        Returns:
            The output `(batch, queries, heads, d)` and the attention weights (None where none are computed).
        """
        raise NotImplementedError


class MaskedAttention(PreparedAttention):
    """Attention of each query over the keys a mask allows, for every layer of a stack: `mask` in the form the
    backend takes (None: all keys, or causal where the backend is told so), the relative position bias folded in
    except for flex attention, which takes it as `position_bias`; `fully_masked` queries (see
    `open_fully_masked_queries`) get zero output and weights (the score zeroes them); `backend_kwargs` go to the
    backend as they are."""

    def __init__(self, mask=None, fully_masked=None, position_bias=None, **backend_kwargs):
        self.mask, self.fully_masked, self.position_bias = mask, fully_masked, position_bias
        self.backend_kwargs = backend_kwargs

    def attend(self, module, query, key, value, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`(batch, heads, length, d)` queries over keys and values through `module.score`: the output
        `(batch, length, heads, d)` and the weights (None where the backend returns none)."""
        heads = query.shape[1]
        if self.position_bias is not None:
            kwargs["position_bias"] = module.heads_of_this_rank(self.position_bias, heads)
        mask = module.heads_of_this_rank(self.mask, heads)
        return module.score(
            module, query, key, value, mask, fully_masked=self.fully_masked, **self.backend_kwargs, **kwargs
        )


class AttentionPattern(nn.Module):
    """Which keys each query sees: one per stack of `num_layers` layers, which may hold parameters (per layer or
    shared; `initialize_parameters()` initialises them). `prepare` runs once per forward and returns what every
    layer's attention calls, a `PreparedAttention` (`attend(module, query, key, value, **kwargs) -> (output,
    weights)`), as `MaskedAttention` (`module.layer_idx` tells the layers apart).

    What decides where it applies, which `attention_variants_aiayn` reads to pick it and to refuse what it cannot
    serve: `config_fields`, a dataclass of the config fields it adds, with their validators and its checks across
    fields (`validate_*` methods), which `AiaynConfig` is built on (`attention_variants_aiayn.AttentionFields`);
    `config_field`, the one of them whose value selects the pattern; `stacks`, the stacks it serves
    (`"bidirectional"`, `"causal"`); `backends`, the kinds of attention backend it serves (`"eager"`, `"sdpa"`,
    `"flex_attention"`, `"flash_attention"`; None: every one); `extends`, the config field of a pattern it builds on
    and then replaces; `inputs`, the inputs of a model's forward it reads (attributes of `AttentionPatternInputs`,
    which the stack takes from its keyword arguments: `attention_variants_aiayn.PATTERN_INPUTS`).
    """

    config_fields: type | None = None
    config_field: str | None = None
    stacks: tuple[str, ...] = ("bidirectional", "causal")
    backends: tuple[str, ...] | None = None
    extends: str | None = None
    inputs: tuple[str, ...] = ()

    def __init__(self, config: "AiaynConfig", is_causal: bool, num_layers: int):
        super().__init__()
        self.config = config
        self.is_causal = is_causal

    def prepare(self, inputs: AttentionPatternInputs) -> PreparedAttention:
        raise NotImplementedError


class FullAttention(AttentionPattern):
    """The paper's pattern: every query sees every key (bidirectional stacks) or every key up to its own (causal
    stacks), through transformers' masks (`masking_utils`), padding and global tokens included."""

    inputs = ("global_attention_mask",)

    def prepare(self, inputs: AttentionPatternInputs) -> MaskedAttention:
        return self.masked_attention(inputs)

    def masked_attention(
        self, inputs: AttentionPatternInputs, overlay: Callable | None = None, **backend
    ) -> MaskedAttention:
        """Attention through this pattern's mask (with the pairs `overlay`, a `masking_utils` mask function, allows),
        with the relative position bias of queries at their positions over the keys the cache holds added (flex
        attention takes it separately, indexed per batch row, as its mask is a block mask)."""
        mask, fully_masked = open_fully_masked_queries(self.mask(inputs, overlay))
        if inputs.relative_position_bias is None:
            return MaskedAttention(mask, fully_masked, **backend)
        cache, (batch_size, query_length) = inputs.cache, inputs.hidden_states.shape[:2]
        key_length, key_offset = cache.get_mask_sizes(query_length, 0) if cache is not None else (query_length, 0)
        bias = inputs.relative_position_bias(query_length, key_length, cached_length(cache), key_offset)
        bias = bias.to(attention_dtype(inputs.hidden_states))
        if "flex_attention" in self.config._attn_implementation:
            return MaskedAttention(mask, fully_masked, bias.expand(batch_size, -1, -1, -1), **backend)
        if mask is None:
            mask = bias
        elif mask.dtype == torch.bool:
            mask = additive_mask(mask, bias, bias.dtype)
        else:
            mask = mask.to(bias.dtype) + bias
        return MaskedAttention(mask, fully_masked, **backend)

    def mask(self, inputs: AttentionPatternInputs, overlay: Callable | None = None):
        """transformers' mask of the pattern, in the form the backend takes: causal (materialised where a position
        bias is added to it), or bidirectional with the global tokens; with the pairs `overlay` allows."""
        common = {
            "config": self.config,
            "inputs_embeds": inputs.hidden_states,
            "attention_mask": inputs.attention_mask,
        }
        if self.is_causal:
            skip = inputs.relative_position_bias is None
            return self.causal_mask(
                **common, cache=inputs.cache, position_ids=inputs.position_ids, allow_is_causal_skip=skip,
                or_mask_function=overlay,
            )  # fmt: skip
        if inputs.global_attention_mask is not None:
            global_overlay = global_tokens_overlay(inputs.global_attention_mask)
            overlay = global_overlay if overlay is None else or_masks(global_overlay, overlay)
        return self.bidirectional_mask(**common, or_mask_function=overlay)

    causal_mask = staticmethod(create_causal_mask)
    bidirectional_mask = staticmethod(create_bidirectional_mask)


def cached_length(cache: Cache | None) -> int | torch.Tensor:
    """The number of positions a cache holds before the new ones (0 without a cache; a paged cache, which packs many
    sequences, holds none of its own)."""
    return cache.get_seq_length() if isinstance(cache, Cache) else 0


def self_attention_cache(cache: Cache | None) -> Cache | None:
    """The self-attention part of a cache: an `EncoderDecoderCache`'s `self_attention_cache`, any other cache as it
    is."""
    return cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache


def holds_other_keys(cache: Cache | None, length: int) -> bool:
    """Whether `length` queries attend through `cache` to keys other than their own: a decoding step after earlier
    positions, or a paged cache (which packs many sequences). False without a cache and on a cache's first call."""
    if cache is None:
        return False
    return not isinstance(cache, Cache) or tuple(cache.get_mask_sizes(length, 0)) != (length, 0)


class AttentionInputs(SharedByLayers):
    """What one kind of attention (self-attention, or encoder-decoder attention) reads in every layer besides the
    states, built once per forward (`prepare_attention_inputs`): the prepared `pattern`, whose `attend` computes
    attention, and the rotary `(cos, sin)` tables of self-attention."""

    def __init__(self, pattern: PreparedAttention, rotary: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.pattern = pattern
        self.rotary = rotary


def prepare_attention_inputs(
    stack: nn.Module,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cache: Cache | None,
    position_ids: torch.Tensor,
    encoder_hidden_states: torch.Tensor | None,
    encoder_attention_mask: torch.Tensor | None,
    **pattern_inputs: torch.Tensor | None,
) -> tuple[AttentionInputs, AttentionInputs | None]:
    """What every layer of `stack` reads besides the states, for self-attention and, given encoder states, for
    encoder-decoder attention.

    Args:
        stack: The `AiaynStack` (its pattern, position bias, rotary tables; `stack.pooled`).
        hidden_states: The layers' input states, `(batch, length, d_model)`.
        attention_mask: The padding mask, `(batch, length)`, or None.
        cache: The stack's cache (an `EncoderDecoderCache` with encoder-decoder attention), or None.
        position_ids: The positions of the queries, `(batch, length)`.
        encoder_hidden_states: The states encoder-decoder attention reads, or None.
        encoder_attention_mask: Their padding mask, or None.
        **pattern_inputs: The model inputs the patterns read (`AttentionPattern.inputs`), checked here.

    Returns:
        The stack's pattern prepared over the inputs (`AttentionPatternInputs`) with the rotary tables, and, given
            encoder states, encoder-decoder attention through the source's padding mask (else None).
    """
    shape = tuple(hidden_states.shape[:2])
    check_global_attention_mask(pattern_inputs.get("global_attention_mask"), shape, stack.is_causal, stack.config)
    pattern = stack.attention_pattern.prepare(
        AttentionPatternInputs(
            hidden_states, attention_mask, self_attention_cache(cache), position_ids, stack.relative_position_bias,
            stack.pooled, **pattern_inputs,
        )
    )  # fmt: skip
    rotary = stack.rotary_embedding(position_ids, hidden_states.dtype) if stack.rotary_embedding is not None else None
    if encoder_hidden_states is None:
        return AttentionInputs(pattern, rotary), None
    source_mask = create_bidirectional_mask(
        config=stack.config,
        inputs_embeds=hidden_states,
        attention_mask=encoder_attention_mask,
        encoder_hidden_states=encoder_hidden_states,
    )
    return AttentionInputs(pattern, rotary), AttentionInputs(MaskedAttention(*open_fully_masked_queries(source_mask)))


class AiaynAttention(nn.Module):
    """Multi-head attention (section 3.2.2): `Concat(head_1, ..., head_h) W^O` with
    `head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`, each head's attention computed by the layer's `score` over the
    keys the stack's pattern lets each query see."""

    def __init__(self, config: "AiaynConfig", layer_idx: int, is_causal: bool, score: nn.Module):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.num_heads = config.num_heads
        self.head_dim = config.d_kv
        self.inner_dim = config.num_heads * config.d_kv
        self.scaling = self.head_dim**-0.5 if config.scale_attention else 1.0
        self.attention_dropout = config.attention_dropout
        self.score = score
        self.o_proj = nn.Linear(self.inner_dim, config.d_model, bias=config.use_bias)

    def project(self, proj: nn.Linear, states: torch.Tensor, count: int) -> tuple[torch.Tensor, ...]:
        """`count` fused projections of `(batch, seq, d_model)` states, each split into `(batch, heads, seq, d_kv)`:
        all `num_heads`, or this rank's share of them under tensor parallelism."""
        projected = proj(states).unflatten(-1, (count, -1, self.head_dim))
        return projected.permute(2, 0, 3, 1, 4).unbind(0)

    def attend(self, query, key, value, inputs: AttentionInputs, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of `(batch, heads, seq, d_kv)` queries over keys and values as the prepared pattern computes it,
        then `W^O`."""
        dropout = self.attention_dropout if self.training else 0.0
        output, weights = inputs.pattern.attend(
            self, query, key, value, dropout=dropout, scaling=self.scaling, **kwargs
        )
        return self.o_proj(output.flatten(2)), weights

    def heads_of_this_rank(self, per_head: torch.Tensor | object | None, heads: int) -> torch.Tensor | object | None:
        """A `(batch, num_heads, queries, keys)` mask or bias cut to the `heads` this rank computes under tensor
        parallelism (`config.base_model_tp_plan`: rank r holds the r-th run of heads); anything else as it is."""
        if not isinstance(per_head, torch.Tensor) or per_head.dim() != 4 or per_head.shape[1] in (1, heads):
            return per_head
        first = self.o_proj.weight.device_mesh.get_local_rank() * heads
        return per_head[:, first : first + heads]


class AiaynSelfAttention(AiaynAttention):
    """Self-attention: queries, keys and values all come from the previous layer (one fused projection)."""

    def __init__(self, config: "AiaynConfig", layer_idx: int, is_causal: bool, score: nn.Module):
        super().__init__(config, layer_idx, is_causal, score)
        self.qkv_proj = nn.Linear(config.d_model, 3 * self.inner_dim, bias=config.use_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        inputs: AttentionInputs | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        inputs = inputs if inputs is not None else AttentionInputs(MaskedAttention())
        query, key, value = self.project(self.qkv_proj, hidden_states, 3)
        if inputs.rotary is not None:
            cos, sin = inputs.rotary
            query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)  # a paged cache fills in kwargs
        return self.attend(query, key, value, inputs, **kwargs)


class AiaynCrossAttention(AiaynAttention):
    """Encoder-decoder attention (section 3.2.3): queries from the decoder, keys and values from the encoder output.

    With a cache, the keys and values are computed once per source and reused at every decoding step.
    """

    def __init__(self, config: "AiaynConfig", layer_idx: int, score: nn.Module):
        super().__init__(config, layer_idx, is_causal=False, score=score)
        self.q_proj = nn.Linear(config.d_model, self.inner_dim, bias=config.use_bias)
        self.kv_proj = nn.Linear(config.d_model, 2 * self.inner_dim, bias=config.use_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        inputs: AttentionInputs | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        (query,) = self.project(self.q_proj, hidden_states, 1)
        if cache is not None and cache.is_updated.get(self.layer_idx):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            key, value = layer.keys, layer.values
        else:
            key, value = self.project(self.kv_proj, encoder_hidden_states, 2)
            if cache is not None:
                check_full_cross_attention_cache(cache.cross_attention_cache, self.layer_idx)
                key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
                cache.is_updated[self.layer_idx] = True
        inputs = inputs if inputs is not None else AttentionInputs(MaskedAttention())
        return self.attend(query, key, value, inputs, **kwargs)


def check_full_cross_attention_cache(cache: Cache, layer_idx: int):
    """Raises `ValueError` when encoder-decoder attention would cache its keys in a sliding-window layer, which keeps
    only the last keys of the source: a `DynamicCache(config=...)` or `StaticCache` of a config with
    `sliding_window`. (`generate()` and the model build full caches for it.)"""
    if layer_idx < len(cache.layers) and getattr(cache.layers[layer_idx], "is_sliding", False):
        raise ValueError(
            "The cross-attention cache has sliding-window layers, which would keep only the last keys of the source. "
            "Encoder-decoder attention reads the whole source: build it without the config's window, e.g. "
            "EncoderDecoderCache(DynamicCache(config=config), DynamicCache())."
        )
