"""Conversion of transformers' BERT, GPT-2, T5, BART and ViT models into aiayn models that compute the same outputs.

`convert_from_hf(model)` translates the config and copies the weights into the aiayn family and head that match the
model's class; `convert_checkpoint(src, dst)` does the same for a folder saved by transformers and writes a folder
that loads through the Auto classes, with aiayn installed or with `trust_remote_code=True`.

Every projection maps onto the shared blocks: BERT is a post-LN encoder with learned positions, token types and an
embedding norm; GPT-2 a pre-LN decoder with learned positions and the tanh GELU; T5 a pre-RMSNorm encoder-decoder
with the relative position bias, unscaled attention and no biases; BART a post-LN encoder-decoder with learned
positions (its table is offset by two rows) and embedding norms; ViT a pre-LN encoder over image patches with a class
token and learned positions. The BERT, GPT-2 and T5 configs start from the presets
of the same names (`bert-base`, `gpt2-small`, `t5-small`), which hold those choices once, and take sizes, norms'
epsilon, activation, dropout and special tokens from the source.

The tanh GELU that GPT-2 and T5 v1.1 name `gelu_new` (six elementwise operations in transformers, each writing a
tensor of the feed-forward's width) becomes `gelu_pytorch_tanh`, the same function in torch's fused kernel: equal to
float32 rounding, one pass over the tensor instead of six, and a backward that keeps one input instead of the
formula's intermediates.
"""

import json
import os

import torch
import transformers
from transformers import PreTrainedModel

from .configuration_aiayn import (
    AiaynConfig,
    AiaynDecoderConfig,
    AiaynEncoderConfig,
    AiaynSeq2SeqConfig,
    AiaynVisionConfig,
    preset_config,
)
from .modeling_aiayn import AiaynPreTrainedModel

StateDict = dict[str, torch.Tensor]
# transformers' activation names -> the aiayn name of the same function computed by a fused kernel
FUSED_ACTIVATIONS = {"gelu_new": "gelu_pytorch_tanh"}


def _activation(name: str) -> str:
    return FUSED_ACTIVATIONS.get(name, name)


def _label_fields(config) -> dict:
    """Classification settings that every family config shares with the reference."""
    fields = {"problem_type": config.problem_type, "initializer_range": getattr(config, "initializer_range", 0.02)}
    if config.id2label is not None:
        fields.update(id2label=config.id2label, label2id=config.label2id)
    return fields


def _copy_norm(out: StateDict, state: StateDict, source: str, target: str) -> None:
    out[f"{target}.weight"] = state[f"{source}.weight"]
    if f"{source}.bias" in state:
        out[f"{target}.bias"] = state[f"{source}.bias"]


def _copy_linear(out: StateDict, state: StateDict, sources: list[str], target: str, transpose: bool = False) -> None:
    """`target` = the rows of `sources` stacked (fused projections); GPT-2's Conv1D stores them transposed."""
    weights = [state[f"{source}.weight"] for source in sources]
    out[f"{target}.weight"] = torch.cat([w.t() if transpose else w for w in weights], dim=0).contiguous()
    if f"{sources[0]}.bias" in state:
        out[f"{target}.bias"] = torch.cat([state[f"{source}.bias"] for source in sources])


def _copy_layer(out: StateDict, state: StateDict, source: str, target: str, names) -> None:
    """The weights of one layer: each aiayn part of `names` ((part, reference parts fused into it), ...) from the
    reference's layer `source` into aiayn's layer `target` (a norm is one part, whose weight and bias copy alike)."""
    for part, sources in names:
        _copy_linear(out, state, [f"{source}.{name}" for name in sources], f"{target}.{part}")


def _prefixed(state: StateDict, prefix: str) -> StateDict:
    """The entries of `state` under `prefix.`, without it."""
    return {name[len(prefix) + 1 :]: tensor for name, tensor in state.items() if name.startswith(prefix + ".")}


# BERT ------------------------------------------------------------------------------------------------------------

# aiayn's layer part -> BERT's parts (fused in this order).
BERT_LAYER_NAMES = (
    ("self_attn.qkv_proj", ("attention.self.query", "attention.self.key", "attention.self.value")),
    ("self_attn.o_proj", ("attention.output.dense",)),
    ("self_attn_norm", ("attention.output.LayerNorm",)),
    ("ffn.up_proj", ("intermediate.dense",)),
    ("ffn.down_proj", ("output.dense",)),
    ("ffn_norm", ("output.LayerNorm",)),
)


def _bert_config(config: transformers.BertConfig, lm_head_is_tied: bool) -> AiaynEncoderConfig:
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"BERT with position_embedding_type={config.position_embedding_type!r} is not supported.")
    if config.is_decoder or getattr(config, "add_cross_attention", False):
        raise ValueError("Only BERT encoders convert; this BERT is configured as a decoder.")
    return preset_config(
        "bert-base",
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        num_heads=config.num_attention_heads,
        d_ff=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps,
        hidden_act=_activation(config.hidden_act),
        tie_word_embeddings=lm_head_is_tied,
        dropout=config.hidden_dropout_prob,
        attention_dropout=config.attention_probs_dropout_prob,
        classifier_dropout=config.classifier_dropout,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        **_label_fields(config),
    )


def _bert_encoder(state: StateDict, config: AiaynConfig) -> StateDict:
    """BertModel's weights as AiaynEncoderModel's."""
    out = {
        "encoder.embeddings.embed_tokens.weight": state["embeddings.word_embeddings.weight"],
        "encoder.embeddings.position_embeddings.weight": state["embeddings.position_embeddings.weight"],
        "encoder.embeddings.token_type_embeddings.weight": state["embeddings.token_type_embeddings.weight"],
    }
    _copy_norm(out, state, "embeddings.LayerNorm", "encoder.embeddings.norm")
    for i in range(config.num_layers):
        _copy_layer(out, state, f"encoder.layer.{i}", f"encoder.layers.{i}", BERT_LAYER_NAMES)
    if "pooler.dense.weight" in state:
        _copy_linear(out, state, ["pooler.dense"], "pooler.dense")
    return out


def _bert_masked_lm_head(state: StateDict) -> StateDict:
    out = {}
    _copy_linear(out, state, ["cls.predictions.transform.dense"], "lm_head.dense")
    _copy_norm(out, state, "cls.predictions.transform.LayerNorm", "lm_head.norm")
    out["lm_head.decoder.weight"] = state["cls.predictions.decoder.weight"]
    out["lm_head.decoder.bias"] = state["cls.predictions.decoder.bias"]
    return out


def _bert_classifier_head(state: StateDict) -> StateDict:
    out = {}
    _copy_linear(out, state, ["classifier"], "classifier.out_proj")
    return out


# GPT-2 -----------------------------------------------------------------------------------------------------------


def _gpt2_config(config: transformers.GPT2Config, lm_head_is_tied: bool) -> AiaynDecoderConfig:
    if config.scale_attn_by_inverse_layer_idx:
        raise ValueError("GPT-2 with scale_attn_by_inverse_layer_idx=True is not supported.")
    return preset_config(
        "gpt2-small",
        vocab_size=config.vocab_size,
        d_model=config.n_embd,
        num_heads=config.n_head,
        d_ff=config.n_inner or 4 * config.n_embd,
        num_layers=config.n_layer,
        max_position_embeddings=config.n_positions,
        scale_attention=config.scale_attn_weights,
        layer_norm_eps=config.layer_norm_epsilon,
        hidden_act=_activation(config.activation_function),
        tie_word_embeddings=lm_head_is_tied,
        add_cross_attention=config.add_cross_attention,
        dropout=config.resid_pdrop,
        attention_dropout=config.attn_pdrop,
        classifier_dropout=config.summary_first_dropout,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        **_label_fields(config),
    )


def _gpt2_decoder(state: StateDict, config: AiaynConfig) -> StateDict:
    """GPT2Model's weights as AiaynDecoderModel's; Conv1D stores its weights as (in, out)."""
    out = {
        "decoder.embeddings.embed_tokens.weight": state["wte.weight"],
        "decoder.embeddings.position_embeddings.weight": state["wpe.weight"],
    }
    for i in range(config.num_layers):
        source, target = f"h.{i}", f"decoder.layers.{i}"
        _copy_norm(out, state, f"{source}.ln_1", f"{target}.self_attn_norm")
        _copy_linear(out, state, [f"{source}.attn.c_attn"], f"{target}.self_attn.qkv_proj", transpose=True)
        _copy_linear(out, state, [f"{source}.attn.c_proj"], f"{target}.self_attn.o_proj", transpose=True)
        if config.add_cross_attention:  # GPT-2's cross-attention: q_attn, c_attn (keys then values), c_proj
            _copy_norm(out, state, f"{source}.ln_cross_attn", f"{target}.cross_attn_norm")
            for part, name in (("q_proj", "q_attn"), ("kv_proj", "c_attn"), ("o_proj", "c_proj")):
                _copy_linear(out, state, [f"{source}.crossattention.{name}"], f"{target}.cross_attn.{part}", True)
        _copy_norm(out, state, f"{source}.ln_2", f"{target}.ffn_norm")
        _copy_linear(out, state, [f"{source}.mlp.c_fc"], f"{target}.ffn.up_proj", transpose=True)
        _copy_linear(out, state, [f"{source}.mlp.c_proj"], f"{target}.ffn.down_proj", transpose=True)
    _copy_norm(out, state, "ln_f", "decoder.final_norm")
    return out


def _lm_head(state: StateDict) -> StateDict:
    return {"lm_head.weight": state["lm_head.weight"]}


# T5 --------------------------------------------------------------------------------------------------------------


def _t5_config(config: transformers.T5Config, lm_head_is_tied: bool) -> AiaynSeq2SeqConfig:
    activation, gated = _activation(config.dense_act_fn), config.is_gated_act
    return preset_config(
        "t5-small",
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_kv=config.d_kv,
        d_ff=config.d_ff,
        num_layers=config.num_layers,
        num_decoder_layers=config.num_decoder_layers,
        relative_attention_num_buckets=config.relative_attention_num_buckets,
        relative_attention_max_distance=config.relative_attention_max_distance,
        layer_norm_eps=config.layer_norm_epsilon,
        hidden_act=f"gated-{activation}" if gated else activation,
        tie_word_embeddings=lm_head_is_tied,
        scale_decoder_outputs=config.scale_decoder_outputs,
        dropout=config.dropout_rate,
        attention_dropout=config.dropout_rate,
        activation_dropout=config.dropout_rate,
        classifier_dropout=config.classifier_dropout,
        pad_token_id=config.pad_token_id,
        bos_token_id=getattr(config, "bos_token_id", None),
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        **_label_fields(config),
    )


def _t5_seq2seq(state: StateDict, config: AiaynSeq2SeqConfig) -> StateDict:
    """T5Model's weights as AiaynSeq2SeqModel's; layer 0 of each stack holds its relative bias table."""
    out = {"shared.weight": state["shared.weight"]}
    for stack, num_layers in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        bias_table = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        out[f"{stack}.relative_position_bias.embedding.weight"] = state[bias_table]
        _copy_norm(out, state, f"{stack}.final_layer_norm", f"{stack}.final_norm")
        for i in range(num_layers):
            source, target = f"{stack}.block.{i}.layer", f"{stack}.layers.{i}"
            attention = f"{source}.0.SelfAttention"
            _copy_linear(out, state, [f"{attention}.{name}" for name in "qkv"], f"{target}.self_attn.qkv_proj")
            _copy_linear(out, state, [f"{attention}.o"], f"{target}.self_attn.o_proj")
            _copy_norm(out, state, f"{source}.0.layer_norm", f"{target}.self_attn_norm")
            ffn = 1
            if stack == "decoder":
                cross = f"{source}.1.EncDecAttention"
                _copy_linear(out, state, [f"{cross}.q"], f"{target}.cross_attn.q_proj")
                _copy_linear(out, state, [f"{cross}.k", f"{cross}.v"], f"{target}.cross_attn.kv_proj")
                _copy_linear(out, state, [f"{cross}.o"], f"{target}.cross_attn.o_proj")
                _copy_norm(out, state, f"{source}.1.layer_norm", f"{target}.cross_attn_norm")
                ffn = 2
            dense = f"{source}.{ffn}.DenseReluDense"
            if f"{dense}.wi.weight" in state:
                _copy_linear(out, state, [f"{dense}.wi"], f"{target}.ffn.up_proj")
            else:
                _copy_linear(out, state, [f"{dense}.wi_0"], f"{target}.ffn.gate_proj")
                _copy_linear(out, state, [f"{dense}.wi_1"], f"{target}.ffn.up_proj")
            _copy_linear(out, state, [f"{dense}.wo"], f"{target}.ffn.down_proj")
            _copy_norm(out, state, f"{source}.{ffn}.layer_norm", f"{target}.ffn_norm")
    return out


# BART ------------------------------------------------------------------------------------------------------------


def _bart_config(config: transformers.BartConfig, lm_head_is_tied: bool) -> AiaynSeq2SeqConfig:
    if config.encoder_ffn_dim != config.decoder_ffn_dim:
        raise ValueError("BART with different encoder and decoder feed-forward sizes is not supported.")
    if config.encoder_attention_heads != config.decoder_attention_heads:
        raise ValueError("BART with different encoder and decoder head counts is not supported.")
    return AiaynSeq2SeqConfig(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_heads=config.encoder_attention_heads,
        d_ff=config.encoder_ffn_dim,
        num_layers=config.encoder_layers,
        num_decoder_layers=config.decoder_layers,
        max_position_embeddings=config.max_position_embeddings,
        position_embedding_type="learned",
        norm_first=False,
        layer_norm_eps=1e-5,
        hidden_act=_activation(config.activation_function),
        scale_embedding=config.scale_embedding,
        embedding_norm=True,
        tie_word_embeddings=lm_head_is_tied,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        classifier_dropout=config.classifier_dropout,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        **_label_fields(config),
    )


# One layer of BART (and of Marian, whose layers name their modules as BART's do): each aiayn module and the BART
# modules whose rows it stacks, in order. Read one way it fuses BART's weights (`_bart_seq2seq`), the other way it
# splits aiayn's (`bart_layer_weights`).
BART_LAYER_NAMES = (
    ("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    ("self_attn.o_proj", ("self_attn.out_proj",)),
    ("self_attn_norm", ("self_attn_layer_norm",)),
    ("ffn.up_proj", ("fc1",)),
    ("ffn.down_proj", ("fc2",)),
    ("ffn_norm", ("final_layer_norm",)),
)
# The encoder-decoder attention of a decoder layer, named the same way.
BART_CROSS_ATTENTION_NAMES = (
    ("cross_attn.q_proj", ("encoder_attn.q_proj",)),
    ("cross_attn.kv_proj", ("encoder_attn.k_proj", "encoder_attn.v_proj")),
    ("cross_attn.o_proj", ("encoder_attn.out_proj",)),
    ("cross_attn_norm", ("encoder_attn_layer_norm",)),
)


def _bart_layer_names(is_decoder: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return BART_LAYER_NAMES + (BART_CROSS_ATTENTION_NAMES if is_decoder else ())


def bart_layer_weights(state: StateDict, layer: str, is_decoder: bool) -> StateDict:
    """The weights of aiayn's layer `layer` (a prefix of `state`) under BART's and Marian's names: each fused
    projection split into the rows of its parts."""
    out = {}
    for target, sources in _bart_layer_names(is_decoder):
        for name in ("weight", "bias"):
            if f"{layer}.{target}.{name}" in state:
                rows = state[f"{layer}.{target}.{name}"].chunk(len(sources))
                out.update({f"{layer}.{source}.{name}": part for source, part in zip(sources, rows, strict=True)})
    return out


def _bart_seq2seq(state: StateDict, config: AiaynSeq2SeqConfig) -> StateDict:
    """BartModel's weights as AiaynSeq2SeqModel's. BART looks position p up in row p + 2 of its table."""
    out = {"shared.weight": state["shared.weight"]}
    for stack, num_layers in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        out[f"{stack}.embeddings.position_embeddings.weight"] = state[f"{stack}.embed_positions.weight"][2:]
        _copy_norm(out, state, f"{stack}.layernorm_embedding", f"{stack}.embeddings.norm")
        for i in range(num_layers):
            layer = f"{stack}.layers.{i}"
            _copy_layer(out, state, layer, layer, _bart_layer_names(stack == "decoder"))
    return out


def _bart_lm_head(state: StateDict) -> StateDict:
    if state["final_logits_bias"].any():
        raise ValueError("BART with a non-zero final_logits_bias is not supported: aiayn's LM head has no bias.")
    return _lm_head(state)


# ViT --------------------------------------------------------------------------------------------------------------


def _vit_config(config: transformers.ViTConfig, lm_head_is_tied: bool) -> AiaynVisionConfig:
    if not config.qkv_bias:
        raise ValueError("ViT without query, key and value biases (qkv_bias=False) is not supported.")
    if config.pooler_act != "tanh" or config.pooler_output_size not in (None, config.hidden_size):
        raise ValueError("Only ViT's default pooler (tanh, d_model wide) converts.")
    image_size, patch_size = config.image_size, config.patch_size
    if isinstance(image_size, (list, tuple)) or isinstance(patch_size, (list, tuple)):
        raise ValueError("Only square images and patches (an int image_size and patch_size) convert.")
    return preset_config(
        "vit-base",
        image_size=image_size,
        patch_size=patch_size,
        num_channels=config.num_channels,
        encoder_stride=config.encoder_stride,
        d_model=config.hidden_size,
        num_heads=config.num_attention_heads,
        d_ff=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        layer_norm_eps=config.layer_norm_eps,
        hidden_act=_activation(config.hidden_act),
        dropout=config.hidden_dropout_prob,
        attention_dropout=config.attention_probs_dropout_prob,
        classifier_dropout=0.0,  # ViT's classifier is a linear layer alone
        **_label_fields(config),
    )


# aiayn's layer part -> ViT's parts (pre-LN: `layernorm_before` normalises the attention's input).
VIT_LAYER_NAMES = (
    ("self_attn.qkv_proj", ("attention.q_proj", "attention.k_proj", "attention.v_proj")),
    ("self_attn.o_proj", ("attention.o_proj",)),
    ("self_attn_norm", ("layernorm_before",)),
    ("ffn.up_proj", ("mlp.fc1",)),
    ("ffn.down_proj", ("mlp.fc2",)),
    ("ffn_norm", ("layernorm_after",)),
)


def _vit_vision(state: StateDict, config: AiaynConfig) -> StateDict:
    """ViTModel's weights as AiaynVisionModel's."""
    out = {"embeddings.cls_token": state["embeddings.cls_token"]}
    out["embeddings.position_embeddings"] = state["embeddings.position_embeddings"]
    if "embeddings.mask_token" in state:
        out["embeddings.mask_token"] = state["embeddings.mask_token"]
    for name in ("weight", "bias"):
        out[f"embeddings.patch_embeddings.projection.{name}"] = state[f"embeddings.patch_embeddings.projection.{name}"]
    for i in range(config.num_layers):
        _copy_layer(out, state, f"layers.{i}", f"encoder.layers.{i}", VIT_LAYER_NAMES)
    _copy_norm(out, state, "layernorm", "encoder.final_norm")
    if "pooler.dense.weight" in state:
        _copy_linear(out, state, ["pooler.dense"], "pooler.dense")
    return out


# reference class -> (aiayn class, reference base-model attribute or None, base weights, head weights)
_CONVERSIONS = {
    "BertModel": ("AiaynEncoderModel", None, _bert_encoder, None),
    "BertForMaskedLM": ("AiaynEncoderForMaskedLM", "bert", _bert_encoder, _bert_masked_lm_head),
    "BertForSequenceClassification": (
        "AiaynEncoderForSequenceClassification",
        "bert",
        _bert_encoder,
        _bert_classifier_head,
    ),
    "GPT2Model": ("AiaynDecoderModel", None, _gpt2_decoder, None),
    "GPT2LMHeadModel": ("AiaynDecoderForCausalLM", "transformer", _gpt2_decoder, _lm_head),
    "T5Model": ("AiaynSeq2SeqModel", None, _t5_seq2seq, None),
    "T5ForConditionalGeneration": ("AiaynSeq2SeqForConditionalGeneration", "", _t5_seq2seq, _lm_head),
    "BartModel": ("AiaynSeq2SeqModel", None, _bart_seq2seq, None),
    "BartForConditionalGeneration": ("AiaynSeq2SeqForConditionalGeneration", "model", _bart_seq2seq, _bart_lm_head),
    "ViTModel": ("AiaynVisionModel", None, _vit_vision, None),
    "ViTForImageClassification": ("AiaynVisionForImageClassification", "vit", _vit_vision, _bert_classifier_head),
}
SUPPORTED_MODELS = tuple(_CONVERSIONS)


def _aiayn_config(model: PreTrainedModel) -> AiaynConfig:
    """The translated config. Whether the LM head is tied is read off the weights (T5 v1.1 checkpoints are untied
    although transformers forces `tie_word_embeddings=True` on T5 configs); models without a head keep the config's."""
    lm_head = model.get_output_embeddings()
    tied = (
        getattr(model.config, "tie_word_embeddings", False)
        if lm_head is None
        else lm_head.weight is model.get_input_embeddings().weight
    )
    translate = {
        "bert": _bert_config,
        "gpt2": _gpt2_config,
        "t5": _t5_config,
        "bart": _bart_config,
        "vit": _vit_config,
    }
    return translate[model.config.model_type](model.config, tied)


def convert_from_hf(model: PreTrainedModel) -> AiaynPreTrainedModel:
    """Converts a transformers model in memory into the equivalent aiayn model.

    Args:
        model: A transformers model of one of `SUPPORTED_MODELS` (BERT, GPT-2, T5, BART, ViT and their heads).

    Returns:
        The aiayn model with `model`'s weights and, for generating heads, its generation config. Eval and training mode
            follow `model`.

    Raises:
        ValueError: For a model that is not one of `SUPPORTED_MODELS`, or whose weights do not all find their place.
    """
    import aiayn

    name = type(model).__name__
    if name not in _CONVERSIONS:
        raise ValueError(f"Cannot convert {name}; supported models: {', '.join(SUPPORTED_MODELS)}.")
    class_name, base_attribute, base_weights, head_weights = _CONVERSIONS[name]
    config = _aiayn_config(model)
    state = model.state_dict()
    base_state = state if base_attribute in (None, "") else _prefixed(state, base_attribute)
    weights = base_weights(base_state, config)
    if base_attribute is not None:
        weights = {f"model.{key}": value for key, value in weights.items()}
        weights.update(head_weights(state))

    converted = getattr(aiayn, class_name)(config).to(next(model.parameters()).dtype)
    result = converted.load_state_dict(weights, strict=False)
    # Tied or shared weights are loaded through any one of their names.
    loaded = {id(converted.get_parameter(key)) for key in weights}
    missing = [key for key in result.missing_keys if id(converted.get_parameter(key)) not in loaded]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"Converting {name} left weights unmatched: missing {missing}, unexpected {result.unexpected_keys}."
        )
    if converted.can_generate() and model.can_generate():
        converted.generation_config = model.generation_config.__class__.from_dict(model.generation_config.to_dict())
    return converted.train(model.training)


def convert_checkpoint(source: str, destination: str, allow_pickle: bool = False) -> AiaynPreTrainedModel:
    """Converts the transformers model saved in a folder into an aiayn folder.

    The new folder loads with aiayn installed or with `trust_remote_code=True`; the source's tokenizer or image
    processor, where it has one, is saved with it.

    Args:
        source: Folder of a transformers model saved by `save_pretrained`.
        destination: Folder to write the aiayn model to.
        allow_pickle: Read pickled weights (`pytorch_model.bin`), with `torch.load(weights_only=True)`; without it,
            only safetensors are read.

    Returns:
        The converted model.

    Examples:
        ```py
        from aiayn.conversion import convert_checkpoint

        convert_checkpoint("saved-bert", "bert-aiayn")
        ```
    """
    config_path = os.path.join(source, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{source} is not a saved model: it has no config.json.")
    with open(config_path) as f:
        architectures = json.load(f).get("architectures") or []
    supported = [name for name in architectures if name in _CONVERSIONS]
    if not supported:
        raise ValueError(
            f"{source} holds {architectures or 'an unnamed architecture'}; "
            f"supported models: {', '.join(SUPPORTED_MODELS)}."
        )
    if not allow_pickle and not any(name.endswith(".safetensors") for name in os.listdir(source)):
        raise ValueError(
            f"{source} has no safetensors weights; its pickled weights run code when loaded, so they are only read "
            "with allow_pickle=True (--allow-pickle), and then with torch.load(weights_only=True)."
        )
    model_class = getattr(transformers, supported[0])
    model = model_class.from_pretrained(source, use_safetensors=None if allow_pickle else True)
    converted = convert_from_hf(model)
    converted.save_pretrained(destination)
    vision = converted.config.model_type == "aiayn_vision"
    processor_class = transformers.AutoImageProcessor if vision else transformers.AutoTokenizer
    try:
        processor = processor_class.from_pretrained(source)
    except (OSError, ValueError):
        processor = None
    if processor is not None:
        processor.save_pretrained(destination)
    return converted
