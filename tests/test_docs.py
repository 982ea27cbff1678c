"""The documentation site: it builds with `--strict`, and its examples run. Every Python block of every page (and
of README.md) runs here, the blocks of a page in order in one namespace, in a folder of their own (pages say where
they shrink a model or a run to test sizes); every command of the shell blocks of the tutorials and of the
getting-started page runs, in order, in a folder of their own, but for the commands this suite or CI runs anyway
(`make test` is CI's command; `make demo` runs `aiayn demo`, whose stages `tests/test_demo.py` runs at test size; `pip
install` is what the Makefile does; `aiayn presets` and `aiayn train --help` print what test_configuration.py and
test_train_command.py read in-process). `aiayn` commands run in this process as the console script runs them
(`aiayn.cli.main`), `python -c` code as Python runs it; the console script itself runs in a shell in
test_train_command.py."""

import doctest
import importlib
import json
import os
import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml

from aiayn import cli

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_PAGES = ("getting-started.md", "tutorials/")
COVERED_ELSEWHERE = ("make ", "pip install", "aiayn presets", "aiayn train --help")
# The name of each entry of the reference's tables (or lists) of parameters and fields, as mkdocstrings writes them.
SECTION_ENTRY = re.compile(
    r'<(?:tr|li) class="doc-section-item[^"]*">\s*(?:<td>)?\s*(?:<h\d[^>]*>)?\s*(?:<b>)?<code>(?:<span[^>]*>)?([\w*]+)'
)


def blocks(page: Path, language: str) -> list[str]:
    return [code for lang, code in FENCE.findall(page.read_text()) if lang == language]


def pages_with(language: str, prefixes: tuple[str, ...] = ("",)) -> list[str]:
    """The pages with blocks of `language` (paths under docs/; `../README.md`, the front door, counts as a page)."""
    pages = [*DOCS.rglob("*.md"), ROOT / "README.md"]
    names = (os.path.relpath(page, DOCS) for page in pages)
    return sorted(name for name in names if blocks(DOCS / name, language) and name.startswith(prefixes))


@pytest.mark.parametrize("page", pages_with("python"))
def test_the_python_examples_of_each_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the pages' tiny models run fastest on one thread
    namespace = {"__name__": "__main__"}
    try:
        for number, code in enumerate(blocks(DOCS / page, "python"), 1):
            exec(compile(code, f"{page} (block {number})", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)


def shell_commands(page: str) -> list[list[str]]:
    """The commands of the page's shell blocks, each as its words (lines joined where they end in a backslash),
    without comments and without the commands `COVERED_ELSEWHERE`."""
    text = "\n".join(blocks(DOCS / page, "bash")).replace("\\\n", " ")
    commands = (shlex.split(line, comments=True) for line in text.splitlines())
    return [words for words in commands if words and not " ".join(words).startswith(COVERED_ELSEWHERE)]


def run_command(words: list[str]) -> None:
    """`words`, an `aiayn` command or `python -c CODE`, as the shell runs it, in this process."""
    threads = torch.get_num_threads()
    try:
        if words[0] == "aiayn":
            cli.main(words[1:])
        else:
            assert words[:2] == ["python", "-c"], f"a command this test does not run: {shlex.join(words)}"
            exec(compile(words[2], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as stopped:
        assert stopped.code in (0, None), f"{shlex.join(words)} exited with {stopped.code}"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("page", pages_with("bash", SHELL_PAGES))
def test_the_shell_commands_of_each_tutorial_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    commands = shell_commands(page)
    for words in commands:
        run_command(words)
    trained = [words[words.index("--output_dir") + 1] for words in commands if words[:2] == ["aiayn", "train"]]
    assert trained and all((tmp_path / name / "all_results.json").is_file() for name in trained), trained
    # Every `aiayn train` run of the page beats its baseline, or the page says, naming its folder, that it does not.
    said_not_to = {name for paragraph in (DOCS / page).read_text().split("\n\n") if "not beat" in paragraph
                   for name in re.findall(r"`([\w-]+)`", paragraph)}  # fmt: skip
    for results in tmp_path.rglob("all_results.json"):
        beats = json.loads(results.read_text()).get("eval_beats_baseline")
        if beats is not None:
            assert beats == (results.parent.name not in said_not_to), (results.parent.name, beats)


def test_the_site_builds_strictly_with_its_pages_and_the_generated_reference(site):
    pages = list(site.rglob("index.html"))
    assert len(pages) >= 10
    family_pages = {family: (site / "reference" / "models" / family / "index.html").read_text()
                    for family in ("encoder", "decoder", "seq2seq", "vision")}  # fmt: skip
    models = "".join(family_pages.values())
    configuration = (site / "reference" / "configuration" / "index.html").read_text()
    assert "AiaynDecoderForCausalLM" in models
    assert "sliding_window" in configuration and "position_embedding_type" in configuration
    assert "aiayn ablate" in (site / "reference" / "cli" / "index.html").read_text()
    train = (site / "reference" / "train" / "index.html").read_text()
    assert "question-answering" in train and "--label_column_name" in train and "--learning_rate" in train
    # The docstrings are parsed: each config field and each forward argument is an entry of its own, not a paragraph.
    assert {"d_model", "sliding_window", "position_embedding_type"} <= set(SECTION_ENTRY.findall(configuration))
    model_entries = SECTION_ENTRY.findall(models)
    assert {"labels", "skip_logits", "global_attention_mask", "input_ids"} <= set(model_entries)
    # The heads written once in heads_aiayn show their forward under each family's name, with the inputs that
    # family's base model takes: an encoder's global tokens, none for a causal decoder.
    assert 'id="aiayn.modeling_aiayn_encoder.AiaynEncoderForSequenceClassification.forward"' in models
    assert "global_attention_mask" in SECTION_ENTRY.findall(family_pages["encoder"])
    assert {"input_ids", "labels"} <= set(SECTION_ENTRY.findall(family_pages["decoder"]))
    assert "global_attention_mask" not in family_pages["decoder"]
    # Examples are code, not block quotes.
    functions = (site / "reference" / "functions" / "index.html").read_text()
    for page in (models, configuration, functions):
        assert "<blockquote>" not in page and "doctest:" not in page


def test_the_reference_parses_google_style_docstrings():
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    plugins = {name: options for plugin in site["plugins"] for name, options in
               (plugin.items() if isinstance(plugin, dict) else [(plugin, None)])}  # fmt: skip
    assert plugins["mkdocstrings"]["handlers"]["python"]["options"]["docstring_style"] == "google"


def modules_with_examples() -> list[str]:
    package = ROOT / "src" / "aiayn"
    files = (path for path in package.rglob("*.py") if ">>> " in path.read_text())
    return sorted(".".join(("aiayn", *path.relative_to(package).with_suffix("").parts)) for path in files)


@pytest.mark.parametrize("module", modules_with_examples())
def test_the_docstring_examples_run(module):
    """The `>>>` examples of the docstrings (examples that need a trained model or another package are code blocks
    instead, which the reference shows alike)."""
    results = doctest.testmod(importlib.import_module(module), raise_on_error=False)
    assert results.attempted and not results.failed, results
