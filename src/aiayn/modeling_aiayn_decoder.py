"""GPT-style decoder-only models: the paper's decoder stack without encoder-decoder attention, and its heads."""

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    SequenceClassifierOutputWithPast,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from .configuration_aiayn import AiaynDecoderConfig
from .docstrings_aiayn import shared_arguments
from .heads_aiayn import (
    AiaynForQuestionAnswering,
    AiaynForSequenceClassification,
    AiaynForTokenClassification,
    AiaynLanguageModel,
    carried_fields,
)
from .modeling_aiayn import AiaynGenerationMixin, AiaynPreTrainedModel, AiaynStack, AiaynTokenEmbedding


class AiaynDecoderPreTrainedModel(AiaynPreTrainedModel):
    """The base of the decoder family's models: their config (`AiaynDecoderConfig`), the Auto classes that build them
    (`auto_classes`) and how the heads written once read this family's base model.

    Examples:
        >>> from transformers import AutoModelForCausalLM
        >>> from aiayn import AiaynDecoderPreTrainedModel, preset_config
        >>> model = AutoModelForCausalLM.from_config(preset_config("tiny-decoder"))
        >>> type(model).__name__, isinstance(model, AiaynDecoderPreTrainedModel)
        ('AiaynDecoderForCausalLM', True)
    """

    config: AiaynDecoderConfig
    description = "GPT-style decoder-only Transformer"
    pretraining_auto_class = "AutoModelForCausalLM"
    lora_target_modules = ["qkv_proj"]  # PEFT's defaults (`name_tables_aiayn`)
    # Auto class -> model class of this family; `save_pretrained` writes all of them into config.json's auto_map.
    auto_classes = {
        "AutoModel": "AiaynDecoderModel",
        "AutoModelForCausalLM": "AiaynDecoderForCausalLM",
        "AutoModelForSequenceClassification": "AiaynDecoderForSequenceClassification",
        "AutoModelForTokenClassification": "AiaynDecoderForTokenClassification",
        "AutoModelForQuestionAnswering": "AiaynDecoderForQuestionAnswering",
    }

    def build_body(self, config: AiaynDecoderConfig, pooled: bool) -> "AiaynDecoderModel":
        """The base model of the heads: the decoder stack (there is no pooler)."""
        return AiaynDecoderModel(config)


class AiaynDecoderModel(AiaynDecoderPreTrainedModel):
    """The causal decoder stack: every position attends to itself and the positions before it, and, with
    `config.add_cross_attention`, to the states of an encoder (`encoder_hidden_states`).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynDecoderModel, preset_config
        >>> model = AiaynDecoderModel(preset_config("tiny-decoder", vocab_size=100)).eval()  # d_model 64
        >>> outputs = model(input_ids=torch.tensor([[5, 17, 42]]), use_cache=True)
        >>> outputs.last_hidden_state.shape, outputs.cache.get_seq_length()  # the cache holds the 3 positions
        (torch.Size([1, 3, 64]), 3)
    """

    def __init__(self, config: AiaynDecoderConfig):
        super().__init__(config)
        embed_tokens = AiaynTokenEmbedding(config.vocab_size, config.d_model)
        self.decoder = AiaynStack(
            config, embed_tokens, config.num_layers, is_causal=True, has_cross_attention=config.add_cross_attention
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        self.decoder.set_input_embeddings(value)

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Runs the causal stack over a batch of sequences (or their next positions, with a cache).

        Args:

        Returns:
            A `BaseModelOutputWithPastAndCrossAttentions` with `last_hidden_state`, `cache` (with `use_cache`) and,
                when asked for, `hidden_states`, `attentions` and `cross_attentions`.
        """
        outputs = self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )
        return BaseModelOutputWithPastAndCrossAttentions(
            **carried_fields(outputs, BaseModelOutputWithPastAndCrossAttentions)
        )


class AiaynDecoderForCausalLM(AiaynDecoderPreTrainedModel, AiaynLanguageModel, AiaynGenerationMixin):
    """Language model: the next-token distribution at every position (the paper's decoder output, section 3.4).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynDecoderForCausalLM, preset_config
        >>> model = AiaynDecoderForCausalLM(preset_config("tiny-decoder", vocab_size=100)).eval()
        >>> input_ids = torch.tensor([[5, 17, 42, 8]])
        >>> outputs = model(input_ids=input_ids, labels=input_ids)  # shifted inside: position i is scored on i + 1
        >>> outputs.logits.shape, outputs.loss.shape
        (torch.Size([1, 4, 100]), torch.Size([]))
        >>> model.generate(input_ids, max_new_tokens=3, min_new_tokens=3, do_sample=False).shape  # prompt + 3 tokens
        torch.Size([1, 7])
    """

    labels_shape_description = "one label per input token"
    predicts_next_token = True
    _tied_weights_keys = {"lm_head.weight": "model.decoder.embeddings.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}  # split like the tied token table

    def __init__(self, config: AiaynDecoderConfig):
        super().__init__(config)
        self.model = AiaynDecoderModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        skip_logits: bool | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        """Scores the next token at every position.

        Args:
            labels: Usually the `input_ids`, of shape `(batch_size, sequence_length)`; the model shifts them, so
                position i is scored on token i + 1. -100 is ignored.
            logits_to_keep: Compute logits for the last `logits_to_keep` positions only (0: all), or for the given
                indices.
            skip_logits: Compute the loss without the logits, a chunk of positions at a time (`logits` is then None).
                By default when training with labels; `False` returns the logits.

        Returns:
            A `CausalLMOutputWithCrossAttentions` with `loss` (given `labels`), `logits` of shape
                `(batch_size, sequence_length, vocab_size)` (None when skipped), and what the base model returned
                (hidden states, attentions, cache).
        """
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            token_type_ids=token_type_ids,
            use_cache=use_cache,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            **kwargs,
        )
        logits, loss = self.predict_tokens(
            outputs.last_hidden_state, labels, skip_logits, logits_to_keep=logits_to_keep, **kwargs
        )
        output_class = CausalLMOutputWithCrossAttentions
        return output_class(loss=loss, logits=logits, **carried_fields(outputs, output_class))


class AiaynDecoderForSequenceClassification(AiaynDecoderPreTrainedModel, AiaynForSequenceClassification):
    """Classification or regression from the last real token, which has seen the whole sequence (GPT-2).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynDecoderForSequenceClassification, preset_config
        >>> model = AiaynDecoderForSequenceClassification(preset_config("tiny-decoder", num_labels=2)).eval()
        >>> input_ids = torch.tensor([[5, 17, 42], [5, 9, 0]])  # the second row padded on the right
        >>> attention_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
        >>> logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # at tokens 42 and 9
        >>> logits.shape
        torch.Size([2, 2])
        >>> torch.allclose(logits[1], model(input_ids=torch.tensor([[5, 9]])).logits[0], atol=5e-7)  # as unpadded
        True
    """

    output_class = SequenceClassifierOutputWithPast


class AiaynDecoderForTokenClassification(AiaynDecoderPreTrainedModel, AiaynForTokenClassification):
    """A label for every token, each seeing only its left context.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynDecoderForTokenClassification, preset_config
        >>> model = AiaynDecoderForTokenClassification(preset_config("tiny-decoder", num_labels=3)).eval()
        >>> outputs = model(input_ids=torch.tensor([[5, 17, 42, 8]]), labels=torch.tensor([[1, 2, 0, 0]]))
        >>> outputs.logits.shape  # a score for each label at each token
        torch.Size([1, 4, 3])
    """


class AiaynDecoderForQuestionAnswering(AiaynDecoderPreTrainedModel, AiaynForQuestionAnswering):
    """Extractive question answering: start and end scores for every token, each seeing only its left context.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynDecoderForQuestionAnswering, preset_config
        >>> model = AiaynDecoderForQuestionAnswering(preset_config("tiny-decoder", vocab_size=100)).eval()
        >>> input_ids = torch.tensor([[17, 4, 3, 45, 46, 47]])  # the question, a separator, the context
        >>> answer = {"start_positions": torch.tensor([4]), "end_positions": torch.tensor([5])}  # tokens 46 and 47
        >>> outputs = model(input_ids=input_ids, **answer)
        >>> outputs.start_logits.shape, outputs.end_logits.shape, outputs.loss.shape
        (torch.Size([1, 6]), torch.Size([1, 6]), torch.Size([]))
    """


__all__ = [
    "AiaynDecoderPreTrainedModel",
    "AiaynDecoderModel",
    "AiaynDecoderForCausalLM",
    "AiaynDecoderForSequenceClassification",
    "AiaynDecoderForTokenClassification",
    "AiaynDecoderForQuestionAnswering",
]
