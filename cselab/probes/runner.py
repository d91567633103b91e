"""Runs probe suites on an encoder and assembles the results JSON (see README, "Results JSON")."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cselab import __version__
from cselab.checksum import sha256
from cselab.data import DataNotFoundError, NegationPairs, data_root, load_cannot
from cselab.encoders import Encoder
from cselab.probes.bias import run_bias_splits
from cselab.probes.results import checksums, package_versions
from cselab.probes.splits import build_splits, split_summary
from cselab.probes.sts import STS_SUITE, run_sts
from cselab.probes.transformations import (handwritten_testset, plot_transformations, read_testset,
                                           run_negation_pairs, run_transformations)

SUITES = {"sts": ("sts",), "bias": ("bias",), "all": ("sts", "bias")}


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


def run_bias(encoder: Encoder, options: ProbeOptions, files: list) -> dict[str, Any]:
    """Cont./Oppn. splits, the transformation test set and, when present, the CANNOT negation sets."""
    splits = build_splits(options.data_dir, options.mer_normalize, limit=options.limit)
    files.extend(path for s in splits for path in s.pairs.files)
    result: dict[str, Any] = {"mer_normalize": options.mer_normalize,
                              "splits": {**run_bias_splits(encoder, splits, options.batch_size),
                                         "table": split_summary(splits)}}
    testset = Path(options.testset) if options.testset else handwritten_testset()
    summary, records = run_transformations(encoder, read_testset(testset), options.batch_size, options.mer_normalize)
    result["transformations"] = {"testset": str(testset), "sha256": sha256(testset), **summary, "pairs": records}
    try:
        sets = load_cannot(options.data_dir)
    except DataNotFoundError as err:
        result["cannot"] = {"skipped": str(err)}
    else:
        if options.limit is not None:
            sets = [NegationPairs(s.name, s.sentences[:options.limit], s.negated[:options.limit], s.files)
                    for s in sets]
        files.extend(path for s in sets for path in s.files)
        result["cannot"] = run_negation_pairs(encoder, sets, options.batch_size, options.mer_normalize)
    return result


def run_probes(encoder: Encoder, suite: str, options: ProbeOptions) -> dict[str, Any]:
    """The results JSON payload of ``suite`` (``sts``, ``bias`` or ``all``)."""
    if suite not in SUITES:
        raise ValueError(f"Unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    import torch

    torch.manual_seed(options.seed)
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    payload: dict[str, Any] = {"cselab_version": __version__, "suite": suite, "model": encoder.describe(),
                               "metric": "Spearman's rho x 100 of cosine similarity against gold scores"}
    files: list = []
    if "sts" in SUITES[suite]:
        payload["sts"], read = run_sts(encoder, options.tasks, options.data_dir, options.batch_size, options.limit)
        files.extend(read)
    if "bias" in SUITES[suite]:
        payload["bias"] = run_bias(encoder, options, files)
    root = data_root(options.data_dir)
    payload.update({"limit": options.limit, "seed": options.seed, "started": started.isoformat(timespec="seconds"),
                    "wall_time_s": round(time.perf_counter() - clock, 2), "versions": package_versions(),
                    "data": {"root": str(root.resolve()), "sha256": checksums(files, root)}})
    return payload


def write_plots(payload: dict[str, Any], out: str | os.PathLike) -> list[Path]:
    """The pictures of a payload, beside ``out``: the transformation scatter plot for the bias suite."""
    if "bias" not in payload:
        return []
    path = Path(out).with_suffix(".transformations.png")
    return [plot_transformations(payload["bias"]["transformations"]["pairs"], path,
                                 f"Transformation probe: {payload['model']['spec']}")]
