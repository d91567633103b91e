"""A transfer task's classifier inputs, as SentEval builds them: sentence vectors (MRPC: ``[|u - v|, u * v]`` of its
pairs) in SentEval's row order (by token count, then label), so that its folds are SentEval's. The transfer suite
(:mod:`cselab.probes.transfer`) scores them, on its test or dev split.
"""

from __future__ import annotations

import numpy as np

from cselab.data.transfer import LabelledText
from cselab.encoders.base import Encoder

NCLASSES = {"MR": 2, "CR": 2, "SUBJ": 2, "MPQA": 2, "SST2": 2, "TREC": 6, "MRPC": 2, "SST5": 5, "SICKE": 3}


def sentence_vectors(encoder: Encoder, tasks: dict[str, dict[str, LabelledText]], batch_size: int, **encode
                     ) -> dict[str, np.ndarray]:
    """Every distinct sentence of the tasks' splits (task -> split -> texts) and its vector, encoded in one call."""
    texts = [t for splits in tasks.values() for part in splits.values() for t in (*part.texts, *(part.texts2 or ()))]
    unique = list(dict.fromkeys(texts))
    return dict(zip(unique, encoder.encode(unique, batch_size=batch_size, **encode)))


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """MRPC's classifier input: ``[|u - v|, u * v]`` per pair."""
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def sentevals_order(data: LabelledText) -> np.ndarray:
    """Row order by token count (then the second sentence's, for pairs), then label; stable, as SentEval sorts."""
    lengths2 = [len(t.split()) for t in data.texts2] if data.texts2 is not None else [0] * len(data)
    keys = [(len(t.split()), n2, int(label)) for t, n2, label in zip(data.texts, lengths2, data.labels)]
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def _ordered(data: LabelledText) -> LabelledText:
    order = sentevals_order(data)
    return LabelledText(data.task, data.split, [data.texts[i] for i in order], data.labels[order],
                        None if data.texts2 is None else [data.texts2[i] for i in order], data.files)


def task_features(splits: dict[str, LabelledText], vectors: dict[str, np.ndarray]
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Classifier inputs of one task: features of every split in one matrix (rows in SentEval's order), labels,
    and each split's rows in them."""
    blocks, labels, rows, start = [], [], {}, 0
    for name, part in splits.items():
        part = _ordered(part)
        u = np.stack([vectors[t] for t in part.texts])
        blocks.append(pair_features(u, np.stack([vectors[t] for t in part.texts2])) if part.texts2 is not None else u)
        labels.append(part.labels)
        rows[name] = np.arange(start, start + len(part))
        start += len(part)
    return np.concatenate(blocks), np.concatenate(labels), rows
