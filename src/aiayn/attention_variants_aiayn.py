"""The attention variants a config can choose, one registry per axis (see `attention_aiayn`):

- `ATTENTION_PATTERNS`: which keys each query sees. Each pattern names the config field that selects it
  (`AttentionPattern.config_field`); with none of those fields set, a stack attends fully, as do the causal stacks
  of an encoder-decoder model where the pattern serves bidirectional stacks only (`AttentionPattern.causal`).
- `ATTENTION_SCORES`: how a query scores a key, by `config.attention_score`.

A new variant is a class in a file of its own, imported and registered here; the stack, the layers and the heads
name none.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code (and, through its imports, every variant).
"""

from torch import nn

from .additive_attention_aiayn import AdditiveScore
from .attention_aiayn import AttentionPattern, DotProductScore, FullAttention
from .bigbird_aiayn import RandomBlocksAttention
from .configuration_aiayn import AiaynConfig
from .linformer_aiayn import LinformerAttention
from .local_attention_aiayn import SlidingWindowAttention

ATTENTION_PATTERNS: dict[str, type[AttentionPattern]] = {
    "full": FullAttention,
    "sliding_window": SlidingWindowAttention,
    "linformer": LinformerAttention,
    "random_blocks": RandomBlocksAttention,
}
ATTENTION_SCORES: dict[str, type[nn.Module]] = {
    "dot_product": DotProductScore,
    "additive": AdditiveScore,
}


def attention_pattern_class(config: AiaynConfig, is_causal: bool) -> type[AttentionPattern]:
    """The pattern whose config field is set (not None) and which serves this stack, less those another chosen
    pattern extends, or full attention."""
    chosen = [
        pattern
        for pattern in ATTENTION_PATTERNS.values()
        if pattern.config_field is not None
        and getattr(config, pattern.config_field, None) is not None
        and (pattern.causal or not is_causal)
    ]
    extended = {pattern.extends for pattern in chosen}
    chosen = [pattern for pattern in chosen if pattern.config_field not in extended]
    if len(chosen) > 1:
        fields = ", ".join(pattern.config_field for pattern in chosen)
        raise ValueError(f"{fields} each choose an attention pattern; set one of them.")
    return chosen[0] if chosen else FullAttention


def build_attention_score(config: AiaynConfig) -> nn.Module:
    """The score module of one attention layer, `config.attention_score`."""
    return ATTENTION_SCORES[config.attention_score](config)
