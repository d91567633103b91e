import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cselab.cli import build_parser, main

BIN = Path(sys.executable).parent


def run(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_probe_run_end_to_end_on_a_small_subset(data_dir, tmp_path):
    out = tmp_path / "res.json"
    result = run("probe", "run", "--model", "bow", "--tasks", "sts12,stsb", "--limit", "40",
                 "--data-dir", str(data_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "| Model | STS12 | STS-B | Avg." in result.stdout
    payload = json.loads(out.read_text())
    assert payload["model"]["spec"] == "bow" and payload["suite"] == "sts"
    assert set(payload["sts"]) == {"STS12", "STS-B", "avg"}
    assert payload["sts"]["STS12"]["n"] == 200
    assert out.with_suffix(".md").read_text().startswith("# Probe report: bow")
    assert "STS/STSBenchmark/sts-test.csv" in "\n".join(payload["data"]["sha256"])
    assert payload["versions"]["torch"] and payload["seed"] == 0 and payload["wall_time_s"] >= 0
    # piped, as under nohup, CI or SLURM: progress lines, not a bar
    assert "probe sts: started" in result.stderr
    assert f"probe sts: done, {2 * 200 + 2 * 40:,}/" not in result.stderr  # distinct sentences, not pairs x 2
    done = [line for line in result.stderr.splitlines() if line.startswith("probe sts: done, ")]
    assert len(done) == 1 and " sentences (100%) in " in done[0]


def test_cselab_probe_is_the_same_command(data_dir, tmp_path, capsys):
    out = tmp_path / "res.json"
    assert main(["probe", "run", "--model", "bow", "--tasks", "sts13", "--limit", "10",
                 "--data-dir", str(data_dir), "--out", str(out)]) == 0
    assert "| bow   |" in capsys.readouterr().out
    assert json.loads(out.read_text())["sts"]["STS13"]["n"] == 30


def test_transformer_model_folder_through_the_cli(data_dir, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "res.json"
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--pooler", "cls_before_pooler", "--tasks", "stsb",
                 "--limit", "20", "--data-dir", str(data_dir), "--out", str(out), "--device", "cpu"]) == 0
    model = json.loads(out.read_text())["model"]
    assert (model["pooler"], model["dim"], model["dtype"]) == ("cls_before_pooler", 32, "torch.float32")


@pytest.mark.slow
def test_bias_suite_then_compare(data_dir, tmp_path, capsys):
    for model, protocol in (("bow", "paper"), ("tfidf", "footnote")):
        assert main(["probe", "run", "--model", model, "--suite", "bias", "--limit", "40", "--data-dir", str(data_dir),
                     "--split-rule", protocol, "--out", str(tmp_path / f"{model}.json")]) == 0
    printed = capsys.readouterr().out
    assert "### Cont. and Oppn. per subset" in printed and "| STSB-test" in printed
    assert "Cont./Oppn. over 16 subsets, split rule `paper` (the 16 subsets of OssCSE's Table 2)" in printed
    assert "subsets, split rule `footnote` (every subset whose median gold score lies in [2, 3.5]" in printed
    payload = json.loads((tmp_path / "bow.json").read_text())
    assert payload["suite"] == "bias" and "bias" in payload and "sts" not in payload
    bias = payload["bias"]
    assert bias["splits"]["split_rule"] == "paper" and "STS14-OnWN" not in bias["splits"]["subsets"]
    assert bias["splits"]["gap"] == pytest.approx(bias["splits"]["cont_wavg"] - bias["splits"]["oppn_wavg"])
    assert bias["transformations"]["n_sources"] == 48 and len(bias["transformations"]["pairs"]) == 288
    assert bias["cannot"]["all"]["n"] == 4 * 40
    assert "contrast/cannot/nan_nli.tsv" in payload["data"]["sha256"]
    report = (tmp_path / "bow.md").read_text()
    assert "![cosine against MER per transformation](bow.transformations.png)" in report
    assert (tmp_path / "bow.transformations.png").read_bytes()[:4] == b"\x89PNG"

    assert main(["probe", "compare", str(tmp_path / "bow.json"), str(tmp_path / "tfidf.json"),
                 "--out", str(tmp_path / "cmp.md")]) == 0
    table, err = capsys.readouterr()
    assert "probe compare tfidf: started, 0/" in err and "probe compare tfidf: done, " in err  # the resampling
    # the columns of the suites the results have (bias alone: no STS avg. column of n/a)
    assert "| Model | Cont. | Oppn." in table and "| bow   | " in table and "| tfidf " in table
    assert "different Cont./Oppn. split rules (footnote, paper)" in table
    assert (f"**Warning**: tfidf ({tmp_path / 'tfidf.json'}) was scored with other settings than bow "
            f"({tmp_path / 'bow.json'})") in table
    assert "split rule: 'paper' vs 'footnote'" in table
    assert "tfidf vs bow: Cont./Oppn. not compared pair by pair" in table and "\n| Cont." not in table
    assert "| CANNOT cos." in table and "| Para > neg (%)" in table  # the same pairs in both: compared
    assert (tmp_path / "cmp.md").read_text().splitlines()[0] == table.splitlines()[0]


@pytest.mark.slow
def test_transfer_probing_geometry_suites_then_compare(data_dir, tiny_bert_dir, tmp_path, capsys):
    probing = tmp_path / "probing"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join((data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt").read_text().splitlines()[
        :1200]) + "\n")
    assert main(["probe", "build-probing", "--corpus", str(corpus), "--out", str(probing), "--size", "300"]) == 0
    assert "SentLen     6 classes" in capsys.readouterr().out
    out = tmp_path / "tiny.json"
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--device", "cpu", "--suite", "all", "--limit", "30",
                 "--classifier", "fast", "--transfer-tasks", "CR,MRPC", "--probing-dir", str(probing),
                 "--data-dir", str(data_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "## Transfer tasks (test accuracy x 100, fast classifier setup)" in printed and "| STS-B mean |" in printed
    payload = json.loads(out.read_text())
    assert set(payload["transfer"]) >= {"CR", "MRPC", "avg"} and payload["transfer"]["classifier"] == "fast"
    assert {"SentLen", "BShift"} <= set(payload["probing"]) and "CoordInv" in payload["probing"]["skipped"]
    assert payload["geometry"]["layers"]["layers"] == 2 and "128" not in payload["geometry"]["pca"]["dims"]
    assert "probing/sentence_length.txt" in "\n".join(payload["data"]["sha256"])
    for suffix in (".html", ".transfer.png", ".probing.png", ".geometry.png", ".transformations.png"):
        assert out.with_suffix(suffix).is_file(), suffix
    assert "<table>" in out.with_suffix(".html").read_text()
    report = out.with_suffix(".md").read_text()
    assert "![alignment, uniformity and the layer-wise measures](tiny.geometry.png)" in report

    bow = tmp_path / "bow.json"
    assert main(["probe", "run", "--model", "bow", "--suite", "transfer", "--limit", "30", "--classifier", "fast",
                 "--transfer-tasks", "CR,MRPC", "--data-dir", str(data_dir), "--out", str(bow)]) == 0
    capsys.readouterr()
    assert (tmp_path / "bow.transfer.png").is_file()
    probing_only = tmp_path / "probing.json"
    assert main(["probe", "run", "--model", "bow", "--suite", "probing", "--limit", "30", "--classifier", "fast",
                 "--probing-dir", str(probing), "--data-dir", str(data_dir), "--out", str(probing_only)]) == 0
    assert (tmp_path / "probing.probing.png").is_file()
    capsys.readouterr()
    assert main(["probe", "compare", str(out), str(bow)]) == 0
    table = capsys.readouterr().out
    assert "| Model " in table and "Transfer avg." in table and "### Transfer (test accuracy x 100)" in table
    assert "| bow " in table.split("### Transfer")[1]


def test_probing_suite_without_files_says_how_to_get_them(data_dir, tmp_path, capsys):
    assert main(["probe", "run", "--model", "bow", "--suite", "probing", "--probing-dir", str(tmp_path),
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "r.json")]) == 2
    assert "probe build-probing --corpus FILE --out DIR" in capsys.readouterr().err


def test_several_suites_in_one_run_encode_each_sentence_once(data_dir, tmp_path, monkeypatch):
    from cselab.encoders.lexical import LexicalEncoder

    encoded = []
    original = LexicalEncoder._encode_unique
    monkeypatch.setattr(LexicalEncoder, "_encode_unique",
                        lambda self, sentences, *rest: encoded.extend(sentences) or original(self, sentences, *rest))
    assert main(["probe", "run", "--model", "bow", "--suite", "sts,bias", "--limit", "20", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "both.json")]) == 0
    payload = json.loads((tmp_path / "both.json").read_text())
    assert payload["suite"] == "sts,bias" and "sts" in payload and "bias" in payload and "transfer" not in payload
    assert len(encoded) == len(set(encoded))  # STS-B test and STS12-16 are in both suites, encoded once
    assert main(["probe", "run", "--model", "bow", "--suite", "sts,nosuch", "--data-dir", str(data_dir)]) == 2


def test_probe_splits_writes_table_and_pairs(data_dir, tmp_path, capsys):
    assert main(["probe", "splits", "--data-dir", str(data_dir), "--out-dir", str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| STS12-MSRvid "))
    assert [cell.strip() for cell in row.split("|")[1:5]] == ["STS12-MSRvid", "406", "344", "2.40"]
    written = json.loads((tmp_path / "splits.json").read_text())
    subsets = written["subsets"]
    assert written["split_rule"] == "paper" and len(subsets) == 26 and sum(s["included"] for s in subsets) == 16
    assert main(["probe", "splits", "--data-dir", str(data_dir), "--out-dir", str(tmp_path / "f"),
                 "--split-rule", "footnote"]) == 0
    assert sum(s["included"] for s in json.loads((tmp_path / "f" / "splits.json").read_text())["subsets"]) == 20
    assert len((tmp_path / "pairs.jsonl").read_text().splitlines()) == sum(s["n_cont"] + s["n_oppn"] for s in subsets)


def test_compare_refuses_other_json(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")
    assert main(["probe", "compare", str(tmp_path / "x.json")]) == 2
    assert "not a results JSON of `probe run`" in capsys.readouterr().err


def test_missing_data_root_is_a_clear_error(tmp_path, capsys, no_data_root):
    assert main(["probe", "run", "--model", "bow", "--out", str(tmp_path / "r.json")]) == 2
    assert "No data root given: pass --data-dir DIR, set CSELAB_DATA_DIR=DIR" in capsys.readouterr().err


def test_unknown_task_is_a_clear_error(data_dir, capsys):
    assert main(["probe", "run", "--model", "bow", "--tasks", "sts99", "--data-dir", str(data_dir)]) == 2
    assert "Unknown STS task 'sts99'" in capsys.readouterr().err




def test_data_download_offline_says_what_failed(tmp_path, capsys):
    assert main(["data", "download", "--data-dir", str(tmp_path)]) == 2
    assert "could not fetch mteb/sts12-sts (test) from the Hugging Face hub" in capsys.readouterr().err
    assert not any(tmp_path.rglob("*.txt"))


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subparsers(sub))


def test_every_option_of_every_command_says_what_it_does():
    parser = build_parser()
    missing = [f"{name}: {action.option_strings[0]}" for name, sub in [("cselab", parser), *_subparsers(parser)]
               for action in sub._actions if action.option_strings and not action.help]
    assert missing == []


@pytest.mark.parametrize("argv", [["train", "--help"], ["probe", "run", "--help"], ["sweep", "--help"]])
def test_help_lists_each_option_with_its_default(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    page = capsys.readouterr().out
    command = dict(_subparsers(build_parser()))[" ".join(argv[:-1])]
    for action in command._actions:
        if action.help == argparse.SUPPRESS:  # a former name, accepted with a warning
            continue
        assert action.option_strings[-1] in page
        if action.help and action.default not in (None, False, [], (), argparse.SUPPRESS) and action.dest != "help":
            shown = ",".join(action.default) if isinstance(action.default, tuple) else action.default  # as typed
            assert f"default: {shown}" in action.help or str(action.default) in page, action.dest


def test_a_factorys_error_names_its_file_and_line_and_debug_shows_its_traceback(tmp_path, monkeypatch, capsys):
    import traceback

    from cselab.cli import probe_main
    from cselab.errors import ModelError

    (tmp_path / "badfactory.py").write_text("from pathlib import Path\n\n\ndef factory():\n"
                                            "    return 'x' in Path('/tmp')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert probe_main(["run", "--model", "badfactory:factory"]) == 2
    assert f"is not iterable (at {tmp_path / 'badfactory.py'}:5)" in capsys.readouterr().err
    with pytest.raises(ModelError) as raised:
        probe_main(["run", "--debug", "--model", "badfactory:factory"])  # --debug accepted by probe, anywhere
    shown = "".join(traceback.format_exception(raised.value))
    assert "badfactory.py\", line 5, in factory" in shown


def test_a_mistyped_name_gets_the_closest_one_suggested(data_dir, tmp_path, capsys):
    for argv, said in ((["train", "--method", "osscce", "--out", str(tmp_path / "a")],
                        "Unknown method 'osscce' (did you mean 'osscse'?): not a YAML file nor one of the "),
                       (["train", "--method", "osscse", "--set", "training.lrr=1", "--out", str(tmp_path / "a")],
                        "osscse: training.lrr: unknown key (did you mean 'lr'?); known: "),
                       (["train", "--method", "osscse", "--set", "losses.recal.gamma=1", "--out", str(tmp_path / "a")],
                        "unknown loss 'recal' (did you mean 'recall'?)"),
                       (["probe", "run", "--model", "bow", "--suite", "stss", "--data-dir", str(data_dir)],
                        "Unknown suite 'stss' (did you mean 'sts'?)"),
                       (["augment", "--corpus", "wiki1m", "--set", "backendd=none", "--out", str(tmp_path / "c")],
                        "unknown key 'backendd' (did you mean 'backend' or 'batch_tokens'?)")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err, err
        assert "anchor-noise-neg" not in err  # with a suggestion, not the 39 presets


def test_probe_errors_say_probe_and_its_command_with_the_option_meant(capsys):
    from cselab.cli import probe_main

    with pytest.raises(SystemExit) as stop:
        probe_main(["run", "--model", "bow", "--suites", "sts"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("usage: probe run [-h]")
    assert "probe run: error: unrecognized arguments: --suites sts (did you mean '--suite'?)" in err
    with pytest.raises(SystemExit):
        main(["train", "--methd", "simcse"])
    assert "cselab train: error: unrecognized arguments: --methd simcse (did you mean '--method'?)" in \
        capsys.readouterr().err


def test_a_run_refused_before_its_first_save_leaves_no_folder(data_dir, tmp_path, capsys):
    out = tmp_path / "runs" / "osscse"
    assert main(["train", "--method", "osscse", "--data", str(tmp_path / "no-cache"), "--data-dir", str(data_dir),
                 "--out", str(out)]) == 2
    assert "holds no finished augment cache" in capsys.readouterr().err
    assert not out.exists()
