"""Hub-ready folders: the model, its tokenizer and its code, with a model card rendered from `hub_card/`.

`save_hub_folder(model, tokenizer, folder, ...)` writes what `push_to_hub` would upload: `model.safetensors`, a
`config.json` whose `auto_map` names every Auto class of the family (and, for seq2seq models, the text-to-text
pipeline in `custom_pipelines`), `generation_config.json`, the tokenizer, the modeling code, and `README.md`: a
card with the hub's metadata (`library_name`, `pipeline_tag`, tags, license, datasets and a `model-index` with the
measured results) and the sections of the hub's model-card template, filled from the model.
"""

import os
from importlib import resources

import torch
import transformers
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .configuration_aiayn import AiaynConfig
from .families import FAMILIES, family_of

# Head class suffix -> (pipeline task, Auto class).
HEADS = {
    "ForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "ForCausalLM": ("text-generation", "AutoModelForCausalLM"),
    "ForConditionalGeneration": ("text2text-generation", "AutoModelForSeq2SeqLM"),
    "ForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "ForTokenClassification": ("token-classification", "AutoModelForTokenClassification"),
    "ForQuestionAnswering": ("question-answering", "AutoModelForQuestionAnswering"),
    "ForMultipleChoice": ("multiple-choice", "AutoModelForMultipleChoice"),
    "Model": ("feature-extraction", "AutoModel"),
}
POSITIONS = {
    "sinusoidal": "the paper's sinusoidal position encodings (section 3.5)",
    "learned": "learned absolute position embeddings",
    "relative": "T5's bucketed relative position bias, one table per stack",
    "rotary": "rotary position embeddings (RoPE)",
    "none": "no position information",
}
# Metric name in the run's results -> (model-index metric type, readable name).
METRICS = {
    "eval_loss": ("loss", "Validation cross-entropy (nats per token)"),
    "eval_perplexity": ("perplexity", "Validation perplexity"),
    "eval_accuracy": ("accuracy", "Accuracy"),
    "eval_bleu": ("bleu", "sacreBLEU"),
    "eval_chrf": ("chrf", "chrF"),
}
HYPERPARAMETERS = (
    "learning_rate", "lr_scheduler_type", "warmup_steps", "max_steps", "num_train_epochs",
    "per_device_train_batch_size", "gradient_accumulation_steps", "optim", "adam_beta1", "adam_beta2",
    "adam_epsilon", "weight_decay", "label_smoothing_factor", "max_grad_norm", "seed",
)  # fmt: skip


def head_of(model: transformers.PreTrainedModel) -> tuple[str, str]:
    """`(pipeline task, Auto class)` of a model's head."""
    name = type(model).__name__
    for suffix, head in HEADS.items():
        if name.endswith(suffix):
            return head
    return HEADS["Model"]


def describe_architecture(config: AiaynConfig, parameters: int) -> str:
    """The architecture in words: family, sizes, positions, residual placement, norms, activation, sharing."""
    family = family_of(config.model_type)
    words = FAMILIES[family].description
    layers = f"{config.num_layers} layers"
    if family == "seq2seq":
        layers = f"{config.num_layers} encoder and {config.num_decoder_layers} decoder layers"
    norm = "RMSNorm" if config.norm_type == "rmsnorm" else "LayerNorm"
    placement = (
        f"pre-LN residual blocks (`x + Sublayer({norm}(x))`, with a final {norm})"
        if config.norm_first
        else f"post-LN residual blocks (`{norm}(x + Sublayer(x))`, as in the paper)"
    )
    sharing = []
    if family == "seq2seq":
        sharing.append("encoder and decoder share one token embedding")
    if config.tie_word_embeddings:
        sharing.append("the output projection is tied to the token embedding")
    if config.scale_embedding:
        sharing.append("embeddings are scaled by sqrt(d_model)")
    scaling = "scaled by 1/sqrt(d_k) (eq. 1)" if config.scale_attention else "unscaled (T5's convention)"
    return (
        f"A {words} of {parameters / 1e6:.1f}M parameters: {layers}, d_model {config.d_model}, {config.num_heads} "
        f"attention heads of size {config.d_kv}, feed-forward size {config.d_ff} with `{config.hidden_act}`, "
        f"{POSITIONS[config.position_embedding_type]}, {placement}, attention logits {scaling}"
        + (f"; {'; '.join(sharing)}" if sharing else "")
        + f". Vocabulary: {config.vocab_size} tokens."
    )


def _markdown_table(rows: list[tuple[str, str]], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in rows]
    return "\n".join(lines)


def model_card(
    model: transformers.PreTrainedModel,
    repo_id: str,
    task: str | None = None,
    datasets: list[str] | None = None,
    metrics: dict | None = None,
    training_arguments: dict | None = None,
    language: list[str] | None = None,
    license: str = "apache-2.0",
    description: str | None = None,
) -> ModelCard:
    """The model card of `model`, rendered from `hub_card/modelcard_template.md`.

    `task` is the pipeline tag (by default the head's), `datasets` the training data, `metrics` the evaluation
    results by Trainer name (`eval_loss`, `eval_perplexity`, `eval_accuracy`, `eval_bleu`, `eval_chrf`),
    `training_arguments` the Trainer's arguments as a dict.
    """
    config = model.config
    family = family_of(config.model_type)
    words = FAMILIES[family].description
    default_task, auto_class = head_of(model)
    task = task or default_task
    parameters = sum(p.numel() for p in model.parameters())
    datasets = list(datasets or [])
    metrics = metrics or {}
    model_name = repo_id.rsplit("/", 1)[-1]

    results = [
        EvalResult(
            task_type=task,
            dataset_type=datasets[0] if datasets else "unknown",
            dataset_name=datasets[0] if datasets else "unknown",
            dataset_split="validation",
            metric_type=METRICS[key][0],
            metric_name=METRICS[key][1],
            metric_value=round(float(metrics[key]), 4),
        )
        for key in METRICS
        if key in metrics
    ]
    card_data = ModelCardData(
        model_name=model_name,
        library_name="transformers",
        pipeline_tag=task,
        license=license,
        language=language,
        datasets=datasets or None,
        tags=["aiayn", f"aiayn-{family}", "transformer", "attention-is-all-you-need"],
        metrics=sorted({result.metric_type for result in results}) or None,
        eval_results=results or None,
    )
    if task in ("translation", "summarization", "text2text-generation"):
        pipeline_example = f'translate = pipeline("{task}", model="{repo_id}", trust_remote_code=True)'
    else:
        pipeline_example = f'run = pipeline("{task}", model="{repo_id}", trust_remote_code=True)'

    arguments = dict(training_arguments or {})
    if arguments.get("max_steps", -1) > 0:  # the step count, not the epoch count, ended the run
        arguments.pop("num_train_epochs", None)
    hyperparameters = [(name, f"`{arguments[name]}`") for name in HYPERPARAMETERS if name in arguments]
    procedure = (
        "Trained with transformers' `Trainer` (aiayn's training scripts).\n\n"
        + _markdown_table(hyperparameters, ("hyperparameter", "value"))
        if hyperparameters
        else "Not recorded with this model."
    )
    evaluation = (
        "Held-out validation split of the training data.\n\n"
        + _markdown_table(
            [(METRICS[key][1], f"{metrics[key]:.4g}") for key in METRICS if key in metrics], ("metric", "value")
        )  # fmt: skip
        if results
        else "Not evaluated with this model."
    )
    objectives = {
        "ForMaskedLM": "masked-token prediction (BERT)",
        "ForCausalLM": "next-token prediction",
        "ForConditionalGeneration": "target-token prediction given the source (teacher forcing, section 5)",
    }
    objective = next((text for suffix, text in objectives.items() if type(model).__name__.endswith(suffix)), task)
    template = resources.files("aiayn.hub_card").joinpath("modelcard_template.md").read_text(encoding="utf-8")
    return ModelCard.from_template(
        card_data,
        template_str=template,
        model_name=model_name,
        repo_id=repo_id,
        summary=description
        or f"A {words} ({task}) trained with aiayn, an implementation of the Transformer of "
        '"Attention Is All You Need" for transformers.',
        architecture=describe_architecture(config, parameters),
        model_type=config.model_type,
        model_class=type(model).__name__,
        family_module=f"modeling_aiayn_{family}",
        parameters=f"{parameters:,}",
        languages=", ".join(language) if language else "see the training data",
        license=license,
        direct_use=f"`{task}` on text of its training data's domain, through transformers' `pipeline` or the "
        "model classes, as shown below.",
        out_of_scope="Anything that needs factual accuracy or safety: this model has not been evaluated or filtered "
        "for either.",
        limitations="A small model trained on a narrow corpus: it reproduces the style, vocabulary and biases of its "
        "training text, makes frequent errors outside it, and its evaluation covers only the held-out split named "
        "below.",
        auto_class=auto_class,
        pipeline_example=pipeline_example,
        training_data=", ".join(datasets) if datasets else "Not recorded with this model.",
        training_procedure=procedure,
        evaluation=evaluation,
        objective=f"{words}, trained for {objective}. {describe_architecture(config, parameters)}",
        software=f"transformers {transformers.__version__}, torch {torch.__version__}, aiayn",
    )


def save_hub_folder(
    model: transformers.PreTrainedModel,
    tokenizer,
    folder: str,
    repo_id: str | None = None,
    **card_fields,
) -> ModelCard:
    """Writes the folder `push_to_hub` would upload: weights, config, generation config, tokenizer, modeling code and
    `README.md` (the card of `model_card`, given `card_fields`). Returns the card."""
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    card = model_card(model, repo_id or os.path.basename(os.path.abspath(folder)), **card_fields)
    card.save(os.path.join(folder, "README.md"))
    return card
