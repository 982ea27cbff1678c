"""What aiayn refuses, and how it says so: the loading policy of its models (`from_pretrained`, `save_pretrained`)
and the checks of their inputs.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

import warnings

import torch
from torch import nn
from transformers import PreTrainedModel


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


def check_mask_shape(attention_mask: torch.Tensor | None, expected: tuple[int, int], name: str, meaning: str):
    """Raises `ValueError` when a 2D padding mask is not `expected = (batch, length)`. 4D masks are the caller's."""
    if attention_mask is not None and attention_mask.dim() == 2 and tuple(attention_mask.shape) != expected:
        raise ValueError(
            f"{name} has shape {tuple(attention_mask.shape)}, but a padding mask over {meaning} has shape {expected}."
        )


def check_labels_shape(labels: torch.Tensor, expected: tuple[int, ...], meaning: str, exact: bool = True):
    """Raises `ValueError` unless `labels` have the `expected` shape (or, with `exact=False`, begin with it)."""
    shape = tuple(labels.shape)
    if shape != expected if exact else shape[: len(expected)] != expected:
        wanted = expected if exact else f"({', '.join(map(str, expected))}, ...)"
        raise ValueError(f"labels have shape {shape}, but the model needs {meaning}: shape {wanted}.")


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


def _first_five(faults: list[str]) -> str:
    return "; ".join(faults[:5]) + (f"; and {len(faults) - 5} more" if len(faults) > 5 else "")


def is_stack(module: nn.Module) -> bool:
    """Whether `module` is a stack of layers (an encoder or a decoder), whose weights a checkpoint must hold."""
    return isinstance(getattr(module, "layers", None), nn.ModuleList)


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
          randomly initialised. New heads (a classifier, a pooler) may be missing without a warning, as usual.
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
        missing = [f"{key} is missing" for key in sorted(loading_info["missing_keys"]) if key.startswith(stacks)]
        if missing:
            warnings.warn(
                f"{pretrained_model_name_or_path} does not hold all the weights of this {cls.__name__}: "
                f"{_first_five(missing)}. Its layers are randomly initialised; check the checkpoint and the config "
                "passed with it.",
                stacklevel=2,
            )
        return (model, loading_info) if output_loading_info else model

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, with a `config.json` whose `auto_map` names every Auto class of the
        family (transformers writes only the saved class), so that any head loads from the folder with
        `trust_remote_code=True` where aiayn is not installed."""
        model_class = aiayn_class_of(self)
        modeling_module = model_class.__module__.rsplit(".", 1)[-1]
        configuration_module = type(self.config).__module__.rsplit(".", 1)[-1]
        self.config.auto_map = {
            "AutoConfig": f"{configuration_module}.{type(self.config).__name__}",
            **{auto_class: f"{modeling_module}.{name}" for auto_class, name in self.auto_classes.items()},
        }
        # transformers copies the code of the instance's class; under a wrapper's class, save as the model's own.
        wrapper_class, self.__class__ = type(self), model_class
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.__class__ = wrapper_class
