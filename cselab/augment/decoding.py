"""How a back-translation backend decodes: the augment config's decoding settings, read alike by ``hf`` and
``ctranslate2``, and the length-sorted batches both run.

Each pivot gives ``num_candidates`` back-translations per sentence, by beam search (the ``num_candidates`` best of
``num_beams`` beams) or by sampling (``sampling_topk``; 0 samples the whole distribution), with ``seed`` set before
each batch (``hf``) or each call (``ctranslate2``, once per direction and chunk), so that a chunk's rows do not
depend on what ran before it: a resumed build writes the same rows. The
way there (source to pivot) takes the first candidate of the same decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DECODINGS = ("beam", "sample")


@dataclass(frozen=True)
class Decoding:
    """The decoding settings of one build (the augment config's fields of the same names)."""

    num_candidates: int = 4
    decoding: str = "beam"
    num_beams: int = 4
    sampling_topk: int = 50
    seed: int = 0
    batch_sentences: int = 32
    batch_tokens: int = 0
    max_length: int = 128
    compute_type: str = "auto"
    threads: int = 0

    @property
    def sample(self) -> bool:
        return self.decoding == "sample"


def length_batches(lengths: Sequence[int], max_rows: int, max_tokens: int = 0) -> list[list[int]]:
    """Positions of ``lengths`` in batches, longest first: at most ``max_rows`` rows and, when ``max_tokens`` is
    set, at most ``max_tokens`` tokens once padded to the batch's longest row (a row longer than the budget gets a
    batch of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        batch = batches[-1] if batches else None
        # longest first: the batch's first row is its longest, so adding a row pads it to that length
        if batch and len(batch) < max_rows and (not max_tokens or lengths[batch[0]] * (len(batch) + 1) <= max_tokens):
            batch.append(i)
        else:
            batches.append([i])
    return batches
