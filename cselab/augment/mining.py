"""Hard negatives mined from a corpus for (anchor, positive) pairs, with false negatives filtered: ``cselab augment
mine``. The same negatives as sentence-transformers' ``util.mine_hard_negatives`` (6.x) on the same encoder, corpus and
settings (tests/augment/test_mining.py runs theirs), so that a table mined here is the one the field trains on:

1. the corpus is the given one (if any) followed by every pair's positive, each text once; the queries are the
   anchors, each once; every vector is normalised;
2. each query's ``range_max + max_positives + 1`` nearest corpus texts by cosine, exactly (a matrix product, in chunks
   of queries) or with faiss (``IndexFlatIP``, the same ranks but for near ties), ``search`` deciding;
3. removed: the query's own text, its positives, and the false negatives the filters name: a score within
   ``absolute_margin`` of the query's lowest positive score (``neg + margin > pos``), above ``pos - |pos| *
   relative_margin`` (NV-Retriever's TopK-PercPos), above ``max_score``, below ``min_score``;
4. of what is left, ranks ``range_min`` to ``range_max``; of those the first ``num_negatives`` (``sampling: top``) or
   a draw of them (``random``, seeded by ``seed``), kept in score order;
5. written as a training table: ``triplet`` (anchor, positive, negative: a row per negative) or ``n-tuple`` (anchor,
   positive, negative_1 ... negative_n: a pair without n negatives left is dropped), grouped by anchor in the order
   anchors first appear.

The output folder is ``OUT/KEY/`` (``mined.csv`` and ``manifest.json``, each written atomically), KEY a sha256 of the
pairs' and corpus's contents, the encoder (its description and weight files' sha256), every setting and the code's
version: the same command again reuses it, any change mines anew. The encoding resumes after a kill from the
encoder's embedding cache (:mod:`cselab.encoders.cache`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cselab import __version__, progress
from cselab.atomic import write_json_atomic, write_text_atomic
from cselab.checksum import sha256
from cselab.encoders.base import Encoder
from cselab.encoders.cache import key_digest
from cselab.errors import ConfigError, DataError
from cselab.files import read_json
from cselab.registry import Checked, setting

MINING_VERSION = 1  # the algorithm's version: part of every key
TABLE, MANIFEST = "mined.csv", "manifest.json"
FORMATS = ("triplet", "n-tuple")
SEARCHES = ("auto", "exact", "faiss")
#: ``search: auto`` takes faiss from this many corpus texts on, when faiss is installed: below, the exact search gives
#: sentence-transformers' own negatives and costs little beside the encoding (benchmarks/RESULTS.md, "Mining: exact
#: against faiss": faiss 1.4x quicker at 10k texts, 3.7x at 1M).
FAISS_FROM = 1_000_000
SCORE_CELLS = 2**26  # queries x corpus scores held at once by the exact search (256 MiB of float32)


@dataclass
class MiningConfig(Checked):
    """How negatives are mined; every field is part of the output's key. Names and defaults are those of
    sentence-transformers' ``mine_hard_negatives``."""

    where = "mining config"

    num_negatives: int = setting(3, "negatives per pair", min=1)
    range_min: int = setting(0, "skip the first N candidates left after the filters (the very nearest may be "
                             "unlabelled positives)", min=0)
    range_max: int | None = setting(None, "rank up to which candidates are taken (default: range_min + num_negatives "
                                    "+ the most positives of an anchor, x10 num_negatives with a filter)", min=1)
    absolute_margin: float | None = setting(None, "drop a candidate whose score + margin exceeds the anchor's "
                                            "(lowest) positive score")
    relative_margin: float | None = setting(None, "drop a candidate scoring above pos - |pos| x margin "
                                            "(NV-Retriever's TopK-PercPos: 0.05 keeps those below 95% of the "
                                            "positive's score)", min=0.0, max=1.0)
    max_score: float | None = setting(None, "drop a candidate scoring above this")
    min_score: float | None = setting(None, "drop a candidate scoring below this")
    sampling: str = setting("top", "top: the nearest left; random: a draw among them (seeded)",
                            choices=("top", "random"))
    seed: int = setting(0, "the seed of sampling: random", min=0)
    output_format: str = setting("triplet", "triplet: anchor, positive, negative (a row per negative); n-tuple: "
                                 "anchor, positive, negative_1 ... negative_N", choices=FORMATS)
    search: str = setting("auto", f"exact (cosine of every pair), faiss (IndexFlatIP) or auto (faiss from "
                          f"{FAISS_FROM:,} corpus texts where installed)", choices=SEARCHES)
    batch_size: int = setting(32, "sentences per forward pass", min=1)

    def rules(self) -> None:
        if self.range_max is not None and self.range_min >= self.range_max:
            raise ConfigError(f"{self.where}.range_min: {self.range_min} is not below range_max {self.range_max}")
        if self.range_max is not None and self.num_negatives > self.range_max - self.range_min:
            raise ConfigError(f"{self.where}.num_negatives: {self.num_negatives} negatives do not fit in ranks "
                              f"{self.range_min} to {self.range_max}")

    def filtered(self) -> bool:
        return any(value is not None for value in (self.absolute_margin, self.relative_margin, self.max_score))


@dataclass
class Mined:
    """A mined table: its columns in order, its rows, and what the filters removed (counts by filter)."""

    columns: list[str]
    rows: list[list[str]]
    removed: dict[str, int]
    search: str
    range_max: int


def _normalized(vectors: np.ndarray):
    import torch

    return torch.nn.functional.normalize(torch.as_tensor(np.asarray(vectors, dtype=np.float32)), p=2, dim=1)


def _nearest(queries, corpus, count: int, search: str):
    """The ``count`` nearest corpus rows of each query and their scores (-inf and -1 past the corpus's end)."""
    import torch
    from sentence_transformers.util import cos_sim

    if search == "faiss":
        import faiss

        index = faiss.IndexFlatIP(corpus.shape[1])
        index.add(corpus.numpy())
        scores, indices = index.search(queries.numpy(), count)
        return torch.from_numpy(scores), torch.from_numpy(indices)
    k = min(count, len(corpus))
    chunk = max(1, min(16384, SCORE_CELLS // max(len(corpus), 1)))
    parts = [torch.topk(cos_sim(queries[i:i + chunk], corpus), k=k, dim=1) for i in range(0, len(queries), chunk)]
    scores, indices = torch.cat([p.values for p in parts]), torch.cat([p.indices for p in parts])
    missing = count - k
    if missing:
        scores = torch.cat([scores, scores.new_full((len(scores), missing), -float("inf"))], dim=1)
        indices = torch.cat([indices, indices.new_full((len(indices), missing), -1)], dim=1)
    return scores, indices


@dataclass
class Inputs:
    """The pairs and corpus as the search sees them: the corpus texts (given ones, then positives; each once), the
    queries (anchors, each once), each query's positives by corpus index, the (query, positive) rows in output order,
    and the ranks searched."""

    texts: list[str]
    queries: list[str]
    own: list[list[int]]
    rows: list[tuple[int, int]]
    range_max: int
    most: int  # the most rows an anchor has, repeats counted


def inputs(pairs: list[tuple[str, str]], config: MiningConfig, corpus: list[str] | None = None,
           where: str = "the pairs") -> Inputs:
    """What :func:`mine` searches, checked before any model loads: no pairs, or fewer distinct texts than the ranks
    asked, is refused in one line."""
    if not pairs:
        raise DataError(f"{where}: no (anchor, positive) rows to mine negatives for")
    texts = list(dict.fromkeys((corpus or []) + [p for _, p in pairs]))
    index = {text: i for i, text in enumerate(texts)}
    queries = list(dict.fromkeys(a for a, _ in pairs))
    query_of = {text: i for i, text in enumerate(queries)}
    most = int(np.bincount([query_of[a] for a, _ in pairs]).max())
    range_max = config.range_max or config.range_min + config.num_negatives * (10 if config.filtered() else 1) + most
    if config.range_min >= range_max or config.num_negatives > range_max - config.range_min:
        raise ConfigError(f"{config.where}: {config.num_negatives} negatives do not fit in ranks {config.range_min} "
                          f"to {range_max}")
    if len(texts) < range_max + 1:
        raise DataError(f"{where}: the corpus has {len(texts)} distinct texts (the positives included), fewer than "
                        f"the ranks asked (range_max {range_max}) and the anchor's own; give a larger corpus "
                        "(--corpus) or lower num_negatives/range_max")
    own: list[list[int]] = [[] for _ in queries]  # each anchor's positives, by corpus index, each once
    for anchor, positive in pairs:
        if index[positive] not in own[query_of[anchor]]:
            own[query_of[anchor]].append(index[positive])
    return Inputs(texts, queries, own, [(q, p) for q in range(len(queries)) for p in own[q]], range_max, most)


def mine(pairs: list[tuple[str, str]], encoder: Encoder, config: MiningConfig, corpus: list[str] | None = None,
         where: str = "the pairs") -> Mined:
    """The negatives of ``pairs`` (anchor, positive) from ``corpus`` (None: the positives alone) by ``encoder``."""
    from sentence_transformers.util import pairwise_cos_sim

    found = inputs(pairs, config, corpus, where)
    texts, queries, own, rows, range_max = found.texts, found.queries, found.own, found.rows, found.range_max
    index = {text: i for i, text in enumerate(texts)}
    search = config.search if config.search != "auto" else "faiss" if len(texts) >= FAISS_FROM and _has_faiss() \
        else "exact"
    with progress.Progress("mine: encoding", len(texts) + len(queries), "sentence") as bar, progress.current(bar):
        corpus_vectors = _normalized(encoder.encode(texts, batch_size=config.batch_size))
        query_vectors = _normalized(encoder.encode(queries, batch_size=config.batch_size))
    scores, candidates = _nearest(query_vectors, corpus_vectors, range_max + found.most + 1, search)
    positive_scores = pairwise_cos_sim(query_vectors[[q for q, _ in rows]], corpus_vectors[[p for _, p in rows]])
    removed = _filter(scores, candidates, [index.get(q, -1) for q in queries], own, positive_scores, config)
    chosen, top = _ranked(scores, candidates, range_max, config)
    return Mined(*_table(config, rows, queries, texts, chosen, top), removed, search, range_max)


def _filter(scores, candidates, themselves: list[int], own: list[list[int]], positive_scores, config
            ) -> dict[str, int]:
    """Set to -inf (in place) what is no negative: padding, the query's own text, its positives, and what the
    filters drop, against each query's lowest positive score; returns how many each filter dropped."""
    import torch

    scores[candidates == -1] = -float("inf")
    scores[candidates == torch.tensor(themselves).unsqueeze(1)] = -float("inf")
    for q, indices in enumerate(own):
        scores[q][torch.isin(candidates[q], torch.tensor(indices))] = -float("inf")
    ends = np.cumsum([len(indices) for indices in own])  # the rows are grouped by query, in query order
    lowest = torch.stack([positive_scores[end - len(indices):end].min() for end, indices in zip(ends, own)]
                         ).unsqueeze(1)
    rules = {"absolute_margin": None if config.absolute_margin is None else
             lambda s: s + config.absolute_margin > lowest,
             "relative_margin": None if config.relative_margin is None else
             lambda s: s > lowest - lowest.abs() * config.relative_margin,
             "max_score": None if config.max_score is None else lambda s: s > config.max_score,
             "min_score": None if config.min_score is None else
             lambda s: (s < config.min_score) & (s != -float("inf"))}
    removed = {}
    for name, drop in rules.items():
        if drop is not None:
            dropped = drop(scores)
            removed[name] = int(dropped.sum())
            scores[dropped] = -float("inf")
    return removed


def _ranked(scores, candidates, range_max: int, config: MiningConfig):
    """Each query's negatives (corpus indices) and their scores: ranks ``range_min`` to ``range_max`` of what is left,
    the first ``num_negatives`` or a seeded draw of them, in score order."""
    import torch

    top, local = torch.topk(scores, k=range_max, dim=1)
    chosen, top = candidates.gather(1, local)[:, config.range_min:], top[:, config.range_min:]
    if config.sampling == "top":
        return chosen[:, :config.num_negatives], top[:, :config.num_negatives]
    draw = random.Random(config.seed)  # as random.seed(seed) then random.sample, row by row
    options = (chosen.size(1) - top.isinf().sum(1)).clamp(min=config.num_negatives)
    picked = torch.tensor([draw.sample(range(int(n)), k=config.num_negatives) for n in options])
    top, chosen = top.gather(1, picked), chosen.gather(1, picked)
    top, order = top.sort(dim=1, descending=True)
    return chosen.gather(1, order), top


def _table(config: MiningConfig, rows: list[tuple[int, int]], queries: list[str], texts: list[str], chosen, top
           ) -> tuple[list[str], list[list[str]]]:
    """The training table's columns and rows (see the module docstring, 5)."""
    found = [[texts[c] for c, s in zip(chosen[q].tolist(), top[q].tolist()) if s != -float("inf")]
             for q in range(len(queries))]
    if config.output_format == "triplet":
        return ["anchor", "positive", "negative"], [[queries[q], texts[p], n] for q, p in rows for n in found[q]]
    width = config.num_negatives
    return (["anchor", "positive", *(f"negative_{i}" for i in range(1, width + 1))],
            [[queries[q], texts[p], *found[q]] for q, p in rows if len(found[q]) == width])


def _has_faiss() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def csv_text(mined: Mined) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(mined.columns)
    writer.writerows(mined.rows)
    return buffer.getvalue()


def content_sha256(texts: Any) -> str:
    """The sha256 of texts (a list of strings or of pairs) by content, as JSON."""
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()


def mining_key(pairs: list[tuple[str, str]], corpus: list[str] | None, encoder: Encoder, config: MiningConfig
               ) -> dict[str, Any]:
    """Everything the mined table depends on: the inputs by content, the encoder, the settings, the code."""
    key = {"pairs_sha256": content_sha256(pairs), "corpus_sha256": None if corpus is None else content_sha256(corpus),
           "encoder": encoder.describe(), "encoder_weights": encoder.weights, "config": asdict(config),
           "mining_version": MINING_VERSION, "cselab": __version__}
    plain: dict[str, Any] = json.loads(json.dumps(key, default=str))  # as the manifest holds it
    return plain


def mine_to_folder(pairs: list[tuple[str, str]], encoder: Encoder, config: MiningConfig, out: str | Path,
                   corpus: list[str] | None = None, where: str = "the pairs") -> tuple[Path, dict[str, Any], bool]:
    """``OUT/KEY/mined.csv`` and its manifest; returns the folder, the manifest and whether it was mined now (False:
    the same key's table was there, verified by its sha256)."""
    key = mining_key(pairs, corpus, encoder, config)
    folder = Path(out) / key_digest(key)[:16]
    manifest_path = folder / MANIFEST
    if manifest_path.is_file() and (folder / TABLE).is_file():
        manifest = read_json(manifest_path)
        if manifest.get("key") == key and manifest.get("sha256") == sha256(folder / TABLE):
            return folder, manifest, False
    mined = mine(pairs, encoder, config, corpus, where)
    if not mined.rows:
        raise DataError(f"{where}: no pair kept a negative (the filters removed every candidate: "
                        f"{json.dumps(mined.removed)}); loosen them")
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / TABLE, csv_text(mined))
    manifest = {"key": key, "sha256": sha256(folder / TABLE), "rows": len(mined.rows),
                "pairs": len(pairs), "columns": mined.columns, "removed": mined.removed, "search": mined.search,
                "range_max": mined.range_max}
    write_json_atomic(manifest_path, manifest)
    return folder, manifest, True
