import math

import pytest
import torch

from cselab.train.losses import cosine_matrix, info_nce, recall, two_way_margin


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def test_info_nce_hand_computed():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    positives = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    # cosines: row 1 -> (1, 1/sqrt2), row 2 -> (0, 1/sqrt2); temperature 1
    c = 1 / math.sqrt(2)
    row1 = -math.log(math.exp(1) / (math.exp(1) + math.exp(c)))
    row2 = -math.log(math.exp(c) / (math.exp(0) + math.exp(c)))
    assert info_nce(anchors, positives, temperature=1.0).item() == pytest.approx((row1 + row2) / 2, abs=1e-6)
    # temperature 0.5 doubles every logit
    row1 = -math.log(math.exp(2) / (math.exp(2) + math.exp(2 * c)))
    row2 = -math.log(math.exp(2 * c) / (math.exp(0) + math.exp(2 * c)))
    assert info_nce(anchors, positives, temperature=0.5).item() == pytest.approx((row1 + row2) / 2, abs=1e-6)


def test_info_nce_extra_negatives_add_columns():
    anchors = torch.tensor([[1.0, 0.0]])
    positives = torch.tensor([[1.0, 0.0]])
    negatives = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    expected = -math.log(math.exp(1) / (math.exp(1) + math.exp(0) + math.exp(-1)))
    assert info_nce(anchors, positives, 1.0, negatives).item() == pytest.approx(expected, abs=1e-6)
    assert info_nce(anchors, positives, 1.0).item() == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="differ in shape"):
        info_nce(anchors, torch.zeros(2, 2))


def test_two_way_margin_hand_computed():
    anchors = torch.tensor([unit(0), unit(0)])
    # row 1: sim(h, h^p) = 0.5, sim(h, h^n) = 0.9 -> max(0.9 - 0.5 + 0.05, 0) + max(0.5 - 0.9 - 0.2, 0) = 0.45
    # row 2: sim(h, h^p) = 0.8, sim(h, h^n) = 0.3 -> max(0.3 - 0.8 + 0.05, 0) + max(0.8 - 0.3 - 0.2, 0) = 0.30
    paraphrases = torch.tensor([unit(math.degrees(math.acos(0.5))), unit(math.degrees(math.acos(0.8)))])
    negations = torch.tensor([unit(-math.degrees(math.acos(0.9))), unit(-math.degrees(math.acos(0.3)))])
    loss = two_way_margin(anchors, paraphrases, negations, alpha=0.05, beta=0.2)
    assert loss.item() == pytest.approx((0.45 + 0.30) / 2, abs=1e-6)
    # inside the band (alpha < difference < beta): no loss
    inside = two_way_margin(anchors[:1], torch.tensor([unit(math.degrees(math.acos(0.6)))]),
                            torch.tensor([unit(math.degrees(math.acos(0.5)))]))
    assert inside.item() == pytest.approx(0.0, abs=1e-7)


def test_two_way_margin_of_no_rows_is_zero_with_a_gradient():
    anchors = torch.zeros(0, 4, requires_grad=True)
    loss = two_way_margin(anchors, torch.zeros(0, 4), torch.zeros(0, 4))
    loss.backward()
    assert loss.item() == 0.0 and anchors.grad is not None


def test_recall_hand_computed_and_its_gradient():
    theta = [torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([[3.0]], requires_grad=True)]
    start = [torch.tensor([0.0, 0.0]), torch.tensor([[1.0]])]
    loss = recall(theta, start, gamma=2e-3)
    assert loss.item() == pytest.approx(0.5 * 2e-3 * (1 + 4 + 4))
    loss.backward()
    assert theta[0].grad.tolist() == pytest.approx([2e-3 * 1, 2e-3 * 2])  # gamma * (theta - theta*)
    with pytest.raises(ValueError, match="at least one parameter"):
        recall([], [])


def test_gradients_reach_both_views():
    anchors = torch.randn(4, 8, requires_grad=True)
    positives = torch.randn(4, 8, requires_grad=True)
    info_nce(anchors, positives).backward()
    assert anchors.grad.abs().sum() > 0 and positives.grad.abs().sum() > 0
    assert cosine_matrix(anchors, positives).shape == (4, 4)
