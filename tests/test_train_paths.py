"""`aiayn train` as users of transformers' example scripts run it: verdicts decided on each task's headline metric,
baselines by value, bad data refused in every split before anything is written, the scripts' commands without
training data, and the scripts' files and metric names read back against what was scored."""

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import types

import datasets
import numpy as np
import pytest
import transformers
from task_files import write_classification_csv, write_entities, write_squad, write_summaries, write_swag

from aiayn import cli
from aiayn.hub import below_baseline, verdict_metric
from aiayn.tasks import TASKS
from aiayn.tasks.qa_postprocessing import postprocess_qa_predictions
from aiayn.tasks.question_answering import question_answering_baseline
from aiayn.tasks.token_classification import token_classification_baseline
from aiayn.train_arguments import DataArguments

QUICK = ["--report_to", "none", "--disable_tqdm", "true", "--vocab_size", "150", "--dataloader_pin_memory", "false",
         "--save_strategy", "no", "--max_steps", "2"]  # fmt: skip


# Verdicts.


def test_the_verdict_is_the_headline_metric_not_every_metric_nor_a_count():
    """NER: F1 and recall beat the tag baseline, precision does not: it beats it (all metrics would say no). SQuAD v2:
    `HasAns_total` is a count and never decides. Translation: BLEU decides where the evaluation generates, else the
    loss."""
    ner = {"eval_f1": 0.62, "eval_baseline_f1": 0.356, "eval_recall": 0.564, "eval_baseline_recall": 0.221,
           "eval_precision": 0.3, "eval_baseline_precision": 0.9}  # fmt: skip
    headline = TASKS["token-classification"].headline
    assert verdict_metric(ner, headline) == "eval_f1" and below_baseline(ner, headline) == []
    assert below_baseline(ner) == ["eval_precision"]
    squad = {"eval_f1": 40.0, "eval_baseline_f1": 36.65, "eval_HasAns_total": 3, "eval_baseline_HasAns_total": 3}
    assert below_baseline(squad, TASKS["question-answering"].headline) == []
    translation = TASKS["translation"].headline
    losses = {"eval_loss": 2.0, "eval_baseline_loss": 3.0}
    assert verdict_metric(losses, translation) == "eval_loss" and below_baseline(losses, translation) == []
    generated = {**losses, "eval_bleu": 1.0, "eval_baseline_bleu": 2.0}
    assert verdict_metric(generated, translation) == "eval_bleu"
    assert below_baseline(generated, translation) == ["eval_bleu"]
    assert below_baseline({"eval_perplexity": 5.0, "eval_baseline_perplexity": 5.0}) == ["eval_perplexity"]
    assert below_baseline({"eval_accuracy": 0.5, "eval_baseline_accuracy": 0.5}) == ["eval_accuracy"]  # a tie
    headlines = {name: task.headline[0] for name, task in TASKS.items()}
    assert headlines == {"causal-lm": "eval_loss", "masked-lm": "eval_loss", "translation": "eval_bleu",
                         "span-corruption": "eval_loss", "classification": "eval_accuracy",
                         "token-classification": "eval_f1", "question-answering": "eval_f1",
                         "multiple-choice": "eval_accuracy", "summarization": "eval_rougeLsum",
                         "image-classification": "eval_accuracy", "masked-image-modeling": "eval_loss"}  # fmt: skip


def squad_v2(rows):
    return datasets.Dataset.from_list([
        {"id": str(i), "question": "?", "context": context,
         "answers": {"text": [answer] if answer else [], "answer_start": [context.index(answer)] if answer else []}}
        for i, (context, answer) in enumerate(rows)
    ])  # fmt: skip


def qa_args(**fields):
    return DataArguments(question_column="question", context_column="context", answer_column="answers", **fields)


def test_the_squad_v2_baseline_abstains_where_that_scores_the_training_questions_better():
    """Training: 3 of 4 questions unanswerable, so abstaining (F1 75) beats the first word (25): the baseline
    abstains on the validation questions (2 of 3 unanswerable: exact and F1 200/3); with mostly answerable training
    questions it answers the first word (right on the one answerable question: 100/3). SQuAD v1 never abstains."""
    mostly_empty = squad_v2([("Paris is big", "Paris"), ("Rome is old", None), ("Oslo is cold", None),
                             ("Lima is far", None)])  # fmt: skip
    mostly_answered = squad_v2([("Paris is big", "Paris"), ("Rome is old", "Rome"), ("Oslo is cold", "Oslo"),
                                ("Lima is far", None)])  # fmt: skip
    validation = squad_v2([("Cairo is hot", "Cairo"), ("Bonn is small", None), ("Nice is nice", None)])
    v2 = qa_args(version_2_with_negative=True)
    abstaining = question_answering_baseline(None, datasets.DatasetDict(train=mostly_empty, validation=validation), v2)
    assert abstaining == pytest.approx({"eval_baseline_exact": 200 / 3, "eval_baseline_f1": 200 / 3})
    answering = question_answering_baseline(None, datasets.DatasetDict(train=mostly_answered, validation=validation),
                                            v2)  # fmt: skip
    assert answering == pytest.approx({"eval_baseline_exact": 100 / 3, "eval_baseline_f1": 100 / 3})
    answerable = squad_v2([("Paris is big", "Paris"), ("Rome is old", "Rome")])
    v1 = question_answering_baseline(None, datasets.DatasetDict(train=answerable, validation=answerable), qa_args())
    assert v1 == {"eval_baseline_exact_match": 100.0, "eval_baseline_f1": 100.0}


def test_the_tag_baseline_falls_back_on_the_most_frequent_tag_which_need_not_be_o():
    """Training tags mostly B-LOC (cities listed): an unseen word is tagged B-LOC, not O; validation "Oslo Rome"
    (unseen, both B-LOC) is then all right, and "and" (seen as O) right too."""
    train = datasets.Dataset.from_list([{"tokens": ["Paris", "Rome", "Lima", "and"],
                                         "ner_tags": ["B-LOC", "B-LOC", "B-LOC", "O"]}] * 2)  # fmt: skip
    validation = datasets.Dataset.from_list([{"tokens": ["Oslo", "and", "Bonn"], "ner_tags": ["B-LOC", "O", "B-LOC"]}])
    scores = token_classification_baseline(None, datasets.DatasetDict(train=train, validation=validation),
                                           DataArguments(text_column="tokens", label_column="ner_tags"))  # fmt: skip
    assert scores == {"eval_baseline_precision": 1.0, "eval_baseline_recall": 1.0, "eval_baseline_f1": 1.0,
                      "eval_baseline_accuracy": 1.0}  # fmt: skip


def test_squad_v2s_null_score_is_the_lowest_windows_wherever_it_is(tmp_path):
    """Three windows of one example with null scores 3, 9 and 6 (the lowest first, not last): the null score is 3;
    the best span (4 + 4 = 8, in the second window) beats it by 5, so null_odds is 3 - 8 = -5."""
    import numpy as np

    offsets = [None, [0, 4], [5, 8], None]
    starts = np.array([[1.0, 2.0, 0.0, -9.0], [5.0, 4.0, 0.0, -9.0], [3.0, 1.0, 0.0, -9.0]])
    ends = np.array([[2.0, 0.0, 1.0, -9.0], [4.0, 4.0, 0.0, -9.0], [3.0, 0.0, 1.0, -9.0]])
    features = datasets.Dataset.from_dict({"example_id": ["q"] * 3, "offset_mapping": [offsets] * 3})
    examples = datasets.Dataset.from_list([{"id": "q", "context": "Anna met"}])
    answers = postprocess_qa_predictions(examples, features, (starts, ends), version_2_with_negative=True,
                                         output_dir=str(tmp_path))  # fmt: skip
    assert answers == {"q": "Anna"}
    assert json.loads((tmp_path / "null_odds.json").read_text()) == {"q": -5.0}
    at_threshold = postprocess_qa_predictions(examples, features, (starts, ends), version_2_with_negative=True,
                                              null_score_diff_threshold=-5.0)  # fmt: skip
    assert at_threshold == {"q": "Anna"}  # no answer only where the difference is above the threshold


def test_the_null_answer_of_tied_windows_is_the_first_and_an_end_before_its_start_is_skipped(tmp_path):
    """Two windows whose null scores tie (1 + 2 and 2 + 1): the first window's logits are the null answer's. In a
    window whose best end (token 1) comes before its best start (token 2), the next end (token 3) still makes the
    span "met Ben"."""
    import numpy as np

    offsets = [None, [0, 4], [5, 8], [9, 12], None]
    starts = np.array([[1.0, -9.0, 6.0, 0.0, -9.0], [2.0, -9.0, -9.0, -9.0, -9.0]])
    ends = np.array([[2.0, 8.0, -9.0, 5.0, -9.0], [1.0, -9.0, -9.0, -9.0, -9.0]])
    features = datasets.Dataset.from_dict({"example_id": ["q"] * 2, "offset_mapping": [offsets] * 2})
    examples = datasets.Dataset.from_list([{"id": "q", "context": "Anna met Ben"}])
    answers = postprocess_qa_predictions(examples, features, (starts, ends), version_2_with_negative=True,
                                         n_best_size=2, output_dir=str(tmp_path))  # fmt: skip
    assert answers == {"q": "met Ben"}
    nbest = json.loads((tmp_path / "nbest_predictions.json").read_text())["q"]
    assert [(c["text"], c["start_logit"], c["end_logit"]) for c in nbest] == [("met Ben", 6.0, 5.0), ("", 1.0, 2.0)]


# Bad data: refused with an error that names it, in every split, before anything is written.


def csv(path, header: str, rows: list[str]) -> str:
    path.write_text("\n".join([header, *rows]) + "\n")
    return str(path)


def expect_refusal(capsys, tmp_path, task: str, flags: list[str], *phrases: str):
    output = tmp_path / "never"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", task, "--output_dir", str(output), "--do_train", "--do_eval", *QUICK, *flags])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error, error
    line = error.strip().splitlines()[-1]  # one line, after datasets' progress bars
    assert line.startswith("aiayn train: error: "), error
    for phrase in phrases:
        assert phrase in line, error
    assert not output.exists()


SPLIT_FLAGS = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_a_text_column_missing_or_empty_in_any_split_is_named(split, tmp_path, capsys):
    good = [f"t {i} ball,sports" if i % 2 else f"t {i} song,music" for i in range(20)]
    files = {name: csv(tmp_path / f"{name}.csv", "text,label", good) for name in SPLIT_FLAGS}
    files[split] = csv(tmp_path / "empty-cell.csv", "text,label", [*good[:5], ",music", *good[5:]])
    flags = [flag for name, flag in SPLIT_FLAGS.items() for flag in (flag, files[name])] + ["--do_predict"]
    expect_refusal(capsys, tmp_path, "classification", flags,
                   f"The {split} data's column 'text' (--text_column) is empty in 1 row(s) (rows [5]")  # fmt: skip
    files[split] = csv(tmp_path / "no-text.csv", "body,label", good)
    flags = [flag for name, flag in SPLIT_FLAGS.items() for flag in (flag, files[name])] + ["--do_predict"]
    expect_refusal(capsys, tmp_path, "classification", flags, "(--text_column)",
                   f"the {split} data's columns are ['body', 'label']")  # fmt: skip


@pytest.mark.parametrize("split", ["validation", "test"])
def test_classes_and_tags_the_training_data_lacks_are_named_in_validation_and_test(split, tmp_path, capsys):
    good = [f"t {i} ball,sports" if i % 2 else f"t {i} song,music" for i in range(20)]
    files = {name: csv(tmp_path / f"{name}.csv", "text,label", good) for name in SPLIT_FLAGS}
    files[split] = csv(tmp_path / "unseen.csv", "text,label", [*good, "rain,weather"])
    flags = [flag for name, flag in SPLIT_FLAGS.items() for flag in (flag, files[name])] + ["--do_predict"]
    expect_refusal(capsys, tmp_path, "classification", flags, f"The {split} data's 'label' holds 1 class(s)",
                   "['weather']")  # fmt: skip
    write_entities(tmp_path / "tags.jsonl", 20)
    (tmp_path / "new-tag.jsonl").write_text(json.dumps({"tokens": ["Anna", "sang"], "ner_tags": ["B-PER", "B-SONG"]})
                                            + "\n")  # fmt: skip
    files = {name: str(tmp_path / "tags.jsonl") for name in SPLIT_FLAGS}
    files[split] = str(tmp_path / "new-tag.jsonl")
    flags = [flag for name, flag in SPLIT_FLAGS.items() for flag in (flag, files[name])] + ["--do_predict"]
    expect_refusal(capsys, tmp_path, "token-classification", flags, f"The {split} data's 'ner_tags' holds 1 tag(s)",
                   "['B-SONG']")  # fmt: skip


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_squad_answers_that_do_not_match_their_starts_or_context_are_named_in_each_split(split, tmp_path, capsys):
    write_squad(tmp_path / "squad.json", 12)
    document = json.loads((tmp_path / "squad.json").read_text())
    files = {name: str(tmp_path / "squad.json") for name in SPLIT_FLAGS}
    flags = ["--max_seq_length", "48", "--doc_stride", "8", "--do_predict"]
    unequal = json.loads(json.dumps(document))
    unequal["data"][4]["answers"]["answer_start"] = []
    (tmp_path / "unequal.json").write_text(json.dumps(unequal))
    moved = json.loads(json.dumps(document))
    moved["data"][7]["answers"]["answer_start"] = [0]
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    for name, phrases in (
        ("unequal", (f"1 question(s) of the {split} data do not have as many answer texts as answer starts", "['4']")),
        ("moved", (f"1 answer(s) of the {split} data are not in their context", "['7']")),
    ):
        chosen = {**files, split: str(tmp_path / f"{name}.json")}
        expect_refusal(
            capsys,
            tmp_path,
            "question-answering",
            [flag for key, flag in SPLIT_FLAGS.items() for flag in (flag, chosen[key])] + flags,
            *phrases,
        )


def test_header_only_files_a_summarization_file_without_targets_and_push_to_hub_offline(tmp_path, capsys,
                                                                                         monkeypatch):  # fmt: skip
    header = csv(tmp_path / "header.csv", "text,label", [])
    expect_refusal(capsys, tmp_path, "classification", ["--train_file", header], f"{header} holds no examples.")
    write_summaries(tmp_path / "summaries.csv", 20)
    sources = csv(tmp_path / "sources.csv", "document", [f"doc {i}" for i in range(5)])
    expect_refusal(
        capsys,
        tmp_path,
        "summarization",
        ["--train_file", str(tmp_path / "summaries.csv"), "--validation_file", sources],
        "reads a column 'summary' (--summary_column); the validation data's columns are ['document']",
    )
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    expect_refusal(capsys, tmp_path, "summarization", ["--train_file", str(tmp_path / "summaries.csv"),
                                                       "--push_to_hub"], "--push_to_hub needs the hub")  # fmt: skip
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    expect_refusal(capsys, tmp_path, "summarization", ["--train_file", str(tmp_path / "summaries.csv"),
                                                       "--push_to_hub", "--hub_token", "hf_not_a_token"],
                   "--push_to_hub cannot reach the hub")  # fmt: skip


def test_official_nested_squad_files_are_read_as_the_flat_rows(tmp_path):
    """SQuAD's official layout (articles of paragraphs of questions, v2's unanswerable ones with empty answers and
    plausible answers that are not answers), beside a flat file: the same rows."""
    from aiayn.data import load_files

    write_squad(tmp_path / "flat.json", 6)
    flat = json.loads((tmp_path / "flat.json").read_text())["data"]
    flat[5]["answers"] = {"text": [], "answer_start": []}
    (tmp_path / "flat.json").write_text(json.dumps({"data": flat}))
    articles = [{"title": row["title"], "paragraphs": [{"context": row["context"], "qas": [
        {"id": row["id"], "question": row["question"], "is_impossible": not row["answers"]["text"],
         "answers": [{"text": t, "answer_start": s} for t, s in zip(*row["answers"].values(), strict=True)],
         **({"plausible_answers": [{"text": "x", "answer_start": 0}]} if not row["answers"]["text"] else {})}]}]}
        for row in flat]  # fmt: skip
    (tmp_path / "nested.json").write_text(json.dumps({"version": "v2.0", "data": articles}))
    corpus = load_files(str(tmp_path / "flat.json"), str(tmp_path / "nested.json"))
    assert corpus["validation"].to_list() == flat
    assert corpus["train"].to_list() == flat


# The scripts' commands and files.


@pytest.fixture(scope="module")
def trained_qa(tmp_path_factory):
    """A question-answering model trained on 40 questions (a third unanswerable, SQuAD v2) with a test file."""
    folder = tmp_path_factory.mktemp("qa")
    write_squad(folder / "squad.json", 40)
    rows = json.loads((folder / "squad.json").read_text())["data"]
    for row in rows[::3]:
        row["answers"] = {"text": [], "answer_start": []}
    (folder / "v2.json").write_text(json.dumps({"data": rows}))
    output = folder / "model"
    cli.main(["train", "question-answering", "--train_file", str(folder / "v2.json"), "--validation_file",
              str(folder / "v2.json"), "--test_file", str(folder / "v2.json"), "--version_2_with_negative",
              "--max_seq_length", "32", "--doc_stride", "8", "--output_dir", str(output), "--do_train", "--do_eval",
              "--do_predict", "--max_eval_samples", "12", *QUICK])  # fmt: skip
    return folder, output, rows


def test_question_answering_writes_run_qas_files_and_names(trained_qa):
    """run_qa's files: `eval_predictions.json`, `eval_nbest_predictions.json`, `eval_null_odds.json` of the 12
    evaluated questions; SQuAD v2's metric names; `eval_samples` the windows evaluated; the test metrics as `test_*`
    in `predict_results.json` and in `all_results.json`, recomputed from `predict_predictions.json`."""
    from aiayn.metrics import SquadV2

    folder, output, rows = trained_qa
    results = json.loads((output / "all_results.json").read_text())
    evaluated = json.loads((output / "eval_predictions.json").read_text())
    assert len(evaluated) == 12 and set(evaluated) == set(json.loads((output / "eval_null_odds.json").read_text()))
    assert set(json.loads((output / "eval_nbest_predictions.json").read_text())) == set(evaluated)
    for name in ("exact", "f1", "total", "HasAns_exact", "NoAns_f1", "best_exact", "best_f1_thresh"):
        assert f"eval_{name}" in results and f"test_{name}" in results, name
    assert "eval_exact_match" not in results and results["eval_total"] == 12
    assert results["eval_samples"] >= 12 and results["predict_samples"] >= 40
    assert results["eval_baseline_f1"] >= 100 * results["eval_NoAns_total"] / 12 - 1e-9  # at least abstaining's
    predicted = json.loads((output / "predict_results.json").read_text())
    assert {key: results[key] for key in predicted} == predicted
    answers = json.loads((output / "predict_predictions.json").read_text())
    expected = SquadV2().compute(predictions=[answers[row["id"]] for row in rows],
                                 references=[row["answers"]["text"] for row in rows])  # fmt: skip
    assert predicted["test_f1"] == pytest.approx(expected["f1"]) and predicted["test_total"] == 40
    tokenizer = transformers.AutoTokenizer.from_pretrained(output)
    assert tokenizer.model_max_length == transformers.AutoConfig.from_pretrained(output).max_position_embeddings


def test_a_trained_folder_is_evaluated_and_predicts_without_training_data(trained_qa, tmp_path):
    """The scripts' `--do_eval` / `--do_predict` on a trained folder with no `--train_file`: the same answers as the
    run that trained it, no baseline (there is no training data to learn one from), and no model written."""
    folder, output, rows = trained_qa
    again = tmp_path / "again"
    cli.main(["train", "question-answering", "--model_name_or_path", str(output), "--validation_file",
              str(folder / "v2.json"), "--test_file", str(folder / "v2.json"), "--version_2_with_negative",
              "--max_seq_length", "32", "--doc_stride", "8", "--output_dir", str(again), "--do_eval", "--do_predict",
              "--max_eval_samples", "12", *QUICK])  # fmt: skip
    for name in ("predict_predictions.json", "eval_predictions.json"):
        assert json.loads((again / name).read_text()) == json.loads((output / name).read_text()), name
    results = json.loads((again / "all_results.json").read_text())
    assert not [key for key in results if "baseline" in key] and not (again / "model.safetensors").exists()


def test_classification_results_files_and_the_folders_pipeline_on_a_long_text(tmp_path):
    """`predict_results.txt` holds every test row's index and class; `all_results.json` the predict metrics; the
    saved tokenizer reads at most the model's positions, so the folder's pipeline cuts a text longer than them."""
    write_classification_csv(tmp_path / "topics.csv")
    output = tmp_path / "model"
    cli.main(["train", "classification", "--train_file", str(tmp_path / "topics.csv"), "--test_file",
              str(tmp_path / "topics.csv"), "--max_predict_samples", "7", "--output_dir", str(output), "--do_train",
              "--do_eval", "--do_predict", "--max_seq_length", "16", "--config_overrides",
              "max_position_embeddings=32", *QUICK])  # fmt: skip
    lines = (output / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(7)]
    assert {line.split("\t")[1] for line in lines[1:]} <= {"sports", "food", "music"}
    results = json.loads((output / "all_results.json").read_text())
    assert results["predict_samples"] == 7 and "predict_accuracy" in results and "eval_beats_baseline" in results
    tokenizer = transformers.AutoTokenizer.from_pretrained(output)
    assert tokenizer.model_max_length == 32
    classify = transformers.pipeline("text-classification", model=str(output))
    assert classify("ball " * 200, truncation=True)[0]["label"] in {"sports", "food", "music"}


def test_summarizations_prefix_goes_with_the_folder_to_its_pipeline(tmp_path):
    write_summaries(tmp_path / "summaries.csv", 20)
    output = tmp_path / "model"
    cli.main(["train", "summarization", "--train_file", str(tmp_path / "summaries.csv"), "--source_prefix",
              "sum up ", "--output_dir", str(output), "--do_train", "--max_source_length", "16",
              "--max_target_length", "6", *QUICK])  # fmt: skip
    assert json.loads((output / "config.json").read_text())["prefix"] == "sum up "
    run = transformers.pipeline("summarization", model=str(output))
    assert run.preprocess("ball team")["input_ids"].tolist() == [run.tokenizer("sum up ball team")["input_ids"]]
    long = run.preprocess("ball " * 500)["input_ids"]
    assert long.shape[1] == run.tokenizer.model_max_length == 256


def test_torchrun_without_use_cpu_is_refused_before_anything_is_written(tmp_path):
    """Two processes launched on CPUs without `--use_cpu` would train two models into one folder: refused, naming the
    flag that fixes it, in every process."""
    write_swag(tmp_path / "swag.jsonl", 10)
    output = tmp_path / "never"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
               "-m", "aiayn", "train", "multiple-choice", "--train_file", str(tmp_path / "swag.jsonl"),
               "--output_dir", str(output), "--do_train", *QUICK]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode != 0
    assert result.stderr.count("on CPUs they join in one job only with --use_cpu") == 2, result.stderr[-3000:]
    assert not output.exists()


def test_the_masked_image_baseline_is_each_pixels_training_median():
    """Training pixels (0, 10), (1, 11), (2, 12): the medians are 1 and 11 (the median of all six values, 6, would
    miss both); validation (1, 11) and (3, 8) are off by 0, 0, 2 and 3: a mean absolute error of 5 / 4."""
    import types

    from aiayn.tasks.masked_image_modeling import masked_image_baseline

    def images(rows):
        return datasets.Dataset.from_dict({"pixel_values": [[[[value]] for value in row] for row in rows]})

    trainer = types.SimpleNamespace(train_dataset=images([(0, 10), (1, 11), (2, 12)]),
                                    eval_dataset=images([(1, 11), (3, 8)]))  # fmt: skip
    assert masked_image_baseline(trainer, None, None) == {"eval_baseline_loss": 5 / 4}


def test_an_image_classifier_is_configured_with_the_label_columns_class_names(tmp_path):
    """The digits' `ClassLabel` names, in its order, both ways in the config (`id2label` and `label2id`)."""
    from aiayn.training import parse, prepare

    arguments = parse("image-classification", ["--output_dir", str(tmp_path), "--max_train_samples", "20",
                                               "--max_eval_samples", "10", "--report_to", "none"])  # fmt: skip
    config = prepare("image-classification", *arguments)[0].model.config
    names = [str(digit) for digit in range(10)]
    assert config.id2label == dict(enumerate(names)) and config.label2id == {name: i for i, name in enumerate(names)}


def test_the_translation_baseline_is_the_unigram_loss_of_the_targets_and_the_copied_sources_bleu():
    """Training targets 5 6 6 and 7 (padding -100 left out) over a vocabulary of 10, add-one: validation targets 6
    and 9 cost log(14/3) and log(14/1). Copying the validation sources scores sacreBLEU's and chrF's own numbers for
    those sources against the validation targets (not the training ones)."""
    import math
    import types

    import sacrebleu
    from helpers import word_tokenizer

    from aiayn.tasks.translation import translation_baseline

    tokenizer = word_tokenizer()
    texts = ("w3 w4 w5 w6", "w7 w8 w9 w10 w11", "w3 w4 w5 w9", "w7 w8 w12 w10 w11")
    ids = {text: [*tokenizer(text)["input_ids"], tokenizer.eos_token_id] for text in texts}  # ended by </s>
    train = datasets.Dataset.from_dict({"input_ids": [[1], [1]], "labels": [[5, 6, 6, -100], [7]]})
    validation = datasets.Dataset.from_dict({"input_ids": [ids["w3 w4 w5 w6"], ids["w7 w8 w9 w10 w11"]],
                                             "labels": [[6, -100], [9]]})  # fmt: skip
    args = types.SimpleNamespace(predict_with_generate=False)
    trainer = types.SimpleNamespace(
        train_dataset=train,
        eval_dataset=validation,
        args=args,
        processing_class=tokenizer,
        model=types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=10)),
    )
    loss = (math.log(14 / 3) + math.log(14 / 1)) / 2
    assert translation_baseline(trainer, None, None) == pytest.approx({"eval_baseline_loss": loss})
    trainer.args.predict_with_generate = True
    trainer.eval_dataset = validation.map(lambda e, i: {"labels": list(ids.values())[2 + i]}, with_indices=True)
    sources, references = ["w3 w4 w5 w6", "w7 w8 w9 w10 w11"], ["w3 w4 w5 w9", "w7 w8 w12 w10 w11"]
    scores = translation_baseline(trainer, None, None)
    assert scores["eval_baseline_bleu"] == pytest.approx(sacrebleu.corpus_bleu(sources, [references]).score)
    assert scores["eval_baseline_chrf"] == pytest.approx(sacrebleu.corpus_chrf(sources, [references]).score)
    assert 0 < scores["eval_baseline_bleu"] < 100


def test_the_summarization_baseline_scores_the_validation_sources_as_their_own_summaries():
    """ "the cat sat on the mat" against "the cat lay on the mat": ROUGE-1 and -L 5/6, ROUGE-2 3/5 (the training
    pair, a perfect copy, would score 100); none without generation."""
    import types

    from aiayn.tasks.summarization import summarization_baseline

    corpus = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"document": ["a dog"], "summary": ["a dog"]}),
        validation=datasets.Dataset.from_dict({"document": ["the cat sat on the mat"],
                                               "summary": ["the cat lay on the mat"]}),
    )  # fmt: skip
    data_args = DataArguments(text_column="document", summary_column="summary")
    trainer = types.SimpleNamespace(args=types.SimpleNamespace(predict_with_generate=True))
    scores = summarization_baseline(trainer, corpus, data_args)
    assert scores == pytest.approx({"eval_baseline_rouge1": 500 / 6, "eval_baseline_rouge2": 60.0,
                                    "eval_baseline_rougeL": 500 / 6, "eval_baseline_rougeLsum": 500 / 6})  # fmt: skip
    trainer.args.predict_with_generate = False
    assert summarization_baseline(trainer, corpus, data_args) == {}


def test_a_left_padding_tokenizer_puts_the_context_first_and_labels_the_same_answer():
    """With `padding_side="left"` the pair is (context, question), truncated on the context: the answer's tokens are
    found in the first sequence and their offsets still cut the answer out of the context."""
    from aiayn.tasks.question_answering import question_answering_features
    from aiayn.tokenization import train_tokenizer

    context = "Anna met Ben in Paris . Ben stayed in Rome ."
    tokenizer = train_tokenizer("encoder", [context, "Where did Ben stay ?"] * 20, 60)
    examples = {"id": ["q"], "question": ["Where did Ben stay ?"], "context": [context],
                "answers": [{"text": ["Rome"], "answer_start": [context.index("Rome")]}]}  # fmt: skip
    found = {}
    for side in ("right", "left"):
        tokenizer.padding_side = side
        features = question_answering_features(examples, tokenizer, qa_args(block_size=64, doc_stride=8))
        offsets, start, end = (features[key][0] for key in ("offset_mapping", "start_positions", "end_positions"))
        found[side] = (context[offsets[start][0] : offsets[end][1]], features.sequence_ids(0)[start])
    assert found == {"right": ("Rome", 1), "left": ("Rome", 0)}


def splits_with(split: str, good: list[dict], bad: list[dict]) -> datasets.DatasetDict:
    """Train, validation and test splits of `good` rows, `split` of `bad` ones."""
    return datasets.DatasetDict({name: datasets.Dataset.from_list(bad if name == split else good)
                                 for name in ("train", "validation", "test")})  # fmt: skip


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_each_tasks_own_checks_name_the_split(split):
    """The refusals the tasks' checks promise, each in the split that holds the fault: a tag list of another length
    than its words, an ending missing or empty, a right ending out of range, a question without an id, a question
    without an answer outside SQuAD v2."""
    from aiayn.tasks.multiple_choice import check_choices
    from aiayn.tasks.question_answering import check_answers
    from aiayn.tasks.token_classification import check_tags

    tagged = [{"tokens": ["Anna", "sang"], "ner_tags": ["B-PER", "O"]}] * 3
    short = [*tagged[:2], {"tokens": ["Anna", "sang", "well"], "ner_tags": ["B-PER", "O"]}]
    ner = DataArguments(text_column="tokens", label_column="ner_tags")
    with pytest.raises(ValueError, match=f"Example 2 of the {split} data has 3 words and 2 tags"):
        check_tags(splits_with(split, tagged, short), ner)

    swag = [{"sent1": "a", "sent2": "b", "ending0": "c", "ending1": "d", "ending2": "e", "label": 1}] * 3
    swag_args = DataArguments(context_column="sent1", question_column="sent2", label_column="label")
    needs = "Multiple choice needs the columns ending0, ending1, ending2 in every split; "
    for bad, message in (
        (
            [*swag[:2], {**swag[0], "label": 3}],
            f"The {split} data's labels run from 1 to 3; with 3 endings they are 0 ... 2.",
        ),
        ([*swag[:2], {**swag[0], "label": -1}], f"The {split} data's labels run from -1 to 1; with 3 endings"),
        (
            [*swag[:2], {**swag[0], "ending1": None}],
            f"{needs}the {split} data has no ending1 (or an empty one) in some rows.",
        ),
        ([{k: v for k, v in row.items() if k != "ending1"} for row in swag], f"the {split} data's columns are"),
        (
            [{**row, "label": "first"} for row in swag],
            "Multiple choice needs the index of the right ending (an "
            "integer) in the label column 'label'; it holds Value('string'",
        ),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            check_choices(splits_with(split, swag, bad), swag_args)

    squad = [{"id": str(i), "question": "?", "context": "Ben met Anna", "answers": {"text": ["Anna"],
              "answer_start": [8]}} for i in range(3)]  # fmt: skip
    unanswered = [*squad[:2], {**squad[2], "answers": {"text": [], "answer_start": []}}]
    with pytest.raises(ValueError, match=re.escape(f"1 question(s) of the {split} data have no answer (ids ['2'])")):
        check_answers(splits_with(split, squad, unanswered), qa_args())
    check_answers(splits_with(split, squad, unanswered), qa_args(version_2_with_negative=True))
    without_ids = [{k: v for k, v in row.items() if k != "id"} for row in squad]
    with pytest.raises(ValueError, match=f"Question answering needs an 'id' column; the {split} data's columns"):
        check_answers(splits_with(split, squad, without_ids), qa_args())


@pytest.mark.parametrize(("f1", "beats"), [(0.62, True), (0.30, False)])
def test_a_runs_verdict_log_and_card_follow_the_headline_metric(tmp_path, monkeypatch, caplog, f1, beats):
    """A tagger whose precision is below the baseline's: its F1 alone decides `eval_beats_baseline`, the warning
    and the card's sentence (evaluation and baseline replaced by these numbers, the run itself real)."""
    import dataclasses

    from aiayn import training

    scores = {"eval_loss": 1.0, "eval_f1": f1, "eval_precision": 0.3, "eval_recall": 0.564}
    baseline = {"eval_baseline_f1": 0.356, "eval_baseline_precision": 0.9, "eval_baseline_recall": 0.221}
    monkeypatch.setattr(training, "evaluate", lambda trainer: dict(scores))
    task = dataclasses.replace(TASKS["token-classification"], baseline=lambda trainer, corpus, data_args: baseline)
    monkeypatch.setitem(TASKS, "token-classification", task)
    write_entities(tmp_path / "tags.jsonl", 20)
    output = tmp_path / "tagger"
    cli.main(["train", "token-classification", "--train_file", str(tmp_path / "tags.jsonl"), "--output_dir",
              str(output), "--do_train", "--do_eval", *QUICK])  # fmt: skip
    results = json.loads((output / "all_results.json").read_text())
    card = (output / "README.md").read_text()
    assert results["eval_beats_baseline"] is beats
    assert ("does not beat the baseline" in caplog.text) is not beats
    assert ("**This model does not beat the baseline that learns nothing** on F1 0.3 (baseline 0.356)" in card) is (
        not beats
    )
    assert "Entity precision 0.3" not in card.split("## Evaluation")[1].split("|---|")[-1]
    cli.main(["hub-folder", str(output), str(tmp_path / "hub")])  # the card again, from the results file
    assert ("does not beat" in (tmp_path / "hub" / "README.md").read_text()) is not beats


@pytest.mark.parametrize(
    ("masked", "random_share", "loss_of", "accuracy"),
    [(0.8, 0.1, lambda h: 0.9 * h + 0.2 * math.log(2), 0.8 / 2 + 0.1), (0.8, 0.0, lambda h: 0.8 * h, 0.8 / 2 + 0.2),
     (1.0, 0.0, lambda h: h, 1.0 / 2), (0.5, 0.5, lambda h: h, 0.5 / 2),
     (0.5, 0.25, lambda h: 0.75 * h + 0.5 * math.log(2), 0.5 / 2 + 0.25)],
)  # fmt: skip
def test_the_masked_lm_baseline_by_hand(masked, random_share, loss_of, accuracy):
    """Training tokens 5 5 6 over a vocabulary of 4 (add-one: 3/7, 2/7), validation 5 6: at [MASK] the unigram
    cross-entropy H = (log(7/3) + log(7/2)) / 2 and the most frequent token, 5, right once in two. BERT's 80/10/10
    puts 1/2 on the visible token (kept 0.1 against random 0.1): 0.9 H + 0.1 log 2 + 0.1 log 2; without random tokens
    the visible token is certain (0.8 H); with nothing kept or nothing random, H alone."""
    from aiayn.baselines import masked_lm_baselines

    entropy = (math.log(7 / 3) + math.log(7 / 2)) / 2
    scores = masked_lm_baselines([5, 5, 6], [5, 6], 4, masked, random_share)
    loss = loss_of(entropy)
    expected = {"eval_loss": loss, "eval_perplexity": math.exp(loss), "eval_accuracy": accuracy}
    assert scores == pytest.approx(expected, rel=1e-12)
    if (masked, random_share) == (0.8, 0.1):  # BERT's masking is the default
        assert masked_lm_baselines([5, 5, 6], [5, 6], 4) == scores


# The metrics' own settings.


def test_metric_settings_stemming_zero_division_references_and_word_order():
    """ROUGE stems ("dogs barked" is "dog barks"); seqeval scores 0, not 1, where nothing was predicted or nothing is
    there to find, overall and per type; sacreBLEU reads several references per prediction as streams and refuses
    uneven ones, and its signature names 13a; chrF++ is `word_order=2`; unequal prediction and reference lists and a
    missing library are errors that say so; a perplexity past a float's range is infinite."""
    import sacrebleu

    from aiayn.metrics import ChrF, Rouge, SacreBleu, Seqeval, _library, perplexity

    assert Rouge().compute(predictions=["the dogs barked"], references=["the dog barks"])["rouge1"] == 100.0
    with pytest.raises(ValueError):
        Rouge().compute(predictions=["a", "b"], references=["a"])
    nothing = Seqeval().compute(predictions=[["O", "O"]], references=[["B-PER", "O"]], entity_level=True)
    assert (nothing["precision"], nothing["recall"], nothing["f1"], nothing["PER_precision"]) == (0, 0, 0, 0)
    spurious = Seqeval().compute(predictions=[["B-LOC", "O"]], references=[["O", "O"]], entity_level=True)
    assert (spurious["recall"], spurious["LOC_recall"]) == (0, 0)
    hypotheses = ["the cat sat on the mat", "a dog ran"]
    references = [["the cat sat on a mat", "a cat sat on the mat"], ["a dog ran off", "the dog ran"]]
    bleu = SacreBleu().compute(predictions=hypotheses, references=references)
    streams = [[refs[0] for refs in references], [refs[1] for refs in references]]
    assert bleu["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, streams).score)
    assert "tok:13a" in bleu["signature"]
    with pytest.raises(ValueError, match="sacreBLEU needs the same number of references for every prediction"):
        SacreBleu().compute(predictions=hypotheses, references=[references[0], references[1][:1]])
    chrf_plus = ChrF().compute(predictions=hypotheses, references=references, word_order=2)["chrf"]
    assert chrf_plus == pytest.approx(sacrebleu.corpus_chrf(hypotheses, streams, word_order=2).score)
    assert chrf_plus != pytest.approx(ChrF().compute(predictions=hypotheses, references=references)["chrf"])
    with pytest.raises(ImportError, match=r"This metric needs some-package: pip install 'aiayn\[train\]'"):
        _library("no_such_module_here", "some-package")
    assert perplexity(2.0) == math.exp(2.0) and perplexity(1000.0) == math.inf


# The functions the end-to-end runs call: by value, on inputs built by hand.


def test_the_predictions_files_of_tags_choices_and_generated_texts(tmp_path):
    """predictions.txt: the argmax tag at each scored position, a line per example; predict_results.txt: each
    example's index and chosen ending; generated_predictions.txt: the decoded texts, -100 read as padding, special
    tokens left out, one a line (an error without --predict_with_generate)."""
    import types

    import numpy as np
    from helpers import word_tokenizer

    from aiayn.tasks.generation import write_generated_predictions
    from aiayn.tasks.multiple_choice import write_choice_predictions
    from aiayn.tasks.token_classification import write_tag_predictions

    tags = {0: "O", 1: "B-PER", 2: "I-PER"}
    trainer = types.SimpleNamespace(model=types.SimpleNamespace(config=types.SimpleNamespace(id2label=tags)))
    logits = np.eye(3)[[[1, 2, 0, 0], [0, 1, 1, 2]]]
    output = types.SimpleNamespace(predictions=logits, label_ids=np.array([[1, -100, 0, 0], [-100, 1, 0, -100]]))
    write_tag_predictions(output, trainer, None, None, None, str(tmp_path))
    assert (tmp_path / "predictions.txt").read_text() == "B-PER O O\nB-PER B-PER\n"
    choices = types.SimpleNamespace(predictions=np.array([[0.1, 0.9, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]]))
    write_choice_predictions(choices, None, None, None, None, str(tmp_path))
    assert (tmp_path / "predict_results.txt").read_text() == "index\tprediction\n0\t1\n1\t0\n2\t2\n"
    tokenizer = word_tokenizer()
    generated = np.array([[0, 5, 6, 2, -100], [0, 7, 2, 0, 0]])  # the decoder's start (pad), text, </s>, padding
    trainer = types.SimpleNamespace(args=types.SimpleNamespace(predict_with_generate=True), processing_class=tokenizer)
    write_generated_predictions(types.SimpleNamespace(predictions=generated), trainer, None, None, None, str(tmp_path))
    assert (tmp_path / "generated_predictions.txt").read_text() == "w5 w6\nw7"
    trainer.args.predict_with_generate = False
    with pytest.raises(
        ValueError, match="^--do_predict writes generated texts: give --predict_with_generate, as the scripts need.$"
    ):
        write_generated_predictions(types.SimpleNamespace(predictions=generated), trainer, None, None, None, "x")


def test_masked_token_accuracy_bleu_chrf_and_the_linear_pixel_baseline():
    """The masked LM's accuracy counts the positions with a label (2 of 3 right; the -100 ones, wrong, not counted)
    from the logits' argmax; translation's BLEU and chrF are sacreBLEU's of the decoded texts; the linear baseline
    separates pixels a threshold separates and misses the one on the wrong side (2 of 3)."""
    import numpy as np
    import sacrebleu
    import torch
    from helpers import word_tokenizer

    from aiayn.baselines import linear_classifier_accuracy
    from aiayn.tasks.masked_lm import argmax_logits, masked_accuracy
    from aiayn.tasks.translation import bleu_and_chrf

    logits = torch.tensor([[[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 5.0, 0.0]]])
    predictions = argmax_logits(logits, None)
    assert predictions.tolist() == [[1, 0, 2, 1]]
    labels = np.array([[1, -100, 0, 1]])
    assert masked_accuracy(transformers.EvalPrediction(predictions=predictions.numpy(), label_ids=labels)) == {
        "accuracy": 2 / 3
    }
    tokenizer = word_tokenizer()
    hypotheses, references = ["w5 w6 w7 w8 w9", "w10 w11 w12"], ["w5 w6 w7 w8 w10", "w10 w11 w13"]
    ids = [tokenizer(text)["input_ids"] for text in (*hypotheses, *references)]
    generated = np.array([[0, *ids[0]], [0, *ids[1], -100, -100]])
    label_ids = np.array([ids[2], [*ids[3], -100, -100]])
    scores = bleu_and_chrf(tokenizer)(transformers.EvalPrediction(predictions=generated, label_ids=label_ids))
    assert scores == pytest.approx({"bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
                                    "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score})  # fmt: skip
    assert 0 < scores["bleu"] < 100
    train = np.array([[[0.0, 0.0]], [[1.0, 1.0]], [[10.0, 10.0]], [[11.0, 11.0]]])  # images of 1 x 2 pixels
    accuracy = linear_classifier_accuracy(
        train, np.array([0, 0, 1, 1]), np.array([[[0.5, 0.5]], [[10.5, 10.5]], [[0.2, 0.2]]]), np.array([0, 1, 1])
    )
    assert accuracy == pytest.approx(2 / 3)


def test_multiple_choice_features_pair_the_context_with_each_ending_and_group_them_by_example():
    """Each example's endings as (context, start + ending) pairs in their order, cut to `--max_seq_length`, unpadded
    unless `--pad_to_max_length`; `labels` the right ending; the collator pads them into (examples, endings, tokens);
    a test split without labels has none."""
    from aiayn.tasks.multiple_choice import multiple_choice_collator, multiple_choice_dataset
    from aiayn.tokenization import train_tokenizer

    rows = [{"sent1": "the cat sat", "sent2": "then it", "ending0": "slept", "ending1": "ran far away today",
             "ending2": "ate", "label": 1},
            {"sent1": "a dog ran in the park", "sent2": "and", "ending0": "barked", "ending1": "sat",
             "ending2": "jumped over the fence", "label": 2}]  # fmt: skip
    tokenizer = train_tokenizer("encoder", [" ".join(map(str, row.values())) for row in rows] * 20, 200)
    unlabelled = [{k: v for k, v in row.items() if k != "label"} for row in rows]
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_list(rows), test=datasets.Dataset.from_list(unlabelled))
    data_args = DataArguments(context_column="sent1", question_column="sent2", label_column="label", block_size=12)
    features = multiple_choice_dataset(corpus, tokenizer, None, data_args)
    expected = [[tokenizer(row["sent1"], f"{row['sent2']} {row[f'ending{i}']}", max_length=12, truncation=True)
                 ["input_ids"] for i in range(3)] for row in rows]  # fmt: skip
    assert features["train"]["input_ids"] == expected and features["train"]["labels"] == [1, 2]
    assert len({len(ids) for choices in expected for ids in choices}) > 1 and max(map(len, expected[1])) == 12
    assert "labels" not in features["test"].column_names and features["test"]["input_ids"] == expected
    padded = multiple_choice_dataset(corpus, tokenizer, None, dataclasses.replace(data_args, pad_to_max_length=True))
    assert {len(ids) for choices in padded["train"]["input_ids"] for ids in choices} == {12}
    batch = multiple_choice_collator(tokenizer, None, data_args, 0)(list(features["train"]))
    assert tuple(batch["input_ids"].shape) == (2, 3, 12) and batch["labels"].tolist() == [1, 2]


def test_tagging_features_are_cut_to_the_length_and_padded_only_on_request():
    from aiayn.tasks.token_classification import token_classification_collator, token_classification_dataset
    from aiayn.tokenization import train_tokenizer

    rows = [{"tokens": ["Anna", "met", "Ben", "in", "Paris", "today"],
             "ner_tags": ["B-PER", "O", "B-PER", "O", "B-LOC", "O"]},
            {"tokens": ["Anna", "sang"], "ner_tags": ["B-PER", "O"]}]  # fmt: skip
    tokenizer = train_tokenizer("encoder", [" ".join(row["tokens"]) for row in rows] * 20, 60)
    label2id = {"B-LOC": 0, "B-PER": 1, "O": 2}
    model = types.SimpleNamespace(config=types.SimpleNamespace(label2id=label2id))
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_list(rows))
    data_args = DataArguments(text_column="tokens", label_column="ner_tags", block_size=5)
    features = token_classification_dataset(corpus, tokenizer, model, data_args)["train"]
    assert [len(ids) for ids in features["input_ids"]] == [5, 4]
    assert features["labels"][1] == [-100, 1, 2, -100]
    padded = token_classification_dataset(
        corpus, tokenizer, model, dataclasses.replace(data_args, pad_to_max_length=True)
    )
    assert [len(ids) for ids in padded["train"]["input_ids"]] == [5, 5]
    batch = token_classification_collator(tokenizer, None, data_args, 0)(list(features))
    assert batch["labels"].tolist()[1] == [-100, 1, 2, -100, -100]  # padded labels are not scored
    tokenizer_tags = datasets.Dataset.from_list(rows).cast_column(
        "ner_tags", datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER", "B-LOC"]))
    )
    from aiayn.tasks.token_classification import tag_names

    assert tag_names(datasets.DatasetDict(train=tokenizer_tags), data_args) == ["O", "B-PER", "B-LOC"]
    large = datasets.Dataset.from_list(rows).cast_column("ner_tags", datasets.Sequence(datasets.Value("large_string")))
    assert tag_names(datasets.DatasetDict(train=large), data_args) == ["B-LOC", "B-PER", "O"]
    floats = datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": [[0.5, 1.5]]})
    with pytest.raises(ValueError, match="needs a list of tags .strings or integers. per example in the label column"):
        tag_names(datasets.DatasetDict(train=floats), data_args)


def test_the_tag_baseline_counts_each_words_tags_not_the_first_seen():
    """ "Paris" is B-PER first, then B-LOC twice: B-LOC; overall, O is first but B-LOC most frequent."""
    from aiayn.tasks.token_classification import most_frequent_tags

    words = [["and", "Paris"], ["Paris"], ["Paris", "Rome"]]
    tags = [["O", "B-PER"], ["B-LOC"], ["B-LOC", "B-LOC"]]
    assert most_frequent_tags(words, tags) == ({"and": "O", "Paris": "B-LOC", "Rome": "B-LOC"}, "B-LOC")


def test_image_features_carry_their_labels_only_where_scored():
    from PIL import Image

    from aiayn.tasks.image_classification import image_classification_dataset
    from aiayn.tasks.masked_image_modeling import masked_image_dataset

    images = [Image.new("RGB", (4, 4), (i * 60, 0, 0)) for i in range(3)]
    split = datasets.Dataset.from_dict({"image": images, "label": [2, 0, 1]})
    corpus = datasets.DatasetDict(train=split)
    processor = transformers.ViTImageProcessor(size={"height": 4, "width": 4})
    data_args = DataArguments(image_column="image", label_column="label")
    labelled = image_classification_dataset(corpus, processor, None, data_args)["train"][:]
    assert labelled["labels"].tolist() == [2, 0, 1] and tuple(labelled["pixel_values"].shape) == (3, 3, 4, 4)
    assert labelled["pixel_values"][1, 0, 0, 0].item() == pytest.approx(60 / 255 / 0.5 - 1)
    assert masked_image_dataset(corpus, processor, None, data_args)["train"].column_names == ["pixel_values"]


def test_translations_metrics_are_bleu_and_chrf_where_the_evaluation_generates(tmp_path):
    from helpers import word_tokenizer

    from aiayn.tasks.translation import translation_metrics

    tokenizer = word_tokenizer()
    generating = transformers.Seq2SeqTrainingArguments(str(tmp_path), predict_with_generate=True, report_to="none")
    compute = translation_metrics(tokenizer, generating, None, None, None, None, "validation")["compute_metrics"]
    ids = np.array([tokenizer("w5 w6 w7 w8")["input_ids"]])
    scores = compute(transformers.EvalPrediction(predictions=ids, label_ids=ids))
    assert scores == pytest.approx({"bleu": 100.0, "chrf": 100.0})
    plain = transformers.Seq2SeqTrainingArguments(str(tmp_path), report_to="none")
    assert translation_metrics(tokenizer, plain, None, None, None, None, "validation") == {}


def test_the_endings_are_read_in_their_numbers_order_and_nothing_else():
    from aiayn.tasks.multiple_choice import ending_columns

    columns = {f"ending{i}": ["x"] for i in (10, 2, 0, 1, 11, 3, 4, 5, 6, 7, 8, 9)}
    dataset = datasets.Dataset.from_dict({"sent1": ["a"], "option12": ["y"], "endings": ["z"], **columns})
    assert ending_columns(dataset) == [f"ending{i}" for i in range(12)]


def test_the_masks_of_masked_lm_are_a_function_of_the_seed_and_the_batch():
    from aiayn.tasks.masked_lm import masked_lm_collator
    from aiayn.tokenization import train_tokenizer

    tokenizer = train_tokenizer("encoder", ["the cat sat on the mat and the dog ran in the park"] * 20, 60)
    batch = [{"input_ids": tokenizer("the cat sat on the mat and the dog ran in the park")["input_ids"]}] * 4
    data_args = DataArguments(mlm_probability=0.5)

    def masks(seed: int) -> list:
        return masked_lm_collator(tokenizer, None, data_args, seed)(batch)["labels"].tolist()

    assert masks(3) == masks(3) and masks(3) != masks(4)


def test_a_single_image_is_processed_as_a_batch_of_one():
    from PIL import Image

    from aiayn.tasks.image_classification import image_classification_dataset

    corpus = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"image": [Image.new("RGB", (4, 4))], "label": [0]})
    )
    processor = transformers.ViTImageProcessor(size={"height": 4, "width": 4})
    processed = image_classification_dataset(
        corpus, processor, None, DataArguments(image_column="image", label_column="label")
    )
    assert tuple(processed["train"][:]["pixel_values"].shape) == (1, 3, 4, 4)


def test_span_corruption_reads_translation_pairs_as_text_in_both_languages():
    from aiayn.tasks.span_corruption import span_corruption_dataset
    from aiayn.tokenization import train_tokenizer

    pairs = [{"translation": {"en": f"the cat number {i} sat", "de": f"die Katze nummer {i} sass"}} for i in range(12)]
    tokenizer = train_tokenizer("seq2seq", [t for p in pairs for t in p["translation"].values()] * 5, 80,
                                num_sentinels=4)  # fmt: skip
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_list(pairs))
    data_args = DataArguments(text_column="text", max_source_length=16)
    blocks = span_corruption_dataset(corpus, tokenizer, None, data_args)["train"]
    text = tokenizer.decode([token for ids in blocks["input_ids"] for token in ids])
    assert "Katze" in text and "cat" in text and blocks.column_names == ["input_ids"]


def test_qa_features_pad_only_on_request_and_a_windows_null_answer_is_its_cls_token():
    """Unpadded windows are as long as their tokens; with a left-padding tokenizer padded to the length, an
    unanswerable question's labels are the CLS token's position after the padding (not 0); a one-token answer at the
    end of its context is labelled on that token (not on the [SEP] after it)."""
    from aiayn.tasks.question_answering import question_answering_collator, question_answering_features
    from aiayn.tokenization import train_tokenizer

    contexts = ["Anna met Ben in Paris", "Ben lives in Rome and Anna lives in Paris"]
    tokenizer = train_tokenizer("encoder", [*contexts, "Where does Ben live ?", "Who met Ben ?"] * 20, 60)
    examples = {"id": ["a", "b"], "question": ["Who met Ben ?", "Where does Ben live ?"], "context": contexts,
                "answers": [{"text": [], "answer_start": []},
                            {"text": ["Paris"], "answer_start": [contexts[1].index("Paris")]}]}  # fmt: skip
    unpadded = question_answering_features(examples, tokenizer, qa_args(block_size=32, doc_stride=4))
    assert len({len(ids) for ids in unpadded["input_ids"]}) == 2
    batch = question_answering_collator(tokenizer, None, qa_args(block_size=32), 0)(
        [{"input_ids": ids} for ids in unpadded["input_ids"]])  # fmt: skip
    assert tuple(batch["input_ids"].shape) == (2, max(len(ids) for ids in unpadded["input_ids"]))
    end = unpadded["offset_mapping"][1][unpadded["end_positions"][1]]
    assert contexts[1][end[0] : end[1]] == "Paris" and unpadded["start_positions"][1] == unpadded["end_positions"][1]
    tokenizer.padding_side = "left"
    padded = question_answering_features(examples, tokenizer, qa_args(block_size=32, doc_stride=4,
                                                                       pad_to_max_length=True))  # fmt: skip
    cls = padded["input_ids"][0].index(tokenizer.cls_token_id)
    assert cls > 0 and (padded["start_positions"][0], padded["end_positions"][0]) == (cls, cls)


def test_a_doc_stride_the_windows_cannot_hold_is_named_at_its_bound():
    from aiayn.tasks.question_answering import question_answering_dataset
    from aiayn.tokenization import train_tokenizer

    tokenizer = train_tokenizer("encoder", ["Anna met Ben in Paris", "Who met Ben ?"] * 20, 60)
    corpus = datasets.DatasetDict(train=qa_examples([("q", " Who met Ben ?", "Anna met Ben in Paris", "Anna")]))
    longest = len(tokenizer("Who met Ben ?", add_special_tokens=False)["input_ids"])
    room = 16 - longest - tokenizer.num_special_tokens_to_add(pair=True)
    assert room > 1
    question_answering_dataset(corpus, tokenizer, None, qa_args(block_size=16, doc_stride=room - 1))
    message = (f"--doc_stride ({room}) must be shorter than the context's share of a window: --max_seq_length 16 "
               f"less the longest question ({longest} tokens) and the special tokens leaves {room}; the windows would "
               "not advance.")  # fmt: skip
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        question_answering_dataset(corpus, tokenizer, None, qa_args(block_size=16, doc_stride=room))


def qa_examples(rows) -> datasets.Dataset:
    return datasets.Dataset.from_list([
        {"id": id_, "question": question, "context": context,
         "answers": {"text": [answer], "answer_start": [context.index(answer)]}}
        for id_, question, context, answer in rows
    ])  # fmt: skip


def test_squad_v2_best_thresholds_follow_the_no_answer_probabilities():
    """Questions a (answerable, right), b (unanswerable, answered), c (answerable, half right, F1 1/2) and d
    (unanswerable, abstained), with no-answer probabilities 0.9, 0.1, 0.5, 0.3: abstaining on all scores 2 (b and d);
    answering in order of probability, b (-1), d (0), c (+1/2 F1, 0 exact), a (+1): F1 peaks at 2.5 after a (threshold
    0.9), exact match at 2 before any (threshold 0, as SQuAD v2 starts it) and again after a, which does not beat it.
    A one-word prediction of a two-word answer has F1 2/3."""
    from aiayn.metrics import SquadV2

    predictions, references = ["Paris", "Rome", "Oslo", ""], [["Paris"], [], ["Oslo city"], []]
    scores = SquadV2().compute(predictions=predictions, references=references,
                               no_answer_probabilities=[0.9, 0.1, 0.5, 0.3])  # fmt: skip
    f1_c = 2 * 1 * 0.5 / 1.5
    assert scores["best_f1"] == pytest.approx(100 * (2 - 1 + 0 + f1_c + 1) / 4) and scores["best_f1_thresh"] == 0.9
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (50.0, 0.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 0 + f1_c + 1) / 4)


def test_the_collators_of_language_models_text_to_text_and_masked_images():
    """The causal LM's labels are its inputs (the model shifts them); text to text pads labels with -100 and builds
    the decoder's inputs from them with the model; masked-image modelling masks `--mask_ratio` of the model's
    `grid_size`-squared patches, drawn from the seed and the batch."""
    import torch
    from helpers import tiny_config, word_tokenizer

    from aiayn.tasks.causal_lm import causal_lm_collator
    from aiayn.tasks.generation import seq2seq_collator
    from aiayn.tasks.masked_image_modeling import masked_image_collator

    tokenizer = word_tokenizer()
    batch = causal_lm_collator(tokenizer, None, DataArguments(), 0)([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    assert batch["labels"].tolist() == [[5, 6, 7], [8, 9, -100]] and batch["input_ids"].tolist()[1] == [8, 9, 0]
    model = transformers.AutoModelForSeq2SeqLM.from_config(tiny_config("seq2seq"))
    features = [{"input_ids": [5, 6, 2], "labels": [7, 2]}, {"input_ids": [5, 2], "labels": [8, 9, 2]}]
    collated = seq2seq_collator(tokenizer, model, DataArguments(), 0)(features)
    start = model.config.decoder_start_token_id
    assert collated["labels"].tolist() == [[7, 2, -100], [8, 9, 2]]
    assert collated["decoder_input_ids"].tolist() == [[start, 7, 2], [start, 8, 9]]
    vision = types.SimpleNamespace(config=types.SimpleNamespace(grid_size=4))
    images = [{"pixel_values": torch.full((3, 8, 8), float(i))} for i in range(3)]

    def masks(seed: int, ratio: float):
        return masked_image_collator(None, vision, DataArguments(mask_ratio=ratio), seed)(images)["bool_masked_pos"]

    assert masks(7, 0.25).shape == (3, 16) and masks(7, 0.25).sum(-1).tolist() == [4, 4, 4]
    assert torch.equal(masks(7, 0.25), masks(7, 0.25)) and not torch.equal(masks(7, 0.25), masks(8, 0.25))


def test_blocks_of_tokens_drop_the_remainder():
    from aiayn.tasks.blocks import group_texts

    blocks = group_texts({"input_ids": [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]}, 4)
    assert blocks == {"input_ids": [[0, 1, 2, 3], [4, 5, 6, 7]]}


@pytest.mark.parametrize(("labels", "accepted"), [(["a", "b"], True), ([1, 2], True), ([True, False], True),
                                                   ([0.5, 1.5], False)])  # fmt: skip
def test_classes_may_be_strings_integers_or_booleans(labels, accepted):
    from aiayn.tasks.classification import check_classes

    split = datasets.Dataset.from_dict({"text": ["x", "y"], "label": labels})
    corpus = datasets.DatasetDict(train=split, validation=split)
    data_args = DataArguments(text_column="text", label_column="label")
    if accepted:
        check_classes(corpus, data_args)
    else:
        with pytest.raises(ValueError, match="Classification needs classes .strings, integers or booleans."):
            check_classes(corpus, data_args)


# Tokenized blocks and tags, read back by value.


def test_causal_lm_blocks_end_each_text_with_eos():
    """run_clm's stream: "w5 w6" and "w7 w8 w9" each ended by </s> (id 2), cut into blocks of 3 (the last </s>
    dropped with the remainder)."""
    from helpers import word_tokenizer

    from aiayn.tasks.causal_lm import causal_lm_dataset

    corpus = datasets.DatasetDict(train=datasets.Dataset.from_list([{"text": "w5 w6"}, {"text": "w7 w8 w9"}]))
    blocks = causal_lm_dataset(corpus, word_tokenizer(), None, DataArguments(text_column="text", block_size=3))
    assert list(blocks["train"]["input_ids"]) == [[5, 6, 2], [7, 8, 9]]


def test_preprocessing_workers_shard_each_map_and_overwrite_cache_skips_the_cache(tmp_path):
    """`--preprocessing_num_workers 2`: each map of the data (run_clm's tokenizing and grouping, run_ner's and the
    other tasks' tokenizing) writes its cache in 2 shards beside the stored data; `--overwrite_cache` turns the cache
    off."""
    from helpers import word_tokenizer

    from aiayn.tasks.causal_lm import causal_lm_dataset
    from aiayn.tasks.task import map_options, tokenized_splits
    from aiayn.tasks.token_classification import token_classification_dataset
    from aiayn.tokenization import train_tokenizer

    assert map_options(DataArguments(preprocessing_num_workers=2, overwrite_cache=True)) == {
        "num_proc": 2,
        "load_from_cache_file": False,
    }
    assert map_options(DataArguments()) == {"num_proc": None, "load_from_cache_file": None}

    def stored(name: str, rows: list[dict]) -> datasets.DatasetDict:
        datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / name))
        return datasets.DatasetDict(train=datasets.load_from_disk(str(tmp_path / name)))

    def shards(name: str) -> list[str]:
        return sorted(file[-20:] for file in os.listdir(tmp_path / name) if file.startswith("cache-"))

    two_maps = ["00000_of_00002.arrow"] * 2 + ["00001_of_00002.arrow"] * 2
    text = stored("text", [{"text": f"w{5 + i} w{6 + i}"} for i in range(8)])
    causal_lm_dataset(text, word_tokenizer(), None, DataArguments(text_column="text", block_size=3,
                                                                    preprocessing_num_workers=2))  # fmt: skip
    assert shards("text") == two_maps
    tags = stored("tags", [{"tokens": ["Anna", "sang"], "ner_tags": ["B-PER", "O"]}] * 4)
    model = types.SimpleNamespace(config=types.SimpleNamespace(label2id={"B-PER": 0, "O": 1}))
    tokenizer = train_tokenizer("encoder", ["Anna sang"] * 20, 60)
    ner = DataArguments(text_column="tokens", label_column="ner_tags", block_size=8, preprocessing_num_workers=2)
    token_classification_dataset(tags, tokenizer, model, ner)
    assert shards("tags") == ["00000_of_00002.arrow", "00001_of_00002.arrow"]
    # The other tasks' tokenizing (classification, multiple choice, QA, text to text) alike.
    plain = stored("plain", [{"text": f"w{i}"} for i in range(4)])
    lengths = tokenized_splits(plain, lambda rows, split: {"n": [len(text) for text in rows["text"]]},
                               DataArguments(preprocessing_num_workers=2))  # fmt: skip
    assert list(lengths["train"]["n"]) == [2, 2, 2, 2] and shards("plain") == [
        "00000_of_00002.arrow",
        "00001_of_00002.arrow",
    ]


def test_tags_may_be_integers_or_class_names_and_are_read_without_training_data():
    """Integer tags are named by their strings; a `ClassLabel`'s by its names; a saved tagger evaluated on validation
    data alone reads its tags there; a column of plain strings (not a list per example) is named."""
    from aiayn.tasks.token_classification import tag_names, word_tags

    args = DataArguments(text_column="tokens", label_column="ner_tags")
    integers = datasets.Dataset.from_dict({"tokens": [["a", "b"], ["c"]], "ner_tags": [[2, 0], [10]]})
    assert tag_names(datasets.DatasetDict(train=integers), args) == ["0", "10", "2"]
    features = datasets.Features(tokens=datasets.List(datasets.Value("string")),
                                 ner_tags=datasets.List(datasets.ClassLabel(names=["O", "B-PER"])))  # fmt: skip
    named = datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": [[1, 0]]}, features=features)
    assert word_tags(named, args) == [["B-PER", "O"]]
    validation = datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": [["O", "B-LOC"]]})
    assert tag_names(datasets.DatasetDict(validation=validation), args) == ["B-LOC", "O"]
    flat = datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": ["O"]})
    with pytest.raises(ValueError, match=re.escape("in the label column 'ner_tags'; it holds Value('string').")):
        tag_names(datasets.DatasetDict(train=flat), args)


def test_label_all_tokens_turns_only_b_tags_into_i_tags():
    """run_ner's `b_to_i_label` on BIOES tags: B-PER becomes I-PER; I, E, S and O stay."""
    from aiayn.tasks.token_classification import inside_tags

    label2id = {"B-PER": 0, "I-PER": 1, "E-PER": 2, "S-PER": 3, "O": 4}
    assert inside_tags(label2id) == {0: 1, 1: 1, 2: 2, 3: 3, 4: 4}


def test_a_new_tokenizer_learns_each_tag_examples_words_joined_by_spaces():
    from aiayn.tasks.token_classification import token_texts

    words = datasets.Dataset.from_dict({"tokens": [["Anna", "met", "Ben"], ["Anna"]]})
    assert list(token_texts(words, DataArguments(text_column="tokens"))) == ["Anna met Ben", "Anna"]


def test_tag_refusals_name_the_split_and_at_most_ten_tags():
    """A test split without tags; 11 validation tags the training data lacks (the first 10 named); 11 tags a saved
    tagger does not know (the first 10 named, then its own)."""
    from aiayn.tasks.task import check_seen
    from aiayn.tasks.token_classification import check_tags, token_classification_dataset

    args = DataArguments(text_column="tokens", label_column="ner_tags", block_size=8)
    tagged = datasets.Dataset.from_dict({"tokens": [["Anna", "sang"]], "ner_tags": [["B-PER", "O"]]})
    untagged = datasets.Dataset.from_dict({"tokens": [["Anna", "sang"]]})
    with pytest.raises(ValueError, match=re.escape("The test data has no tags ('ner_tags'); run_ner's predictions "
                                                   "need them too, to know where each word starts.")):  # fmt: skip
        check_tags(datasets.DatasetDict(train=tagged, validation=tagged, test=untagged), args)
    letters = list("abcdefghijk")
    many = datasets.Dataset.from_dict({"tokens": [letters], "ner_tags": [letters]})
    with pytest.raises(ValueError, match=re.escape("holds 11 tag(s) the training data never holds: ['a', 'b', 'c', "
                                                   "'d', 'e', 'f', 'g', 'h', 'i', 'j']; a model")):  # fmt: skip
        check_seen(datasets.DatasetDict(train=tagged, validation=many), "ner_tags", "tag", lambda tags: tags)
    model = types.SimpleNamespace(config=types.SimpleNamespace(label2id={"O": 1, "B-PER": 0}))
    with pytest.raises(ValueError, match=re.escape("The validation data holds tags the model does not know, ['a', "
                                                   "'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j']; its tags are "
                                                   "['B-PER', 'O'].")):  # fmt: skip
        token_classification_dataset(datasets.DatasetDict(validation=many), None, model, args)


def test_predictions_files_are_utf_8_whatever_the_locale(tmp_path):
    """Under an ASCII locale (C, not coerced to UTF-8), predictions.txt and predict_results.txt still hold the
    tags and classes in UTF-8."""
    script = f"""
import types
import numpy as np
from aiayn.tasks.task import write_index_predictions
from aiayn.tasks.token_classification import write_tag_predictions
config = types.SimpleNamespace(id2label={{0: "O", 1: "B-STRA\\u00dfE"}})
trainer = types.SimpleNamespace(model=types.SimpleNamespace(config=config))
output = types.SimpleNamespace(predictions=np.eye(2)[[[1, 0]]], label_ids=np.array([[0, 0]]))
write_tag_predictions(output, trainer, None, None, None, {str(tmp_path)!r})
write_index_predictions({str(tmp_path)!r}, ["caf\\u00e9", "th\\u00e9"])
"""
    ascii_locale = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    subprocess.run([sys.executable, "-c", script], env=ascii_locale, check=True, capture_output=True)
    assert (tmp_path / "predictions.txt").read_text(encoding="utf-8") == "B-STRAßE O\n"
    assert (tmp_path / "predict_results.txt").read_text(encoding="utf-8") == "index\tprediction\n0\tcafé\n1\tthé\n"
