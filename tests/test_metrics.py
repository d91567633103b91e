import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from cselab.metrics import cosine_rows, pearson, spearman


def test_spearman_matches_scipy_with_ties():
    x = np.array([0.9, 0.1, 0.5, 0.5, 0.3, 0.8, 0.2])
    y = np.array([5.0, 0.0, 2.5, 3.0, 3.0, 4.2, 1.0])
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert pearson(x, y) == pytest.approx(pearsonr(x, y).statistic, abs=1e-12)


def test_spearman_hand_computed():
    # ranks x: 1 2 3 4, ranks y: 2 1 4 3; d^2 = 4; rho = 1 - 6*4 / (4*15) = 0.6
    assert spearman([0.1, 0.2, 0.3, 0.4], [2.0, 1.0, 4.0, 3.0]) == pytest.approx(0.6)


def test_constant_input_gives_nan_not_an_error():
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="equal lengths"):
        pearson([1, 2], [1, 2, 3])


def test_cosine_rows():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    b = np.array([[0.0, 2.0], [2.0, 2.0], [1.0, 0.0]])
    np.testing.assert_allclose(cosine_rows(a, b), [0.0, 1.0, 0.0])
