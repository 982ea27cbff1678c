"""The configuration reference shows each config's real signature: the fields it declares, in order, with their
defaults as values (not the validator calls that declare them) and their types as Python builds them (not the
expressions that compute them), then `**kwargs`; each family's config lists every field it takes with its default,
linked to the field's description, as transformers' reference lists BertConfig's."""

import ast
import dataclasses
import inspect
import re
from html.parser import HTMLParser

import pytest

from aiayn import AiaynDecoderConfig, AiaynEncoderConfig, AiaynSeq2SeqConfig, AiaynVisionConfig

CONFIGS = (AiaynEncoderConfig, AiaynDecoderConfig, AiaynSeq2SeqConfig, AiaynVisionConfig)
STATIC_EXPRESSIONS = (
    "positive(",
    "non_negative(",
    "dropout_probability(",
    "tuple(ATTENTION_SCORES)",
    "*VARIANT_FIELDS",
)


class Signatures(HTMLParser):
    """The text of the signature (`div.doc-signature`) that follows each heading, by the heading's id."""

    def __init__(self):
        super().__init__()
        self.signatures: dict[str, str] = {}
        self.heading: str | None = None
        self.depth = 0  # of the open signature's divs, 0 outside one
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if re.fullmatch(r"h\d", tag) and attrs.get("id"):
            self.heading = attrs["id"]
        elif tag == "div" and self.depth:
            self.depth += 1
        elif tag == "div" and "doc-signature" in (attrs.get("class") or "").split() and self.heading:
            self.depth, self.text = 1, []

    def handle_endtag(self, tag):
        if tag == "div" and self.depth:
            self.depth -= 1
            if not self.depth:
                self.signatures.setdefault(self.heading, "".join(self.text))
                self.heading = None

    def handle_data(self, data):
        if self.depth:
            self.text.append(data)


@pytest.fixture(scope="module")
def signatures(site):
    parser = Signatures()
    parser.feed((site / "reference" / "configuration.html").read_text())
    return parser.signatures


CONFIG_CLASSES = sorted({cls for config in CONFIGS for cls in config.__mro__ if cls.__module__.startswith("aiayn.")
                         and dataclasses.is_dataclass(cls)}, key=lambda cls: cls.__name__)  # fmt: skip


@pytest.mark.parametrize("config", CONFIG_CLASSES, ids=lambda config: config.__name__)
def test_each_config_shows_the_fields_it_declares_with_their_defaults_then_kwargs(signatures, config):
    """Keywords only: the fields the class declares itself, in order, each with its default as a value, then
    `**kwargs`, which takes its bases' fields and `PreTrainedConfig`'s parameters."""
    rendered = signatures[f"{config.__module__}.{config.__name__}"]
    for expression in STATIC_EXPRESSIONS:
        assert expression not in rendered
    text = " ".join(rendered.split()).replace(", )", ")").replace("( ", "(").replace(" )", ")")
    assert text.startswith(f"{config.__name__}(") and text.endswith("**kwargs)"), text
    body = text[len(config.__name__) + 1 : -1].removesuffix("**kwargs").strip()
    own = vars(config).get("__annotations__", {})
    parameters = [parameter for parameter in inspect.signature(config).parameters.values() if parameter.name in own]
    declared = [parameter.name for parameter in parameters]
    assert body.startswith("*,") == bool(declared), text
    names = re.findall(r"(?<![\w.*])(\w+): ", body)
    assert names == declared, f"{config.__name__}'s signature names {names}, not the fields it declares {declared}"
    starts = [re.search(rf"(?<![\w.]){name}: ", body).start() for name in names]
    ends = [*starts[1:], len(body)][: len(starts)]
    for parameter, start, end in zip(parameters, starts, ends, strict=True):
        entry = body[start:end].strip().rstrip(",").strip()
        assert " = " in entry, f"{parameter.name} has no default in {entry!r}"
        default = entry.rsplit(" = ", 1)[1].rstrip(", *")
        assert ast.literal_eval(default) == parameter.default, (parameter.name, entry)


class FamilyFieldTables(HTMLParser):
    """The rows of the Field | Default tables of each config's entry: (field, its link, default), by the config."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, list[tuple[str, str | None, str]]] = {}
        self.heading: str | None = None
        self.cells: list[list[str]] | None = None
        self.link: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2" and attrs.get("id"):
            self.heading = attrs["id"]
        elif tag == "td" and attrs.get("data-label") == "Field":
            self.cells, self.link = [[]], None
        elif tag == "td" and attrs.get("data-label") == "Default" and self.cells is not None:
            self.cells.append([])
        elif tag == "a" and self.cells is not None and len(self.cells) == 1:
            self.link = attrs.get("href")

    def handle_endtag(self, tag):
        if tag == "tr" and self.cells is not None:
            name, default = ("".join(cell).strip() for cell in self.cells)
            self.rows.setdefault(self.heading, []).append((name, self.link, default))
            self.cells = None

    def handle_data(self, data):
        if self.cells:
            self.cells[-1].append(data)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda config: config.__name__)
def test_each_family_config_lists_every_field_with_its_default_linked_to_its_description(site, config):
    parser = FamilyFieldTables()
    parser.feed((site / "reference" / "configuration.html").read_text())
    rows = parser.rows[f"aiayn.configuration_aiayn.{config.__name__}"]
    fields = {field.name: field for field in dataclasses.fields(config)}
    aiayn_fields = [
        name
        for name in fields
        if any(
            name in vars(cls).get("__annotations__", {})
            for cls in config.__mro__
            if cls.__module__.startswith("aiayn.")
        )
    ]
    assert sorted(name for name, _, _ in rows) == sorted(aiayn_fields)
    for name, link, default in rows:
        assert ast.literal_eval(default) == fields[name].default, (name, default)
        # The link leads to the entry of the nearest class that declares the field (and so describes it); the
        # config's own fields are described in its own table, above.
        owner = next(cls for cls in config.__mro__ if name in vars(cls).get("__annotations__", {}))
        assert link == (None if owner is config else f"#{owner.__module__}.{owner.__name__}.{name}"), (
            name,
            link,
        )


class FieldRows(HTMLParser):
    """The rows of each Attributes table by the class they document: (name, default) from the first and last cells
    (the configs' tables name each field, its type, its meaning and its default)."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, list[tuple[str, str]]] = {}
        self.heading: str | None = None
        self.cells: list[list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if re.fullmatch(r"h\d", tag) and "doc-heading-attribute" not in (attrs.get("class") or ""):
            self.heading = attrs.get("id") or self.heading
        elif tag == "tr" and "doc-section-item" in (attrs.get("class") or ""):
            self.cells = []
        elif tag == "td" and self.cells is not None:
            self.cells.append([])

    def handle_endtag(self, tag):
        if tag == "tr" and self.cells is not None:
            if len(self.cells) == 4:
                name, default = ("".join(cell).replace("¶", "").strip() for cell in (self.cells[0], self.cells[-1]))
                self.rows.setdefault(self.heading, []).append((name, default))
            self.cells = None

    def handle_data(self, data):
        if self.cells:
            self.cells[-1].append(data)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda config: config.__name__)
def test_each_field_entry_shows_its_default(site, config):
    parser = FieldRows()
    parser.feed((site / "reference" / "configuration.html").read_text())
    fields = {field.name: field for field in dataclasses.fields(config)}
    # Each field's entry on the nearest class of the config's bases that has one (a family that changes a default
    # documents the field again), as a reader looking the field up from the config's own section finds it.
    entries: dict[str, str] = {}
    for cls in config.__mro__:
        for name, default in parser.rows.get(f"{cls.__module__}.{cls.__name__}", []):
            entries.setdefault(name, default)
    # Every field declared by aiayn's classes (not transformers' PreTrainedConfig) is an entry, with its default.
    declared = {name for cls in config.__mro__ if cls.__module__.startswith("aiayn.") for name in vars(cls)}
    assert set(entries) >= {name for name in fields if name in declared}
    for name in fields.keys() & entries.keys():
        assert ast.literal_eval(entries[name]) == fields[name].default, (config.__name__, name, entries[name])
