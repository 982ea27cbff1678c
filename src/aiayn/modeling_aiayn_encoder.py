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
    """The base of the encoder family's models: their config (`AiaynEncoderConfig`), the Auto classes that build them
    (`auto_classes`) and how the heads written once read this family's base model.

    Examples:
        >>> from transformers import AutoModelForMaskedLM
        >>> from aiayn import AiaynEncoderPreTrainedModel, preset_config
        >>> model = AutoModelForMaskedLM.from_config(preset_config("tiny-encoder"))
        >>> type(model).__name__, isinstance(model, AiaynEncoderPreTrainedModel)
        ('AiaynEncoderForMaskedLM', True)
    """

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

    Examples:
        >>> import torch
        >>> from aiayn import AiaynEncoderModel, preset_config
        >>> model = AiaynEncoderModel(preset_config("tiny-encoder", vocab_size=100)).eval()  # d_model 64
        >>> input_ids = torch.tensor([[2, 17, 4, 45, 3], [2, 9, 3, 0, 0]])
        >>> outputs = model(input_ids=input_ids, attention_mask=input_ids.ne(0).long())  # 0 is the padding
        >>> outputs.last_hidden_state.shape, outputs.pooler_output.shape
        (torch.Size([2, 5, 64]), torch.Size([2, 64]))
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
    """BERT's masked language model: the original token at each masked position.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynEncoderForMaskedLM, preset_config
        >>> model = AiaynEncoderForMaskedLM(preset_config("tiny-encoder", vocab_size=100)).eval()
        >>> input_ids = torch.tensor([[2, 17, 4, 45, 3]])  # 4 stands for the mask token here
        >>> labels = torch.tensor([[-100, -100, 9, -100, -100]])  # the original token, at the masked position only
        >>> outputs = model(input_ids=input_ids, labels=labels)
        >>> outputs.logits.shape, outputs.loss.shape  # a score for every vocabulary token at every position
        (torch.Size([1, 5, 100]), torch.Size([]))
    """

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
    """Classification or regression from the pooled first token (BERT).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynEncoderForSequenceClassification, preset_config
        >>> _ = torch.manual_seed(0)  # the same initial weights on every run
        >>> model = AiaynEncoderForSequenceClassification(preset_config("tiny-encoder", num_labels=3)).eval()
        >>> outputs = model(input_ids=torch.tensor([[2, 17, 4, 45, 3]]), labels=torch.tensor([1]))
        >>> outputs.logits.shape, round(outputs.loss.item(), 1)  # untrained: about ln(3), no class preferred
        (torch.Size([1, 3]), 1.1)
    """


class AiaynEncoderForTokenClassification(AiaynEncoderPreTrainedModel, AiaynForTokenClassification):
    """A label for every token (named entities, tagging).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynEncoderForTokenClassification, preset_config
        >>> model = AiaynEncoderForTokenClassification(preset_config("tiny-encoder", num_labels=3)).eval()
        >>> input_ids = torch.tensor([[2, 17, 4, 45, 3]])
        >>> labels = torch.tensor([[-100, 1, 2, 0, -100]])  # e.g. B, I, O; none for the special tokens
        >>> outputs = model(input_ids=input_ids, labels=labels)
        >>> outputs.logits.shape  # a score for each label at each token
        torch.Size([1, 5, 3])
    """


class AiaynEncoderForQuestionAnswering(AiaynEncoderPreTrainedModel, AiaynForQuestionAnswering):
    """Extractive question answering: start and end scores for every token (BERT on SQuAD).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynEncoderForQuestionAnswering, preset_config
        >>> model = AiaynEncoderForQuestionAnswering(preset_config("tiny-encoder", vocab_size=100)).eval()
        >>> input_ids = torch.tensor([[2, 17, 4, 3, 45, 46, 47, 3]])  # [CLS] question [SEP] context [SEP]
        >>> token_type_ids = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
        >>> answer = {"start_positions": torch.tensor([5]), "end_positions": torch.tensor([6])}  # tokens 46 and 47
        >>> outputs = model(input_ids=input_ids, token_type_ids=token_type_ids, **answer)
        >>> outputs.start_logits.shape, outputs.end_logits.shape, outputs.loss.shape
        (torch.Size([1, 8]), torch.Size([1, 8]), torch.Size([]))
    """


class AiaynEncoderForMultipleChoice(AiaynEncoderPreTrainedModel, AiaynForMultipleChoice):
    """Scores each of `num_choices` candidate sequences from its pooled first token (BERT on SWAG).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynEncoderForMultipleChoice, preset_config
        >>> _ = torch.manual_seed(0)  # the same initial weights on every run
        >>> model = AiaynEncoderForMultipleChoice(preset_config("tiny-encoder", vocab_size=100)).eval()
        >>> input_ids = torch.tensor([[[2, 17, 4, 3, 30, 3], [2, 17, 4, 3, 31, 3]]])  # (batch, choices, length)
        >>> outputs = model(input_ids=input_ids, labels=torch.tensor([1]))  # the second choice is right
        >>> outputs.logits.shape, round(outputs.loss.item(), 1)  # untrained: about ln(2), no choice preferred
        (torch.Size([1, 2]), 0.7)
    """


__all__ = [
    "AiaynEncoderPreTrainedModel",
    "AiaynEncoderModel",
    "AiaynEncoderForMaskedLM",
    "AiaynEncoderForSequenceClassification",
    "AiaynEncoderForTokenClassification",
    "AiaynEncoderForQuestionAnswering",
    "AiaynEncoderForMultipleChoice",
]
