import numpy as np

from cselab.data.transfer import LabelledText
from cselab.probes.transfer import pair_features, run_transfer, sentevals_order, task_features


def test_mrpc_features_are_abs_difference_and_product():
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 4.0]])
    np.testing.assert_array_equal(pair_features(u, v), [[2.0, 6.0, 3.0, -8.0]])


def test_rows_follow_sentevals_sort_by_length_then_label():
    data = LabelledText("MR", "all", ["a b c", "a", "b c", "c", "d e"], np.array([0, 1, 1, 0, 0]))
    assert sentevals_order(data).tolist() == [3, 1, 4, 2, 0]
    vectors = {t: np.array([float(len(t)), 0.0]) for t in data.texts}
    X, y, rows = task_features({"all": data}, vectors)
    assert y.tolist() == [0, 1, 0, 1, 0] and X[:, 0].tolist() == [1, 1, 3, 3, 5]
    assert rows["all"].tolist() == [0, 1, 2, 3, 4]


def test_run_transfer_encodes_each_sentence_once(data_dir):
    from cselab.encoders import LexicalEncoder

    class Counting(LexicalEncoder):
        calls = 0

        def encode(self, sentences, **kwargs):
            Counting.calls += 1
            return super().encode(sentences, **kwargs)

    scores, files = run_transfer(Counting(), ("MRPC", "TREC"), data_dir, "fast", limit=40)
    assert Counting.calls == 1 and scores["sentences_encoded"] <= 4 * 40 + 2 * 40
    assert {"MRPC", "TREC", "avg"} <= set(scores) and "f1" in scores["MRPC"]
    assert scores["avg"] == (scores["MRPC"]["acc"] + scores["TREC"]["acc"]) / 2
    assert any(path.name == "TREC_10.label" for path in files)
