"""Figures of a run as PNG files (the `plot` extra: matplotlib): the sinusoidal position encodings, the learning-rate
schedule, the loss curves and attention heatmaps of a trained model."""

import math
import os

import torch

from ..extras import extra_module


def _pyplot():
    extra_module("matplotlib", "matplotlib", "Plotting", "plot").use("Agg")
    return extra_module("matplotlib.pyplot", "matplotlib", "Plotting", "plot")


def _save(figure, path: str) -> str:
    plt = _pyplot()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def positional_encoding_heatmap(path: str, d_model: int = 512, positions: int = 100) -> str:
    """The paper's sinusoidal encodings (section 3.5) of `positions` positions as a heatmap."""
    from ..positions_aiayn import AiaynSinusoidalPositionEmbedding

    plt = _pyplot()
    table = AiaynSinusoidalPositionEmbedding(d_model)(torch.arange(positions)[None])[0]
    figure, axis = plt.subplots(figsize=(10, 5))
    image = axis.pcolormesh(table.numpy(), cmap="RdBu", vmin=-1, vmax=1)
    axis.set(xlabel="dimension i", ylabel="position", title=f"Sinusoidal position encodings, d_model = {d_model}")
    figure.colorbar(image, ax=axis)
    return _save(figure, path)


def learning_rate_plot(path: str, log_history: list[dict], title: str = "Learning rate") -> str:
    """The learning rate the Trainer logged at each step."""
    plt = _pyplot()
    points = [(entry["step"], entry["learning_rate"]) for entry in log_history if "learning_rate" in entry]
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.plot([step for step, _ in points], [rate for _, rate in points])
    axis.set(xlabel="optimizer step", ylabel="learning rate", title=title)
    return _save(figure, path)


def loss_curves(path: str, log_history: list[dict], title: str = "Loss") -> str:
    """Training and validation loss against the optimizer step, from a Trainer's `state.log_history`."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for key, label in (("loss", "training"), ("eval_loss", "validation")):
        points = [(entry["step"], entry[key]) for entry in log_history if key in entry]
        if points:
            axis.plot(*zip(*points, strict=True), marker="o" if key == "eval_loss" else None, label=label)
    axis.set(xlabel="optimizer step", ylabel="cross-entropy (nats)", title=title)
    axis.legend()
    return _save(figure, path)


def attention_heatmaps(path: str, model, tokenizer, text: str, layer: int = -1) -> str:
    """The attention probabilities of every head of one layer of `model` for `text` (eager attention; for a seq2seq
    model, the encoder's self-attention)."""
    plt = _pyplot()
    inputs = tokenizer(text, return_tensors="pt").to(model.device)
    tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
    implementation = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            if model.config.is_encoder_decoder:
                attentions = model.get_encoder()(**inputs, output_attentions=True).attentions
            else:
                attentions = model(**inputs, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(implementation)
    weights = attentions[layer][0].float().cpu()
    heads = weights.shape[0]
    columns = min(heads, 4)
    rows = math.ceil(heads / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.2 * rows), squeeze=False)
    for head, axis in enumerate(axes.flat):
        if head >= heads:
            axis.axis("off")
            continue
        axis.imshow(weights[head].numpy(), cmap="viridis", vmin=0, vmax=1)
        axis.set_title(f"head {head}", fontsize=9)
        axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
        axis.set_yticks(range(len(tokens)), tokens, fontsize=6)
    figure.suptitle(f"Attention of layer {layer % len(attentions)}: {text[:60]}")
    return _save(figure, path)


def save_run_plots(output_dir: str, trainer, sample_text: str | None = None) -> list[str]:
    """Loss curves and learning rate of a finished Trainer run, the position encodings of a model with the paper's
    sinusoids, and attention heatmaps for `sample_text`."""
    history = trainer.state.log_history
    paths = [
        loss_curves(os.path.join(output_dir, "loss.png"), history),
        learning_rate_plot(os.path.join(output_dir, "learning_rate.png"), history),
    ]
    if trainer.model.config.position_embedding_type == "sinusoidal":
        d_model = trainer.model.config.d_model
        paths.append(positional_encoding_heatmap(os.path.join(output_dir, "positional_encoding.png"), d_model))
    if sample_text:
        paths.append(
            attention_heatmaps(
                os.path.join(output_dir, "attention.png"), trainer.model, trainer.processing_class, sample_text
            )
        )
    return paths
