"""Runs probe suites on an encoder and assembles the results JSON (see docs/results-json.md)."""

from __future__ import annotations

import contextlib
import io
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from cselab import __version__
from cselab.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from cselab.checksum import sha256
from cselab.data import DataNotFoundError, NegationPairs, corpus_path, data_root, load_cannot, load_sts, read_corpus
from cselab.data.transfer import TRANSFER_TASKS
from cselab.encoders import Encoder, TransformerEncoder
from cselab.errors import ConfigError
from cselab.files import check_folder, read_json, remove_path
from cselab.probes.bias import run_bias_splits
from cselab.probes.geometry import alignment_uniformity, layer_geometry, pca_sts
from cselab.probes.plots import plot_accuracies, plot_geometry, task_scores
from cselab.probes.probing import probing_dir, run_probing
from cselab.probes.report import html_report, markdown_report
from cselab.probes.results import checksums
from cselab.probes.splits import PROTOCOLS, build_splits, split_summary
from cselab.probes.sts import SHORT_NAMES, run_sts, subset_limit
from cselab.probes.suites import STS_SUITE, SUITES
from cselab.probes.transfer import run_transfer
from cselab.probes.transformations import (
    handwritten_testset,
    paraphrase_over_negation,
    plot_transformations,
    read_testset,
    run_negation_pairs,
    run_transformations,
)
from cselab.provenance import provenance
from cselab.versions import package_versions



def suite_parts(suite: str) -> tuple[str, ...]:
    """The suites a ``--suite`` value runs: one name, or names joined by commas (``sts,bias``)."""
    names = [name.strip() for name in suite.split(",")]
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        raise ConfigError(f"Unknown suite {', '.join(map(repr, unknown))}; choose from {', '.join(SUITES)}, or "
                         "several joined by commas (sts,bias)")
    return tuple(part for part in SUITES["all"] if any(part in SUITES[name] for name in names))


@dataclass
class ProbeOptions:
    """What a probe run reads and how; defaults are the CLI's."""

    data_dir: str | os.PathLike | None = None
    tasks: tuple[str, ...] = STS_SUITE
    testset: str | os.PathLike | None = None
    mer_normalize: str = "lower"
    batch_size: int = 64
    limit: int | None = None
    seed: int = 0
    protocol: str = "full"
    n_jobs: int = 1
    transfer_tasks: tuple[str, ...] = TRANSFER_TASKS
    probing_dir: str | os.PathLike | None = None
    split_protocol: str = "paper"


def run_bias(encoder: Encoder, options: ProbeOptions, files: list, items: dict | None = None) -> dict[str, Any]:
    """Cont./Oppn. splits, the transformation test set and, when present, the CANNOT negation sets; ``items``
    (when given) receives the per-item outputs (see :func:`run_probes`)."""
    splits = build_splits(options.data_dir, options.mer_normalize, options.split_protocol, options.limit)
    files.extend(path for s in splits for path in s.pairs.files)
    result: dict[str, Any] = {"mer_normalize": options.mer_normalize,
                              "splits": {"protocol": options.split_protocol,
                                         "protocol_description": PROTOCOLS[options.split_protocol],
                                         **run_bias_splits(encoder, splits, options.batch_size, items),
                                         "table": split_summary(splits)}}
    testset = Path(options.testset) if options.testset else handwritten_testset()
    summary, records = run_transformations(encoder, read_testset(testset), options.batch_size, options.mer_normalize)
    result["transformations"] = {"testset": str(testset), "sha256": sha256(testset), **summary, "pairs": records}
    files.append(testset)
    if items is not None:
        items["bias/transformations/paraphrase_over_negation"] = paraphrase_over_negation(records)
    try:
        sets = load_cannot(options.data_dir)
    except DataNotFoundError as err:
        result["cannot"] = {"skipped": str(err)}
    else:
        if options.limit is not None:
            sets = [NegationPairs(s.name, s.sentences[:options.limit], s.negated[:options.limit], s.files)
                    for s in sets]
        files.extend(path for s in sets for path in s.files)
        result["cannot"] = run_negation_pairs(encoder, sets, options.batch_size, options.mer_normalize, items)
    return result


def run_geometry(encoder: Encoder, options: ProbeOptions, files: list) -> dict[str, Any]:
    """Alignment/uniformity, the layer-wise measures (transformer encoders) and STS after PCA."""
    result: dict[str, Any] = {"alignment_uniformity": alignment_uniformity(encoder, options.data_dir)}
    (test,) = subset_limit(load_sts("stsb", "test", options.data_dir), options.limit)
    files.extend(test.files)
    if isinstance(encoder, TransformerEncoder):
        result["layers"] = layer_geometry(encoder, test.sentences1, test.sentences2, test.scores, options.batch_size)
    else:
        result["layers"] = {"skipped": f"{type(encoder).__name__} has no layers (needs a transformer encoder)"}
    tasks = {SHORT_NAMES.get(key, key): subset_limit(load_sts(key, data_dir=options.data_dir), options.limit)
             for key in options.tasks}
    reference = corpus_path("wiki1m", options.data_dir)
    corpus = read_corpus(reference)
    if len(corpus) < encoder.dim:
        result["pca"] = {"skipped": f"{reference.name} has {len(corpus)} sentences, fewer than the {encoder.dim} "
                                    "dimensions to reduce"}
        return result
    sentences = [t for subsets in tasks.values() for s in subsets for t in (*s.sentences1, *s.sentences2)]
    unique = list(dict.fromkeys(sentences))
    vectors = dict(zip(unique, encoder.encode(unique, batch_size=options.batch_size)))
    pairs = {name: (np.stack([vectors[t] for s in subsets for t in s.sentences1]),
                    np.stack([vectors[t] for s in subsets for t in s.sentences2]),
                    np.concatenate([s.scores for s in subsets])) for name, subsets in tasks.items()}
    result["pca"] = {"reference": reference.name, "reference_sentences": len(corpus),
                     "dims": pca_sts(encoder.encode(corpus, batch_size=options.batch_size).astype(np.float64),
                                     pairs)}
    files.append(reference)
    files.extend(path for subsets in tasks.values() for s in subsets for path in s.files)
    return result


def _run_parts(encoder: Encoder, parts: tuple[str, ...], suite: str, options: ProbeOptions, payload: dict[str, Any],
               files: list, items: dict[str, np.ndarray]) -> None:
    """Each suite of ``parts`` into ``payload``; the files read go to ``files``, the per-item outputs to
    ``items``."""
    if "sts" in parts:
        payload["sts"], read = run_sts(encoder, options.tasks, options.data_dir, options.batch_size, options.limit,
                                       items)
        files.extend(read)
    if "bias" in parts:
        payload["bias"] = run_bias(encoder, options, files, items)
    if "transfer" in parts:
        payload["transfer"], read = run_transfer(encoder, options.transfer_tasks, options.data_dir, options.protocol,
                                                 options.batch_size, options.n_jobs, options.limit, items)
        files.extend(read)
    if "probing" in parts:
        try:
            folder = probing_dir(options.probing_dir, options.data_dir)
        except DataNotFoundError as err:
            if suite != "all":
                raise
            payload["probing"] = {"skipped": str(err)}
        else:
            payload["probing"], read = run_probing(encoder, folder, protocol_name=options.protocol,
                                                   batch_size=options.batch_size, n_jobs=options.n_jobs,
                                                   limit=options.limit, items=items)
            files.extend(read)
    if "geometry" in parts:
        payload["geometry"] = run_geometry(encoder, options, files)


def run_probes(encoder: Encoder, suite: str, options: ProbeOptions) -> dict[str, Any]:
    """The results JSON payload of ``suite`` (``sts``, ``bias``, ``transfer``, ``probing``, ``geometry``, ``all``, or
    several joined by commas); with several suites each distinct sentence is encoded once. ``payload["items"]``
    holds the per-item outputs as arrays by name (each STS and bias pair's cosine and gold score, each source's
    paraphrase-over-negation outcome, each CANNOT pair's cosine, each transfer and probing test item's
    prediction and label): :func:`write_outputs` writes them to ``OUT.items.npz`` and records its sha256."""
    parts = suite_parts(suite)
    import torch

    torch.manual_seed(options.seed)
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    payload: dict[str, Any] = {"cselab_version": __version__, "suite": suite, "model": encoder.describe(),
                               "metric": "Spearman's rho x 100 of cosine similarity against gold scores"}
    files: list = []
    items: dict[str, np.ndarray] = {}
    with encoder.remembering() if len(parts) > 1 else contextlib.nullcontext():
        _run_parts(encoder, parts, suite, options, payload, files, items)
    root = data_root(options.data_dir)
    payload.update({"limit": options.limit, "seed": options.seed, "started": started.isoformat(timespec="seconds"),
                    "wall_time_s": round(time.perf_counter() - clock, 2), "versions": package_versions(),
                    "data": {"root": str(root.resolve()), "sha256": checksums(files, root)},
                    "provenance": provenance(_device(encoder), encoder.weights),
                    "embedding_cache": encoder.cache.summary() if encoder.cache is not None else None,
                    "items": items})
    return payload


def _device(encoder: Encoder) -> str:
    """The device an encoder computes on (cpu for one without a torch model)."""
    device = getattr(encoder, "device", None) or getattr(getattr(encoder, "model", None), "device", None)
    return str(device) if device is not None else "cpu"


def write_plots(payload: dict[str, Any], out: str | os.PathLike) -> list[Path]:
    """The pictures of a payload, beside ``out``: the transformation scatter plot (bias), the accuracy bars
    (transfer, probing) and the geometry panels."""
    out, spec = Path(out), payload["model"]["spec"]
    plots = []
    if "bias" in payload:
        plots.append(plot_transformations(payload["bias"]["transformations"]["pairs"],
                                          out.with_suffix(".transformations.png"), f"Transformation probe: {spec}"))
    accuracies = {name: payload[name] for name in ("transfer", "probing") if task_scores(payload.get(name, {}))}
    if accuracies:
        plots.append(plot_accuracies(accuracies, out.with_suffix(".accuracy.png"), spec))
    if "geometry" in payload:
        plots.append(plot_geometry(payload["geometry"], out.with_suffix(".geometry.png"), spec))
    return plots


def results_path(out: str | os.PathLike) -> Path:
    """The results JSON ``--out`` names: a path ending in ``.json``, or a folder (``FOLDER/results.json``); checked
    before any work (so that a mistake is not found after the scoring)."""
    out = Path(out)
    if out.is_dir() or str(out).endswith(os.sep):
        out = out / "results.json"
    if out.suffix != ".json":
        raise ConfigError(f"--out {out}: the results JSON's name must end in .json (its reports are written beside "
                          f"it as {out.stem}.md and {out.stem}.html), or name a folder")
    check_folder(out, file=True)
    if out.is_dir():
        raise ConfigError(f"--out {out}: a folder where the results JSON goes")
    return out


def write_items(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """The per-item outputs as one compressed NumPy archive (``numpy.load(path)[name]``), written atomically."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return write_bytes_atomic(path, buffer.getvalue())


def _staging(out: Path) -> tuple[Path, Path]:
    """The folder a set of outputs is written into, and the journal that lists them while they move into place."""
    return out.with_name(f".{out.name}.set"), out.with_name(f".{out.name}.moving")


def finish_outputs(out: Path) -> None:
    """Complete what a killed :func:`write_outputs` left: a set whose journal was written is moved into place (every
    file of it was complete); a set without one is discarded (the previous set stays)."""
    stage, journal = _staging(out)
    if journal.is_file():
        for name in read_json(journal, ConfigError, expect=list):
            if (stage / name).exists():
                os.replace(stage / name, out.parent / name)
        journal.unlink()
    remove_path(stage)


def write_outputs(payload: dict[str, Any], out: str | os.PathLike) -> list[Path]:
    """The results JSON at ``out`` and, beside it, its plots, a Markdown report and an HTML page, written as one
    set: all of them into a staging folder, then moved into place under a journal (the JSON last), so that a kill
    leaves the previous set, or a new one that :func:`finish_outputs` completes. Returns the files."""
    out = results_path(out)
    finish_outputs(out)
    stage, journal = _staging(out)
    stage.mkdir(parents=True)
    arrays = payload.pop("items", None) or {}
    if arrays:
        items = write_items(stage / f"{out.stem}.items.npz", arrays)
        payload["items"] = {"file": items.name, "sha256": sha256(items), "arrays": sorted(arrays)}
    staged = write_json_atomic(stage / out.name, payload)
    plots = write_plots(payload, staged)
    markdown = markdown_report(payload, plots)
    names = [*(p.name for p in plots), *([f"{out.stem}.items.npz"] if arrays else []),
             write_text_atomic(staged.with_suffix(".md"), markdown).name,
             write_text_atomic(staged.with_suffix(".html"), html_report(markdown)).name, out.name]
    write_json_atomic(journal, names)
    finish_outputs(out)
    return [out.parent / name for name in (names[-1], *names[:-1])]
