"""Where the data lives: one data root, given by ``--data-dir`` or ``CSELAB_DATA_DIR``.

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


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir`` if given, else ``$CSELAB_DATA_DIR``; it must exist."""
    chosen = data_dir if data_dir is not None else os.environ.get(ENV_VAR)
    if not chosen:
        raise DataNotFoundError(f"No data root given. {HOW_TO_GET_DATA}")
    root = Path(chosen).expanduser()
    if not root.is_dir():
        source = "--data-dir" if data_dir is not None else ENV_VAR
        raise DataNotFoundError(f"Data root {root} (from {source}) is not a folder. {HOW_TO_GET_DATA}")
    return root


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
