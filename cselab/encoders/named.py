"""Named encodings: sentence vectors a decoder LM gives without training, each as its paper's released evaluation
makes them (``probe run --model DECODER --encoding NAME``), read from named_encodings.yaml beside this module: the
source cited, and settings of :class:`~cselab.encoders.encoding.Encoding` (a list of prompts: the mean of the
vectors under each template, :class:`~cselab.encoders.template_mean.TemplateMean`). Settings given beside the name
(``--pooler``, ``--prompt``, ``--layer`` ...) replace its values.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from cselab.errors import ConfigError, did_you_mean
from cselab.files import read_yaml

FILE = resources.files("cselab.encoders").joinpath("named_encodings.yaml")


#: name -> the Encoding settings it stands for (the file read as written: :func:`named_encoding` checks an entry).
NAMED_ENCODINGS: dict[str, dict[str, Any]] = {name: entry.get("settings") for name, entry in
                                              read_yaml(str(FILE), ConfigError).items()}


def named_encoding(name: str) -> dict[str, Any]:
    """The settings of the named encoding ``name`` (a copy), each one of Encoding's, or a ConfigError naming the known
    ones."""
    from cselab.encoders.encoding import ENCODING_FIELDS  # (the torch-free CLI lists the names alone)

    if name not in NAMED_ENCODINGS:
        raise ConfigError(f"--encoding {name!r}: not a named encoding{did_you_mean(name, NAMED_ENCODINGS)}; known: "
                          f"{', '.join(NAMED_ENCODINGS)}")
    settings = NAMED_ENCODINGS[name]
    unknown = sorted(set(settings or {"settings": None}) - set(ENCODING_FIELDS))
    if unknown:
        raise ConfigError(f"{FILE}: {name}: {unknown[0]} is not an encoding setting; known: "
                          f"{', '.join(ENCODING_FIELDS)}")
    return {key: list(value) if isinstance(value, list) else value for key, value in settings.items()}
