import numpy as np
import pytest

from cselab.data import DataFormatError
from cselab.data.probing import read_probing_file
from cselab.data.transfer import load_transfer
from cselab.errors import ConfigError

SIZES = {"MR": {"all": 10662}, "CR": {"all": 3775}, "SUBJ": {"all": 10000}, "MPQA": {"all": 10606},
         "SST2": {"train": 67349, "dev": 872, "test": 1821}, "TREC": {"train": 5452, "test": 500},
         "MRPC": {"train": 4076, "test": 1725}, "SST5": {"train": 8544, "dev": 1101, "test": 2210},
         "SICKE": {"train": 4500, "dev": 500, "test": 4927}}


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


def test_sst5_and_sick_e_read_as_sentevals_sst_py_and_sick_py(data_dir):
    """SST-5: ``label sentence`` (sst.py, nclasses 5); SICK-E: sentence_A, sentence_B and entailment_judgment,
    CONTRADICTION NEUTRAL ENTAILMENT = 0, 1, 2 (sick.py), the test file's CRLF stripped."""
    sst5 = load_transfer("SST-5", data_dir)
    assert sst5["train"].texts[0].startswith("a stirring , funny and finally") and sst5["train"].labels[0] == 4
    assert np.bincount(sst5["test"].labels).tolist() == [279, 633, 389, 510, 399]
    sick = load_transfer("sick-e", data_dir)
    assert sick["train"].texts[0] == "A group of kids is playing in a yard and an old man is standing in the background"
    assert sick["train"].texts2[0].startswith("A group of boys in a yard") and sick["train"].labels[0] == 1
    assert np.bincount(sick["dev"].labels).tolist() == [74, 282, 144]
    assert np.bincount(sick["test"].labels).tolist() == [720, 2793, 1414]
    assert not any(text.endswith("\r") for text in sick["test"].texts2)


@pytest.mark.parametrize("task, folder, name, text, message", [
    ("SST5", "SST/fine", "sentiment-train", "4 fine .\n7 out of range .\n", r"sentiment-train:2: label '7' is not 0 "
                                                                           "to 4"),
    ("SICKE", "SICK", "SICK_train.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
                                       "1\ta\tb\t4.5\tMAYBE\n", r"SICK_train.txt:2: expected pair_ID, .* "
                                                                   "entailment_judgment \\(one of CONTRADICTION")])
def test_a_malformed_sst5_or_sick_line_names_file_and_line(tmp_path, task, folder, name, text, message):
    where = tmp_path / "senteval" / "downstream" / folder
    where.mkdir(parents=True)
    (where / name).write_text(text)
    with pytest.raises(DataFormatError, match=message):
        load_transfer(task, tmp_path)


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
