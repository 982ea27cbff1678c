"""A griffe extension: the configs' signatures, field tables and aliases as Python builds them.

The configs are dataclasses that griffe cannot read statically: `@strict` (huggingface_hub) makes them dataclasses,
their fields' defaults are validator calls (`positive(default=None)`), their bases are computed
(`AttentionFields(*VARIANT_FIELDS)`) and some Literal types are too (`Literal[tuple(ATTENTION_SCORES)]`). For each
class of the package that is a dataclass at run time, this extension imports it and gives it:

- an `__init__` with the fields the class declares itself, keyword-only with their defaults as values, then
  `**kwargs`, which takes the fields of its bases and `PreTrainedConfig`'s parameters (as transformers' own configs
  pass theirs on);
- for the fields it declares, their run-time types and defaults (the Attributes table's Default column);
- for each transformers name of a field (`attribute_map`: `hidden_size` for `d_model`), an entry of its own, so that
  the reference and its search know the name;
- for a family's config (one with a `model_type`), a table of every field it takes with this family's default,
  grouped by the class that declares and describes it, each linked to its description (an anchor of the page, which
  documents every config; the site's hooks keep such links as written).
"""

import dataclasses
import importlib
import inspect

import griffe
from griffe._internal.agents.inspector import _convert_object_to_annotation, _convert_parameter

PRETRAINED_CONFIG = "https://huggingface.co/docs/transformers/main_classes/configuration#transformers.PreTrainedConfig"


def _runtime_class(cls: griffe.Class):
    try:
        return getattr(importlib.import_module(cls.module.path), cls.name)
    except (ImportError, AttributeError):
        return None


def _default_text(field: dataclasses.Field) -> str | None:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return f"{getattr(field.default_factory, '__name__', 'factory')}()"
    return None


def _declared(runtime: type) -> list[str]:
    """The fields `runtime` declares itself, in order (a family that changes a default declares the field again)."""
    return list(vars(runtime).get("__annotations__", {}))


def _declaring_class(runtime: type, name: str, package: str) -> type | None:
    """The nearest class of `runtime`'s bases, in `package`, that declares the field `name`; None for transformers'."""
    owners = (cls for cls in runtime.__mro__ if cls.__module__.startswith(package + ".") and name in _declared(cls))
    return next(owners, None)


def _signature(cls: griffe.Class, runtime: type) -> None:
    """`__init__(self, *, <the fields the class declares>, **kwargs)`, with the run-time types and defaults."""
    own = set(_declared(runtime))
    parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
    for parameter in inspect.signature(runtime).parameters.values():
        if parameter.name in own:
            converted = _convert_parameter(parameter, parent=cls)
            converted.kind = griffe.ParameterKind.keyword_only
            parameters.append(converted)
    parameters.append(griffe.Parameter("kwargs", kind=griffe.ParameterKind.var_keyword))
    cls.set_member(
        "__init__",
        griffe.Function("__init__", lineno=0, endlineno=0, parameters=griffe.Parameters(*parameters), returns="None"),
    )


def _rewrite_docstring(cls: griffe.Class, text: str) -> None:
    """Gives `cls` the docstring `text`, parsed as its own docstring is."""
    cls.docstring = griffe.Docstring(
        text, parent=cls, parser=cls.docstring.parser, parser_options=cls.docstring.parser_options
    )


def _with_text(cls: griffe.Class, text: str) -> None:
    """Adds `text` to `cls`'s docstring, before its Examples when it has any."""
    head, marker, examples = cls.docstring.value.partition("\nExamples:\n")
    _rewrite_docstring(cls, f"{head.rstrip()}\n\n{text}\n{marker}{examples}")


def _aliases(cls: griffe.Class, runtime: type) -> None:
    """An Attributes entry, and a member, for each transformers name of a field that the class maps itself."""
    aliases = vars(runtime).get("attribute_map", {})
    if not aliases:
        return
    entries = []
    for alias, field in aliases.items():
        target = f"{cls.path}.{field}"
        link = f"[`{field}`](#{target})"
        entries.append(
            f"    {alias}: transformers' name of {link}: accepted by the constructor, read and set as `{field}`."
        )
        member = griffe.Attribute(alias, lineno=0, endlineno=0)
        member.labels.add("alias")
        cls.set_member(alias, member)
    docstring = cls.docstring.value
    head, marker, rest = docstring.partition("\nExamples:\n")
    lines = head.rstrip().splitlines()
    start = lines.index("Attributes:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    lines[end:end] = entries
    _rewrite_docstring(cls, "\n".join(lines) + "\n" + marker + rest)


def _field_table(runtime: type, package: str) -> str:
    """Every field `runtime` takes with its default, grouped by the class that describes it, then transformers'."""
    groups: dict[type, list[str]] = {cls: [] for cls in runtime.__mro__}  # the nearest class first
    inherited: list[str] = []
    for field in dataclasses.fields(runtime):
        owner = _declaring_class(runtime, field.name, package)
        if owner is None:
            inherited.append(f"`{field.name}`")
            continue
        # The class's own fields are described in its Attributes table, above; the others link to their entries.
        name = (
            f"`{field.name}`"
            if owner is runtime
            else f"[`{field.name}`](#{owner.__module__}.{owner.__qualname__}.{field.name})"
        )
        groups[owner].append(f"| {name} | `{_default_text(field)}` |")
    sections = [f"**Fields.** `{runtime.__name__}` takes these fields, as keywords, with these defaults; each links "
                "to its description."]  # fmt: skip
    for owner, rows in groups.items():
        if not rows:
            continue
        path = f"{owner.__module__}.{owner.__qualname__}"
        title = "Its own, described above" if owner is runtime else f"Described by [`{owner.__name__}`][{path}]"
        sections.append(f"{title}:\n\n| Field | Default |\n| --- | --- |\n" + "\n".join(rows))
    sections.append(f"And transformers' [`PreTrainedConfig`]({PRETRAINED_CONFIG}) parameters, through `**kwargs`: "
                    + ", ".join(inherited) + ".")  # fmt: skip
    return "\n\n".join(sections)


def _document(cls: griffe.Class, package: str) -> None:
    runtime = _runtime_class(cls)
    if not (isinstance(runtime, type) and dataclasses.is_dataclass(runtime)):
        return
    _signature(cls, runtime)
    cls.labels.add("dataclass")
    if any(str(base).startswith("*") for base in cls.bases):  # computed bases: `AttentionFields(*VARIANT_FIELDS)`
        cls.bases = [griffe.ExprName(base.__name__, parent=cls) for base in runtime.__bases__]
    for field in dataclasses.fields(runtime):
        member = cls.members.get(field.name)
        if member is None or member.is_alias or not member.is_attribute:
            continue
        member.annotation = _convert_object_to_annotation(field.type, parent=cls, member=field.name)
        member.value = _default_text(field)
    _aliases(cls, runtime)
    if getattr(runtime, "model_type", ""):
        _with_text(cls, _field_table(runtime, package))


class ConfigSignatures(griffe.Extension):
    """Gives each run-time dataclass of a package its run-time `__init__`, its fields' types and defaults, its fields'
    transformers names and, for a family's config, the table of every field it takes."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        def visit(obj: griffe.Module | griffe.Class, seen: set[str]) -> None:
            if obj.path in seen:
                return
            seen.add(obj.path)
            if obj.is_class:
                _document(obj, pkg.path)
            for member in list(obj.members.values()):
                if not member.is_alias and (member.is_module or member.is_class):
                    visit(member, seen)

        visit(pkg, set())
