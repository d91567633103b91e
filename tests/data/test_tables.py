"""Tables of training rows: files of every format, known layouts, column maps, and errors that name FILE:LINE."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cselab.data import DataFormatError
from cselab.data.tables import column_map, load_table, read_table, training_columns
from cselab.errors import ConfigError

TRIPLETS = [("a cat sits", "a cat is sitting", "no cat sits"), ("it rains", "rain falls", "it is dry")]


def write(path, kind):
    if kind in ("csv", "tsv"):
        sep = "," if kind == "csv" else "\t"
        path.write_text(sep.join(("sent0", "sent1", "hard_neg")) + "\n" + "".join(sep.join(r) + "\n" for r in TRIPLETS))
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(dict(zip(("anchor", "positive", "negative"), r))) + "\n" for r in TRIPLETS))
    else:
        pq.write_table(pa.table({"anchor": [r[0] for r in TRIPLETS], "positive": [r[1] for r in TRIPLETS],
                                 "negative": [r[2] for r in TRIPLETS]}), path)
    return path


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_every_format_and_known_layout_maps_onto_the_views_columns(tmp_path, kind):
    table = read_table(write(tmp_path / f"t.{kind}", kind))
    mapping = column_map(table, ["text", "positive", "hard_negative"], None)
    columns, without = training_columns(table, mapping)
    assert columns == {"text": [r[0] for r in TRIPLETS], "positive": [r[1] for r in TRIPLETS],
                       "hard_negative": [r[2] for r in TRIPLETS]}
    assert without == {"positive": 0, "hard_negative": 0}


def test_data_columns_name_the_tables_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("premise,hypothesis\nA dog runs.,An animal moves.\n")
    table = read_table(path)
    assert column_map(table, ["text", "positive"], {"text": "premise", "positive": "hypothesis"}) == \
        {"text": "premise", "positive": "hypothesis"}
    with pytest.raises(ConfigError, match="no column for 'positive'.*its columns: premise, hypothesis"):
        column_map(table, ["text", "positive"], {"text": "premise"})
    with pytest.raises(ConfigError, match="data_columns.text: .* has no column 'sentence'"):
        column_map(table, ["text"], {"text": "sentence"})


def test_an_empty_text_is_refused_with_its_line(tmp_path):
    """An empty text is refused; an empty hard negative leaves its row without one, counted."""
    path = tmp_path / "t.csv"
    path.write_text("sent0,sent1,hard_neg\na,b,\n,d,e\n")
    table = read_table(path)
    mapping = column_map(table, ["text", "positive", "hard_negative"], None)
    with pytest.raises(DataFormatError, match=r"t.csv:3: empty 'sent0' \(the text column\)"):
        training_columns(table, mapping)
    path.write_text("sent0,sent1,hard_neg\na,b,\nc,d,e\n")
    assert training_columns(read_table(path), mapping)[1] == {"positive": 0, "hard_negative": 1}


@pytest.mark.parametrize("name, text, message", [
    ("t.csv", "sent0,sent1\na,b,c\n", "t.csv:2: 3 fields, the header has 2"),
    ("t.csv", "", "t.csv:1: empty file"),
    ("t.jsonl", '{"text": "a"}\n{"text": [3]}\n', "t.jsonl:2: field 'text' must be a string or a number, not list"),
    ("t.jsonl", '{"text": "a"}\n{oops\n', "t.jsonl:2: not valid JSON"),
    ("t.jsonl", "\n", "t.jsonl:1: no rows")])
def test_a_bad_file_is_one_error_naming_file_and_line(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(DataFormatError, match=message):
        read_table(tmp_path / name)


def test_the_derived_tables_of_the_data_root(data_dir):
    sick = load_table("sick-entailment", data_dir)
    assert len(sick) == 1299 and sum(1 for h in sick.columns["hard_negative"] if h) == 148
    cannot = load_table("cannot", data_dir)
    assert set(cannot.columns) == {"text", "negation"} and len(cannot) == 17352


def test_a_dataset_folder_through_datasets(tmp_path):
    folder = tmp_path / "nli"
    folder.mkdir()
    write(folder / "train.jsonl", "jsonl")
    table = load_table(f"hf:{folder}")
    assert table.columns["anchor"] == [r[0] for r in TRIPLETS] and table.fingerprint
