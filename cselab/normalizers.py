"""How a sentence becomes the words MER aligns (:mod:`cselab.mer`): ``"lower"`` (the default) lower-cases and splits
on whitespace, ``"none"`` only splits, ``"lower_nopunct"`` also drops punctuation; any callable ``str -> list[str]``
works too. Kept apart from the MER code so that the CLI offers the names without loading it."""

from __future__ import annotations

import re
from collections.abc import Callable

from cselab.errors import ConfigError

Normalizer = Callable[[str], list[str]]
_PUNCTUATION = re.compile(r"[^\w\s]")

NORMALIZERS: dict[str, Normalizer] = {
    "lower": lambda text: text.lower().split(),
    "none": str.split,
    "lower_nopunct": lambda text: _PUNCTUATION.sub(" ", text.lower()).split(),
}


def normalizer(name_or_function: str | Normalizer = "lower") -> Normalizer:
    """The tokeniser a name stands for (``lower``, ``none``, ``lower_nopunct``), or the callable itself."""
    if callable(name_or_function):
        return name_or_function
    try:
        return NORMALIZERS[name_or_function]
    except KeyError:
        raise ConfigError(f"Unknown MER normalisation {name_or_function!r}; "
                         f"choose one of {', '.join(NORMALIZERS)}") from None
