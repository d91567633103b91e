"""Surface-structure bias on the Cont./Oppn. splits: Spearman x 100 on each part of each used subset.

The headline figures are the size-weighted averages over subsets of the Cont. and Oppn.
correlations (each part weighted by its own size), and the gap Cont. - Oppn.: an encoder
that reads surface form for meaning scores well on Cont. and poorly on Oppn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cselab.checksum import sha256
from cselab.data import DataNotFoundError, NegationPairs, load_cannot
from cselab.encoders import Encoder
from cselab.evaluation.probe import Result
from cselab.metrics import spearman
from cselab.probes.report import bias_tables
from cselab.probes.splits import SubsetSplit, build_splits, split_summary
from cselab.probes.sts import similarities
from cselab.probes.suite import ProbeOptions, Suite, register_suite
from cselab.probes.names import SPLIT_RULES
from cselab.probes.transformations import (
    handwritten_testset,
    paraphrase_over_negation,
    read_testset,
    run_negation_pairs,
    run_transformations,
)


def weighted_average(values: Sequence[float], weights: Sequence[int]) -> float | None:
    """Average of ``values`` weighted by ``weights``; None when nothing has weight."""
    weights = np.asarray(weights, dtype=np.float64)
    return float(np.average(values, weights=weights)) if weights.sum() > 0 else None


def score_splits(splits: Sequence[SubsetSplit], sims: Sequence[np.ndarray]) -> dict[str, Any]:
    """Per-subset Cont./Oppn. Spearman x 100 and their weighted averages, from each pair's similarity."""
    subsets = {}
    for s, sim in zip(splits, sims):
        subsets[s.name] = {"cont": 100 * spearman(sim[s.cont], s.pairs.scores[s.cont]),
                           "oppn": 100 * spearman(sim[~s.cont], s.pairs.scores[~s.cont]),
                           "n_cont": s.n_cont, "n_oppn": s.n_oppn}
    cont = weighted_average([v["cont"] for v in subsets.values()], [v["n_cont"] for v in subsets.values()])
    oppn = weighted_average([v["oppn"] for v in subsets.values()], [v["n_oppn"] for v in subsets.values()])
    gap = cont - oppn if cont is not None and oppn is not None else None
    return {"cont_wavg": cont, "oppn_wavg": oppn, "gap": gap, "subsets": subsets}


def run_bias_splits(encoder: Encoder, splits: Sequence[SubsetSplit], batch_size: int = 64,
                    items: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Score ``encoder`` on the used subsets' Cont. and Oppn. parts (one encode call for all of them); ``items``
    (when given) receives each pair's cosine, gold score and part, ``bias/splits/SUBSET/sim``, ``gold``, ``cont``."""
    used = [s for s in splits if s.included]
    sims = similarities(encoder, [s.pairs for s in used], batch_size)
    if items is not None:
        for s, sim in zip(used, sims):
            items.update({f"bias/splits/{s.name}/sim": sim, f"bias/splits/{s.name}/gold": s.pairs.scores,
                          f"bias/splits/{s.name}/cont": np.asarray(s.cont, dtype=bool)})
    return score_splits(used, sims)


def run_bias(encoder: Encoder, options: ProbeOptions, files: list, items: dict | None = None) -> dict[str, Any]:
    """Cont./Oppn. splits, the transformation test set and, when present, the CANNOT negation sets; ``items``
    (when given) receives the per-item outputs (see :func:`run_probes`)."""
    splits = build_splits(options.data_dir, options.mer_normalize, options.split_rule, options.limit)
    files.extend(path for s in splits for path in s.pairs.files)
    result: dict[str, Any] = {"mer_normalize": options.mer_normalize,
                              "splits": {"split_rule": options.split_rule,
                                         "split_rule_description": SPLIT_RULES[options.split_rule],
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


@register_suite
class BiasSuite(Suite):
    """Cont./Oppn. splits, the transformation test set and the CANNOT negation pairs."""

    name = "bias"

    def run(self, encoder: Encoder) -> Result:
        items: dict[str, np.ndarray] = {}
        files: list = []
        scores = run_bias(encoder, self.options, files, items)
        return Result(scores, None, items, files)  # several figures, none higher-is-better on its own

    def sections(self, section: dict[str, Any], spec: str) -> list[str]:
        return ["## Bias probes", bias_tables(section)]
