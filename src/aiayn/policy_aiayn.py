"""What aiayn refuses, and how it says so: the loading policy of its models (`from_pretrained`, `save_pretrained`)
and the checks of their inputs.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

import warnings

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.dynamic_module_utils import custom_object_save


class IndexOutOfRangeError(ValueError, IndexError):
    """An id outside the table it indexes (a token, a token type, a learned position). transformers' own models raise
    `IndexError` from inside the embedding lookup (on GPUs, a device-side assert); aiayn names the id and the limit,
    and raises an error that both `except IndexError` and `except ValueError` catch."""


def check_token_ids(ids: torch.Tensor | None, size: int, name: str, size_name: str):
    """Raises `IndexOutOfRangeError` naming the first of `ids` outside `[0, size)`, rather than an index error from
    inside the embedding lookup. Skipped while compiling: it reads values."""
    if ids is None or ids.numel() == 0 or torch.compiler.is_compiling():
        return
    low, high = torch.aminmax(ids)
    if low < 0 or high >= size:
        bad = (ids < 0) | (ids >= size)
        raise IndexOutOfRangeError(f"{name} contain {ids[bad][0].item()}, outside [0, {size}) ({size_name}={size}).")


def check_padding_mask(attention_mask: torch.Tensor | None, expected: tuple[int, int], name: str, meaning: str):
    """Raises `ValueError` when a 2D padding mask is not `expected = (batch, length)` or holds values other than 1
    (a token) and 0 (padding): positions count the mask's ones. 4D masks are the caller's."""
    if attention_mask is None or attention_mask.dim() != 2:
        return
    if tuple(attention_mask.shape) != expected:
        raise ValueError(
            f"{name} has shape {tuple(attention_mask.shape)}, but a padding mask over {meaning} has shape {expected}."
        )
    if attention_mask.dtype != torch.bool and not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        found = sorted({value.item() for value in attention_mask.unique()[:8]})
        raise ValueError(
            f"{name} holds values other than 0 and 1 ({found}): a padding mask has 1 for each token and 0 for padding."
        )


def check_labels_shape(labels: torch.Tensor, expected: tuple[int, ...], meaning: str, exact: bool = True):
    """Raises `ValueError` unless `labels` have the `expected` shape (or, with `exact=False`, begin with it)."""
    shape = tuple(labels.shape)
    if shape != expected if exact else shape[: len(expected)] != expected:
        wanted = expected if exact else f"({', '.join(map(str, expected))}, ...)"
        raise ValueError(f"labels have shape {shape}, but the model needs {meaning}: shape {wanted}.")


def check_stack_inputs(
    stack: nn.Module,
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    past_length: int | torch.Tensor,
    encoder_hidden_states: torch.Tensor | None,
    encoder_attention_mask: torch.Tensor | None,
):
    """Raises `ValueError` unless a stack gets exactly one of ids and embeddings (ids only where it has a token table),
    ids inside the vocabulary (`IndexOutOfRangeError`), encoder states only where it has encoder-decoder attention, and
    padding masks shaped like the tokens they cover."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Specify exactly one of input_ids and inputs_embeds.")
    prefix = "decoder_" if stack.has_cross_attention else ""
    if stack.embeddings is None and input_ids is not None:
        raise ValueError("This stack has no token table: its inputs come embedded (inputs_embeds).")
    if input_ids is not None:
        check_token_ids(input_ids, stack.embeddings.embed_tokens.num_embeddings, f"{prefix}input_ids", "vocab_size")
    if encoder_hidden_states is not None and not stack.has_cross_attention:
        raise ValueError(
            "encoder_hidden_states were given to a stack without encoder-decoder attention, which would ignore them: "
            "build the decoder with add_cross_attention=True (AiaynDecoderConfig(add_cross_attention=True), as "
            "EncoderDecoderModel.from_encoder_decoder_pretrained does), or use the seq2seq family."
        )
    if torch.compiler.is_compiling():
        return
    (batch_size, seq_length), past_length = (
        (input_ids if input_ids is not None else inputs_embeds).shape[:2],
        int(past_length),
    )
    check_padding_mask(
        attention_mask,
        (batch_size, past_length + seq_length),
        f"{prefix}attention_mask",
        f"{seq_length} tokens" + (f" after {past_length} cached ones" if past_length else ""),
    )
    if encoder_hidden_states is not None:
        check_padding_mask(
            encoder_attention_mask,
            tuple(encoder_hidden_states.shape[:2]),
            "attention_mask",
            f"{encoder_hidden_states.shape[1]} source tokens",
        )


def check_token_type_ids(token_type_ids: torch.Tensor | None, shape: tuple[int, int], table: nn.Embedding | None):
    """Raises `ValueError` for token types given to a model without them or shaped unlike the inputs, and
    `IndexOutOfRangeError` for types outside `table`."""
    if token_type_ids is None:
        return
    if table is None:
        raise ValueError("token_type_ids were given but the model has no token types (config.type_vocab_size=0).")
    if tuple(token_type_ids.shape) != shape:
        raise ValueError(
            f"token_type_ids have shape {tuple(token_type_ids.shape)}; the inputs have shape {shape}: one token "
            "type per token."
        )
    check_token_ids(token_type_ids, table.num_embeddings, "token_type_ids", "type_vocab_size")


def check_positions(position_ids: torch.Tensor, limit: int):
    """Raises `IndexOutOfRangeError` for positions past a learned table of `limit` rows (`max_position_embeddings`);
    the other position types extend to any length."""
    if position_ids.numel() == 0 or torch.compiler.is_compiling():
        return
    length = int(position_ids.max()) + 1
    if length > limit:
        raise IndexOutOfRangeError(
            f"The sequence is {length} tokens long (cached tokens included), longer than "
            f"max_position_embeddings={limit}, the positions this model has learned embeddings for. Truncate the "
            f"input to {limit} tokens (tokenizer(..., truncation=True, max_length={limit})), or use a model with "
            "sinusoidal, relative or rotary positions, which extend past the training length."
        )


def check_global_attention_mask(
    global_attention_mask: torch.Tensor | None, shape: tuple[int, int], is_causal: bool, config
):
    """Global tokens need bidirectional attention, a mask shaped like the inputs, and a backend that can mix them
    into the window."""
    if global_attention_mask is None:
        return
    if is_causal:
        raise ValueError(
            "global_attention_mask marks tokens that attend to every position, which needs bidirectional "
            "attention: encoders (and the encoder of a seq2seq model) take it; a causal decoder does not."
        )
    if tuple(global_attention_mask.shape) != shape:
        raise ValueError(
            f"global_attention_mask has shape {tuple(global_attention_mask.shape)}, but the inputs have shape "
            f"{shape}: one 0 or 1 per token."
        )
    if config._attn_implementation.startswith("flash"):
        raise ValueError(
            "Flash attention takes a window but no global tokens; use attn_implementation='sdpa', "
            "'flex_attention' or 'eager' with global_attention_mask."
        )


def check_continuous_batching(config) -> None:
    """Raises `ValueError` where transformers' continuous batching (`generate_batch`, paged attention, `transformers
    serve --continuous-batching`) cannot run the model: it packs decoder-only prompts into one paged cache, so it has
    no encoder input, and it keeps no key positions for a relative position bias."""
    if config.is_encoder_decoder:
        raise ValueError(
            "transformers' continuous batching generates from decoder-only prompts and has no encoder input; batch "
            "sources with generate() for an encoder-decoder model."
        )
    if config.position_embedding_type == "relative":
        raise ValueError(
            "Relative position bias needs the position of every cached key, which continuous batching's paged cache "
            "does not keep. Use generate(), or a model with learned, sinusoidal or rotary positions."
        )


def check_tied_weights_contiguous(model: nn.Module):
    """Raises `ValueError` when a weight that several names share (tied embeddings and output head) is not contiguous
    in memory, as inside `aiayn.decoding_layout`: transformers' `save_pretrained` reads shared tensors as flat views,
    which such a weight has not."""
    names_by_weight = {}
    for name, weight in model.named_parameters(remove_duplicate=False):
        names_by_weight.setdefault(weight, []).append(name)
    faults = [
        " = ".join(names) for weight, names in names_by_weight.items() if len(names) > 1 and not weight.is_contiguous()
    ]
    if faults:
        raise ValueError(
            f"The tied weights {_first_five(faults)} are not contiguous in memory (laid out for decoding inside "
            "`aiayn.decoding_layout`), and transformers saves tied weights from contiguous memory only: save the "
            "model after the block."
        )


def _first_five(faults: list[str]) -> str:
    return "; ".join(faults[:5]) + (f"; and {len(faults) - 5} more" if len(faults) > 5 else "")


def is_stack(module: nn.Module) -> bool:
    """Whether `module` is a stack of layers (an encoder or a decoder), whose weights a checkpoint must hold."""
    return isinstance(getattr(module, "layers", None), nn.ModuleList)


def is_aiayn_module(module_name: str) -> bool:
    """Whether a module is aiayn's (installed, or a folder's copy): `modeling_aiayn*` or `*_aiayn`."""
    name = module_name.rsplit(".", 1)[-1]
    return name.startswith("modeling_aiayn") or name.endswith("_aiayn")


def aiayn_class_of(model: PreTrainedModel) -> type[PreTrainedModel]:
    """The aiayn class of `model`: the first class of its MRO defined in a `modeling_aiayn*` module. FSDP2's
    `fully_shard` swaps a module's class for a subclass of it and `FSDPModule` made on the fly
    (`FSDPAiaynDecoderForCausalLM`, in a module of torch's), which a saved folder must not name."""
    return next(cls for cls in type(model).__mro__ if cls.__module__.rsplit(".", 1)[-1].startswith("modeling_aiayn"))


class AiaynCheckpointBase(PreTrainedModel):
    """The `PreTrainedModel` base of every aiayn model, which holds how its checkpoints load and save:
    `from_pretrained` and `save_pretrained` are transformers' own, with safeguards and a full `auto_map`. Each family
    lists its Auto classes in `auto_classes`."""

    # Auto class name -> model class name, for every Auto class the family supports (set by each family).
    auto_classes: dict[str, str] = {}

    def __init_subclass__(cls, **kwargs):
        """transformers' set-up of a model class. A subclass defined outside aiayn's code is a wrapper's, made on the
        fly (FSDP2's `fully_shard` makes one in a module of torch's): transformers does not save its code or name it
        in `auto_map` (it has no Auto class), `save_pretrained` saves the aiayn class's."""
        super().__init_subclass__(**kwargs)
        if not is_aiayn_module(cls.__module__):
            cls._auto_class = None

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path,
        *model_args,
        use_safetensors: bool | None = True,
        ignore_mismatched_sizes: bool = False,
        output_loading_info: bool = False,
        **kwargs,
    ) -> "AiaynCheckpointBase":
        """`PreTrainedModel.from_pretrained`, with safeguards against loading anything but this model's weights:

        - only safetensors are read unless `use_safetensors=False` (or `None`) is passed: pickled
          `pytorch_model.bin` files can run code when loaded (transformers then reads them with
          `torch.load(weights_only=True)`);
        - an unreadable (truncated, corrupted) weights file raises `OSError` naming the checkpoint;
        - weights held in other shapes raise `RuntimeError` listing them, as transformers does for a size mismatch
          (`ignore_mismatched_sizes=True` re-initialises them instead);
        - a checkpoint that lacks weights of the model's stacks loads as in transformers (the missing weights are
          initialised and listed by `output_loading_info=True`), with a warning naming them: its layers are then
          randomly initialised. New heads (a classifier, a pooler) may be missing without a warning, as usual, and so
          may the encoder-decoder attention of a decoder loaded with `add_cross_attention=True` from a checkpoint
          saved without it (`EncoderDecoderModel.from_encoder_decoder_pretrained`'s warm start).
        """
        try:
            model, loading_info = super().from_pretrained(
                pretrained_model_name_or_path,
                *model_args,
                use_safetensors=use_safetensors,
                ignore_mismatched_sizes=True,
                output_loading_info=True,
                **kwargs,
            )
        except OSError as error:
            if use_safetensors and "no file named model.safetensors" in str(error):
                raise OSError(
                    f"{error} Only safetensors weights are read unless use_safetensors=False is passed, which reads "
                    "pickled pytorch_model.bin files with torch.load(weights_only=True)."
                ) from error
            raise
        except Exception as error:
            if type(error).__name__ != "SafetensorError":
                raise
            raise OSError(
                f"The weights of {pretrained_model_name_or_path} cannot be read ({error}): the safetensors file is "
                "truncated or corrupted. Save or download it again."
            ) from error
        if loading_info["mismatched_keys"] and not ignore_mismatched_sizes:
            faults = [
                f"{key} has shape {tuple(saved)} in the checkpoint and {tuple(expected)} in the model"
                for key, saved, expected in sorted(loading_info["mismatched_keys"])
            ]
            raise RuntimeError(
                f"{pretrained_model_name_or_path} does not hold the weights of this {cls.__name__}: "
                f"{_first_five(faults)}. Check the checkpoint and the config passed with it, or pass "
                "ignore_mismatched_sizes=True to initialise these weights anew."
            )
        stacks = tuple(f"{name}." for name, module in model.named_modules() if is_stack(module))
        missing_keys = sorted(loading_info["missing_keys"])
        if getattr(model.config, "add_cross_attention", False):
            # A warm start (`add_cross_attention=True` given to a decoder saved without it): that attention is new.
            new_attention = [key for key in missing_keys if ".cross_attn" in key]
            if len(new_attention) == sum(".cross_attn" in key for key in model.state_dict()):
                missing_keys = [key for key in missing_keys if ".cross_attn" not in key]
        missing = [f"{key} is missing" for key in missing_keys if key.startswith(stacks)]
        if missing:
            warnings.warn(
                f"{pretrained_model_name_or_path} does not hold all the weights of this {cls.__name__}: "
                f"{_first_five(missing)}. Its layers are randomly initialised; check the checkpoint and the config "
                "passed with it.",
                stacklevel=2,
            )
        return (model, loading_info) if output_loading_info else model

    def save_pretrained(self, save_directory, is_main_process: bool = True, **kwargs):
        """`PreTrainedModel.save_pretrained`, with a `config.json` whose `auto_map` names every Auto class of the
        family (transformers writes only the saved class), so that any head loads from the folder with
        `trust_remote_code=True` where aiayn is not installed. transformers copies the code of a registered aiayn
        class; under a wrapper's class (see `__init_subclass__`) the aiayn class's code is copied here."""
        check_tied_weights_contiguous(self)
        model_class = aiayn_class_of(self)
        modeling_module = model_class.__module__.rsplit(".", 1)[-1]
        configuration_module = type(self.config).__module__.rsplit(".", 1)[-1]
        self.config.auto_map = {
            "AutoConfig": f"{configuration_module}.{type(self.config).__name__}",
            **{auto_class: f"{modeling_module}.{name}" for auto_class, name in self.auto_classes.items()},
        }
        saved = super().save_pretrained(save_directory, is_main_process=is_main_process, **kwargs)
        wrapped = model_class._auto_class is not None and not self.is_remote_code()
        if wrapped and self.should_save_on_this_rank(is_main_process):
            custom_object_save(model_class, save_directory)
        return saved
