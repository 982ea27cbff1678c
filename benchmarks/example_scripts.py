"""`aiayn train` beside transformers' own example scripts, run_ner.py and run_qa.py, on the same model folder, the
same files and the same flags: the eval metrics of each, and their difference.

For each task the benchmark writes its data files (token classification: JSON lines of {"tokens", "ner_tags"} with
people, places and organisations whose made-up names split into several sub-words; question answering: SQuAD's
{"data": [...]} with contexts longer than --max_seq_length, read in windows of --doc_stride, and answers of several
sub-words followed by punctuation), makes a starting model folder (`aiayn train TASK --max_steps 1`: a new
tiny-encoder with its head and a tokenizer trained on the files), and trains from it twice, each run in a fresh
process with the same seed, steps, batch sizes, learning rate (transformers' linear schedule, no warm-up) and
--max_seq_length:

    python -m aiayn train TASK --model_name_or_path start ...
    python run_ner.py / run_qa.py --model_name_or_path start --trust_remote_code ...

The scripts load the folder through its own code (`trust_remote_code`), aiayn through the installed package.
They call `evaluate.load("seqeval")` and `evaluate.load("squad")`, which evaluate first resolves as
`./seqeval/seqeval.py` and `./squad/squad.py` in the working folder: each script runs in a temporary folder where
the benchmark writes its own metric modules with the hub metrics' output (seqeval's `overall_*` and per-type dicts,
computed by the `seqeval` library; SQuAD's `exact_match` and `f1`). Nothing is read from the hub
(HF_HUB_OFFLINE=1). The example scripts are not on PyPI: --examples names a checkout's examples/pytorch (default:
the environment variable TRANSFORMERS_EXAMPLES, else the copy at a known commit in ../shared/reference). Where a
script fails (run_qa.py imports trainer_qa.py, whose older
copies import `is_torch_tpu_available`, gone from transformers 5), its column says "not run" and the error is
printed below the table.

It prints how it was run, then a table: task, metric (the eval metrics, the eval loss where the script reports it,
and the training loss), `aiayn train`, the example script, and their difference (aiayn - script). Equal weights,
data order, dropout and labels give differences of float noise (0 for the rates); anything else is a difference
in the pipelines.

    TRANSFORMERS_EXAMPLES=~/transformers/examples/pytorch python benchmarks/example_scripts.py
    python benchmarks/example_scripts.py --examples ~/transformers/examples/pytorch --tasks token-classification \
        --steps 60 --keep runs/
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

# transformers' example scripts at a known commit, beside the repository (shared/reference).
REFERENCE_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                  "shared", "reference", "transformers-examples", "examples", "pytorch")  # fmt: skip

SEQEVAL_MODULE = '''"""seqeval's entity-level scores in the hub metric's format (the benchmark's own module)."""

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report


class Seqeval(evaluate.Metric):
    def _info(self):
        tags = datasets.Sequence(datasets.Value("string", id="label"), id="sequence")
        return evaluate.MetricInfo(description="seqeval", citation="", inputs_description="tags per sentence",
                                   features=datasets.Features({"predictions": tags, "references": tags}))

    def _compute(self, predictions, references, zero_division=0):
        report = classification_report(references, predictions, output_dict=True, zero_division=zero_division)
        overall = report.pop("micro avg")
        scores = {kind: {"precision": values["precision"], "recall": values["recall"], "f1": values["f1-score"],
                         "number": values["support"]}
                  for kind, values in report.items() if not kind.endswith(" avg")}
        scores.update(overall_precision=overall["precision"], overall_recall=overall["recall"],
                      overall_f1=overall["f1-score"], overall_accuracy=accuracy_score(references, predictions))
        return scores
'''

SQUAD_MODULE = '''"""SQuAD v1.1's exact match and F1 in percent, in the hub metric's format (the benchmark's own
module)."""

import collections
import re
import string

import datasets
import evaluate


def normalize(text):
    text = "".join(character for character in text.lower() if character not in set(string.punctuation))
    return " ".join(re.sub(r"\\b(a|an|the)\\b", " ", text).split())


def token_f1(prediction, reference):
    predicted, expected = normalize(prediction).split(), normalize(reference).split()
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


class Squad(evaluate.Metric):
    def _info(self):
        answers = datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})
        features = {"predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
                    "references": {"id": datasets.Value("string"), "answers": answers}}
        return evaluate.MetricInfo(description="squad", citation="", inputs_description="answers by id",
                                   features=datasets.Features(features))

    def _compute(self, predictions, references):
        predicted = {prediction["id"]: prediction["prediction_text"] for prediction in predictions}
        exact = f1 = 0.0
        for reference in references:
            answers, prediction = reference["answers"]["text"], predicted[reference["id"]]
            exact += max(float(normalize(prediction) == normalize(answer)) for answer in answers)
            f1 += max(token_f1(prediction, answer) for answer in answers)
        return {"exact_match": 100 * exact / len(references), "f1": 100 * f1 / len(references)}
'''

SYLLABLES = ["ka", "lo", "mir", "ben", "dra", "ze", "tu", "vin", "sol", "ria", "gor", "pe", "lan", "dus", "fe", "nor",
             "bal", "quin", "tha", "rok"]  # fmt: skip
ORGANISATION_WORDS = ["Bank", "Group", "Works", "Press"]
FILLER = ["the", "a", "and", "of", "then", "later", "it", "is"]


def made_up_name(rng: random.Random) -> str:
    """Two to four syllables: words that a small tokenizer splits into several sub-words."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))).capitalize()


def entity(rng: random.Random, kind: str) -> tuple[list[str], list[str]]:
    """A person (one or two names), a place (one or two) or an organisation (a name and a word), tagged in IOB2."""
    if kind == "ORG":
        words = [made_up_name(rng), rng.choice(ORGANISATION_WORDS)]
    else:
        words = [made_up_name(rng) for _ in range(rng.choice((1, 1, 2)))]
    return words, [f"B-{kind}"] + [f"I-{kind}"] * (len(words) - 1)


NER_TEMPLATES = [
    "PER went to LOC with PER .",
    "PER works for ORG in LOC .",
    "ORG opened an office in LOC , said PER",
    "in LOC , PER met the head of ORG",
    "PER and PER left LOC for LOC",
]


def write_entities(path: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            tokens, tags = [], []
            for slot in rng.choice(NER_TEMPLATES).split():
                words, labels = entity(rng, slot) if slot in ("PER", "LOC", "ORG") else ([slot], ["O"])
                tokens += words
                tags += labels
            filler = rng.choice(FILLER)
            f.write(json.dumps({"tokens": [*tokens, filler], "ner_tags": [*tags, "O"]}) + "\n")


def write_squad(path: str, count: int, seed: int) -> None:
    """Contexts of a fact among others of another kind and filler (`P lives in L.` or `P lives in L, ...` beside
    `P works at O, ...`): the question asks where one person lives, whose answer has several sub-words and ends before
    a full stop or a comma."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        sentences = []
        for _ in range(3):
            person, organisation = (" ".join(entity(rng, kind)[0]) for kind in ("PER", "ORG"))
            filler = " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 6)))
            sentences.append(f"{filler} {person} works at {organisation}, {filler}.")
        person, place = (" ".join(entity(rng, kind)[0]) for kind in ("PER", "LOC"))
        prefix = f"{rng.choice(FILLER)} {person} lives in "
        asked = rng.randrange(len(sentences) + 1)
        start = sum(len(sentence) + 1 for sentence in sentences[:asked]) + len(prefix)
        sentences.insert(asked, prefix + place + rng.choice((".", f", {rng.choice(FILLER)}.")))
        context = " ".join(sentences)
        assert context[start : start + len(place)] == place
        rows.append({"id": str(index), "title": "facts", "context": context, "question": f"Where does {person} live?",
                     "answers": {"text": [place], "answer_start": [start]}})  # fmt: skip
    with open(path, "w") as f:
        json.dump({"version": "1", "data": rows}, f)


TASKS = {
    "token-classification": {
        "script": ("token-classification", "run_ner.py"),
        "files": ("entities_train.json", "entities_validation.json", write_entities),
        "flags": lambda args: [],
        "steps": 40,
        "metrics": ["eval_precision", "eval_recall", "eval_f1", "eval_accuracy", "eval_loss", "train_loss"],
    },
    "question-answering": {
        "script": ("question-answering", "run_qa.py"),
        "files": ("squad_train.json", "squad_validation.json", write_squad),
        "flags": lambda args: [
            "--doc_stride",
            str(args.doc_stride),
            "--n_best_size",
            "20",
            "--max_answer_length",
            "30",
        ],  # fmt: skip
        "steps": 80,
        "metrics": ["eval_exact_match", "eval_f1", "train_loss"],
    },
}


def run(command: list[str], cwd: str, env: dict, log: str) -> str | None:
    """Runs `command` in `cwd` with its output in `log`; None, or the last line of its output that names an error."""
    with open(log, "w") as f:
        returncode = subprocess.run(command, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if returncode == 0:
        return None
    with open(log) as f:
        lines = [line.strip() for line in f if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":")[0] or line.startswith("Error")]
    return (errors or lines or [f"exit status {returncode}"])[-1]


def results(folder: str) -> dict:
    with open(os.path.join(folder, "all_results.json")) as f:
        return json.load(f)


def compare(task: str, args, folder: str, env: dict) -> tuple[dict, dict | str, list[list[str]]]:
    """The metrics of `aiayn train` and of the example script (or its error) for `task`, and the commands run."""
    spec = TASKS[task]
    train_name, validation_name, write = spec["files"]
    train, validation = os.path.join(folder, train_name), os.path.join(folder, validation_name)
    write(train, args.rows, args.seed + 1)
    write(validation, args.rows // 3, args.seed + 2)
    aiayn = [sys.executable, "-m", "aiayn", "train", task]
    files = ["--train_file", train, "--validation_file", validation]
    quiet = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--dataloader_pin_memory",
             "false", "--max_seq_length", str(args.max_seq_length)]  # fmt: skip
    start = os.path.join(folder, "start")
    error = run([*aiayn, *files, *quiet, *spec["flags"](args), "--do_train", "--max_steps", "1", "--vocab_size",
                 str(args.vocab_size), "--seed", str(args.seed), "--output_dir", start], folder, env,
                os.path.join(folder, "start.log"))  # fmt: skip
    if error:
        raise RuntimeError(f"The starting model of {task} was not made: {error}")
    training = [*files, *quiet, *spec["flags"](args), "--model_name_or_path", start, "--do_train", "--do_eval",
                "--seed", str(args.seed), "--max_steps", str(args.steps or spec["steps"]),
                "--learning_rate", str(args.learning_rate),
                "--per_device_train_batch_size", str(args.batch_size), "--per_device_eval_batch_size",
                str(2 * args.batch_size)]  # fmt: skip
    ours_folder, theirs_folder = os.path.join(folder, "aiayn"), os.path.join(folder, "script")
    ours_command = [*aiayn, *training, "--output_dir", ours_folder]
    error = run(ours_command, folder, env, os.path.join(folder, "aiayn.log"))
    if error:
        raise RuntimeError(f"aiayn train {task} failed: {error}")
    working = os.path.join(folder, "script_cwd")
    for name, source in (("seqeval", SEQEVAL_MODULE), ("squad", SQUAD_MODULE)):
        os.makedirs(os.path.join(working, name), exist_ok=True)
        with open(os.path.join(working, name, f"{name}.py"), "w") as f:
            f.write(source)
    script = os.path.join(os.path.abspath(os.path.expanduser(args.examples)), *spec["script"])
    theirs_command = [sys.executable, script, *training, "--trust_remote_code", "--output_dir", theirs_folder]
    error = run(theirs_command, working, env, os.path.join(folder, "script.log"))
    return results(ours_folder), error or results(theirs_folder), [ours_command, theirs_command]


def shown(value) -> str:
    return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=os.environ.get("TRANSFORMERS_EXAMPLES") or REFERENCE_EXAMPLES,
                        help="transformers' examples/pytorch folder (default: $TRANSFORMERS_EXAMPLES, else the "
                        "reference copy beside the repository)")  # fmt: skip
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--rows", type=int, default=300, help="training rows (validation: a third as many)")
    parser.add_argument("--steps", type=int, help="training steps (default: 40 for NER, 80 for QA)")
    parser.add_argument("--batch-size", type=int, default=16, help="per device; evaluation twice as many")
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--doc-stride", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=200, help="of the starting model's tokenizer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", help="a folder to keep the files, models and logs in (default: a temporary one)")
    args = parser.parse_args()
    if not args.examples or not os.path.isdir(args.examples):
        parser.error("--examples (or TRANSFORMERS_EXAMPLES) must name transformers' examples/pytorch folder.")
    with tempfile.TemporaryDirectory() as temporary:
        root = os.path.abspath(args.keep) if args.keep else temporary
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1",
               "HF_DATASETS_CACHE": os.path.join(root, "datasets_cache"), "TOKENIZERS_PARALLELISM": "false",
               "HF_MODULES_CACHE": os.path.join(root, "modules_cache")}  # fmt: skip
        rows, commands, errors = [], {}, {}
        for task in args.tasks:
            folder = os.path.join(root, task)
            os.makedirs(folder, exist_ok=True)
            ours, theirs, commands[task] = compare(task, args, folder, env)
            if isinstance(theirs, str):
                errors[task] = theirs
            for metric in TASKS[task]["metrics"]:
                if isinstance(theirs, str):
                    rows.append((task, metric, shown(ours.get(metric)), "not run (below)", "-"))
                    continue
                a, b = ours.get(metric), theirs.get(metric)
                difference = a - b if a is not None and b is not None else None
                rows.append((task, metric, shown(a), shown(b), shown(difference)))
        print(f"{args.rows} training rows, {args.rows // 3} validation rows; from a starting model of 1 step "
              f"(tiny-encoder, tokenizer of {args.vocab_size}); seed {args.seed}, "
              f"{args.steps or '40 (NER) / 80 (QA)'} steps of {args.batch_size}, learning rate {args.learning_rate} "
              f"(linear decay), max_seq_length {args.max_seq_length}, doc_stride {args.doc_stride} (QA); examples: "
              f"{args.examples}")  # fmt: skip
        for task, (ours_command, theirs_command) in commands.items():
            print(f"\n{task}:\n  {' '.join(ours_command[1:])}\n  {' '.join(theirs_command[1:])}")
        print("\n| task | metric | aiayn train | example script | difference |\n|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        for task, error in errors.items():
            print(f"\n{TASKS[task]['script'][1]} ({task}) failed: {error}")
        if args.keep:
            print(f"\nFiles, models and logs: {root}")


if __name__ == "__main__":
    main()
