"""A griffe extension: the configs' signatures as Python builds them.

The configs are dataclasses that griffe cannot read statically: `@strict` (huggingface_hub) makes them dataclasses,
their fields' defaults are validator calls (`positive(default=None)`), their bases are computed
(`AttentionFields(*VARIANT_FIELDS)`) and some Literal types are too (`Literal[tuple(ATTENTION_SCORES)]`). For each
class of the package that is a dataclass at run time, this extension imports it and gives it the `__init__` that
`dataclasses` generated (every field, with its default as a value) and, for the fields the class declares, the
type and default of the field."""

import dataclasses
import importlib
import inspect

import griffe
from griffe._internal.agents.inspector import _convert_object_to_annotation, _convert_parameter


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


def _document(cls: griffe.Class) -> None:
    runtime = _runtime_class(cls)
    if not (isinstance(runtime, type) and dataclasses.is_dataclass(runtime)):
        return
    signature = inspect.signature(runtime)
    parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
    fields = [_convert_parameter(parameter, parent=cls) for parameter in signature.parameters.values()]
    wrapper = inspect.signature(runtime.__init__, follow_wrapped=False).parameters.values()
    if {parameter.kind for parameter in wrapper} >= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        # `@strict(accept_kwargs=True)`: keywords only, the fields' and others (aliases such as `hidden_size`).
        for field in fields:
            field.kind = griffe.ParameterKind.keyword_only
        fields.append(griffe.Parameter("kwargs", kind=griffe.ParameterKind.var_keyword))
    parameters += fields
    cls.set_member(
        "__init__",
        griffe.Function("__init__", lineno=0, endlineno=0, parameters=griffe.Parameters(*parameters), returns="None"),
    )
    cls.labels.add("dataclass")
    if any(str(base).startswith("*") for base in cls.bases):  # computed bases: `AttentionFields(*VARIANT_FIELDS)`
        cls.bases = [griffe.ExprName(base.__name__, parent=cls) for base in runtime.__bases__]
    for field in dataclasses.fields(runtime):
        member = cls.members.get(field.name)
        if member is None or member.is_alias or not member.is_attribute:
            continue
        member.annotation = _convert_object_to_annotation(field.type, parent=cls, member=field.name)
        member.value = _default_text(field)


class ConfigSignatures(griffe.Extension):
    """Gives each run-time dataclass of a package its run-time `__init__` and its fields' types and defaults."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        def visit(obj: griffe.Module | griffe.Class, seen: set[str]) -> None:
            if obj.path in seen:
                return
            seen.add(obj.path)
            if obj.is_class:
                _document(obj)
            for member in list(obj.members.values()):
                if not member.is_alias and (member.is_module or member.is_class):
                    visit(member, seen)

        visit(pkg, set())
