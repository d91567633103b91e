"""Match error rate (Morris et al., 2004): how much two sentences differ on the surface.

``MER = (S + D + I) / (S + D + I + C)`` over the word alignment of a reference (the first
sentence) and a hypothesis (the second): substitutions, deletions, insertions and correct
words. It lies in [0, 1]; 0 means the same words in the same order. Two empty sentences
have MER 0, one empty sentence against a non-empty one 1.

The alignment is jiwer's: rapidfuzz's Levenshtein opcodes over word tokens, so
:func:`mer` equals ``jiwer.mer`` on the same tokens (tested), computed per pair and
without jiwer's per-call overhead. Tokens come from a normaliser (:mod:`cselab.normalizers`):
by default the sentence is lower-cased and split on whitespace (``"lower"``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from rapidfuzz.distance import Levenshtein

from cselab.normalizers import Normalizer, normalizer

def edit_counts(reference: list[str], hypothesis: list[str]) -> tuple[int, int, int, int]:
    """(substitutions, deletions, insertions, correct) of the word alignment."""
    subs = dels = ins = hits = 0
    for op in Levenshtein.opcodes(reference, hypothesis):
        if op.tag == "equal":
            hits += op.src_end - op.src_start
        elif op.tag == "replace":
            subs += op.src_end - op.src_start
        elif op.tag == "delete":
            dels += op.src_end - op.src_start
        else:
            ins += op.dest_end - op.dest_start
    return subs, dels, ins, hits


def mer_tokens(reference: list[str], hypothesis: list[str]) -> float:
    """MER of two token lists."""
    subs, dels, ins, hits = edit_counts(reference, hypothesis)
    errors = subs + dels + ins
    return errors / (errors + hits) if errors else 0.0


def mer(reference: str, hypothesis: str, normalize: str | Normalizer = "lower") -> float:
    """MER of two sentences."""
    tokens = normalizer(normalize)
    return mer_tokens(tokens(reference), tokens(hypothesis))


def mer_pairs(references: Iterable[str], hypotheses: Iterable[str],
              normalize: str | Normalizer = "lower") -> np.ndarray:
    """MER of each pair (not one pooled corpus value), as float64."""
    tokens = normalizer(normalize)
    references, hypotheses = list(references), list(hypotheses)
    if len(references) != len(hypotheses):
        raise ValueError(f"mer_pairs() needs equal lengths, got {len(references)} and {len(hypotheses)}")
    return np.fromiter((mer_tokens(tokens(r), tokens(h)) for r, h in zip(references, hypotheses)),
                       dtype=np.float64, count=len(references))
