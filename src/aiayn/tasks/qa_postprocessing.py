"""From start and end logits to answers: transformers' `postprocess_qa_predictions` (the question-answering
examples' `utils_qa.py`), with SQuAD v2's null answers, written for aiayn.

Each example's windows (features) are scored together. In a window, the `n_best_size` best start and end tokens are
paired into spans of context tokens (tokens whose offsets are None, the question's and the special ones, are never
in a span) of at most `max_answer_length` tokens, scored by start + end logit; the text is cut out of the context by
the tokens' character offsets. Under SQuAD v2 (`version_2_with_negative`), the null answer scores the first token's
start + end logit in the window where that is lowest, and is the answer when it beats the best span by more than
`null_score_diff_threshold`.
"""

import collections
import json
import os

import numpy as np


def _spans(start_logits, end_logits, offsets, n_best_size: int, max_answer_length: int) -> list[dict]:
    starts = np.argsort(start_logits)[-1 : -n_best_size - 1 : -1].tolist()
    ends = np.argsort(end_logits)[-1 : -n_best_size - 1 : -1].tolist()
    spans = []
    for start in starts:
        for end in ends:
            if start >= len(offsets) or end >= len(offsets) or offsets[start] is None or offsets[end] is None:
                continue
            if len(offsets[start]) < 2 or len(offsets[end]) < 2:
                continue
            if end < start or end - start + 1 > max_answer_length:
                continue
            spans.append({"offsets": (offsets[start][0], offsets[end][1]),
                          "score": start_logits[start] + end_logits[end],
                          "start_logit": start_logits[start], "end_logit": end_logits[end]})  # fmt: skip
    return spans


def postprocess_qa_predictions(
    examples,
    features,
    predictions: tuple[np.ndarray, np.ndarray],
    version_2_with_negative: bool = False,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    null_score_diff_threshold: float = 0.0,
    output_dir: str | None = None,
    prefix: str | None = None,
    context_column: str = "context",
) -> dict[str, str]:
    """Each example's answer text by its id (`""`: no answer, under SQuAD v2), from the start and end logits of its
    features (`example_id`, and `offset_mapping` with None outside the context). With `output_dir`, writes
    `predictions.json`, `nbest_predictions.json` and, under v2, `null_odds.json` (each `{prefix}_...` with a
    `prefix`), as transformers' example does."""
    start_logits, end_logits = predictions
    if len(start_logits) != len(features):
        raise ValueError(f"Got {len(start_logits)} predictions and {len(features)} features.")
    windows = collections.defaultdict(list)
    for index, example_id in enumerate(features["example_id"]):
        windows[example_id].append(index)
    offset_mappings = features["offset_mapping"]
    answers, nbest, null_odds = {}, {}, {}
    for example in examples:
        null, candidates = None, []
        for index in windows[example["id"]]:
            starts, ends = start_logits[index], end_logits[index]
            window_null = starts[0] + ends[0]
            if null is None or null["score"] > window_null:
                null = {"offsets": (0, 0), "score": window_null, "start_logit": starts[0], "end_logit": ends[0]}
            candidates += _spans(starts, ends, offset_mappings[index], n_best_size, max_answer_length)
        if version_2_with_negative and null is not None:
            candidates.append(null)
            null_score = null["score"]  # popped from the candidates below
        best = sorted(candidates, key=lambda candidate: candidate["score"], reverse=True)[:n_best_size]
        if version_2_with_negative and null is not None and not any(c["offsets"] == (0, 0) for c in best):
            best.append(null)
        context = example[context_column]
        for candidate in best:
            first, last = candidate.pop("offsets")
            candidate["text"] = context[first:last]
        if not best or (len(best) == 1 and best[0]["text"] == ""):
            best.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        scores = np.array([candidate.pop("score") for candidate in best])
        probabilities = np.exp(scores - scores.max())
        probabilities /= probabilities.sum()
        for probability, candidate in zip(probabilities, best, strict=True):
            candidate["probability"] = probability
        if not version_2_with_negative:
            answers[example["id"]] = best[0]["text"]
        else:
            span = next(candidate for candidate in best if candidate["text"] != "")
            difference = null_score - span["start_logit"] - span["end_logit"]
            null_odds[example["id"]] = float(difference)
            answers[example["id"]] = "" if difference > null_score_diff_threshold else span["text"]
        nbest[example["id"]] = [{key: float(value) if isinstance(value, np.floating) else value
                                 for key, value in candidate.items()} for candidate in best]  # fmt: skip
    if output_dir is not None:
        files = {"predictions": answers, "nbest_predictions": nbest}
        if version_2_with_negative:
            files["null_odds"] = null_odds
        for name, content in files.items():
            path = os.path.join(output_dir, f"{name}.json" if prefix is None else f"{prefix}_{name}.json")
            with open(path, "w") as f:
                f.write(json.dumps(content, indent=4) + "\n")
    return answers
