import pytest

from cselab.data import DataFormatError, DataNotFoundError, load_corpus, load_sts, read_corpus, read_lines
from cselab.data.readers import read_sick_split, read_sts_subset, read_stsb_split

EXPECTED_PAIRS = {("sts12", "test"): 3108, ("sts13", "test"): 1500, ("sts14", "test"): 3750, ("sts15", "test"): 3000,
                  ("sts16", "test"): 1186, ("stsb", "train"): 5749, ("stsb", "dev"): 1500, ("stsb", "test"): 1379,
                  ("sickr", "train"): 4500, ("sickr", "trial"): 500, ("sickr", "test"): 4927}


@pytest.mark.parametrize(("task", "split"), sorted(EXPECTED_PAIRS))
def test_real_files_have_the_published_pair_counts(data_dir, task, split):
    subsets = load_sts(task, split, data_dir)
    assert sum(len(s) for s in subsets) == EXPECTED_PAIRS[task, split]
    for s in subsets:
        assert len(s.sentences1) == len(s.sentences2) == len(s.scores)
        assert all(s.sentences1) and all(s.sentences2)
        assert not any("\r" in text or "\t" in text for text in s.sentences1 + s.sentences2)


def test_sts13_leaves_out_smt_and_sts15_drops_unscored_pairs(data_dir):
    assert [s.subset for s in load_sts("sts13", data_dir=data_dir)] == ["FNWN", "headlines", "OnWN"]
    forums = {s.subset: len(s) for s in load_sts("sts15", data_dir=data_dir)}["answers-forums"]
    assert forums == 375  # 2,000 input lines, 375 of them scored


def test_sick_crlf_lines_are_clean(data_dir):
    (test,) = load_sts("sickr", "test", data_dir)
    assert test.sentences1[0] == "There is no boy playing outdoors and there is no man smiling"
    assert test.scores[0] == pytest.approx(3.3)


def test_wiki_corpus_sample(data_dir):
    sentences = load_corpus("wiki1m", data_dir)
    assert len(sentences) == 11913
    assert sentences[0].startswith("YMCA in South Australia")


def test_bom_and_crlf_are_removed(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\n")
    assert read_lines(path) == ["one", "two"]


def test_latin1_file_is_readable_when_asked_and_reported_otherwise(tmp_path):
    path = tmp_path / "trec.label"
    path.write_bytes(b"DESC:def what is a caf\xe9 ?\nHUM:ind who ?\n")
    assert read_corpus(path, encoding="latin-1")[0] == "DESC:def what is a café ?"
    with pytest.raises(DataFormatError, match=r"trec.label:1: byte 0xe9 is not valid utf-8"):
        read_corpus(path)


def _sts_files(tmp_path, pairs: str, gold: str):
    (tmp_path / "STS.input.x.txt").write_text(pairs)
    (tmp_path / "STS.gs.x.txt").write_text(gold)
    return tmp_path / "STS.input.x.txt", tmp_path / "STS.gs.x.txt"


def test_blank_gold_lines_drop_their_pairs(tmp_path):
    pairs = read_sts_subset("T", "x", *_sts_files(tmp_path, "a\tb\nc\td\ne\tf\n", "1.5\n\n4\n"))
    assert pairs.sentences1 == ["a", "e"] and pairs.sentences2 == ["b", "f"]
    assert list(pairs.scores) == [1.5, 4.0]


@pytest.mark.parametrize(("pairs", "gold", "message"), [
    ("a\tb\nc d\n", "1\n2\n", r"STS.input.x.txt:2: expected 2 tab-separated fields"),
    ("a\tb\nc\td\textra\n", "1\n2\n", r"STS.input.x.txt:2: expected 2 tab-separated fields .*, found 3"),
    ("a\tb\nc\td\n", "1\nhigh\n", r"STS.gs.x.txt:2: score 'high' is not a number"),
    ("a\tb\nc\td\n", "1\n7\n", r"STS.gs.x.txt:2: score 7.0 is outside \[0.0, 5.0\]"),
    ("a\tb\nc\td\n", "1\n", r"STS.gs.x.txt:2: 1 gold lines but 2 lines in STS.input.x.txt"),
])
def test_malformed_sts_lines_name_file_and_line(tmp_path, pairs, gold, message):
    with pytest.raises(DataFormatError, match=message):
        read_sts_subset("T", "x", *_sts_files(tmp_path, pairs, gold))


def test_malformed_stsb_and_sick_lines(tmp_path):
    stsb = tmp_path / "sts-test.csv"
    stsb.write_text("g\tf\t2012\t1\t2.5\ta b\tc d\ng\tf\t2012\t2\t3.0\tonly one sentence\n")
    with pytest.raises(DataFormatError, match=r"sts-test.csv:2: expected 7 tab-separated fields"):
        read_stsb_split(stsb, "test")
    sick = tmp_path / "SICK_test_annotated.txt"
    sick.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\ta\tb\tx\tNEUTRAL\n")
    with pytest.raises(DataFormatError, match=r"SICK_test_annotated.txt:2: score 'x' is not a number"):
        read_sick_split(sick, "test")
    sick.write_text("1\ta\tb\t3\tNEUTRAL\n")
    with pytest.raises(DataFormatError, match=r":1: expected the header line"):
        read_sick_split(sick, "test")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataNotFoundError, match="nowhere.txt"):
        read_lines(tmp_path / "nowhere.txt")
