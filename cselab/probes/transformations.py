"""Transformation probe: how an encoder scores a sentence against six transformations of it.

A test set is JSONL, one source sentence per line::

    {"id": "news-01", "domain": "news", "source": "...",
     "paraphrase": "...", "negation": "...", "insertion": "...",
     "deletion": "...", "substitution": "...", "random": "..."}

``source`` is required; each transformation is optional (a generator may fail on some
sources), but a line needs at least one. ``id`` and ``domain`` are optional strings. The
transformations: paraphrase (other surface, same meaning), negation (minimal edit that
contradicts), insertion, deletion and substitution (small edits that keep the meaning) and
random (an unrelated sentence).

Per transformation the probe reports the mean cosine and mean MER to the source, and over
sources having both, how often the paraphrase scores above the negation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from cselab.data import DataFormatError, NegationPairs
from cselab.data.readers import json_object, read_lines
from cselab.encoders import Encoder
from cselab.mer import mer_pairs
from cselab.normalizers import Normalizer
from cselab.metrics import cosine_rows

TRANSFORMATIONS = ("paraphrase", "negation", "insertion", "deletion", "substitution", "random")
METADATA = ("id", "domain")


def handwritten_testset() -> Path:
    """The set shipped with cselab: 48 sources in four domains, each with all six transformations."""
    return Path(str(resources.files("cselab.probes") / "testsets" / "handwritten.jsonl"))


@dataclass(frozen=True)
class TransformationItem:
    source: str
    transformed: dict[str, str]
    id: str = ""
    domain: str = ""
    line: int = field(default=0, compare=False)


def _item(path: Path, number: int, line: str) -> TransformationItem:
    record = json_object(path, number, line)
    unknown = sorted(set(record) - {"source", *TRANSFORMATIONS, *METADATA})
    if unknown:
        raise DataFormatError(path, number, f"unknown field(s) {', '.join(unknown)}; "
                                            f"expected source, {', '.join(TRANSFORMATIONS)}, id, domain")
    for key, value in record.items():
        if not isinstance(value, str) or (key not in METADATA and not value.strip()):
            raise DataFormatError(path, number, f"field '{key}' must be a non-empty string")
    if "source" not in record:
        raise DataFormatError(path, number, "missing field 'source'")
    transformed = {t: record[t].strip() for t in TRANSFORMATIONS if t in record}
    if not transformed:
        raise DataFormatError(path, number, f"no transformation; give at least one of {', '.join(TRANSFORMATIONS)}")
    return TransformationItem(record["source"].strip(), transformed, record.get("id", ""), record.get("domain", ""),
                              number)


def read_testset(path: str | os.PathLike) -> list[TransformationItem]:
    """A transformation test set; a malformed line raises :class:`DataFormatError` with its number."""
    path = Path(path)
    items = [_item(path, number, line) for number, line in enumerate(read_lines(path), start=1) if line.strip()]
    if not items:
        raise DataFormatError(path, 1, "the test set is empty")
    return items


def _mean(values) -> float | None:
    return float(np.mean(values)) if len(values) else None


def run_transformations(encoder: Encoder, items: list[TransformationItem], batch_size: int = 64,
                        normalize: str | Normalizer = "lower") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Summary per transformation and every (source, transformed) pair with its cosine and MER."""
    pairs = [(i, kind, item.source, text) for i, item in enumerate(items) for kind, text in item.transformed.items()]
    vectors = encoder.encode([p[2] for p in pairs] + [p[3] for p in pairs], batch_size=batch_size)
    cosines = cosine_rows(vectors[: len(pairs)], vectors[len(pairs):])
    mers = mer_pairs([p[2] for p in pairs], [p[3] for p in pairs], normalize)
    records = [{"item": i, "id": items[i].id, "domain": items[i].domain, "type": kind, "source": source,
                "transformed": text, "cosine": float(c), "mer": float(m)}
               for (i, kind, source, text), c, m in zip(pairs, cosines, mers)]
    summary: dict[str, Any] = {"types": {}}
    for kind in TRANSFORMATIONS:
        rows = [r for r in records if r["type"] == kind]
        summary["types"][kind] = {"n": len(rows), "mean_cosine": _mean([r["cosine"] for r in rows]),
                                  "mean_mer": _mean([r["mer"] for r in rows])}
    hits = paraphrase_over_negation(records)
    summary["paraphrase_over_negation"] = {"accuracy": _mean(hits), "n": len(hits)}
    summary["n_sources"] = len(items)
    return summary, records


def paraphrase_over_negation(records: list[dict[str, Any]]) -> np.ndarray:
    """Per source that has both, whether its paraphrase is closer to it than its negation (in source order)."""
    by_item: dict[int, dict[str, float]] = {}
    for r in records:
        by_item.setdefault(r["item"], {})[r["type"]] = r["cosine"]
    return np.array([v["paraphrase"] > v["negation"] for _, v in sorted(by_item.items())
                     if "paraphrase" in v and "negation" in v], dtype=bool)


def run_negation_pairs(encoder: Encoder, sets: list[NegationPairs], batch_size: int = 64,
                       normalize: str | Normalizer = "lower", items: dict[str, np.ndarray] | None = None
                       ) -> dict[str, Any]:
    """Mean cosine and MER of each sentence with its negation, per set and over all pairs; ``items`` (when given)
    receives every pair's cosine, ``bias/cannot/SET/cos``."""
    result: dict[str, Any] = {"sets": {}}
    all_cosines, all_mers = [], []
    for pairs in sets:
        vectors = encoder.encode(pairs.sentences + pairs.negated, batch_size=batch_size)
        cosines = cosine_rows(vectors[: len(pairs)], vectors[len(pairs):])
        if items is not None:
            items[f"bias/cannot/{pairs.name}/cos"] = cosines
        mers = mer_pairs(pairs.sentences, pairs.negated, normalize)
        result["sets"][pairs.name] = {"n": len(pairs), "mean_cosine": _mean(cosines), "mean_mer": _mean(mers)}
        all_cosines.append(cosines)
        all_mers.append(mers)
    result["all"] = {"n": int(sum(len(c) for c in all_cosines)), "mean_cosine": _mean(np.concatenate(all_cosines)),
                     "mean_mer": _mean(np.concatenate(all_mers))}
    return result


def plot_transformations(records: list[dict[str, Any]], path: str | os.PathLike, title: str = "") -> Path:
    """Cosine (x) against MER (y) of every pair, one colour per transformation; written as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 5), dpi=120)
    for kind, colour in zip(TRANSFORMATIONS, matplotlib.color_sequences["tab10"]):
        rows = [r for r in records if r["type"] == kind]
        if rows:
            axes.scatter([r["cosine"] for r in rows], [r["mer"] for r in rows], s=18, alpha=0.75, color=colour,
                         label=f"{kind} ({len(rows)})")
    axes.set_xlabel("cosine similarity to the source")
    axes.set_ylabel("MER to the source (surface change)")
    axes.set_ylim(-0.03, 1.03)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower left", fontsize=8)
    axes.set_title(title or "Transformation probe")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
