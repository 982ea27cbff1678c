"""The arguments that many forwards share, described once (`FORWARD_ARGUMENTS`), and `shared_arguments`, which
completes a forward's `Args:` section from its signature, as transformers' `auto_docstring` does for its models.

This module imports nothing outside the standard library: `save_pretrained` copies it next to the weights with the
modeling code.
"""

import inspect
import textwrap

FORWARD_ARGUMENTS = {
    "input_ids": "Token ids of shape `(batch_size, sequence_length)`.",
    "attention_mask": "1 at the tokens to attend to, 0 at padding; shape `(batch_size, sequence_length)`.",
    "token_type_ids": "Segment ids of shape `(batch_size, sequence_length)` (BERT's sentences A and B; with "
    "`config.type_vocab_size`).",
    "position_ids": "Position of each token, of shape `(batch_size, sequence_length)`; by default counted from "
    "`attention_mask` and the cache's length.",
    "inputs_embeds": "Token embeddings of shape `(batch_size, sequence_length, d_model)`, in place of `input_ids`.",
    "global_attention_mask": "1 at global tokens, which attend to every position and which every position attends "
    "to, whatever `config.sliding_window` (Longformer); 0 at tokens that attend within their window. Shape "
    "`(batch_size, sequence_length)`. With a sliding window, a head that reads the pooled first token makes it "
    "global unless this is given.",
    "cache": "Keys and values of earlier positions (`DynamicCache`, `StaticCache`; with encoder-decoder attention an "
    "`EncoderDecoderCache`); with `use_cache` one is created and returned. Positions continue from its length, or "
    "from the 2D `attention_mask` when given.",
    "use_cache": "Return the keys and values of this call in `cache` for the next decoding step; defaults to "
    "`config.use_cache`.",
    "encoder_hidden_states": "The states encoder-decoder attention reads, of shape "
    "`(batch_size, source_length, d_model)` (`config.add_cross_attention`; refused otherwise).",
    "encoder_attention_mask": "The padding mask of `encoder_hidden_states`, of shape `(batch_size, source_length)`.",
    "skip_logits": "Compute the loss without the logits, reading only the positions with labels (`logits` is then "
    "None). By default when training with labels; `False` returns the logits.",
    "pixel_values": "Images of shape `(batch_size, num_channels, height, width)`, as the folder's image processor "
    "(transformers' `ViTImageProcessor`) prepares them.",
    "interpolate_pos_encoding": "Read images of another size than `config.image_size` (sides multiples of "
    "`patch_size`): learned positions are interpolated, sinusoids computed for the new grid.",
    "**kwargs": "transformers' keyword arguments: `output_attentions`, `output_hidden_states`, `return_dict`, and the "
    "loss's (`num_items_in_batch`).",
}

_ENTRY_INDENT = " " * 4
_WIDTH = 116


def _parameter_names(function) -> list[str]:
    """The names a docstring gives `function`'s parameters, `self` left out: `*args`, `**kwargs` with their stars."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    parameters = inspect.signature(function).parameters.values()
    return [stars.get(parameter.kind, "") + parameter.name for parameter in parameters if parameter.name != "self"]


def _split_sections(docstring: str) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """The lines before `Args:`, each entry of `Args:` by name (its lines), and the lines from the next section on."""
    lines = inspect.cleandoc(docstring).splitlines()
    if "Args:" not in lines:
        after = next((i for i, line in enumerate(lines) if line in ("Returns:", "Raises:", "Yields:")), len(lines))
        return lines[:after], {}, lines[after:]
    start = lines.index("Args:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    entries: dict[str, list[str]] = {}
    for line in lines[start + 1 : end]:
        if line.startswith(_ENTRY_INDENT) and not line.startswith(_ENTRY_INDENT + " "):
            entries[line.strip().split(":", 1)[0]] = [line]
        elif line.strip():
            entries[list(entries)[-1]].append(line)
    return lines[:start], entries, lines[end:]


def _entry(name: str, description: str) -> list[str]:
    return textwrap.wrap(
        f"{name}: {description}",
        _WIDTH,
        initial_indent=_ENTRY_INDENT,
        subsequent_indent=_ENTRY_INDENT * 2,
        break_on_hyphens=False,
    )


def shared_arguments(forward):
    """Completes `forward`'s `Args:` section, in the order of its signature, with the description in
    `FORWARD_ARGUMENTS` of each parameter the section does not describe itself. A parameter described by neither is
    an error, so that every argument of every forward is documented."""
    before, own, after = _split_sections(forward.__doc__ or "")
    entries = []
    for name in _parameter_names(forward):
        if name in own:
            entries += own.pop(name)
        elif name in FORWARD_ARGUMENTS:
            entries += _entry(name, FORWARD_ARGUMENTS[name])
        else:
            raise TypeError(f"{forward.__qualname__}: the argument {name!r} is described nowhere.")
    if own:
        raise TypeError(f"{forward.__qualname__}: its docstring describes arguments it does not take: {sorted(own)}.")
    while before and not before[-1]:
        before.pop()
    forward.__doc__ = "\n".join([*before, "", "Args:", *entries, "", *after]).rstrip() + "\n"
    return forward
