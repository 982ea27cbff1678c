"""The blocks every aiayn family is built from: embeddings, positions, attention, feed-forward, layers and stacks.

Section and equation numbers refer to "Attention Is All You Need" (Vaswani et al., 2017). One `AiaynStack` is the
encoder of Figure 1 (bidirectional self-attention) or its decoder (causal self-attention, plus encoder-decoder
attention in seq2seq models); the families in `modeling_aiayn_{encoder,decoder,seq2seq}.py` put heads on stacks,
and the heads every family shares are written once at the end of this file. The loading policy and the input checks
are in `policy_aiayn.py`, the losses in `losses_aiayn.py`, the weights' layout for decoding on CPUs in
`layout_aiayn.py`, the tensor-parallel styles of the fused projections in `tensor_parallel_aiayn.py`, the entries in
transformers' tables of class names in `name_tables_aiayn.py`.

This module imports nothing but torch, transformers and the configuration: `save_pretrained` copies it next to
the weights so that a saved folder loads with `trust_remote_code=True` where aiayn is not installed.
"""

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache, StaticCache
from transformers.generation import GenerationMixin
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_bidirectional_sliding_window_mask,
    create_causal_mask,
    create_sliding_window_causal_mask,
)
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, slice_logits_to_keep
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_aiayn import AiaynConfig
from .layout_aiayn import lay_out_for_decoding, restore_standard_layout, restore_standard_layout_hook
from .local_attention_aiayn import BandedAttention, BandGeometry, global_tokens_overlay
from .losses_aiayn import sequence_classification_loss, skips_logits, token_prediction_loss
from .name_tables_aiayn import register_class_names
from .policy_aiayn import (
    AiaynCheckpointBase,
    IndexOutOfRangeError,
    check_continuous_batching,
    check_labels_shape,
    check_mask_shape,
    check_token_ids,
)
from .tensor_parallel_aiayn import register_parallel_styles

register_parallel_styles()  # the styles `AiaynConfig.stack_tp_plan` names


class AiaynRMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich, 2019; T5): `x / sqrt(mean(x^2) + eps) * g`, no mean, no bias.

    The statistics are computed in float32 whatever the input dtype.
    """

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.float()
        hidden_states = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


def build_norm(config: AiaynConfig) -> nn.Module:
    """Layer normalisation (Ba et al., 2016) as in the paper, or RMSNorm as in T5 (`config.norm_type`)."""
    if config.norm_type == "rmsnorm":
        return AiaynRMSNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.use_bias)


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

    def __init__(self, config: AiaynConfig):
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

    def __init__(self, config: AiaynConfig, bidirectional: bool):
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


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, eq. (1), with the mask added before the softmax:

    `softmax(Q K^T * scaling + M) V`, where `M` is 0 where attention is allowed and the dtype's minimum elsewhere
    (plus any position bias). The softmax runs in float32. Returns the output `(batch, seq, heads, d_kv)` and the
    attention probabilities `(batch, heads, seq, key_length)`.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class AttentionInputs:
    """What one kind of attention (self-attention, or encoder-decoder attention) reads in every layer besides the
    states, built once per forward by `AiaynStack`: the `mask` in the form the attention backend takes (the relative
    position bias folded in, except for flex attention, which takes `position_bias` separately), the rotary
    `(cos, sin)` tables, the `fully_masked` queries that may attend to no key (see `open_fully_masked_queries`), and,
    for local attention over a long sequence, the `band` that replaces the mask (`BandedAttention`). A new position
    type adds its tables here and builds them in the stack."""

    def __init__(
        self,
        mask: torch.Tensor | object | None = None,
        fully_masked: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        band: BandedAttention | None = None,
    ):
        self.mask = mask
        self.fully_masked = fully_masked
        self.position_bias = position_bias
        self.rotary = rotary
        self.band = band


class AiaynAttention(nn.Module):
    """Multi-head attention (section 3.2.2): `Concat(head_1, ..., head_h) W^O` with
    `head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`, dispatched to the configured attention backend."""

    def __init__(self, config: AiaynConfig, layer_idx: int, is_causal: bool):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.num_heads = config.num_heads
        self.head_dim = config.d_kv
        self.inner_dim = config.num_heads * config.d_kv
        self.scaling = self.head_dim**-0.5 if config.scale_attention else 1.0
        self.attention_dropout = config.attention_dropout
        self.o_proj = nn.Linear(self.inner_dim, config.d_model, bias=config.use_bias)

    def project(self, proj: nn.Linear, states: torch.Tensor, count: int) -> tuple[torch.Tensor, ...]:
        """`count` fused projections of `(batch, seq, d_model)` states, each split into `(batch, heads, seq, d_kv)`:
        all `num_heads`, or this rank's share of them under tensor parallelism."""
        projected = proj(states).unflatten(-1, (count, -1, self.head_dim))
        return projected.permute(2, 0, 3, 1, 4).unbind(0)

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        inputs: AttentionInputs,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of `(batch, heads, seq, d_kv)` queries over keys and values, then `W^O`: through the mask, or
        block by block through `inputs.band` (which returns no weights). Queries that may attend to no key
        (`inputs.fully_masked`) get zero attention output and weights."""
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        if query.shape[0] == 0:  # transformers' sdpa and flash wrappers cannot reshape an empty batch
            attention_interface = eager_attention_forward
        dropout = self.attention_dropout if self.training else 0.0
        if inputs.band is not None:
            output = inputs.band.attend(
                attention_interface, self, query, key, value, dropout=dropout, scaling=self.scaling, **kwargs
            )
            weights = None
        else:
            mask = self.heads_of_this_rank(inputs.mask, query.shape[1])
            if "position_bias" in kwargs:
                kwargs["position_bias"] = self.heads_of_this_rank(kwargs["position_bias"], query.shape[1])
            if dropout and value.device.type == "cpu" and self.config._attn_implementation == "sdpa":
                # With dropout, torch's CPU sdpa runs its math path, which copies the queries and keys but saves the
                # values for the backward as given: a view of the fused projection would keep all of its output alive.
                value = value.contiguous()
            output, weights = attention_interface(
                self,
                query,
                key,
                value,
                mask,
                dropout=dropout,
                scaling=self.scaling,
                **kwargs,
            )
        if inputs.fully_masked is not None:
            output = output.masked_fill(inputs.fully_masked.transpose(1, 2), 0.0)
            weights = weights.masked_fill(inputs.fully_masked, 0.0) if weights is not None else None
        output = output.flatten(2)
        return self.o_proj(output), weights

    def heads_of_this_rank(self, per_head: torch.Tensor | object | None, heads: int) -> torch.Tensor | object | None:
        """A `(batch, num_heads, queries, keys)` mask or bias cut to the `heads` this rank computes under tensor
        parallelism (`AiaynConfig.stack_tp_plan`: rank r holds the r-th run of heads); anything else as it
        is."""
        if not isinstance(per_head, torch.Tensor) or per_head.dim() != 4 or per_head.shape[1] in (1, heads):
            return per_head
        first = self.o_proj.weight.device_mesh.get_local_rank() * heads
        return per_head[:, first : first + heads]


class AiaynSelfAttention(AiaynAttention):
    """Self-attention: queries, keys and values all come from the previous layer (one fused projection)."""

    def __init__(self, config: AiaynConfig, layer_idx: int, is_causal: bool):
        super().__init__(config, layer_idx, is_causal)
        self.qkv_proj = nn.Linear(config.d_model, 3 * self.inner_dim, bias=config.use_bias)
        # The window in flash attention's terms, which the other backends ignore (their masks hold it): it spans
        # `sliding_window - 1` keys on either side, so a bidirectional window of distance w is w + 1.
        window = config.sliding_window
        self.sliding_window = None if window is None else window + (0 if is_causal else 1)

    def forward(
        self,
        hidden_states: torch.Tensor,
        inputs: AttentionInputs | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        inputs = inputs if inputs is not None else AttentionInputs()
        query, key, value = self.project(self.qkv_proj, hidden_states, 3)
        if inputs.rotary is not None:
            cos, sin = inputs.rotary
            query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)  # a paged cache fills in kwargs
        if inputs.position_bias is not None:
            kwargs["position_bias"] = inputs.position_bias
        if self.sliding_window is not None:
            kwargs["sliding_window"] = self.sliding_window
        return self.attend(query, key, value, inputs, **kwargs)


class AiaynCrossAttention(AiaynAttention):
    """Encoder-decoder attention (section 3.2.3): queries from the decoder, keys and values from the encoder output.

    With a cache, the keys and values are computed once per source and reused at every decoding step.
    """

    def __init__(self, config: AiaynConfig, layer_idx: int):
        super().__init__(config, layer_idx, is_causal=False)
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
        return self.attend(query, key, value, inputs if inputs is not None else AttentionInputs(), **kwargs)


class AiaynFeedForward(nn.Module):
    """Position-wise feed-forward network, eq. (2): `FFN(x) = act(x W_1 + b_1) W_2 + b_2`; with a gated activation
    (GLU variants, Shazeer 2020) `FFN(x) = (act(x W_g) * x W_1) W_2`."""

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=config.use_bias)
        self.gate_proj = nn.Linear(config.d_model, config.d_ff, bias=config.use_bias) if config.is_gated_act else None
        self.act = ACT2FN[config.activation]
        self.dropout = nn.Dropout(config.activation_dropout)
        self.down_proj = nn.Linear(config.d_ff, config.d_model, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.gate_proj is None:
            hidden_states = self.act(self.up_proj(hidden_states))
        else:
            hidden_states = self.act(self.gate_proj(hidden_states)) * self.up_proj(hidden_states)
        return self.down_proj(self.dropout(hidden_states))


class AiaynLayer(GradientCheckpointingLayer):
    """One layer of a stack (section 3.1): self-attention, encoder-decoder attention (seq2seq decoders only) and the
    feed-forward network. Each sub-layer is wrapped in dropout and a residual connection (section 5.4), with the
    norm after the sum, `Norm(x + Dropout(Sublayer(x)))` (post-LN, the paper), or before the sub-layer,
    `x + Dropout(Sublayer(Norm(x)))` (pre-LN, `config.norm_first`)."""

    def __init__(self, config: AiaynConfig, layer_idx: int, is_causal: bool, has_cross_attention: bool):
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = AiaynSelfAttention(config, layer_idx, is_causal)
        self.self_attn_norm = build_norm(config)
        self.cross_attn = AiaynCrossAttention(config, layer_idx) if has_cross_attention else None
        self.cross_attn_norm = build_norm(config) if has_cross_attention else None
        self.ffn = AiaynFeedForward(config)
        self.ffn_norm = build_norm(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        self_attention_inputs: AttentionInputs | None = None,
        cross_attention_inputs: AttentionInputs | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        self_attention_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        attended, _ = self.self_attn(
            self._norm_input(hidden_states, self.self_attn_norm),
            self_attention_inputs,
            self_attention_cache,
            **kwargs,
        )
        hidden_states = self._add_residual(hidden_states, attended, self.self_attn_norm)
        if self.cross_attn is not None:
            cross_attention_cache = cache if isinstance(cache, EncoderDecoderCache) else None
            attended, _ = self.cross_attn(
                self._norm_input(hidden_states, self.cross_attn_norm),
                encoder_hidden_states,
                cross_attention_inputs,
                cross_attention_cache,
                **kwargs,
            )
            hidden_states = self._add_residual(hidden_states, attended, self.cross_attn_norm)
        transformed = self.ffn(self._norm_input(hidden_states, self.ffn_norm))
        return self._add_residual(hidden_states, transformed, self.ffn_norm)

    def _norm_input(self, hidden_states: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        return norm(hidden_states) if self.norm_first else hidden_states

    def _add_residual(self, residual: torch.Tensor, sublayer_output: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        hidden_states = residual + self.dropout(sublayer_output)
        return hidden_states if self.norm_first else norm(hidden_states)


class AiaynEmbeddings(nn.Module):
    """The input of a stack: token embeddings times sqrt(d_model) (section 3.4), plus absolute position encodings
    (section 3.5) and token-type embeddings (BERT), optionally normalised (BERT), then dropout (section 5.4)."""

    def __init__(self, config: AiaynConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.scale = config.d_model**0.5 if config.scale_embedding else 1.0
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.d_model) if config.type_vocab_size else None
        )
        if config.position_embedding_type == "sinusoidal":
            self.position_embeddings = AiaynSinusoidalPositionEmbedding(config.d_model)
        elif config.position_embedding_type == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.d_model)
        else:
            self.position_embeddings = None
        self.norm = build_norm(config) if config.embedding_norm else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        position_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        if self.scale != 1.0:
            hidden_states = hidden_states * self.scale
        if self.token_type_embeddings is not None and token_type_ids is None:  # every token of type 0
            hidden_states = hidden_states + self.token_type_embeddings.weight[0]
        elif self.token_type_embeddings is not None:
            if token_type_ids.shape != hidden_states.shape[:2]:
                raise ValueError(
                    f"token_type_ids have shape {tuple(token_type_ids.shape)}; the inputs have shape "
                    f"{tuple(hidden_states.shape[:2])}: one token type per token."
                )
            check_token_ids(
                token_type_ids, self.token_type_embeddings.num_embeddings, "token_type_ids", "type_vocab_size"
            )
            hidden_states = hidden_states + self.token_type_embeddings(token_type_ids)
        elif token_type_ids is not None:
            raise ValueError("token_type_ids were given but the model has no token types (config.type_vocab_size=0).")
        if self.position_embeddings is not None:
            hidden_states = hidden_states + self.position_embeddings(position_ids).to(hidden_states.dtype)
        if self.norm is not None:
            hidden_states = self.norm(hidden_states)
        return self.dropout(hidden_states)


class AiaynTokenEmbedding(nn.Embedding):
    """The token embedding table (section 3.4), shared by the stacks of a model and, when tied, by its LM head. A
    class of its own so that `_init_weights` tells it from the position and token-type tables: with scaled
    embeddings it starts at standard deviation d_model^-0.5."""


class AiaynPreTrainedModel(AiaynCheckpointBase):
    """Weight initialisation, attention-backend declarations and config validation shared by all families."""

    config: AiaynConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AiaynLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    lora_target_modules: list[str] = []  # PEFT's default LoRA targets, set by each family

    def __init_subclass__(cls, **kwargs):
        """transformers' set-up of a model class; then the class enters the tables where transformers and PEFT look
        models up by name (`name_tables_aiayn`), wherever it is defined: in aiayn or in a folder's copied code."""
        super().__init_subclass__(**kwargs)
        register_class_names(cls)

    def __init__(self, config: AiaynConfig, *inputs, **kwargs):
        super().__init__(config, *inputs, **kwargs)
        self.register_state_dict_pre_hook(restore_standard_layout_hook)
        if self.can_generate() and config.generation_defaults:
            self.generation_config.update(**config.generation_defaults, allow_custom_entries=True)
            # Saved as a generation config of its own, so that its custom entries (max_len_a, ...) load back.
            self.generation_config._from_model_config = False

    @classmethod
    def maybe_distribute_model(cls, model, distributed_config, mesh_manager):
        """transformers' sharding, refusing a head count the tensor-parallel ranks do not divide: each rank computes
        whole heads, so a fused projection's rows split between heads would mix them."""
        tp_size = distributed_config.tp_size if distributed_config is not None else 1
        if tp_size > 1 and model.config.num_heads % tp_size:
            raise ValueError(
                f"Tensor parallelism over {tp_size} ranks needs num_heads divisible by {tp_size}; "
                f"the model has num_heads={model.config.num_heads}."
            )
        return super().maybe_distribute_model(model, distributed_config, mesh_manager)

    def train(self, mode: bool = True):
        """`nn.Module.train`; training also restores the weights' standard layout after `generate()` on a CPU
        (`layout_aiayn.lay_out_for_decoding`)."""
        if mode:
            restore_standard_layout(self)
        return super().train(mode)

    def _flash_attn_can_dispatch(self, flash_attn_version: int, is_init_check: bool = False) -> bool:
        if self.config.position_embedding_type == "relative":
            raise ValueError(
                "Flash attention cannot add the relative position bias to the attention logits; use "
                "attn_implementation='sdpa', 'flex_attention' or 'eager' with position_embedding_type='relative'."
            )
        return super()._flash_attn_can_dispatch(flash_attn_version, is_init_check)

    def _init_weights(self, module: nn.Module):
        config = self.config
        if isinstance(module, AiaynTokenEmbedding) and config.scale_embedding:
            # Scaled by sqrt(d_model) on input, the embeddings then have unit variance, like the sinusoids.
            init.normal_(module.weight, mean=0.0, std=config.d_model**-0.5)
        else:
            super()._init_weights(module)
        # Non-persistent buffers are not in the checkpoint: rebuild them after from_pretrained.
        if isinstance(module, AiaynSinusoidalPositionEmbedding):
            init.copy_(module.inv_freq, inverse_frequencies(module.d_model, 10000.0))
        elif isinstance(module, AiaynRotaryEmbedding):
            init.copy_(module.inv_freq, inverse_frequencies(module.head_dim, module.base))


class AiaynGenerationMixin(GenerationMixin):
    """`GenerationMixin` whose `generate()`, when each decoding step multiplies a single row (one sequence, no
    beams), first lays the weights that every step reads out for single-row products on CPUs
    (`layout_aiayn.lay_out_for_decoding`, a rule over the weights' shapes)."""

    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, *args, **kwargs):
        config = generation_config if generation_config is not None else self.generation_config
        sequences = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
        rows = sequences.shape[0] if sequences is not None else 1
        for copies in ("num_beams", "num_return_sequences"):  # None: one
            rows *= kwargs.get(copies, getattr(config, copies)) or 1
        if rows == 1:
            lay_out_for_decoding(self.decoding_step_modules())
        return super().generate(inputs, generation_config, *args, **kwargs)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs: dict, *args, **kwargs):
        """`GenerationMixin._prepare_cache_for_generation`, whose encoder-decoder cache would give encoder-decoder
        attention the sliding-window layers of `config.sliding_window`: that cache is built without the window, as
        the source is read whole."""
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        cache = model_kwargs.get("cache")
        if (
            not isinstance(cache, EncoderDecoderCache)
            or getattr(cache, "_is_user_defined", False)
            or self.config.sliding_window is None
        ):
            return
        if isinstance(cache.cross_attention_cache, StaticCache):
            config = self.config.get_text_config(decoder=True)  # a copy (`AiaynSeq2SeqConfig.get_text_config`)
            config.sliding_window = None
            source_length = model_kwargs["encoder_outputs"][0].shape[1]
            cache.cross_attention_cache = StaticCache(config=config, max_cache_len=source_length)
        else:
            cache.cross_attention_cache = DynamicCache()

    def init_continuous_batching(self, *args, **kwargs):
        """`GenerationMixin.init_continuous_batching` (behind `generate_batch` and `transformers serve
        --continuous-batching`), refused up front where it cannot run the model (`check_continuous_batching`)."""
        check_continuous_batching(self.config)
        return super().init_continuous_batching(*args, **kwargs)

    def decoding_step_modules(self) -> nn.Module:
        """The modules each decoding step runs (a seq2seq model's encoder runs once per call, over many rows)."""
        return self


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


def attention_dtype(hidden_states: torch.Tensor) -> torch.dtype:
    """The dtype attention computes in: autocast's where it is on (the projections' outputs), else the states'. Masks
    and biases built in it reach the attention kernel as they are, rather than cast again in every layer."""
    device_type = hidden_states.device.type
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden_states.dtype


def position_ids_from_mask(
    attention_mask: torch.Tensor | None, past_length: int | torch.Tensor, seq_length: int, device: torch.device
) -> torch.Tensor:
    """Positions of the `seq_length` new tokens: their index among the unmasked tokens so far when a 2D mask is given
    (so left padding shifts nothing), else `past_length + arange(seq_length)`."""
    if attention_mask is not None and attention_mask.dim() == 2:
        positions = attention_mask.long().cumsum(-1) - 1
        return positions[:, -seq_length:].clamp(min=0)
    return (torch.arange(seq_length, device=device) + past_length).unsqueeze(0)


class AiaynStack(AiaynPreTrainedModel):
    """Embeddings and `num_layers` layers (Figure 1): the encoder (bidirectional self-attention) or the decoder
    (causal self-attention and, with `has_cross_attention`, encoder-decoder attention). Pre-LN stacks end with a
    final norm. The position bias (relative) or rotation (rotary) is computed once per call and shared by the layers.
    A stack without a token table (`embed_tokens=None`: the vision family, whose patches come embedded) reads
    `inputs_embeds` as they are.
    """

    _can_record_outputs = {
        "hidden_states": AiaynLayer,
        "attentions": AiaynSelfAttention,
        "cross_attentions": AiaynCrossAttention,
    }

    def __init__(
        self,
        config: AiaynConfig,
        embed_tokens: nn.Embedding | None,
        num_layers: int,
        is_causal: bool,
        has_cross_attention: bool = False,
    ):
        super().__init__(config)
        self.is_causal = is_causal
        self.has_cross_attention = has_cross_attention
        self.embeddings = AiaynEmbeddings(config, embed_tokens) if embed_tokens is not None else None
        self.relative_position_bias = (
            AiaynRelativePositionBias(config, bidirectional=not is_causal)
            if config.position_embedding_type == "relative"
            else None
        )
        self.rotary_embedding = AiaynRotaryEmbedding(config) if config.position_embedding_type == "rotary" else None
        self.layers = nn.ModuleList(
            AiaynLayer(config, layer_idx, is_causal, has_cross_attention) for layer_idx in range(num_layers)
        )
        self.final_norm = build_norm(config) if config.norm_first else None
        self.gradient_checkpointing = False
        self.post_init()

    def init_parallel_plans(self):
        """A stack's modules are sharded by its family's plan (`config.base_model_tp_plan`, relative to the family's
        base model), not by one of its own."""
        super().init_parallel_plans()
        self._tp_plan, self._pp_plan = {}, {}

    def get_input_embeddings(self) -> nn.Embedding | None:
        return self.embeddings.embed_tokens if self.embeddings is not None else None

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.embed_tokens = value

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        r"""
        global_attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Bidirectional stacks only: 1 marks the global tokens (Longformer), which attend to every position and which
            every position attends to, whatever `sliding_window`; 0 the tokens that attend within their window.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Specify exactly one of input_ids and inputs_embeds.")
        if not self.is_causal:
            cache = None
        elif use_cache and cache is None:
            # Sliding-window layers where the config has a window (transformers reads `config.sliding_window`);
            # encoder-decoder attention always reads the whole source.
            cache = DynamicCache(config=self.config)
            if self.has_cross_attention:
                cache = EncoderDecoderCache(cache, DynamicCache())
        self_attention_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        # A paged cache (continuous batching) packs many sequences: their positions come with the inputs.
        past_length = self_attention_cache.get_seq_length() if isinstance(self_attention_cache, Cache) else 0
        tokens = input_ids if inputs_embeds is None else inputs_embeds
        batch_size, seq_length = tokens.shape[:2]
        self._check_inputs(
            input_ids,
            attention_mask,
            (batch_size, seq_length),
            past_length,
            encoder_hidden_states,
            encoder_attention_mask,
        )
        self._check_global_attention_mask(global_attention_mask, (batch_size, seq_length))
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask, past_length, seq_length, tokens.device)
        self._check_positions(position_ids)

        if self.embeddings is not None:
            hidden_states = self.embeddings(input_ids, inputs_embeds, position_ids, token_type_ids)
        else:
            hidden_states = inputs_embeds
        self_attention_inputs = self._self_attention_inputs(
            hidden_states, attention_mask, self_attention_cache, position_ids, past_length, global_attention_mask
        )
        cross_attention_inputs = (
            self._cross_attention_inputs(hidden_states, encoder_hidden_states, encoder_attention_mask)
            if encoder_hidden_states is not None
            else None
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                encoder_hidden_states,
                self_attention_inputs=self_attention_inputs,
                cross_attention_inputs=cross_attention_inputs,
                cache=cache,
                **kwargs,
            )
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, cache=cache)

    def _check_inputs(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        shape: tuple[int, int],
        past_length: int | torch.Tensor,
        encoder_hidden_states: torch.Tensor | None,
        encoder_attention_mask: torch.Tensor | None,
    ):
        """Raises `ValueError` for token ids outside the vocabulary and padding masks of the wrong shape."""
        prefix = "decoder_" if self.has_cross_attention else ""
        if self.embeddings is None and input_ids is not None:
            raise ValueError("This stack has no token table: its inputs come embedded (inputs_embeds).")
        if input_ids is not None:
            check_token_ids(input_ids, self.embeddings.embed_tokens.num_embeddings, f"{prefix}input_ids", "vocab_size")
        if torch.compiler.is_compiling():
            return
        (batch_size, seq_length), past_length = shape, int(past_length)
        check_mask_shape(
            attention_mask,
            (batch_size, past_length + seq_length),
            f"{prefix}attention_mask",
            f"{seq_length} tokens" + (f" after {past_length} cached ones" if past_length else ""),
        )
        if encoder_hidden_states is not None:
            check_mask_shape(
                encoder_attention_mask,
                tuple(encoder_hidden_states.shape[:2]),
                "attention_mask",
                f"{encoder_hidden_states.shape[1]} source tokens",
            )

    def _check_global_attention_mask(self, global_attention_mask: torch.Tensor | None, shape: tuple[int, int]):
        """Global tokens need bidirectional attention, a mask shaped like the inputs, and a backend that can mix them
        into the window."""
        if global_attention_mask is None:
            return
        if self.is_causal:
            raise ValueError(
                "global_attention_mask marks tokens that attend to every position, which needs bidirectional "
                "attention: encoders (and the encoder of a seq2seq model) take it; a causal decoder does not."
            )
        if tuple(global_attention_mask.shape) != shape:
            raise ValueError(
                f"global_attention_mask has shape {tuple(global_attention_mask.shape)}, but the inputs have shape "
                f"{shape}: one 0 or 1 per token."
            )
        if self.config._attn_implementation.startswith("flash"):
            raise ValueError(
                "Flash attention takes a window but no global tokens; use attn_implementation='sdpa', "
                "'flex_attention' or 'eager' with global_attention_mask."
            )

    def _check_positions(self, position_ids: torch.Tensor):
        """Learned positions exist up to `max_position_embeddings`; the other types extend to any length."""
        if (
            self.config.position_embedding_type != "learned"
            or self.embeddings is None  # the family adds its positions to the embedded inputs
            or position_ids.numel() == 0
            or torch.compiler.is_compiling()
        ):
            return
        length, limit = int(position_ids.max()) + 1, self.config.max_position_embeddings
        if length > limit:
            raise IndexOutOfRangeError(
                f"The sequence is {length} tokens long (cached tokens included), longer than "
                f"max_position_embeddings={limit}, the positions this model has learned embeddings for. Truncate the "
                f"input to {limit} tokens (tokenizer(..., truncation=True, max_length={limit})), or use a model with "
                "sinusoidal, relative or rotary positions, which extend past the training length."
            )

    def _self_attention_inputs(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Cache | None,
        position_ids: torch.Tensor,
        past_length: int | torch.Tensor,
        global_attention_mask: torch.Tensor | None = None,
    ) -> AttentionInputs:
        """What every layer's self-attention reads: the mask (causal in decoders, padding only in encoders; within
        the sliding window, global tokens added) with the relative position bias folded in, or the band that replaces
        it for a long sequence; the rotary tables; and the fully masked queries."""
        batch_size, query_length = hidden_states.shape[:2]
        if self._attends_in_bands(batch_size, query_length, cache, global_attention_mask):
            bias = self.relative_position_bias
            band = BandedAttention(
                self.config.sliding_window,
                self.is_causal,
                batch_size,
                query_length,
                attention_mask,
                global_attention_mask,
                bias.bias_of if bias is not None else None,
                attention_dtype(hidden_states),
                hidden_states.device,
            )
            inputs = AttentionInputs(fully_masked=band.fully_masked, band=band)
        else:
            mask = self._self_attention_mask(hidden_states, attention_mask, cache, position_ids, global_attention_mask)
            inputs = AttentionInputs(*open_fully_masked_queries(mask))
            if self.relative_position_bias is not None:
                key_length, key_offset = (
                    cache.get_mask_sizes(query_length, 0) if cache is not None else (query_length, 0)
                )
                bias = self.relative_position_bias(query_length, key_length, past_length, key_offset)
                bias = bias.to(attention_dtype(hidden_states))
                inputs.mask, inputs.position_bias = self._add_position_bias(inputs.mask, bias, batch_size)
        if self.rotary_embedding is not None:
            inputs.rotary = self.rotary_embedding(position_ids, hidden_states.dtype)
        return inputs

    def _attends_in_bands(
        self,
        batch_size: int,
        query_length: int,
        cache: Cache | None,
        global_attention_mask: torch.Tensor | None,
    ) -> bool:
        """Whether self-attention runs block by block (`BandedAttention`): with a sliding window and sdpa, when the
        queries attend to their own keys only (no cache, or a cache's first call) and the bands hold no more scores
        than a masked kernel computes (`BandGeometry.is_cheaper`). A program exported for a dynamic length takes
        transformers' mask, which serves every length with one graph (the bands' shapes depend on the length's
        multiples of a block). Global tokens, whose number depends on the values of the mask, take the masked path
        while compiling."""
        window = self.config.sliding_window
        if window is None or batch_size == 0 or self.config._attn_implementation != "sdpa":
            return False
        if torch.compiler.is_exporting() and not isinstance(query_length, int):
            return False
        if global_attention_mask is not None and torch.compiler.is_compiling():
            return False
        if cache is not None and (
            not isinstance(cache, Cache) or tuple(cache.get_mask_sizes(query_length, 0)) != (query_length, 0)
        ):
            return False  # keys other than the queries' own: decoding steps, a paged cache
        return BandGeometry(window, self.is_causal).is_cheaper(query_length)

    def _self_attention_mask(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Cache | None,
        position_ids: torch.Tensor,
        global_attention_mask: torch.Tensor | None,
    ):
        """transformers' mask of the self-attention, in the form the attention backend takes: causal or
        bidirectional, within `config.sliding_window` where it is set, global tokens added."""
        windowed = self.config.sliding_window is not None
        common = {"config": self.config, "inputs_embeds": hidden_states, "attention_mask": attention_mask}
        if self.is_causal:
            create = create_sliding_window_causal_mask if windowed else create_causal_mask
            # A position bias is added to the mask, so the causal pattern must be materialised.
            skip = self.relative_position_bias is None
            return create(**common, cache=cache, position_ids=position_ids, allow_is_causal_skip=skip)
        create = create_bidirectional_sliding_window_mask if windowed else create_bidirectional_mask
        overlay = global_tokens_overlay(global_attention_mask) if global_attention_mask is not None else None
        return create(**common, or_mask_function=overlay)

    def _cross_attention_inputs(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None,
    ) -> AttentionInputs:
        """What every layer's encoder-decoder attention reads: the source padding mask and the fully masked
        queries."""
        mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        return AttentionInputs(*open_fully_masked_queries(mask))

    def _add_position_bias(
        self, attention_mask, position_bias: torch.Tensor, batch_size: int
    ) -> tuple[torch.Tensor | object, torch.Tensor | None]:
        """Folds the position bias into the additive mask once for all layers. Returns `(mask, bias)`: flex attention
        takes the bias separately, indexed per batch row (its mask is a block mask), every other backend gets it
        inside the mask."""
        if "flex_attention" in self.config._attn_implementation:
            return attention_mask, position_bias.expand(batch_size, -1, -1, -1)
        if attention_mask is None:
            return position_bias, None
        if attention_mask.dtype == torch.bool:
            return torch.where(attention_mask, position_bias, torch.finfo(position_bias.dtype).min), None
        return attention_mask.to(position_bias.dtype) + position_bias, None


class AiaynPooler(nn.Module):
    """BERT's and ViT's pooler: a dense layer and tanh over the first position's final hidden state."""

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))


class AiaynClassificationHead(nn.Module):
    """Dropout and a linear map from pooled features to `num_outputs` scores (BERT's classifier)."""

    def __init__(self, config: AiaynConfig, num_outputs: int):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout_rate)
        self.out_proj = nn.Linear(config.d_model, num_outputs, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(hidden_states))


def last_token_index(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    pad_token_id: int | None,
    batch_size: int,
    seq_length: int,
    device: torch.device,
) -> torch.Tensor:
    """Index of each row's last real token: the last unmasked position (left or right padding), else the last
    non-pad token, else the last position."""
    if attention_mask is not None and attention_mask.dim() == 2:
        is_real = attention_mask.bool()
    elif input_ids is not None and pad_token_id is not None:
        is_real = input_ids != pad_token_id
    else:
        return torch.full((batch_size,), seq_length - 1, device=device)
    positions = torch.arange(seq_length, device=device)
    return (positions * is_real.to(device)).argmax(-1)


def with_global_tokens(kwargs: dict, global_attention_mask: torch.Tensor | None) -> dict:
    """A head's keyword arguments for its base model, with `global_attention_mask` where it was given."""
    return kwargs if global_attention_mask is None else {**kwargs, "global_attention_mask": global_attention_mask}


def carried_fields(outputs: ModelOutput, output_class: type[ModelOutput]) -> dict:
    """The fields of a base model's `outputs` that a head's `output_class` also has (hidden states, attentions, the
    cache, the encoder's outputs), so that a head returns what its base model returned."""
    return {name: value for name, value in outputs.items() if name in output_class.__dataclass_fields__}


class AiaynHeadModel(AiaynPreTrainedModel):
    """A task head on a family's base model, `self.model`. The heads below are written once for every family; a
    family builds its base model (`build_body`) and, where it differs, says how its base model reads a head's inputs
    (`base_model_outputs`) and which features stand for a whole sequence (`sequence_features`)."""

    def build_body(self, config: AiaynConfig, pooled: bool) -> AiaynPreTrainedModel:
        """The family's base model; `pooled` where a head reads a pooled sequence feature."""
        raise NotImplementedError(f"{type(self).__name__} does not build a base model for heads.")

    def base_model_outputs(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.LongTensor | None,
        position_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor | None,
        **kwargs,
    ) -> tuple[ModelOutput, torch.Tensor | None, torch.Tensor | None]:
        """Runs the base model on a head's inputs. Returns its output and the ids and mask of the sequence whose
        states it returns."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        return outputs, input_ids, attention_mask

    def sequence_features(
        self, outputs: ModelOutput, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The state of each row's last real token, which has seen the whole sequence (GPT-2, BART)."""
        hidden_states = outputs.last_hidden_state
        batch_size, seq_length = hidden_states.shape[:2]
        last = last_token_index(
            input_ids, attention_mask, self.config.pad_token_id, batch_size, seq_length, hidden_states.device
        )
        return hidden_states[torch.arange(batch_size, device=hidden_states.device), last]


class AiaynForSequenceClassification(AiaynHeadModel):
    """Classification or regression of whole sequences from the features that stand for them."""

    output_class: type[ModelOutput] = SequenceClassifierOutput

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=True)
        self.classifier = AiaynClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Class indices, or float targets for regression (`num_labels == 1`) and multi-label classification.
        global_attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Encoders only: 1 at global tokens (see `AiaynStack.forward`). With a sliding window, an encoder makes its
            pooled first token global unless this is given.
        """
        outputs, ids, mask = self.base_model_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            **with_global_tokens(kwargs, global_attention_mask),
        )
        logits = self.classifier(self.sequence_features(outputs, ids, mask))
        loss = sequence_classification_loss(logits, labels, self.config, **kwargs) if labels is not None else None
        return self.output_class(loss=loss, logits=logits, **carried_fields(outputs, self.output_class))


class AiaynForTokenClassification(AiaynHeadModel):
    """A label for every token (named entities, tagging)."""

    output_class: type[ModelOutput] = TokenClassifierOutput
    _keys_to_ignore_on_load_unexpected = [r"pooler"]

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=False)
        self.classifier = AiaynClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            A class index per token; -100 for tokens that have none.
        global_attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Encoders only: 1 at global tokens (see `AiaynStack.forward`).
        """
        kwargs["use_cache"] = False
        outputs, _, _ = self.base_model_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            **with_global_tokens(kwargs, global_attention_mask),
        )
        logits = self.classifier(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            check_labels_shape(labels, tuple(logits.shape[:2]), "one label per token")
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return self.output_class(loss=loss, logits=logits, **carried_fields(outputs, self.output_class))


class AiaynForQuestionAnswering(AiaynHeadModel):
    """Extractive question answering: start and end scores for every token (BERT on SQuAD)."""

    output_class: type[ModelOutput] = QuestionAnsweringModelOutput
    _keys_to_ignore_on_load_unexpected = [r"pooler"]

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=False)
        self.qa_outputs = nn.Linear(config.d_model, 2, bias=config.use_bias)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        r"""
        start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Token indices of the answer span; positions outside the sequence are ignored.
        global_attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Encoders only: 1 at global tokens, such as the question's (see `AiaynStack.forward`).
        """
        kwargs["use_cache"] = False
        outputs, _, _ = self.base_model_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            **with_global_tokens(kwargs, global_attention_mask),
        )
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return self.output_class(
            loss=loss,
            start_logits=start_logits.contiguous(),
            end_logits=end_logits.contiguous(),
            **carried_fields(outputs, self.output_class),
        )


class AiaynForMultipleChoice(AiaynHeadModel):
    """Scores each of `num_choices` candidate sequences from the features that stand for it (BERT on SWAG)."""

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=True)
        self.classifier = AiaynClassificationHead(config, 1)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`):
            One sequence per choice; the other inputs have the same leading dimensions.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Index of the correct choice.
        global_attention_mask (`torch.Tensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
            1 at global tokens (see `AiaynStack.forward`); with a sliding window, the pooled first token of each
            choice is global unless this is given.
        """
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, global_attention_mask)
        *one_sequence_per_row, global_attention_mask = [
            tensor.flatten(0, 1) if tensor is not None else None for tensor in inputs
        ]
        outputs, ids, mask = self.base_model_outputs(
            *one_sequence_per_row, **with_global_tokens(kwargs, global_attention_mask)
        )
        logits = self.classifier(self.sequence_features(outputs, ids, mask)).view(-1, num_choices)
        loss = None
        if labels is not None:
            check_labels_shape(labels, (len(logits),), "one choice index per example")
            loss = fixed_cross_entropy(logits, labels.to(logits.device), **kwargs)
        carried = carried_fields(outputs, MultipleChoiceModelOutput)
        return MultipleChoiceModelOutput(loss=loss, logits=logits, **carried)


class AiaynLanguageModel(AiaynPreTrainedModel):
    """A head that scores every vocabulary token at every position: the masked LM, the causal LM and the seq2seq LM
    (the paper's "learned linear transformation and softmax", section 3.4). They differ in what the projection to
    the vocabulary reads (`token_features`), where the projection is (`get_output_embeddings`), which label each
    position is scored on (`predicts_next_token`) and the loss transformers names for them (`loss_function`)."""

    labels_shape_description = "one label per token"  # the shape `labels` must have, as the error names it
    predicts_next_token = False  # whether position i is scored on label i + 1 (the causal LM)

    def token_features(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The states the projection reads: the final states, scaled by d_model^-0.5 under `scale_decoder_outputs`
        (T5's tied output projection)."""
        return hidden_states * self.config.d_model**-0.5 if self.config.scale_decoder_outputs else hidden_states

    def predict_tokens(
        self,
        hidden_states: torch.Tensor,
        labels: torch.LongTensor | None,
        skip_logits: bool | None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """`(logits, loss)` over the base model's final `hidden_states`. Without logits (`skips_logits`) the loss is
        `token_prediction_loss`, the same value and gradients as transformers' loss over the logits."""
        projection = self.get_output_embeddings()
        if labels is not None:
            check_labels_shape(labels, tuple(hidden_states.shape[:2]), self.labels_shape_description)
        if skips_logits(skip_logits, labels, self.training):
            if self.predicts_next_token:
                shift_labels = kwargs.pop("shift_labels", None)
                if shift_labels is None:  # as transformers' ForCausalLMLoss: position i is scored on label i + 1
                    shift_labels = nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
                labels = shift_labels
            return None, token_prediction_loss(hidden_states, labels, projection, self.token_features, **kwargs)
        # Sliced before the features: a prefill computes one row.
        logits = projection(self.token_features(slice_logits_to_keep(hidden_states, logits_to_keep)))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return logits, loss
