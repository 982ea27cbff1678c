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
    "ForImageClassification": ("image-classification", "AutoModelForImageClassification"),
    "ForMaskedImageModeling": ("image-feature-extraction", "AutoModelForMaskedImageModeling"),
    "Model": ("feature-extraction", "AutoModel"),
}
# Metric name in the run's results -> (model-index metric type, readable name); the loss is named by `loss_name`.
METRICS = {
    "eval_loss": ("loss", "Validation loss"),
    "eval_perplexity": ("perplexity", "Validation perplexity"),
    "eval_accuracy": ("accuracy", "Accuracy"),
    "eval_bleu": ("bleu", "sacreBLEU"),
    "eval_chrf": ("chrf", "chrF"),
    "eval_precision": ("precision", "Entity precision"),
    "eval_recall": ("recall", "Entity recall"),
    "eval_f1": ("f1", "F1"),
    "eval_exact_match": ("exact_match", "Exact match"),
    "eval_exact": ("exact", "Exact match"),
    "eval_rouge1": ("rouge1", "ROUGE-1"),
    "eval_rouge2": ("rouge2", "ROUGE-2"),
    "eval_rougeL": ("rougeL", "ROUGE-L"),
    "eval_rougeLsum": ("rougeLsum", "ROUGE-Lsum"),
}
# Head class suffix -> what its loss averages, as the head computes it (an evaluation's loss has no label smoothing).
LOSSES = {
    "ForMaskedLM": "cross-entropy per masked token (nats)",
    "ForCausalLM": "cross-entropy per predicted next token (nats)",
    "ForConditionalGeneration": "cross-entropy per target token (nats)",
    "ForTokenClassification": "cross-entropy per labelled token (nats)",
    "ForQuestionAnswering": "mean of the answer's start and end cross-entropies, per window of context (nats)",
    "ForMultipleChoice": "cross-entropy per example over its choices (nats)",
    "ForMaskedImageModeling": "absolute error per pixel value of the masked patches",
}
# A classifier's loss by `config.problem_type`, of each text or image (`sequence_classification_loss`).
CLASSIFICATION_LOSSES = {
    "single_label_classification": "cross-entropy per {item} (nats)",
    "multi_label_classification": "binary cross-entropy per label of each {item} (nats)",
    "regression": "squared error per predicted value",
}
HYPERPARAMETERS = (
    "learning_rate", "lr_scheduler_type", "warmup_steps", "max_steps", "num_train_epochs",
    "per_device_train_batch_size", "gradient_accumulation_steps", "optim", "adam_beta1", "adam_beta2",
    "adam_epsilon", "weight_decay", "label_smoothing_factor", "max_grad_norm", "seed",
)  # fmt: skip


def head_of(model: transformers.PreTrainedModel) -> str:
    """The head's class-name suffix (`"ForCausalLM"`, ...), `"Model"` for the bare model."""
    name = type(model).__name__
    return next((suffix for suffix in HEADS if name.endswith(suffix)), "Model")


def loss_name(model: transformers.PreTrainedModel) -> str | None:
    """What the model's loss is and averages, as its head computes it: `"cross-entropy per example (nats)"`, ...; a
    classifier whose `problem_type` is not yet set is named as its loss would set it for class ids. None: a model
    without a head has no loss."""
    head = head_of(model)
    if head not in ("ForSequenceClassification", "ForImageClassification"):
        return LOSSES.get(head)
    problem = model.config.problem_type
    if problem is None:
        problem = "regression" if model.config.num_labels == 1 else "single_label_classification"
    return CLASSIFICATION_LOSSES[problem].format(item="image" if head == "ForImageClassification" else "example")


def metric_names(model: transformers.PreTrainedModel) -> dict[str, tuple[str, str]]:
    """`METRICS` with the loss named as the model's head computes it (`loss_name`), where it has one."""
    loss = loss_name(model)
    return METRICS if loss is None else {**METRICS, "eval_loss": ("loss", f"{METRICS['eval_loss'][1]}: {loss}")}


def ties_output_projection(model: transformers.PreTrainedModel) -> bool:
    """Whether the model has an output projection over the vocabulary that is its token embedding's weight."""
    output = model.get_output_embeddings()
    return output is not None and output.weight is model.get_input_embeddings().weight


def significant(value: float) -> str:
    """`value` as the card shows it, to 4 significant digits (`2.461e-05`, `0.8333`)."""
    return f"{value:.4g}"


def baseline_of(metrics: dict, key: str) -> float | None:
    """The baseline a run reported beside metric `key` (`eval_baseline_accuracy` beside `eval_accuracy`), if any."""
    baseline = metrics.get(key.replace("eval_", "eval_baseline_", 1))
    return None if baseline is None else float(baseline)


# Metrics where lower is better; every other metric with a baseline is better higher.
LOWER_IS_BETTER = ("eval_loss", "eval_perplexity")


def beats(metrics: dict, name: str) -> bool:
    """Whether metric `name` beats its baseline (lower for a loss or perplexity, higher for a score)."""
    value, baseline = metrics[name], baseline_of(metrics, name)
    return value < baseline if name in LOWER_IS_BETTER else value > baseline


def shown_baseline(metrics: dict, key: str) -> str:
    """The baseline of metric `key` as the card's table shows it."""
    baseline = baseline_of(metrics, key)
    return "not computed" if baseline is None else significant(baseline)


def below_baseline(metrics: dict, headline: tuple[str, ...] | None = None) -> list[str]:
    """The evaluation metrics of `metrics` (`eval_<metric>`) that do not beat their baseline
    (`eval_baseline_<metric>`): of `headline` (a task's verdict metrics in order of preference), the first that has a
    baseline; without `headline`, every metric that has one."""
    scored = [name for name in metrics
              if name.startswith("eval_") and not name.startswith("eval_baseline_") and baseline_of(metrics, name)
              is not None]  # fmt: skip
    if headline is not None:
        scored = [name for name in [verdict_metric(metrics, headline)] if name is not None]
    return [name for name in scored if not beats(metrics, name)]


def verdict_metric(metrics: dict, headline: tuple[str, ...]) -> str | None:
    """The metric a run's verdict is decided on: the first of `headline` reported beside a baseline, if any."""
    return next((name for name in headline if name in metrics and baseline_of(metrics, name) is not None), None)


def beside_baseline(metrics: dict, name: str, label: str | None = None) -> str:
    """`"<label> value (baseline b)"` of metric `name`."""
    baseline = metrics[name.replace("eval_", "eval_baseline_", 1)]
    return f"{label or name} {significant(metrics[name])} (baseline {significant(baseline)})"


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
    recipe: str | None = None,
    headline: tuple[str, ...] | None = None,
    evaluation_data: str | None = None,
    joined_columns: list[str] | None = None,
    column_delimiter: str = " ",
) -> ModelCard:
    """The model card of `model`: facts gathered here, every sentence in `hub_card/modelcard_template.md`.

    Args:
        model: The model the card describes.
        repo_id: The hub repository the card is for.
        task: The pipeline tag; by default the head's.
        datasets: The training data.
        metrics: Evaluation results by Trainer name (`eval_loss`, `eval_perplexity`, `eval_accuracy`, `eval_bleu`,
            `eval_chrf`), and their baselines (`eval_baseline_accuracy`, ...: what a model that learns nothing
            scores), shown beside each metric.
        training_arguments: The Trainer's arguments as a dict.
        language: The languages of the model's text.
        license: The license identifier.
        description: Replaces the card's opening sentence.
        recipe: A sentence on how the model was trained (the from-scratch recipe of `aiayn train`).
        headline: The metrics the verdict against the baseline is decided on, in order of preference (the first
            with a baseline; `Task.headline`); None: every metric with a baseline must beat it.
        evaluation_data: What the metrics were measured on, as the card's sentence "Evaluated on ..." ends (`the
            validation file `dev.csv``); None: not recorded.
        joined_columns: The columns whose texts the model read joined into one (a classifier of pairs).
        column_delimiter: What joined them.

    Returns:
        The card.
    """
    config = model.config
    family = family_of(config.model_type)
    head = head_of(model)
    default_task, auto_class = HEADS[head]
    if family == "vision" and head == "Model":
        default_task = "image-feature-extraction"
    task = task or default_task
    metrics = metrics or {}
    names = metric_names(model)
    results = [
        EvalResult(
            task_type=task,
            dataset_type=datasets[0] if datasets else "unknown",
            dataset_name=datasets[0] if datasets else "unknown",
            dataset_split="validation",
            metric_type=names[key][0],
            metric_name=names[key][1],
            metric_value=float(significant(metrics[key])),
        )
        for key in names
        if key in metrics
    ]
    model_name = repo_id.rsplit("/", 1)[-1]
    card_data = ModelCardData(
        model_name=model_name,
        library_name="transformers",
        pipeline_tag=task,
        license=license,
        language=language,
        datasets=list(datasets) if datasets else None,
        tags=["aiayn", f"aiayn-{family}", "transformer", "attention-is-all-you-need"],
        metrics=sorted({result.metric_type for result in results}) or None,
        eval_results=results or None,
    )
    arguments = dict(training_arguments or {})
    if arguments.get("max_steps", -1) > 0:  # the step count, not the epoch count, ended the run
        arguments.pop("num_train_epochs", None)
    template = resources.files("aiayn.hub_card").joinpath("modelcard_template.md").read_text(encoding="utf-8")
    return ModelCard.from_template(
        card_data,
        template_str=template,
        model_name=model_name,
        repo_id=repo_id,
        description=description,
        recipe=recipe,
        config=config,
        family=family,
        family_description=FAMILIES[family].description,
        head=head,
        tied=ties_output_projection(model),
        model_class=type(model).__name__,
        auto_class=auto_class,
        parameters=sum(p.numel() for p in model.parameters()),
        hyperparameters=[(name, arguments[name]) for name in HYPERPARAMETERS if name in arguments],
        evaluation=[
            (names[key][1], significant(metrics[key]), shown_baseline(metrics, key)) for key in names if key in metrics
        ],
        evaluation_examples=metrics.get("eval_samples"),
        evaluation_data=evaluation_data,
        joined_columns=joined_columns,
        column_delimiter=column_delimiter,
        below_baseline=[
            beside_baseline(metrics, key, names[key][1]) for key in below_baseline(metrics, headline) if key in names
        ],
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
    )


def save_hub_folder(
    model: transformers.PreTrainedModel,
    processor,
    folder: str,
    repo_id: str | None = None,
    **card_fields,
) -> ModelCard:
    """Writes the folder `push_to_hub` would upload.

    The folder holds the weights, config, generation config, the tokenizer (or a vision model's image processor),
    the modeling code and `README.md`, the card of `model_card`.

    Args:
        model: The model to publish.
        processor (PreTrainedTokenizerBase | BaseImageProcessor): Its tokenizer, or a vision model's image processor.
        folder: The folder to write.
        repo_id: The hub repository the card names.
        **card_fields (Any): Further arguments of `model_card` (`task`, `datasets`, `metrics`, `training_arguments`,
            `language`, `license`, `description`).

    Returns:
        The model card written to `README.md`.
    """
    model.save_pretrained(folder)
    if processor is not None:
        processor.save_pretrained(folder)
    card = model_card(model, repo_id or os.path.basename(os.path.abspath(folder)), **card_fields)
    card.save(os.path.join(folder, "README.md"))
    return card
