"""BERT-style encoder-only models: the paper's encoder stack with BERT's pooler and heads."""

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions, MaskedLMOutput
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple

from .configuration_aiayn import AiaynEncoderConfig
from .docstrings_aiayn import shared_arguments
from .heads_aiayn import (
    AiaynForMultipleChoice,
    AiaynForQuestionAnswering,
    AiaynForSequenceClassification,
    AiaynForTokenClassification,
    AiaynLanguageModel,
    AiaynPooler,
    carried_fields,
)
from .modeling_aiayn import AiaynPreTrainedModel, AiaynStack, AiaynTokenEmbedding, build_norm


class AiaynEncoderPreTrainedModel(AiaynPreTrainedModel):
    config: AiaynEncoderConfig
    description = "BERT-style encoder-only Transformer"
    pretraining_auto_class = "AutoModelForMaskedLM"
    lora_target_modules = ["qkv_proj"]  # PEFT's defaults (`name_tables_aiayn`)
    # Auto class -> model class of this family; `save_pretrained` writes all of them into config.json's auto_map.
    auto_classes = {
        "AutoModel": "AiaynEncoderModel",
        "AutoModelForMaskedLM": "AiaynEncoderForMaskedLM",
        "AutoModelForSequenceClassification": "AiaynEncoderForSequenceClassification",
        "AutoModelForTokenClassification": "AiaynEncoderForTokenClassification",
        "AutoModelForQuestionAnswering": "AiaynEncoderForQuestionAnswering",
        "AutoModelForMultipleChoice": "AiaynEncoderForMultipleChoice",
    }

    def build_body(self, config: AiaynEncoderConfig, pooled: bool) -> "AiaynEncoderModel":
        """The base model of the heads, with BERT's pooler where a head reads the pooled first token; its stack is
        then `pooled`, which the attention pattern reads (a sliding window makes that token global)."""
        body = AiaynEncoderModel(config, add_pooling_layer=pooled)
        body.encoder.pooled = pooled
        return body

    def sequence_features(self, outputs, input_ids, attention_mask) -> torch.Tensor:
        """BERT classifies a sequence from its pooled first token."""
        return outputs.pooler_output


class AiaynEncoderModel(AiaynEncoderPreTrainedModel):
    """The bidirectional encoder stack; with `add_pooling_layer`, also BERT's pooled first-token output.

    Args:
        config: The model's config.
        add_pooling_layer: Add BERT's pooler (dense and tanh over the first position's final state).
    """

    def __init__(self, config: AiaynEncoderConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        embed_tokens = AiaynTokenEmbedding(config.vocab_size, config.d_model)
        self.encoder = AiaynStack(config, embed_tokens, config.num_layers, is_causal=False)
        self.pooler = AiaynPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        self.encoder.set_input_embeddings(value)

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        """Encodes a batch of sequences.

        Args:

        Returns:
            A `BaseModelOutputWithPoolingAndCrossAttentions` with `last_hidden_state`, `pooler_output` (with the
                pooler) and, when asked for, `hidden_states` and `attentions`.
        """
        outputs = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        pooled = self.pooler(outputs.last_hidden_state) if self.pooler is not None else None
        carried = carried_fields(outputs, BaseModelOutputWithPoolingAndCrossAttentions)
        return BaseModelOutputWithPoolingAndCrossAttentions(pooler_output=pooled, **carried)


class AiaynEncoderMaskedLMHead(nn.Module):
    """BERT's prediction head: dense, activation and norm, then the projection to the vocabulary (tied to the token
    embeddings when `tie_word_embeddings`) with a per-token bias."""

    def __init__(self, config: AiaynEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model, bias=config.use_bias)
        self.act = ACT2FN[config.activation]
        self.norm = build_norm(config)
        self.decoder = nn.Linear(config.d_model, config.vocab_size, bias=config.use_bias)

    def features(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The transformed states that the projection to the vocabulary reads."""
        return self.norm(self.act(self.dense(hidden_states)))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.features(hidden_states))


class AiaynEncoderForMaskedLM(AiaynEncoderPreTrainedModel, AiaynLanguageModel):
    """BERT's masked language model: the original token at each masked position."""

    _tied_weights_keys = {"lm_head.decoder.weight": "model.encoder.embeddings.embed_tokens.weight"}
    _tp_plan = {"lm_head.decoder": "colwise_gather_output"}  # split like the tied token table
    _keys_to_ignore_on_load_unexpected = [r"pooler"]

    def __init__(self, config: AiaynEncoderConfig):
        super().__init__(config)
        self.model = AiaynEncoderModel(config, add_pooling_layer=False)
        self.lm_head = AiaynEncoderMaskedLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head.decoder = new_embeddings

    def token_features(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lm_head.features(hidden_states)

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        skip_logits: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        """Scores every vocabulary token at every position.

        Args:
            labels: The tokens to predict at masked positions, -100 elsewhere (not shifted); shape
                `(batch_size, sequence_length)`.
            skip_logits: Compute the loss without the logits, reading only the masked positions (`logits` is then
                None). By default when training with labels; `False` returns the logits.

        Returns:
            A `MaskedLMOutput` with `loss` (given `labels`), `logits` of shape
                `(batch_size, sequence_length, vocab_size)` (None when skipped), and what the base model returned
                (hidden states, attentions, cache).
        """
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        logits, loss = self.predict_tokens(outputs.last_hidden_state, labels, skip_logits, **kwargs)
        return MaskedLMOutput(loss=loss, logits=logits, **carried_fields(outputs, MaskedLMOutput))


class AiaynEncoderForSequenceClassification(AiaynEncoderPreTrainedModel, AiaynForSequenceClassification):
    """Classification or regression from the pooled first token (BERT)."""


class AiaynEncoderForTokenClassification(AiaynEncoderPreTrainedModel, AiaynForTokenClassification):
    """A label for every token (named entities, tagging)."""


class AiaynEncoderForQuestionAnswering(AiaynEncoderPreTrainedModel, AiaynForQuestionAnswering):
    """Extractive question answering: start and end scores for every token (BERT on SQuAD)."""


class AiaynEncoderForMultipleChoice(AiaynEncoderPreTrainedModel, AiaynForMultipleChoice):
    """Scores each of `num_choices` candidate sequences from its pooled first token (BERT on SWAG)."""


__all__ = [
    "AiaynEncoderPreTrainedModel",
    "AiaynEncoderModel",
    "AiaynEncoderForMaskedLM",
    "AiaynEncoderForSequenceClassification",
    "AiaynEncoderForTokenClassification",
    "AiaynEncoderForQuestionAnswering",
    "AiaynEncoderForMultipleChoice",
]
