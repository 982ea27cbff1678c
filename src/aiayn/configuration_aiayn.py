"""Configurations of the four aiayn families.

One configurable Transformer ("Attention Is All You Need", Vaswani et al., 2017) serves all four families: the
fields of `AiaynConfig` describe every knob of the shared blocks, `AiaynTextConfig` adds the vocabulary, the token
embeddings and the positions of tokens that the three text families share, and the family configs only add what
their family needs. The defaults are the paper's base model (Table 3, row "base"); the presets in `PRESETS` give the
paper's big model and the shapes of BERT, GPT-2 and T5.

This module imports transformers and, for the attention variants' fields, `attention_variants_aiayn` (torch and the
variants' modules): `save_pretrained` copies it and those modules next to the weights so that a saved folder loads
with `trust_remote_code=True` where aiayn is not installed.
"""

from typing import Literal

from huggingface_hub.dataclasses import as_validated_field, strict
from transformers import AutoConfig, GenerationConfig, PreTrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .attention_variants_aiayn import AttentionFields
from .field_validators_aiayn import dropout_probability, non_negative, positive, smoothing_factor

PositionEmbeddingType = Literal["sinusoidal", "learned", "relative", "rotary", "none"]
# Images: learned (ViT), the paper's sinusoids over the patch index, 2-D sinusoids (row and column), none.
VisionPositionType = Literal["learned", "sinusoidal", "sinusoidal_2d", "none"]
NormType = Literal["layernorm", "rmsnorm"]
# Whether this module is the installed aiayn package's, whose import registers aiayn's text-to-text pipeline for the
# tasks transformers 5 removed, or a folder's copy (loaded with trust_remote_code), which finds the pipeline through
# the config's `custom_pipelines` (see `AiaynSeq2SeqConfig`).
PIPELINES_REGISTERED_ON_IMPORT = __name__.startswith("aiayn.")
BASE_ACTIVATIONS = ("relu", "gelu", "gelu_new", "gelu_pytorch_tanh", "silu")
GATED_ACTIVATION_ALIASES = {"geglu": "gelu", "swiglu": "silu", "reglu": "relu"}
GATED_PREFIX = "gated-"


def split_activation(hidden_act: str) -> tuple[str, bool]:
    """Splits a `hidden_act` value into its activation and whether it is gated.

    `"relu"`, `"gelu"` (erf, BERT), `"gelu_new"` (the tanh approximation as GPT-2 and T5 compute it),
    `"gelu_pytorch_tanh"` (the same function in torch's fused kernel: faster and lighter in training, equal up to
    rounding) and `"silu"` are plain activations;
    `"geglu"`, `"swiglu"`, `"reglu"` and `"gated-<activation>"` are their gated forms `act(x W) * (x V)`
    (Shazeer, 2020). T5 v1.1 is `"gated-gelu_new"`.

    Args:
        hidden_act: A config's `hidden_act`.

    Returns:
        `(activation, is_gated)`.

    Examples:
        >>> split_activation("swiglu")
        ('silu', True)
        >>> split_activation("gated-gelu_new")
        ('gelu_new', True)
    """
    if hidden_act in GATED_ACTIVATION_ALIASES:
        return GATED_ACTIVATION_ALIASES[hidden_act], True
    if hidden_act.startswith(GATED_PREFIX):
        return hidden_act[len(GATED_PREFIX) :], True
    return hidden_act, False


@as_validated_field
def activation_name(value: str):
    if split_activation(value)[0] not in BASE_ACTIVATIONS:
        raise ValueError(
            f"Value must be one of {BASE_ACTIVATIONS}, {tuple(GATED_ACTIVATION_ALIASES)} or "
            f"'{GATED_PREFIX}<activation>', got {value!r}."
        )


@strict
class AiaynConfig(AttentionFields, PreTrainedConfig):
    r"""Fields shared by the four families: the stack's sizes, attention, layers and regularisation.

    Standard transformers names work as aliases: `hidden_size` (`d_model`), `num_attention_heads` (`num_heads`),
    `num_hidden_layers` (`num_layers`), `intermediate_size` (`d_ff`) and `head_dim` (`d_kv`). The fields come in four
    groups, in this order: sizes; attention; layers; regularisation and initialisation. The attention variants'
    fields (the score, `attention_score`, and each pattern's own, such as `sliding_window`) are declared with the
    variants, in `attention_variants_aiayn.AttentionFields`, which this class is built on.

    Attributes:
        d_model: Width of every sub-layer output and of the embeddings (the paper's d_model = 512).
        num_heads: Attention heads h (paper: 8).
        d_kv: Size of each head's queries, keys and values, d_k = d_v (paper: d_model / h = 64). Defaults to
            `d_model // num_heads`; T5 allows `num_heads * d_kv != d_model`.
        d_ff: Inner size of the position-wise feed-forward network, eq. (2) (paper: 2048).
        num_layers: Layers N of the (encoder) stack (paper: 6).
        scale_attention: Multiply QK^T by 1/sqrt(d_k) as in eq. (1). T5 folds the scale into its initialisation and
            turns it off.
        norm_first: False is the paper's and BERT's post-LN, `LayerNorm(x + Sublayer(x))`; True is GPT-2's and
            T5's pre-LN, `x + Sublayer(Norm(x))`, with a final norm after the stack.
        norm_type: `"layernorm"` (the paper, BERT, GPT-2) or `"rmsnorm"` (T5: no mean, no bias).
        layer_norm_eps: Epsilon of every norm (BERT 1e-12, GPT-2 1e-5, T5 1e-6).
        hidden_act: Activation of the feed-forward network: `"relu"` (the paper, T5 v1.0), `"gelu"` (BERT),
            `"gelu_new"` (GPT-2's formula), `"gelu_pytorch_tanh"` (the same function, fused), `"silu"`, or a gated
            form `"geglu"`, `"swiglu"`, `"reglu"`, `"gated-<act>"` (T5 v1.1: `"gated-gelu_new"`).
        use_bias: Biases in the linear projections and norms (the paper, BERT, GPT-2) or none (T5).
        dropout: Residual dropout on every sub-layer output and on the embedding sum (the paper's P_drop = 0.1).
        attention_dropout: Dropout on the attention probabilities.
        activation_dropout: Dropout after the feed-forward activation (T5).
        classifier_dropout: Dropout before classification heads; defaults to `dropout`.
        initializer_range: Standard deviation of the normal initialisation of weights. Token embeddings that are
            scaled by sqrt(d_model) are drawn with standard deviation d_model^-0.5 instead, as in the paper's
            tensor2tensor code, so that the scaled embeddings and the sinusoids have the same magnitude.

    Examples:
        >>> config = AiaynConfig(d_model=256, num_heads=4)
        >>> config.d_kv, config.hidden_size
        (64, 256)
    """

    model_type = ""
    # How `from_pretrained(tp_plan="auto")` shards a stack (Megatron's split), keyed from the stack as every
    # built-in config keys it from its base model: the projections into heads and into the feed-forward width
    # column-wise, each rank holding whole heads (the fused `qkv_proj` and `kv_proj` by `tensor_parallel_aiayn`'s
    # styles), the projections out of them row-wise (their outputs summed across the ranks), the token table by rows
    # of the vocabulary, the relative position table replicated, its gradient summed. Each model keeps the entries
    # of the modules it has (`AiaynPreTrainedModel.init_parallel_plans`).
    base_model_tp_plan = {
        "embeddings.embed_tokens": "embedding_rowwise",
        "relative_position_bias.embedding": "replicated_with_grad_allreduce",
        "layers.*.self_attn.qkv_proj": "aiayn_qkv_colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.cross_attn.q_proj": "colwise",
        "layers.*.cross_attn.kv_proj": "aiayn_kv_colwise",
        "layers.*.cross_attn.o_proj": "rowwise",
        "layers.*.ffn.gate_proj": "colwise",
        "layers.*.ffn.up_proj": "colwise",
        "layers.*.ffn.down_proj": "rowwise",
    }
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "intermediate_size": "d_ff",
        "head_dim": "d_kv",
    }

    d_model: int = positive(default=512)
    num_heads: int = positive(default=8)
    d_kv: int | None = positive(default=None)
    d_ff: int = positive(default=2048)
    num_layers: int = positive(default=6)

    scale_attention: bool = True

    norm_first: bool = False
    norm_type: NormType = "layernorm"
    layer_norm_eps: float = positive(default=1e-6)
    hidden_act: str = activation_name(default="relu")
    use_bias: bool = True

    dropout: float | int = dropout_probability(default=0.1)
    attention_dropout: float | int = dropout_probability(default=0.1)
    activation_dropout: float | int = dropout_probability(default=0.1)
    classifier_dropout: float | int | None = dropout_probability(default=None)
    initializer_range: float = non_negative(default=0.02)

    def __post_init__(self, **kwargs):
        # The parent sets aliases (hidden_size=...) and unknown kwargs first; the derived fields depend on them.
        super().__post_init__(**kwargs)
        if self.d_kv is None and self.d_model % self.num_heads == 0:
            self.d_kv = self.d_model // self.num_heads

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """`PreTrainedConfig.from_dict`, refusing a config saved for another model type: transformers only warns,
        and the layers of one family load into another's without a missing weight, giving a silently wrong model."""
        saved_type = config_dict.get("model_type")
        if cls.model_type and saved_type and saved_type != cls.model_type:
            if saved_type.startswith("aiayn_"):
                remedy = "Load it with its own family's classes, or with an Auto class that picks them."
            else:
                remedy = (
                    f"To start from a transformers {saved_type!r} checkpoint, convert it first: "
                    "aiayn.conversion.convert_checkpoint(source, destination) or `aiayn convert SOURCE DESTINATION`."
                )
            raise ValueError(
                f"The config is of model_type {saved_type!r}, but {cls.__name__} builds {cls.model_type!r} models. "
                + remedy
            )
        return super().from_dict(config_dict, **kwargs)

    # Class validators: `@strict` runs every `validate_*` method (transformers' own too) at construction, and
    # `save_pretrained` runs them again.
    def validate_architecture(self):
        """The heads' size."""
        super().validate_architecture()
        if self.d_kv is None:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) unless d_kv is given."
            )

    # The kinds of stacks the family's models have (`AttentionPattern.stacks`).
    attention_stacks = ("bidirectional",)

    @property
    def is_gated_act(self) -> bool:
        return split_activation(self.hidden_act)[1]

    @property
    def activation(self) -> str:
        """The activation function of `hidden_act` without its gate."""
        return split_activation(self.hidden_act)[0]

    @property
    def classifier_dropout_rate(self) -> float:
        return self.dropout if self.classifier_dropout is None else self.classifier_dropout


@strict
class AiaynTextConfig(AiaynConfig):
    r"""Fields of the three text families (encoder, decoder, seq2seq): the vocabulary, the token embeddings, the
    positions of tokens and the special tokens, besides those of `AiaynConfig`.

    Attributes:
        vocab_size: Number of tokens; the paper's WMT'14 En-De model shares a 37000-token BPE vocabulary.
        max_position_embeddings: Rows of the learned position table; for the other position types, the longest
            sequence the model was trained for (they run past it).
        position_embedding_type: `"sinusoidal"` (the paper, section 3.5), `"learned"` (BERT, GPT-2; also the
            paper's Table 3 row E), `"relative"` (T5's bucketed bias added to the attention logits, one table per
            stack shared by its layers), `"rotary"` (RoPE, Su et al. 2021) or `"none"`.
        relative_attention_num_buckets: T5's number of relative-position buckets (32); only with relative positions.
        relative_attention_max_distance: T5's largest distance told apart by the buckets (128); only with relative
            positions.
        rope_theta: Base of the rotary frequencies (10000, as the paper's sinusoids); only with rotary positions.
        scale_embedding: Multiply token embeddings by sqrt(d_model) (the paper, section 3.4).
        embedding_norm: Normalise the sum of token, position and token-type embeddings (BERT).
        type_vocab_size: Number of token types (BERT's segment embeddings: 2); 0 for none.
        tie_word_embeddings: Share the pre-softmax projection with the token embeddings (the paper, GPT-2, T5).
        scale_decoder_outputs: Multiply the last hidden states by d_model^-0.5 before the tied LM head (T5 v1.0).
        label_smoothing: Label smoothing of the language-model heads' loss in training mode (the paper's
            epsilon_ls = 0.1, section 5.4; BLIP's field): each target keeps 1 - epsilon of its probability and the
            rest is spread evenly over the vocabulary. The loss is computed without the batch's logits
            (`losses_aiayn.token_prediction_loss`), where the `Trainer`'s `label_smoothing_factor` smooths the full
            logits (the same loss, in more time and memory); in evaluation (`model.eval()`) the loss is the plain
            cross-entropy.
        pad_token_id: The padding token.
        bos_token_id: The token that begins a sequence.
        eos_token_id: The token that ends a sequence: one id, or a list of ids that all end generation.
    """

    model_type = ""

    vocab_size: int = positive(default=37000)
    max_position_embeddings: int = positive(default=512)

    position_embedding_type: PositionEmbeddingType = "sinusoidal"
    relative_attention_num_buckets: int | None = positive(default=None)
    relative_attention_max_distance: int | None = positive(default=None)
    rope_theta: float | int | None = positive(default=None)

    scale_embedding: bool = True
    embedding_norm: bool = False
    type_vocab_size: int = non_negative(default=0)
    tie_word_embeddings: bool = True
    scale_decoder_outputs: bool = False
    label_smoothing: float | int = smoothing_factor(default=0.0)

    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.position_embedding_type == "relative":
            self.relative_attention_num_buckets = self.relative_attention_num_buckets or 32
            self.relative_attention_max_distance = self.relative_attention_max_distance or 128
        if self.position_embedding_type == "rotary" and self.rope_theta is None:
            self.rope_theta = 10000.0

    def validate_architecture(self):
        """The heads' size and the sizes the position encodings pair up."""
        super().validate_architecture()
        if self.position_embedding_type == "rotary" and self.d_kv % 2:
            raise ValueError(f"rotary positions rotate pairs of features: d_kv must be even, got {self.d_kv}.")
        if self.position_embedding_type == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions pair sines and cosines: d_model must be even, got {self.d_model}.")

    def validate_position_options(self):
        """The options of one position type are set with that type only."""
        options = {
            "relative_attention_num_buckets": "relative",
            "relative_attention_max_distance": "relative",
            "rope_theta": "rotary",
        }
        for name, position_type in options.items():
            if getattr(self, name) is not None and self.position_embedding_type != position_type:
                raise ValueError(
                    f"{name} is set ({getattr(self, name)}) but position_embedding_type is "
                    f"{self.position_embedding_type!r}; it only applies to position_embedding_type={position_type!r}."
                )

    def validate_special_tokens(self):
        """Every `*_token_id` is None or a token of the vocabulary. (transformers' `validate_token_ids` only warns,
        for the hub's old configs; an embedding lookup out of range fails far from its cause.)"""
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not name.endswith("_token_id") or value is None:
                continue
            ids = value if isinstance(value, list) else [value]
            if not all(0 <= i < self.vocab_size for i in ids):
                raise ValueError(f"{name} must be None or a token id in [0, {self.vocab_size}), got {value!r}.")


@strict
class AiaynEncoderConfig(AiaynTextConfig):
    """BERT-style encoder-only models: a bidirectional stack with masked-LM and classification heads.

    The defaults build the paper's base encoder stack (section 3.1, Table 3 "base"), not BERT: 6 post-LN layers,
    d_model 512, 8 heads of 64, d_ff 2048, ReLU, sinusoidal positions added to token embeddings scaled by
    sqrt(d_model), a vocabulary of 37000 tokens, no token types, and dropout 0.1 on the residuals, the attention
    probabilities and the feed-forward activations. `preset_config("bert-base")` gives BERT-base (12 post-LN layers,
    d_model 768, 12 heads, d_ff 3072, erf GELU, learned positions, two token types and an embedding norm, a 30522-token
    vocabulary), `preset_config("tiny-encoder")` the same choices at test size (2 layers, d_model 64).

    Examples:
        >>> import torch
        >>> from transformers import AutoModel
        >>> from aiayn import AiaynEncoderConfig
        >>> default = AiaynEncoderConfig()  # the paper's base encoder stack
        >>> default.num_layers, default.hidden_size, default.norm_first, default.position_embedding_type
        (6, 512, False, 'sinusoidal')
        >>> config = AiaynEncoderConfig(vocab_size=100, d_model=32, num_heads=4, d_ff=64, num_layers=2)
        >>> config.hidden_size, config.num_attention_heads, config.d_kv
        (32, 4, 8)
        >>> model = AutoModel.from_config(config)  # an AiaynEncoderModel
        >>> model(input_ids=torch.tensor([[2, 17, 4, 45, 3]])).last_hidden_state.shape
        torch.Size([1, 5, 32])
    """

    model_type = "aiayn_encoder"


@strict
class AiaynGenerativeConfig(AiaynTextConfig):
    """Fields of the families that generate text, besides those of `AiaynTextConfig`.

    Attributes:
        use_cache: Return keys and values of past positions (a `Cache`) so that decoding reuses them.
        generation_defaults: `GenerationConfig` fields that models built from this config start with in
            `model.generation_config` (the paper presets: beam search of width 4 with length penalty 0.6). A saved
            `generation_config.json` takes precedence.
    """

    model_type = ""
    use_cache: bool = True
    generation_defaults: dict | None = None
    # Entries of `generation_defaults` that are not `GenerationConfig` fields but which the family's `generate` reads.
    custom_generation_fields = ()

    def validate_generation_defaults(self):
        """`generation_defaults` are generation parameters that `GenerationConfig` accepts (strictly)."""
        if self.generation_defaults is None:
            return
        known = GenerationConfig()
        unknown = [
            key
            for key in self.generation_defaults
            if not hasattr(known, key) and key not in self.custom_generation_fields
        ]
        if unknown:
            raise ValueError(f"generation_defaults has entries that are not generation parameters: {unknown}.")
        try:
            GenerationConfig(**self.generation_defaults).validate(strict=True)
        except ValueError as error:
            raise ValueError(f"generation_defaults are invalid: {error}") from error


@strict
class AiaynDecoderConfig(AiaynGenerativeConfig):
    """GPT-style decoder-only models: a causal stack with a language-model head.

    The defaults build the paper's base decoder stack without its encoder-decoder attention: 6 post-LN layers,
    d_model 512, 8 heads of 64, d_ff 2048, ReLU, sinusoidal positions added to token embeddings scaled by
    sqrt(d_model), a vocabulary of 37000 tokens shared with the output projection, and dropout 0.1 on the residuals,
    the attention probabilities and the feed-forward activations; `generate()` decodes greedily unless
    `generation_defaults` say otherwise. `preset_config("gpt2-small")` gives GPT-2 small (12 pre-LN layers, d_model
    768, 12 heads, d_ff 3072, tanh GELU, 1024 learned positions, a 50257-token vocabulary),
    `preset_config("tiny-decoder")` the same choices at test size (2 layers, d_model 64).

    Attributes:
        add_cross_attention: Give every layer encoder-decoder attention (the seq2seq decoder's blocks, section
            3.2.3), as GPT-2's and BERT's field does: the model then reads `encoder_hidden_states`, as the decoder of
            transformers' `EncoderDecoderModel` and `VisionEncoderDecoderModel` (which set it) does.
        is_decoder: True, as transformers' wrappers set it. A GPT-style stack is causal whatever the field says:
            `False` (transformers' generic testers and GPT-2's config pass it) builds the same causal decoder.

    Examples:
        >>> import torch
        >>> from transformers import AutoModelForCausalLM
        >>> from aiayn import AiaynDecoderConfig
        >>> config = AiaynDecoderConfig(vocab_size=100, d_model=32, num_heads=4, d_ff=64, num_layers=2)
        >>> config.hidden_size, config.num_hidden_layers, config.is_decoder
        (32, 2, True)
        >>> model = AutoModelForCausalLM.from_config(config)  # an AiaynDecoderForCausalLM
        >>> model(input_ids=torch.tensor([[5, 17, 42]])).logits.shape
        torch.Size([1, 3, 100])
    """

    model_type = "aiayn_decoder"
    add_cross_attention: bool = False
    is_decoder: bool = True

    attention_stacks = ("causal",)


@strict
class AiaynSeq2SeqConfig(AiaynGenerativeConfig):
    """T5-style encoder-decoder models; the defaults are the paper's base translation model.

    The defaults build the model of the paper's Figure 1 at Table 3's base size: an encoder and a decoder stack of 6
    post-LN layers each, d_model 512, 8 heads of 64, d_ff 2048, ReLU, sinusoidal positions, and one 37000-token
    vocabulary for source, target and the output projection, its embeddings scaled by sqrt(d_model); dropout 0.1 on
    the residuals, the attention probabilities and the feed-forward activations; greedy decoding.
    `preset_config("transformer-base")` is the paper's model exactly (dropout on the residuals and embeddings only;
    beam search of width 4, length penalty 0.6, at most the source length + 50 tokens), `"transformer-big"` its big
    model, `"t5-small"` T5-small's shape and choices (relative position buckets, pre-RMSNorm, no biases, a
    32128-token vocabulary), `"tiny"` the paper's choices at test size (2 + 2 layers, d_model 64).

    Attributes:
        is_encoder_decoder: True: an encoder stack and a decoder stack.
        num_decoder_layers: Layers of the decoder stack; defaults to `num_layers`.
        decoder_start_token_id: First decoder input, to which labels are shifted right (T5 and Marian use the pad
            token).
        generation_defaults: As in `AiaynGenerativeConfig`, and may also hold `max_len_a` and `max_len_b`: each
            output is then at most `max_len_a * source_length + max_len_b` tokens long (the paper: input length +
            50).

    The encoder and the decoder always share one token embedding (the paper's shared source-target vocabulary);
    `tie_word_embeddings` also shares it with the pre-softmax projection, the paper's three-way sharing.

    A saved folder's config names aiayn's text-to-text pipeline in `custom_pipelines`, for processes where aiayn is not
    installed (the folder's copy of this module keeps it). The installed aiayn's config drops it: `import aiayn`
    registers that pipeline for the tasks, and `pipeline(task, model=folder)` then needs no `trust_remote_code`.

    Examples:
        >>> import torch
        >>> from transformers import AutoModelForSeq2SeqLM
        >>> from aiayn import AiaynSeq2SeqConfig, preset_config
        >>> config = AiaynSeq2SeqConfig(vocab_size=100, d_model=32, num_heads=4, d_ff=64, num_layers=2)
        >>> config.hidden_size, config.num_decoder_layers, config.decoder_start_token_id
        (32, 2, 0)
        >>> model = AutoModelForSeq2SeqLM.from_config(config).eval()  # an AiaynSeq2SeqForConditionalGeneration
        >>> model(input_ids=torch.tensor([[12, 7, 30, 2]]), labels=torch.tensor([[44, 9, 2]])).logits.shape
        torch.Size([1, 3, 100])
        >>> preset_config("transformer-base").generation_defaults["num_beams"]
        4
    """

    model_type = "aiayn_seq2seq"
    attention_stacks = ("bidirectional", "causal")
    custom_generation_fields = ("max_len_a", "max_len_b")
    is_encoder_decoder: bool = True
    num_decoder_layers: int | None = positive(default=None)
    decoder_start_token_id: int = 0

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        if PIPELINES_REGISTERED_ON_IMPORT and getattr(self, "custom_pipelines", None):
            # aiayn's registered pipeline serves these tasks, without trust_remote_code (save_pretrained names the
            # folder's copy again, for processes without aiayn).
            del self.custom_pipelines

    def get_text_config(self, decoder=None, encoder=None) -> "AiaynSeq2SeqConfig":
        """With `decoder=True`, a copy whose `num_layers` is the decoder's, which is what caches are sized from."""
        if decoder and not encoder:
            config = object.__new__(type(self))  # a shallow copy: only num_layers differs
            config.__dict__.update(self.__dict__, num_layers=self.num_decoder_layers)
            return config
        return self


@strict
class AiaynVisionConfig(AiaynConfig):
    """ViT-style image models (Dosovitskiy et al., 2021): an image cut into `patch_size` x `patch_size` patches, each
    projected to d_model, is the sequence the encoder stack reads.

    The defaults build ViT's choices at the paper's base sizes: 224 x 224 RGB images in 16 x 16 patches (196 patches
    after a class token, whose final state stands for the image), 6 pre-LN layers, d_model 512, 8 heads of 64, d_ff
    2048, erf GELU, LayerNorm eps 1e-12, learned positions, no dropout. `preset_config("vit-base")` gives ViT-Base/16
    (12 layers, d_model 768, 12 heads, d_ff 3072), `preset_config("tiny-vision")` 32 x 32 images in 4 x 4 patches at
    test size (2 layers, d_model 64).

    Attributes:
        image_size: Side of the (square) images the model is built for, in pixels; `interpolate_pos_encoding=True`
            runs other sizes.
        patch_size: Side of a patch; `image_size` must be a multiple of it.
        num_channels: Channels of the input images (3 for RGB).
        pooling: `"cls"` (ViT: a learned class token first in the sequence, whose final state stands for the image)
            or `"mean"` (the mean of the patches' final states, without a class token).
        encoder_stride: The upsampling factor of the masked-image-modelling decoder; defaults to `patch_size`, which
            it must equal for the reconstruction to have the image's size.
        position_embedding_type: `"learned"` (ViT: one vector per patch, interpolated bicubically for other sizes),
            `"sinusoidal"` (the paper's encodings over the patch index), `"sinusoidal_2d"` (half of the channels
            encode the patch's row, half its column, each with the paper's sinusoids) or `"none"`.
        norm_first: As in `AiaynConfig`; True here (ViT's pre-LN).
        layer_norm_eps: As in `AiaynConfig`; 1e-12 here (ViT).
        hidden_act: As in `AiaynConfig`; `"gelu"` here (ViT).
        dropout: As in `AiaynConfig`; 0 here (ViT).
        attention_dropout: As in `AiaynConfig`; 0 here (ViT).
        activation_dropout: As in `AiaynConfig`; 0 here (ViT).

    Examples:
        >>> import torch
        >>> from transformers import AutoModelForImageClassification
        >>> from aiayn import AiaynVisionConfig
        >>> config = AiaynVisionConfig(image_size=32, patch_size=8, d_model=32, num_heads=4, d_ff=64, num_labels=3)
        >>> config.hidden_size, config.grid_size, config.max_position_embeddings  # 4 x 4 patches and a class token
        (32, 4, 17)
        >>> model = AutoModelForImageClassification.from_config(config)  # an AiaynVisionForImageClassification
        >>> model(pixel_values=torch.rand(2, 3, 32, 32)).logits.shape
        torch.Size([2, 3])
    """

    model_type = "aiayn_vision"
    image_size: int = positive(default=224)
    patch_size: int = positive(default=16)
    num_channels: int = positive(default=3)
    pooling: Literal["cls", "mean"] = "cls"
    encoder_stride: int | None = positive(default=None)
    position_embedding_type: VisionPositionType = "learned"
    norm_first: bool = True
    layer_norm_eps: float = positive(default=1e-12)
    hidden_act: str = activation_name(default="gelu")
    dropout: float | int = dropout_probability(default=0.0)
    attention_dropout: float | int = dropout_probability(default=0.0)
    activation_dropout: float | int = dropout_probability(default=0.0)

    # Text fields that vision folders saved before the text config base carry; the image geometry now gives the
    # sequence length (`max_position_embeddings`), and the others never applied to images.
    TEXT_FIELDS_OF_EARLIER_FOLDERS = (
        "vocab_size", "type_vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "max_position_embeddings",
        "relative_attention_num_buckets", "relative_attention_max_distance", "rope_theta", "scale_embedding",
        "scale_decoder_outputs", "embedding_norm", "tie_word_embeddings",
    )  # fmt: skip

    def __post_init__(self, **kwargs):
        for field_name in self.TEXT_FIELDS_OF_EARLIER_FOLDERS:
            kwargs.pop(field_name, None)
        super().__post_init__(**kwargs)
        if self.encoder_stride is None:
            self.encoder_stride = self.patch_size

    def validate_image_geometry(self):
        """Patches tile the image; sinusoids pair sines and cosines, and 2-D sinusoids split the channels in four
        (sine and cosine, row and column)."""
        if self.position_embedding_type == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions pair sines and cosines: d_model must be even, got {self.d_model}.")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size}): the patches "
                "tile the image."
            )
        if self.position_embedding_type == "sinusoidal_2d" and self.d_model % 4:
            raise ValueError(
                f"sinusoidal_2d positions give half of the channels to rows and half to columns, each as sine and "
                f"cosine pairs: d_model must be a multiple of 4, got {self.d_model}."
            )

    @property
    def grid_size(self) -> int:
        """Patches along each side of an image of `image_size`."""
        return self.image_size // self.patch_size

    @property
    def max_position_embeddings(self) -> int:
        """The length of the sequence the stack reads from an image of `image_size`: its patches, and the class
        token (what Linformer's projection spans)."""
        return self.grid_size**2 + (1 if self.pooling == "cls" else 0)


FAMILY_CONFIGS = {
    "encoder": AiaynEncoderConfig,
    "decoder": AiaynDecoderConfig,
    "seq2seq": AiaynSeq2SeqConfig,
    "vision": AiaynVisionConfig,
}


def register_configs() -> None:
    """Enters each family's config in transformers' table of model types (`AutoConfig`) unless one is there (the
    installed aiayn's, which `import aiayn` registers, or another folder's copy): a folder's copy of this module,
    loaded with `trust_remote_code=True` where aiayn is not installed, then lets transformers' composite models
    (`EncoderDecoderModel`, `VisionEncoderDecoderModel`) build their aiayn parts' configs, as with aiayn imported."""
    for config_class in FAMILY_CONFIGS.values():
        if config_class.model_type not in CONFIG_MAPPING:
            AutoConfig.register(config_class.model_type, config_class)


register_configs()

# The paper's models, value by value. Section 3.4: one token table for source and target, tied to the output
# projection and scaled by sqrt(d_model); 3.5: sinusoidal positions; 3.1: post-LN residual blocks. Section 5.4 names
# two dropouts, "to the output of each sub-layer, before it is added to the sub-layer input and normalized" and "to
# the sums of the embeddings and the positional encodings" (`dropout`), and no other: attention and activation
# dropout are 0. P_drop is 0.1 for base and 0.3 for big (Table 3; section 6.1 lowers it to 0.1 for English-French
# only). Section 5.1: "a shared source-target vocabulary of about 37000 tokens" (English-German). The training
# recipe (Adam 0.9 / 0.98 / 1e-9, warmup 4000, eq. 3, label smoothing 0.1; sections 5.3, 5.4) is
# `recipes.PaperRecipe`; the decoding (beam 4, alpha 0.6, source length + 50; section 6.1) is PAPER_DECODING.
_PAPER = {
    "position_embedding_type": "sinusoidal",
    "norm_first": False,
    "scale_embedding": True,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
}
# Section 6.1: "beam search with a beam size of 4 and length penalty alpha = 0.6 ... maximum output length during
# inference to input length + 50, but terminate early when possible": the search ends once 4 hypotheses have ended
# (`early_stopping=True`; transformers' default, False, searches on while an unfinished beam could score better).
PAPER_DECODING = {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "max_len_a": 1, "max_len_b": 50}
_BERT = {
    "position_embedding_type": "learned",
    "norm_first": False,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "scale_embedding": False,
    "embedding_norm": True,
    "type_vocab_size": 2,
    "activation_dropout": 0.0,
}
_GPT2 = {
    "position_embedding_type": "learned",
    "norm_first": True,
    "layer_norm_eps": 1e-5,
    "hidden_act": "gelu_pytorch_tanh",  # GPT-2's tanh GELU in one fused kernel; converted GPT-2 weights use gelu_new
    "scale_embedding": False,
    "activation_dropout": 0.0,
}
_T5 = {
    "position_embedding_type": "relative",
    "norm_first": True,
    "norm_type": "rmsnorm",
    "layer_norm_eps": 1e-6,
    "use_bias": False,
    "scale_attention": False,
    "scale_embedding": False,
    "scale_decoder_outputs": True,
}

# name -> (family, fields). The paper's values are Table 3's rows "base" and "big"; the others are the shapes of the
# public checkpoints of BERT, GPT-2 and T5, so that converted weights fit.
PRESETS: dict[str, tuple[str, dict]] = {
    "transformer-base": (
        "seq2seq",
        {
            **_PAPER,
            "vocab_size": 37000,
            "d_model": 512,
            "d_ff": 2048,
            "num_heads": 8,
            "num_layers": 6,
            "num_decoder_layers": 6,
            "dropout": 0.1,
            "generation_defaults": PAPER_DECODING,
        },
    ),
    "transformer-big": (
        "seq2seq",
        {
            **_PAPER,
            "vocab_size": 37000,
            "d_model": 1024,
            "d_ff": 4096,
            "num_heads": 16,
            "num_layers": 6,
            "num_decoder_layers": 6,
            "dropout": 0.3,
            "generation_defaults": PAPER_DECODING,
        },
    ),
    "bert-base": (
        "encoder",
        {
            **_BERT,
            "vocab_size": 30522,
            "d_model": 768,
            "d_ff": 3072,
            "num_heads": 12,
            "num_layers": 12,
            "max_position_embeddings": 512,
        },
    ),
    "gpt2-small": (
        "decoder",
        {
            **_GPT2,
            "vocab_size": 50257,
            "d_model": 768,
            "d_ff": 3072,
            "num_heads": 12,
            "num_layers": 12,
            "max_position_embeddings": 1024,
            "pad_token_id": None,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
        },
    ),
    "t5-small": (
        "seq2seq",
        {
            **_T5,
            "vocab_size": 32128,
            "d_model": 512,
            "d_ff": 2048,
            "num_heads": 8,
            "d_kv": 64,
            "num_layers": 6,
            "num_decoder_layers": 6,
            "pad_token_id": 0,
            "bos_token_id": None,
            "eos_token_id": 1,
            "decoder_start_token_id": 0,
        },
    ),
    "tiny": (
        "seq2seq",
        {
            **_PAPER,
            "vocab_size": 1000,
            "d_model": 64,
            "d_ff": 256,
            "num_heads": 4,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "max_position_embeddings": 256,
        },
    ),
    "tiny-encoder": (
        "encoder",
        {
            **_BERT,
            "vocab_size": 1000,
            "d_model": 64,
            "d_ff": 256,
            "num_heads": 4,
            "num_layers": 2,
            "max_position_embeddings": 256,
        },
    ),
    "tiny-decoder": (
        "decoder",
        {
            **_GPT2,
            "vocab_size": 1000,
            "d_model": 64,
            "d_ff": 256,
            "num_heads": 4,
            "num_layers": 2,
            "max_position_embeddings": 256,
        },
    ),
    # ViT-B/16 (the vision config's defaults are ViT's choices).
    "vit-base": (
        "vision",
        {"image_size": 224, "patch_size": 16, "d_model": 768, "d_ff": 3072, "num_heads": 12, "num_layers": 12},
    ),
    "tiny-vision": (
        "vision",
        {"image_size": 32, "patch_size": 4, "d_model": 64, "d_ff": 128, "num_heads": 4, "num_layers": 2},
    ),
}


def preset_config(name: str, **overrides) -> AiaynConfig:
    """The config of preset `name` (see `PRESETS`), of the right family, with `overrides` applied.

    Args:
        name: One of `PRESETS`: `"transformer-base"` and `"transformer-big"` (the paper's Table 3), `"bert-base"`,
            `"gpt2-small"`, `"t5-small"`, `"vit-base"`, and the test sizes `"tiny"`, `"tiny-encoder"`,
            `"tiny-decoder"` and `"tiny-vision"`.
        **overrides (Any): Config fields that replace the preset's values.

    Returns:
        A config of the preset's family (`AiaynSeq2SeqConfig`, `AiaynEncoderConfig`, `AiaynDecoderConfig` or
            `AiaynVisionConfig`).

    Raises:
        ValueError: For a name that is not a preset.

    Examples:
        >>> preset_config("transformer-base").d_model
        512
        >>> preset_config("gpt2-small", num_layers=2).model_type
        'aiayn_decoder'
    """
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; the presets are {sorted(PRESETS)}.")
    family, fields = PRESETS[name]
    fields = {key: dict(value) if isinstance(value, dict) else value for key, value in {**fields, **overrides}.items()}
    return FAMILY_CONFIGS[family](**fields)


__all__ = [
    "AiaynConfig",
    "AiaynTextConfig",
    "AiaynEncoderConfig",
    "AiaynDecoderConfig",
    "AiaynSeq2SeqConfig",
    "AiaynVisionConfig",
    "PRESETS",
    "preset_config",
]
