import re
import shutil
from pathlib import Path

from cselab.cli import main
from cselab.data.catalog import named_sets, set_keys

DOCS = Path(__file__).resolve().parents[2] / "docs" / "data.md"


def documented_keys() -> list[str]:
    """The keys in the first column of docs/data.md's table of named sets (`a`, `b` rows name several)."""
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("| `")]
    return [key for row in rows for key in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_data_list_prints_every_set_docs_data_md_lists_and_no_other(data_dir, capsys):
    assert main(["data", "list", "--data-dir", str(data_dir)]) == 0
    printed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert printed == set_keys()
    assert sorted(printed) == sorted(documented_keys())
    assert len(printed) == 22


def test_each_set_says_its_size_under_the_data_root(data_dir):
    sizes = {s.key: s.size for s in named_sets(data_dir)}
    assert sizes["sickr"] == "train 4,500, trial 500, test 4,927"
    assert sizes["wiki1m"] == "11,913 sentences" and sizes["stsb-rows"] == "17,256 sentences"
    assert sizes["stsb-sentences"] == "15,437 sentences" and sizes["sick-entailment"] == "1,299 pairs"
    assert sizes["stsb-raw-rows"] == "17,256 sentences"  # the original release: as many rows as SentEval's copy
    assert sizes["cannot"].startswith("glue_diagnostic 154, nan_nli 117, ")
    assert sizes["trec"] == "train 5,452, test 500"
    assert sizes["sst5"] == "train 8,544, dev 1,101, test 2,210"
    assert sizes["sicke"] == "train 4,500, dev 500, test 4,927"


def test_a_set_missing_under_the_root_says_so_and_the_others_are_still_listed(data_dir, tmp_path, capsys):
    root = tmp_path / "root"
    shutil.copytree(data_dir / "senteval" / "downstream" / "STS", root / "senteval" / "downstream" / "STS")
    assert main(["data", "list", "--data-dir", str(root)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "test 3,108" in lines["sts12"] and "not available: " in lines["sickr"] and "not available" in lines["mr"]
