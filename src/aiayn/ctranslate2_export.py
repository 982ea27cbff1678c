"""Export to CTranslate2, the inference engine of OpenNMT built for the paper's Transformer: int8 weights, fused
kernels and its own beam search, on CPUs and GPUs.

`ctranslate2_spec(model, tokenizer)` describes an aiayn model with the engine's Python spec API
(`ctranslate2.specs`): a seq2seq language model becomes a `TransformerSpec` (run by `ctranslate2.Translator`), a
decoder language model a `TransformerDecoderModelSpec` (`ctranslate2.Generator`), an encoder a
`TransformerEncoderModelSpec` (`ctranslate2.Encoder`: last hidden states and BERT's pooled output). Every option of
the config maps onto a field of the spec or is refused by name (`unsupported_options`); the vocabulary is the
tokenizer's, in id order. `export_ctranslate2(folder, output_dir, quantization)` writes the engine's model folder
(model.bin, config.json, the vocabulary) with the tokenizer and the generation config beside it, so that the folder
alone tokenizes and decodes with the model's defaults.

The paper's sinusoids are written out as a table of `max_positions` rows: the engine's own sinusoids are OpenNMT's
(positions from 1, frequencies `10000^(-i / (d/2 - 1))`), not section 3.5's.
"""

import os
import shutil
import tempfile

import numpy
import torch
import transformers
from torch import nn

from .attention_aiayn import DotProductScore, FullAttention
from .attention_variants_aiayn import ATTENTION_PATTERNS, ATTENTION_SCORES
from .extras import extra_module
from .families import family_of
from .modeling_aiayn import AiaynRMSNorm, AiaynStack

# The weight types of `export_ctranslate2`: float32, or int8 weights with one scale per output row (the engine
# computes int8 x int8 products; int8_float32 is the same model, run with float32 for what is not quantized).
QUANTIZATIONS = ("float32", "int8", "int8_float32")
# Families -> (the engine's class that runs the export, the Auto class of the head it needs).
RUNNERS = {
    "seq2seq": ("Translator", transformers.AutoModelForSeq2SeqLM),
    "decoder": ("Generator", transformers.AutoModelForCausalLM),
    "encoder": ("Encoder", transformers.AutoModel),
}
# aiayn's activations -> the engine's (`ctranslate2.specs.common_spec.Activation`): erf GELU, the tanh GELU, SiLU.
ACTIVATIONS = {
    "relu": "RELU", "gelu": "GELU", "gelu_new": "GELUTanh", "gelu_pytorch_tanh": "GELUTanh", "silu": "SWISH"
}  # fmt: skip


def _ctranslate2():
    return extra_module("ctranslate2", "ctranslate2", "Exporting to CTranslate2", "ctranslate2")


def unsupported_options(config) -> list[str]:
    """The options of `config` that CTranslate2's Transformer cannot express, each with why; empty if it can."""
    family = family_of(config.model_type)
    if family not in RUNNERS:
        return [f"model_type={config.model_type!r}: the engine runs text encoders, decoders and encoder-decoders only"]
    refused = attention_refusals(config)
    if config.position_embedding_type == "relative" and family == "decoder":
        refused.append(
            "position_embedding_type='relative' in a decoder-only model: the engine's Generator reads a prompt "
            "through its cache with the bias of a single query (T5's decoders start from one token), which places "
            "the prompt's positions wrongly"
        )
    if config.type_vocab_size and family != "encoder":
        refused.append(
            f"type_vocab_size={config.type_vocab_size}: the engine's decoders take one embedding per token, no "
            "token types"
        )
    return refused


# The attention the engine computes: dot products (`DotProductScore`) of each query with every key (`FullAttention`);
# its own window (Mistral's) bounds a decoder's cache only, and is not applied to encoders or to the first pass over
# a prompt as aiayn's masks apply it.
ENGINE_PATTERNS = (FullAttention,)
ENGINE_SCORES = (DotProductScore,)


def attention_refusals(config) -> list[str]:
    """The attention variants of `config` (`attention_variants_aiayn`'s registries: each pattern whose config field
    is set, the score) that the engine does not compute, each with why."""
    refused = []
    for pattern in ATTENTION_PATTERNS.values():
        value = getattr(config, pattern.config_field, None) if pattern.config_field is not None else None
        if value is not None and pattern not in ENGINE_PATTERNS:
            refused.append(
                f"{pattern.config_field}={value!r} ({pattern.__name__}): the engine attends to every key (its own "
                "window, Mistral's, bounds a decoder's cache only)"
            )
    score = ATTENTION_SCORES[config.attention_score]
    if score not in ENGINE_SCORES:
        refused.append(
            f"attention_score={config.attention_score!r} ({score.__name__}): the engine computes dot-product "
            "attention only"
        )
    return refused


def _stack_options(config, ctranslate2) -> dict:
    """The arguments of the engine's encoder and decoder specs that one aiayn config sets for both stacks."""
    options = {
        "pre_norm": config.norm_first,
        "activation": getattr(ctranslate2.specs.common_spec.Activation, ACTIVATIONS[config.activation]),
        "layernorm_embedding": config.embedding_norm,
        "relative_attention_bias": config.position_embedding_type == "relative",
        "ffn_glu": config.is_gated_act,
        "rms_norm": config.norm_type == "rmsnorm",
    }
    if config.num_heads * config.d_kv != config.d_model:
        options["head_dim"] = config.d_kv
    if config.position_embedding_type == "rotary":  # rotary over every feature of a head, halves paired (rotate_half)
        options.update(rotary_dim=0, rotary_interleave=False, rotary_base=config.rope_theta)
    return options


def _set_norm(spec, norm: nn.Module) -> None:
    spec.gamma = norm.weight.detach()
    if not isinstance(norm, AiaynRMSNorm):
        spec.beta = norm.bias.detach() if norm.bias is not None else torch.zeros_like(norm.weight)


def _set_linear(spec, linear: nn.Linear) -> None:
    spec.weight = linear.weight.detach()
    if linear.bias is not None:
        spec.bias = linear.bias.detach()


def _set_attention(spec, attention: nn.Module, scale_attention: bool) -> None:
    """One attention sub-layer: the engine fuses Q, K and V (self) or K and V (encoder-decoder) as aiayn does."""
    projections = ("qkv_proj", "o_proj") if hasattr(attention, "qkv_proj") else ("q_proj", "kv_proj", "o_proj")
    for linear_spec, name in zip(spec.linear, projections, strict=True):
        _set_linear(linear_spec, getattr(attention, name))
    if not scale_attention:
        spec.queries_scale = 1.0  # T5: the 1/sqrt(d_k) of eq. (1) is folded into the initialisation


def _position_table(stack: AiaynStack, config, max_positions: int) -> torch.Tensor:
    """The absolute position encodings that the stack adds to its scaled token embeddings, one row per position."""
    embeddings = stack.embeddings
    if config.position_embedding_type == "learned":
        return embeddings.position_embeddings.weight.detach()
    if config.position_embedding_type == "sinusoidal":
        return embeddings.position_embeddings(torch.arange(max_positions)[None])[0]
    return torch.zeros(max_positions, config.d_model)  # "none": the engine adds a table, so one of zeros


def _set_stack(spec, stack: AiaynStack, config, max_positions: int) -> None:
    """Embeddings, layers and final norm of one stack (the engine's `TransformerEncoderSpec` or
    `TransformerDecoderSpec`, which both name their parts after OpenNMT's)."""
    embeddings = stack.embeddings
    token_specs = spec.embeddings if isinstance(spec.embeddings, list) else [spec.embeddings]
    token_specs[0].weight = embeddings.embed_tokens.weight.detach()
    if embeddings.token_type_embeddings is not None:  # BERT's segments, added (EmbeddingsMerge.ADD)
        token_specs[1].weight = embeddings.token_type_embeddings.weight.detach()
    spec.scale_embeddings = config.scale_embedding  # True: sqrt(d_model), as section 3.4
    if hasattr(spec, "position_encodings"):
        spec.position_encodings.encodings = _position_table(stack, config, max_positions)
    if embeddings.norm is not None:
        _set_norm(spec.layernorm_embedding, embeddings.norm)
    if stack.final_norm is not None:
        _set_norm(spec.layer_norm, stack.final_norm)
    for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, config.scale_attention)
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attn_norm)
        if layer.cross_attn is not None:
            _set_attention(layer_spec.attention, layer.cross_attn, config.scale_attention)
            _set_norm(layer_spec.attention.layer_norm, layer.cross_attn_norm)
        if stack.relative_position_bias is not None:  # one table per stack: every layer names it, the engine aliases
            bias = stack.relative_position_bias
            layer_spec.self_attention.relative_attention_bias = bias.embedding.weight.detach()
            layer_spec.self_attention.relative_attention_max_distance = numpy.int32(bias.max_distance)
        ffn = layer.ffn
        if ffn.gate_proj is not None:  # act(x W_g) * (x W_1): the engine's linear_0 is the activated one
            _set_linear(layer_spec.ffn.linear_0, ffn.gate_proj)
            _set_linear(layer_spec.ffn.linear_0_noact, ffn.up_proj)
        else:
            _set_linear(layer_spec.ffn.linear_0, ffn.up_proj)
        _set_linear(layer_spec.ffn.linear_1, ffn.down_proj)
        _set_norm(layer_spec.ffn.layer_norm, layer.ffn_norm)


def _set_lm_head(decoder_spec, model, config) -> None:
    _set_linear(decoder_spec.projection, model.get_output_embeddings())
    if config.scale_decoder_outputs:  # T5's tied head reads the states times d_model^-0.5
        decoder_spec.scale_outputs = config.d_model**-0.5


def vocabulary(tokenizer, vocab_size: int) -> list[str]:
    """The tokenizer's tokens in id order, padded with `<unused_i>` up to the model's `vocab_size` (tables are often
    rounded up past the tokenizer's size)."""
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    if len(by_id) > vocab_size or (by_id and max(by_id) >= vocab_size):
        raise ValueError(
            f"The tokenizer has {len(by_id)} tokens (ids up to {max(by_id)}) but the model's vocab_size is "
            f"{vocab_size}: they do not belong together."
        )
    missing = [index for index in range(len(by_id)) if index not in by_id]
    if missing:
        raise ValueError(f"The tokenizer's ids are not contiguous (no token has id {missing[0]}).")
    tokens = [by_id[index] for index in range(len(by_id))]
    return tokens + [f"<unused_{i}>" for i in range(vocab_size - len(tokens))]


def _special_tokens(model, tokenizer, tokens: list[str]) -> dict[str, str]:
    """The engine's special tokens, from the ids that aiayn's `generate` uses (the generation config's)."""
    generation = getattr(model, "generation_config", None)

    def token(name: str) -> str | None:
        index = getattr(generation, name, None) if generation is not None else None
        index = getattr(model.config, name, None) if index is None else index
        index = index[0] if isinstance(index, list) else index
        return None if index is None else tokens[index]

    eos = token("eos_token_id")
    special = {"eos_token": eos, "bos_token": token("bos_token_id") or eos}
    # The engine maps unknown strings to unk_token and appends it to the vocabulary if absent, which would change
    # the vocabulary's size: take the tokenizer's, or the end token.
    special["unk_token"] = tokenizer.unk_token if tokenizer.unk_token in tokens else eos
    if model.config.is_encoder_decoder:
        special["decoder_start_token"] = token("decoder_start_token_id")
    return {name: value for name, value in special.items() if value is not None}


def ctranslate2_spec(model: transformers.PreTrainedModel, tokenizer, max_positions: int | None = None):
    """The CTranslate2 model spec of `model` (an aiayn seq2seq or causal LM, or any encoder-family model, whose body
    and pooler are exported) with the tokens of `tokenizer`. Sinusoidal and absent positions are written as tables of
    `max_positions` rows (default: the config's `max_position_embeddings`): the engine refuses longer inputs and
    outputs with an error naming the position. Raises ValueError naming every option the engine cannot express."""
    ctranslate2 = _ctranslate2()
    specs = ctranslate2.specs
    config = model.config
    refused = unsupported_options(config)
    if refused:
        raise ValueError("CTranslate2 cannot run this model: " + "; ".join(refused) + ".")
    family = family_of(config.model_type)
    if not isinstance(model.get_output_embeddings(), nn.Linear) and family != "encoder":
        raise ValueError(f"{type(model).__name__} has no language-model head for CTranslate2's {RUNNERS[family][0]}.")
    if any(not isinstance(p, nn.Parameter) or p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError(
            "Export a float32 model: the engine quantizes its weights itself (quantization='int8'), and quantized or "
            f"half-precision modules do not map onto its spec (the model holds {model.dtype} parameters)."
        )
    max_positions = max_positions or config.max_position_embeddings
    options = _stack_options(config, ctranslate2)
    body = model.base_model  # the family's base model, under any head
    if family == "seq2seq":
        spec = specs.TransformerSpec(
            specs.TransformerEncoderSpec(config.num_layers, config.num_heads, **options),
            specs.TransformerDecoderSpec(config.num_decoder_layers, config.num_heads, **options),
        )
        _set_stack(spec.encoder, body.encoder, config, max_positions)
        _set_stack(spec.decoder, body.decoder, config, max_positions)
        _set_lm_head(spec.decoder, model, config)
    elif family == "decoder":
        spec = specs.TransformerDecoderModelSpec(
            specs.TransformerDecoderSpec(config.num_layers, config.num_heads, with_encoder_attention=False, **options)
        )
        _set_stack(spec.decoder, body.decoder, config, max_positions)
        _set_lm_head(spec.decoder, model, config)
    else:
        merge = specs.common_spec.EmbeddingsMerge.ADD
        encoder_spec = specs.TransformerEncoderSpec(
            config.num_layers, config.num_heads, num_source_embeddings=2 if config.type_vocab_size else 1,
            embeddings_merge=merge, **options,
        )  # fmt: skip
        pooler = getattr(body, "pooler", None)
        spec = specs.TransformerEncoderModelSpec(encoder_spec, pooling_layer=pooler is not None)
        _set_stack(spec.encoder, body.encoder, config, max_positions)
        if pooler is not None:
            _set_linear(spec.pooler_dense, pooler.dense)

    tokens = vocabulary(tokenizer, config.vocab_size)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    for name, value in _special_tokens(model, tokenizer, tokens).items():
        setattr(spec.config, name, value)
    if family == "seq2seq":
        spec.register_source_vocabulary(tokens)
        spec.register_target_vocabulary(tokens)
    else:
        spec.register_vocabulary(tokens)
    return spec


def load_for_export(folder: str) -> transformers.PreTrainedModel:
    """The model of a saved aiayn folder with the head the engine runs: the seq2seq or causal LM, or an encoder's
    body (with BERT's pooler where the checkpoint has one)."""
    config = transformers.AutoConfig.from_pretrained(folder)
    family = family_of(config.model_type)
    if not config.model_type.startswith("aiayn_"):
        raise ValueError(
            f"{folder} holds a {config.model_type!r} model, not an aiayn one; CTranslate2 converts transformers' own "
            "models with ct2-transformers-converter."
        )
    refused = unsupported_options(config)
    if refused:
        raise ValueError(f"CTranslate2 cannot run the model of {folder}: " + "; ".join(refused) + ".")
    runner, auto_class = RUNNERS[family]
    architecture = (config.architectures or [""])[0]
    head = auto_class._model_mapping[type(config)].__name__
    if family != "encoder" and architecture != head:
        raise ValueError(f"{folder} holds {architecture}; CTranslate2's {runner} runs the language model ({head}).")
    model, info = auto_class.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    if family == "encoder" and any(key.startswith("pooler.") for key in info["missing_keys"]):
        model.pooler = None  # a checkpoint without BERT's pooler (e.g. a masked LM): export the states only
    return model.eval()


def export_ctranslate2(
    source: str | os.PathLike | transformers.PreTrainedModel,
    output_dir: str | os.PathLike,
    quantization: str = "float32",
    force: bool = False,
    max_positions: int | None = None,
    tokenizer=None,
) -> str:
    """Writes the CTranslate2 model of `source` to `output_dir`, with the tokenizer and generation config beside it.

    The folder is written under a temporary name and renamed when complete.

    Args:
        source: A saved aiayn folder (whose tokenizer is used unless `tokenizer` is given) or a model in memory.
        output_dir: The folder to write; an existing one is replaced only with `force`.
        quantization: Type of the weights, one of `QUANTIZATIONS` (`"float32"`, `"int8"`, `"int8_float32"`).
        force: Replace an existing `output_dir`.
        max_positions: Rows of the position table written for sinusoidal and absent positions (default: the
            config's `max_position_embeddings`): the engine refuses longer inputs and outputs.
        tokenizer (PreTrainedTokenizerBase | None): The tokenizer, needed for a model in memory.

    Returns:
        `output_dir`.

    Raises:
        ValueError: For an unknown quantization, a model in memory without its tokenizer, or options CTranslate2
            cannot express (`unsupported_options`).
        FileExistsError: When `output_dir` exists and `force` is not set.

    Examples:
        ```py
        import ctranslate2

        export_ctranslate2("runs/demo/transformer-en-de", "en-de-ct2", quantization="int8")
        translator = ctranslate2.Translator("en-de-ct2")
        ```
    """
    output_dir = os.fspath(output_dir)
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}.")
    if os.path.exists(output_dir) and not force:
        raise FileExistsError(f"{output_dir} exists; pass force=True (--force) to replace it.")
    if isinstance(source, transformers.PreTrainedModel):
        if tokenizer is None:
            raise ValueError(
                "Exporting a model in memory needs its tokenizer (tokenizer=...): the engine reads tokens."
            )
        model = source
    else:
        model = load_for_export(os.fspath(source))
        tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(source)
    with torch.no_grad():
        spec = ctranslate2_spec(model, tokenizer, max_positions)
    spec.validate()
    spec.optimize(quantization=quantization)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".ctranslate2-", dir=parent)
    try:
        spec.save(staging)
        tokenizer.save_pretrained(staging)
        if model.can_generate():  # the decoding defaults (beam, length penalty), which the engine takes per call
            model.generation_config.save_pretrained(staging)
        if os.path.exists(output_dir):
            shutil.rmtree(output_dir)
        os.replace(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output_dir
