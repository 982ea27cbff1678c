"""The reference pages as a reader sees them: each Returns, Raises or Yields section of a docstring is one entry (a
Google-style entry's continuation lines are indented under it; unindented, each line renders as another row that
repeats the type), and the tables wrap within the page (no cell is kept from wrapping by the stylesheet)."""

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
ONE_ENTRY_SECTIONS = ("Returns:", "Raises:", "Yields:")


class SectionParser(HTMLParser):
    """The sections of a mkdocstrings page (`docstring_section_style: table`): for each, its title, the id of the
    object it documents, and its entries (rows of class `doc-section-item`) as (type, description) texts."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[dict] = []
        self.heading = ""  # the id of the last heading with one: the documented object
        self.title: list[str] | None = None  # the text of a section title being read
        self.pending: dict | None = None  # a section whose title is read, whose table has not ended
        self.depth = 0  # tables open inside the pending section's table
        self.cell: list[str] | None = None
        self.row: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if re.fullmatch(r"h[1-6]", tag) and attributes.get("id"):
            self.heading = attributes["id"]
        elif tag == "span" and "doc-section-title" in classes:
            self.title = []
        elif self.pending is not None and tag == "table":
            self.depth += 1
        elif self.pending is not None and self.depth == 1 and tag == "tr" and "doc-section-item" in classes:
            self.row = []
        elif self.row is not None and self.depth == 1 and tag == "td":
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "span" and self.title is not None:
            title = "".join(self.title).strip()
            self.title = None
            self.pending = {"title": title, "object": self.heading, "items": []}
            self.sections.append(self.pending)
        elif self.pending is not None and tag == "table":
            self.depth -= 1
            if self.depth == 0:
                self.pending = None
        elif self.cell is not None and tag == "td":
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif self.row is not None and tag == "tr":
            self.pending["items"].append(tuple(self.row))
            self.row = None

    def handle_data(self, data):
        if self.title is not None:
            self.title.append(data)
        if self.cell is not None:
            self.cell.append(data)


def sections_of(page: Path) -> list[dict]:
    parser = SectionParser()
    parser.feed(page.read_text())
    parser.close()
    return parser.sections


@pytest.fixture(scope="module")
def reference_pages(site) -> dict[str, list[dict]]:
    pages = sorted((site / "reference").rglob("*.html"))
    assert len(pages) >= 3
    return {str(page.relative_to(site)): sections_of(page) for page in pages}


def test_the_parser_finds_the_sections_of_the_reference(reference_pages):
    # A test that found no sections would pass for the wrong reason: the pages document parameters and returns.
    every = [section for sections in reference_pages.values() for section in sections]
    titles = {section["title"] for section in every}
    assert {"Parameters:", "Returns:", "Raises:"} <= titles
    returns = [section for section in every if section["title"] == "Returns:"]
    assert returns and all(section["items"] for section in returns)


def test_each_returns_raises_and_yields_section_is_one_entry_per_type(reference_pages):
    # Every function here returns (or yields) one thing: its section is one entry. A Raises section may name several
    # exceptions, each once; a type that comes back row after row is an entry split at its unindented lines.
    split = [
        (page, section["object"], section["title"], section["items"])
        for page, sections in reference_pages.items()
        for section in sections
        if section["title"] in ONE_ENTRY_SECTIONS
        and (
            len(section["items"]) > 1
            if section["title"] in ("Returns:", "Yields:")
            else len({item[0] for item in section["items"]}) < len(section["items"])
        )
    ]
    assert not split, "\n".join(map(str, split))


def test_the_tables_may_wrap():
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)
    rules = re.findall(r"([^{}]+)\{([^{}]*)\}", css)
    assert rules
    for selectors, body in rules:
        declarations = {
            name.strip().lower(): value.strip().lower()
            for name, _, value in (line.partition(":") for line in body.split(";"))
            if value.strip()
        }
        on_cells = any(re.search(r"\b(td|th|table)\b", selector) for selector in selectors.split(","))
        if on_cells:
            assert declarations.get("white-space", "normal").split()[0] not in ("nowrap", "pre"), selectors.strip()
    # Long code spans in cells (dotted names, shapes) may break rather than push the table past the page's edge.
    cell_code = [body for selectors, body in rules if re.search(r"\btd\b[^,]*\bcode\b", selectors)]
    assert any(re.search(r"overflow-wrap\s*:\s*anywhere", body) for body in cell_code)


class FlagTables(HTMLParser):
    """The `aiayn train` reference: for each section (`h2` or `h3`), the rows of its flag tables as (anchor id, flag
    names)."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[tuple[str | None, list[str]]]] = {}
        self.section: str | None = None
        self.cell: dict | None = None  # the first cell of a body row: its anchor and code texts
        self.column = 0
        self.code: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h2", "h3"):
            self.section = attrs.get("id")
            self.sections.setdefault(self.section, [])
        elif tag == "tr":
            self.column = 0
        elif tag == "td":
            self.column += 1
            if self.column == 1:
                self.cell = {"anchor": None, "flags": []}
        elif tag == "a" and self.cell is not None and "id" in attrs:
            self.cell["anchor"] = attrs["id"]
        elif tag == "code" and self.cell is not None:
            self.code = []

    def handle_endtag(self, tag):
        if tag == "code" and self.code is not None and self.cell is not None:
            self.cell["flags"].append("".join(self.code))
            self.code = None
        elif tag == "td" and self.cell is not None and self.column == 1:
            self.sections[self.section].append((self.cell["anchor"], self.cell["flags"]))
            self.cell = None

    def handle_data(self, data):
        if self.code is not None:
            self.code.append(data)


def test_every_flag_of_the_train_reference_has_an_anchor_and_one_row_per_section(site):
    import dataclasses

    import transformers

    from aiayn.tasks import TASKS
    from aiayn.train_arguments import (
        OBSOLETE_TRAINING_FLAGS,
        RENAMED_TRAINING_FLAGS,
        ObsoleteFlag,
        RefusedFlag,
        task_parser,
    )

    parser = FlagTables()
    parser.feed((site / "reference" / "train.html").read_text())
    sections = parser.sections
    assert set(TASKS) <= set(sections)
    anchors = []
    for section, rows in sections.items():
        names = [row[1][0] for row in rows if row[1]]
        assert len(names) == len(set(names)), (section, sorted(name for name in names if names.count(name) > 1))
        anchors += [row[0] for row in rows]
    assert None not in anchors and len(anchors) == len(set(anchors))
    # Each task's flags are in the sections of every task or in its own, each written once (no dashed twin);
    # transformers' training flags are linked to, not repeated.
    shared = {flag for section in ("model-flags", "data-flags-of-every-task") for _, flags in sections[section]
              for flag in flags}  # fmt: skip
    training = {field.name for field in dataclasses.fields(transformers.Seq2SeqTrainingArguments)}
    for task in TASKS:
        own = {flag for _, flags in sections[task] for flag in flags}
        assert not any("-" in flag[2:] for flag in own | shared)
        accepted = {
            f"--{action.dest}"
            for action in task_parser(task)._actions
            if action.option_strings
            and action.dest not in training | {"help"}
            and not isinstance(action, (RefusedFlag, ObsoleteFlag))
            and not action.option_strings[0].startswith("--no_")
        }
        assert accepted and accepted - own - shared == set(), task
    # transformers 4's training flags, each in its table with its new name, or why it changes nothing or is refused.
    listed = {flag for _, flags in sections["training-flags-of-transformers-4"] for flag in flags}
    assert listed == {f"--{flag}" for flag in (*RENAMED_TRAINING_FLAGS, *OBSOLETE_TRAINING_FLAGS, "logging_dir")}
