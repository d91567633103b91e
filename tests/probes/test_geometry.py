import math

import numpy as np
import pytest

from cselab.probes.geometry import alignment, alignment_uniformity, uniformity


def test_alignment_and_uniformity_against_their_formulas():
    first = np.array([[1.0, 0.0], [0.0, 2.0]])
    second = np.array([[0.0, 3.0], [0.0, 1.0]])  # normalized: (1,0)-(0,1) -> |d|^2 = 2; (0,1)-(0,1) -> 0
    assert alignment(first, second) == pytest.approx(1.0)
    points = np.array([[1.0, 0.0], [0.0, 1.0], [-2.0, 0.0]])  # squared distances 2, 4, 2
    expected = math.log((math.exp(-4) + math.exp(-8) + math.exp(-4)) / 3)
    assert uniformity(points) == pytest.approx(expected)
    assert uniformity(points, t=1.0) == pytest.approx(math.log((2 * math.exp(-2) + math.exp(-4)) / 3))


def test_alignment_uniformity_on_stsb_dev(data_dir):
    from cselab.encoders import load_encoder

    result = alignment_uniformity(load_encoder("bow"), data_dir)
    assert result["split"] == "dev" and result["positive_pairs"] > 100
    assert 0 <= result["alignment"] <= 4 and -4 <= result["uniformity"] <= 0
