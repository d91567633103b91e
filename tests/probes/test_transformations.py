import numpy as np
import pytest

from cselab.data import DataFormatError, NegationPairs, load_cannot
from cselab.encoders import LexicalEncoder
from cselab.probes.transformations import (
    TRANSFORMATIONS,
    handwritten_testset,
    plot_transformations,
    read_testset,
    run_negation_pairs,
    run_transformations,
)


def test_shipped_set_has_48_sources_with_all_six_transformations():
    items = read_testset(handwritten_testset())
    assert len(items) == 48
    assert {item.domain for item in items} == {"news", "captions", "encyclopedia", "forum"}
    for item in items:
        assert list(item.transformed) == list(TRANSFORMATIONS)
        assert item.source not in item.transformed.values()


def test_report_on_a_tiny_set(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"source": "the cat sat on the mat", "paraphrase": "a feline rested on the rug", '
                    '"negation": "the cat did not sit on the mat", "random": "stocks fell"}\n'
                    '{"source": "dogs bark", "deletion": "dogs"}\n')
    summary, records = run_transformations(LexicalEncoder(), read_testset(path))
    assert summary["n_sources"] == 2 and len(records) == 4
    assert summary["types"]["random"] == {"n": 1, "mean_cosine": pytest.approx(0.0), "mean_mer": pytest.approx(1.0)}
    assert summary["types"]["deletion"]["mean_mer"] == pytest.approx(0.5)
    assert summary["types"]["insertion"] == {"n": 0, "mean_cosine": None, "mean_mer": None}
    # bag of words: the paraphrase shares two words ('on', 'the'), the negation five: the lexical encoder ranks wrong
    assert summary["paraphrase_over_negation"] == {"accuracy": 0.0, "n": 1}
    png = plot_transformations(records, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tiny_random_transformer(tiny_bert_dir):
    from cselab.encoders import load_encoder

    encoder = load_encoder(str(tiny_bert_dir), device="cpu")
    summary, records = run_transformations(encoder, read_testset(handwritten_testset())[:3])
    assert len(records) == 18
    for record in records[:6]:  # each cosine is that of the source's and the transformed sentence's vectors
        a, b = encoder.encode([record["source"], record["transformed"]])
        assert record["cosine"] == pytest.approx(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-5)
    assert summary["paraphrase_over_negation"]["n"] == 3


@pytest.mark.parametrize(("content", "message"), [
    ('{"source": "a"}\n', r"set.jsonl:1: no transformation"),
    ('{"source": "a", "negation": "not a"}\n{"source": "b", "negation": ""}\n', r"set.jsonl:2: field 'negation'"),
    ('{"source": "a", "negation": "not a"}\n\n{"negation": "b"}\n', r"set.jsonl:3: missing field 'source'"),
    ('{"source": "a", "negaton": "not a"}\n', r"set.jsonl:1: unknown field\(s\) negaton"),
    ('{"source": "a", "negation": 3}\n', r"set.jsonl:1: field 'negation' must be a non-empty string"),
    ('{"source": "a",\n', r"set.jsonl:1: not valid JSON"),
    ('["a", "b"]\n', r"set.jsonl:1: expected a JSON object"),
    ("\n", r"set.jsonl:1: the test set is empty"),
])
def test_schema_errors_name_the_line(tmp_path, content, message):
    path = tmp_path / "set.jsonl"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message):
        read_testset(path)


def test_negation_pairs_summary():
    sets = [NegationPairs("a", ["the cat sat", "dogs bark"], ["the cat did not sit", "dogs do not bark"]),
            NegationPairs("b", ["it rains"], ["it does not rain"])]
    result = run_negation_pairs(LexicalEncoder(), sets)
    assert result["sets"]["a"]["n"] == 2 and result["all"]["n"] == 3
    expected = np.mean([result["sets"]["a"]["mean_mer"]] * 2 + [result["sets"]["b"]["mean_mer"]])
    assert result["all"]["mean_mer"] == pytest.approx(expected)


def test_cannot_sets_from_the_data_root(data_dir):
    sizes = {s.name: len(s) for s in load_cannot(data_dir)}
    assert sizes == {"glue_diagnostic": 154, "nan_nli": 117, "sentiment_labelled_sentences": 2111,
                     "wikifactcheck_english": 14970}
