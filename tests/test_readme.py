"""README.md, the front door: it opens with the two commands, links every reference page of the documentation site,
and every relative link it holds leads to a file of the repository (as GitHub resolves it)."""

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# Markdown links `[text](target)` and `[text](target "title")`; images too.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
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
