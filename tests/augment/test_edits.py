import json
import random

import pytest

from cselab.augment.edits import MaskedLMEditor, delete_word, edit_count, random_partners
from cselab.augment.negation import Negator
from cselab.augment.testset import build_testset, write_testset
from cselab.probes.transformations import read_testset
from tests.conftest import save_tiny_bert

SENTENCES = ["the quick brown fox jumps over the lazy dog", "A committee approved the budget",
             "rain fell on the old town all night long", "birds"]


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory):
    """A random 1-layer BERT masked LM, hidden size 16."""
    from transformers import BertForMaskedLM

    return str(save_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), BertForMaskedLM, hidden=16, layers=1))


def test_edit_counts_deletion_and_random_partners():
    rng = random.Random(0)
    assert edit_count(4, (0.05, 0.10), rng) == 1
    assert 5 <= edit_count(100, (0.05, 0.10), rng) <= 10
    assert delete_word("birds", rng) is None
    deleted = delete_word("the quick brown fox", rng)
    assert len(deleted.split()) == 3 and set(deleted.split()) < {"the", "quick", "brown", "fox"}
    partners = random_partners(7, rng)
    assert sorted(partners) == list(range(7)) and all(p != i for i, p in enumerate(partners))


def test_insertion_and_substitution_with_a_tiny_random_mlm(tiny_mlm_dir):
    editor = MaskedLMEditor(tiny_mlm_dir, batch_size=3, device="cpu")
    inserted = editor.insert(SENTENCES)
    substituted = editor.substitute(SENTENCES)
    for source, longer, changed in zip(SENTENCES, inserted, substituted):
        words, new = source.split(), longer.split()
        assert len(new) > len(words)
        assert "[MASK]" not in longer and "[MASK]" not in changed
        assert len(changed.split()) == len(words) and changed != source
    assert inserted == MaskedLMEditor(tiny_mlm_dir, batch_size=1, device="cpu").insert(SENTENCES)  # batch-independent


def test_all_masks_of_a_batch_share_one_forward_pass(tiny_mlm_dir, monkeypatch):
    editor = MaskedLMEditor(tiny_mlm_dir, rate=(0.3, 0.3), batch_size=8, device="cpu")
    calls = []
    encoder = editor.model.base_model
    forward = encoder.forward
    monkeypatch.setattr(encoder, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    editor.substitute(SENTENCES)
    assert len(calls) == 1  # four sentences, eight masks, one pass


def test_testset_is_read_by_the_bias_probe(tiny_mlm_dir, tmp_path):
    records = build_testset(SENTENCES, Negator(), None, MaskedLMEditor(tiny_mlm_dir, device="cpu"), seed=1)
    path = write_testset(records, tmp_path / "set.jsonl")
    items = read_testset(path)
    assert len(items) == 4
    assert items[0].transformed["negation"] == "the quick brown fox does not jump over the lazy dog"
    assert {"insertion", "substitution", "deletion", "random"} <= set(items[0].transformed)
    last = json.loads(path.read_text().splitlines()[3])  # "birds": no word to spare, no verb to negate
    assert {"deletion", "negation", "paraphrase"}.isdisjoint(last) and "random" in last
