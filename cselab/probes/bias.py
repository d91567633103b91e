"""Surface-structure bias on the Cont./Oppn. splits: Spearman x 100 on each part of each used subset.

The headline figures are the size-weighted averages over subsets of the Cont. and Oppn.
correlations (each part weighted by its own size), and the gap Cont. - Oppn.: an encoder
that reads surface form for meaning scores well on Cont. and poorly on Oppn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cselab.encoders import Encoder
from cselab.metrics import spearman
from cselab.probes.splits import SubsetSplit
from cselab.probes.sts import similarities


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
