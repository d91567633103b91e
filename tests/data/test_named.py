import pytest

from cselab.data import DataNotFoundError, data_root, load_sts, senteval_dir, sts_task
from cselab.data.named import corpus_path
from cselab.errors import ConfigError


def test_no_data_root_says_where_to_give_one(no_data_root):
    with pytest.raises(DataNotFoundError, match="pass --data-dir DIR, set CSELAB_DATA_DIR=DIR, or put data_dir: DIR "
                                                "in .*no-config/cselab/config.yaml") as err:
        data_root()
    assert "cselab data download" in str(err.value)


def test_the_data_root_is_found_in_order(tmp_path, monkeypatch, no_data_root):
    """--data-dir, then CSELAB_DATA_DIR, then the user config, then ../shared/data beside the checkout."""
    from cselab.data import root

    folders = {name: tmp_path / name for name in ("flag", "env", "config", "beside")}
    for folder in folders.values():
        folder.mkdir()
    monkeypatch.setattr(root, "checkout_data", lambda: folders["beside"])
    assert data_root() == folders["beside"]
    (tmp_path / "no-config" / "cselab").mkdir(parents=True)
    (tmp_path / "no-config" / "cselab" / "config.yaml").write_text(f"data_dir: {folders['config']}\n")
    assert data_root() == folders["config"]
    monkeypatch.setenv("CSELAB_DATA_DIR", str(folders["env"]))
    assert data_root() == folders["env"]
    assert data_root(folders["flag"]) == folders["flag"]
    (tmp_path / "no-config" / "cselab" / "config.yaml").write_text("data_dir: [1, 2]\n")
    monkeypatch.delenv("CSELAB_DATA_DIR")
    with pytest.raises(DataNotFoundError, match="config.yaml: data_dir must be a path"):
        data_root()


def test_a_clone_beside_the_data_finds_it(data_dir):
    """This checkout (tests run from one) sits beside ../shared/data whenever the suite's data root is that."""
    from cselab.data import root

    found = root.checkout_data()
    if found is None:
        pytest.skip("this checkout has no ../shared/data beside it")
    assert (found / "senteval").is_dir()


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
