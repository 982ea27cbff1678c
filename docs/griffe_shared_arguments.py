"""A griffe extension: the models' constructors and forwards documented as Python documents them.

Each model class takes its family's config: its entry shows `config` typed with that config (the heads written once
for every family, in `aiayn.heads_aiayn`, are typed with the base `AiaynConfig` in the code) and describes it, as
transformers' reference describes its models' `config`.

`aiayn.docstrings_aiayn.shared_arguments` completes each forward's `Args:` section when the module is imported, which
griffe's static reading does not see: this extension gives each forward the docstring it has at run time. A family's
head that inherits its forward from the heads written once for every family (`aiayn.heads_aiayn`) gets its own copy
of it, without the attention patterns' inputs that its family's base model does not take (a decoder has no global
tokens), returning the family's output class."""

import importlib
import inspect
import re

import griffe
from griffe._internal.agents.inspector import _convert_parameter


def _runtime(obj: griffe.Object):
    try:
        return getattr(importlib.import_module(obj.module.path), obj.name)
    except (ImportError, AttributeError):
        return None


def _parsed_like(text: str, docstring: griffe.Docstring, parent: griffe.Function) -> griffe.Docstring:
    """A docstring of `text` for `parent`, parsed as its static `docstring` would be."""
    return griffe.Docstring(text, parent=parent, parser=docstring.parser, parser_options=docstring.parser_options)


def _without_arguments(docstring: str, names: set[str]) -> str:
    """`docstring` without the `Args:` entries of `names` (an entry's line and its more indented continuations)."""
    for name in names:
        docstring = re.sub(rf"^    {re.escape(name)}: .*\n(?:        .*\n)*", "", docstring, flags=re.M)
    return docstring


def _inputs_not_taken(runtime: type) -> set[str]:
    """The attention patterns' inputs that the base model of `runtime`'s family does not take."""
    from aiayn.attention_variants_aiayn import PATTERN_INPUTS

    base_name = getattr(runtime, "auto_classes", {}).get("AutoModel")
    base = getattr(inspect.getmodule(runtime), base_name or "", None)
    if base is None:
        return set()
    return set(PATTERN_INPUTS) - set(inspect.signature(base.forward).parameters)


def _document(cls: griffe.Class, package: griffe.Module) -> None:
    runtime = _runtime(cls)
    forward = getattr(runtime, "forward", None)
    if not (isinstance(runtime, type) and forward is not None and forward.__doc__):
        return
    docstring = inspect.cleandoc(forward.__doc__) + "\n"
    own = cls.members.get("forward")
    if own is not None and not own.is_alias:
        own.docstring = _parsed_like(docstring, own.docstring, own)
        return
    owner = next(klass for klass in runtime.__mro__ if "forward" in vars(klass))
    if not owner.__module__.startswith(package.path + "."):
        return
    inherited = package[f"{owner.__module__.removeprefix(package.path + '.')}.{owner.__name__}.forward"]
    not_taken = _inputs_not_taken(runtime)
    copy = griffe.Function(
        "forward",
        lineno=inherited.lineno,
        endlineno=inherited.endlineno,
        parameters=griffe.Parameters(*(p for p in inherited.parameters if p.name not in not_taken)),
        returns=runtime.output_class.__name__ if hasattr(runtime, "output_class") else inherited.returns,
        decorators=inherited.decorators,
    )
    copy.docstring = _parsed_like(_without_arguments(docstring, not_taken), inherited.docstring, copy)
    cls.set_member("forward", copy)


FROM_PRETRAINED = (
    "https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel.from_pretrained"
)


def _config_entry(config_class: type) -> list[str]:
    """The `Args:` entry of a model class's `config`."""
    path = f"{config_class.__module__}.{config_class.__qualname__}"
    return [
        f"    config: The model's configuration, a [`{config_class.__name__}`][{path}]: its architecture and sizes.",
        "        A model built from a config has newly initialised weights; "
        f"[`from_pretrained()`]({FROM_PRETRAINED}) loads a saved model's.",
    ]


def _describe_config(cls: griffe.Class, runtime: type, package: griffe.Module) -> None:
    """Gives model class `cls` an `__init__` whose `config` is typed with its family's config, and an `Args:` entry
    that describes `config` (in place of a shorter one of its own)."""
    from transformers import PreTrainedModel

    config_class = getattr(runtime, "config_class", None)
    if not (issubclass(runtime, PreTrainedModel) and config_class and config_class.__module__.startswith(package.path)
            and cls.docstring):  # fmt: skip
        return
    parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
    for parameter in list(inspect.signature(runtime.__init__).parameters.values())[1:]:
        converted = _convert_parameter(parameter, parent=cls)
        if parameter.name == "config":
            module = package[config_class.__module__.removeprefix(package.path + ".")]
            converted.annotation = griffe.ExprName(config_class.__name__, parent=module)
        parameters.append(converted)
    cls.set_member(
        "__init__",
        griffe.Function("__init__", lineno=0, endlineno=0, parameters=griffe.Parameters(*parameters), returns="None"),
    )
    head, marker, examples = cls.docstring.value.partition("\nExamples:\n")
    lines = head.rstrip().splitlines()
    if "Args:" in lines:
        start = lines.index("Args:")
        lines = _without_arguments("\n".join(lines) + "\n", {"config"}).rstrip("\n").splitlines()
        lines[start + 1 : start + 1] = _config_entry(config_class)
    else:
        lines += ["", "Args:", *_config_entry(config_class)]
    cls.docstring = _parsed_like("\n".join(lines) + "\n" + marker + examples, cls.docstring, cls)


class SharedArguments(griffe.Extension):
    """Gives each class's forward its run-time docstring, and each family head its own copy of an inherited forward."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        classes = []

        def visit(obj: griffe.Module | griffe.Class) -> None:
            for member in list(obj.members.values()):
                if member.is_alias:
                    continue
                if member.is_class:
                    classes.append(member)
                if member.is_module or member.is_class:
                    visit(member)

        visit(pkg)
        for cls in classes:
            _document(cls, pkg)
            runtime = _runtime(cls)
            if isinstance(runtime, type):
                _describe_config(cls, runtime, pkg)
