"""The configuration reference shows each config's real signature: every field `__init__` takes, in order, with its
default as a value (not the validator call that declares it) and its type as Python builds it (not the expression
that computes it), as transformers' reference shows BertConfig's."""

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
    parser.feed((site / "reference" / "configuration" / "index.html").read_text())
    return parser.signatures


@pytest.mark.parametrize("config", CONFIGS, ids=lambda config: config.__name__)
def test_each_config_shows_every_field_with_its_default_value(signatures, config):
    rendered = signatures[f"aiayn.configuration_aiayn.{config.__name__}"]
    for expression in STATIC_EXPRESSIONS:
        assert expression not in rendered
    text = " ".join(rendered.split())
    assert text.startswith(f"{config.__name__}(") and text.endswith(")")
    body = text[len(config.__name__) + 1 : -1].strip().removesuffix(",").removesuffix("**kwargs")
    # `@strict` configs take keywords only: the fields' and others (the aliases, such as `hidden_size`).
    assert body.startswith("*,") and text.endswith("**kwargs, )"), text
    parameters = list(inspect.signature(config).parameters.values())
    starts = []
    for parameter in parameters:
        match = re.search(rf"(?<![\w.]){parameter.name}: ", body)
        assert match, f"{parameter.name} is not in {config.__name__}'s signature"
        starts.append(match.start())
    assert starts == sorted(starts), f"{config.__name__}'s parameters are out of order"
    for parameter, start, end in zip(parameters, starts, [*starts[1:], len(body)], strict=True):
        entry = body[start:end].strip().rstrip(",").strip()
        assert " = " in entry, f"{parameter.name} has no default in {entry!r}"
        default = entry.rsplit(" = ", 1)[1].rstrip(", *")
        assert ast.literal_eval(default) == parameter.default, (parameter.name, entry)


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
    parser.feed((site / "reference" / "configuration" / "index.html").read_text())
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
