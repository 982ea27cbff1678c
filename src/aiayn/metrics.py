"""Evaluation metrics as local `evaluate.Metric` modules.

The hub's metric scripts (`evaluate.load("sacrebleu")`, ...) cannot be fetched on machines without the hub; these
modules compute the same numbers locally: `Accuracy`, `SacreBleu` and `ChrF` (through `sacrebleu`), `Seqeval`
(entity-level precision, recall and F1 through `seqeval`), `Rouge` (through Google's `rouge_score`), `Squad` and
`SquadV2` (SQuAD's exact match and F1, as its official scripts compute them), and `perplexity`, which is `exp` of the
mean token cross-entropy (the eval loss). `sacrebleu`, `seqeval` and `rouge_score` come with the package's `train`
extra.
"""

import collections
import math
import re
import string

import datasets
import evaluate

from .extras import extra_module


def _library(module: str, package: str):
    """`module`, or an ImportError that names the extra installing it."""
    return extra_module(module, package, "This metric", "train")


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
            description=f"{self.name} computed by sacrebleu {_library('sacrebleu', 'sacrebleu').__version__}.",
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
        bleu = _library("sacrebleu", "sacrebleu").BLEU(tokenize=tokenize)
        score = bleu.corpus_score(predictions, self._reference_streams(references)).score
        return {"bleu": score, "signature": str(bleu.get_signature())}


class ChrF(_SacreBleuMetric):
    """Character n-gram F-score (chrF, or chrF++ with `word_order=2`)."""

    name = "chrF"

    def _compute(self, predictions, references, word_order: int = 0) -> dict:
        result = _library("sacrebleu", "sacrebleu").corpus_chrf(
            predictions, self._reference_streams(references), word_order=word_order
        )
        return {"chrf": result.score}


class Seqeval(evaluate.Metric):
    """Entity-level precision, recall and F1 of IOB-tagged sequences (an entity counts when its type and its span
    both match), and token accuracy, as `seqeval` computes them (the metric of transformers' `run_ner`)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="seqeval: entity-level precision, recall, F1; token accuracy.",
            citation="@misc{seqeval, author={Hiroki Nakayama}, title={seqeval}, year={2018}}",
            inputs_description="predictions and references: a list of tags (strings) per sentence.",
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references, entity_level: bool = False) -> dict:
        """With `entity_level`, each entity type's `<TYPE>_precision`, `_recall`, `_f1` and `_number` (its count in
        the references) too, as run_ner's `--return_entity_level_metrics` reports them."""
        scores = _library("seqeval.metrics", "seqeval")
        results = {
            "precision": scores.precision_score(references, predictions, zero_division=0),
            "recall": scores.recall_score(references, predictions, zero_division=0),
            "f1": scores.f1_score(references, predictions, zero_division=0),
            "accuracy": scores.accuracy_score(references, predictions),
        }
        if entity_level:
            report = scores.classification_report(references, predictions, output_dict=True, zero_division=0)
            for entity, values in report.items():
                if not entity.endswith(" avg"):
                    names = {"precision": "precision", "recall": "recall", "f1-score": "f1", "support": "number"}
                    results.update({f"{entity}_{name}": values[key] for key, name in names.items()})
        return results


# A sentence ends at ".", "!" or "?" before white space.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_lines(text: str) -> str:
    """`text` with one sentence a line, what ROUGE-Lsum reads as its sentences (run_summarization splits them with
    nltk's trained English Punkt model, a download this package does not need; the two differ only where a full stop
    inside a sentence, as in "Mr. Smith", is followed by a space)."""
    return "\n".join(part for part in SENTENCE_END.split(" ".join(text.split())) if part)


class Rouge(evaluate.Metric):
    """Mean ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum F-measures (in percent, as transformers' `run_summarization`
    reports them) of `rouge_score`, with its Porter stemmer, over texts split into a sentence a line
    (`sentence_lines`): ROUGE-Lsum scores the union of each reference sentence's longest common subsequences with
    the predicted sentences, ROUGE-L the texts as one sequence."""

    types = ("rouge1", "rouge2", "rougeL", "rougeLsum")

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="ROUGE F-measures computed by rouge_score.",
            citation="@inproceedings{lin-2004-rouge, title={ROUGE}, author={Lin, Chin-Yew}, year={2004}}",
            inputs_description="predictions and references: strings.",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions, references) -> dict:
        scorer = _library("rouge_score.rouge_scorer", "rouge-score").RougeScorer(list(self.types), use_stemmer=True)
        pairs = zip(predictions, references, strict=True)
        scores = [
            scorer.score(sentence_lines(reference), sentence_lines(prediction)) for prediction, reference in pairs
        ]
        return {name: 100 * sum(s[name].fmeasure for s in scores) / max(len(scores), 1) for name in self.types}


def _normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(character for character in text.lower() if character not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _answer_f1(prediction: str, reference: str) -> float:
    predicted, expected = _normalize_answer(prediction).split(), _normalize_answer(reference).split()
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if not predicted or not expected:
        return float(predicted == expected)
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


class _SquadMetric(evaluate.Metric):
    """Answer strings scored against each question's reference answers."""

    description = ""
    citation = ""
    inputs_description = "predictions: answer strings; references: the reference answers of each question."

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.description,
            citation=self.citation,
            inputs_description=self.inputs_description,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
            ),
        )


class Squad(_SquadMetric):
    """SQuAD v1.1's exact match and F1 (in percent), each the best over an example's reference answers, as the
    official evaluation script computes them."""

    description = "SQuAD exact match and token F1."
    citation = "@inproceedings{rajpurkar-etal-2016-squad, title={SQuAD}, year={2016}}"

    def _compute(self, predictions, references) -> dict:
        pairs = list(zip(predictions, (refs or [""] for refs in references), strict=True))
        exact = [max(_normalize_answer(p) == _normalize_answer(r) for r in refs) for p, refs in pairs]
        f1 = [max(_answer_f1(p, r) for r in refs) for p, refs in pairs]
        count = max(len(predictions), 1)
        return {"exact_match": 100 * sum(exact) / count, "f1": 100 * sum(f1) / count}


def _raw_scores(predictions: list[str], references: list[list[str]]) -> tuple[list[float], list[float]]:
    """Each question's exact match and F1 (0 or 1, and a share), the best over its references; a question without a
    reference (SQuAD v2's unanswerable) has the empty answer as its one reference."""
    exact, f1 = [], []
    for prediction, answers in zip(predictions, references, strict=True):
        answers = [answer for answer in answers if _normalize_answer(answer)] or [""]
        exact.append(max(float(_normalize_answer(answer) == _normalize_answer(prediction)) for answer in answers))
        f1.append(max(_answer_f1(prediction, answer) for answer in answers))
    return exact, f1


def _best_threshold(predictions, scores, no_answer_probabilities, answered) -> tuple[float, float]:
    """The best score over no-answer thresholds (SQuAD v2's `find_best_thresh`): every question abstains, then they
    answer in order of their no-answer probability; and the probability where that score is reached."""
    current = best = sum(not has for has in answered)
    threshold = 0.0
    for i in sorted(range(len(scores)), key=lambda i: no_answer_probabilities[i]):
        current += scores[i] if answered[i] else (-1 if predictions[i] else 0)
        if current > best:
            best, threshold = current, no_answer_probabilities[i]
    return 100.0 * best / len(scores), threshold


class SquadV2(_SquadMetric):
    """SQuAD v2's scores (in percent), as its official evaluation script and the hub's `squad_v2` metric compute
    them: `exact`, `f1` and `total` over all questions, the same over those with an answer (`HasAns_`) and those
    without (`NoAns_`, where the empty answer is right), and the best exact match and F1 over no-answer thresholds
    (`best_exact`, `best_f1`, with their thresholds). A question's no-answer probability is 0 unless given, as
    transformers' `run_qa` passes it."""

    description = "SQuAD v2 exact match and F1, by answerability, and at the best no-answer threshold."
    citation = "@inproceedings{rajpurkar-etal-2018-know, title={Know What You Don't Know}, year={2018}}"
    inputs_description = 'predictions: answer strings ("": no answer); references: each question\'s answers.'

    def _compute(self, predictions, references, no_answer_probabilities=None) -> dict:
        exact, f1 = _raw_scores(predictions, references)
        answered = [any(_normalize_answer(answer) for answer in answers) for answers in references]
        results = {"exact": 100.0 * sum(exact) / len(exact), "f1": 100.0 * sum(f1) / len(f1), "total": len(exact)}
        for name, kept in (("HasAns", answered), ("NoAns", [not has for has in answered])):
            subset = [i for i, keep in enumerate(kept) if keep]
            if subset:
                results[f"{name}_exact"] = 100.0 * sum(exact[i] for i in subset) / len(subset)
                results[f"{name}_f1"] = 100.0 * sum(f1[i] for i in subset) / len(subset)
                results[f"{name}_total"] = len(subset)
        probabilities = no_answer_probabilities or [0.0] * len(predictions)
        for name, scores in (("exact", exact), ("f1", f1)):
            best, threshold = _best_threshold(predictions, scores, probabilities, answered)
            results[f"best_{name}"], results[f"best_{name}_thresh"] = best, threshold
        return results


def perplexity(mean_cross_entropy: float) -> float:
    """`exp` of the mean per-token cross-entropy in nats (e.g. a Trainer's `eval_loss`); infinite past a float's
    range."""
    try:
        return math.exp(mean_cross_entropy)
    except OverflowError:
        return math.inf
