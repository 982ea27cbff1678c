"""Validators of config fields, shared by the configs (`configuration_aiayn`) and the attention variants that declare
their own fields (`attention_variants_aiayn.AttentionFields`).

`@strict` configs run a field's type check, then its validator, at construction and on every assignment.

This module imports nothing but huggingface_hub: `save_pretrained` copies it next to the weights with the
configuration.
"""

from huggingface_hub.dataclasses import as_validated_field


@as_validated_field
def positive(value: int | float | None):
    """A size, count or constant greater than 0 (None: derived from other fields, or an option left unset)."""
    if value is not None and not value > 0:
        raise ValueError(f"Value must be positive, got {value!r}.")


@as_validated_field
def non_negative(value: int | float):
    """A count, seed or scale of at least 0."""
    if not value >= 0:
        raise ValueError(f"Value must be non-negative, got {value!r}.")


@as_validated_field
def dropout_probability(value: int | float | None):
    """A dropout rate: 1 would zero every activation."""
    if value is not None and not 0 <= value < 1:
        raise ValueError(f"Value must be a probability in [0, 1), got {value!r}.")


@as_validated_field
def smoothing_factor(value: int | float):
    """A label-smoothing factor: the share of each target's probability spread over the vocabulary (1 would leave
    none on the target)."""
    if not 0 <= value < 1:
        raise ValueError(f"Value must be a label-smoothing factor in [0, 1), got {value!r}.")
