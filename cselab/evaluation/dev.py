"""The dev probes ``training.dev`` names: the checkpoint ``OUT/best`` keeps is the one that scores best on them.

- ``stsb``: STS-B dev (SimCSE's ``metric_for_best_model stsb_spearman``, its example scripts' choice);
- ``sickr``: SICK-R's dev split (SentEval's ``SICK_trial.txt``);
- ``sts-dev-avg``: the mean of the two (SimCSE's ``eval_avg_sts``).

Each scores Spearman's rho x 100 between the cosine of a pair's vectors and its gold score on the first ``limit``
pairs (all by default); sentences are encoded whole (the checkpoint's max length, not training's), as SimCSE
evaluates.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from cselab.checksum import sha256
from cselab.data import STSPairs, load_sts
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError
from cselab.evaluation.probe import Probe, Result
from cselab.metrics import cosine_rows, spearman

# name -> the (task, split) sets it scores; the headline is their mean
STS_DEV = {"stsb": (("stsb", "dev"),), "sickr": (("sickr", "trial"),),
           "sts-dev-avg": (("stsb", "dev"), ("sickr", "trial"))}
NONE = "none"  # training.dev without a dev set: every evaluation saves OUT/best
BATCH_SIZE = 128


class STSDevProbe(Probe):
    """Spearman x 100 on STS dev sets (:data:`STS_DEV`); ``scores`` holds each set's figure by task."""

    def __init__(self, name: str, data_dir: str | os.PathLike | None = None, limit: int | None = None):
        if name not in STS_DEV:
            raise ConfigError(f"dev probe {name!r}: known: {', '.join(dev_names())}")
        if limit is not None and limit < 2:
            raise ConfigError(f"--eval-limit {limit}: a dev score needs at least 2 pairs")
        self.name, self.limit = name, limit
        self.sets: list[STSPairs] = [pairs for task, split in STS_DEV[name] for pairs in load_sts(task, split,
                                                                                                  data_dir)]

    def identity(self) -> dict[str, Any]:
        digests = [sha256(pairs.files[0]) for pairs in self.sets]
        return {"set": self.name, "sha256": digests[0] if len(digests) == 1 else digests, "limit": self.limit}

    def run(self, encoder: Encoder) -> Result:
        scores = {}
        for pairs in self.sets:
            first, second = pairs.sentences1[:self.limit], pairs.sentences2[:self.limit]
            vectors = encoder.encode(first + second, batch_size=BATCH_SIZE, show_progress_bar=False)
            sims = cosine_rows(vectors[:len(first)], vectors[len(first):])
            scores[pairs.task] = 100 * spearman(sims, pairs.scores[:self.limit])
        values = list(scores.values())
        return Result(scores, float(np.mean(values)) if len(values) > 1 else values[0],
                      files=[pairs.files[0] for pairs in self.sets])


def dev_names() -> tuple[str, ...]:
    """What ``training.dev`` accepts."""
    return (*STS_DEV, NONE)


def dev_probe(name: str, data_dir: str | os.PathLike | None = None, limit: int | None = None) -> Probe | None:
    """The dev probe ``name`` with its data read; None for ``none``."""
    return None if name == NONE else STSDevProbe(name, data_dir, limit)


def log_key(name: str) -> str:
    """The name a dev score has in ``OUT/log.jsonl`` and the run summary (``best_`` + it)."""
    return name.replace("-", "_") if name.endswith("avg") else f"{name}_dev"
