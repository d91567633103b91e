"""Every training plug-in, found rather than listed: importing this package imports each module in its folder
(losses, augmentations, negatives, weight hooks, heads; each registers its plug-ins with :mod:`cselab.registry`)
and each module a third-party package names in the entry-point group ``cselab.plugins``. An in-tree plug-in is
therefore one module dropped here, and a package's one line in its ``pyproject.toml``::

    [project.entry-points."cselab.plugins"]
    my_losses = "my_package.losses"

:func:`load_plugins` imports a method's own plug-in modules (its ``imports`` list). Poolers come with
:mod:`cselab.encoders`."""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from importlib.metadata import entry_points
from pathlib import Path

from cselab.errors import ConfigError
from cselab.files import clipped, shown

ENTRY_POINTS = "cselab.plugins"


def load_plugins(modules: list[str], where: str = "imports") -> None:
    """Import each module of a method's ``imports`` (its ``@register`` calls run then)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ConfigError(f"{where}: cannot import {shown(name)} ({clipped(err)}); is its folder on "
                              "PYTHONPATH?") from None
        except Exception as err:  # a plug-in module that raises, or does not parse, is the user's module to fix
            raise ConfigError(f"{where}: importing {shown(name)} failed: {type(err).__name__}: "
                              f"{clipped(err)}") from None


def _import_own(name: str) -> None:
    """Import a module of this folder; one that does not parse or raises (a user's module dropped here, a checkout
    with a broken edit) is a ConfigError naming its file and line, as a broken entry point is."""
    try:
        importlib.import_module(f"{__name__}.{name}")
    except Exception as err:
        where = next((frame for frame in reversed(traceback.extract_tb(err.__traceback__))
                      if frame.filename.startswith(__path__[0])), None)
        line = getattr(err, "lineno", None) if isinstance(err, SyntaxError) else where.lineno if where else None
        raise ConfigError(f"{Path(__path__[0]) / (name + '.py')}{f':{line}' if line else ''}: the plug-in module "
                          f"cannot be imported ({type(err).__name__}: {clipped(err)}); fix or remove it") from None


def discover() -> list[str]:
    """Import every module of this folder, then every module of the ``cselab.plugins`` entry points; returns the
    modules imported from entry points, each named in an error that says which package declared it."""
    for found in pkgutil.iter_modules(__path__):
        _import_own(found.name)
    loaded = []
    for entry in entry_points(group=ENTRY_POINTS):
        load_plugins([entry.value.split(":")[0]], f"entry point {entry.name} of "
                                                  f"{entry.dist.name if entry.dist else 'an installed package'}")
        loaded.append(entry.value)
    return loaded


discover()
