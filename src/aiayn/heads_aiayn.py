"""The heads every family shares, written once: sequence classification, token classification, extractive question
answering and multiple choice (`AiaynHeadModel` subclasses, which each family names with its prefix), and
`AiaynLanguageModel`, the scoring and loss of the three language-model heads.

This module imports nothing but torch and transformers: `save_pretrained` copies it next to the weights with the
modeling code.
"""

import torch
from torch import nn
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.modeling_outputs import (
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import slice_logits_to_keep
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple

from .configuration_aiayn import AiaynConfig
from .docstrings_aiayn import shared_arguments
from .losses_aiayn import logits_cross_entropy, sequence_classification_loss, skips_logits, token_prediction_loss
from .modeling_aiayn import AiaynPreTrainedModel
from .policy_aiayn import check_labels_shape


class AiaynPooler(nn.Module):
    """BERT's and ViT's pooler: a dense layer and tanh over the first position's final hidden state."""

    def __init__(self, config: AiaynConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))


class AiaynClassificationHead(nn.Module):
    """Dropout and a linear map from pooled features to `num_outputs` scores (BERT's classifier)."""

    def __init__(self, config: AiaynConfig, num_outputs: int):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout_rate)
        self.out_proj = nn.Linear(config.d_model, num_outputs, bias=config.use_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(hidden_states))


def last_token_index(
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    pad_token_id: int | None,
    batch_size: int,
    seq_length: int,
    device: torch.device,
) -> torch.Tensor:
    """Index of each row's last real token: the last unmasked position (left or right padding), else the last
    non-pad token, else the last position."""
    if attention_mask is not None and attention_mask.dim() == 2:
        is_real = attention_mask.bool()
    elif input_ids is not None and pad_token_id is not None:
        is_real = input_ids != pad_token_id
    else:
        return torch.full((batch_size,), seq_length - 1, device=device)
    positions = torch.arange(seq_length, device=device)
    return (positions * is_real.to(device)).argmax(-1)


def carried_fields(outputs: ModelOutput, output_class: type[ModelOutput]) -> dict:
    """The fields of a base model's `outputs` that a head's `output_class` also has (hidden states, attentions, the
    cache, the encoder's outputs), so that a head returns what its base model returned."""
    return {name: value for name, value in outputs.items() if name in output_class.__dataclass_fields__}


class AiaynHeadModel(AiaynPreTrainedModel):
    """A task head on a family's base model, `self.model`. The heads below are written once for every family; a
    family builds its base model (`build_body`) and, where it differs, says how its base model reads a head's inputs
    (`base_model_outputs`) and which features stand for a whole sequence (`sequence_features`)."""

    def build_body(self, config: AiaynConfig, pooled: bool) -> AiaynPreTrainedModel:
        """The family's base model; `pooled` where a head reads a pooled sequence feature."""
        raise NotImplementedError(f"{type(self).__name__} does not build a base model for heads.")

    def base_model_outputs(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.LongTensor | None,
        position_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor | None,
        **kwargs,
    ) -> tuple[ModelOutput, torch.Tensor | None, torch.Tensor | None]:
        """Runs the base model on a head's inputs; `kwargs` go to it as they are, the inputs of its attention pattern
        (`global_attention_mask`) among them. Returns its output and the ids and mask of the sequence whose states it
        returns."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        return outputs, input_ids, attention_mask

    def sequence_features(
        self, outputs: ModelOutput, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The state of each row's last real token, which has seen the whole sequence (GPT-2, BART)."""
        hidden_states = outputs.last_hidden_state
        batch_size, seq_length = hidden_states.shape[:2]
        last = last_token_index(
            input_ids, attention_mask, self.config.pad_token_id, batch_size, seq_length, hidden_states.device
        )
        return hidden_states[torch.arange(batch_size, device=hidden_states.device), last]


class AiaynForSequenceClassification(AiaynHeadModel):
    """Classification or regression of whole sequences from the features that stand for them."""

    output_class: type[ModelOutput] = SequenceClassifierOutput

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=True)
        self.classifier = AiaynClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        """Scores each sequence from the features that stand for it.

        Args:
            labels: Class indices of shape `(batch_size,)`, or float targets for regression (`num_labels == 1`) and
                multi-label classification.

        Returns:
            The family's `output_class` (`SequenceClassifierOutput`; `SequenceClassifierOutputWithPast` for decoders,
                `Seq2SeqSequenceClassifierOutput` for seq2seq models) with `loss` (given `labels`), `logits` of shape
                `(batch_size, num_labels)`, and what the base model returned (hidden states, attentions, cache).
        """
        outputs, ids, mask = self.base_model_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        logits = self.classifier(self.sequence_features(outputs, ids, mask))
        loss = sequence_classification_loss(logits, labels, self.config, **kwargs) if labels is not None else None
        return self.output_class(loss=loss, logits=logits, **carried_fields(outputs, self.output_class))


class AiaynForTokenClassification(AiaynHeadModel):
    """A label for every token (named entities, tagging)."""

    output_class: type[ModelOutput] = TokenClassifierOutput
    _keys_to_ignore_on_load_unexpected = [r"pooler"]

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=False)
        self.classifier = AiaynClassificationHead(config, config.num_labels)
        self.post_init()

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
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        """Scores each token.

        Args:
            labels: A class index per token, of shape `(batch_size, sequence_length)`; -100 for tokens that have none.

        Returns:
            A `TokenClassifierOutput` with `loss` (given `labels`), `logits` of shape
                `(batch_size, sequence_length, num_labels)`, and what the base model returned (hidden states,
                attentions, cache).
        """
        kwargs["use_cache"] = False
        outputs, _, _ = self.base_model_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            check_labels_shape(labels, tuple(logits.shape[:2]), "one label per token")
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return self.output_class(loss=loss, logits=logits, **carried_fields(outputs, self.output_class))


class AiaynForQuestionAnswering(AiaynHeadModel):
    """Extractive question answering: start and end scores for every token (BERT on SQuAD)."""

    output_class: type[ModelOutput] = QuestionAnsweringModelOutput
    _keys_to_ignore_on_load_unexpected = [r"pooler"]

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=False)
        self.qa_outputs = nn.Linear(config.d_model, 2, bias=config.use_bias)
        self.post_init()

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        """Scores each token as the start and as the end of the answer.

        Args:
            start_positions: Token index of each answer's start, of shape `(batch_size,)`; positions outside the
                sequence are ignored.
            end_positions: Token index of each answer's end, of shape `(batch_size,)`.

        Returns:
            The family's `output_class` (`QuestionAnsweringModelOutput`; `Seq2SeqQuestionAnsweringModelOutput` for
                seq2seq models) with `loss` (given both positions), `start_logits` and `end_logits` of shape
                `(batch_size, sequence_length)`, and what the base model returned (hidden states, attentions, cache).
        """
        kwargs["use_cache"] = False
        outputs, _, _ = self.base_model_outputs(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return self.output_class(
            loss=loss,
            start_logits=start_logits.contiguous(),
            end_logits=end_logits.contiguous(),
            **carried_fields(outputs, self.output_class),
        )


class AiaynForMultipleChoice(AiaynHeadModel):
    """Scores each of `num_choices` candidate sequences from the features that stand for it (BERT on SWAG)."""

    def __init__(self, config: AiaynConfig):
        super().__init__(config)
        self.model = self.build_body(config, pooled=True)
        self.classifier = AiaynClassificationHead(config, 1)
        self.post_init()

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
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        """Scores each choice from the features that stand for it.

        Args:
            input_ids: One sequence per choice, of shape `(batch_size, num_choices, sequence_length)`; the other inputs
                have the same leading dimensions.
            attention_mask: 1 at the tokens to attend to, 0 at padding.
            token_type_ids: Segment ids (BERT's sentences A and B).
            position_ids: Position of each token.
            inputs_embeds: Token embeddings, in place of `input_ids`, of shape
                `(batch_size, num_choices, sequence_length, d_model)`.
            labels: Index of the correct choice, of shape `(batch_size,)`.
            global_attention_mask: 1 at global tokens, of shape `(batch_size, num_choices, sequence_length)` (see
                `AiaynStack.forward`); with a sliding window, the pooled first token of each choice is global unless
                this is given.

        Returns:
            A `MultipleChoiceModelOutput` with `loss` (given `labels`), `logits` of shape `(batch_size, num_choices)`,
                and what the base model returned (hidden states, attentions, cache).
        """
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, global_attention_mask)
        *one_sequence_per_row, global_attention_mask = [
            tensor.flatten(0, 1) if tensor is not None else None for tensor in inputs
        ]
        outputs, ids, mask = self.base_model_outputs(
            *one_sequence_per_row, global_attention_mask=global_attention_mask, **kwargs
        )
        logits = self.classifier(self.sequence_features(outputs, ids, mask)).view(-1, num_choices)
        loss = None
        if labels is not None:
            check_labels_shape(labels, (len(logits),), "one choice index per example")
            loss = fixed_cross_entropy(logits, labels.to(logits.device), **kwargs)
        carried = carried_fields(outputs, MultipleChoiceModelOutput)
        return MultipleChoiceModelOutput(loss=loss, logits=logits, **carried)


class AiaynLanguageModel(AiaynPreTrainedModel):
    """A head that scores every vocabulary token at every position: the masked LM, the causal LM and the seq2seq LM
    (the paper's "learned linear transformation and softmax", section 3.4). They differ in what the projection to
    the vocabulary reads (`token_features`), where the projection is (`get_output_embeddings`), which label each
    position is scored on (`predicts_next_token`) and the loss transformers names for them (`loss_function`)."""

    labels_shape_description = "one label per token"  # the shape `labels` must have, as the error names it
    predicts_next_token = False  # whether position i is scored on label i + 1 (the causal LM)

    def token_features(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The states the projection reads: the final states, scaled by d_model^-0.5 under `scale_decoder_outputs`
        (T5's tied output projection)."""
        return hidden_states * self.config.d_model**-0.5 if self.config.scale_decoder_outputs else hidden_states

    def predict_tokens(
        self,
        hidden_states: torch.Tensor,
        labels: torch.LongTensor | None,
        skip_logits: bool | None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """`(logits, loss)` over the base model's final `hidden_states`. Without logits (`skips_logits`) the loss is
        `token_prediction_loss`, the same value and gradients as transformers' loss over the logits; in training, with
        `config.label_smoothing`, those of transformers' `LabelSmoother`."""
        projection = self.get_output_embeddings()
        if labels is not None:
            check_labels_shape(labels, tuple(hidden_states.shape[:2]), self.labels_shape_description)
        smoothing = self.config.label_smoothing if self.training else 0.0
        if skips_logits(skip_logits, labels, self.training):
            labels = self.scored_labels(labels, kwargs)
            return None, token_prediction_loss(
                hidden_states, labels, projection, self.token_features, label_smoothing=smoothing, **kwargs
            )
        # Sliced before the features: a prefill computes one row.
        logits = projection(self.token_features(slice_logits_to_keep(hidden_states, logits_to_keep)))
        loss = None
        if labels is not None and smoothing:
            labels = self.scored_labels(labels, kwargs)
            loss = logits_cross_entropy(logits, labels, smoothing, **kwargs)
        elif labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return logits, loss

    def scored_labels(self, labels: torch.LongTensor, kwargs: dict) -> torch.LongTensor:
        """The label each position is scored on: `labels`, or for a causal LM the next position's (as transformers'
        `ForCausalLMLoss`, which takes them precomputed as `shift_labels`, popped from `kwargs`)."""
        if not self.predicts_next_token:
            return labels
        shift_labels = kwargs.pop("shift_labels", None)
        return nn.functional.pad(labels, (0, 1), value=-100)[:, 1:] if shift_labels is None else shift_labels
