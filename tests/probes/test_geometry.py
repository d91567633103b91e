import math

import numpy as np
import pytest

from cselab.errors import DataError
from cselab.data import load_sts
from cselab.metrics import cosine_rows, spearman
from cselab.probes.geometry import alignment, alignment_uniformity, uniformity


def test_alignment_and_uniformity_against_their_formulas():
    first = np.array([[1.0, 0.0], [0.0, 2.0]])
    second = np.array([[0.0, 3.0], [0.0, 1.0]])  # normalized: (1,0)-(0,1) -> |d|^2 = 2; (0,1)-(0,1) -> 0
    assert alignment(first, second) == pytest.approx(1.0)
    points = np.array([[1.0, 0.0], [0.0, 1.0], [-2.0, 0.0]])  # squared distances 2, 4, 2
    expected = math.log((math.exp(-4) + math.exp(-8) + math.exp(-4)) / 3)
    assert uniformity(points) == pytest.approx(expected)
    assert uniformity(points, t=1.0) == pytest.approx(math.log((2 * math.exp(-2) + math.exp(-4)) / 3))


@pytest.mark.slow
def test_alignment_uniformity_on_stsb_dev(data_dir):
    from cselab.encoders import load_encoder

    encoder = load_encoder("bow")
    result = alignment_uniformity(encoder, data_dir)
    (pairs,) = load_sts("stsb", "dev", data_dir)
    positive = [i for i, score in enumerate(pairs.scores) if score >= 4.0]
    assert (result["split"], result["positive_pairs"]) == ("dev", len(positive))
    first = encoder.encode([pairs.sentences1[i] for i in positive])
    second = encoder.encode([pairs.sentences2[i] for i in positive])
    assert result["alignment"] == pytest.approx(alignment(first, second))
    assert result["uniformity"] == pytest.approx(uniformity(encoder.encode(sorted(set(pairs.sentences1 +
                                                                                      pairs.sentences2)))))


def test_token_similarity_against_eq_1():
    from cselab.probes.geometry import token_similarity

    tokens = np.array([[1.0, 0.0], [0.0, 3.0], [1.0, 1.0]])  # cosines 0, 1/sqrt2, 1/sqrt2
    assert token_similarity(tokens) == pytest.approx(2 * (0 + 2 / math.sqrt(2)) / 6)


def test_pca_full_size_is_a_rotation_and_fewer_dims_keep_the_main_directions():
    from cselab.metrics import cosine_rows, spearman
    from cselab.probes.geometry import pca_sts

    rs = np.random.RandomState(0)
    train = rs.randn(200, 6) * np.array([10, 5, 1, 0.1, 0.1, 0.1])
    a, b, gold = rs.randn(50, 6), rs.randn(50, 6), rs.rand(50)
    result = pca_sts(train, {"t": (a, b, gold)}, dims=(4, 2, 8))
    assert list(result) == ["6", "4", "2"]
    assert result["6"]["t"] == pytest.approx(100 * spearman(cosine_rows(a, b), gold))
    top2 = np.linalg.svd(train - train.mean(axis=0))[2][:2].T  # the two principal directions, by SVD
    assert result["2"]["t"] == pytest.approx(100 * spearman(cosine_rows(a @ top2, b @ top2), gold))
    with pytest.raises(DataError, match="at least 6 reference vectors"):
        pca_sts(train[:3], {"t": (a, b, gold)})


def test_layer_geometry_on_a_tiny_bert(tiny_bert_dir):
    from cselab.encoders import load_encoder
    from cselab.probes.geometry import layer_geometry

    encoder = load_encoder(str(tiny_bert_dir), pooler="avg", device="cpu")
    s1 = ["a man plays a guitar .", "a woman slices an onion .", "the cat sleeps .", "kids play in the park ."]
    s2 = ["someone plays music .", "an onion is cut .", "a dog barks .", "children are playing outside ."]
    result = layer_geometry(encoder, s1, s2, np.array([4.0, 3.5, 1.0, 4.5]), batch_size=3)
    assert result["layers"] == 2 and result["sentences"] == 8
    assert len(result["inter_layer_cosine"]) == 2 and len(result["token_similarity"]) == 3
    assert set(result["sts_by_layer"]) == {"cls", "mean", "max"}
    assert all(len(v) == 3 for v in result["sts_by_layer"].values())
    # the last layer mean-pooled is what the encoder itself gives: the grid's last cell is its STS score
    sentences = list(dict.fromkeys(s1 + s2))
    vectors = dict(zip(sentences, encoder.encode(sentences), strict=True))
    expected = 100 * spearman(cosine_rows(np.stack([vectors[t] for t in s1]), np.stack([vectors[t] for t in s2])),
                              np.array([4.0, 3.5, 1.0, 4.5]))
    assert result["sts_by_layer"]["mean"][-1] == pytest.approx(expected, abs=1e-4)
    # inter-layer cosine of the last two layers, from the hidden states directly
    import torch

    ids, mask = encoder.pad(encoder.tokenize(sentences, warn=False))
    with torch.inference_mode():
        hidden = encoder.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    weights = mask.unsqueeze(-1).float()
    last, before = ((h * weights).sum(1) / weights.sum(1) for h in (hidden[-1], hidden[-2]))
    cosine = torch.nn.functional.cosine_similarity(before, last, dim=1).mean().item()
    assert result["inter_layer_cosine"][-1] == pytest.approx(cosine, abs=1e-5)
