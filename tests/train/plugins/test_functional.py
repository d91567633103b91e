import math

import pytest
import torch

from cselab.registry import build, get
from cselab.train import plugins  # noqa: F401  (the perturb logit transform registered)
from cselab.train.plugins.functional import (
    cosine_matrix,
    dynamic_margin,
    info_nce,
    nt_xent,
    perturb_logits,
    recall,
    sg_opt,
    two_way_margin,
)


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
    with pytest.raises(ValueError, match="do not match"):
        info_nce(anchors, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at offset 2"):
        info_nce(anchors, torch.zeros(2, 2), offset=2)


def test_info_nce_offset_places_anchors_among_more_positives():
    # the anchor is the second process's row: its positive is column 1, column 0 is a negative
    anchors = torch.tensor([[1.0, 0.0]])
    positives = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    expected = -math.log(math.exp(1) / (math.exp(1) + math.exp(0)))
    assert info_nce(anchors, positives, 1.0, offset=1).item() == pytest.approx(expected, abs=1e-6)
    per_row = info_nce(positives, positives, 1.0, reduction="none")
    assert per_row.shape == (2,) and per_row.mean().item() == pytest.approx(info_nce(positives, positives, 1.0).item())


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


SIMILARITIES = torch.tensor([[0.5, 0.2, 0.1]])  # row 0: positive 0.5, negatives 0.2 and 0.1


@pytest.mark.parametrize("pattern, expected", [
    ("p+", [0.6, 0.2, 0.1]), ("p-", [0.4, 0.2, 0.1]), ("n+", [0.5, 0.3, 0.2]), ("n-", [0.5, 0.1, 0.0]),
    ("p+n-", [0.6, 0.1, 0.0]), ("p-n+", [0.4, 0.3, 0.2]), ("p-n-", [0.4, 0.1, 0.0]), ("p+n+", [0.6, 0.3, 0.2])])
def test_perturbation_patterns_shift_the_right_logits_the_right_way(pattern, expected):
    shifted = perturb_logits(SIMILARITIES, torch.tensor([0]), pattern, 0.1)
    assert shifted[0].tolist() == pytest.approx(expected, abs=1e-6)


def test_perturbation_follows_the_label_and_rejects_unknown_patterns():
    shifted = perturb_logits(torch.tensor([[0.5, 0.2], [0.3, 0.9]]), torch.tensor([0, 1]), "p+n-", 0.1)
    assert shifted.tolist() == [pytest.approx([0.6, 0.1]), pytest.approx([0.2, 1.0])]
    for bad in ("", "x+", "n-p+", "p+p-"):
        with pytest.raises(ValueError, match="perturbation"):
            perturb_logits(SIMILARITIES, torch.tensor([0]), bad, 0.1)


def test_dynamic_margin_is_the_positive_similarity_over_the_negatives_and_detached():
    similarities = SIMILARITIES.clone().requires_grad_(True)
    margin = dynamic_margin(similarities, torch.tensor([0]))
    assert margin.item() == pytest.approx(0.5 / 2) and not margin.requires_grad


def test_ifm_and_byop_losses_hand_computed():
    anchors, positives = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    c = 1 / math.sqrt(2)  # row 0: positive 1, negative c; row 1: positive c, negative 0

    def row(positive, negative):
        return -math.log(math.exp(positive) / (math.exp(positive) + math.exp(negative)))

    plain = (row(1, c) + row(c, 0)) / 2
    ifm = (row(1 - 0.1, c + 0.1) + row(c - 0.1, 0 + 0.1)) / 2  # p-n+: ascent direction
    assert perturbed(anchors, positives, "p-n+", 0.1) == pytest.approx(ifm, abs=1e-6)
    assert perturbed(anchors, positives, "p-n+", 0.1, multitask=True) == pytest.approx((plain + ifm) / 2, abs=1e-6)
    byop = (row(1 + 0.1, c - 0.1) + row(c + 0.1, 0 - 0.1)) / 2  # p+n-: descent direction, lower loss
    assert perturbed(anchors, positives, "p+n-", 0.1) == pytest.approx(byop, abs=1e-6)
    assert byop < plain < ifm
    # dynamic margin: sim(z_i, z_i') / (N - 1), N - 1 = 1 negative here
    dynamic = (row(1, c - 1) + row(c, 0 - c)) / 2  # n-
    assert perturbed(anchors, positives, "n-", "dynamic") == pytest.approx(dynamic, abs=1e-6)


def perturbed(anchors, positives, pattern, margin, multitask=False) -> float:
    """InfoNCE (temperature 1) through the ``perturb`` logit transform plug-in, as a config builds it."""
    transform = build(get("logit_transform", "perturb"), {"pattern": pattern, "margin": margin})
    return info_nce(anchors, positives, 1.0, transform=transform, multitask=multitask).item()


def test_multitask_without_a_transform_is_refused():
    with pytest.raises(ValueError, match="multitask .* needs a transform"):
        info_nce(torch.eye(2), torch.eye(2), multitask=True)


def test_nt_xent_hand_computed():
    first, second = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    vectors = [unit(0), unit(90), unit(45), unit(90)]

    def cos(a, b):
        return a[0] * b[0] + a[1] * b[1]

    tau, total = 0.5, 0.0
    for m, x in enumerate(vectors):
        partner = (m + 2) % 4
        others = sum(math.exp(cos(x, vectors[n]) / tau) for n in range(4) if n != m)
        total += -math.log(math.exp(cos(x, vectors[partner]) / tau) / others)
    assert nt_xent(first, second, tau).item() == pytest.approx(total / 4, abs=1e-5)


def test_sg_opt_matches_a_direct_implementation_of_l_opt3():
    torch.manual_seed(0)
    b, layers, tau = 4, 3, 0.1
    sentences, guides = torch.randn(b, 8), torch.randn(b, layers, 8)

    def phi(u, v):
        return math.exp(torch.nn.functional.cosine_similarity(u, v, dim=0).item() / tau)

    total = 0.0
    for i in range(b):
        others = sum(phi(sentences[i], guides[m, n]) for m in range(b) if m != i for n in range(layers))
        for k in range(layers):
            own = phi(sentences[i], guides[i, k])
            total += -math.log(own / (own + others))
    assert sg_opt(sentences, guides, tau).item() == pytest.approx(total / (b * layers), rel=1e-5)
    with pytest.raises(ValueError, match="do not match"):
        sg_opt(sentences[:3], guides, tau)
