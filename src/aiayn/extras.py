"""The libraries of the package's extras, imported where they are used: a missing one is a `MissingExtra` (an
`ImportError`) that says what needs it and which extra installs it (`pip install 'aiayn[train]'`, `'aiayn[demo]'`,
`'aiayn[plot]'`)."""

import importlib
import importlib.metadata


class MissingExtra(ImportError):
    """A library of one of the package's extras is not installed; the message names the extra."""


def _missing(package: str, needed_for: str, extra: str) -> MissingExtra:
    return MissingExtra(f"{needed_for} needs {package}: pip install 'aiayn[{extra}]'.")


def extra_module(module: str, package: str, needed_for: str, extra: str):
    """`module`, imported, or a `MissingExtra` naming `package` (what pip installs it as) and the `extra` with it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise _missing(package, needed_for, extra) from error


def extra_distribution(package: str, needed_for: str, extra: str) -> importlib.metadata.Distribution:
    """The installed distribution `package` (to read its data files), or a `MissingExtra` naming its `extra`."""
    try:
        return importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError as error:
        raise _missing(package, needed_for, extra) from error
