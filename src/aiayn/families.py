"""The four families in one table: family name -> the family's `PreTrainedModel` class, which holds its config
class, every Auto class it serves (`auto_classes`), the Auto class of its pretraining head and its description."""

from .modeling_aiayn_decoder import AiaynDecoderPreTrainedModel
from .modeling_aiayn_encoder import AiaynEncoderPreTrainedModel
from .modeling_aiayn_seq2seq import AiaynSeq2SeqPreTrainedModel
from .modeling_aiayn_vision import AiaynVisionPreTrainedModel

FAMILIES = {
    "encoder": AiaynEncoderPreTrainedModel,
    "decoder": AiaynDecoderPreTrainedModel,
    "seq2seq": AiaynSeq2SeqPreTrainedModel,
    "vision": AiaynVisionPreTrainedModel,
}


def family_of(model_type: str) -> str:
    """`"aiayn_decoder"` -> `"decoder"`."""
    return model_type.removeprefix("aiayn_")
