"""`aiayn train TASK`: every head trains on the user's own files, samples are drawn so that they cannot mislead, and
every evaluation stands beside a baseline that learns nothing. The data are tiny files written here."""

import csv
import json
import os
import random
import subprocess
import sys

import pytest
from conftest import hub_loading_environment

from aiayn import cli
from aiayn.training import TASKS, sample

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPICS = {
    "sports": "ball goal team match score player win coach",
    "food": "bread soup cheese apple cook taste dinner salt",
    "music": "song guitar piano band sing rhythm melody drum",
}
FILLER = ["the", "a", "and", "of", "to", "in", "is", "it"]
PEOPLE, PLACES = ["Anna", "Ben", "Clara", "David", "Emma"], ["Paris", "Rome", "Oslo", "Lima", "Cairo"]
QUICK = ["--do_train", "--do_eval", "--report_to", "none", "--disable_tqdm", "true", "--vocab_size", "200",
         "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16", "--learning_rate", "2e-3",
         "--dataloader_pin_memory", "false"]  # fmt: skip


def train(task: str, output, *flags: str) -> dict:
    cli.main(["train", task, "--output_dir", str(output), *QUICK, *flags])
    with open(output / "all_results.json") as f:
        return json.load(f)


def topic_sentence(rng: random.Random, topic: str) -> str:
    return " ".join(rng.choice(TOPICS[topic].split() + FILLER) for _ in range(10))


def write_classification_csv(path, rows_per_class=(150, 75, 75)):
    """Rows ordered by label: the first 150 are sports."""
    rng = random.Random(0)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for topic, rows in zip(TOPICS, rows_per_class, strict=True):
            writer.writerows([topic_sentence(rng, topic), topic] for _ in range(rows))


def test_help_names_every_task_and_lists_a_tasks_flags_in_groups():
    result = subprocess.run([sys.executable, "-m", "aiayn", "train", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    for task in TASKS:
        assert f"    {task}" in result.stdout
    for task in ("token-classification", "question-answering", "multiple-choice", "summarization"):
        assert TASKS[task].help in result.stdout.replace("\n                        ", " ")
    parser = cli.build_parser()._subparsers._group_actions[0].choices["train"]
    task_help = parser._subparsers._group_actions[0].choices["question-answering"].format_help()
    for group in ("model:", "data:", "training (transformers' Seq2SeqTrainingArguments):"):
        assert group in task_help
    for flag in ("--question_column_name", "--max_seq_length", "--doc_stride", "--train_file", "--learning_rate"):
        assert flag in task_help
    assert "--mlm_probability" not in task_help


def test_samples_are_a_seeded_stratified_shuffle_never_the_first_rows():
    import datasets

    labels = ["a"] * 150 + ["b"] * 75 + ["c"] * 75
    dataset = datasets.Dataset.from_dict({"label": labels, "row": list(range(300))})
    drawn = sample(dataset, 90, seed=42, label_column="label")
    assert {label: list(drawn["label"]).count(label) for label in "abc"} == {"a": 45, "b": 23, "c": 22}
    assert list(drawn["row"]) != list(range(90))
    assert list(sample(dataset, 90, seed=42, label_column="label")["row"]) == list(drawn["row"])
    assert list(sample(dataset, 90, seed=1, label_column="label")["row"]) != list(drawn["row"])
    unlabelled = sample(dataset, 10, seed=0)
    assert len(unlabelled) == 10 and list(unlabelled["row"]) != list(range(10))


def test_classification_from_a_csv_ordered_by_label_beside_the_majority_class(tmp_path):
    data, output = tmp_path / "topics.csv", tmp_path / "topics"
    write_classification_csv(data)
    results = train("classification", output, "--train_file", str(data), "--label_column_name", "label",
                    "--max_train_samples", "90", "--max_eval_samples", "45", "--validation_split_percentage", "20",
                    "--max_steps", "40", "--max_seq_length", "16")  # fmt: skip
    assert results["eval_samples"] == 45
    assert 0 <= results["eval_accuracy"] <= 1 and results["eval_baseline_accuracy"] < 0.9
    card = (output / "README.md").read_text()
    assert "| metric | value | baseline |" in card and "| Accuracy |" in card

    script = (
        "import json, sys\n"
        "from transformers import pipeline\n"
        "classify = pipeline('text-classification', model=sys.argv[1], trust_remote_code=True)\n"
        "print(json.dumps(classify('the team scored a goal')))\n"
    )
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run([sys.executable, "-c", script, str(output)], cwd=workdir, capture_output=True,
                            text=True, env=hub_loading_environment(tmp_path), timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1])[0]["label"] in TOPICS

    cli.main(["hub-folder", str(output), str(tmp_path / "hub")])
    hub_card = (tmp_path / "hub" / "README.md").read_text()
    accuracy, baseline = results["eval_accuracy"], results["eval_baseline_accuracy"]
    assert f"| Accuracy | {accuracy:.4g} | {baseline:.4g} |" in hub_card


def write_entities(path, count: int):
    """Sentences of words tagged in IOB2 (`PER` people, `LOC` places), one JSON line each."""
    rng = random.Random(1)
    with open(path, "w") as f:
        for _ in range(count):
            person, place = rng.choice(PEOPLE), rng.choice(PLACES)
            tokens = [person, "went", "to", place, rng.choice(FILLER)]
            tags = ["B-PER", "O", "O", "B-LOC", "O"]
            f.write(json.dumps({"tokens": tokens, "ner_tags": tags}) + "\n")


def test_token_classification_from_json_lines_reports_entity_f1(tmp_path):
    data, output = tmp_path / "entities.jsonl", tmp_path / "ner"
    write_entities(data, 120)
    results = train("token-classification", output, "--train_file", str(data), "--max_steps", "30",
                    "--validation_split_percentage", "20")  # fmt: skip
    for name in ("eval_precision", "eval_recall", "eval_f1", "eval_accuracy"):
        assert 0 <= results[name] <= 1 and f"eval_baseline_{name[5:]}" in results
    assert results["eval_baseline_f1"] == 0.0  # the majority tag, O, finds no entity
    config = json.loads((output / "config.json").read_text())
    assert set(config["id2label"].values()) == {"B-LOC", "B-PER", "O"}


def write_squad(path, count: int):
    """SQuAD's layout as transformers' run_qa reads it: {"data": [{id, title, context, question, answers}, ...]}."""
    rng = random.Random(2)
    rows = []
    for i in range(count):
        person, place = rng.choice(PEOPLE), rng.choice(PLACES)
        context = f"{' '.join(rng.choice(FILLER) for _ in range(6))} {person} lives in {place} ."
        rows.append({"id": str(i), "title": "t", "context": context, "question": f"Where does {person} live ?",
                     "answers": {"text": [place], "answer_start": [context.index(f"in {place}") + 3]}})  # fmt: skip
    path.write_text(json.dumps({"version": "1", "data": rows}))


def test_question_answering_from_squad_json_reports_exact_match_and_f1(tmp_path):
    data, output = tmp_path / "squad.json", tmp_path / "qa"
    write_squad(data, 100)
    results = train("question-answering", output, "--train_file", str(data), "--max_steps", "30",
                    "--validation_split_percentage", "20", "--max_seq_length", "16", "--doc_stride", "4")  # fmt: skip
    for name in ("eval_exact_match", "eval_f1", "eval_baseline_exact_match", "eval_baseline_f1"):
        assert 0 <= results[name] <= 100
    assert results["eval_samples"] == 20


def test_multiple_choice_in_swags_columns_reports_accuracy_beside_the_majority_ending(tmp_path):
    rng = random.Random(3)
    data, output = tmp_path / "swag.jsonl", tmp_path / "swag"
    with open(data, "w") as f:
        for _ in range(80):
            topic = rng.choice(list(TOPICS))
            others = [t for t in TOPICS if t != topic]
            endings = [topic_sentence(rng, t) for t in (topic, *others)]
            label = rng.randrange(3)
            endings[0], endings[label] = endings[label], endings[0]
            row = {"sent1": topic_sentence(rng, topic), "sent2": "then", "label": label}
            f.write(json.dumps({**row, **{f"ending{i}": e for i, e in enumerate(endings)}}) + "\n")
    results = train("multiple-choice", output, "--train_file", str(data), "--max_steps", "10",
                    "--validation_split_percentage", "25", "--max_seq_length", "24")  # fmt: skip
    assert 0 <= results["eval_accuracy"] <= 1 and 0 < results["eval_baseline_accuracy"] < 1


def test_summarization_from_source_and_target_columns_reports_rouge_beside_the_copied_source(tmp_path):
    rng = random.Random(4)
    data, output = tmp_path / "summaries.csv", tmp_path / "summaries"
    with open(data, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["document", "summary"])
        for _ in range(60):
            topic = rng.choice(list(TOPICS))
            writer.writerow([topic_sentence(rng, topic), f"about {topic}"])
    generation = ["--predict_with_generate", "--generation_max_length", "8", "--generation_num_beams", "1"]
    lengths = ["--max_source_length", "16", "--max_target_length", "8"]
    results = train("summarization", output, "--train_file", str(data), "--max_steps", "20", *generation, *lengths,
                    "--validation_split_percentage", "20")  # fmt: skip
    for name in ("rouge1", "rouge2", "rougeL"):
        assert 0 <= results[f"eval_{name}"] <= 100 and 0 <= results[f"eval_baseline_{name}"] <= 100


def expect_error(capsys, argv: list[str], *phrases: str):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    for phrase in phrases:
        assert phrase in message, message


def test_bad_data_is_an_error_that_names_it_and_writes_nothing(tmp_path, capsys):
    output = tmp_path / "never"
    flags = ["--output_dir", str(output), "--do_train", "--report_to", "none"]
    expect_error(capsys, ["train", "sentiment", *flags], "unknown task 'sentiment'", "classification")
    rows = tmp_path / "rows.csv"
    rows.write_text("sentence,category\n" + "".join(f"s {i},{i % 2}\n" for i in range(20)))
    expect_error(capsys, ["train", "classification", "--train_file", str(rows), *flags],
                 "'label' or 'genre'", "--label_column", "['sentence', 'category']")  # fmt: skip
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    expect_error(capsys, ["train", "classification", "--train_file", str(empty), *flags], f"{empty} is empty")
    scores = tmp_path / "scores.csv"
    scores.write_text("text,label\n" + "".join(f"t {i},{i / 7}\n" for i in range(20)))
    expect_error(capsys, ["train", "classification", "--train_file", str(scores), *flags],
                 "label column 'label'", "float64")  # fmt: skip
    expect_error(capsys, ["train", "token-classification", "--train_file", str(scores), *flags],
                 "'tokens' or 'words'", "['text', 'label']")  # fmt: skip
    assert not output.exists()


def test_data_from_parquet_saved_datasets_and_image_folders(tmp_path):
    import datasets
    from PIL import Image

    from aiayn.data import load_corpus

    rows = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(40)], "label": [i % 2 for i in range(40)]})
    rows.to_parquet(str(tmp_path / "rows.parquet"))
    assert load_corpus(str(tmp_path / "rows.parquet"))["train"].column_names == ["text", "label"]
    datasets.DatasetDict(train=rows, validation=rows.select(range(4))).save_to_disk(str(tmp_path / "saved"))
    assert load_corpus(str(tmp_path / "saved"))["validation"].num_rows == 4
    for label in ("cats", "dogs"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(tmp_path / "images" / label / f"{i}.png")
    images = load_corpus(str(tmp_path / "images"), validation_fraction=0.2)
    assert images["train"].features["label"].names == ["cats", "dogs"] and images["validation"].num_rows == 4
