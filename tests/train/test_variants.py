import math

import pytest
import torch

from cselab.registry import build, check_plugin, get
from cselab.train.plugins.augmentations import FGSM
from cselab.train.plugins.hooks import perturb_weights, restore_weights
from cselab.train.plugins.functional import info_nce
from cselab.train.config.methods import load_method
from cselab.train.plugins.negatives import covariance_samples, gaussian_samples
from cselab.train.objective import Objective
from cselab.train.run.setup import build_encoder
from tests.train.test_objective import ROWS


@pytest.mark.parametrize("kind", ["gaussian_noise", "gaussian_dropout", "bernoulli_dropout", "feature_dropout"])
def test_input_augmentations_change_the_embeddings_and_keep_shapes(kind):
    torch.manual_seed(0)
    embeddings = torch.randn(8, 20, 64)
    augment = build(get("input_augment", kind), check_plugin("input_augment", {"kind": kind}, "augment"))
    augmented = augment(embeddings)
    assert augmented.shape == embeddings.shape and not torch.equal(augmented, embeddings)
    if kind == "gaussian_noise":
        assert (augmented - embeddings).std().item() == pytest.approx(0.001, rel=0.05)
    if kind == "gaussian_dropout":
        ratio = augmented / embeddings
        assert ratio.mean().item() == pytest.approx(1.0, abs=1e-4)
        assert ratio.std().item() == pytest.approx(1e-3, rel=0.05)
    if kind == "bernoulli_dropout":
        assert (augmented == 0).float().mean().item() == pytest.approx(0.1, abs=0.02)
    if kind == "feature_dropout":  # a dropped dimension is dropped at every token of the sentence
        dropped = (augmented == 0).all(dim=1)
        assert dropped.float().mean().item() == pytest.approx(0.1, abs=0.04)
        assert ((augmented == 0).any(dim=1) == dropped).all()


def augment_output(vectors, kind, **params):
    """The output augmentation as a view's ``augment: {kind: KIND, ...}`` builds it, applied to ``vectors``."""
    return build(get("output_augment", kind), check_plugin("output_augment", {"kind": kind, **params}, "augment"))(
        vectors)


def test_output_augmentations():
    torch.manual_seed(0)
    vectors = torch.randn(4000, 10) * torch.arange(1, 11)
    noise = augment_output(vectors, "batch_noise") - vectors
    torch.testing.assert_close(noise.std(dim=0), vectors.std(dim=0), rtol=0.05, atol=0)
    assert (augment_output(vectors, "bernoulli_mask", p=0.1) == 0).float().mean().item() == pytest.approx(0.1, abs=0.01)
    row = torch.tensor([[0.5, -3.0, 0.1, 2.0, -0.2, 1.0, 0.05, -1.5, 0.7, 4.0]])
    assert augment_output(row, "mask_smallest", fraction=0.2)[0].tolist() == \
        pytest.approx([0.5, -3.0, 0.0, 2.0, -0.2, 1.0, 0.0, -1.5, 0.7, 4.0])
    assert augment_output(row, "mask_largest", fraction=0.2)[0].tolist() == \
        pytest.approx([0.5, 0.0, 0.1, 2.0, -0.2, 1.0, 0.05, -1.5, 0.7, 0.0])


def test_fgsm_steps_along_the_sign_of_the_gradient():
    values, gradient = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-0.3, 0.0, 5.0])
    assert FGSM(FGSM.Params(epsilon=0.1))(values, gradient).tolist() == pytest.approx([0.9, 2.0, 3.1])


@pytest.mark.parametrize("preset", ["output-fgsm", "input-fgsm"])
def test_fgsm_views_move_the_way_that_increases_the_loss(tiny_bert_dir, preset):
    method = load_method(preset, ["losses.info_nce.temperature=1.0"])
    encoder = build_encoder(method, str(tiny_bert_dir)).eval()  # no dropout: both passes see the same network
    captured, objective = {}, Objective(method)
    clean = objective.encode(encoder, ROWS, captured=captured)
    clean_loss = objective.total(objective.losses_on(clean))
    (gradient,) = torch.autograd.grad(clean_loss, [captured["positive"]], retain_graph=True)
    moved = objective.encode(encoder, ROWS, directions={"positive": gradient}, reuse=clean)
    assert moved["anchor"][0] is clean["anchor"][0]  # only the FGSM view is encoded again
    if preset == "output-fgsm":
        torch.testing.assert_close(moved["positive"][0], clean["anchor"][0] + 0.001 * gradient.sign())
    assert objective.total(objective.losses_on(moved)).item() > clean_loss.item()


def test_label_smoothing_hand_computed():
    anchors = positives = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # row 0: positive cos 1, negative cos 0
    p = math.exp(1) / (math.exp(1) + 1)
    # targets: 1 - 0.1 + 0.1/2 on the positive, 0.1/2 on the negative
    expected = -(0.95 * math.log(p) + 0.05 * math.log(1 - p))
    assert info_nce(anchors, positives, 1.0, label_smoothing=0.1).item() == pytest.approx(expected, abs=1e-6)
    assert info_nce(anchors, positives, 1.0).item() == pytest.approx(-math.log(p), abs=1e-6)


@pytest.mark.parametrize("kind, size", [("sam", 0.05), ("awp", 5e-3)])
def test_weight_perturbation_sizes_and_exact_restore(kind, size):
    torch.manual_seed(0)
    weights = [torch.randn(3, 4, requires_grad=True), torch.randn(5, requires_grad=True)]
    ((weights[0] ** 3).sum() + (weights[1] ** 2).sum()).backward()
    before = [w.detach().clone() for w in weights]
    originals = perturb_weights(weights, build(get("weight_hook", kind), {"size": size}))
    deltas = [w.detach() - b for w, b in zip(weights, before, strict=True)]
    if kind == "sam":  # one step of length rho along the whole gradient
        step = torch.linalg.vector_norm(torch.cat([d.flatten() for d in deltas]))
        assert step.item() == pytest.approx(size, rel=1e-4)
    else:  # each tensor moves by gamma times its own norm, along its own gradient
        for d, b in zip(deltas, before, strict=True):
            assert torch.linalg.vector_norm(d).item() == pytest.approx(size * torch.linalg.vector_norm(b).item(),
                                                                       rel=1e-4)
    for d, w in zip(deltas, weights, strict=True):
        assert torch.nn.functional.cosine_similarity(d.flatten(), w.grad.flatten(), dim=0).item() == \
            pytest.approx(1.0, abs=1e-5)
    restore_weights(weights, originals)
    assert all(torch.equal(w, b) for w, b in zip(weights, before, strict=True))


def source(kind: str, **params):
    """A source of generated negatives as a method's ``generated: {kind: KIND, ...}`` builds it."""
    return build(get("negatives", kind), check_plugin("negatives", {"kind": kind, **params}, "generated"))


def test_memory_bank_keeps_the_last_batch_of_detached_outputs():
    bank = source("memory_bank", count=4)
    first, second = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    bank.new_batch()
    assert bank(first) is None  # nothing remembered yet
    assert bank(torch.randn(4, 3)) is None  # the same batch: the same (no) negatives
    bank.new_batch()
    out = bank(second)
    assert torch.equal(out, first.detach()) and not out.requires_grad
    bank.new_batch()
    assert torch.equal(bank(torch.randn(4, 3)), second)
    restored = source("memory_bank", count=4)
    restored.load_state_dict(bank.state_dict())
    restored.new_batch()
    assert restored(torch.randn(4, 3)).shape == (4, 3)


def test_gaussian_samples_have_the_batch_statistics_and_the_ablations_theirs():
    torch.manual_seed(0)
    anchors = torch.randn(64, 6) * torch.tensor([0.5, 1, 2, 3, 4, 5]) + torch.arange(6)
    samples = gaussian_samples(anchors, 50_000)
    torch.testing.assert_close(samples.mean(0), anchors.mean(0), atol=0.06, rtol=0)
    torch.testing.assert_close(samples.std(0), anchors.std(0), rtol=0.02, atol=0)
    standard = gaussian_samples(anchors, 50_000, mean=0, std=1)
    torch.testing.assert_close(standard.mean(0), torch.zeros(6), atol=0.02, rtol=0)
    torch.testing.assert_close(standard.std(0), torch.ones(6), atol=0.02, rtol=0)
    assert gaussian_samples(anchors, 10, mean="batch", std=1).shape == (10, 6)


def test_covariance_samples_keep_correlations():
    torch.manual_seed(0)
    base = torch.randn(500, 1)
    anchors = torch.cat([base, 2 * base + 0.1 * torch.randn(500, 1), torch.randn(500, 1)], dim=1)
    samples = covariance_samples(anchors, 50_000)
    torch.testing.assert_close(torch.cov(samples.T), torch.cov(anchors.T), atol=0.05, rtol=0.05)


@pytest.mark.parametrize("kind", ["gmm", "vae", "anchor_noise", "covariance"])
def test_history_and_noise_generators_give_count_negatives(kind):
    torch.manual_seed(0)
    schema = get("negatives", kind).schema()
    params = {key: value for key, value in {"count": 16, "history": 2}.items() if key in schema}
    generator = source(kind, **params)
    outputs = []
    for _ in range(3):
        generator.new_batch()
        outputs.append(generator(torch.randn(8, 5)))
    expected = (8, 5) if kind == "anchor_noise" else (16, 5)
    assert all(o.shape == expected for o in outputs[1:])
    assert (outputs[0] is None) == (kind in ("gmm", "vae"))
    assert len(generator.memory) <= 2


@pytest.mark.parametrize("preset", ["vae-neg", "memory-bank"])
def test_a_sources_state_resumes_from_the_objectives_saved_state_dict(preset, tmp_path):
    torch.manual_seed(0)
    method = load_method(preset)
    objective = Objective(method)
    for _ in range(3):
        objective.new_batch()
        objective.losses[0].generated(torch.randn(8, 5))
    torch.save(objective.state_dict(), tmp_path / "objective.pt")  # as OUT/last/objective-0.pt
    restored = Objective(method)
    restored.load_state_dict(torch.load(tmp_path / "objective.pt", weights_only=True))
    anchors = torch.randn(8, 5)
    expected = []
    for run in (objective, restored):
        run.new_batch()
        torch.manual_seed(1)
        expected.append(run.losses[0].generated(anchors))
    assert expected[0] is not None and torch.equal(*expected)
