"""What `aiayn train TASK` leaves in `--output_dir`, for every task: the model folder that its Auto class loads, the
results files of transformers' example scripts, the predictions files of `--do_predict`, and a card whose code runs
in a process where aiayn cannot be imported and whose statements are true to the run (its loss, tying, evaluation
data and metadata; a pair classifier's joined columns; a tagger's words), all without torch's warning that it cannot
pin memory on CPUs."""

import csv
import json
import math
import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from helpers import hub_loading_environment
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results
from task_files import TOPICS, topic_sentence, write_entities, write_squad, write_summaries, write_swag

from aiayn import cli
from aiayn.tasks import TASKS

QUICK = ["--do_train", "--do_eval", "--max_steps", "2", "--report_to", "none", "--disable_tqdm", "true",
         "--vocab_size", "300", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8",
         "--save_strategy", "no"]  # fmt: skip


def write_topic_pairs(path, rows: int, seed: int) -> None:
    """A classifier's pairs: two sentences of one topic (`premise`, `hypothesis`) and the topic (`label`)."""
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["premise", "hypothesis", "label"])
        for row in range(rows):
            topic = list(TOPICS)[row % len(TOPICS)]
            writer.writerow([topic_sentence(rng, topic, 5), topic_sentence(rng, topic, 5), topic])


def write_pair_files(path) -> None:
    """The pair classifier's training file at `path` and its validation file beside it, `pairs_valid.csv`."""
    write_topic_pairs(path, 60, seed=0)
    write_topic_pairs(path.with_name("pairs_valid.csv"), 12, seed=1)


# The classification run: a pair classifier, its columns joined by `PAIR_DELIMITER`, evaluated on a validation file.
PAIR_DELIMITER = " | "
PAIR_FLAGS = ["--text_column_names", "premise,hypothesis", "--text_column_delimiter", PAIR_DELIMITER,
              "--max_seq_length", "24"]  # fmt: skip


def task_data(task: str, folder) -> list[str]:
    """The data flags of a small run of `task` (with a test file where the task predicts)."""
    files = {
        "classification": ("pairs.csv", write_pair_files,
                           ["--validation_file", str(folder / "pairs_valid.csv"), *PAIR_FLAGS]),
        "token-classification": ("entities.jsonl", lambda p: write_entities(p, 40), []),
        "question-answering": ("squad.json", lambda p: write_squad(p, 30),
                               ["--max_seq_length", "32", "--doc_stride", "8"]),
        "multiple-choice": ("swag.jsonl", lambda p: write_swag(p, 30), ["--max_seq_length", "32"]),
        "summarization": ("summaries.csv", lambda p: write_summaries(p, 30),
                          ["--max_source_length", "16", "--max_target_length", "8", "--predict_with_generate"]),
    }  # fmt: skip
    if task in files:
        name, write, flags = files[task]
        path = folder / name
        write(path)
        sampling = ["--max_train_samples", "24", "--max_eval_samples", "8", "--max_predict_samples", "5"]
        return ["--train_file", str(path), "--test_file", str(path), "--do_predict", *sampling, *flags]
    sampling = ["--max_train_samples", "32", "--max_eval_samples", "8"]
    bundled = {
        "causal-lm": ["--dataset_name", "pydoc", "--block_size", "32"],
        "masked-lm": ["--dataset_name", "pydoc", "--block_size", "32"],
        "span-corruption": ["--dataset_name", "pydoc", "--max_source_length", "32"],
        "translation": ["--max_source_length", "24", "--max_target_length", "24", "--predict_with_generate"],
        "image-classification": [],
        "masked-image-modeling": [],
    }
    return [*bundled[task], *sampling]


# The metric each task reports beside its loss.
METRIC = {
    "causal-lm": "eval_perplexity",
    "masked-lm": "eval_accuracy",
    "translation": "eval_bleu",
    "classification": "eval_accuracy",
    "token-classification": "eval_f1",
    "question-answering": "eval_f1",
    "multiple-choice": "eval_accuracy",
    "summarization": "eval_rougeLsum",
    "image-classification": "eval_accuracy",
}
# The example text of each text task's card, which the test makes longer than the model's positions.
LONG_TEXTS = {
    "classification": '"The hypothesis."',
    "token-classification": '"William Shakespeare was born in Stratford."',
    "question-answering": '"The play was written by William Shakespeare in 1599."',
    "multiple-choice": '"She opened the umbrella."',
    "summarization": '"A text to summarize."',
    "translation": '"A text to translate."',
}
# The loss each task's card names: what its head's loss averages.
LOSSES = {
    "causal-lm": "cross-entropy per predicted next token (nats)",
    "masked-lm": "cross-entropy per masked token (nats)",
    "translation": "cross-entropy per target token (nats)",
    "span-corruption": "cross-entropy per target token (nats)",
    "summarization": "cross-entropy per target token (nats)",
    "classification": "cross-entropy per example (nats)",
    "token-classification": "cross-entropy per labelled token (nats)",
    "question-answering": "mean of the answer's start and end cross-entropies, per window of context (nats)",
    "multiple-choice": "cross-entropy per example over its choices (nats)",
    "image-classification": "cross-entropy per image (nats)",
    "masked-image-modeling": "absolute error per pixel value of the masked patches",
}
# The text tasks whose heads project onto the vocabulary with the token embedding's weight; the others' heads have no
# such projection, though their configs keep `tie_word_embeddings`.
TIED = ("causal-lm", "masked-lm", "translation", "span-corruption", "summarization")
# What each run evaluated on, as its card says: the validation file given, a bundled corpus's validation split, or
# the default 5% of the training file.
HELD_OUT = "a seeded 5% of the training data, held out from training"
EVALUATED_ON = {
    "causal-lm": "the validation split of `pydoc`",
    "masked-lm": "the validation split of `pydoc`",
    "span-corruption": "the validation split of `pydoc`",
    "translation": "the validation split of `bible-en-de`",
    "classification": "the validation file `pairs_valid.csv`",
    "token-classification": HELD_OUT,
    "question-answering": HELD_OUT,
    "multiple-choice": HELD_OUT,
    "summarization": HELD_OUT,
    "image-classification": "the validation split of `digits`",
    "masked-image-modeling": "the validation split of `digits`",
}
# The predictions files of `--do_predict`, as transformers' scripts name them.
PREDICTIONS = {
    "classification": "predict_results.txt",
    "token-classification": "predictions.txt",
    "question-answering": "predict_predictions.json",
    "multiple-choice": "predict_results.txt",
    "summarization": "generated_predictions.txt",
}


def predicted_rows(task: str, folder) -> list:
    """The first 5 rows of the task's test file (`--max_predict_samples 5`)."""
    import datasets

    from aiayn.data import load_files

    name = {
        "classification": "pairs.csv",
        "token-classification": "entities.jsonl",
        "question-answering": "squad.json",
        "multiple-choice": "swag.jsonl",
        "summarization": "summaries.csv",
    }[task]
    rows: datasets.Dataset = load_files(str(folder / name))["train"]
    return list(rows.select(range(5)))


def recomputed(task: str, output, rows: list) -> dict:
    """The test metrics recomputed from the predictions file and the test rows, by the metrics' own libraries."""
    from aiayn.metrics import Rouge, Seqeval, Squad

    if task in ("classification", "multiple-choice"):
        lines = (output / "predict_results.txt").read_text().splitlines()[1:]
        predicted = [line.split("\t")[1] for line in lines]
        expected = [str(row["label"]) for row in rows]
        return {"predict_accuracy": sum(p == e for p, e in zip(predicted, expected, strict=True)) / len(rows)}
    if task == "token-classification":
        predicted = [line.split() for line in (output / "predictions.txt").read_text().splitlines()]
        scores = Seqeval().compute(predictions=predicted, references=[row["ner_tags"] for row in rows])
        return {f"predict_{name}": value for name, value in scores.items()}
    if task == "question-answering":
        answers = json.loads((output / "predict_predictions.json").read_text())
        scores = Squad().compute(predictions=[answers[row["id"]] for row in rows],
                                 references=[row["answers"]["text"] for row in rows])  # fmt: skip
        return {f"test_{name}": value for name, value in scores.items()}  # run_qa's test metrics
    generated = (output / "generated_predictions.txt").read_text().split("\n")
    scores = Rouge().compute(predictions=generated, references=[row["summary"] for row in rows])
    return {f"predict_{name}": value for name, value in scores.items()}


# Runs each card it is sent in a process of its own where aiayn cannot be imported: a child forked from this process,
# which has imported only what the cards' code imports (torch and transformers with its pipelines, which all cards
# but question answering's and multiple choice's use), so that each card does not pay for these imports again. A child
# starts from that state (no model, tokenizer or folder code loaded) in a fresh namespace, in the card's working
# folder, with its own stdout and stderr files; the runner answers each request with the child's exit code.
CARD_RUNNER = """
import json, os, signal, sys, traceback
sys.modules["aiayn"] = None  # only the folders' own code can build the models
import transformers.pipelines
for request in map(json.loads, sys.stdin):
    child = os.fork()
    if child == 0:
        os.chdir(request["cwd"])
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        signal.alarm(300)  # killed after 300 s
        code = 0
        try:
            exec(compile(request["code"], "<card>", "exec"), {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
"""


@pytest.fixture(scope="module")
def run_card(tmp_path_factory):
    """`run_card(code, workdir)` runs `code` as `python -c` would in `workdir`, in a process where aiayn cannot be
    imported, and returns its exit code, stdout and stderr."""
    modules = tmp_path_factory.mktemp("card_runner")
    runner = subprocess.Popen([sys.executable, "-c", CARD_RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=hub_loading_environment(modules))  # fmt: skip

    def run(code: str, workdir: Path) -> tuple[int, str, str]:
        outputs = {name: str(workdir / name) for name in ("stdout", "stderr")}
        runner.stdin.write(json.dumps({"code": code, "cwd": str(workdir), **outputs}) + "\n")
        runner.stdin.flush()
        returncode = runner.stdout.readline()
        assert returncode, "the card runner stopped"
        return int(returncode), (workdir / "stdout").read_text(), (workdir / "stderr").read_text()

    yield run
    runner.stdin.close()
    runner.wait(timeout=60)


def card_code(folder) -> str:
    """The card's code that needs no aiayn (its second Python block), pointed at `folder`."""
    card = (folder / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", card, re.DOTALL)[1]
    return code.replace(f'"{folder.name}"', repr(str(folder)))


def card_names_loss_tying_and_evaluation(task: str, card: str, model, results: dict) -> None:
    """The card's loss as the task's head computes it, tying where the model ties, and the data it evaluated on."""
    assert f"| Validation loss: {LOSSES[task]} | " in card
    assert "nats per token" not in card and "Held-out validation split" not in card
    if TASKS[task].family != "vision":
        output = model.get_output_embeddings()
        tied = output is not None and output.weight is model.get_input_embeddings().weight
        assert tied is (task in TIED) and model.config.tie_word_embeddings
        assert ("the output projection is tied to the token embedding" in card) is (task in TIED)
    assert f"Evaluated on {EVALUATED_ON[task]} ({results['eval_samples']} samples). " in card


def metadata_shows_the_tables_values(folder) -> None:
    """Each result of the card's model-index: the name and the value of a row of its table, as the row shows it."""
    card = ModelCard.load(folder / "README.md")
    _, results = model_index_to_eval_results(card.data.to_dict()["model-index"])
    table = card.text.split("## Evaluation")[1].split("|---|---|---|\n")[1].split("\n\n")[0]
    rows = dict(re.findall(r"^\| (.+?) \| (\S+) \| [^|]+ \|$", table, re.MULTILINE))
    assert len(rows) == len(table.splitlines()) == len(results) > 0
    assert {result.metric_name: result.metric_value for result in results} == {
        name: float(value) for name, value in rows.items()
    }


def pair_joining_stated(card: str, folder) -> None:
    """The pair classifier's card names its columns and their delimiter, which its tokenizer learned (the files hold
    no `|` of their own)."""
    assert 'its columns `premise`, `hypothesis` joined by `" | "`, in that order, read as a single sequence' in card
    assert 'text = " | ".join(["The premise.", "The hypothesis."])' in card
    assert "|" in transformers.AutoTokenizer.from_pretrained(folder).get_vocab()


def tagged_words(code: str, workdir, run_card) -> list[str]:
    """The words the tagger's card code prints, every word (no tag left out)."""
    every_word = code.replace('aggregation_strategy="first"', 'aggregation_strategy="first", ignore_labels=[]')
    assert every_word != code
    returncode, stdout, stderr = run_card(every_word, workdir)
    assert returncode == 0, stderr[-3000:]
    return re.findall(r"'word': '([^']*)'", stdout)


@pytest.mark.parametrize("task", list(TASKS))
def test_each_task_saves_its_folder_results_predictions_and_a_card_true_to_its_run(task, tmp_path, run_card):
    output = tmp_path / f"{task}-run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli.main(["train", task, "--output_dir", str(output), *QUICK, *task_data(task, tmp_path)])
    assert not [str(warning.message) for warning in caught if "pin_memory" in str(warning.message)]
    definition = TASKS[task]
    for name in ("config.json", "model.safetensors", "README.md", "training_args.json", "train_results.json",
                 "eval_results.json", "all_results.json", "trainer_state.json"):  # fmt: skip
        assert (output / name).is_file(), name
    assert not [name for name in os.listdir(output) if name.endswith((".bin", ".pt", ".pth", ".pkl"))]
    results = json.loads((output / "all_results.json").read_text())
    evaluation = json.loads((output / "eval_results.json").read_text())
    assert {key: results[key] for key in evaluation} == evaluation and results["train_samples"] > 0
    if task in METRIC:
        assert METRIC[task] in results and METRIC[task].replace("eval_", "eval_baseline_") in results
    if task == "causal-lm":
        assert math.isclose(results["eval_perplexity"], math.exp(results["eval_loss"]), rel_tol=1e-12)
    model = definition.auto_class.from_pretrained(output)
    family = definition.family or "encoder"
    assert type(model).__name__.startswith(f"Aiayn{family.title()}")
    card = (output / "README.md").read_text()
    assert f"pipeline_tag: {definition.pipeline_task}\n" in card
    assert "from-scratch recipe" in card and "| learning_rate | `" in card
    card_names_loss_tying_and_evaluation(task, card, model, results)
    metadata_shows_the_tables_values(output)
    if task == "classification":
        pair_joining_stated(card, output)
    if task in PREDICTIONS:
        # The predictions files hold what the test metrics scored: the metrics recomputed from them are the same.
        predicted = json.loads((output / "predict_results.json").read_text())
        assert predicted["predict_samples"] == 5
        for name, value in recomputed(task, output, predicted_rows(task, tmp_path)).items():
            assert predicted[name] == pytest.approx(value, abs=1e-9), name
    if definition.family != "vision":
        tokenizer = transformers.AutoTokenizer.from_pretrained(output)
        assert len(tokenizer) == model.config.vocab_size

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    returncode, stdout, stderr = run_card(card_code(output), workdir)
    assert returncode == 0, stderr[-3000:]
    assert stdout.strip()
    if task == "token-classification":  # words, where the sentence's tokens hold sub-words
        sentence = "William Shakespeare was born in Stratford."
        assert any(token.startswith("##") for token in tokenizer.tokenize(sentence))
        words = tagged_words(card_code(output), workdir, run_card)
        assert "".join(words).replace(" ", "") == sentence.replace(" ", "") and "##" not in "".join(words)
    if task in LONG_TEXTS:  # the card's code on a text longer than the model's positions: cut or read in windows
        text = LONG_TEXTS[task]
        long_code = card_code(output).replace(text, f"{text[:-1]} " + "and more words " * 300 + '"')
        assert long_code != card_code(output)
        returncode, stdout, stderr = run_card(long_code, workdir)
        assert returncode == 0, stderr[-3000:]


@pytest.mark.parametrize(
    ("flags", "pinned"),
    [([], None), (["--use_cpu"], False), (["--dataloader_pin_memory", "true"], True),
     (["--dataloader_pin_memory", "false"], False), (["--no_dataloader_pin_memory"], False)],
)  # fmt: skip
def test_batches_are_pinned_where_an_accelerator_reads_them_unless_the_flag_says(flags, pinned, tmp_path):
    """By default pinned where torch's DataLoader pins (an accelerator, and the run not kept on the CPU: the runs above
    warn of nothing); the flag given is kept."""
    from aiayn import training

    training_args = training.parse("classification", ["--output_dir", str(tmp_path), *flags])[2]
    expected = torch.accelerator.is_available() if pinned is None else pinned
    assert training_args.dataloader_pin_memory is expected


@pytest.mark.parametrize(
    ("task", "flags", "sentence"),
    [("classification", {"train_file": "data/topics.csv", "validation_file": "data/dev.csv"},
      "the validation file `dev.csv`"),
     ("classification", {"train_file": "data/topics.csv", "validation_split_percentage": 10},
      "a seeded 10% of the training data, held out from training"),
     ("image-classification", {"train_dir": "images/train/", "validation_dir": "images/val/"}, "the images of `val`"),
     ("image-classification", {"train_dir": "images/train", "train_val_split": 0.15},
      "a seeded 15% of the training data, held out from training"),
     ("causal-lm", {}, "the validation split of `shakespeare`"),
     ("causal-lm", {"dataset_name": "corpora/plays.csv"},
      "the validation split of `plays.csv` (where it has none, its test split, else a seeded 5% of the training data, "
      "held out from training)")],
)  # fmt: skip
def test_a_cards_evaluation_data_is_what_the_flags_read(task, flags, sentence):
    """The sentence of the data a run evaluates on, for the flags that `load_data` reads it from (the runs above
    read a validation file, a training file's held-out share and bundled corpora's splits)."""
    from aiayn import training

    assert training.evaluation_data(TASKS[task], training.DataArguments(**flags)) == sentence
