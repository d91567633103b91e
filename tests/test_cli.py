import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cselab.cli import main

BIN = Path(sys.executable).parent


def run(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, env=env, timeout=300)


def test_probe_run_end_to_end_on_a_small_subset(data_dir, tmp_path):
    out = tmp_path / "res.json"
    result = run("probe", "run", "--model", "bow", "--tasks", "sts12,stsb", "--limit", "40",
                 "--data-dir", str(data_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "| Model | STS12 | STS-B | Avg." in result.stdout
    payload = json.loads(out.read_text())
    assert payload["model"]["spec"] == "bow" and payload["suite"] == "sts"
    assert set(payload["scores"]) == {"STS12", "STS-B", "avg"}
    assert payload["scores"]["STS12"]["n"] == 200
    assert "STS/STSBenchmark/sts-test.csv" in "\n".join(payload["data"]["sha256"])
    assert payload["versions"]["torch"] and payload["seed"] == 0 and payload["wall_time_s"] >= 0


def test_cselab_probe_is_the_same_command(data_dir, tmp_path, capsys):
    out = tmp_path / "res.json"
    assert main(["probe", "run", "--model", "bow", "--tasks", "sts13", "--limit", "10",
                 "--data-dir", str(data_dir), "--out", str(out)]) == 0
    assert "| bow   |" in capsys.readouterr().out
    assert json.loads(out.read_text())["scores"]["STS13"]["n"] == 30


def test_transformer_model_folder_through_the_cli(data_dir, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "res.json"
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--pooler", "cls_before_pooler", "--tasks", "stsb",
                 "--limit", "20", "--data-dir", str(data_dir), "--out", str(out), "--device", "cpu"]) == 0
    model = json.loads(out.read_text())["model"]
    assert (model["pooler"], model["dim"], model["dtype"]) == ("cls_before_pooler", 32, "torch.float32")


def test_missing_data_root_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CSELAB_DATA_DIR", raising=False)
    assert main(["probe", "run", "--model", "bow", "--out", str(tmp_path / "r.json")]) == 2
    assert "No data root given" in capsys.readouterr().err


def test_unknown_task_is_a_clear_error(data_dir, capsys):
    assert main(["probe", "run", "--model", "bow", "--tasks", "sts99", "--data-dir", str(data_dir)]) == 2
    assert "Unknown STS task 'sts99'" in capsys.readouterr().err


def test_data_list(data_dir, capsys):
    assert main(["data", "list", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "sickr  SICKRelatedness  train 4500, trial 500, test 4927" in out


def test_data_download_offline_says_what_failed(tmp_path, capsys):
    assert main(["data", "download", "--data-dir", str(tmp_path)]) == 2
    assert "could not fetch mteb/sts12-sts (test) from the Hugging Face hub" in capsys.readouterr().err
    assert not any(tmp_path.rglob("*.txt"))


@pytest.mark.parametrize("argv", [["--help"], ["probe", "run", "--help"], ["data", "--help"]])
def test_help_reads(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    assert "usage: cselab" in capsys.readouterr().out
