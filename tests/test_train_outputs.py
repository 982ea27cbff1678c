"""What `aiayn train TASK` leaves in `--output_dir`, for every task: the model folder that its Auto class loads, the
results files of transformers' example scripts, the predictions files of `--do_predict`, and a card whose code runs
in a process where aiayn cannot be imported."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import transformers
from helpers import hub_loading_environment
from task_files import write_classification_csv, write_entities, write_squad, write_summaries, write_swag

from aiayn import cli
from aiayn.tasks import TASKS

QUICK = ["--do_train", "--do_eval", "--max_steps", "2", "--report_to", "none", "--disable_tqdm", "true",
         "--vocab_size", "300", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8",
         "--dataloader_pin_memory", "false", "--save_strategy", "no"]  # fmt: skip


def task_data(task: str, folder) -> list[str]:
    """The data flags of a small run of `task` (with a test file where the task predicts)."""
    files = {
        "classification": ("topics.csv", write_classification_csv, ["--max_seq_length", "16"]),
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
    "classification": '"A text to classify."',
    "token-classification": '"A text to tag."',
    "question-answering": '"The play was written by William Shakespeare in 1599."',
    "multiple-choice": '"She opened the umbrella."',
    "summarization": '"A text to summarize."',
    "translation": '"A text to translate."',
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
        "classification": "topics.csv",
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


@pytest.mark.parametrize("task", list(TASKS))
def test_each_task_saves_its_folder_results_predictions_and_a_card_whose_code_runs_without_aiayn(
    task, tmp_path, run_card
):
    output = tmp_path / f"{task}-run"
    cli.main(["train", task, "--output_dir", str(output), *QUICK, *task_data(task, tmp_path)])
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
    if task in LONG_TEXTS:  # the card's code on a text longer than the model's positions: cut or read in windows
        text = LONG_TEXTS[task]
        long_code = card_code(output).replace(text, f"{text[:-1]} " + "and more words " * 300 + '"')
        assert long_code != card_code(output)
        returncode, stdout, stderr = run_card(long_code, workdir)
        assert returncode == 0, stderr[-3000:]
