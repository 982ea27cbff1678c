"""`aiayn train TASK`: every head trains on the user's own files, samples are drawn so that they cannot mislead, and
every evaluation stands beside a baseline that learns nothing. The data are tiny files written here."""

import json
import os
import random
import re
import subprocess
import sys

import pytest
from helpers import hub_loading_environment
from task_files import TOPICS, write_classification_csv, write_entities, write_squad, write_swag

from aiayn import cli
from aiayn.training import TASKS, sample

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = ["--do_train", "--do_eval", "--report_to", "none", "--disable_tqdm", "true", "--vocab_size", "200",
         "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16", "--dataloader_pin_memory",
         "false"]  # fmt: skip


def train(task: str, output, *flags: str, quick=QUICK) -> dict:
    cli.main(["train", task, "--output_dir", str(output), *quick, *flags])
    with open(output / "all_results.json") as f:
        return json.load(f)


def test_help_names_every_task_and_lists_a_tasks_flags_in_groups(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    for task in TASKS:
        assert f"    {task}" in shown
    for task in ("token-classification", "question-answering", "multiple-choice", "summarization"):
        assert TASKS[task].help in shown.replace("\n                        ", " ")
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
                    "--max_steps", "150", "--max_seq_length", "16")  # fmt: skip
    assert results["eval_samples"] == 45 and results["eval_beats_baseline"] is True
    assert results["eval_baseline_accuracy"] == pytest.approx(23 / 45)  # sports, the stratified draw's majority
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


def test_data_a_model_cannot_learn_from_is_refused_before_training_with_nothing_written(tmp_path, capsys):
    """Validation endings, tags or classes the training data lacks, answers that are not where they say in their
    context, and unanswerable questions outside SQuAD v2: each an error that names it, before anything is written."""
    output = tmp_path / "never"
    flags = ["--output_dir", str(output), "--do_train", "--do_eval"]
    swag, short = tmp_path / "swag.jsonl", tmp_path / "three-endings.csv"
    write_swag(swag, 8)
    rows = [json.loads(line) for line in swag.read_text().splitlines()]
    short.write_text("sent1,sent2,ending0,ending1,ending2,label\n" + "".join(
        f"{r['sent1']},{r['sent2']},{r['ending0']},{r['ending1']},{r['ending2']},{min(r['label'], 2)}\n" for r in rows
    ))  # fmt: skip
    swag_csv = tmp_path / "swag.csv"
    swag_csv.write_text("sent1,sent2,ending0,ending1,ending2,ending3,label\n" + "".join(
        f"{r['sent1']},{r['sent2']},{r['ending0']},{r['ending1']},{r['ending2']},{r['ending3']},{r['label']}\n"
        for r in rows
    ))  # fmt: skip
    expect_error(capsys, ["train", "multiple-choice", "--train_file", str(swag_csv), "--validation_file", str(short),
                          *flags], "ending3")  # fmt: skip
    train_tags, validation_tags = tmp_path / "train.jsonl", tmp_path / "validation.jsonl"
    write_entities(train_tags, 8)
    validation_tags.write_text(json.dumps({"tokens": ["Anna", "sang"], "ner_tags": ["B-PER", "B-SONG"]}) + "\n")
    expect_error(capsys, ["train", "token-classification", "--train_file", str(train_tags), "--validation_file",
                          str(validation_tags), *flags], "1 tag(s)", "['B-SONG']")  # fmt: skip
    squad = tmp_path / "squad.json"
    write_squad(squad, 6)
    document = json.loads(squad.read_text())
    document["data"][2]["answers"]["answer_start"] = [0]
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(document))
    expect_error(capsys, ["train", "question-answering", "--train_file", str(moved), *flags],
                 "1 answer(s)", "not in their context", "['2']")  # fmt: skip
    document["data"][2]["answers"] = {"text": [], "answer_start": []}
    unanswered = tmp_path / "unanswered.json"
    unanswered.write_text(json.dumps(document))
    expect_error(capsys, ["train", "question-answering", "--train_file", str(unanswered), *flags],
                 "1 question(s)", "--version_2_with_negative")  # fmt: skip
    assert not output.exists()


def test_a_run_below_its_baseline_says_so_in_the_log_the_results_and_the_card(tmp_path, caplog):
    data, output = tmp_path / "topics.csv", tmp_path / "topics"
    write_classification_csv(data)
    results = train("classification", output, "--train_file", str(data), "--max_train_samples", "60",
                    "--max_eval_samples", "30", "--max_steps", "1", "--learning_rate", "1e-9",
                    "--max_seq_length", "16", "--seed", "3")  # fmt: skip
    assert results["eval_accuracy"] <= results["eval_baseline_accuracy"] and results["eval_beats_baseline"] is False
    accuracy, baseline = results["eval_accuracy"], results["eval_baseline_accuracy"]
    assert f"eval_accuracy {accuracy:.4g} (baseline {baseline:.4g})" in caplog.text
    card = (output / "README.md").read_text()
    assert "**This model does not beat the baseline that learns nothing** on " in card
    assert f"Accuracy {accuracy:.4g} (baseline {baseline:.4g})" in card


def write_separable_reviews(folder):
    """Reviews whose label is told by one word (a linear model separates them exactly)."""
    rng = random.Random(0)
    words = {"positive": ["good", "great", "excellent", "wonderful", "superb", "lovely", "fine", "brilliant"],
             "negative": ["bad", "awful", "terrible", "poor", "dreadful", "horrible", "weak", "boring"]}  # fmt: skip
    filler = ["the", "film", "was", "a", "and", "plot", "acting", "story", "it", "felt", "very", "quite"]
    for name, rows in (("reviews.csv", 400), ("reviews-dev.csv", 100)):
        with open(folder / name, "w") as f:
            f.write("text,label\n")
            for i in range(rows):
                label = ("negative", "positive")[i % 2]
                text = [rng.choice(filler) for _ in range(8)] + [rng.choice(words[label])]
                rng.shuffle(text)
                f.write(f"{' '.join(text)},{label}\n")


def test_the_how_tos_classification_command_learns_a_separable_csv_from_scratch_with_the_defaults(tmp_path):
    """The first `aiayn train classification` command of the how-to, as printed, on a 400-row CSV a linear model
    separates: without --learning_rate a new model trains with the from-scratch recipe and beats the majority."""
    with open(os.path.join(ROOT, "docs", "how-to", "train.md")) as f:
        page = f.read()
    command = next(block for block in re.findall(r"```bash\n(.*?)```", page, re.DOTALL)
                   if block.startswith("aiayn train classification"))  # fmt: skip
    write_separable_reviews(tmp_path)
    environment = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
                   "OMP_NUM_THREADS": "1"}  # fmt: skip
    result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + command], cwd=tmp_path, env=environment,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the from-scratch recipe" in result.stderr
    results = json.loads((tmp_path / "review-classifier" / "all_results.json").read_text())
    assert results["eval_baseline_accuracy"] == 0.5 and results["eval_accuracy"] >= 0.95
    arguments = json.loads((tmp_path / "review-classifier" / "training_args.json").read_text())
    assert arguments["lr_scheduler_type"] == "inverse_sqrt" and arguments["adam_beta2"] == 0.98
    assert arguments["learning_rate"] == pytest.approx(64**-0.5 * 4000**-0.5)  # eq. (3) at d_model 64


def test_multiple_choice_learns_which_ending_follows_its_context_from_scratch_with_the_defaults(tmp_path):
    """Endings on the context's topic against endings on other topics: the defaults (3 epochs, batches of 8, the
    from-scratch recipe) learn it, far above the most frequent ending."""
    data, output = tmp_path / "swag.jsonl", tmp_path / "swag"
    write_swag(data, 1000)
    cli.main(["train", "multiple-choice", "--train_file", str(data), "--output_dir", str(output), "--do_train",
              "--do_eval", "--max_seq_length", "32", "--disable_tqdm", "true"])  # fmt: skip
    results = json.loads((output / "all_results.json").read_text())
    assert results["eval_accuracy"] >= 0.9 and results["eval_baseline_accuracy"] < 0.4


def test_the_from_scratch_recipe_fills_only_the_flags_not_given_and_leaves_loaded_models_to_transformers(tmp_path):
    data = tmp_path / "topics.csv"
    write_classification_csv(data)
    common = ["--train_file", str(data), "--max_train_samples", "30", "--max_steps", "1", "--max_seq_length", "8",
              "--report_to", "none", "--do_train", "--vocab_size", "200"]  # fmt: skip
    runs = {"new": [], "warmup": ["--warmup_steps", "3", "--adam_beta2", "0.95"], "rate": ["--learning_rate", "1e-3"]}
    arguments = {}
    for name, flags in runs.items():
        cli.main(["train", "classification", "--output_dir", str(tmp_path / name), *common, *flags])
        arguments[name] = json.loads((tmp_path / name / "training_args.json").read_text())
    cli.main(["train", "classification", "--output_dir", str(tmp_path / "loaded"), "--model_name_or_path",
              str(tmp_path / "new"), *common])  # fmt: skip
    arguments["loaded"] = json.loads((tmp_path / "loaded" / "training_args.json").read_text())
    peak = 64**-0.5 * 4000**-0.5
    assert arguments["new"]["learning_rate"] == pytest.approx(peak) and arguments["new"]["warmup_steps"] == 0.1
    assert arguments["warmup"]["learning_rate"] == pytest.approx(peak) and arguments["warmup"]["warmup_steps"] == 3
    assert arguments["warmup"]["adam_beta2"] == 0.95 and arguments["new"]["adam_beta2"] == 0.98
    for name in ("rate", "loaded"):  # transformers' defaults around the given rate, or its fine-tuning rate
        assert arguments[name]["lr_scheduler_type"] == "linear" and arguments[name]["adam_beta2"] == 0.999
    assert arguments["rate"]["learning_rate"] == 1e-3 and arguments["loaded"]["learning_rate"] == 5e-5
    assert "from-scratch recipe" in (tmp_path / "new" / "README.md").read_text()
    assert "from-scratch recipe" not in (tmp_path / "loaded" / "README.md").read_text()


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


ADD_A_TASK_RUN = """
import json, sys
from aiayn import cli
from aiayn.tasks import TASKS

assert "text-pair-classification" in TASKS and TASKS["text-pair-classification"].help.startswith("a class per pair")
cli.main(["train", "text-pair-classification", "--train_file", sys.argv[1], "--output_dir", sys.argv[2], "--do_train",
          "--do_eval", "--max_steps", "2", "--vocab_size", "100", "--max_seq_length", "16", "--report_to", "none"])
print(json.dumps(json.load(open(sys.argv[2] + "/all_results.json"))))
"""


def test_a_new_task_is_one_module_and_one_registry_line(tmp_path):
    """The how-to's task, in a module of its own on a copy of the package with one entry (and its import) in the
    registry: `aiayn train` runs it, evaluates it beside its baseline and saves a folder its Auto class loads."""
    import shutil

    import aiayn

    with open(os.path.join(ROOT, "docs", "how-to", "train.md")) as f:
        page = f.read()
    module = next(block for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "TASK = Task(" in block)
    package = tmp_path / "package" / "aiayn"
    shutil.copytree(os.path.dirname(aiayn.__file__), package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "tasks" / "text_pair_classification.py").write_text(module)
    registry = (package / "tasks" / "__init__.py").read_text()
    registry = registry.replace("    translation,\n)", "    text_pair_classification,\n    translation,\n)").replace(
        '    "translation": translation.TASK,\n',
        '    "translation": translation.TASK,\n    "text-pair-classification": text_pair_classification.TASK,\n',
    )
    (package / "tasks" / "__init__.py").write_text(registry)
    data = tmp_path / "pairs.csv"
    data.write_text("premise,hypothesis,label\n" + "".join(
        f"the {w} is here,a {w} is here,entailment\n" if i % 3 else f"the {w} is here,nothing is here,contradiction\n"
        for i, w in enumerate(["cat", "dog", "bird", "fish", "cow", "pig"] * 10)
    ))  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(package.parent), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", ADD_A_TASK_RUN, str(data), str(tmp_path / "pairs")], cwd=tmp_path,
                            env=environment, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.splitlines()[-1])
    assert results["eval_samples"] == 3 and results["eval_baseline_accuracy"] == pytest.approx(2 / 3)
    config = json.loads((tmp_path / "pairs" / "config.json").read_text())
    assert config["architectures"] == ["AiaynEncoderForSequenceClassification"]
    assert sorted(config["label2id"]) == ["contradiction", "entailment"]


def test_squad_v2_trains_and_scores_null_answers_and_its_predictions_are_what_it_scored(tmp_path):
    """Unanswerable questions (empty `answers`) train towards the null answer and are scored as SQuAD v2 scores them:
    the `NoAns_` share counts them, and the test metrics recomputed from `predict_predictions.json` (an empty string
    for no answer) are the reported ones."""
    from aiayn.metrics import Squad

    write_squad(tmp_path / "squad.json", 40)
    rows = json.loads((tmp_path / "squad.json").read_text())["data"]
    for row in rows[::3]:
        row["question"] = "Where does nobody live?"
        row["answers"] = {"text": [], "answer_start": []}
    data = tmp_path / "squad-v2.json"
    data.write_text(json.dumps({"data": rows}))
    output = tmp_path / "v2"
    results = train("question-answering", output, "--train_file", str(data), "--validation_file", str(data),
                    "--test_file", str(data), "--do_predict", "--version_2_with_negative", "--max_steps", "3",
                    "--max_seq_length", "32", "--doc_stride", "8", "--max_eval_samples", "12")  # fmt: skip
    assert results["eval_NoAns_total"] + results["eval_HasAns_total"] == 12
    unanswered = [row for row in rows if not row["answers"]["text"]]
    predicted = json.loads((output / "predict_results.json").read_text())
    assert predicted["test_NoAns_total"] == len(unanswered) == 14
    answers = json.loads((output / "predict_predictions.json").read_text())
    scores = Squad().compute(predictions=[answers[row["id"]] for row in rows],
                             references=[row["answers"]["text"] for row in rows])  # fmt: skip
    assert predicted["test_exact"] == pytest.approx(scores["exact_match"], abs=1e-9)
    assert set(json.loads((output / "predict_null_odds.json").read_text())) == {row["id"] for row in rows}


def test_the_generation_flags_set_the_evaluations_and_the_saved_generation_length_and_beams(tmp_path):
    """`--val_max_target_length` and `--num_beams` (run_summarization's flags) bound the evaluation's generation and
    the saved generation config, so that the folder's pipeline writes what was scored; without them, the evaluation
    generates at most `--max_target_length` tokens, not transformers' default of 20."""
    from task_files import write_summaries

    data = tmp_path / "summaries.csv"
    write_summaries(data, 30)
    common = ["--train_file", str(data), "--max_steps", "1", "--predict_with_generate", "--max_source_length", "16",
              "--max_target_length", "8", "--max_eval_samples", "4"]  # fmt: skip
    train("summarization", tmp_path / "flags", *common, "--val_max_target_length", "12", "--num_beams", "2")
    train("summarization", tmp_path / "defaults", *common)
    for name, (length, beams) in {"flags": (12, 2), "defaults": (8, 1)}.items():
        arguments = json.loads((tmp_path / name / "training_args.json").read_text())
        generation = json.loads((tmp_path / name / "generation_config.json").read_text())
        assert (arguments["generation_max_length"], arguments["generation_num_beams"]) == (length, beams)
        assert (generation["max_length"], generation.get("num_beams", 1)) == (length, beams)
