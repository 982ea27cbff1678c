"""Section 3.2.1's case for 1/sqrt(d_k), run: the rows of `aiayn ablate --rows S` and the mechanism behind them.

The paper: additive attention and dot products perform alike for small d_k; for larger d_k additive attention beats
*unscaled* dot products, because `q . k` has variance d_k when the components of q and k have variance 1 (footnote 4),
which pushes the softmax into regions of vanishing gradient; hence the factor 1/sqrt(d_k).

Row S trains the three scores at d_k = 32, 64, 128 and 256 with one head each (d_model 128 as the base row: one head
isolates the size of a head), and, for each run, measures on a fixed batch of validation verses at initialisation and
after training (`attention_statistics`): the spread of the attention logits (their standard deviation over the keys a
query may see), the attention entropy (nats, over those keys) and the mean absolute gradient of the training loss
that reaches the logits.
"""

import torch
from torch import nn

from ..additive_attention_aiayn import AdditiveScore, head_scores
from ..attention_aiayn import AiaynAttention

HEAD_SIZES = (32, 64, 128, 256)
SCORES = {
    "dot product, unscaled": {"attention_score": "dot_product", "scale_attention": False},
    "dot product, scaled": {"attention_score": "dot_product", "scale_attention": True},
    "additive": {"attention_score": "additive"},
}


def score_variants(variant_class) -> tuple:
    """Row S of `aiayn ablate`: every score at every head size, one head each."""
    return tuple(
        variant_class("S", f"{name}, d_k={size}", {"num_heads": 1, "d_kv": size, **fields}, paper=None)
        for size in HEAD_SIZES
        for name, fields in SCORES.items()
    )


class RecordedScore(nn.Module):
    """What an attention layer's score computes (eq. 1 through eager attention, or additive scores), keeping the
    logits, the scores before the mask and the softmax, with their gradient, and the keys each query may see."""

    def __init__(self, score: nn.Module, records: list):
        super().__init__()
        self.inner, self.records = score, records

    def forward(self, module, query, key, value, attention_mask, dropout=0.0, scaling=1.0, **kwargs):
        if isinstance(self.inner, AdditiveScore):
            logits = head_scores(query, key, self.inner.v)
        else:
            logits = query @ key.transpose(-1, -2) * scaling
        logits.retain_grad()
        allowed = torch.ones_like(logits, dtype=torch.bool)
        if attention_mask is not None:  # eager's additive mask: the dtype's minimum where not allowed
            allowed = allowed & (attention_mask > torch.finfo(attention_mask.dtype).min)
        self.records.append((logits, allowed))
        scores = logits + attention_mask if attention_mask is not None else logits
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        return (weights @ value).transpose(1, 2).contiguous(), weights


def attention_statistics(model: nn.Module, batch: dict) -> dict:
    """The logits' spread, the attention entropy and the gradient at the logits, averaged over every attention of
    `model` (self- and encoder-decoder attention) and every query of `batch` that may see a key. The model runs in
    eager attention, without dropout, and is left as it was."""
    attentions = [module for module in model.modules() if isinstance(module, AiaynAttention)]
    records, scores = [], [module.score for module in attentions]
    implementation, training = model.config._attn_implementation, model.training
    model.set_attn_implementation("eager")
    model.eval()
    for module in attentions:
        module.score = RecordedScore(module.score, records)
    try:
        with torch.enable_grad():
            model(**batch).loss.backward()
    finally:
        for module, score in zip(attentions, scores, strict=True):
            module.score = score
        model.zero_grad(set_to_none=True)
        model.set_attn_implementation(implementation)
        model.train(training)
    spreads, entropies, gradients = [], [], []
    for logits, allowed in records:
        allowed = allowed.expand_as(logits)
        rows = allowed.any(-1)
        count = allowed.sum(-1).clamp(min=1)
        values = logits.detach().masked_fill(~allowed, 0.0)
        mean = values.sum(-1) / count
        variance = ((values - mean[..., None]) ** 2).masked_fill(~allowed, 0.0).sum(-1) / count
        log_probabilities = torch.log_softmax(logits.detach().float().masked_fill(~allowed, float("-inf")), dim=-1)
        entropy = -(log_probabilities.exp() * log_probabilities.masked_fill(~allowed, 0.0)).sum(-1)
        spreads.append(variance.sqrt()[rows])
        entropies.append(entropy[rows])
        gradients.append(logits.grad.abs()[allowed])
    return {
        "logit_spread": torch.cat(spreads).mean().item(),
        "entropy": torch.cat(entropies).mean().item(),
        "logit_gradient": torch.cat(gradients).mean().item(),
    }


def mechanism_table(results: list[dict]) -> str:
    """Row S's statistics at initialisation and after training, one line per run's variant (seed means)."""
    header = ("variant", "logit spread (init)", "logit spread (trained)", "entropy (init)", "entropy (trained)",
              "|dL/dlogit| (init)", "|dL/dlogit| (trained)")  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        if result["row"] != "S":
            continue
        runs = result["runs"]
        cells = [result["variant"]]
        for key, digits in (("logit_spread", 3), ("entropy", 3), ("logit_gradient", 2)):
            for stage in ("at_init", "trained"):
                value = sum(run[stage][key] for run in runs) / len(runs)
                cells.append(f"{value:.{digits}e}" if key == "logit_gradient" else f"{value:.{digits}f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mechanism_plot(path: str, results: list[dict]) -> str:
    """BLEU, the logits' spread, the entropy and the gradient at the logits against d_k, one colour per score (mean
    and range over seeds), statistics at initialisation dashed and after training solid."""
    from .plots import _pyplot, _save

    plt = _pyplot()
    figure, axes = plt.subplots(1, 4, figsize=(18, 4))
    rows = [result for result in results if result["row"] == "S"]
    for color, name in zip(("tab:blue", "tab:orange", "tab:green"), SCORES, strict=True):
        chosen = [result for result in rows if result["variant"].startswith(name + ",")]
        sizes = [result["config"]["d_kv"] for result in chosen]
        panels = (("bleu", "BLEU, beam 4"), ("logit_spread", "logit spread"), ("entropy", "entropy (nats)"),
                  ("logit_gradient", "mean |dL/dlogit|"))  # fmt: skip
        for axis, (key, title) in zip(axes, panels, strict=True):
            stages = (None,) if key == "bleu" else ("at_init", "trained")
            for stage in stages:
                values = [[run[key] if stage is None else run[stage][key] for run in r["runs"]] for r in chosen]
                means = [sum(v) / len(v) for v in values]
                errors = [[m - min(v) for m, v in zip(means, values, strict=True)],
                          [max(v) - m for m, v in zip(means, values, strict=True)]]  # fmt: skip
                style = "--" if stage == "at_init" else "-"
                label = name if stage != "at_init" else None
                axis.errorbar(sizes, means, yerr=errors, fmt="o" + style, color=color, capsize=3, label=label)
            axis.set_xscale("log", base=2)
            axis.set_xlabel("d_k")
            axis.set_title(title)
    axes[3].set_yscale("log")
    axes[0].legend()
    return _save(figure, path)
