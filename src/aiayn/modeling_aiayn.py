"""The blocks every aiayn family is built from: norms, the feed-forward network, layers, embeddings and the stack.

Section and equation numbers refer to "Attention Is All You Need" (Vaswani et al., 2017). One `AiaynStack` is the
encoder of Figure 1 (bidirectional self-attention) or its decoder (causal self-attention, plus encoder-decoder
attention in seq2seq models); the families in `modeling_aiayn_{encoder,decoder,seq2seq,vision}.py` put heads on
stacks. Around this file: attention and its extension points in `attention_aiayn.py` (the variants, registered in
`attention_variants_aiayn.py`), positions in `positions_aiayn.py`, the heads every family shares in
`heads_aiayn.py`, the loading policy and the input checks in `policy_aiayn.py`, the losses in `losses_aiayn.py`, the
tensor-parallel styles of the fused projections in `tensor_parallel_aiayn.py`, the entries in transformers' tables of
class names in `name_tables_aiayn.py`.

This module imports nothing but torch, transformers and those modules: `save_pretrained` copies them next to the
weights so that a saved folder loads with `trust_remote_code=True` where aiayn is not installed.
"""

import torch
from torch import nn
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache, StaticCache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .attention_aiayn import (
    AiaynCrossAttention,
    AiaynSelfAttention,
    cached_length,
    prepare_attention_inputs,
    self_attention_cache,
)
from .attention_variants_aiayn import (
    PATTERN_INPUTS,
    attention_pattern_class,
    build_attention_score,
    check_attention_backend,
)
from .configuration_aiayn import AiaynConfig, AiaynTextConfig
from .docstrings_aiayn import shared_arguments
from .name_tables_aiayn import register_class_names
from .policy_aiayn import (
    AiaynCheckpointBase,
    check_continuous_batching,
    check_positions,
    check_stack_inputs,
    check_token_type_ids,
)
from .positions_aiayn import (
    AiaynRelativePositionBias,
    AiaynRotaryEmbedding,
    AiaynSinusoidalPositionEmbedding,
    inverse_frequencies,
    position_ids_from_mask,
)
from .tensor_parallel_aiayn import register_parallel_styles

register_parallel_styles()  # the styles `AiaynConfig.base_model_tp_plan` names


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
    """One layer of a stack (section 3.1): self-attention, encoder-decoder attention and the feed-forward network.

    Each sub-layer is wrapped in dropout and a residual connection (section 5.4), with the norm after the sum,
    `Norm(x + Dropout(Sublayer(x)))` (post-LN, the paper), or before the sub-layer, `x + Dropout(Sublayer(Norm(x)))`
    (pre-LN, `config.norm_first`). Each attention scores as `config.attention_score` says (`attention_variants_aiayn`).

    Args:
        config: The model's config.
        layer_idx: The layer's index in its stack (which its cache entries and pattern parameters are under).
        is_causal: Causal self-attention (a decoder's layer) rather than bidirectional.
        has_cross_attention: Add encoder-decoder attention (seq2seq decoders and decoders with
            `add_cross_attention`).
    """

    def __init__(self, config: AiaynConfig, layer_idx: int, is_causal: bool, has_cross_attention: bool):
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = AiaynSelfAttention(config, layer_idx, is_causal, build_attention_score(config))
        self.self_attn_norm = build_norm(config)
        if has_cross_attention:
            self.cross_attn = AiaynCrossAttention(config, layer_idx, build_attention_score(config))
            self.cross_attn_norm = build_norm(config)
        else:
            self.cross_attn = self.cross_attn_norm = None
        self.ffn = AiaynFeedForward(config)
        self.ffn_norm = build_norm(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        *prepared: torch.Tensor | object,
        prepared_structure: TreeSpec | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """`prepared`: what the stack prepared for self-attention and encoder-decoder attention (two
        `AttentionInputs`, the second None without encoder states), or, under gradient checkpointing, their leaves
        (rebuilt from `prepared_structure`), which reentrant checkpointing needs as positional tensors
        (`attention_aiayn.SharedByLayers`). Without them, full attention without positions inside the layer."""
        if prepared_structure is not None:
            prepared = tree_unflatten(prepared, prepared_structure)
        self_attention_inputs, cross_attention_inputs = prepared or (None, None)
        attended, _ = self.self_attn(
            self._norm_input(hidden_states, self.self_attn_norm),
            self_attention_inputs,
            self_attention_cache(cache),
            **kwargs,
        )
        hidden_states = self._add_residual(hidden_states, attended, self.self_attn_norm)
        if self.cross_attn is not None and encoder_hidden_states is not None:  # GPT-2's: no states, no cross-attention
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


class AiaynTokenEmbedding(nn.Embedding):
    """The token embedding table (section 3.4), shared by the stacks of a model and, when tied, by its LM head. A
    class of its own so that `_init_weights` tells it from the position and token-type tables: with scaled
    embeddings it starts at standard deviation d_model^-0.5."""


class AiaynEmbeddings(nn.Module):
    """The input of a text stack: token embeddings times sqrt(d_model) (section 3.4), plus absolute position encodings
    (section 3.5) and token-type embeddings (BERT), optionally normalised (BERT), then dropout (section 5.4)."""

    def __init__(self, config: AiaynTextConfig, embed_tokens: nn.Embedding):
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
        check_token_type_ids(token_type_ids, tuple(hidden_states.shape[:2]), self.token_type_embeddings)
        if self.token_type_embeddings is not None and token_type_ids is None:  # every token of type 0
            hidden_states = hidden_states + self.token_type_embeddings.weight[0]
        elif self.token_type_embeddings is not None:
            hidden_states = hidden_states + self.token_type_embeddings(token_type_ids)
        if isinstance(self.position_embeddings, nn.Embedding):  # learned: a table of max_position_embeddings rows
            check_positions(position_ids, self.position_embeddings.num_embeddings)
        if self.position_embeddings is not None:
            hidden_states = hidden_states + self.position_embeddings(position_ids).to(hidden_states.dtype)
        if self.norm is not None:
            hidden_states = self.norm(hidden_states)
        return self.dropout(hidden_states)


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
        if self.can_generate() and config.generation_defaults:
            self.generation_config.update(**config.generation_defaults, allow_custom_entries=True)
            # Saved as a generation config of its own, so that its custom entries (max_len_a, ...) load back.
            self.generation_config._from_model_config = False

    def init_parallel_plans(self):
        """transformers' plans (a stack takes `config.base_model_tp_plan`, as a built-in base model does; a model its
        stacks' plans under their names), the tensor-parallel one cut to the modules this model has: a stack without
        relative positions or encoder-decoder attention, a family's model above its stacks."""
        super().init_parallel_plans()
        modules = [name.split(".") for name, _ in self.named_modules()]
        present = {".".join("*" if part.isdigit() else part for part in parts) for parts in modules}
        self._tp_plan = {path: style for path, style in self._tp_plan.items() if path in present}

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

    def _check_and_adjust_attn_implementation(self, attn_implementation, is_init_check=False, **kwargs) -> str:
        """transformers' choice of the attention backend, refused where a chosen variant does not serve it
        (`check_attention_backend`): at load time, and when `set_attn_implementation` changes it."""
        implementation = super()._check_and_adjust_attn_implementation(attn_implementation, is_init_check, **kwargs)
        check_attention_backend(self.config, implementation)
        return implementation

    def _flash_attn_can_dispatch(self, flash_attn_version: int, is_init_check: bool = False) -> bool:
        if getattr(self.config, "position_embedding_type", None) == "relative":
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
        if hasattr(module, "initialize_parameters"):  # an attention variant's own parameters (additive scores' v)
            module.initialize_parameters()
        # Non-persistent buffers are not in the checkpoint: rebuild them after from_pretrained.
        if isinstance(module, AiaynSinusoidalPositionEmbedding):
            init.copy_(module.inv_freq, inverse_frequencies(module.d_model, 10000.0))
        elif isinstance(module, AiaynRotaryEmbedding):
            init.copy_(module.inv_freq, inverse_frequencies(module.head_dim, module.base))


class AiaynGenerationMixin(GenerationMixin):
    """`GenerationMixin` with the caches aiayn's attention needs, and continuous batching refused where it cannot run
    the model."""

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

    def _reorder_cache(self, cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search's reordering of the cache after each step, which `generate()` leaves to a model that has this
        method: the self-attention cache follows the beams; the encoder-decoder attention cache stays as it is.
        `generate()` repeats each source's encoder states for its beams, and a beam's new index is always one of the
        same source's beams, so every row that reordering would copy there holds the keys and values already in its
        place: beam search at batch 1 and beam 4 over a 512-token source would copy 4 MiB per layer and step."""
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache

    def init_continuous_batching(self, *args, **kwargs):
        """`GenerationMixin.init_continuous_batching` (behind `generate_batch` and `transformers serve
        --continuous-batching`), refused up front where it cannot run the model (`check_continuous_batching`)."""
        check_continuous_batching(self.config)
        return super().init_continuous_batching(*args, **kwargs)


def prepare_cache(
    config: AiaynConfig, cache: Cache | None, use_cache: bool | None, is_causal: bool, has_cross_attention: bool
) -> Cache | None:
    """The cache a stack reads and fills: none for a bidirectional stack; the given one; or, with `use_cache`, a
    `DynamicCache` with sliding-window layers where the config has a window (transformers reads
    `config.sliding_window`), wrapped with a full cache for encoder-decoder attention, which reads the whole source."""
    if not is_causal:
        return None
    if use_cache and cache is None:
        cache = DynamicCache(config=config)
        if has_cross_attention:
            cache = EncoderDecoderCache(cache, DynamicCache())
    return cache


class AiaynStack(AiaynPreTrainedModel):
    """Embeddings and `num_layers` layers (Figure 1).

    The encoder (bidirectional self-attention) or the decoder (causal self-attention and, with `has_cross_attention`,
    encoder-decoder attention). Pre-LN stacks end with a final norm. The attention pattern, the position bias
    (relative) and the rotation (rotary) are prepared once per call and shared by the layers.

    Args:
        config: The model's config.
        embed_tokens: The token table, or None for a stack that reads `inputs_embeds` as they are (the vision family,
            whose patches come embedded).
        num_layers: Number of layers.
        is_causal: Causal self-attention (a decoder) rather than bidirectional (an encoder).
        has_cross_attention: Give every layer encoder-decoder attention over `encoder_hidden_states`.

    Attributes:
        pooled: Whether a head reads the first token's final state for the whole sequence (BERT's pooler; the encoder
            family sets it for its pooled heads), which the attention pattern reads (`AttentionPatternInputs.pooled`).
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
        self.is_causal, self.has_cross_attention = is_causal, has_cross_attention
        self.pooled = False
        self.embeddings = AiaynEmbeddings(config, embed_tokens) if embed_tokens is not None else None
        positions = getattr(config, "position_embedding_type", None)
        relative = positions == "relative"
        self.relative_position_bias = AiaynRelativePositionBias(config, not is_causal) if relative else None
        self.rotary_embedding = AiaynRotaryEmbedding(config) if positions == "rotary" else None
        self.attention_pattern = attention_pattern_class(config, is_causal)(config, is_causal, num_layers)
        self.layers = nn.ModuleList(
            AiaynLayer(config, layer_idx, is_causal, has_cross_attention) for layer_idx in range(num_layers)
        )
        self.final_norm = build_norm(config) if config.norm_first else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding | None:
        return self.embeddings.embed_tokens if self.embeddings is not None else None

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.embed_tokens = value

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @merge_with_config_defaults
    @capture_outputs
    @shared_arguments
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
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Runs the embeddings and the layers.

        Args:
            encoder_hidden_states: The states encoder-decoder attention reads, of shape
                `(batch_size, source_length, d_model)` (stacks with `has_cross_attention`).
            **kwargs: transformers' keyword arguments: `output_attentions`, `output_hidden_states`, `return_dict`, and
                the loss's (`num_items_in_batch`); and the inputs the attention patterns read
                (`attention_variants_aiayn.PATTERN_INPUTS`, which the stack hands its pattern):
                `global_attention_mask`, bidirectional stacks only: 1 marks the global tokens (Longformer), which
                attend to every position and which every position attends to, whatever `sliding_window`; 0 the tokens
                that attend within their window. Shape `(batch_size, sequence_length)`.

        Returns:
            A `BaseModelOutputWithPastAndCrossAttentions` with `last_hidden_state`, `cache` and, when asked for,
                `hidden_states`, `attentions` and `cross_attentions`.
        """
        cache = prepare_cache(self.config, cache, use_cache, self.is_causal, self.has_cross_attention)
        past_length = cached_length(self_attention_cache(cache))
        source = (encoder_hidden_states, encoder_attention_mask)
        check_stack_inputs(self, input_ids, inputs_embeds, attention_mask, past_length, *source)
        if position_ids is None:
            tokens = input_ids if input_ids is not None else inputs_embeds
            position_ids = position_ids_from_mask(attention_mask, past_length, tokens.shape[1], tokens.device)
        hidden_states = inputs_embeds  # without a token table, the family embeds the inputs, positions included
        if self.embeddings is not None:
            hidden_states = self.embeddings(input_ids, inputs_embeds, position_ids, token_type_ids)
        pattern_inputs = {name: kwargs.pop(name, None) for name in PATTERN_INPUTS}
        attention = prepare_attention_inputs(
            self, hidden_states, attention_mask, cache, position_ids, *source, **pattern_inputs
        )
        prepared, structure = attention, None
        if self.gradient_checkpointing and self.training:  # the layers are recomputed from their positional tensors
            prepared, structure = tree_flatten(attention)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states, encoder_hidden_states, cache, *prepared, prepared_structure=structure, **kwargs
            )
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, cache=cache)
