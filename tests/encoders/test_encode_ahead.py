"""encode_ids, its batches padded in a background thread (for a CUDA device; here forced on the CPU) or each before
its pass (the CPU): the vectors of the loop it replaced (all batches padded before, read back together), bit for bit;
progress counted per batch; an error in the thread raised in the caller, the thread ended."""

import threading

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from cselab import progress
from cselab.encoders import transformer
from cselab.encoders.transformer import TransformerEncoder

PROMPT = 'This sentence : "{}" means [MASK] .'


def todays_encode_ids(encoder: TransformerEncoder, ids: list[list[int]], batch_size: int) -> np.ndarray:
    """encode_ids before the background thread, on the CPU: the same length-sorted batches, padded all at once, their
    vectors read back together."""
    order = np.argsort([-len(row) for row in ids], kind="stable")
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    out = np.empty((len(ids), encoder.dim), dtype=np.float32)
    vectors = []
    with torch.inference_mode():
        for input_ids, attention_mask in [encoder.pad([ids[i] for i in batch]) for batch in batches]:
            batch_vectors = encoder.forward_batch(input_ids, attention_mask)
            if encoder.normalize:
                batch_vectors = torch.nn.functional.normalize(batch_vectors.float(), dim=-1)
            vectors.append(batch_vectors.float())
    out[np.concatenate(batches)] = torch.cat(vectors).cpu().numpy()
    return out


@pytest.fixture(scope="module")
def parts(tiny_bert_dir):
    return AutoModel.from_pretrained(tiny_bert_dir), AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.fixture(params=["thread", "inline"])
def padding(request, monkeypatch):
    """Batches padded in the background thread (as for a CUDA device) or in the caller's (the CPU's way)."""
    monkeypatch.setattr(transformer, "pads_ahead", lambda device: request.param == "thread")
    return request.param


def ahead_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "cselab-ahead"]


@pytest.fixture(scope="module")
def sentences(data_dir):
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt").read_text(encoding="utf-8").splitlines()
    return list(dict.fromkeys(lines))[:600]  # distinct: encode's batches are then encode_ids'


@pytest.mark.parametrize(("settings", "batch_size", "count"), [
    ({}, 64, 600), ({}, 1, 30), ({"normalize": True}, 9, 150), ({"pooler": "mask", "prompt": PROMPT}, 64, 600),
    ({"pooler": "cls", "max_length": 16}, 50, 600),
])
def test_the_vectors_are_todays_bit_for_bit(parts, sentences, settings, batch_size, count, padding):
    encoder = TransformerEncoder(*parts, **settings)
    rows = sentences[:count]
    todays = todays_encode_ids(encoder, encoder._cut_texts(rows)[0], batch_size)  # the ids of before too
    assert np.array_equal(encoder.encode_ids(encoder.tokenize(rows, warn=False), batch_size), todays)
    assert np.array_equal(encoder.encode(rows, batch_size=batch_size), todays)


def test_progress_counts_each_batch_after_its_forward_pass(parts, sentences, monkeypatch, padding):
    encoder = TransformerEncoder(*parts)
    ids = encoder.tokenize(sentences[:200], warn=False)
    events = []
    forward = encoder.forward_batch
    monkeypatch.setattr(encoder, "forward_batch", lambda *args: events.append("forward") or forward(*args))
    monkeypatch.setattr(progress, "advance", lambda n=1: events.append(n))
    encoder.encode_ids(ids, batch_size=64)
    assert events == ["forward", 64, "forward", 64, "forward", 64, "forward", 8]


def test_an_error_in_padding_is_raised_in_the_caller_and_the_thread_ends(parts, sentences, monkeypatch,
                                                                          padding):
    encoder = TransformerEncoder(*parts)
    ids = encoder.tokenize(sentences[:400], warn=False)
    pad, padded = encoder.pad, []

    def failing(rows):
        if len(padded) == 3:
            raise MemoryError("no room for batch 3")
        padded.append(len(rows))
        return pad(rows)

    monkeypatch.setattr(encoder, "pad", failing)
    forward = encoder.forward_batch
    passes = []
    monkeypatch.setattr(encoder, "forward_batch", lambda *args: passes.append(1) or forward(*args))
    with pytest.raises(MemoryError, match="no room for batch 3"):
        encoder.encode_ids(ids, batch_size=16)
    assert len(passes) == 3 and ahead_threads() == []


def test_an_error_in_a_forward_pass_stops_the_thread(parts, sentences, monkeypatch, padding):
    encoder = TransformerEncoder(*parts)
    ids = encoder.tokenize(sentences, warn=False)
    monkeypatch.setattr(encoder, "forward_batch", lambda *args: (_ for _ in ()).throw(RuntimeError("device lost")))
    with pytest.raises(RuntimeError, match="device lost"):
        encoder.encode_ids(ids, batch_size=4)
    assert ahead_threads() == []


def test_the_cpu_pads_in_the_callers_thread(parts, sentences, monkeypatch):
    encoder = TransformerEncoder(*parts)
    pad, where = encoder.pad, set()
    monkeypatch.setattr(encoder, "pad", lambda rows: where.add(threading.current_thread().name) or pad(rows))
    encoder.encode(sentences[:100], batch_size=8)
    assert where == {threading.current_thread().name} and not transformer.pads_ahead(encoder.device)
