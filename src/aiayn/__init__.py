"""aiayn: the Transformer of "Attention Is All You Need" as BERT-, GPT-, T5- and ViT-style model families for
transformers.

Importing the package registers every config and model class with transformers' Auto classes, so that
`AutoConfig`, `AutoModel`, `AutoModelForCausalLM`, `AutoModelForSeq2SeqLM`, ... build and load aiayn models like
built-in ones, and marks them for `save_pretrained` to copy their code next to the weights. (The tables where
transformers looks models up by class name are filled by the model classes themselves, `name_tables_aiayn`, so that a
folder's copied code fills them too.)
"""

import logging
import sys

import torch


class _CudaOnlyMessages(logging.Filter):
    """Drops, on CPU builds of torch, what torchao logs when transformers imports it (wherever it is installed): the
    kernels it cannot load because they link against torch's CUDA library, and torch's deprecation of its enums'
    registration. Neither concerns a CPU user (docs/troubleshooting.md shows them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Failed to load") or "register_constant() on Enum subclasses" in message)


if torch.version.cuda is None:
    for _name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(_name).addFilter(_CudaOnlyMessages())

import transformers
from transformers.pipelines import PIPELINE_REGISTRY, REMOVED_TASKS

from . import modeling_aiayn_decoder, modeling_aiayn_encoder, modeling_aiayn_seq2seq, modeling_aiayn_vision
from .configuration_aiayn import (
    PRESETS,
    AiaynConfig,
    AiaynDecoderConfig,
    AiaynEncoderConfig,
    AiaynSeq2SeqConfig,
    AiaynTextConfig,
    AiaynVisionConfig,
    preset_config,
)
from .families import FAMILIES
from .layout_aiayn import decoding_layout
from .modeling_aiayn import AiaynPreTrainedModel
from .modeling_aiayn_decoder import *  # noqa: F403
from .modeling_aiayn_encoder import *  # noqa: F403
from .modeling_aiayn_seq2seq import *  # noqa: F403
from .modeling_aiayn_vision import *  # noqa: F403
from .pipeline_aiayn import TEXT2TEXT_TASKS, AiaynText2TextGenerationPipeline
from .policy_aiayn import IndexOutOfRangeError

__version__ = "0.1.0"


def _register_family(pretrained_class: type[AiaynPreTrainedModel]) -> None:
    module = sys.modules[pretrained_class.__module__]
    config_class = pretrained_class.config_class
    transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    config_class.register_for_auto_class()
    for auto_class_name, class_name in pretrained_class.auto_classes.items():
        model_class = getattr(module, class_name)
        getattr(transformers, auto_class_name).register(config_class, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class_name)


def _register_text2text_pipeline() -> None:
    """Serves the seq2seq tasks transformers 5 removed with aiayn's pipeline (see `pipeline_aiayn`)."""
    for task in TEXT2TEXT_TASKS:
        REMOVED_TASKS.pop(task, None)
        PIPELINE_REGISTRY.register_pipeline(
            task, AiaynText2TextGenerationPipeline, pt_model=transformers.AutoModelForSeq2SeqLM, type="text"
        )


for _family_class in FAMILIES.values():
    _register_family(_family_class)
_register_text2text_pipeline()

__all__ = [
    "AiaynConfig",
    "AiaynTextConfig",
    "AiaynEncoderConfig",
    "AiaynDecoderConfig",
    "AiaynSeq2SeqConfig",
    "AiaynVisionConfig",
    "AiaynPreTrainedModel",
    "FAMILIES",
    "decoding_layout",
    "IndexOutOfRangeError",
    "AiaynText2TextGenerationPipeline",
    "PRESETS",
    "preset_config",
    *modeling_aiayn_encoder.__all__,
    *modeling_aiayn_decoder.__all__,
    *modeling_aiayn_seq2seq.__all__,
    *modeling_aiayn_vision.__all__,
]
