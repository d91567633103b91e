"""The errors cselab raises for a user's mistakes (bad config, missing or malformed data, unusable model).

The command line prints a :class:`CselabError` as one line and exits with status 2; any other exception is a
bug in cselab and keeps its traceback (``cselab --debug`` shows the traceback of both). Each class also derives
from the built-in exception its case matches, so ``except ValueError`` keeps working for library callers.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CselabError(Exception):
    """A mistake the user can fix: the message says what and where."""


class ConfigError(CselabError, ValueError):
    """A config key, value, preset, profile or command-line option that is not valid."""


class DataError(CselabError):
    """Data that is missing or cannot be used."""


class ModelError(CselabError, OSError):
    """A model spec that names nothing loadable."""


class TrainingError(CselabError, RuntimeError):
    """Training cannot go on (a diverged loss, an unusable cache, a launch that does not add up)."""


class PluginError(CselabError, TypeError):
    """A plug-in gave what its kind does not take (:mod:`cselab.boundary`), or broke its contract where it is
    registered."""


class ExternalToolError(CselabError, RuntimeError):
    """A tool or service cselab calls (apertium, the Hugging Face hub) failed."""


def did_you_mean(word: object, choices: Iterable[str], n: int = 3) -> str:
    """``" (did you mean 'x'?)"`` naming the ``n`` choices closest to ``word`` (difflib's close matches), or ``""``."""
    close = difflib.get_close_matches(str(word), list(choices), n=n, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
