import numpy as np
import pytest

from cselab.encoders import LexicalEncoder
from cselab.metrics import cosine_rows


def test_bag_of_words_cosine_is_word_overlap():
    vectors = LexicalEncoder().encode(["The cat sat", "the CAT sat", "dogs bark loudly", "the cat"])
    assert cosine_rows(vectors[:1], vectors[1:2])[0] == pytest.approx(1.0)
    assert cosine_rows(vectors[:1], vectors[2:3])[0] == pytest.approx(0.0)
    assert cosine_rows(vectors[:1], vectors[3:4])[0] == pytest.approx(2 / np.sqrt(6))


def test_idf_from_the_reference_corpus_downweights_common_words():
    enc = LexicalEncoder(idf_corpus=["the cat", "the dog", "the bird", "the fish"])
    a, b, c = enc.encode(["the cat", "the dog", "a cat"])
    # 'the' is in every reference document, 'cat' in one: sharing 'cat' counts for more than sharing 'the'.
    assert np.dot(a, c) > np.dot(a, b) > 0


def test_a_vector_does_not_depend_on_its_batch():
    enc = LexicalEncoder(idf_corpus=["the cat", "the dog"])
    alone = enc.encode(["the cat sat"])
    together = enc.encode(["dogs", "the cat sat", "cats and dogs"])
    np.testing.assert_array_equal(alone[0], together[1])
