import json

import pytest
import torch
import transformers
from huggingface_hub.errors import StrictDataclassError

import aiayn
from aiayn import AiaynDecoderConfig, AiaynEncoderConfig, AiaynSeq2SeqConfig, cli


def test_standard_names_are_aliases_of_the_paper_names():
    config = AiaynDecoderConfig(hidden_size=96, num_attention_heads=6, num_hidden_layers=3, intermediate_size=200)
    assert (config.d_model, config.num_heads, config.num_layers, config.d_ff) == (96, 6, 3, 200)
    assert config.d_kv == config.head_dim == 16
    config.hidden_size = 128
    assert config.d_model == 128


def test_defaults_are_the_papers_base_model():
    config = AiaynSeq2SeqConfig()
    assert (config.d_model, config.d_ff, config.num_heads, config.d_kv) == (512, 2048, 8, 64)
    assert (config.num_layers, config.num_decoder_layers) == (6, 6)
    assert config.position_embedding_type == "sinusoidal" and not config.norm_first
    assert config.scale_embedding and config.tie_word_embeddings and config.scale_attention
    assert config.dropout == 0.1 and config.hidden_act == "relu"


def test_explicit_d_kv_allows_heads_that_do_not_divide_d_model():
    config = AiaynEncoderConfig(d_model=100, num_heads=3, d_kv=40)
    assert config.num_heads * config.d_kv == 120


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"d_model": 100, "num_heads": 8}, "d_model"),
        ({"hidden_act": "tanhh"}, "hidden_act"),
        ({"hidden_act": "gated-swish"}, "hidden_act"),
        ({"position_embedding_type": "alibi"}, "position_embedding_type"),
        ({"norm_type": "batchnorm"}, "norm_type"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"num_layers": -2}, "num_layers"),
        ({"num_heads": 0}, "num_heads"),
        ({"d_ff": 0}, "d_ff"),
        ({"d_kv": 0}, "d_kv"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"d_model": 32.0}, "d_model"),
        ({"dropout": 1.0}, "dropout"),
        ({"attention_dropout": -0.1}, "attention_dropout"),
        ({"activation_dropout": 1.5}, "activation_dropout"),
        ({"classifier_dropout": 1.0}, "classifier_dropout"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"initializer_range": -1.0}, "initializer_range"),
        ({"type_vocab_size": -1}, "type_vocab_size"),
        ({"relative_attention_num_buckets": 32}, "relative_attention_num_buckets"),
        ({"relative_attention_max_distance": 128}, "relative_attention_max_distance"),
        (
            {"position_embedding_type": "relative", "relative_attention_num_buckets": -4},
            "relative_attention_num_buckets",
        ),
        ({"rope_theta": 10000.0}, "rope_theta"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"position_embedding_type": "rotary", "rope_theta": 0.0}, "rope_theta"),
        ({"position_embedding_type": "rotary", "d_model": 36, "num_heads": 4}, "d_kv must be even"),
        ({"d_model": 33, "num_heads": 1}, "d_model must be even"),
        ({"pad_token_id": 37000}, "pad_token_id"),
        ({"eos_token_id": -1}, "eos_token_id"),
    ],
)
def test_invalid_fields_are_refused_by_errors_that_name_them(fields, named):
    with pytest.raises(StrictDataclassError, match=named):
        AiaynEncoderConfig(**fields)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"num_decoder_layers": 0}, "num_decoder_layers"),
        ({"decoder_start_token_id": None}, "decoder_start_token_id"),
        ({"decoder_start_token_id": 40000}, "decoder_start_token_id"),
    ],
)
def test_invalid_seq2seq_fields_raise(fields, named):
    with pytest.raises(StrictDataclassError, match=named):
        AiaynSeq2SeqConfig(**fields)


def test_an_invalid_assignment_is_refused_and_save_pretrained_validates_across_fields(tmp_folder):
    config = aiayn.preset_config("tiny-decoder")
    with pytest.raises(StrictDataclassError, match="hidden_act"):
        config.hidden_act = "tanhh"
    assert config.hidden_act == "gelu_pytorch_tanh"
    config.rope_theta = 500.0  # valid alone; only rotary positions have a rope_theta
    with pytest.raises(StrictDataclassError, match="rope_theta is set .* it only applies to .*'rotary'"):
        config.save_pretrained(tmp_folder)


def test_no_config_class_overrides_the_validate_that_strict_defines():
    """`@strict` writes `validate()` to run every class validator, transformers' own included."""
    for config_class in (aiayn.AiaynConfig, AiaynEncoderConfig, AiaynDecoderConfig, AiaynSeq2SeqConfig):
        assert config_class.validate.__is_defined_by_strict_decorator__
    validators = {validator.__name__ for validator in AiaynSeq2SeqConfig.__class_validators__}
    assert validators == {
        "validate_architecture",
        "validate_attention_pattern",
        "validate_generation_defaults",
        "validate_layer_type",
        "validate_linformer_positions",
        "validate_output_attentions",
        "validate_position_options",
        "validate_rope",
        "validate_special_tokens",
        "validate_token_ids",
    }


def test_transformers_own_validators_run():
    with pytest.raises(StrictDataclassError, match="output_attentions"):
        AiaynEncoderConfig(output_attentions=True, attn_implementation="sdpa")


def test_invalid_value_in_config_json_names_the_field(tmp_folder):
    aiayn.preset_config("tiny-encoder").save_pretrained(tmp_folder)
    path = f"{tmp_folder}/config.json"
    with open(path) as f:
        saved = json.load(f)
    saved["position_embedding_type"] = "sinusoidall"
    with open(path, "w") as f:
        json.dump(saved, f)
    with pytest.raises(StrictDataclassError, match="position_embedding_type"):
        transformers.AutoConfig.from_pretrained(tmp_folder)


def test_save_and_load_round_trip(tmp_folder):
    config = aiayn.preset_config("t5-small", num_decoder_layers=4, hidden_act="gated-gelu_new")
    config.save_pretrained(tmp_folder)
    loaded = transformers.AutoConfig.from_pretrained(tmp_folder)
    assert type(loaded) is AiaynSeq2SeqConfig
    assert loaded.to_diff_dict() == config.to_diff_dict()
    assert loaded.num_decoder_layers == 4 and loaded.hidden_act == "gated-gelu_new"


def test_seq2seq_text_config_of_the_decoder_has_the_decoder_depth():
    config = AiaynSeq2SeqConfig(num_layers=2, num_decoder_layers=5)
    assert config.get_text_config(decoder=True).num_hidden_layers == 5
    assert config.get_text_config().num_hidden_layers == 2
    assert config.num_layers == 2


@pytest.mark.parametrize(
    ("name", "model_type"),
    [
        ("transformer-base", "aiayn_seq2seq"),
        ("transformer-big", "aiayn_seq2seq"),
        ("bert-base", "aiayn_encoder"),
        ("gpt2-small", "aiayn_decoder"),
        ("t5-small", "aiayn_seq2seq"),
        ("tiny", "aiayn_seq2seq"),
        ("tiny-encoder", "aiayn_encoder"),
        ("tiny-decoder", "aiayn_decoder"),
    ],
)
def test_presets_build_configs_of_their_family(name, model_type):
    assert aiayn.preset_config(name).model_type == model_type
    assert aiayn.preset_config(name, num_layers=1).num_layers == 1


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="transformer-base"):
        aiayn.preset_config("transformer-huge")


def test_the_presets_command_lists_each_preset_with_its_sizes(capsys):
    """`aiayn presets`, as the getting-started page runs it: one row per preset, GPT-2 small at GPT-2's 124.4M."""
    cli.main(["presets"])
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert list(rows) == list(aiayn.PRESETS)
    sizes = ["seq2seq", "37000", "512", "8", "2048", "6+6", "sinusoidal", "post-layernorm", "63.1M"]
    assert rows["transformer-base"] == sizes
    assert rows["gpt2-small"] == ["decoder", "50257", "768", "12", "3072", "12", "learned", "pre-layernorm", "124.4M"]


def test_paper_presets_match_table_3():
    base, big = aiayn.preset_config("transformer-base"), aiayn.preset_config("transformer-big")
    assert (base.d_model, base.d_ff, base.num_heads, base.d_kv, base.num_layers, base.dropout) == (
        512,
        2048,
        8,
        64,
        6,
        0.1,
    )
    assert (big.d_model, big.d_ff, big.num_heads, big.d_kv, big.num_layers, big.dropout) == (
        1024,
        4096,
        16,
        64,
        6,
        0.3,
    )
    for config in (base, big):
        assert config.num_decoder_layers == 6 and not config.norm_first
        assert config.position_embedding_type == "sinusoidal" and config.scale_embedding and config.tie_word_embeddings
        # Section 5.4 names residual and embedding dropout only.
        assert config.attention_dropout == config.activation_dropout == 0.0
        assert (
            config.generation_defaults
            == aiayn.configuration_aiayn.PAPER_DECODING
            == {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "max_len_a": 1, "max_len_b": 50}
        )


def paper_parameter_count(vocab: int, d: int, d_ff: int, layers: int) -> int:
    """The paper's model counted by hand: one token table shared by both stacks and the tied output projection
    (section 3.4), no position parameters (sinusoids), post-LN layers without a final norm. An encoder layer: Q, K, V
    and output projections with biases, the two feed-forward projections with biases, two LayerNorms; a decoder layer
    adds the encoder-decoder attention's four projections and a third LayerNorm."""
    attention = 4 * d * d + 4 * d
    feed_forward = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    return vocab * d + layers * (encoder_layer + decoder_layer)


@pytest.mark.parametrize(
    ("name", "sizes", "count", "paper_millions"),
    [
        ("transformer-base", (512, 2048), 63_082_496, 65),
        ("transformer-big", (1024, 4096), 214_245_376, 213),
    ],
)
def test_paper_presets_have_the_papers_parameter_count(name, sizes, count, paper_millions):
    """The presets hold exactly the parameters the paper's architecture has with the shared 37000-token vocabulary of
    WMT'14 En-De: 63.1M and 214.2M. Table 3 reports 65M and 213M without saying how it counted; these differ from
    them by 2.9% and 0.6%."""
    config = aiayn.preset_config(name)
    with torch.device("meta"):
        model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    assert config.vocab_size == 37000
    assert sum(p.numel() for p in model.parameters()) == paper_parameter_count(37000, *sizes, 6) == count
    assert abs(count / 1e6 - paper_millions) / paper_millions < 0.03


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("bert-base", lambda: transformers.BertForMaskedLM(transformers.BertConfig())),
        ("gpt2-small", lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config())),
        ("t5-small", lambda: transformers.T5ForConditionalGeneration(transformers.T5Config())),
    ],
)
def test_reference_shaped_presets_have_the_references_parameter_count(name, reference):
    config = aiayn.preset_config(name)
    auto = {"aiayn_encoder": transformers.AutoModelForMaskedLM, "aiayn_decoder": transformers.AutoModelForCausalLM}
    with torch.device("meta"):
        model = auto.get(config.model_type, transformers.AutoModelForSeq2SeqLM).from_config(config)
        reference_model = reference()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference_model.parameters())


def test_the_vision_config_has_no_text_fields_and_the_text_configs_share_theirs():
    """The vision family reads images: no vocabulary, token types, special tokens or token positions. The three text
    families declare those through `AiaynTextConfig`."""
    vision_fields = set(aiayn.AiaynVisionConfig.__dataclass_fields__)
    text_only = set(aiayn.AiaynTextConfig.__dataclass_fields__) - set(aiayn.AiaynConfig.__dataclass_fields__)
    assert {"vocab_size", "type_vocab_size", "pad_token_id", "scale_decoder_outputs", "max_position_embeddings"} <= (
        text_only
    )
    assert not vision_fields & (text_only - {"position_embedding_type"})
    for config_class in (AiaynEncoderConfig, AiaynDecoderConfig, AiaynSeq2SeqConfig):
        assert issubclass(config_class, aiayn.AiaynTextConfig)


def test_the_installed_seq2seq_config_leaves_its_pipeline_to_aiayn_and_a_saved_folder_names_it(tmp_path, monkeypatch):
    """A saved seq2seq folder names aiayn's text-to-text pipeline in `custom_pipelines` (for processes without aiayn,
    whose copy of the config keeps it); the installed aiayn's config drops it, so that `pipeline(task, model=folder)`
    takes the pipeline `import aiayn` registered. The rule is the module's (installed or copied), not what the process
    registered: with the registry emptied, the config drops it all the same."""
    model = aiayn.AiaynSeq2SeqForConditionalGeneration(aiayn.preset_config("tiny", vocab_size=97, d_model=32))
    model.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:
        assert set(json.load(f)["custom_pipelines"]) == {"text2text-generation", "translation", "summarization"}
    assert not hasattr(transformers.AutoConfig.from_pretrained(tmp_path), "custom_pipelines")
    monkeypatch.setattr(transformers.pipelines.PIPELINE_REGISTRY, "supported_tasks", {})
    assert not hasattr(transformers.AutoConfig.from_pretrained(tmp_path), "custom_pipelines")
