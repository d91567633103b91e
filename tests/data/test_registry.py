import pytest

from cselab.data import DataNotFoundError, data_root, load_sts, senteval_dir, sts_task
from cselab.data.registry import corpus_path
from cselab.errors import ConfigError


def test_no_data_root_explains_how_to_get_the_data(monkeypatch):
    monkeypatch.delenv("CSELAB_DATA_DIR", raising=False)
    with pytest.raises(DataNotFoundError, match="get_transfer_data.bash") as err:
        data_root()
    assert "cselab data download" in str(err.value)


def test_missing_root_folder_names_its_source(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"from --data-dir\) is not a folder"):
        data_root(tmp_path / "absent")


def test_root_may_be_the_data_root_or_senteval_data_folder(tmp_path):
    (tmp_path / "senteval" / "downstream").mkdir(parents=True)
    assert senteval_dir(tmp_path) == tmp_path / "senteval" / "downstream"
    assert senteval_dir(tmp_path / "senteval") == tmp_path / "senteval" / "downstream"
    with pytest.raises(DataNotFoundError, match="No SentEval layout"):
        senteval_dir(tmp_path / "senteval" / "downstream")


def test_unknown_task_and_split_are_named():
    with pytest.raises(ConfigError, match="Unknown STS task 'sts99'"):
        sts_task("sts99")
    with pytest.raises(ConfigError, match="STSBenchmark has no split 'validation'; it has train, dev, test"):
        load_sts("stsb", "validation", "/nonexistent")


def test_missing_subset_file_is_named(tmp_path):
    folder = tmp_path / "senteval" / "downstream" / "STS" / "STS12-en-test"
    folder.mkdir(parents=True)
    with pytest.raises(DataNotFoundError, match="STS.input.MSRpar.txt"):
        load_sts("sts12", data_dir=tmp_path)


def test_hub_copy_without_subsets_reads_as_one_subset(tmp_path):
    folder = tmp_path / "senteval" / "downstream" / "STS" / "STS14-en-test"
    folder.mkdir(parents=True)
    (folder / "STS.input.all.txt").write_text("A man sings.\tA man is singing.\nA cat.\tA dog.\n")
    (folder / "STS.gs.all.txt").write_text("4.8\n1.0\n")
    (pairs,) = load_sts("STS14", data_dir=tmp_path)
    assert (pairs.subset, len(pairs)) == ("all", 2)


def test_corpus_path_accepts_files_and_rejects_unknown_names(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one\n")
    assert corpus_path(path) == path
    with pytest.raises(DataNotFoundError, match="neither a file nor a known corpus"):
        corpus_path("wiki2m")
