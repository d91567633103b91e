"""The last-token and position-weighted-mean poolers, by hand and against sentence-transformers' Pooling."""

import torch
from sentence_transformers import models

from cselab.encoders.pooling import pool_states

# two rows of 4 token states of width 2; the first has 3 tokens, the second 2
STATES = torch.tensor([[[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [9.0, 90.0]],
                       [[4.0, 40.0], [5.0, 50.0], [8.0, 80.0], [7.0, 70.0]]])
RIGHT = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


def left_padded(states, mask):
    """The same rows with their padding moved to the front."""
    rows = [torch.cat([row[m == 0], row[m == 1]]) for row, m in zip(states, mask)]
    masks = [torch.cat([m[m == 0], m[m == 1]]) for m in mask]
    return torch.stack(rows), torch.stack(masks)


def test_last_token_by_hand_under_either_padding():
    expected = torch.tensor([[3.0, 30.0], [5.0, 50.0]])
    assert torch.equal(pool_states(STATES, RIGHT, "last"), expected)
    assert torch.equal(pool_states(*left_padded(STATES, RIGHT), "last"), expected)


def test_position_weighted_mean_by_hand_under_either_padding():
    """SGPT: weights 1, 2, 3 over the first row's tokens, 1, 2 over the second's."""
    expected = torch.tensor([[(1 * 1 + 2 * 2 + 3 * 3) / 6, (10 * 1 + 20 * 2 + 30 * 3) / 6],
                             [(4 * 1 + 5 * 2) / 3, (40 * 1 + 50 * 2) / 3]])
    torch.testing.assert_close(pool_states(STATES, RIGHT, "weighted_mean"), expected)
    torch.testing.assert_close(pool_states(*left_padded(STATES, RIGHT), "weighted_mean"), expected)


def test_they_equal_sentence_transformers_pooling_under_either_padding():
    for states, mask in ((STATES, RIGHT), left_padded(STATES, RIGHT)):
        for ours, theirs in (("last", "lasttoken"), ("weighted_mean", "weightedmean")):
            pooling = models.Pooling(2, pooling_mode=theirs)
            pooled = pooling({"token_embeddings": states, "attention_mask": mask})["sentence_embedding"]
            torch.testing.assert_close(pool_states(states, mask, ours), pooled)
