"""Input sentences for the augment stage: every line accounted for, bad ones skipped with a reason.

A long run never stops on one bad line: empty lines, lines over ``max_chars``, lines that
are not valid UTF-8 or hold a control character (NUL bytes: a UTF-16 file), lines without
letters and lines that do not look English (fewer than ``min_latin`` of their letters in the
basic Latin alphabet, a cheap heuristic) are counted and skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cselab.atomic import write_text_atomic
from cselab.data import DataNotFoundError, corpus_path
from cselab.data.readers import control_character
from cselab.errors import ConfigError, ExternalToolError

SKIP_REASONS = ("empty", "too_long", "not_utf8", "control_character", "no_letters", "not_english")


@dataclass(frozen=True)
class SourceLine:
    """Line ``id`` (0-based) of the corpus: its text, or the reason it is skipped."""

    id: int
    text: str | None
    reason: str | None = None


def _latin_share(text: str) -> float | None:
    """The share of letters in the basic Latin alphabet; None when there are no letters."""
    letters = [c for c in text if c.isalpha()]
    return sum("a" <= c.lower() <= "z" for c in letters) / len(letters) if letters else None


def read_source(path: str | os.PathLike, max_chars: int = 1000, min_latin: float = 0.8) -> Iterator[SourceLine]:
    """Each line of a one-sentence-per-line file (split on ``\\n``; ``\\r`` and surrounding space stripped)."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                yield SourceLine(number, None, "not_utf8")
                continue
            if number == 0:
                text = text.lstrip("\ufeff")
            if not text:
                yield SourceLine(number, None, "empty")
            elif control_character(text) is not None:  # NUL bytes: a UTF-16 file read as UTF-8
                yield SourceLine(number, None, "control_character")
            elif len(text) > max_chars:
                yield SourceLine(number, None, "too_long")
            elif (share := _latin_share(text)) is None:
                yield SourceLine(number, None, "no_letters")
            elif share < min_latin:
                yield SourceLine(number, None, "not_english")
            else:
                yield SourceLine(number, text)


HUB_PREFIX = "hf:"
# SimCSE's wiki1m, where its download script fetches it.
WIKI1M_HUB = ("princeton-nlp/datasets-for-simcse", "wiki1m_for_simcse.txt")


def resolve_corpus(corpus: str, data_dir: str | os.PathLike | None = None,
                   download_dir: str | os.PathLike = "cache/sources") -> Path:
    """A corpus file: a path, a registered name (``wiki1m``) under the data root, or
    ``hf:DATASET[:SPLIT[:COLUMN]]``, a Hugging Face dataset written once to ``download_dir``
    as one sentence per line (split ``train`` and column ``text`` by default). ``wiki1m``
    missing from the data root is fetched from the hub, as SimCSE's script does."""
    if not corpus.startswith(HUB_PREFIX):
        try:
            return corpus_path(corpus, data_dir)
        except DataNotFoundError as missing:
            if corpus != "wiki1m":
                raise
            from huggingface_hub import hf_hub_download

            try:
                return Path(hf_hub_download(WIKI1M_HUB[0], WIKI1M_HUB[1], repo_type="dataset"))
            except Exception as err:
                raise DataNotFoundError(f"{missing} Fetching {WIKI1M_HUB[1]} from the Hugging Face hub "
                                        f"({WIKI1M_HUB[0]}) failed too: {err}") from None
    name, split, column = (corpus[len(HUB_PREFIX):].split(":") + ["train", "text"])[:3]
    target = Path(download_dir) / f"{name.replace('/', '--')}.{split}.{column}.txt"
    if not target.exists():
        from datasets import load_dataset

        try:
            rows = load_dataset(name, split=split)
        except Exception as err:
            raise ExternalToolError(f"could not fetch {name} ({split}) from the Hugging Face hub: {err}") from None
        if column not in rows.column_names:
            raise ConfigError(f"{name} has no column {column!r}; it has {', '.join(rows.column_names)}")
        write_text_atomic(target, "".join(" ".join(str(text).split()) + "\n" for text in rows[column]))
    return target
