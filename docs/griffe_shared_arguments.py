"""A griffe extension: the models' forwards documented as Python documents them.

`aiayn.docstrings_aiayn.shared_arguments` completes each forward's `Args:` section when the module is imported, which
griffe's static reading does not see: this extension gives each forward the docstring it has at run time. A family's
head that inherits its forward from the heads written once for every family (`aiayn.heads_aiayn`) gets its own copy
of it, without the attention patterns' inputs that its family's base model does not take (a decoder has no global
tokens), returning the family's output class."""

import importlib
import inspect
import re

import griffe


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
