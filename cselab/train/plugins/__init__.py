"""Every training plug-in, found rather than listed: :func:`cselab.registry.discover` imports each module in this
folder (losses, augmentations, negatives, weight hooks, heads; each registers its plug-ins with
:mod:`cselab.registry`) and each module a third-party package names in the entry-point group
``cselab.train_plugins``. An in-tree plug-in is therefore one module dropped here, and a package's one line in its
``pyproject.toml``::

    [project.entry-points."cselab.train_plugins"]
    my_losses = "my_package.losses"

:func:`load_plugins` imports a method's own plug-in modules (its ``imports`` list)."""

from __future__ import annotations

import importlib

from cselab.errors import ConfigError
from cselab.files import clipped, shown


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
