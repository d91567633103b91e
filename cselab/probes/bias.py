"""Surface-structure bias on the Cont./Oppn. splits: Spearman x 100 on each part of each used subset.

The headline figures are the size-weighted averages over subsets of the Cont. and Oppn.
correlations (each part weighted by its own size), and the gap Cont. - Oppn.: an encoder
that reads surface form for meaning scores well on Cont. and poorly on Oppn.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cselab.checksum import sha256
from cselab.data import DataNotFoundError, NegationPairs, load_cannot
from cselab.document import Block, Formatted, Heading, Paragraph, Table, number
from cselab.encoders import Encoder
from cselab.evaluation.scoring import Result
from cselab.metrics import spearman
from cselab.probes.splits import SubsetSplit, build_splits, split_summary
from cselab.evaluation.sts import similarities
from cselab.probes.paired import aligned
from cselab.probes.results import data_key, suite_setting
from cselab.probes.significance import Stratum
from cselab.probes.suite import PairedFigures, ProbeOptions, Presenter, Score, Suite, register_suite
from cselab.probes.names import SPLIT_RULES
from cselab.normalizers import NORMALIZERS
from cselab.registry import Checked, setting
from cselab.probes.transformations import (
    handwritten_testset,
    plot_transformations,
    paraphrase_over_negation,
    read_testset,
    run_negation_pairs,
    run_transformations,
)


TRANSFORMATIONS = "bias.transformation probe"  # a scope of its own: its items are its test set's


def weighted_average(values: Sequence[float], weights: Sequence[int]) -> float | None:
    """Average of ``values`` weighted by ``weights``; None when nothing has weight."""
    array = np.asarray(weights, dtype=np.float64)
    return float(np.average(values, weights=array)) if array.sum() > 0 else None


def score_splits(splits: Sequence[SubsetSplit], sims: Sequence[np.ndarray]) -> dict[str, Any]:
    """Per-subset Cont./Oppn. Spearman x 100 and their weighted averages, from each pair's similarity."""
    subsets: dict[str, dict[str, Any]] = {}
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


def run_bias(encoder: Encoder, options: ProbeOptions, files: list, items: dict | None = None,
             params: BiasSuite.Options | None = None) -> dict[str, Any]:
    """Cont./Oppn. splits, the transformation test set and, when present, the CANNOT negation sets, under the bias
    suite's settings ``params`` (None: their defaults); ``items`` (when given) receives the per-item outputs (see
    :func:`run_probes`)."""
    own = BiasSuite.Options() if params is None else params
    splits = build_splits(options.data_dir, own.mer_normalize, own.split_rule, options.limit)
    files.extend(path for s in splits for path in s.pairs.files)
    result: dict[str, Any] = {"mer_normalize": own.mer_normalize,
                              "splits": {"split_rule": own.split_rule,
                                         "split_rule_description": SPLIT_RULES[own.split_rule],
                                         **run_bias_splits(encoder, splits, options.batch_size, items),
                                         "table": split_summary(splits)}}
    testset = Path(own.testset) if own.testset else handwritten_testset()
    summary, records = run_transformations(encoder, read_testset(testset), options.batch_size, own.mer_normalize)
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
        result["cannot"] = run_negation_pairs(encoder, sets, options.batch_size, own.mer_normalize, items)
    return result


def splits_comparable(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Whether two results split the same pairs into the same Cont. and Oppn. parts (another split rule or MER
    normalisation does not), so that their Cont./Oppn. figures can be compared pair by pair."""
    mine = {key for key in a if key.startswith("bias/splits/")}
    theirs = {key for key in b if key.startswith("bias/splits/")}
    return mine == theirs and all(np.array_equal(a[k], b[k]) for k in mine if k.endswith(("/cont", "/gold")))


def _split_figures(a: dict[str, np.ndarray], b: dict[str, np.ndarray], subsets: list[str]
                   ) -> dict[str, tuple[list[Stratum], float]]:
    """Cont. and Oppn. (each subset's part a Spearman stratum weighted by its share of the part's pairs) and the gap."""
    parts = {}
    for part, keep in (("Cont.", True), ("Oppn.", False)):
        strata = []
        for key in subsets:
            mask = a[key + "/cont"] == keep
            x, y = aligned(a, b, key + "/sim")
            strata.append(Stratum(x[mask], y[mask], a[key + "/gold"][mask].astype(np.float64), int(mask.sum())))
        total = sum(s.weight for s in strata)
        parts[part] = [Stratum(s.a, s.b, s.gold, s.weight / total) for s in strata if s.weight]
    gap = parts["Cont."] + [Stratum(s.a, s.b, s.gold, -s.weight) for s in parts["Oppn."]]
    return {"Cont.": (parts["Cont."], 100.0), "Oppn.": (parts["Oppn."], 100.0), "Gap": (gap, 100.0)}


class BiasPresenter(Presenter):
    """The bias suite's section: headline figures, the per-subset table, transformations and CANNOT; compared pair by
    pair within each split and probe."""

    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        """Headline bias figures, the per-subset Cont./Oppn. table, transformations and CANNOT."""
        splits, transformations, cannot = section["splits"], section["transformations"], section["cannot"]
        accuracy = transformations["paraphrase_over_negation"]
        share = accuracy["accuracy"] and 100 * accuracy["accuracy"]
        blocks: list[Block] = [
            Heading("Bias probes"), Heading("Surface-structure bias (Spearman x 100)", 3),
            Paragraph(f"Cont./Oppn. over {len(splits['subsets'])} subsets, split rule "
                      f"`{suite_setting(splits, 'split_rule', 'footnote')}` "
                      f"({suite_setting(splits, 'split_rule_description', 'median gold score in [2, 3.5]')}); "
                      "averages weight each part by its own size, as the paper's Table 3."),
            Table([number("Cont. (wavg)"), number("Oppn. (wavg)"), number("Gap"), number("Paraphrase > negation")],
                  [[splits["cont_wavg"], splits["oppn_wavg"], splits["gap"],
                    Formatted(f"{'n/a' if share is None else f'{share:.1f}'}% of {accuracy['n']}")]]),
            Heading("Cont. and Oppn. per subset", 3),
            Table(["Subset", number("Cont."), number("Oppn."), number("#Cont."), number("#Oppn.")],
                  [[name, v["cont"], v["oppn"], v["n_cont"], v["n_oppn"]] for name, v in splits["subsets"].items()]),
            Heading(f"Transformations ({transformations['n_sources']} sources, "
                    f"{Path(transformations['testset']).name})", 3),
            Table(["Type", number("n"), number("Mean cosine", 3), number("Mean MER", 3)],
                  [[kind, v["n"], v["mean_cosine"], v["mean_mer"]] for kind, v in transformations["types"].items()]),
            Heading("Negation pairs (CANNOT): similarity of a sentence and its negation", 3)]
        if "skipped" in cannot:
            return [*blocks, Paragraph(f"Skipped: {cannot['skipped']}")]
        return [*blocks, Table(["Set", number("n"), number("Mean cosine", 3), number("Mean MER", 3)],
                               [[name, v["n"], v["mean_cosine"], v["mean_mer"]]
                                for name, v in {**cannot["sets"], "all": cannot["all"]}.items()])]

    def main_scores(self, section: dict[str, Any]) -> dict[str, float | None]:
        splits = section.get("splits", {})
        accuracy = section.get("transformations", {}).get("paraphrase_over_negation", {}).get("accuracy")
        return {"cont": splits.get("cont_wavg"), "oppn": splits.get("oppn_wavg"), "gap": splits.get("gap"),
                "para_over_neg": None if accuracy is None else 100 * accuracy,
                "cannot_cosine": section.get("cannot", {}).get("all", {}).get("mean_cosine")}

    def settings(self, section: dict[str, Any]) -> dict[str, Any]:
        return {"split rule": suite_setting(section.get("splits", {}), "split_rule")}

    def compare_notes(self, sections: list[dict[str, Any]]) -> list[str]:
        rules = sorted({suite_setting(s["splits"], "split_rule", "footnote") for s in sections if "splits" in s})
        if len(rules) > 1:
            return [f"Warning: these results use different Cont./Oppn. split rules ({', '.join(rules)}); their Cont., "
                    "Oppn. and Gap columns are not comparable."]
        return [f"Cont./Oppn.: split rule `{rules[0]}`."] if rules else []

    def item_inputs(self, section: dict[str, Any], inputs: dict[str, Any], data: dict[str, Any]
                    ) -> dict[str, dict[str, Any]]:
        """The transformation probe (:data:`TRANSFORMATIONS`) apart: its items are its test set's."""
        transformations = section.get("transformations", {})
        testset = transformations.get("testset")
        if testset and data.get("root"):
            inputs = {k: v for k, v in inputs.items() if k != f"file:{data_key(testset, data['root'])}"}
        return {TRANSFORMATIONS: {"the transformation test set": transformations.get("sha256")},
                self.suite.name: inputs}

    def paired(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray], skip: frozenset[str]) -> PairedFigures:
        """Cont., Oppn. and the gap (pairs split alike only), paraphrase over negation (% of sources), the CANNOT
        cosine (mean over the pairs)."""
        figures: dict[str, tuple[list[Stratum], float]] = {}
        notes: tuple[str, ...] = ()
        subsets = [k[:-4] for k in sorted(a) if k.startswith("bias/splits/") and k.endswith("/sim") and k in b]
        if subsets and splits_comparable(a, b):
            figures.update(_split_figures(a, b, subsets))
        elif all(any(k.startswith("bias/splits/") for k in found) for found in (a, b)):
            notes = ("Cont./Oppn. not compared pair by pair: they split the pairs differently (another split rule or "
                     "MER normalisation)",)
        key = "bias/transformations/paraphrase_over_negation"
        if TRANSFORMATIONS not in skip and key in a and key in b:
            figures["Para > neg (%)"] = ([Stratum(*aligned(a, b, key))], 100.0)
        cannot = [k for k in sorted(a) if k.startswith("bias/cannot/") and k in b]
        if cannot:
            pairs = [aligned(a, b, k) for k in cannot]
            figures["CANNOT cos."] = ([Stratum(np.concatenate([x for x, _ in pairs]),
                                               np.concatenate([y for _, y in pairs]))], 1.0)
        return PairedFigures(figures, None, notes)

    def plots(self, section: dict[str, Any], out: Path, spec: str) -> dict[Path, str]:
        path = plot_transformations(section["transformations"]["pairs"], out.with_suffix(".transformations.png"),
                                    f"Transformation probe: {spec}")
        return {path: "cosine against MER per transformation"}


@register_suite
class BiasSuite(Suite):
    """Cont./Oppn. splits, the transformation test set and the CANNOT negation pairs."""

    name, title = "bias", "Bias"
    rank = 20

    @dataclass
    class Options(Checked):
        where = "probe options"

        split_rule: str = setting("paper", "Cont./Oppn. subsets of the bias suite: paper = the 16 of OssCSE's "
                                  "Table 2, footnote = every subset with median gold score in [2, 3.5] (20 here)",
                                  choices=tuple(SPLIT_RULES))
        testset: str | os.PathLike | None = setting(None, "transformation test set (JSONL) of the bias "
                                                    "suite (default: the hand-written set shipped with cselab)")
        mer_normalize: str = setting("lower", "tokens MER compares: lower-cased whitespace tokens, as written, "
                                     "or lower-cased without punctuation", choices=tuple(NORMALIZERS))
    main = {"cont": Score("Cont."), "oppn": Score("Oppn."), "gap": Score("Gap"),
            "para_over_neg": Score("Para > neg (%)", 1), "cannot_cosine": Score("CANNOT cos.", 3)}
    metadata = ("mer_normalize",)
    presenter = BiasPresenter

    params: Options

    def run(self, encoder: Encoder) -> Result:
        items: dict[str, np.ndarray] = {}
        files: list = []
        scores = run_bias(encoder, self.options, files, items, self.params)
        metadata = {key: scores.pop(key) for key in self.metadata}
        return Result(scores, None, items, files, metadata)  # several figures, none higher-is-better on its own
