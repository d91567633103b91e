"""Token ids made once per corpus (cselab.train.token_ids): the ids a batch pads equal those it tokenised on the fly,
for every preset's views; the folder is keyed by everything that makes the ids, verified, rebuilt after damage,
resumed after a kill, and never served for another key."""

import dataclasses
import json
import logging

import numpy as np
import pytest
import torch

from cselab.train import token_ids
from cselab.train.batches import ROW, Collator
from cselab.train.config.methods import load_method, preset_names
from cselab.train.objective import Objective
from cselab.train.run.data import ColumnRows, training_rows
from cselab.train.run.setup import build_encoder
from cselab.train.token_ids import IdsFolder, column_ids, ids_key, run_ids, tokenizer_sha256, values_sha256
from tests.runs import base_for, data_for, models_for

SENTENCES = ["A man is playing a guitar on the corner of a busy street in the evening.", "", "Two dogs run.",
             "Stock markets fell sharply on Monday after the central bank raised its rate " * 3, None,
             "Café owners in São Paulo say naïve tourists over-tip.", "短い文です。", "ok"]


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return build_encoder(load_method("simcse", ["training.max_length=16"]), str(tiny_bert_dir))


def _tokenize(view):
    return lambda values: view.tokenize(values, warn=False)


def _key(encoder, values=SENTENCES, prompt=None, text=None, spec=None):
    view = encoder.text_view(prompt)
    return ids_key(view, values_sha256(values), tokenizer_sha256(encoder.tokenizer), text, spec)


def test_a_batch_pads_the_ids_it_would_have_tokenised(encoder, tmp_path):
    ids = column_ids(tmp_path, _key(encoder), "text", _tokenize(encoder.text_view()), SENTENCES)
    indices = [5, 0, 1, 3, 4, 7]
    rows = {"text": [SENTENCES[i] for i in indices]}
    today = Collator(encoder, [("text", None)])(dict(rows))
    kept = Collator(encoder, [("text", None)], ids={("text", None): ids})({**rows, ROW: indices})
    (present, input_ids, mask), (present2, input_ids2, mask2) = today.tokens["text", None], kept.tokens["text", None]
    assert present == present2 == [0, 1, 3, 5]
    assert torch.equal(input_ids, input_ids2) and torch.equal(mask, mask2)
    assert kept.rows == rows  # the indices are taken out


def test_every_key_member_is_a_miss(encoder, tiny_roberta_dir):
    from transformers import AutoTokenizer

    from cselab.registry import build_plugin

    base = _key(encoder)
    other_tokenizer = AutoTokenizer.from_pretrained(str(tiny_roberta_dir))
    punctuation = build_plugin("text", {"kind": "end_punctuation"})
    changed = {
        "values": _key(encoder, [*SENTENCES[:-1], "ok!"]),
        "a value missing": _key(encoder, [*SENTENCES[:-1], None]),
        "the prompt": _key(encoder, prompt='This sentence : "{}" means [MASK] .'),
        "the text plug-in": _key(encoder, text=punctuation, spec={"kind": "end_punctuation"}),
        "its settings": _key(encoder, text=punctuation, spec={"kind": "end_punctuation", "append": "!"}),
        "max_length": ids_key(build_encoder(load_method("simcse", ["training.max_length=17"]),
                                            encoder.backbone.config._name_or_path).text_view(),
                              values_sha256(SENTENCES), tokenizer_sha256(encoder.tokenizer)),
        "the tokenizer": ids_key(encoder.text_view(), values_sha256(SENTENCES), tokenizer_sha256(other_tokenizer)),
    }
    view = encoder.text_view()
    view.encoding = dataclasses.replace(view.encoding, lowercase=not view.encoding.lowercase)
    changed["lowercase"] = ids_key(view, values_sha256(SENTENCES), tokenizer_sha256(encoder.tokenizer))
    digests = {name: token_ids.key_digest(key) for name, key in changed.items()}
    assert token_ids.key_digest(base) not in digests.values()
    assert len(set(digests.values())) == len(digests)
    again = _key(encoder)
    assert {k: v for k, v in again.items() if again[k] != base[k]} == {}
    assert token_ids.key_digest(again) == token_ids.key_digest(base)


def test_the_code_and_versions_are_key_members(encoder, monkeypatch):
    base = token_ids.key_digest(_key(encoder))
    monkeypatch.setattr(token_ids, "package_versions", lambda names: {name: "0.0" for name in names})
    assert token_ids.key_digest(_key(encoder)) != base
    monkeypatch.undo()
    monkeypatch.setattr(token_ids, "CODE", token_ids.CODE[:-1])
    assert token_ids.key_digest(_key(encoder)) != base


def test_the_tokenizers_place_and_last_call_are_no_key_members(encoder, tmp_path):
    from transformers import AutoTokenizer

    encoder.tokenizer.save_pretrained(tmp_path / "elsewhere")
    moved = AutoTokenizer.from_pretrained(tmp_path / "elsewhere")
    assert tokenizer_sha256(moved) == tokenizer_sha256(encoder.tokenizer)
    moved(["a call that truncates and pads leaves its settings in the tokenizer"], truncation=True, max_length=5,
          padding="max_length")
    assert tokenizer_sha256(moved) == tokenizer_sha256(encoder.tokenizer)


def _counting(view, calls):
    def tokenize(values):
        calls.append(len(values))
        return view.tokenize(values, warn=False)
    return tokenize


def test_kept_ids_are_read_not_made_again_and_a_new_key_is_built(encoder, tmp_path):
    calls: list[int] = []
    first = column_ids(tmp_path, _key(encoder), "text", _counting(encoder.text_view(), calls), SENTENCES)
    again = column_ids(tmp_path, _key(encoder), "text", _counting(encoder.text_view(), calls), SENTENCES)
    assert calls == [6] and isinstance(again.ids, np.memmap)
    assert np.array_equal(first.ids, again.ids) and np.array_equal(first.offsets, again.offsets)
    other = [*SENTENCES[:-1], "ok!"]
    column_ids(tmp_path, _key(encoder, other), "text", _counting(encoder.text_view(), calls), other)
    assert calls == [6, 6]


@pytest.mark.parametrize("damage", ["truncated", "edited", "key"])
def test_damaged_ids_are_never_served_and_are_built_again(encoder, tmp_path, caplog, damage):
    key = _key(encoder)
    kept = column_ids(tmp_path, key, "text", _tokenize(encoder.text_view()), SENTENCES)
    first = token_ids.TokenIds(np.array(kept.ids), np.array(kept.offsets))  # copies: the damage edits the files
    del kept
    folder = IdsFolder(tmp_path, key, "text").folder
    if damage == "truncated":
        data = (folder / "ids.npy").read_bytes()
        (folder / "ids.npy").write_bytes(data[:-4])
    elif damage == "edited":
        data = bytearray((folder / "ids.npy").read_bytes())
        data[-1] ^= 1
        (folder / "ids.npy").write_bytes(bytes(data))
    else:
        recorded = json.loads((folder / "key.json").read_text())
        recorded["key"]["values_sha256"] = "0" * 64
        (folder / "key.json").write_text(json.dumps(recorded))
    calls: list[int] = []
    with caplog.at_level(logging.WARNING, logger="cselab.train.token_ids"):
        again = column_ids(tmp_path, key, "text", _counting(encoder.text_view(), calls), SENTENCES)
    assert calls == [6] and "damaged" in caplog.text
    assert np.array_equal(first.ids, again.ids) and np.array_equal(first.offsets, again.offsets)


class Killed(Exception):
    pass


def test_a_killed_build_resumes_from_its_finished_chunks(encoder, tmp_path, monkeypatch):
    monkeypatch.setattr(token_ids, "CHUNK_ROWS", 3)
    view, calls = encoder.text_view(), []

    def dies_on_the_third_chunk(values):
        if len(calls) == 2:
            raise Killed
        return _counting(view, calls)(values)

    with pytest.raises(Killed):
        column_ids(tmp_path, _key(encoder), "text", dies_on_the_third_chunk, SENTENCES)
    assert not IdsFolder(tmp_path, _key(encoder), "text").folder.exists()
    resumed = column_ids(tmp_path, _key(encoder), "text", _counting(view, calls), SENTENCES)
    assert calls == [2, 2, 2]  # the third chunk only, once resumed (each chunk has two values present)
    straight = column_ids(tmp_path / "straight", _key(encoder), "text", _tokenize(view), SENTENCES)
    assert np.array_equal(resumed.ids, straight.ids) and np.array_equal(resumed.offsets, straight.offsets)


def test_a_folder_that_cannot_be_written_costs_the_cache_not_the_run(encoder, tmp_path, caplog):
    (tmp_path / "a-file").write_text("")
    with caplog.at_level(logging.WARNING, logger="cselab.train.token_ids"):
        ids = column_ids(tmp_path / "a-file" / "ids", _key(encoder), "text", _tokenize(encoder.text_view()), SENTENCES)
    assert "tokenised in memory" in caplog.text and len(ids) == len(SENTENCES)
    assert np.array_equal(ids.ids, column_ids(tmp_path, _key(encoder), "text", _tokenize(encoder.text_view()),
                                              SENTENCES).ids)


def _unpunctuated(value):
    """Half the rows without their end punctuation, which SNCSE's text plug-in adds back."""
    return value.rstrip(".!?") if isinstance(value, str) else value


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "profile"), [*((name, None) for name in preset_names()), ("sncse", "official")])
def test_every_presets_views_pad_the_ids_they_tokenised(preset, profile, tiny_bert_dir, tiny_cache, data_dir,
                                                         tmp_path):
    """Prompts, templates in pieces, denoising templates, echo's copies, decoders' end tokens, negation and
    hard-negative columns, supervised triplets, text plug-ins (SNCSE's official profile): the first 96 rows' batches
    equal either way."""
    base, overrides = base_for(preset, tiny_bert_dir, tmp_path)
    method = load_method(preset, ["training.max_length=24", *models_for(preset, tmp_path), *overrides], profile)
    rows, _ = training_rows(method, data_for(preset, tiny_cache), data_dir)
    rows = ColumnRows({column: [_unpunctuated(value) if i % 2 else value for i, value in enumerate(values)]
                       for column, values in rows[list(range(min(96, len(rows))))].items()})
    encoder, objective = build_encoder(method, base), Objective(method)
    ids = run_ids(encoder, objective.forward_keys, objective.texts, dict(method.texts or {}), rows, tmp_path)
    today = Collator(encoder, objective.forward_keys, objective.texts)
    kept = Collator(encoder, objective.forward_keys, objective.texts, ids=ids)
    for start in range(0, len(rows), 32):
        indices = list(range(start, min(start + 32, len(rows))))[::-1]
        expected, found = today(rows[indices]), kept({**rows[indices], ROW: indices})
        for key in objective.forward_keys:
            (present, input_ids, mask), (present2, input_ids2, mask2) = expected.tokens[key], found.tokens[key]
            assert present == present2, key
            assert (input_ids is None and input_ids2 is None) or (torch.equal(input_ids, input_ids2)
                                                                  and torch.equal(mask, mask2)), key
