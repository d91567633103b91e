"""Every training plug-in registered: importing this module imports each module that registers one (losses,
augmentations, negatives, weight hooks, heads; poolers come with :mod:`cselab.encoders`), and
:func:`load_plugins` imports a method's own plug-in modules (its ``imports`` list)."""

from __future__ import annotations

import importlib

from cselab.errors import ConfigError
from cselab.files import clipped, shown
from cselab.train import augmentations, hooks, loss_plugins, model, negatives  # noqa: F401  (they register)


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
