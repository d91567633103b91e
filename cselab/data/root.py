"""Where the data lives: one data root, found in this order: ``--data-dir``, ``CSELAB_DATA_DIR``, ``data_dir:`` in the
user config (``$XDG_CONFIG_HOME/cselab/config.yaml``, by default ``~/.config/cselab/config.yaml``), then
``../shared/data`` beside the checkout that holds this cselab (a clone next to the data, as the Makefile assumes).

The root holds the SentEval layout under ``senteval/`` (``senteval/downstream/STS/...``),
plain-text corpora under ``wiki/`` and negation sets under ``contrast/``. A SentEval
``data/`` folder itself (the one holding ``downstream/``) is accepted as a root too.
"""

from __future__ import annotations

import os
from pathlib import Path

from cselab.data.errors import DataNotFoundError

ENV_VAR = "CSELAB_DATA_DIR"

HOW_TO_GET_DATA = (
    "cselab reads evaluation data laid out as SentEval's data/ folder "
    "(downstream/STS/STS12-en-test/STS.input.MSRpar.txt, downstream/STS/STSBenchmark/sts-test.csv, "
    "downstream/SICK/SICK_test_annotated.txt, ...), as written by SentEval's "
    "data/downstream/get_transfer_data.bash. Point --data-dir or the environment variable "
    f"{ENV_VAR} at a folder holding it under senteval/ (or at SentEval's data/ folder itself), "
    "or fetch the STS sets from the Hugging Face hub with `cselab data download --data-dir DIR`."
)


def config_file() -> Path:
    """The user config: ``$XDG_CONFIG_HOME/cselab/config.yaml`` (``~/.config/cselab/config.yaml`` by default)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "cselab" / "config.yaml"


def _configured() -> str | None:
    """``data_dir`` of the user config, when the file exists; a file that is not a mapping with a string
    ``data_dir`` is an error naming it."""
    path = config_file()
    if not path.is_file():
        return None
    from cselab.files import read_yaml

    config = read_yaml(path, DataNotFoundError, expect=None)
    if config is None:  # an empty file
        return None
    if not isinstance(config, dict):
        raise DataNotFoundError(f"{path}: expected a mapping of settings (data_dir: DIR), got a "
                                f"{type(config).__name__}")
    value = config.get("data_dir")
    if value is not None and not isinstance(value, str):
        raise DataNotFoundError(f"{path}: data_dir must be a path, got {value!r}")
    return value


def checkout_data() -> Path | None:
    """``../shared/data`` beside the git checkout holding this cselab, when it has the SentEval layout."""
    checkout = Path(__file__).resolve().parents[2]
    found = checkout.parent / "shared" / "data"
    return found if (checkout / ".git").exists() and (found / "senteval").is_dir() else None


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root (see the module docstring); it must exist. Each place is read only when those before it give
    nothing, so a broken user config does not stop a run whose root is given by the flag or the environment."""
    for source, given in (("--data-dir", lambda: data_dir), (ENV_VAR, lambda: os.environ.get(ENV_VAR)),
                          (str(config_file()), _configured)):
        chosen = given()
        if chosen:
            root = Path(chosen).expanduser()
            if not root.is_dir():
                raise DataNotFoundError(f"Data root {root} (from {source}) is not a folder. {HOW_TO_GET_DATA}")
            return root
    found = checkout_data()
    if found is None:
        raise DataNotFoundError(f"No data root given: pass --data-dir DIR, set {ENV_VAR}=DIR, or put data_dir: DIR "
                                f"in {config_file()} (docs/data.md; `cselab data download --data-dir DIR` fetches "
                                "the STS sets)")
    return found


def senteval_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The SentEval ``downstream/`` folder under the data root."""
    root = data_root(data_dir)
    for candidate in (root / "senteval" / "downstream", root / "downstream"):
        if candidate.is_dir():
            return candidate
    raise DataNotFoundError(f"No SentEval layout under {root} (looked for senteval/downstream/ and downstream/). "
                            f"{HOW_TO_GET_DATA}")


def corpus_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder of plain-text corpora (``wiki/``) under the data root."""
    path = data_root(data_dir) / "wiki"
    if not path.is_dir():
        raise DataNotFoundError(f"No corpus folder {path}. Put one-sentence-per-line text files there.")
    return path
