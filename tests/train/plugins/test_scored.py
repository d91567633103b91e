"""The losses of scored pairs (CoSENT, AnglE's angle and in-batch objectives) by hand, against AnglE's released
functions (restated from SeanLee97/AnglE ``angle_emb/loss.py`` at 5155458, which cannot be installed beside this
transformers: angle-emb 0.6.1 pins transformers 5.3.0) and against sentence-transformers' own ``CoSENTLoss`` and
``AnglELoss``; Matryoshka as the weighted sum of the loss at each width; the scored-pair data layout."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses import AnglELoss, CoSENTLoss

from cselab.data.tables import load_table
from cselab.errors import ConfigError, DataError, TrainingError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.plugins.functional import angle, angle_in_batch, angle_similarity, cosent, info_nce, ranked_pairs
from cselab.train.run.data import training_rows
from cselab.train.run.setup import build_encoder, setup


# --- AnglE's released functions, restated from angle_emb/loss.py (5155458): inputs laid out pair by pair ----------
def released_cosine_loss(y_true, y_pred, tau=20.0):  # loss.py:23-44
    y_true = y_true[::2, 0]
    y_true = (y_true[:, None] < y_true[None, :]).float()
    y_pred = F.normalize(y_pred, p=2, dim=1)
    y_pred = torch.sum(y_pred[::2] * y_pred[1::2], dim=1) * tau
    y_pred = y_pred[:, None] - y_pred[None, :]
    y_pred = (y_pred - (1 - y_true) * 1e12).view(-1)
    return torch.logsumexp(torch.cat((torch.zeros(1), y_pred)), dim=0)


def released_angle_loss(y_true, y_pred, tau=1.0):  # loss.py:47-93, pooling_strategy 'sum'
    y_true = y_true[::2, 0]
    y_true = (y_true[:, None] < y_true[None, :]).float()
    re_, im_ = torch.chunk(y_pred, 2, dim=1)
    a, b, c, d = re_[::2], im_[::2], re_[1::2], im_[1::2]
    z = torch.sum(c ** 2 + d ** 2, dim=1, keepdim=True)
    re, im = (a * c + b * d) / z, (b * c - a * d) / z
    dz = torch.sum(a ** 2 + b ** 2, dim=1, keepdim=True) ** 0.5
    dw = torch.sum(c ** 2 + d ** 2, dim=1, keepdim=True) ** 0.5
    re, im = re / (dz / dw), im / (dz / dw)
    y_pred = torch.abs(torch.sum(torch.cat((re, im), dim=1), dim=1)) * tau
    y_pred = y_pred[:, None] - y_pred[None, :]
    y_pred = (y_pred - (1 - y_true) * 1e12).view(-1)
    return torch.logsumexp(torch.cat((torch.zeros(1), y_pred)), dim=0)


def released_in_batch_negative_loss(y_true, y_pred, tau=20.0):  # loss.py:96-144, negative_weights 0
    def make_target_matrix(y_true):
        idxs = torch.arange(0, y_pred.shape[0]).int()
        y_true = y_true.int()
        idxs_1 = idxs[None, :] * y_true.T + (y_true.T == 0).int() * -2
        idxs_2 = (idxs + 1 - idxs % 2 * 2)[:, None] * y_true + (y_true == 0).int() * -1
        return (idxs_1 == idxs_2).float()

    y_true = make_target_matrix(y_true)
    y_pred = F.normalize(y_pred, dim=1, p=2)
    similarities = (y_pred @ y_pred.T - torch.eye(y_pred.shape[0]) * 1e12) * tau
    return -(F.log_softmax(similarities, dim=1) * y_true).sum(dim=1).mean()  # categorical_crossentropy_loss


def zigzag(first, second, scores):
    """AnglE's layout: text1_0, text2_0, text1_1, ... with one label per text, (2N, 1)."""
    return scores.repeat_interleave(2)[:, None], torch.stack([first, second], dim=1).flatten(0, 1)


def scored_batch(rows=8, dim=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    first, second = torch.randn(rows, dim, generator=generator), torch.randn(rows, dim, generator=generator)
    scores = torch.randint(0, 26, (rows,), generator=generator).float() / 5  # STS-B's 0-5 in steps of 0.2
    return first, second, scores


def test_ranked_pairs_by_hand():
    """Pairs scored 5, 1, 3 with cosines 0.9, 0.2, 0.5: each ordered pair adds e^{scale (cos_lower - cos_higher)}."""
    similarities, scores = torch.tensor([0.9, 0.2, 0.5]), torch.tensor([5.0, 1.0, 3.0])
    expected = math.log(1 + math.exp(2 * (0.2 - 0.9)) + math.exp(2 * (0.5 - 0.9)) + math.exp(2 * (0.2 - 0.5)))
    assert ranked_pairs(similarities, scores, 2.0).item() == pytest.approx(expected, rel=1e-6)
    assert ranked_pairs(similarities, torch.tensor([1.0, 1.0, 1.0]), 2.0).item() == 0.0  # ties add nothing
    with pytest.raises(ValueError, match="one of each per row"):
        ranked_pairs(similarities, scores[:2])


def test_angle_similarity_by_hand():
    """Read as complex numbers 1 and i: the cosine is 0 and the sine term -1; equal vectors give 1, and so do
    opposite ones (the absolute value)."""
    one, i = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    assert angle_similarity(one, i).item() == pytest.approx(1.0)
    assert angle_similarity(one, 3 * one).item() == pytest.approx(1.0)
    assert angle_similarity(one, -one).item() == pytest.approx(1.0)
    tilted = torch.tensor([[math.cos(0.3), math.sin(0.3)]])
    assert angle_similarity(one, tilted).item() == pytest.approx(abs(math.cos(0.3) - math.sin(0.3)), rel=1e-6)
    with pytest.raises(ValueError, match="even width"):
        angle_similarity(torch.ones(1, 3), torch.ones(1, 3))


def test_angle_in_batch_by_hand():
    """Two pairs, the second scored 0.4 (integer part 0): only the first pair's two vectors have a target, each
    other's; the mean runs over all four vectors."""
    first, second = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    vectors = [first[0], second[0], first[1], second[1]]
    cos = [[float(F.cosine_similarity(a, b, dim=0)) for b in vectors] for a in vectors]

    def ce(k, target):
        others = [j for j in range(4) if j != k]
        return -(2 * cos[k][target] - math.log(sum(math.exp(2 * cos[k][j]) for j in others)))

    expected = (ce(0, 1) + ce(1, 0)) / 4
    assert angle_in_batch(first, second, torch.tensor([3.0, 0.4]), 2.0).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_equal_to_angles_released_functions(seed):
    first, second, scores = scored_batch(seed=seed)
    labels, outputs = zigzag(first, second, scores)
    torch.testing.assert_close(cosent(first, second, scores, 20.0), released_cosine_loss(labels, outputs, 20.0))
    torch.testing.assert_close(angle(first, second, scores, 20.0), released_angle_loss(labels, outputs, 20.0))
    torch.testing.assert_close(angle_in_batch(first, second, scores, 20.0),
                               released_in_batch_negative_loss(labels, outputs, 20.0))


def test_the_released_in_batch_rule_has_extra_targets_and_a_changed_constant_is_caught():
    """Products of index and label that coincide give a vector a second target (pair 0 scored 3: partner 1 x 3 = 3;
    vector 3 of pair 1 scored 1: 3 x 1 = 3), and cselab keeps that rule: its loss is not the partner-only one. A
    changed scale fails the parity."""
    first, second, _ = scored_batch(rows=2)
    scores = torch.tensor([3.0, 1.0])
    labels, outputs = zigzag(first, second, scores)
    released = released_in_batch_negative_loss(labels, outputs, 20.0)
    torch.testing.assert_close(angle_in_batch(first, second, scores, 20.0), released)
    logits = 20 * (F.normalize(outputs, dim=1) @ F.normalize(outputs, dim=1).T) - torch.eye(4) * 1e12
    partner_only = F.cross_entropy(logits, torch.tensor([1, 0, 3, 2]), reduction="none").mean()
    assert not torch.isclose(released, partner_only)
    assert not torch.isclose(angle_in_batch(first, second, scores, 21.0), released)
    assert not torch.isclose(cosent(first, second, scores, 21.0), released_cosine_loss(labels, outputs, 20.0))


@pytest.mark.parametrize("seed", range(3))
def test_equal_to_sentence_transformers_losses(seed):
    """Through sentence-transformers' own classes (their loss from embeddings; the model is not read there)."""
    first, second, scores = scored_batch(seed=seed)
    for ours, theirs in ((cosent, CoSENTLoss), (angle, AnglELoss)):
        expected = theirs(model=None, scale=20.0).compute_loss_from_embeddings([first, second], scores)
        torch.testing.assert_close(ours(first, second, scores, 20.0), expected)


def write_scored(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


SCORED = [{"sentence1": "a man plays a guitar", "sentence2": "a man is playing music", "score": 4.2},
          {"sentence1": "a dog runs", "sentence2": "the market fell", "score": 0.0},
          {"sentence1": "two kids swim", "sentence2": "children are swimming", "score": "3.6"},
          {"sentence1": "a woman cooks", "sentence2": "a woman is cooking food", "score": None}]


def test_scored_pairs_from_a_file_in_sentence_transformers_layout(tmp_path):
    rows, source = training_rows(load_method("cosent"), write_scored(tmp_path / "pairs.jsonl", SCORED))
    assert rows["score"] == [4.2, 0.0, 3.6, None] and rows["text_pair"][0] == "a man is playing music"
    assert source["columns"] == {"text": "sentence1", "text_pair": "sentence2", "score": "score"}
    assert source["rows_without"] == {"text_pair": 0, "score": 1}


def test_the_stsb_train_table(data_dir):
    table = load_table("stsb-train", data_dir)
    assert len(table) == 5749 and table.columns["score"][:2] == [5.0, 3.8]
    assert table.columns["text"][0] == "A plane is taking off."  # the release's own casing


@pytest.mark.parametrize("score, why", [("high", "must be a finite number, got 'high'"),
                                        ("nan", "must be a finite number, got 'nan'")])
def test_a_score_that_is_no_number_is_refused_with_its_line(tmp_path, score, why):
    path = tmp_path / "pairs.csv"
    path.write_text(f"sentence1,sentence2,score\na,b,1.5\nc,d,{score}\n")
    with pytest.raises(DataError, match=f"pairs.csv:3: field 'score' {why}"):
        training_rows(load_method("cosent"), path)


def test_a_number_where_text_is_read_is_refused_with_its_line(tmp_path):
    path = write_scored(tmp_path / "pairs.jsonl", [SCORED[0], {**SCORED[1], "sentence2": 7}])
    with pytest.raises(DataError, match="pairs.jsonl:2: field 'sentence2' must be a string, not a number"):
        training_rows(load_method("cosent"), path)


def test_data_without_scores_is_refused_in_one_line(tmp_path, tiny_cache):
    with pytest.raises(ConfigError, match="wiki1m is a plain corpus .* no score, text_pair column"):
        training_rows(load_method("cosent"), "wiki1m")
    with pytest.raises(ConfigError, match="the cache has no column 'score', which method cosent reads"):
        training_rows(load_method("cosent"), tiny_cache)


def matryoshka_method(spec):
    return load_method("simcse", ["encoder.head=null", f"losses.info_nce.matryoshka={spec}"])


def test_matryoshka_is_the_weighted_sum_of_the_loss_at_each_width(tiny_bert_dir):
    method = matryoshka_method("{dims: [32, 16, 8], weights: [1.0, 0.5, 0.25]}")
    objective = Objective(method)
    encoder = build_encoder(method, str(tiny_bert_dir)).eval()
    rows = {"text": ["a man plays a guitar", "a dog runs on the beach", "the market fell", "two kids swim"]}
    encoded = objective.encode(encoder, rows)
    loss = objective.losses_on(encoded, batch=objective.as_batch(encoder, rows))["info_nce"]
    anchors, positives = encoded["anchor"][0], encoded["positive"][0]
    expected = sum(w * info_nce(anchors[:, :d], positives[:, :d], 0.05) for d, w in ((32, 1.0), (16, 0.5), (8, .25)))
    torch.testing.assert_close(loss, expected)
    assert not torch.isclose(loss, info_nce(anchors, positives, 0.05) * 1.75)  # the widths matter
    assert list(matryoshka_method("{dims: [16, 8]}").losses["info_nce"]["matryoshka"]["weights"]) == [1.0, 1.0]


@pytest.mark.parametrize("spec, why", [
    ("{dims: [16, 16]}", "matryoshka.dims: expected distinct widths"),
    ("{dims: [16, 8], weights: [1.0]}", "matryoshka.weights: 1 weight\\(s\\) for 2 width\\(s\\)"),
    ("{dims: [0]}", "matryoshka.dims"),
    ("{widths: [8]}", "matryoshka"),
])
def test_a_matryoshka_setting_without_meaning_is_refused(spec, why):
    with pytest.raises(ConfigError, match=why):
        matryoshka_method(spec)


def test_matryoshka_is_refused_on_a_loss_that_reads_more_than_vectors():
    with pytest.raises(ConfigError, match="losses.recall.matryoshka: the loss reads the initial weights"):
        load_method("sg-opt", ["losses.recall.matryoshka={dims: [8]}"])
    with pytest.raises(ConfigError, match="the loss reads generated negatives"):
        load_method("memory-bank", ["losses.info_nce.matryoshka={dims: [8]}"])


def test_matryoshka_wider_than_the_model_is_refused_before_training(tiny_bert_dir):
    method = matryoshka_method("{dims: [64, 8]}")
    with pytest.raises(TrainingError, match="losses.info_nce.matryoshka.dims: 64 is wider than the model's vectors "
                                            "\\(32\\)"):
        setup(method, str(tiny_bert_dir), [{"text": "a"}] * 64)
