"""Evaluation metrics as local `evaluate.Metric` modules.

The hub's metric scripts (`evaluate.load("sacrebleu")`, ...) cannot be fetched on machines without the hub; these
modules compute the same numbers locally: `Accuracy`, `SacreBleu` and `ChrF` (through `sacrebleu`), and
`perplexity`, which is `exp` of the mean token cross-entropy (the eval loss).
"""

import math

import datasets
import evaluate
import sacrebleu


class Accuracy(evaluate.Metric):
    """The fraction of predictions equal to their reference (e.g. masked tokens predicted correctly)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="Accuracy: correct predictions / predictions.",
            citation="",
            inputs_description="predictions and references: integer labels.",
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references) -> dict:
        correct = sum(int(p == r) for p, r in zip(predictions, references, strict=True))
        return {"accuracy": correct / len(references) if references else float("nan")}


class _SacreBleuMetric(evaluate.Metric):
    """A corpus-level sacreBLEU metric over detokenized predictions and one or more references per prediction."""

    name = ""
    citation = (
        "@inproceedings{post-2018-call, title={A Call for Clarity in Reporting {BLEU} Scores}, author={Post, Matt}, "
        "booktitle={Proceedings of the Third Conference on Machine Translation}, year={2018}}"
    )

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=f"{self.name} computed by sacrebleu {sacrebleu.__version__}.",
            citation=self.citation,
            inputs_description="predictions: strings; references: a list of reference strings per prediction.",
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _reference_streams(self, references: list[list[str]]) -> list[list[str]]:
        if len({len(refs) for refs in references}) > 1:
            raise ValueError(f"{self.name} needs the same number of references for every prediction.")
        return [list(stream) for stream in zip(*references, strict=True)]


class SacreBleu(_SacreBleuMetric):
    """Corpus BLEU with sacreBLEU's defaults (13a tokenization, exponential smoothing), as the WMT papers report."""

    name = "sacreBLEU"

    def _compute(self, predictions, references, tokenize: str = "13a") -> dict:
        bleu = sacrebleu.BLEU(tokenize=tokenize)
        score = bleu.corpus_score(predictions, self._reference_streams(references)).score
        return {"bleu": score, "signature": str(bleu.get_signature())}


class ChrF(_SacreBleuMetric):
    """Character n-gram F-score (chrF, or chrF++ with `word_order=2`)."""

    name = "chrF"

    def _compute(self, predictions, references, word_order: int = 0) -> dict:
        result = sacrebleu.corpus_chrf(predictions, self._reference_streams(references), word_order=word_order)
        return {"chrf": result.score}


def perplexity(mean_cross_entropy: float) -> float:
    """`exp` of the mean per-token cross-entropy in nats (e.g. a Trainer's `eval_loss`)."""
    return math.exp(mean_cross_entropy) if mean_cross_entropy < 700 else float("inf")
