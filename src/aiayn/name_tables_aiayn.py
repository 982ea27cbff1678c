"""aiayn's entries in the tables where transformers and PEFT look a model up by its class name or model type.

Some decisions are taken from tables rather than from the model (transformers 5.24, PEFT 0.21):

- the `Trainer` shifts the labels for label smoothing only for the causal LMs named in
  `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` (a causal LM missing there is trained to copy its input);
- a pipeline's `check_model_type` logs "The model ... is not supported for <task>" for a class missing from its
  task's table (text-generation, text-classification, token-classification, image-classification);
- PEFT's `LoraConfig()` without `target_modules` adapts the modules its table names for the model type.

Each aiayn model class enters these tables as it is defined (`AiaynPreTrainedModel.__init_subclass__`): through
`import aiayn`, and equally through a folder's copied code loaded with `trust_remote_code=True` where aiayn is not
installed, so that both are treated alike. Only aiayn's own model types are written, only for the classes defined,
and never over an entry that is there: defining the classes again (a second folder, a folder after `import aiayn`)
changes nothing.

This module imports nothing but transformers (and PEFT where it is installed): `save_pretrained` copies it next to the
weights with the modeling code.
"""

from transformers.models.auto import modeling_auto
from transformers.utils import is_peft_available

# Auto class -> transformers' table of model type -> class name for it.
NAME_TABLES = {
    "AutoModel": modeling_auto.MODEL_MAPPING_NAMES,
    "AutoModelForCausalLM": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    "AutoModelForMaskedLM": modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    "AutoModelForSeq2SeqLM": modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    "AutoModelForSequenceClassification": modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    "AutoModelForTokenClassification": modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
    "AutoModelForQuestionAnswering": modeling_auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES,
    "AutoModelForMultipleChoice": modeling_auto.MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES,
    "AutoModelForTextEncoding": modeling_auto.MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES,
    "AutoModelForImageClassification": modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
    "AutoModelForMaskedImageModeling": modeling_auto.MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES,
}


def register_class_names(model_class: type) -> None:
    """Enters `model_class` in the table of each Auto class its family's `auto_classes` serves it by, under its
    config's model type, and its family's `lora_target_modules` in PEFT's default LoRA targets. Classes without a
    model type (the shared bases) enter nothing."""
    model_type = model_class.config_class.model_type
    if not model_type:
        return
    for auto_class, class_name in model_class.auto_classes.items():
        if class_name == model_class.__name__:
            NAME_TABLES[auto_class].setdefault(model_type, class_name)
    if model_class.lora_target_modules and is_peft_available():
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

        TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.setdefault(model_type, model_class.lora_target_modules)
