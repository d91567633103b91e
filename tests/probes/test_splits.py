import json

import numpy as np
import pytest

from cselab.data import STSPairs
from cselab.probes.bias import score_splits, weighted_average
from cselab.probes.splits import PAPER_SUBSETS, build_splits, split_labels, split_subset, split_table, write_pairs_jsonl

# OssCSE's appendix C (Table 6): Cont. and Oppn. Spearman of its UnSup model on each Table 2 subset, and their
# weighted averages as its Table 3 reports them.
TABLE_6_UNSUP = {"STS12-MSRvid": (0.8848, 0.7306), "STS13-headlines": (0.8688, 0.4487),
                 "STS13-OnWN": (0.8584, 0.7816), "STS14-deft-forum": (0.7269, 0.355),
                 "STS14-headlines": (0.8578, 0.4066), "STS14-images": (0.8723, 0.3638),
                 "STS15-answers-students": (0.8394, 0.322), "STS15-headlines": (0.8932, 0.402),
                 "STS15-images": (0.8926, 0.5648), "STS16-answer-answer": (0.7646, 0.5011),
                 "STS16-headlines": (0.8887, 0.3836), "STS16-plagiarism": (0.9098, 0.5058),
                 "STS16-postediting": (0.8982, 0.0719), "STS16-question-question": (0.7187, 0.6347),
                 "STSB-train": (0.8577, 0.4966), "STSB-test": (0.8354, 0.5415)}
TABLE_3_UNSUP = (0.8574, 0.4982)


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


def test_footnote_rule_keeps_subsets_inside_the_score_band():
    def used(scores):
        return split_subset(_subset(scores), rule="footnote").included

    assert used([1, 2, 3, 4, 5])                 # median 3
    assert not used([0, 1, 1.5, 2, 4])           # median 1.5
    assert not used([3, 4, 4, 5, 5])             # median 4
    assert used([0, 1, 2, 4, 5])                 # median 2, on the edge


def test_paper_rule_keeps_table_2s_subsets_by_name():
    assert not split_subset(_subset([1, 2, 3, 4, 5], "MSRpar")).included   # in the band, not in Table 2
    assert split_subset(_subset([3, 4, 4, 5, 5], "MSRvid")).included        # in Table 2 (its median is 2.4 there)
    with pytest.raises(ValueError, match="Unknown split rule 'table2'; choose one of paper, footnote"):
        split_subset(_subset([1, 2, 3]), rule="table2")


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
    assert [s.name for s in splits if s.included] == list(PAPER_SUBSETS)
    footnote = {s.name for s in build_splits(data_dir, rule="footnote") if s.included}
    assert footnote - set(PAPER_SUBSETS) == {"STS12-MSRpar", "STS14-deft-news", "STS14-OnWN", "STS14-tweet-news"}
    assert set(PAPER_SUBSETS) < footnote
    for s in splits:
        assert s.n_cont + s.n_oppn == len(s.pairs)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in split_table(splits).splitlines()}
    assert rows["STS14-OnWN"] == ["STS14-OnWN", "462", "288", "3.40", "0.5714", "no (not in Table 2)"]
    assert rows["STS13-FNWN"] == ["STS13-FNWN", "107", "82", "1.40", "0.9545", "no (median score outside [2, 3.5])"]
    path = write_pairs_jsonl(splits[:1], tmp_path / "pairs.jsonl")
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {"subset", "index", "sentence1", "sentence2", "score", "mer", "split", "subset_used"}
    assert first["subset"] == "STS12-MSRpar" and first["split"] in ("cont", "oppn")


def test_table_3_is_table_6_weighted_by_each_parts_own_size(data_dir):
    """Table 6's per-subset figures, weighted by the sizes of our Cont. and Oppn. parts, give Table 3's averages to
    within 0.001: the paper weights each part by its own size (equal weights give 0.848 and 0.469), and our splits
    of its 16 subsets have its sizes, or very nearly."""
    parts = {s.name: s for s in build_splits(data_dir) if s.included}
    cont = weighted_average([TABLE_6_UNSUP[n][0] for n in parts], [parts[n].n_cont for n in parts])
    oppn = weighted_average([TABLE_6_UNSUP[n][1] for n in parts], [parts[n].n_oppn for n in parts])
    assert cont == pytest.approx(TABLE_3_UNSUP[0], abs=1e-3)
    assert oppn == pytest.approx(TABLE_3_UNSUP[1], abs=1e-3)
    assert np.mean([v[1] for v in TABLE_6_UNSUP.values()]) == pytest.approx(0.4694, abs=1e-4)
