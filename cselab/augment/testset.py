"""``cselab augment testset``: transformation test sets in the JSONL the bias probe reads.

For each source sentence: a back-translated paraphrase (kept inside the MER band), a
negation by dependency parse, masked-LM insertion and substitution (when a masked LM is
given), deletion of one random word and a random other source. A transformation that could
not be made is left out of that line, as the schema allows.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cselab.atomic import write_text_atomic
from cselab.augment.backtranslate import Translator, select_paraphrase
from cselab.augment.names import MER_BAND
from cselab.augment.edits import MaskedLMEditor, WordNetEditor, delete_word, random_partners
from cselab.augment.negation import Negator


def build_testset(sentences: Sequence[str], negator: Negator, translator: Translator | None,
                  editor: MaskedLMEditor | WordNetEditor | None, seed: int = 0,
                  band: tuple[float, float] = MER_BAND) -> list[dict[str, Any]]:
    """One record per source, with every transformation that could be made."""
    rng = random.Random(seed)
    negations = list(negator(sentences))
    candidates = translator.round_trip(sentences) if translator else [[] for _ in sentences]
    insertions = editor.insert(sentences) if editor else [None] * len(sentences)
    substitutions = editor.substitute(sentences) if editor else [None] * len(sentences)
    partners = random_partners(len(sentences), rng)
    records = []
    for i, source in enumerate(sentences):
        record: dict[str, Any] = {"id": str(i), "source": source,
                                  "paraphrase": select_paraphrase(source, candidates[i], band).text,
                                  "negation": negations[i].text, "insertion": insertions[i],
                                  "substitution": substitutions[i], "deletion": delete_word(source, rng),
                                  "random": sentences[partners[i]]}
        records.append({key: value for key, value in record.items() if value is not None})
    return records


def write_testset(records: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
