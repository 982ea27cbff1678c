"""What a trained model must beat before its numbers mean anything: the context-free baselines that `aiayn train`
reports and `aiayn demo` prints beside each metric.

- Language models: the unigram model of the training tokens (its cross-entropy and perplexity on the validation
  tokens). A masked LM also sees the tokens BERT's masking leaves in place or replaces at random: its baseline
  answers the most frequent token at `[MASK]` and bets on the token it sees elsewhere.
- Classification: always answering the most frequent training class; for images also a linear classifier
  (logistic regression) on the pixels, trained on the same images.
- Masked-image modelling: each masked pixel predicted by the median of that pixel over the training images.
- Translation: copying the source sentence as its own translation (BLEU and chrF against the references).
"""

import math
from collections import Counter
from collections.abc import Iterable

from .extras import extra_module
from .metrics import ChrF, SacreBleu, perplexity


def unigram_cross_entropy(train_tokens: Iterable[int], eval_tokens: Iterable[int], vocab_size: int) -> float:
    """Mean cross-entropy in nats of `eval_tokens` under the add-one smoothed unigram distribution of
    `train_tokens`: the loss of a model that predicts every token without looking at its context."""
    counts = Counter(train_tokens)
    total = sum(counts.values()) + vocab_size
    losses = [math.log(total / (counts[token] + 1)) for token in eval_tokens]
    return sum(losses) / len(losses)


def majority_accuracy(train_values: Iterable, eval_values: Iterable) -> float:
    """Accuracy on `eval_values` of always answering the most frequent of `train_values` (a class, a token)."""
    majority = Counter(train_values).most_common(1)[0][0]
    values = list(eval_values)
    return sum(value == majority for value in values) / len(values)


def linear_classifier_accuracy(train_pixels, train_labels, eval_pixels, eval_labels) -> float:
    """Accuracy of scikit-learn's logistic regression on the flattened pixels (arrays of `(images, ...)`)."""
    linear_model = extra_module("sklearn.linear_model", "scikit-learn", "The linear baseline", "demo")
    train, evaluated = train_pixels.reshape(len(train_pixels), -1), eval_pixels.reshape(len(eval_pixels), -1)
    classifier = linear_model.LogisticRegression(max_iter=2000).fit(train, train_labels)
    return float(classifier.score(evaluated, eval_labels))


def median_pixel_error(train_pixels, eval_pixels) -> float:
    """The mean absolute error of predicting every pixel by its median over the training images: the best constant
    reconstruction under the L1 loss of masked-image modelling (masks are uniform, so every pixel counts alike)."""
    import numpy as np

    return float(np.abs(eval_pixels - np.median(train_pixels, axis=0)).mean())


def language_model_baselines(train_tokens: list[int], eval_tokens: list[int], vocab_size: int) -> dict:
    """The unigram baselines of a causal language model's `eval_loss` and `eval_perplexity`."""
    loss = unigram_cross_entropy(train_tokens, eval_tokens, vocab_size)
    return {"eval_loss": loss, "eval_perplexity": perplexity(loss)}


def masked_lm_baselines(train_tokens: list[int], eval_tokens: list[int], vocab_size: int,
                        mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1) -> dict:  # fmt: skip
    """The best context-free masked LM under BERT's masking (transformers' `DataCollatorForLanguageModeling`: of the
    selected tokens, `mask_replace_prob` become `[MASK]`, `random_replace_prob` a random token, the rest stay).

    At `[MASK]` it predicts the unigram distribution (cross-entropy H, accuracy f of the most frequent token). At a
    visible token it puts q = kept / (kept + random) on that token and the rest on the unigram distribution, so its
    loss there is -log q where the token was kept and -log(1 - q) + H where it was replaced, and copying the token is
    its answer. Returns `eval_loss`, `eval_perplexity` and masked-token `eval_accuracy`."""
    unigram = unigram_cross_entropy(train_tokens, eval_tokens, vocab_size)
    kept = 1.0 - mask_replace_prob - random_replace_prob
    copy = kept / (kept + random_replace_prob) if kept + random_replace_prob else 0.0
    loss = (mask_replace_prob + random_replace_prob) * unigram
    loss += -kept * math.log(copy) if kept else 0.0
    loss += -random_replace_prob * math.log(1 - copy) if random_replace_prob else 0.0
    accuracy = mask_replace_prob * majority_accuracy(train_tokens, eval_tokens) + kept
    return {"eval_loss": loss, "eval_perplexity": perplexity(loss), "eval_accuracy": accuracy}


def copy_source_scores(sources: list[str], references: list[str]) -> dict:
    """`eval_bleu` and `eval_chrf` of the sources themselves as translations: what shared names, numbers and
    punctuation score without translating anything."""
    streams = [[reference] for reference in references]
    return {
        "eval_bleu": SacreBleu().compute(predictions=sources, references=streams)["bleu"],
        "eval_chrf": ChrF().compute(predictions=sources, references=streams)["chrf"],
    }
