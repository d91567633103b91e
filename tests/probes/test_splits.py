import json

import numpy as np
import pytest

from cselab.data import STSPairs
from cselab.probes.bias import score_splits, weighted_average
from cselab.probes.splits import build_splits, split_labels, split_subset, write_pairs_jsonl


def test_split_rule_with_ties_at_both_medians():
    scores = np.array([1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 3.0])
    mers = np.array([0.9, 0.2, 0.5, 0.1, 0.5, 0.1, 0.8])
    cont, median_score, median_mer = split_labels(scores, mers)
    assert (median_score, median_mer) == (3.0, 0.5)
    # pair 0: low score, high MER -> Cont.; pair 1: low score, low MER -> Oppn.;
    # pairs 2, 3, 6: score at the median -> Oppn.; pair 4: MER at the median -> Oppn.;
    # pair 5: high score, low MER -> Cont.
    assert cont.tolist() == [True, False, False, False, False, True, False]


def _subset(scores, name="x"):
    n = len(scores)
    return STSPairs("STS12", name, [f"a b c {i}" for i in range(n)], [f"a b c {i}" if i % 2 else f"x y z {i}"
                                                                       for i in range(n)], np.asarray(scores, float))


def test_subsets_outside_the_score_band_are_excluded():
    assert split_subset(_subset([1, 2, 3, 4, 5])).included           # median 3
    assert not split_subset(_subset([0, 1, 1.5, 2, 4])).included     # median 1.5
    assert not split_subset(_subset([3, 4, 4, 5, 5])).included       # median 4
    assert split_subset(_subset([0, 1, 2, 4, 5])).included           # median 2, on the edge
    assert split_subset(_subset([1, 2, 3, 4, 5]), band=(3.5, 5)).included is False


def test_weighted_average():
    assert weighted_average([80.0, 50.0], [3, 1]) == pytest.approx(72.5)
    assert weighted_average([80.0], [0]) is None


def test_score_splits_weights_each_part_by_its_size():
    split = split_subset(_subset([0.5, 1, 2, 3, 4, 4.5, 1.5, 3.5]))
    sims = np.linspace(0, 1, 8)
    result = score_splits([split, split], [sims, sims])
    assert result["subsets"]["STS12-x"]["n_cont"] + result["subsets"]["STS12-x"]["n_oppn"] == 8
    assert result["cont_wavg"] == pytest.approx(result["subsets"]["STS12-x"]["cont"])
    assert result["gap"] == pytest.approx(result["cont_wavg"] - result["oppn_wavg"])


def test_real_splits_cover_every_subset_and_export_pairs(data_dir, tmp_path):
    splits = build_splits(data_dir)
    assert len(splits) == 5 + 3 + 6 + 5 + 5 + 2
    assert {s.name for s in splits if not s.included} == {
        "STS12-SMTeuroparl", "STS12-surprise.OnWN", "STS12-surprise.SMTnews", "STS13-FNWN",
        "STS15-answers-forums", "STS15-belief"}
    for s in splits:
        assert s.n_cont + s.n_oppn == len(s.pairs)
        assert 2.0 <= s.median_score <= 3.5 or not s.included
    path = write_pairs_jsonl(splits[:1], tmp_path / "pairs.jsonl")
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {"subset", "index", "sentence1", "sentence2", "score", "mer", "split", "subset_used"}
    assert first["subset"] == "STS12-MSRpar" and first["split"] in ("cont", "oppn")
