"""``cselab augment mine``: the negatives sentence-transformers' own ``mine_hard_negatives`` mines, on the same
vectors; a table simcse-sup trains on; keyed by everything that changes it; bad input in one line."""

import csv
import functools
import json
import random
from dataclasses import fields, replace

import numpy as np
import pytest

from cselab.augment.mining import MiningConfig, mine, mine_to_folder
from cselab.cli import main
from cselab.data import load_corpus, load_sts
from cselab.encoders import load_encoder
from cselab.encoders.base import Encoder
from cselab.errors import ConfigError, DataError


class Fixed(Encoder):
    """A random projection of the bag of words (each word a seeded random vector, a sentence their sum): texts that
    share words are near; the same vectors for cselab and for sentence-transformers' function."""

    spec = "fixed"

    def __init__(self, dim=32, seed=0):
        self.seed, self._dim = seed, dim

    @property
    def dim(self):
        return self._dim

    def describe(self):
        return {**super().describe(), "seed": self.seed}

    def _encode_unique(self, sentences, batch_size, show_progress_bar):
        return np.stack([sum((self._word(token.lower()) for token in text.split()), np.zeros(self._dim)) +
                         1e-3 * self._word(text.lower()) for text in sentences]).astype(np.float32)

    def _word(self, text):
        return _word_vector(self.seed, self._dim, text)


@functools.cache
def _word_vector(seed, dim, text):
    return np.random.default_rng([seed, *text.encode()]).normal(size=dim)


class STModel:
    """The minimum of a SentenceTransformer that ``mine_hard_negatives`` calls, over an encoder's vectors."""

    def __init__(self, encoder):
        import torch
        from sentence_transformers.model_card import SentenceTransformerModelCardData
        from sentence_transformers.util import cos_sim, pairwise_cos_sim

        self.encoder, self.device, self.model_card_data = encoder, torch.device("cpu"), \
            SentenceTransformerModelCardData()
        self.similarity, self.similarity_pairwise = cos_sim, pairwise_cos_sim

    def _encode(self, texts, normalize_embeddings=False, **_):
        import torch

        vectors = torch.as_tensor(self.encoder.encode(list(texts)))
        return (torch.nn.functional.normalize(vectors, p=2, dim=1) if normalize_embeddings else vectors).numpy()

    encode_document = encode_query = _encode

    def get_embedding_dimension(self):
        return self.encoder.dim


def _pairs(data_dir, n=120):
    (pairs,) = load_sts("stsb", "train", data_dir)
    return [(a, b) for a, b, score in zip(pairs.sentences1, pairs.sentences2, pairs.scores) if score >= 4][:n]


def _theirs(pairs, model, corpus, config: MiningConfig, fmt="triplet"):
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    random.seed(config.seed)
    settings = {name: getattr(config, name) for name in ("num_negatives", "range_min", "range_max", "absolute_margin",
                                                         "relative_margin", "max_score", "min_score")}
    found = mine_hard_negatives(Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [p for _, p in pairs]}),
                                model, corpus=corpus, sampling_strategy=config.sampling, output_format=fmt,
                                use_faiss=config.search == "faiss", verbose=False, **settings)
    return [list(row.values()) for row in found]


SETTINGS = [dict(), dict(num_negatives=1), dict(relative_margin=0.05, num_negatives=2),
            dict(absolute_margin=0.1, range_min=3), dict(max_score=0.5, min_score=-0.2, num_negatives=4),
            dict(sampling="random", seed=7, range_max=12), dict(output_format="n-tuple", relative_margin=0.2),
            dict(search="faiss", num_negatives=2)]


@pytest.mark.parametrize("settings", SETTINGS, ids=[json.dumps(s) for s in SETTINGS])
def test_the_negatives_are_sentence_transformers_own(settings, data_dir):
    if settings.get("search") == "faiss":
        pytest.importorskip("faiss")
    pairs = _pairs(data_dir) + [(a, "another positive of " + a) for a, _ in _pairs(data_dir, 10)]  # 2 positives
    corpus = load_corpus("wiki1m", data_dir)[:400]
    config = MiningConfig(**settings)
    ours = mine(pairs, Fixed(), config, corpus)
    assert ours.rows == _theirs(pairs, STModel(Fixed()), corpus, config, config.output_format)
    assert ours.rows and ours.search == config.search.replace("auto", "exact")


@pytest.mark.slow
def test_on_minilm_over_wiki1m_the_table_is_mine_hard_negatives_and_simcse_sup_trains_on_it(data_dir, tmp_path,
                                                                                           tiny_bert_dir):
    """The issue's check: MiniLM (cselab's encoder against sentence-transformers' own model of the same folder) over
    the wiki1m sample, a relative margin; then supervised SimCSE trains on the table end to end."""
    from sentence_transformers import SentenceTransformer

    from cselab.encoders.loading import resolve_backbone

    pairs, corpus = _pairs(data_dir, 200), load_corpus("wiki1m", data_dir)[:3000]
    config = MiningConfig(relative_margin=0.05, num_negatives=1)
    folder, manifest, made = mine_to_folder(pairs, load_encoder("minilm", cache=False), config, tmp_path / "mined",
                                            corpus)
    with open(folder / "mined.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    theirs = _theirs(pairs, SentenceTransformer(resolve_backbone("minilm"), device="cpu"), corpus, config)
    assert made and rows[0] == ["anchor", "positive", "negative"] and rows[1:] == theirs
    assert manifest["rows"] == len(theirs) and manifest["removed"]["relative_margin"] > 0
    assert main(["train", "--method", "simcse-sup", "--model", str(tiny_bert_dir), "--data", str(folder / "mined.csv"),
                 "--out", str(tmp_path / "run"), "--data-dir", str(data_dir), "--eval-limit", "20",
                 "--set", "training.batch_size=8", "--set", "training.max_steps=2", "--set", "training.eval_steps=2",
                 "--set", "training.max_length=24"]) == 0
    assert (tmp_path / "run" / "best" / "cselab.json").is_file()


def test_the_key_holds_every_input_and_setting(tmp_path, data_dir):
    pairs, corpus = _pairs(data_dir, 30), load_corpus("wiki1m", data_dir)[:100]
    base = MiningConfig()
    folder, _, made = mine_to_folder(pairs, Fixed(), base, tmp_path, corpus)
    assert made and not mine_to_folder(pairs, Fixed(), base, tmp_path, corpus)[2]  # the same: reused
    changed = {"num_negatives": 2, "range_min": 1, "range_max": 20, "absolute_margin": 0.5, "relative_margin": 0.5,
               "max_score": 0.99, "min_score": -0.99, "sampling": "random", "seed": 1, "output_format": "n-tuple",
               "search": "exact", "batch_size": 8}
    assert set(changed) == {f.name for f in fields(MiningConfig)}
    folders = {folder}
    for name, value in changed.items():
        other = mine_to_folder(pairs, Fixed(), replace(base, **{name: value}), tmp_path, corpus)
        assert other[2] and other[0] not in folders, name
        folders.add(other[0])
    for inputs in ((pairs[1:], corpus), (pairs, corpus[1:]), (pairs, None)):
        other = mine_to_folder(*inputs[:1], Fixed(), base, tmp_path, inputs[1])
        assert other[2] and other[0] not in folders
        folders.add(other[0])
    other = mine_to_folder(pairs, Fixed(seed=1), base, tmp_path, corpus)  # another encoder's vectors
    assert other[0] not in folders
    (folder / "mined.csv").write_text("anchor,positive,negative\nplanted,row,here\n")  # damaged: mined again
    assert mine_to_folder(pairs, Fixed(), base, tmp_path, corpus)[2]
    assert "planted" not in (folder / "mined.csv").read_text()


def test_bad_input_is_one_line(tmp_path, data_dir, capsys):
    with pytest.raises(DataError, match="the pairs: no \\(anchor, positive\\) rows"):
        mine([], Fixed(), MiningConfig())
    with pytest.raises(DataError, match="the corpus has 3 distinct texts .* fewer than the ranks asked "
                                        "\\(range_max 4\\)"):
        mine([("a", "b"), ("c", "d"), ("e", "f")], Fixed(), MiningConfig())
    with pytest.raises(ConfigError, match="mining config.range_min: 5 is not below range_max 5"):
        MiningConfig(range_min=5, range_max=5)
    with pytest.raises(ConfigError, match="mining config.relative_margin: 2.0 is out of range"):
        MiningConfig(relative_margin=2)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("anchor,positive\na cat sleeps,a cat is asleep\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    for argv, message in (
            (["--corpus", str(empty)], "no sentences in it"),
            (["--corpus", "wiki1m", "--model", str(tmp_path / "no-model")], "no model folder at"),
            (["--set", "num_negativs=2"], "--set num_negativs: unknown key"),
            (["--corpus", str(pairs)], "the corpus has 3 distinct texts")):
        assert main(["augment", "mine", "--pairs", str(pairs), "--out", str(tmp_path / "out"),
                     "--data-dir", str(data_dir), *argv]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_the_command_mines_named_columns_and_reuses_its_table(tmp_path, data_dir, capsys):
    pairs = tmp_path / "pairs.csv"
    with open(pairs, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("query", "document"), *_pairs(data_dir, 20)])
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(load_corpus("wiki1m", data_dir)[:60]) + "\n")
    argv = ["augment", "mine", "--pairs", str(pairs), "--anchor-column", "query", "--positive-column", "document",
            "--corpus", str(corpus), "--model", "bow", "--out", str(tmp_path / "out"), "--set", "num_negatives=2"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert said.startswith("mined: ") and "40 rows from 20 pairs" in said
    (folder,) = (tmp_path / "out").iterdir()
    with open(folder / "mined.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["anchor", "positive", "negative"] and len(rows) == 41
    assert main(argv) == 0 and capsys.readouterr().out.startswith("already mined")
