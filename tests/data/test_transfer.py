import numpy as np
import pytest

from cselab.data import DataFormatError
from cselab.data.probing import read_probing_file
from cselab.data.transfer import load_transfer
from cselab.errors import ConfigError

SIZES = {"MR": {"all": 10662}, "CR": {"all": 3775}, "SUBJ": {"all": 10000}, "MPQA": {"all": 10606},
         "SST2": {"train": 67349, "dev": 872, "test": 1821}, "TREC": {"train": 5452, "test": 500},
         "MRPC": {"train": 4076, "test": 1725}}


@pytest.mark.parametrize("task", list(SIZES))
def test_transfer_sets_have_sentevals_sizes(data_dir, task):
    splits = load_transfer(task, data_dir)
    assert {name: len(part) for name, part in splits.items()} == SIZES[task]


def test_labels_follow_senteval(data_dir):
    mr = load_transfer("MR", data_dir)["all"]
    assert np.bincount(mr.labels).tolist() == [5331, 5331] and mr.labels[0] == 1  # rt-polarity.pos first
    subj = load_transfer("subj", data_dir)["all"]
    assert subj.labels[0] == 1 and subj.files[0].name == "subj.objective"
    trec = load_transfer("TREC", data_dir)
    assert sorted(set(trec["train"].labels)) == [0, 1, 2, 3, 4, 5]
    assert any("\xf0" in t for t in trec["train"].texts)  # the latin-1 byte read as SentEval reads it
    mrpc = load_transfer("MRPC", data_dir)["train"]
    assert mrpc.texts[0].startswith("Amrozi accused his brother") and mrpc.labels[0] == 1
    assert mrpc.texts2[0].startswith("Referring to him as only")


def test_limit_keeps_the_first_rows_of_each_file(data_dir):
    assert len(load_transfer("CR", data_dir, limit=7)["all"]) == 14
    assert len(load_transfer("MRPC", data_dir, limit=5)["test"]) == 5


def test_malformed_trec_line_names_file_and_line(tmp_path):
    folder = tmp_path / "senteval" / "downstream" / "TREC"
    folder.mkdir(parents=True)
    (folder / "train_5500.label").write_text("NUM:dist How far is it ?\nWHAT is this\n")
    (folder / "TREC_10.label").write_text("LOC:city Where is it ?\n")
    with pytest.raises(DataFormatError, match=r"train_5500.label:2: expected 'CLASS:fine question'"):
        load_transfer("TREC", tmp_path)


def test_unknown_task(data_dir):
    with pytest.raises(ConfigError, match="Unknown transfer task 'STS'"):
        load_transfer("STS", data_dir)


def test_probing_reader_reads_the_official_format(tmp_path):
    path = tmp_path / "past_present.txt"
    path.write_text("tr\tPRES\the walks home .\ntr\tPAST\tshe walked home .\nva\tPAST\tit rained .\n"
                    "te\tPRES\tit  rains .\n")
    splits, labels = read_probing_file(path, "Tense")
    assert labels == ["PAST", "PRES"]
    assert splits["train"].labels.tolist() == [1, 0] and splits["test"].texts == ["it rains ."]
    assert {name: len(part) for name, part in splits.items()} == {"train": 2, "dev": 1, "test": 1}


@pytest.mark.parametrize("text, message", [
    ("tr\tPAST\ta .\nxx\tPAST\tb .\n", ":2: part 'xx' is not tr, va or te"),
    ("tr\tPAST\n", ":1: expected 3 tab-separated fields"),
    ("tr\tPAST\ta .\nva\tPRES\tb .\nte\tPAST\tc .\n", ":2: label 'PRES' does not occur in the training part"),
    ("tr\tPAST\ta .\nte\tPAST\tc .\n", ":1: no dev lines"),
])
def test_probing_reader_errors(tmp_path, text, message):
    path = tmp_path / "t.txt"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message):
        read_probing_file(path)
