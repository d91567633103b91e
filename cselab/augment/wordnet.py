"""Antonyms and synonyms read from WordNet 3.0's data files.

Debian's ``wordnet-base`` installs them in ``/usr/share/wordnet``. A line of ``data.POS``
holds a synset's words and its pointers; a ``!`` pointer names an antonym by synset offset
and word number (``source``/``target`` in its last field, two hex digits each). A line of
``index.POS`` lists a lemma's synsets, its most frequent sense first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cselab.errors import DataError

WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_HOWTO = ("install Debian's wordnet-base (apt-get install wordnet-base) "
                 "or pass the folder of WordNet's data files")


def _synsets(path: Path) -> dict[str, tuple[list[str], list[tuple[str, int, int]]]]:
    """offset -> (words, antonym pointers as (target offset, source word, target word))."""
    synsets = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):  # licence header
            continue
        fields = line.split(" | ")[0].split()
        offset, count = fields[0], int(fields[3], 16)
        words = [re.sub(r"\(.*\)$", "", fields[4 + 2 * i]).replace("_", " ").lower() for i in range(count)]
        at = 4 + 2 * count
        pointers = []
        for p in range(int(fields[at])):
            symbol, target, _, numbers = fields[at + 1 + 4 * p: at + 5 + 4 * p]
            if symbol == "!":
                pointers.append((target, int(numbers[:2], 16), int(numbers[2:], 16)))
        synsets[offset] = (words, pointers)
    return synsets


class Antonyms:
    """``antonyms["happy"] == "unhappy"``: the first direct antonym of a word, for adjectives and adverbs."""

    def __init__(self, folder: str | os.PathLike = WORDNET_DIR):
        folder = Path(folder)
        if not (folder / "data.adj").is_file():
            raise DataError(f"no WordNet data.adj in {folder}; {WORDNET_HOWTO}")
        self.table: dict[str, str] = {}
        for name in ("data.adj", "data.adv"):
            synsets = _synsets(folder / name)
            for words, pointers in synsets.values():
                for target, source_word, target_word in pointers:
                    sources = words if source_word == 0 else [words[source_word - 1]]
                    antonym = synsets[target][0][max(target_word - 1, 0)]
                    for word in sources:
                        self.table.setdefault(word, antonym)

    def get(self, word: str) -> str | None:
        return self.table.get(word.lower())


POS_FILES = {"NOUN": "noun", "VERB": "verb", "ADJ": "adj", "ADV": "adv"}


def _first_senses(path: Path) -> dict[str, str]:
    """lemma -> the offset of its most frequent synset, from an ``index.POS`` file."""
    senses = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue
        fields = line.split()
        pointers = int(fields[3])
        senses[fields[0]] = fields[4 + pointers + 2]  # after the pointer symbols, sense_cnt and tagsense_cnt
    return senses


class Synonyms:
    """``synonyms.get("ADJ", "large") == "big"``: a one-word synonym from a word's most frequent sense, for nouns,
    verbs, adjectives and adverbs (the word as the lemma WordNet lists)."""

    def __init__(self, folder: str | os.PathLike = WORDNET_DIR):
        folder = Path(folder)
        if not (folder / "index.noun").is_file():
            raise DataError(f"no WordNet index.noun in {folder}; {WORDNET_HOWTO}")
        self.table: dict[tuple[str, str], str] = {}
        for pos, name in POS_FILES.items():
            synsets = _synsets(folder / f"data.{name}")
            for lemma, offset in _first_senses(folder / f"index.{name}").items():
                word = lemma.replace("_", " ")
                other = next((w for w in synsets[offset][0] if w != word and w.isalpha()), None)
                if other is not None and word.isalpha():
                    self.table[pos, word] = other

    def get(self, pos: str, word: str) -> str | None:
        return self.table.get((pos, word.lower()))

