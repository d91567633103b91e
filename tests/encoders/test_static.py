"""``static:PATH``: a model2vec folder encoded by model2vec, a sentence-transformers StaticEmbedding folder by
sentence-transformers, each folder written by its own library here; probe run scores those vectors."""

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from cselab.cli import main
from cselab.data import load_sts
from cselab.encoders import load_encoder
from cselab.errors import ModelError

pytest.importorskip("model2vec")

WORDS = ["[UNK]", "a", "man", "woman", "is", "playing", "the", "guitar", "dog", "runs", "cat", "sleeps", "."]
SENTENCES = ["a man is playing the guitar .", "A Woman is playing .", "the dog runs", "unknown words only", ""]


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.normalizers import Lowercase
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.normalizer, tokenizer.pre_tokenizer = Lowercase(), Whitespace()
    return tokenizer


def _vectors(dim=8):
    return np.random.default_rng(0).normal(size=(len(WORDS), dim)).astype(np.float32)


@pytest.fixture
def model2vec_dir(tmp_path):
    from model2vec import StaticModel

    folder = tmp_path / "m2v"
    StaticModel(_vectors(), _tokenizer(), normalize=True).save_pretrained(str(folder))
    return folder


def test_a_model2vec_folder_gives_model2vecs_own_vectors(model2vec_dir):
    from model2vec import StaticModel

    ours = load_encoder(f"static:{model2vec_dir}", cache=False)
    theirs = StaticModel.from_pretrained(str(model2vec_dir)).encode(SENTENCES)
    assert ours.describe()["library"] == "model2vec" and ours.dim == 8
    assert np.array_equal(ours.encode(SENTENCES), theirs)  # the UNK-only and the empty sentence: zero vectors
    assert not ours.encode(["unknown words only"]).any()
    assert set(ours.weights) == {"model.safetensors"}


def test_a_sentence_transformers_static_folder_gives_sentence_transformers_vectors(tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    folder = tmp_path / "st"
    SentenceTransformer(modules=[StaticEmbedding(_tokenizer(), embedding_weights=_vectors())]).save(str(folder))
    ours = load_encoder(f"static:{folder}", cache=False)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    assert ours.describe()["library"] == "sentence-transformers"
    assert np.array_equal(ours.encode(SENTENCES), theirs)


def test_what_is_no_static_model_is_refused_in_one_line(tmp_path, tiny_bert_dir):
    with pytest.raises(ModelError, match="static:.*is not a folder"):
        load_encoder(f"static:{tmp_path / 'missing'}")
    with pytest.raises(ModelError, match="holds neither a model2vec model .* nor a sentence-transformers model whose "
                                         "first module is a StaticEmbedding"):
        load_encoder(f"static:{tiny_bert_dir}")


def test_probe_run_scores_the_model2vec_vectors(model2vec_dir, data_dir, tmp_path):
    from model2vec import StaticModel

    out = tmp_path / "res.json"
    assert main(["probe", "run", "--model", f"static:{model2vec_dir}", "--tasks", "stsb", "--limit", "30",
                 "--data-dir", str(data_dir), "--out", str(out), "--no-cache"]) == 0
    (pairs,) = load_sts("stsb", None, data_dir)
    model = StaticModel.from_pretrained(str(model2vec_dir))
    a, b = (model.encode(side[:30]).astype(np.float64) for side in (pairs.sentences1, pairs.sentences2))
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosines = np.divide((a * b).sum(1), norms, out=np.zeros(len(a)), where=norms > 0)
    expected = 100 * spearmanr(cosines, pairs.scores[:30]).statistic
    assert json.loads(out.read_text())["sts"]["STS-B"]["all"] == pytest.approx(expected, abs=1e-6)
