import numpy as np

from cselab.data.transfer import LabelledText
from cselab.evaluation.transfer import pair_features, sentevals_order, task_features


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
