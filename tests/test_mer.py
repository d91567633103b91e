import jiwer
import numpy as np
import pytest

from cselab.mer import edit_counts, mer, mer_pairs
from cselab.normalizers import normalizer


@pytest.mark.parametrize(("reference", "hypothesis", "counts", "expected"), [
    ("the cat sat", "the cat sat", (0, 0, 0, 3), 0.0),                  # identical
    ("the cat sat", "the dog sat", (1, 0, 0, 2), 1 / 3),                # one substitution
    ("the cat sat", "the black cat sat", (0, 0, 1, 3), 1 / 4),          # one insertion
    ("the black cat sat", "the cat sat", (0, 1, 0, 3), 1 / 4),          # one deletion
    ("a b c d", "e f", (2, 2, 0, 0), 1.0),                              # nothing in common
    ("the cat sat down", "a cat sat", (1, 1, 0, 2), 2 / 4),             # substitution and deletion
])
def test_mer_against_hand_counted_alignments(reference, hypothesis, counts, expected):
    assert edit_counts(reference.split(), hypothesis.split()) == counts
    assert mer(reference, hypothesis) == pytest.approx(expected)


def test_empty_sentences():
    assert mer("", "") == 0.0
    assert mer("", "two words") == 1.0
    assert mer("two words", "   ") == 1.0


def test_normalisation_is_configurable():
    assert mer("The Cat sat.", "the cat sat.") == 0.0
    assert mer("The Cat sat.", "the cat sat.", normalize="none") == pytest.approx(2 / 3)
    assert mer("the cat sat .", "the cat sat", normalize="lower_nopunct") == 0.0
    assert mer("x-y z", "x y z", normalize=lambda text: text.replace("-", " ").split()) == 0.0
    with pytest.raises(ValueError, match="Unknown MER normalisation 'upper'"):
        normalizer("upper")


def test_per_pair_values_equal_jiwer(data_dir):
    from cselab.data import load_sts

    pairs = load_sts("sts16", data_dir=data_dir)[0]
    ours = mer_pairs(pairs.sentences1, pairs.sentences2)
    theirs = [jiwer.mer(a.lower(), b.lower()) for a, b in zip(pairs.sentences1, pairs.sentences2)]
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
    # jiwer given lists pools the counts over the corpus; we do not.
    assert jiwer.mer([a.lower() for a in pairs.sentences1], [b.lower() for b in pairs.sentences2]) != pytest.approx(
        ours.mean())


def test_mer_pairs_needs_equal_lengths():
    with pytest.raises(ValueError, match="equal lengths"):
        mer_pairs(["a"], ["a", "b"])
