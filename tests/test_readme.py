"""README.md, the front door: it opens with the two commands, links every reference page of the documentation site,
every relative link it holds leads to a file of the repository (as GitHub resolves it), and the code it says runs
without aiayn runs where aiayn cannot be imported. (tests/test_docs.py runs its Python blocks with aiayn.)"""

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import torch
from helpers import hub_loading_environment

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# Markdown links `[text](target)` and `[text](target "title")`; images too.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
# Run after a block said to work without aiayn, in its process: the class and the logits of the model it loaded.
REMOTE_REPORT = """
import torch
print(type(reloaded).__module__.split(".")[0], type(reloaded).__name__)
with torch.no_grad():
    torch.save(reloaded(torch.load("prompt.pt")).logits, "remote_logits.pt")
"""
OPENING = (
    "# aiayn\n\n```bash\n"
    "make demo   # creates .venv, installs aiayn, trains the four families on real text and images, evaluates, saves,"
    " reloads\n"
    "make test   # creates .venv, installs aiayn with its test tools, runs ruff, builds the documentation, runs the"
    " tests\n"
    "```\n"
)


def targets() -> list[str]:
    text = re.sub(r"^```.*?^```", "", README.read_text(), flags=re.MULTILINE | re.DOTALL)  # links, not code
    return LINK.findall(text)


def relative_targets() -> list[str]:
    return [target for target in targets() if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", target)]


def test_the_readme_opens_with_make_demo_and_make_test():
    assert README.read_text().startswith(OPENING)


def test_the_readme_links_every_reference_page():
    linked = {(ROOT / unquote(target.split("#")[0])).resolve() for target in relative_targets()}
    pages = sorted((ROOT / "docs" / "reference").rglob("*.md"))
    assert pages
    missing = [str(page.relative_to(ROOT)) for page in pages if page.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_every_relative_link_of_the_readme_leads_to_a_file():
    found = relative_targets()
    assert found
    assert not [target for target in found if target.startswith("/")], "links must be relative to work on GitHub"
    broken = [target for target in found if not (ROOT / unquote(target.split("#")[0])).is_file()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_the_readmes_code_said_to_run_without_aiayn_runs_where_aiayn_cannot_be_imported(tmp_path, monkeypatch):
    """The blocks before it run here, as a reader runs them with aiayn; each block that says it runs without aiayn
    passes `trust_remote_code=True` and runs in a process where `import aiayn` fails and stdin is closed (a missing
    argument would ask, and fail), loading the folder's own classes, which give the saved model's logits exactly."""
    blocks = FENCE.findall(README.read_text())
    remote = [number for number, code in enumerate(blocks) if "without aiayn" in code]
    assert remote and all("trust_remote_code=True" in blocks[number] for number in remote)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for number, code in enumerate(blocks[: remote[0]]):
        exec(compile(code, f"README.md (block {number + 1})", "exec"), namespace)
    prompt = torch.tensor([[5, 17, 3, 99, 42, 8]])
    torch.save(prompt, "prompt.pt")
    with torch.no_grad():
        expected = namespace["gpt"].eval()(prompt).logits
    for number in remote:
        code = 'import sys\nsys.modules["aiayn"] = None\n' + blocks[number] + REMOTE_REPORT
        result = subprocess.run([sys.executable, "-c", code], env=hub_loading_environment(tmp_path),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.splitlines()[-1].split() == ["transformers_modules", "AiaynDecoderForCausalLM"]
        assert torch.equal(torch.load("remote_logits.pt"), expected)
