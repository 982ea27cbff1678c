"""The numbers of the tasks of `aiayn train`: labels, features, answers, metrics and baselines checked against values
worked out by hand or by an independent reference, on data built so that a wrong choice (a sub-word labelled twice,
an answer one token too long, the other split, the other statistic) gives another number."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import datasets
import numpy as np
import pytest
import transformers
from helpers import example_scripts, lm_model, tiny_config
from huggingface_hub.errors import StrictDataclassError

import aiayn
from aiayn.baselines import masked_lm_baselines
from aiayn.data import load_files
from aiayn.metrics import Accuracy, Seqeval, Squad
from aiayn.tasks import causal_lm, masked_lm, multiple_choice, summarization
from aiayn.tasks.generation import decoded_texts, generated_and_references
from aiayn.tasks.qa_postprocessing import postprocess_qa_predictions
from aiayn.tasks.question_answering import question_answering_baseline, question_answering_dataset, squad_scores
from aiayn.tasks.task import class_baseline
from aiayn.tasks.token_classification import (
    inside_tags,
    most_frequent_tags,
    scored_tags,
    subword_labels,
    token_classification_baseline,
    token_classification_dataset,
)
from aiayn.tokenization import train_tokenizer
from aiayn.train_arguments import DataArguments

# Frequent words become whole tokens; the rare ones (Kowalski, Amsterdam, Jan) are split into several sub-words.
COMMON = (
    "Anna met Ben in Paris . Ben lives in Paris . Who met Ben ? Where did Anna go ? Anna went to Paris . Where "
    "does Ben live ? It is in Paris , Ben said ."
)
RARE = "Kowalski stayed in Amsterdam with Jan ."
TAGS = ["B-LOC", "B-PER", "I-PER", "O"]  # no I-LOC: a B-LOC stays B-LOC on later sub-words
LABEL2ID = {tag: i for i, tag in enumerate(TAGS)}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer("encoder", [COMMON] * 20 + [RARE], 70)


def tagged(rows) -> datasets.Dataset:
    return datasets.Dataset.from_list([{"tokens": words.split(), "ner_tags": tags.split()} for words, tags in rows])


# Token classification.


@pytest.mark.parametrize("label_all_tokens", [False, True])
def test_a_words_tag_goes_on_its_first_sub_word_or_on_all_of_them(tokenizer, label_all_tokens):
    """Without `label_all_tokens` a word's later sub-words are -100; with it they take the word's tag, `B-PER` as
    `I-PER` and `B-LOC` (no `I-LOC`) as itself; special tokens are -100. Through `token_classification_dataset`."""
    words, tags = ["Jan", "Kowalski", "lives", "in", "Amsterdam"], ["B-PER", "I-PER", "O", "O", "B-LOC"]
    pieces = [len(tokenizer.tokenize(word)) for word in words]
    assert pieces == [3, 8, 2, 1, 8]
    later = {"B-PER": "I-PER", "I-PER": "I-PER", "O": "O", "B-LOC": "B-LOC"}
    expected = [-100]
    for tag, count in zip(tags, pieces, strict=True):
        expected += [LABEL2ID[tag]] + [LABEL2ID[later[tag]] if label_all_tokens else -100] * (count - 1)
    expected.append(-100)
    config = tiny_config("encoder", id2label=dict(enumerate(TAGS)), label2id=LABEL2ID)
    model = transformers.AutoModelForTokenClassification.from_config(config)
    data_args = DataArguments(text_column="tokens", label_column="ner_tags", label_all_tokens=label_all_tokens)
    corpus = datasets.DatasetDict({"train": tagged([(" ".join(words), " ".join(tags))])})
    assert list(token_classification_dataset(corpus, tokenizer, model, data_args)["train"]["labels"]) == [expected]
    word_ids = tokenizer(words, is_split_into_words=True).word_ids()
    assert subword_labels(word_ids, [LABEL2ID[t] for t in tags], label_all_tokens, inside_tags(LABEL2ID)) == expected


def test_scored_tags_are_the_positions_with_a_label():
    """The argmax of the logits and the reference tag where the label is not -100, per example."""
    logits = np.zeros((2, 4, 4))
    for row, column, tag in [(0, 0, 1), (0, 1, 2), (0, 2, 0), (0, 3, 3), (1, 0, 3), (1, 1, 1), (1, 2, 2), (1, 3, 0)]:
        logits[row, column, tag] = 1.0
    labels = np.array([[-100, 2, -100, 3], [1, 1, -100, -100]])
    predicted, expected = scored_tags(logits, labels, dict(enumerate(TAGS)))
    assert predicted == [["I-PER", "O"], ["O", "B-PER"]]
    assert expected == [["I-PER", "O"], ["B-PER", "B-PER"]]


def test_seqeval_counts_entities_and_each_types():
    """3 entities, 2 predicted, 1 right (LOC's boundary is wrong, ORG is missed): precision 1/2, recall 1/3, F1 0.4,
    4 of 6 tags right; per type, PER's scores 1 and the others' 0, each type once in the references."""
    references = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"]]
    predictions = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O"]]
    scores = Seqeval().compute(predictions=predictions, references=references, entity_level=True)
    expected = {"precision": 1 / 2, "recall": 1 / 3, "f1": 0.4, "accuracy": 4 / 6}
    for entity, value in (("PER", 1.0), ("LOC", 0.0), ("ORG", 0.0)):
        expected.update({f"{entity}_precision": value, f"{entity}_recall": value, f"{entity}_f1": value})
        expected[f"{entity}_number"] = 1
    assert scores == pytest.approx(expected, abs=1e-12)


TRAIN_TAGGED = [("Paris is big", "B-LOC O O"), ("Paris Hilton sings", "B-PER I-PER O"), ("Paris is old", "B-LOC O O"),
                ("Anna sings", "B-PER O")]  # fmt: skip
VALIDATION_TAGGED = [("Paris Hilton is here", "B-PER I-PER O O"), ("Rome is old", "B-LOC O O"),
                     ("Anna is in Paris", "B-PER O O B-LOC")]  # fmt: skip


def test_the_tag_baseline_is_each_training_words_most_frequent_tag():
    """Training: Paris is B-LOC twice and B-PER once, O the most frequent tag. Validation (where Paris is B-PER as
    often as B-LOC, so its own words would tag it otherwise): "Paris Hilton" is tagged B-LOC I-PER (2 entities, both
    wrong), Rome (unseen) O; the third sentence is right: precision 2/4, recall 2/4, 9 of 11 tags right."""
    train, validation = tagged(TRAIN_TAGGED), tagged(VALIDATION_TAGGED)
    tags_of, majority = most_frequent_tags(train["tokens"], train["ner_tags"])
    assert majority == "O" and tags_of["Paris"] == "B-LOC" and tags_of["Hilton"] == "I-PER"
    data_args = DataArguments(text_column="tokens", label_column="ner_tags")
    scores = token_classification_baseline(None, datasets.DatasetDict(train=train, validation=validation), data_args)
    expected = {"precision": 0.5, "recall": 0.5, "f1": 0.5, "accuracy": 9 / 11}
    assert scores == pytest.approx({f"eval_baseline_{name}": value for name, value in expected.items()}, abs=1e-12)


# Question answering: features.

QA_ROWS = [
    ("multi", "Who met Ben ?", "Anna Kowalski met Ben in Paris .", "Anna Kowalski"),
    ("punctuation", "Where did Anna go ?", "Anna went to Paris . Ben stayed home .", "Paris"),
    ("end", "Where does Ben live ?", "Ben lives in Amsterdam", "Amsterdam"),
]


def qa_examples(rows) -> datasets.Dataset:
    """SQuAD's columns; an answer of None: no answer (SQuAD v2)."""
    return datasets.Dataset.from_list([
        {"id": id_, "question": question, "context": context,
         "answers": {"text": [answer] if answer else [], "answer_start": [context.index(answer)] if answer else []}}
        for id_, question, context, answer in rows
    ])  # fmt: skip


def qa_args(**fields) -> DataArguments:
    return DataArguments(question_column="question", context_column="context", answer_column="answers", **fields)


def features_of(examples, tokenizer, data_args) -> datasets.Dataset:
    return question_answering_dataset(datasets.DatasetDict(train=examples), tokenizer, None, data_args)["train"]


def test_answer_tokens_cut_out_exactly_the_answer_and_the_question_has_no_offsets(tokenizer):
    """A multi-token answer, a one-token answer followed by "." and an answer that ends the context: the labelled
    first and last token are those of its first and last character (`char_to_token`), and their offsets cut exactly
    the answer out of the context; tokens outside the context (question, special) have offset None."""
    assert len(tokenizer.tokenize("Anna Kowalski")) >= 2 and tokenizer.tokenize("Paris") == ["Paris"]
    examples = qa_examples(QA_ROWS)
    features = features_of(examples, tokenizer, qa_args(block_size=64, doc_stride=16))
    assert list(features["example_id"]) == [row[0] for row in QA_ROWS]
    texts, positions, expected_positions = [], [], []
    for feature, (_, question, context, answer) in zip(features, QA_ROWS, strict=True):
        start, end, offsets = feature["start_positions"], feature["end_positions"], feature["offset_mapping"]
        texts.append(context[offsets[start][0] : offsets[end][1]] if offsets[start] and offsets[end] else None)
        encoding, first, last = (
            tokenizer(question, context),
            context.index(answer),
            context.index(answer) + len(answer),
        )
        positions.append((start, end))
        expected_positions.append(tuple(encoding.char_to_token(c, sequence_index=1) for c in (first, last - 1)))
        in_context = [k for k, sequence in enumerate(encoding.sequence_ids()) if sequence == 1]
        assert [k for k, span in enumerate(offsets) if span is not None] == in_context
    assert texts == [row[3] for row in QA_ROWS]
    assert positions == expected_positions


def test_a_long_context_in_windows_labels_the_answer_where_a_window_holds_it_else_cls(tokenizer):
    """A context of ~75 tokens in windows of 24 (padded to 24) that share `doc_stride` = 6 context tokens: a window
    that holds all of "Amsterdam" labels its tokens (found in the whole context's tokens), any other the CLS token."""
    context = "Ben met Anna in Paris . " * 4 + "Jan Kowalski stayed in Amsterdam . " + "Ben met Anna in Paris . " * 4
    question = "Where did Jan go ?"
    features = features_of(qa_examples([("long", question, context, "Amsterdam")]), tokenizer,
                           qa_args(block_size=24, doc_stride=6, pad_to_max_length=True))  # fmt: skip
    whole = tokenizer(question, context, return_offsets_mapping=True)
    tokens = [tuple(span) for span, s in zip(whole["offset_mapping"], whole.sequence_ids(), strict=True) if s == 1]
    start_char = context.index("Amsterdam")
    first, last = [span[0] for span in tokens].index(start_char), [span[1] for span in tokens].index(start_char + 9)
    windows, labelled = [], []
    for feature in features:
        assert len(feature["input_ids"]) == 24 and feature["input_ids"][0] == tokenizer.cls_token_id
        offsets = feature["offset_mapping"]
        k0 = next(k for k, span in enumerate(offsets) if span is not None)
        window = [tuple(span) for span in offsets if span is not None]
        j = tokens.index(window[0])
        assert tokens[j : j + len(window)] == window
        holds = j <= first and last < j + len(window)
        expected = (k0 + first - j, k0 + last - j) if holds else (0, 0)
        assert (feature["start_positions"], feature["end_positions"]) == expected
        windows.append(window)
        labelled.append(holds)
    assert len(windows) >= 4 and any(labelled) and not all(labelled)
    for before, after in zip(windows, windows[1:], strict=False):
        assert after[:6] == before[-6:]


# Question answering: answers.

# "Anna met Ben in Paris" after [CLS], two question tokens and [SEP]: tokens 4 to 8, then [SEP].
CONTEXT = "Anna met Ben in Paris"
OFFSETS = [None, None, None, None, [0, 4], [5, 8], [9, 12], [13, 15], [16, 21], None]


def logits(**values) -> np.ndarray:
    """-10 everywhere but at the tokens given (`t<index>=value`)."""
    row = np.full(len(OFFSETS), -10.0)
    for name, value in values.items():
        row[int(name[1:])] = value
    return row


def answers(windows, examples, tmp_path, **options):
    """The answers of `postprocess_qa_predictions` on `windows` ((example id, offsets, start, end) each), and the
    files it writes."""
    features = datasets.Dataset.from_dict({"example_id": [w[0] for w in windows],
                                           "offset_mapping": [w[1] for w in windows]})  # fmt: skip
    predictions = (np.stack([w[2] for w in windows]), np.stack([w[3] for w in windows]))
    found = postprocess_qa_predictions(examples, features, predictions, output_dir=str(tmp_path), **options)
    files = {path.stem: json.loads(path.read_text()) for path in tmp_path.glob("*.json")}
    return found, files


# Start: question token 1 (9), Ben (5), Anna (3); end: question token 2 (9), Paris (4), Ben (2.5), met (1). Spans:
# Ben..Paris 9, Ben 7.5, Anna..Paris 7, Anna..Ben 5.5, Anna met 4 (the question's tokens are never a span).
STARTS, ENDS = logits(t1=9, t6=5, t4=3), logits(t2=9, t8=4, t6=2.5, t5=1)


@pytest.mark.parametrize(
    ("n_best_size", "max_answer_length", "expected"),
    [(20, 30, "Ben in Paris"), (2, 30, "Ben in Paris"), (1, 30, "empty"), (20, 2, "Ben"), (20, 1, "Ben")],
)
def test_the_best_span_of_context_tokens_within_n_best_and_max_length(tmp_path, n_best_size, max_answer_length,
                                                                      expected):  # fmt: skip
    """The best span scores start + end logit; the question's tokens (the best logits) are never in it; the
    `n_best_size` best starts and ends only (1: the question's tokens, no span: "empty"); spans of at most
    `max_answer_length` tokens (2 or 1: "Ben", a one-token answer, beats "Anna met")."""
    examples = datasets.Dataset.from_list([{"id": "q", "context": CONTEXT}])
    found, _ = answers([("q", OFFSETS, STARTS, ENDS)], examples, tmp_path, n_best_size=n_best_size,
                       max_answer_length=max_answer_length)  # fmt: skip
    assert found == {"q": expected}


def test_the_n_best_file_holds_the_best_spans_with_their_softmax(tmp_path):
    """With `n_best_size` = 3 (starts 1, 6, 4; ends 2, 8, 6): the spans scoring 9, 7.5 and 7, in order, with their
    logits and the softmax of their scores."""
    examples = datasets.Dataset.from_list([{"id": "q", "context": CONTEXT}])
    _, files = answers([("q", OFFSETS, STARTS, ENDS)], examples, tmp_path, n_best_size=3, prefix="eval")
    scores = np.array([9.0, 7.5, 7.0])
    probabilities = np.exp(scores) / np.exp(scores).sum()
    nbest = files["eval_nbest_predictions"]["q"]
    assert [(c["text"], c["start_logit"], c["end_logit"]) for c in nbest] == [
        ("Ben in Paris", 5.0, 4.0), ("Ben", 5.0, 2.5), ("Anna met Ben in Paris", 3.0, 4.0)]  # fmt: skip
    np.testing.assert_allclose([c["probability"] for c in nbest], probabilities, rtol=1e-12)
    assert files["eval_predictions"] == {"q": "Ben in Paris"} and "eval_null_odds" not in files


# Example "two" in two windows: Anna met Ben (null 7, best Ben 2 + 1) and Ben in Paris (null 4, best Paris 3 + 2);
# example "none" in one window: null 10, best Paris 3.
TWO = [("two", OFFSETS[:7] + [None] * 3, logits(t0=4, t6=2), logits(t0=3, t6=1)),
       ("two", OFFSETS[:4] + [[9, 12], [13, 15], [16, 21]] + [None] * 3, logits(t0=3, t6=3), logits(t0=1, t6=2)),
       ("none", OFFSETS, logits(t0=6, t8=2), logits(t0=4, t8=1))]  # fmt: skip


@pytest.mark.parametrize(
    ("version_2", "threshold", "expected"),
    [(False, 0.0, {"two": "Paris", "none": "Paris"}), (True, 0.0, {"two": "Paris", "none": ""}),
     (True, -2.0, {"two": "", "none": ""}), (True, 8.0, {"two": "Paris", "none": "Paris"})],
)  # fmt: skip
def test_windows_of_an_example_and_squad_v2s_null_answer(tmp_path, version_2, threshold, expected):
    """The best span over an example's windows; under SQuAD v2 the null score is the lowest window's (4, not the
    first window's 7), and the answer is "" where null minus the best span (4 - 5 = -1; 10 - 3 = 7) beats
    `null_score_diff_threshold`; `null_odds.json` holds those differences."""
    examples = datasets.Dataset.from_list([{"id": "two", "context": CONTEXT}, {"id": "none", "context": CONTEXT}])
    found, files = answers(TWO, examples, tmp_path, version_2_with_negative=version_2,
                           null_score_diff_threshold=threshold)  # fmt: skip
    assert found == expected
    assert files.get("null_odds") == ({"two": -1.0, "none": 7.0} if version_2 else None)


def reference_utils_qa():
    path = os.path.join(example_scripts(), "question-answering", "utils_qa.py")
    spec = importlib.util.spec_from_file_location("utils_qa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("version_2", "n_best_size", "max_answer_length", "threshold"),
    [(False, 20, 30, 0.0), (False, 3, 4, 0.0), (True, 20, 30, 0.0), (True, 5, 3, -1.0), (True, 20, 30, 1.5)],
)
def test_answers_and_files_are_those_of_transformers_utils_qa(tokenizer, tmp_path, version_2, n_best_size,
                                                              max_answer_length, threshold):  # fmt: skip
    """Random logits over real features (short and several-window contexts, under v2 unanswerable questions too,
    and null answers among the answers): the answers and the bytes of the predictions, n-best and null-odds files
    of transformers' example `utils_qa.py` (`TRANSFORMERS_EXAMPLES`)."""
    reference = reference_utils_qa()
    long = "Ben met Anna in Paris . " * 3 + "Jan Kowalski stayed in Amsterdam . " + "Anna went to Paris . " * 3
    rows = [*QA_ROWS, ("long", "Where did Jan go ?", long, "Amsterdam")]
    if version_2:
        rows += [("unanswered", "Who met Jan ?", "Anna met Ben in Paris .", None), ("far", "Who ?", long, None)]
    examples = qa_examples(rows)
    features = features_of(examples, tokenizer, qa_args(block_size=24, doc_stride=6, pad_to_max_length=True))
    assert len(features) > len(examples) + 3
    rng = np.random.default_rng(len(rows) + n_best_size)
    predictions = tuple(rng.normal(scale=3.0, size=(len(features), 24)).astype(np.float32) for _ in range(2))
    for boundary in predictions:
        boundary[:, 0] += 7  # a null score near the best spans' so that the threshold decides some answers
    options = {"version_2_with_negative": version_2, "n_best_size": n_best_size, "prefix": "eval",
               "max_answer_length": max_answer_length, "null_score_diff_threshold": threshold}  # fmt: skip
    (tmp_path / "ours").mkdir(), (tmp_path / "reference").mkdir()
    ours = postprocess_qa_predictions(examples, features, predictions, output_dir=str(tmp_path / "ours"), **options)
    theirs = reference.postprocess_qa_predictions(examples, features, predictions,
                                                  output_dir=str(tmp_path / "reference"), **options)  # fmt: skip
    assert ours == dict(theirs)
    assert not version_2 or "" in ours.values() and set(ours.values()) != {""}
    names = ["eval_predictions.json", "eval_nbest_predictions.json"] + (["eval_null_odds.json"] if version_2 else [])
    assert sorted(path.name for path in (tmp_path / "ours").iterdir()) == sorted(names)
    for name in names:
        assert (tmp_path / "ours" / name).read_text() == (tmp_path / "reference" / name).read_text(), name


def test_squad_scores_are_the_best_over_references_and_split_by_has_answer_under_v2():
    """Exact match and F1 after SQuAD's normalisation (case, punctuation, articles): "the Eiffel Tower" = "Eiffel
    Tower"; "Paris France" for "Paris" has F1 2/3; "Rome" matches the second reference "Rome!". Under v2 (SQuAD v2's
    names, as run_qa reports them) "" for no answer is right, "Paris" for none wrong: HasAns 2/3 and 8/9, NoAns 1/2,
    all 3/5 and 11/15; the best threshold answers the first three and abstains on the others (all abstaining scores
    2, answering a, b, c adds 1, 0 and 1 exact, 1, 2/3 and 1 F1): best exact 4/5, best F1 (2 + 8/3) / 5."""
    rows = [("a", "the Eiffel Tower", ["Eiffel Tower"]), ("b", "Paris France", ["Paris"]),
            ("c", "Rome", ["Paris", "Rome!"]), ("d", "", []), ("e", "Paris", [])]  # fmt: skip
    examples = datasets.Dataset.from_list([{"id": i, "answers": {"text": refs, "answer_start": [0] * len(refs)}}
                                           for i, _, refs in rows])  # fmt: skip
    found = {i: prediction for i, prediction, _ in rows}
    v1 = squad_scores(found, examples.select(range(3)), qa_args())
    assert v1 == pytest.approx({"exact_match": 200 / 3, "f1": 800 / 9}, abs=1e-9)
    v2 = squad_scores(found, examples, qa_args(version_2_with_negative=True))
    assert v2 == pytest.approx({"exact": 60.0, "f1": 1100 / 15, "total": 5, "HasAns_exact": 200 / 3,
                                "HasAns_f1": 800 / 9, "HasAns_total": 3, "NoAns_exact": 50.0, "NoAns_f1": 50.0,
                                "NoAns_total": 2, "best_exact": 80.0, "best_exact_thresh": 0.0,
                                "best_f1": 100 * (2 + 8 / 3) / 5, "best_f1_thresh": 0.0}, abs=1e-9)  # fmt: skip


def test_the_qa_baseline_answers_the_median_training_answers_words():
    """Training answers of 1, 2, 2 and 7 words: the median, 2 (not the longest, 7, nor the mean, 3), first words of
    each validation context: "Anna Smith" is right, "Rome is" shares no word with "capital of Italy"."""
    train = qa_examples([(f"t{i}", "?", context, answer) for i, (context, answer) in enumerate([
        ("Ben", "Ben"), ("Anna Smith sings", "Anna Smith"), ("in Paris", "in Paris"),
        ("a b c d e f g h", "a b c d e f g")
    ])])  # fmt: skip
    validation = qa_examples([("v0", "?", "Anna Smith went home early today with Ben", "Anna Smith"),
                              ("v1", "?", "Rome is the capital of Italy", "capital of Italy")])  # fmt: skip
    scores = question_answering_baseline(None, datasets.DatasetDict(train=train, validation=validation), qa_args())
    assert scores == pytest.approx({"eval_baseline_exact_match": 50.0, "eval_baseline_f1": 50.0}, abs=1e-9)


# Multiple choice.


def test_multiple_choice_accuracy_and_the_most_often_right_ending():
    """Accuracy of the logits' argmax per example (3 of 5); the baseline answers the training's most often right
    ending (2), right once in 5 validation examples (the validation's own, 1, would be right 3 times)."""
    logits = np.array([[0, 1, 5, 2], [4, 1, 0, 2], [0, 1, 2, 6], [1, 3, 0, 2], [0, 1, 9, 2]], dtype=float)
    compute = multiple_choice.TASK.metrics(None, None, None, None, None, None, "validation")["compute_metrics"]
    scores = compute(transformers.EvalPrediction(predictions=logits, label_ids=np.array([2, 0, 1, 1, 0])))
    assert scores == {"accuracy": 0.6}
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict({"label": [2, 2, 1, 0, 2]}),
                                  validation=datasets.Dataset.from_dict({"label": [1, 1, 2, 0, 1]}))  # fmt: skip
    baseline = multiple_choice.multiple_choice_baseline(None, corpus, DataArguments(label_column="label"))
    assert baseline == {"eval_baseline_accuracy": 0.2}


def swag_csv(path, endings: int, labels):
    columns = ["sent1", "sent2", *(f"ending{i}" for i in range(endings)), "label"]
    rows = [",".join(["A man", "He", *(f"e{i}" for i in range(endings)), str(label)]) for label in labels]
    path.write_text("\n".join([",".join(columns), *rows]) + "\n")
    return str(path)


def test_check_choices_names_a_missing_ending_and_a_label_out_of_range(tmp_path):
    """Validation without `ending3`, and labels 4 or -1 with 4 endings, are errors that say so."""
    data_args = DataArguments(label_column="label")
    train = swag_csv(tmp_path / "train.csv", 4, [0, 3])
    corpus = load_files(train, swag_csv(tmp_path / "three.csv", 3, [0, 2]))
    with pytest.raises(
        ValueError,
        match="ending3 in every split; the validation data's columns are "
        ".'sent1', 'sent2', 'ending0', 'ending1', 'ending2', 'label'.",
    ):
        multiple_choice.check_choices(corpus, data_args)
    for label, low, high in ((4, 0, 4), (-1, -1, 0)):
        corpus = load_files(train, swag_csv(tmp_path / f"{label}.csv", 4, [0, label]))
        with pytest.raises(ValueError, match=f"validation data's labels run from {low} to {high}; with 4 endings"):
            multiple_choice.check_choices(corpus, data_args)


# Summarization and generation.

SUMMARIES = [("the cat sat on the mat", "the cat lay on the mat"), ("a dog barked", "the dog barked loudly")]


@pytest.fixture(scope="module")
def seq2seq_tokenizer():
    return train_tokenizer("seq2seq", [" ".join(pair) for pair in SUMMARIES] * 10, 60, num_sentinels=2)


def generated(tokenizer, texts: list[str], start: bool) -> np.ndarray:
    """Token ids as the Seq2SeqTrainer gathers them: the decoder's start token (pad) first where `start`, the text
    and </s>, then -100."""
    rows = [([tokenizer.pad_token_id] if start else []) + tokenizer(text)["input_ids"] for text in texts]
    width = max(map(len, rows)) + 2
    return np.array([row + [-100] * (width - len(row)) for row in rows])


def test_summarization_decodes_around_minus_100_and_scores_rouge_by_hand(seq2seq_tokenizer, tmp_path):
    """-100 read as padding in predictions and labels; ROUGE-1 of "the cat sat on the mat" / "the cat lay on the
    mat" is 5/6, ROUGE-2 3/5, ROUGE-L 5/6; of "a dog barked" / "the dog barked loudly" (stemmed) 4/7, 2/5, 4/7;
    `gen_len` the mean count of generated tokens (with </s>, without the start token)."""
    predictions = generated(seq2seq_tokenizer, [p for p, _ in SUMMARIES], start=True)
    labels = generated(seq2seq_tokenizer, [r for _, r in SUMMARIES], start=False)
    assert decoded_texts(seq2seq_tokenizer, predictions) == [p for p, _ in SUMMARIES]
    evaluation = transformers.EvalPrediction(predictions=(predictions,), label_ids=labels)
    assert generated_and_references(seq2seq_tokenizer, evaluation) == ([p for p, _ in SUMMARIES],
                                                                       [r for _, r in SUMMARIES])  # fmt: skip
    args = transformers.Seq2SeqTrainingArguments(str(tmp_path), predict_with_generate=True, report_to="none")
    metrics = summarization.summarization_metrics(seq2seq_tokenizer, args, None, None, None, None, "validation")
    compute = metrics["compute_metrics"]
    scores = compute(transformers.EvalPrediction(predictions=predictions, label_ids=labels))
    rouge1 = 100 * (5 / 6 + 4 / 7) / 2
    lengths = [len(seq2seq_tokenizer(p)["input_ids"]) for p, _ in SUMMARIES]
    assert min(lengths) >= 4
    expected = {"rouge1": rouge1, "rouge2": 50.0, "rougeL": rouge1, "rougeLsum": rouge1, "gen_len": np.mean(lengths)}
    assert scores == pytest.approx(expected, abs=1e-9)


def test_rouge_lsum_reads_sentences_and_rouge_l_the_whole_text():
    """ "the cat sat. the dog ran." against "the dog ran. the cat sat.": as one sequence their longest common
    subsequence is 3 of 6 words (ROUGE-L 50); sentence by sentence each reference sentence is matched whole
    (ROUGE-Lsum 100); ROUGE-1 counts every word (100), ROUGE-2 the bigrams both hold, 4 of 5 (80)."""
    from aiayn.metrics import Rouge

    scores = Rouge().compute(predictions=["the cat sat. the dog ran."], references=["the dog ran.  the cat sat."])
    assert scores == pytest.approx({"rouge1": 100.0, "rouge2": 80.0, "rougeL": 50.0, "rougeLsum": 100.0})


# Baselines of the other tasks.


def trainer_of(model, train, evaluation, tmp_path, **options):
    args = transformers.TrainingArguments(str(tmp_path), report_to="none", use_cpu=True)
    return transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation, **options)


def test_the_class_baseline_is_the_training_majority_and_its_unigram_loss(tmp_path):
    """Training classes 0 0 0 1 2 2 (3 classes, add-one: 4/9, 2/9, 3/9); validation 1 1 2 0: the training's class 0
    is right once (the validation's own, 1, twice); the loss is the mean of log(9/2), log(9/2), log(3), log(9/4)."""
    model = transformers.AutoModelForSequenceClassification.from_config(tiny_config("encoder", num_labels=3))
    train = datasets.Dataset.from_dict({"labels": [0, 0, 0, 1, 2, 2]})
    trainer = trainer_of(model, train, datasets.Dataset.from_dict({"labels": [1, 1, 2, 0]}), tmp_path)
    loss = (2 * math.log(9 / 2) + math.log(3) + math.log(9 / 4)) / 4
    assert class_baseline(trainer, None, None) == pytest.approx(
        {"eval_baseline_loss": loss, "eval_baseline_accuracy": 0.25}, abs=1e-12
    )


def test_the_causal_lm_baseline_is_the_unigram_model_of_the_predicted_training_tokens(tmp_path):
    """Training blocks 5 6 6 7 and 5 6: the predicted tokens are 6 6 7 and 6 (not the first, 5), add-one over 97
    tokens; validation 9 6 7 predicts 6 and 7: loss (log(101/4) + log(101/2)) / 2."""
    train = datasets.Dataset.from_dict({"input_ids": [[5, 6, 6, 7], [5, 6]]})
    trainer = trainer_of(lm_model("decoder"), train, datasets.Dataset.from_dict({"input_ids": [[9, 6, 7]]}), tmp_path)
    loss = (math.log(101 / 4) + math.log(101 / 2)) / 2
    assert causal_lm.causal_lm_baseline(trainer, None, None) == pytest.approx(
        {"eval_baseline_loss": loss, "eval_baseline_perplexity": math.exp(loss)}, rel=1e-12
    )


def test_the_masked_lm_baseline_counts_the_tokens_but_the_special_ones(tokenizer, tmp_path):
    """The tokens of the blocks without [CLS] and [SEP] (here 4 tokens: never masked), under the collator's 80/10/10
    masking: `aiayn.baselines.masked_lm_baselines` of the texts' own tokens."""
    texts = {"train": ["Anna met Ben in Paris", "Ben met Ben"], "validation": ["Paris met Ben in Paris"]}
    blocks = {split: datasets.Dataset.from_dict({"input_ids": tokenizer(lines)["input_ids"]})
              for split, lines in texts.items()}  # fmt: skip
    plain = {split: [t for ids in tokenizer(lines, add_special_tokens=False)["input_ids"] for t in ids]
             for split, lines in texts.items()}  # fmt: skip
    assert [len(ids) for ids in blocks["train"]["input_ids"]] == [7, 5]
    model = lm_model("encoder", vocab_size=len(tokenizer))
    collator = masked_lm.masked_lm_collator(tokenizer, model, DataArguments(mlm_probability=0.15), seed=0)
    trainer = trainer_of(model, blocks["train"], blocks["validation"], tmp_path, data_collator=collator,
                         processing_class=tokenizer)  # fmt: skip
    expected = masked_lm_baselines(plain["train"], plain["validation"], len(tokenizer), 0.8, 0.1)
    assert masked_lm.masked_lm_baseline(trainer, None, None) == pytest.approx(
        {f"eval_baseline_{name[5:]}": value for name, value in expected.items()}, rel=1e-12
    )
    assert expected["eval_accuracy"] == pytest.approx(0.8 / 5 + 0.1)  # Ben, the training's most frequent


# Config fields that are probabilities.

# Every field validated by `dropout_probability` or `smoothing_factor` (field_validators_aiayn), in each family.
PROBABILITY_FIELDS = [(preset, name) for preset in ("tiny", "tiny-encoder", "tiny-decoder", "tiny-vision")
                      for name in ("dropout", "attention_dropout", "activation_dropout", "classifier_dropout")] + [
    (preset, "label_smoothing") for preset in ("tiny", "tiny-encoder", "tiny-decoder")]  # fmt: skip


@pytest.mark.parametrize(("preset", "name"), PROBABILITY_FIELDS)
def test_probability_fields_take_0_up_to_just_below_1(preset, name):
    """0 and the largest float below 1 are accepted, at construction and by assignment; 1.0, 1.5, -0.1 and the
    smallest negative float are a `ValueError` of the field's validator, named by the strict config."""
    below_one = math.nextafter(1.0, 0.0)
    for value in (0, 0.0, below_one):
        assert getattr(aiayn.preset_config(preset, **{name: value}), name) == value
    config = aiayn.preset_config(preset)
    setattr(config, name, below_one)
    assert getattr(config, name) == below_one
    for value in (1.0, 1, 1.5, -0.1, -5e-324):
        with pytest.raises(StrictDataclassError, match=f"'{name}'") as error:
            aiayn.preset_config(preset, **{name: value})
        assert isinstance(error.value.__cause__, ValueError), value
        with pytest.raises(StrictDataclassError, match=f"'{name}'"):
            setattr(config, name, value)


# The metrics' edge cases.


def test_accuracy_of_no_predictions_is_nan():
    """No predictions (a batch with no masked token) score nan, not a division by zero."""
    assert math.isnan(Accuracy().compute(predictions=[], references=[])["accuracy"])


@pytest.mark.filterwarnings("error::sklearn.exceptions.UndefinedMetricWarning")
def test_seqeval_scores_0_without_a_warning_where_a_score_is_undefined():
    """No entity predicted or in the references: precision, recall and F1 are 0 (not 1), all tags are right; an entity
    predicted where the references hold another (PER missed, LOC never in the references, so its recall and PER's
    precision are 0/0): every score 0, 1 of 3 tags right. seqeval warns of none of the 0/0."""
    scores = Seqeval().compute(predictions=[["O", "O"]], references=[["O", "O"]])
    assert scores == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 1.0}
    scores = Seqeval().compute(predictions=[["O", "B-LOC", "O"]], references=[["B-PER", "O", "O"]], entity_level=True)
    expected = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 1 / 3}
    for entity, number in (("PER", 1), ("LOC", 0)):
        expected.update({f"{entity}_precision": 0.0, f"{entity}_recall": 0.0, f"{entity}_f1": 0.0})
        expected[f"{entity}_number"] = number
    assert scores == pytest.approx(expected, abs=1e-12)


def test_a_metric_without_its_library_names_what_pip_installs_and_the_extra():
    """In a process where seqeval and rouge_score cannot be imported (as where the `train` extra is not installed),
    computing `Seqeval` or `Rouge` is a `MissingExtra` naming the package pip installs (rouge-score, not the module
    rouge_score) and the extra."""
    code = (
        'import sys\nsys.modules["seqeval"] = sys.modules["rouge_score"] = None\n'
        "from aiayn.metrics import Rouge, Seqeval\n"
        "for metric, texts in ((Seqeval(), [['O']]), (Rouge(), ['a'])):\n"
        "    try:\n"
        "        metric.compute(predictions=texts, references=texts)\n"
        "    except ImportError as error:\n"
        "        print(type(error).__name__, error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == [
        "MissingExtra This metric needs seqeval: pip install 'aiayn[train]'.",
        "MissingExtra This metric needs rouge-score: pip install 'aiayn[train]'.",
    ]


def test_squad_scores_a_question_without_references_against_the_empty_answer():
    """SQuAD v1.1's scores of one question (the whole score, in percent) without reference answers: the empty answer is
    right, any other wrong."""
    assert Squad().compute(predictions=[""], references=[[]]) == {"exact_match": 100.0, "f1": 100.0}
    assert Squad().compute(predictions=["Paris"], references=[[]]) == {"exact_match": 0.0, "f1": 0.0}
