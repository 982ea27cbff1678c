"""The text-to-text pipeline of the seq2seq family.

transformers 5 removed its `text2text-generation`, `translation` and `summarization` pipelines. This one serves the
three tasks for any model with `generate()` and a tokenizer: importing aiayn registers it for them, and the configs
that seq2seq models save name it in `custom_pipelines`, so that `pipeline(task, model=folder, trust_remote_code=True)`
finds it where aiayn is not installed (`save_pretrained` copies this file next to the model's code).

This module imports only torch and transformers.
"""

import torch
from transformers import Pipeline

TEXT2TEXT_TASKS = {
    "text2text-generation": "generated_text",
    "translation": "translation_text",
    "summarization": "summary_text",
}


class AiaynText2TextGenerationPipeline(Pipeline):
    """Sources in, generated text out: `[{"translation_text": ...}]` for `translation`, `summary_text` for
    `summarization`, `generated_text` for `text2text-generation`, one dict per returned sequence.

    Decoding follows the model's generation config (for the paper presets: beam 4, length penalty 0.6, at most the
    source length + 50 tokens); any `generate()` argument given to the pipeline or to a call overrides it.
    Each source is read after the config's `prefix` (T5's convention: `aiayn train --source_prefix` saves it) and cut
    to the tokenizer's `model_max_length` (the model's positions, as `aiayn train` saves it) unless `truncation` is
    False. Postprocessing takes `clean_up_tokenization_spaces`.

    Examples:
        >>> from transformers import AutoModelForSeq2SeqLM, pipeline
        >>> from aiayn import preset_config
        >>> from aiayn.tokenization import config_token_fields, train_tokenizer
        >>> tokenizer = train_tokenizer("seq2seq", ["the cat sat on the mat", "a dog sat on a log"], vocab_size=40)
        >>> config = preset_config("tiny", **config_token_fields(tokenizer, "seq2seq"))  # the tokenizer's ids
        >>> model = AutoModelForSeq2SeqLM.from_config(config)
        >>> translate = pipeline("translation", model=model, tokenizer=tokenizer)  # import aiayn registers the task
        >>> type(translate).__name__, list(translate("the cat sat", max_new_tokens=4)[0])  # untrained: any text
        ('AiaynText2TextGenerationPipeline', ['translation_text'])
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, truncation=None, clean_up_tokenization_spaces=None, **generate_kwargs):
        preprocess = {} if truncation is None else {"truncation": truncation}
        postprocess = {}
        if clean_up_tokenization_spaces is not None:
            postprocess["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess, generate_kwargs, postprocess

    def preprocess(self, text: str, truncation: bool = True) -> dict:
        return self.tokenizer((self.prefix or "") + text, return_tensors="pt", truncation=truncation)

    def _forward(self, model_inputs: dict, **generate_kwargs) -> dict:
        # Settings the model's generate() reads besides GenerationConfig's own fields (aiayn seq2seq: max_len_a, ...)
        custom_fields = getattr(self.model.config, "custom_generation_fields", ())
        custom = {name: generate_kwargs.pop(name) for name in custom_fields if name in generate_kwargs}
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        output_ids = self.model.generate(**model_inputs, **generate_kwargs, **custom)
        batch_size = model_inputs["input_ids"].shape[0]
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs: dict, clean_up_tokenization_spaces: bool = True) -> list[dict]:
        key = TEXT2TEXT_TASKS.get(self.task, "generated_text")
        sequences = model_outputs["output_ids"]
        if isinstance(sequences, torch.Tensor) and sequences.dim() == 3:  # not unbatched: a batch of one
            sequences = sequences[0]
        return [
            {
                key: self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            }
            for ids in sequences
        ]
