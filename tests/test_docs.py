"""The documentation site: it builds with `--strict`, and its examples run. Every Python block of every page (and
of README.md) runs here, the blocks of a page in order in one namespace, in a folder of their own (pages say where
they shrink a model or a run to test sizes); every command of the shell blocks of the tutorials and of the
getting-started page runs, in order, in a folder of their own, but for the commands run elsewhere
(`COVERED_ELSEWHERE`): `make test` is what CI runs (.ci/run); `make demo` installs the `demo` extra, as
tests/test_extras.py does, and runs `aiayn demo`, whose stages tests/test_demo.py runs at test size; the `pip install`
lines of the getting-started page and of README.md run as printed in tests/test_extras.py, each in a fresh virtual
environment with that extra alone, and the pages' commands after them run there as console scripts, `aiayn train
--help` among them (README.md's Install block, in the `train` extra's environment). `aiayn` commands run in this
process as the console script runs them (`aiayn.cli.main`), `python -c` code as Python runs it; the console script
itself runs in a shell in test_train_command.py and tests/test_extras.py."""

import doctest
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import hub_loading_environment

from aiayn import cli

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_PAGES = ("getting-started.md", "tutorials/")
COVERED_ELSEWHERE = ("make ", "pip install")
# The name of each entry of the reference's tables (or lists) of parameters and fields, as mkdocstrings writes them.
SECTION_ENTRY = re.compile(
    r'<(?:tr|li) class="doc-section-item[^"]*">\s*(?:<td[^>]*>)?\s*(?:<h\d[^>]*>)?\s*(?:<b>)?<code>'
    r"(?:<span[^>]*>)?([\w*]+)"
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
    fences = FENCE.findall((DOCS / page).read_text())
    try:
        for number, (language, code) in enumerate(fences):
            if language != "python":
                continue
            if WITHOUT_AIAYN.search(code):
                printed = run_without_aiayn(code, tmp_path)
                shown = fences[number + 1] if number + 1 < len(fences) else None
                if shown and shown[0] == "text":
                    assert printed == shown[1], (printed, shown[1])
            else:
                exec(compile(code, f"{page} (block {number + 1})", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)


# A block that says, in a comment, that it runs without aiayn.
WITHOUT_AIAYN = re.compile(r"#.*\bwithout aiayn\b")


def run_without_aiayn(code: str, folder: Path) -> str:
    """`code` in a fresh process where `import aiayn` fails, in `folder`, with stdin closed (a `from_pretrained` of a
    folder with code but without `trust_remote_code=True` asks, and then fails): what it prints."""
    assert "trust_remote_code=True" in code, code
    result = subprocess.run([sys.executable, "-c", 'import sys\nsys.modules["aiayn"] = None\n' + code],
                            cwd=folder, env=hub_loading_environment(folder), stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def shell_commands(
    page: str, covered_elsewhere: tuple[str, ...] = COVERED_ELSEWHERE, holding: str = ""
) -> list[list[str]]:
    """The commands of the page's shell blocks (those holding `holding`), each as its words (lines joined where they
    end in a backslash), without comments and without the commands that start with one of `covered_elsewhere`."""
    text = "\n".join(block for block in blocks(DOCS / page, "bash") if holding in block).replace("\\\n", " ")
    commands = (shlex.split(line, comments=True) for line in text.splitlines())
    return [words for words in commands if words and not " ".join(words).startswith(covered_elsewhere)]


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
    trained = [words[words.index("--output_dir") + 1] for words in commands
               if words[:2] == ["aiayn", "train"] and "--output_dir" in words]  # fmt: skip
    assert trained and all((tmp_path / name / "all_results.json").is_file() for name in trained), trained
    # Every `aiayn train` run of the page beats its baseline, or the page says, naming its folder, that it does not.
    said_not_to = {name for paragraph in (DOCS / page).read_text().split("\n\n") if "not beat" in paragraph
                   for name in re.findall(r"`([\w-]+)`", paragraph)}  # fmt: skip
    for results in tmp_path.rglob("all_results.json"):
        beats = json.loads(results.read_text()).get("eval_beats_baseline")
        if beats is not None:
            assert beats == (results.parent.name not in said_not_to), (results.parent.name, beats)


def test_the_site_builds_strictly_with_its_pages_and_the_generated_reference(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 10
    family_pages = {family: (site / "reference" / "models" / f"{family}.html").read_text()
                    for family in ("encoder", "decoder", "seq2seq", "vision")}  # fmt: skip
    models = "".join(family_pages.values())
    configuration = (site / "reference" / "configuration.html").read_text()
    assert "AiaynDecoderForCausalLM" in models
    assert "sliding_window" in configuration and "position_embedding_type" in configuration
    assert "aiayn ablate" in (site / "reference" / "cli.html").read_text()
    train = (site / "reference" / "train.html").read_text()
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
    functions = (site / "reference" / "functions.html").read_text()
    for page in (models, configuration, functions):
        assert "<blockquote>" not in page and "doctest:" not in page
    # The helpers and the pipeline class have entries of their own.
    for name in ("aiayn.tokenization.train_tokenizer", "aiayn.tokenization.config_token_fields",
                 "aiayn.data.load_corpus", "aiayn.tasks.blocks.group_texts", "aiayn.hub.model_card",
                 "aiayn.pipeline_aiayn.AiaynText2TextGenerationPipeline"):  # fmt: skip
        assert f'id="{name}"' in functions, name


ENTRY = re.compile(r'<h2 id="(aiayn\.[\w.]+)" class="doc doc-heading">(.*?)(?=<h2 id="aiayn\.|\Z)', re.DOTALL)


def test_every_model_class_describes_its_config_typed_with_its_familys(site):
    """Every model class's entry says what `config` is and links `from_pretrained`, with the type its family's config
    (the heads written once for every family, in heads_aiayn, are typed with the base config in the code)."""
    import aiayn

    from_pretrained = "main_classes/model#transformers.PreTrainedModel.from_pretrained"
    checked = set()
    for family in ("encoder", "decoder", "seq2seq", "vision"):
        html = (site / "reference" / "models" / f"{family}.html").read_text()
        for path, entry in ENTRY.findall(html):
            runtime = getattr(aiayn, path.rsplit(".", 1)[1], None)
            if not (isinstance(runtime, type) and issubclass(runtime, aiayn.AiaynPreTrainedModel)):
                continue
            config = runtime.config_class.__name__
            signature = re.sub(r"<[^>]+>", "", entry.split('class="doc doc-contents')[0])
            assert re.search(rf"config: {config}\b", signature), (path, signature)
            rows = SECTION_ENTRY.findall(entry)
            assert "config" in rows, path
            assert "The model&#39;s configuration" in entry or "The model's configuration" in entry, path
            assert from_pretrained in entry, path
            checked.add(path)
    pages = "".join((DOCS / "reference" / "models" / f"{family}.md").read_text()
                    for family in ("encoder", "decoder", "seq2seq", "vision"))  # fmt: skip
    listed = {path for path in re.findall(r"^::: (aiayn\.[\w.]+)$", pages, re.M)
              if issubclass(getattr(aiayn, path.rsplit(".", 1)[1], object), aiayn.AiaynPreTrainedModel)}  # fmt: skip
    assert len(listed) >= 23 and checked == listed


def test_transformers_names_link_to_transformers_documentation(site):
    link = re.compile(r'href="(https://huggingface\.co/docs/transformers/[^"]+)"')
    links = [found for page in site.rglob("*.html") for found in link.findall(page.read_text())]
    assert len(links) >= 40
    linked = {link.split("#")[1] for link in links}
    assert {"transformers.PreTrainedModel", "transformers.PreTrainedConfig", "transformers.GenerationMixin.generate",
            "transformers.Trainer", "transformers.pipeline", "transformers.AutoTokenizer",
            "transformers.modeling_outputs.MaskedLMOutput"} <= linked  # fmt: skip
    # Each anchor names what transformers exports.
    # Each anchor names what transformers has: a module's class, or a class's method.
    assert all(resolves(anchor) for anchor in linked), sorted(anchor for anchor in linked if not resolves(anchor))


def resolves(dotted: str) -> bool:
    """Whether `dotted` names an object: its longest importable module, then attributes."""
    import importlib

    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for name in parts[end:]:
            found = getattr(found, name, None)
        return found is not None
    return False


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
