"""The documentation site: it builds with `--strict`, and its examples run. Every Python block of every page (and
of README.md) runs here, the blocks of a page in order in one namespace, in a folder of their own (pages say where
they shrink a model or a run to test sizes); every shell block of the tutorials and of the getting-started page runs
in a shell, but for the commands this suite or CI runs anyway (`make test` is CI's command; `make demo` runs
`aiayn demo`, which `tests/test_demo.py` runs at `--quick` size; `pip install` is what the Makefile does)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_PAGES = ("getting-started.md", "tutorials/")
COVERED_ELSEWHERE = ("make ", "pip install")


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


@pytest.mark.parametrize("page", pages_with("bash", SHELL_PAGES))
def test_the_shell_commands_of_each_tutorial_run(page, tmp_path):
    lines = [
        line
        for code in blocks(DOCS / page, "bash")
        for line in code.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", *COVERED_ELSEWHERE))
    ]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                   "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    script = "set -euo pipefail\n" + "\n".join(lines)
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True,
                            timeout=1200)  # fmt: skip
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-4000:])


def test_the_site_builds_strictly_with_its_pages_and_the_generated_reference(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    pages = list(tmp_path.rglob("index.html"))
    assert len(pages) >= 10
    models = (tmp_path / "reference" / "models" / "index.html").read_text()
    configuration = (tmp_path / "reference" / "configuration" / "index.html").read_text()
    assert "AiaynDecoderForCausalLM" in models
    assert "sliding_window" in configuration and "position_embedding_type" in configuration
    assert "aiayn ablate" in (tmp_path / "reference" / "cli" / "index.html").read_text()
    train = (tmp_path / "reference" / "train" / "index.html").read_text()
    assert "question-answering" in train and "--label_column_name" in train and "--learning_rate" in train
