"""T5-style encoder-decoder models: the paper's translation model (Figure 1) and its heads."""

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.generation import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.modeling_outputs import (
    BaseModelOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqQuestionAnsweringModelOutput,
    Seq2SeqSequenceClassifierOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

from .configuration_aiayn import AiaynSeq2SeqConfig
from .docstrings_aiayn import shared_arguments
from .heads_aiayn import (
    AiaynForQuestionAnswering,
    AiaynForSequenceClassification,
    AiaynLanguageModel,
    carried_fields,
)
from .modeling_aiayn import AiaynGenerationMixin, AiaynPreTrainedModel, AiaynStack, AiaynTokenEmbedding


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: `decoder_start_token_id` followed by the labels without their last token,
    with the ignored label -100 replaced by the pad token."""
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class SourceLengthLimitLogitsProcessor(LogitsProcessor):
    """Ends each output after at most `max_lengths[i]` generated tokens by forcing EOS as the last of them.

    `max_lengths` has one entry per source; rows expanded for beams or returned sequences share their source's
    limit. Works the same in greedy, sampling and beam search.
    """

    def __init__(self, max_lengths: torch.Tensor, eos_token_id: int | list[int]):
        self.max_lengths = max_lengths
        self.eos_token_ids = torch.tensor(eos_token_id if isinstance(eos_token_id, list) else [eos_token_id])
        self.prefix_length = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prefix_length is None:
            self.prefix_length = input_ids.shape[1]
        generated = input_ids.shape[1] - self.prefix_length
        limits = self.max_lengths.to(scores.device).repeat_interleave(scores.shape[0] // len(self.max_lengths))
        at_limit = (generated >= limits - 1)[:, None]
        only_eos = torch.full_like(scores, float("-inf"))
        only_eos[:, self.eos_token_ids.to(scores.device)] = 0  # as transformers' ForcedEOSTokenLogitsProcessor
        return torch.where(at_limit, only_eos, scores)


class AiaynSeq2SeqPreTrainedModel(AiaynPreTrainedModel):
    """The base of the seq2seq family's models: their config (`AiaynSeq2SeqConfig`), the Auto classes that build them
    (`auto_classes`), how the heads written once read both stacks, and the decoder inputs built from labels.

    Examples:
        >>> from transformers import AutoModelForSeq2SeqLM
        >>> from aiayn import AiaynSeq2SeqPreTrainedModel, preset_config
        >>> model = AutoModelForSeq2SeqLM.from_config(preset_config("tiny"))
        >>> type(model).__name__, isinstance(model, AiaynSeq2SeqPreTrainedModel)
        ('AiaynSeq2SeqForConditionalGeneration', True)
    """

    config: AiaynSeq2SeqConfig
    description = "T5-style encoder-decoder Transformer"
    pretraining_auto_class = "AutoModelForSeq2SeqLM"
    lora_target_modules = ["qkv_proj", "q_proj", "kv_proj"]  # PEFT's defaults (`name_tables_aiayn`)
    # Auto class -> model class of this family; `save_pretrained` writes all of them into config.json's auto_map.
    auto_classes = {
        "AutoModel": "AiaynSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "AiaynSeq2SeqForConditionalGeneration",
        "AutoModelForSequenceClassification": "AiaynSeq2SeqForSequenceClassification",
        "AutoModelForQuestionAnswering": "AiaynSeq2SeqForQuestionAnswering",
        "AutoModelForTextEncoding": "AiaynSeq2SeqEncoderModel",
    }

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """transformers ties `_tied_weights_keys` only under `tie_word_embeddings`, which here ties the LM head; the
        stacks' token tables are tied to `shared` always (one vocabulary for source and target, section 3.4)."""
        if not all_submodels and hasattr(self, "shared"):
            return dict(self._tied_weights_keys)
        return super().get_expanded_tied_weights_keys(all_submodels)

    def build_body(self, config: AiaynSeq2SeqConfig, pooled: bool) -> "AiaynSeq2SeqModel":
        """The base model of the heads: both stacks."""
        return AiaynSeq2SeqModel(config)

    def base_model_outputs(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.LongTensor | None,
        position_ids: torch.LongTensor | None,
        inputs_embeds: torch.Tensor | None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[Seq2SeqModelOutput, torch.Tensor | None, torch.Tensor | None]:
        """Heads read one sequence with both stacks (BART's recipe): the encoder sees it and the decoder re-reads it,
        shifted right, while attending to the encoder (unless `decoder_input_ids` or `decoder_inputs_embeds` are
        given). Returns the output and the decoder input ids and mask."""
        if decoder_input_ids is None and kwargs.get("decoder_inputs_embeds") is None:
            if input_ids is None:
                raise ValueError("Without input_ids, pass decoder_input_ids or decoder_inputs_embeds.")
            decoder_input_ids = shift_tokens_right(
                input_ids, self.config.pad_token_id, self.config.decoder_start_token_id
            )
            if decoder_attention_mask is None and attention_mask is not None:
                # The start token is real; the rest of the mask moves with the tokens.
                decoder_attention_mask = torch.cat(
                    (attention_mask.new_ones(attention_mask.shape[0], 1), attention_mask[:, :-1]), dim=1
                )
        for name, value in (("token_type_ids", token_type_ids), ("position_ids", position_ids)):
            if value is not None:  # both stacks read them, as any other keyword argument
                kwargs[name] = value
        kwargs["use_cache"] = False
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        return outputs, decoder_input_ids, decoder_attention_mask

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Used by `DataCollatorForSeq2Seq` to build `decoder_input_ids` from `labels`."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also names aiayn's text-to-text pipeline in the config's `custom_pipelines` (for `text2text-generation`,
        `translation` and `summarization`, which transformers 5 removed); the relative import below makes
        `save_pretrained` copy its module next to the model's code."""
        from .pipeline_aiayn import TEXT2TEXT_TASKS, AiaynText2TextGenerationPipeline

        pipeline = AiaynText2TextGenerationPipeline
        impl = f"{pipeline.__module__.rsplit('.', 1)[-1]}.{pipeline.__name__}"
        self.config.custom_pipelines = {
            task: {"impl": impl, "pt": ["AutoModelForSeq2SeqLM"], "type": "text"} for task in TEXT2TEXT_TASKS
        }
        return super().save_pretrained(save_directory, *args, **kwargs)


class AiaynSeq2SeqStacks(AiaynSeq2SeqPreTrainedModel):
    """The token table shared by source and target (section 3.4), `shared`, and the stacks that read it: the encoder
    and, where `has_decoder`, the decoder.

    Examples:
        >>> from aiayn import AiaynSeq2SeqEncoderModel, AiaynSeq2SeqModel, preset_config
        >>> config = preset_config("tiny", vocab_size=100)
        >>> model = AiaynSeq2SeqModel(config)
        >>> model.encoder.get_input_embeddings().weight is model.shared.weight  # one table for source and target
        True
        >>> model.decoder.get_input_embeddings().weight is model.shared.weight
        True
        >>> hasattr(AiaynSeq2SeqEncoderModel(config), "decoder")
        False
    """

    has_decoder = True
    _tp_plan = {"shared": "embedding_rowwise"}  # with the stacks' plans (`config.base_model_tp_plan`)

    def __init__(self, config: AiaynSeq2SeqConfig):
        super().__init__(config)
        self.shared = AiaynTokenEmbedding(config.vocab_size, config.d_model)
        self.encoder = AiaynStack(
            config, AiaynTokenEmbedding(config.vocab_size, config.d_model), config.num_layers, is_causal=False
        )
        if self.has_decoder:
            self.decoder = AiaynStack(
                config,
                AiaynTokenEmbedding(config.vocab_size, config.d_model),
                config.num_decoder_layers,
                is_causal=True,
                has_cross_attention=True,
            )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding):
        self.shared = value
        self.encoder.set_input_embeddings(value)
        if self.has_decoder:
            self.decoder.set_input_embeddings(value)


class AiaynSeq2SeqModel(AiaynSeq2SeqStacks):
    """Encoder and decoder stacks sharing one token embedding (section 3.4): the decoder attends causally to its
    own inputs and fully to the encoder output.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynSeq2SeqModel, preset_config
        >>> model = AiaynSeq2SeqModel(preset_config("tiny", vocab_size=100)).eval()  # d_model 64
        >>> source, decoder_input_ids = torch.tensor([[12, 7, 30, 2]]), torch.tensor([[0, 44, 9]])  # 0 starts
        >>> outputs = model(input_ids=source, decoder_input_ids=decoder_input_ids)
        >>> outputs.encoder_last_hidden_state.shape, outputs.last_hidden_state.shape
        (torch.Size([1, 4, 64]), torch.Size([1, 3, 64]))
    """

    # Each stack has its own table, tied to `shared` as transformers ties parameters (T5 does the same): loading then
    # reports and initialises each name, and save_pretrained stores the table once.
    _tied_weights_keys = {
        "encoder.embeddings.embed_tokens.weight": "shared.weight",
        "decoder.embeddings.embed_tokens.weight": "shared.weight",
    }

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """Encodes the source (unless `encoder_outputs` are given) and decodes the target prefix.

        Args:
            input_ids: Source token ids of shape `(batch_size, source_length)`.
            attention_mask: The source's padding mask (1 at tokens, 0 at padding), of shape
                `(batch_size, source_length)`.
            decoder_input_ids: Decoder inputs of shape `(batch_size, target_length)`: the targets shifted right behind
                `decoder_start_token_id` (see `shift_tokens_right`).
            decoder_attention_mask: The decoder inputs' padding mask, of shape `(batch_size, target_length)`.
            decoder_position_ids: Positions of the decoder inputs; by default counted as in `AiaynStack.forward`.
            encoder_outputs: The encoder's output, when it was already computed (as `generate()` does).
            cache: Self-attention keys and values of earlier target positions and the cross-attention keys and values
                (an `EncoderDecoderCache`).
            inputs_embeds: Source token embeddings, in place of `input_ids`.
            decoder_inputs_embeds: Decoder input embeddings, in place of `decoder_input_ids`.
            global_attention_mask: 1 at global source tokens of the encoder, of shape `(batch_size, source_length)`
                (see `AiaynStack.forward`; LED's).

        Returns:
            A `Seq2SeqModelOutput` with the decoder's `last_hidden_state`, `cache`, the encoder's
                `encoder_last_hidden_state` and, when asked for, both stacks' hidden states and attentions.
        """
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                global_attention_mask=global_attention_mask,
                **kwargs,
            )
        elif isinstance(encoder_outputs, tuple):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            position_ids=decoder_position_ids,
            inputs_embeds=decoder_inputs_embeds,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            cache=decoder_outputs.cache,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class AiaynSeq2SeqForConditionalGeneration(AiaynSeq2SeqPreTrainedModel, AiaynLanguageModel, AiaynGenerationMixin):
    """Translation and other text-to-text tasks: the next target token given the source and the target prefix.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynSeq2SeqForConditionalGeneration, preset_config
        >>> model = AiaynSeq2SeqForConditionalGeneration(preset_config("tiny", vocab_size=100)).eval()
        >>> source, target = torch.tensor([[12, 7, 30, 2]]), torch.tensor([[44, 9, 2]])
        >>> outputs = model(input_ids=source, labels=target)  # the decoder reads the labels shifted right
        >>> outputs.logits.shape, outputs.loss.shape
        (torch.Size([1, 3, 100]), torch.Size([]))
        >>> translation = model.generate(source, num_beams=4, min_new_tokens=5, max_new_tokens=5)
        >>> translation.shape, translation[0, 0].item()  # decoder_start_token_id, then 5 tokens
        (torch.Size([1, 6]), 0)
    """

    labels_shape_description = "one label per decoder input token"
    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}  # split like the tied token table

    def __init__(self, config: AiaynSeq2SeqConfig):
        super().__init__(config)
        self.model = AiaynSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.loss_type = "ForMaskedLM"  # the labels are aligned with the decoder's positions already: no shift
        self.post_init()

    def generate(
        self,
        inputs: torch.Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        logits_processor: LogitsProcessorList | None = None,
        **kwargs,
    ):
        """`GenerationMixin.generate` with the paper's output-length rule (section 6.1: "input length + 50").

        With `max_len_a` and `max_len_b` (in `generation_config`, as the paper presets set them, or as arguments), each
        output is at most `max_len_a * source_length + max_len_b` tokens long, EOS included, where `source_length`
        counts
        the real tokens of its source. Unless `max_new_tokens` or `max_length` is set, the longest of these limits also
        bounds the loop.

        Args:
            inputs: Source token ids (or `input_ids`/`inputs_embeds` among `kwargs`).
            generation_config: Replaces the model's `generation_config`.
            logits_processor: Processors added to those the generation config builds; the length rule adds its own.
            **kwargs (Any): `generate`'s other arguments and generation parameters, `max_len_a` and `max_len_b`
                included.

        Returns:
            output (torch.LongTensor | GenerateOutput): What `GenerationMixin.generate` returns: the generated ids, or
                a generation output.
        """
        config = generation_config if generation_config is not None else self.generation_config
        max_len_a = kwargs.pop("max_len_a", getattr(config, "max_len_a", None))
        max_len_b = kwargs.pop("max_len_b", getattr(config, "max_len_b", None))
        if max_len_a is None and max_len_b is None:
            return super().generate(inputs, generation_config, logits_processor, **kwargs)
        source = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
        if kwargs.get("attention_mask") is not None:
            source_lengths = kwargs["attention_mask"].sum(-1)
        elif source.dim() == 2 and config.pad_token_id is not None:
            source_lengths = (source != config.pad_token_id).sum(-1)
        else:
            source_lengths = torch.full((source.shape[0],), source.shape[1], device=source.device)
        max_lengths = ((max_len_a or 0) * source_lengths + (max_len_b or 0)).long().clamp(min=1)
        length_set = [kwargs.get(name, getattr(config, name)) for name in ("max_new_tokens", "max_length")]
        if length_set == [None, None]:
            kwargs["max_new_tokens"] = int(max_lengths.max())
        eos_token_id = kwargs.get("eos_token_id", config.eos_token_id)
        limit = SourceLengthLimitLogitsProcessor(max_lengths, eos_token_id)
        logits_processor = LogitsProcessorList([*(logits_processor or []), limit])
        return super().generate(inputs, generation_config, logits_processor, **kwargs)

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        skip_logits: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """Scores the next target token at every target position.

        Args:
            input_ids: Source token ids of shape `(batch_size, source_length)`.
            attention_mask: The source's padding mask (1 at tokens, 0 at padding), of shape
                `(batch_size, source_length)`.
            decoder_input_ids: Decoder inputs, built from `labels` when not given, of shape
                `(batch_size, target_length)`: the targets shifted right behind `decoder_start_token_id` (see
                `shift_tokens_right`).
            decoder_attention_mask: The decoder inputs' padding mask, of shape `(batch_size, target_length)`.
            decoder_position_ids: Positions of the decoder inputs; by default counted as in `AiaynStack.forward`.
            encoder_outputs: The encoder's output, when it was already computed (as `generate()` does).
            cache: Self-attention keys and values of earlier target positions and the cross-attention keys and values
                (an `EncoderDecoderCache`).
            inputs_embeds: Source token embeddings, in place of `input_ids`.
            decoder_inputs_embeds: Decoder input embeddings, in place of `decoder_input_ids`.
            labels: Target tokens of shape `(batch_size, target_length)`, -100 where ignored. Position i of the output
                is scored on `labels[:, i]` (no shift: the decoder inputs are the labels shifted right).
            skip_logits: Compute the loss without the logits, a chunk of positions at a time (`logits` is then None).
                By default when training with labels; `False` returns the logits.
            global_attention_mask: 1 at global source tokens of the encoder, of shape `(batch_size, source_length)`
                (see `AiaynStack.forward`; LED's).

        Returns:
            A `Seq2SeqLMOutput` with `loss` (given `labels`), `logits` of shape
                `(batch_size, target_length, vocab_size)` (None when skipped), and what the base model returned (hidden
                states, attentions, cache).
        """
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            decoder_position_ids=decoder_position_ids,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        logits, loss = self.predict_tokens(outputs.last_hidden_state, labels, skip_logits, **kwargs)
        return Seq2SeqLMOutput(loss=loss, logits=logits, **carried_fields(outputs, Seq2SeqLMOutput))


class AiaynSeq2SeqForSequenceClassification(AiaynSeq2SeqPreTrainedModel, AiaynForSequenceClassification):
    """Classification or regression from the decoder state at the last real token (BART's recipe).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynSeq2SeqForSequenceClassification, preset_config
        >>> model = AiaynSeq2SeqForSequenceClassification(preset_config("tiny", num_labels=3)).eval()
        >>> input_ids = torch.tensor([[12, 7, 30, 2], [12, 9, 2, 0]])  # both stacks read each sequence
        >>> outputs = model(input_ids=input_ids, attention_mask=input_ids.ne(0).long(), labels=torch.tensor([0, 2]))
        >>> outputs.logits.shape, outputs.encoder_last_hidden_state.shape
        (torch.Size([2, 3]), torch.Size([2, 4, 64]))
    """

    output_class = Seq2SeqSequenceClassifierOutput


class AiaynSeq2SeqForQuestionAnswering(AiaynSeq2SeqPreTrainedModel, AiaynForQuestionAnswering):
    """Extractive question answering from the decoder states (BART's recipe).

    Examples:
        >>> import torch
        >>> from aiayn import AiaynSeq2SeqForQuestionAnswering, preset_config
        >>> model = AiaynSeq2SeqForQuestionAnswering(preset_config("tiny", vocab_size=100)).eval()
        >>> input_ids = torch.tensor([[17, 4, 3, 45, 46, 47, 2]])  # the question, a separator, the context
        >>> answer = {"start_positions": torch.tensor([4]), "end_positions": torch.tensor([5])}  # tokens 46 and 47
        >>> outputs = model(input_ids=input_ids, **answer)
        >>> outputs.start_logits.shape, outputs.end_logits.shape, outputs.loss.shape
        (torch.Size([1, 7]), torch.Size([1, 7]), torch.Size([]))
    """

    output_class = Seq2SeqQuestionAnsweringModelOutput


class AiaynSeq2SeqEncoderModel(AiaynSeq2SeqStacks):
    """The encoder stack of a seq2seq model on its own (like `T5EncoderModel`), e.g. for sentence features.

    Examples:
        >>> import torch
        >>> from aiayn import AiaynSeq2SeqEncoderModel, preset_config
        >>> model = AiaynSeq2SeqEncoderModel(preset_config("tiny", vocab_size=100)).eval()  # d_model 64
        >>> input_ids = torch.tensor([[12, 7, 30, 2], [12, 9, 2, 0]])
        >>> mask = input_ids.ne(0).unsqueeze(-1)  # 0 is the padding
        >>> states = model(input_ids=input_ids, attention_mask=mask[..., 0]).last_hidden_state
        >>> sentence = (states * mask).sum(1) / mask.sum(1)  # the mean of each sequence's tokens
        >>> states.shape, sentence.shape
        (torch.Size([2, 4, 64]), torch.Size([2, 64]))
    """

    has_decoder = False
    _tied_weights_keys = {"encoder.embeddings.embed_tokens.weight": "shared.weight"}
    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^lm_head\."]

    @can_return_tuple
    @shared_arguments
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """Encodes a batch of sequences.

        Args:

        Returns:
            A `BaseModelOutput` with `last_hidden_state` and, when asked for, `hidden_states` and `attentions`.
        """
        outputs = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            global_attention_mask=global_attention_mask,
            **kwargs,
        )
        return BaseModelOutput(**carried_fields(outputs, BaseModelOutput))


__all__ = [
    "AiaynSeq2SeqPreTrainedModel",
    "AiaynSeq2SeqModel",
    "AiaynSeq2SeqForConditionalGeneration",
    "AiaynSeq2SeqForSequenceClassification",
    "AiaynSeq2SeqForQuestionAnswering",
    "AiaynSeq2SeqEncoderModel",
    "shift_tokens_right",
]
