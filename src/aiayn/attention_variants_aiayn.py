"""The attention variants a config can choose, one registry per axis (see `attention_aiayn`):

- `ATTENTION_PATTERNS`: which keys each query sees. Each pattern names the config field that selects it
  (`AttentionPattern.config_field`), the stacks and backends it serves, the pattern it extends and the model inputs
  it reads (`AttentionPattern.inputs`, collected in `PATTERN_INPUTS`); with none of those fields set, a stack attends
  fully, as do the causal stacks of an encoder-decoder model where the pattern serves bidirectional stacks only
  (`AttentionPattern.stacks`). Config validation (`check_attention_pattern`) and
  backend selection (`check_attention_backend`) read those declarations.
- `ATTENTION_SCORES`: how a query scores a key, by `config.attention_score`.

A variant declares the config fields it adds in its own module (`config_fields`, a dataclass); `AttentionFields`
combines them with `attention_score`, and `AiaynConfig` is built on it. A new variant is a class in a file of its
own, imported and registered here; the configs, the stack, the layers and the heads name none.

This module imports nothing but torch, transformers and the standard library: `save_pretrained` copies it next to
the weights with the configuration and the modeling code (and, through its imports, every variant).
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from torch import nn

from .additive_attention_aiayn import AdditiveScore
from .attention_aiayn import AttentionPattern, DotProductScore, FullAttention
from .bigbird_aiayn import RandomBlocksAttention
from .linformer_aiayn import LinformerAttention
from .local_attention_aiayn import SlidingWindowAttention

if TYPE_CHECKING:
    from .configuration_aiayn import AiaynConfig

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
# The inputs of a model's forward that the patterns read (`AttentionPattern.inputs`): a stack takes them from its
# keyword arguments and hands them to its pattern (`AttentionPatternInputs`); the layers and the heads name none.
PATTERN_INPUTS: tuple[str, ...] = tuple(
    dict.fromkeys(name for pattern in ATTENTION_PATTERNS.values() for name in pattern.inputs)
)
# The config fields the variants declare in their modules (`config_fields`), each dataclass once.
VARIANT_FIELDS: tuple[type, ...] = tuple(
    dict.fromkeys(
        variant.config_fields
        for variant in (*ATTENTION_PATTERNS.values(), *ATTENTION_SCORES.values())
        if variant.config_fields is not None
    )
)


@dataclass(kw_only=True, repr=False, eq=False)
class AttentionFields(*VARIANT_FIELDS):
    """The config fields of the attention variants, which `AiaynConfig` is built on: the score, by name, and the fields
    each pattern declares in its own module (`config_fields`: `SlidingWindowFields`, `RandomBlocksFields`,
    `LinformerFields`), with their validators and checks.

    Attributes:
        attention_score: How a query scores a key, a name in `ATTENTION_SCORES`: `"dot_product"`, eq. (1)
            (`scale_attention` applies to it), or `"additive"`, Bahdanau's `v^T tanh(q + k)` per head with a learned
            `v` of size d_k, the alternative section 3.2.1 weighs (`additive_attention_aiayn`; with
            attn_implementation "eager" or "sdpa").
    """

    attention_score: Literal[tuple(ATTENTION_SCORES)] = "dot_product"

    def validate_attention_pattern(self):
        """The patterns' declarations (`check_attention_pattern`): one pattern at a time, the one a pattern extends
        set too, and a pattern that serves this family's stacks."""
        check_attention_pattern(self)


def chosen_patterns(config: "AiaynConfig") -> list[type[AttentionPattern]]:
    """The patterns whose config field is set (not None), less those another chosen pattern extends."""
    chosen = [
        pattern
        for pattern in ATTENTION_PATTERNS.values()
        if pattern.config_field is not None and getattr(config, pattern.config_field, None) is not None
    ]
    extended = {pattern.extends for pattern in chosen}
    return [pattern for pattern in chosen if pattern.config_field not in extended]


def check_attention_pattern(config: "AiaynConfig"):
    """Config validation from the patterns' declarations: one pattern at a time, the pattern a chosen one extends set
    too, and a chosen pattern serving one of the stacks the family has (`config.attention_stacks`); a seq2seq model's
    stacks that a pattern does not serve attend fully."""
    chosen = chosen_patterns(config)
    if len(chosen) > 1:
        fields = " and ".join(
            f"{pattern.config_field} ({getattr(config, pattern.config_field)})" for pattern in chosen
        )
        raise ValueError(f"{fields} each choose an attention pattern; set one of them.")
    for pattern in chosen:
        if pattern.extends is not None and getattr(config, pattern.extends, None) is None:
            raise ValueError(
                f"{pattern.config_field} extends the pattern of {pattern.extends} ({pattern.__name__}): set "
                f"{pattern.extends} too."
            )
        if not set(pattern.stacks) & set(config.attention_stacks):
            raise ValueError(
                f"{pattern.config_field} selects {pattern.__name__}, which serves {' and '.join(pattern.stacks)} "
                f"stacks; {type(config).__name__}'s models have {' and '.join(config.attention_stacks)} stacks only."
            )


def attention_pattern_class(config: "AiaynConfig", is_causal: bool) -> type[AttentionPattern]:
    """The chosen pattern where it serves this stack, or full attention."""
    stack = "causal" if is_causal else "bidirectional"
    chosen = [pattern for pattern in chosen_patterns(config) if stack in pattern.stacks]
    return chosen[0] if chosen else FullAttention


def backend_kind(implementation: str) -> str:
    """The kind of an attention backend as variants declare it (`AttentionPattern.backends`): every flash kernel
    (`flash_attention_2`, `_3`, a hub kernel's) is `"flash_attention"`; `"paged|..."` is the backend it pages."""
    implementation = implementation.removeprefix("paged|")
    return "flash_attention" if "flash" in implementation else implementation


def check_attention_backend(config: "AiaynConfig", implementation: str):
    """Refuses, by the config field that chose it, a pattern or score that does not serve the backend."""
    variants = [(pattern, pattern.config_field) for pattern in chosen_patterns(config)]
    variants.append((ATTENTION_SCORES[config.attention_score], "attention_score"))
    kind = backend_kind(implementation)
    for variant, field in variants:
        if variant.backends is not None and kind not in variant.backends:
            served = ", ".join(repr(backend) for backend in variant.backends)
            raise ValueError(
                f"{field}={getattr(config, field)!r} ({variant.__name__}) runs under attn_implementation {served}; "
                f"{implementation!r} cannot compute it."
            )


def build_attention_score(config: "AiaynConfig") -> nn.Module:
    """The score module of one attention layer, `config.attention_score`."""
    return ATTENTION_SCORES[config.attention_score](config)
