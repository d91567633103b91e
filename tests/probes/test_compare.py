"""``probe compare`` on real results: per-item outputs, paired statistics, refused and flagged differences."""

import hashlib
import json
import shutil

import numpy as np
import pytest

from cselab.cli import main
from cselab.probes.paired import paired_tables, read_items

STSB = "senteval/downstream/STS/STSBenchmark/sts-test.csv"


def _run(model, out, data_dir, *extra):
    assert main(["probe", "run", "--model", model, "--limit", "40", "--data-dir", str(data_dir), "--out", str(out),
                 *extra]) == 0


@pytest.fixture(scope="module")
def scored(tmp_path_factory, data_dir):
    """bow twice and tfidf once, each over STS, bias and two transfer tasks."""
    folder = tmp_path_factory.mktemp("scored")
    for name, model in (("bow", "bow"), ("bow-again", "bow"), ("tfidf", "tfidf")):
        _run(model, folder / f"{name}.json", data_dir, "--suite", "sts,bias,transfer", "--classifier", "fast",
             "--transfer-tasks", "CR,MRPC")
    return folder


def _tables(folder, a, b, resamples=300):
    payloads = [json.loads((folder / f"{name}.json").read_text()) for name in (a, b)]
    items = [read_items(folder / f"{name}.json", p) for name, p in zip((a, b), payloads)]
    return payloads, paired_tables(*items, resamples=resamples)


@pytest.mark.slow
def test_the_items_file_is_named_with_its_sha256_and_holds_every_pair(scored):
    payload = json.loads((scored / "bow.json").read_text())
    assert payload["items"]["file"] == "bow.items.npz"
    assert payload["items"]["sha256"] == hashlib.sha256((scored / "bow.items.npz").read_bytes()).hexdigest()
    with np.load(scored / "bow.items.npz") as items:
        assert items["sts/STS-B/test/sim"].shape == (40,) and items["sts/STS-B/test/gold"].shape == (40,)
        assert items["transfer/CR/pred"].shape == items["transfer/CR/label"].shape
        accuracy = 100 * np.mean(items["transfer/MRPC/pred"] == items["transfer/MRPC/label"])
    assert accuracy == pytest.approx(payload["transfer"]["MRPC"]["acc"], abs=0.01)


@pytest.mark.slow  # the module's fixture runs three `probe run`s (80 s): make test-fast leaves it out
def test_a_model_compared_with_itself_differs_by_nothing(scored):
    _, tables = _tables(scored, "bow", "bow-again")
    assert set(tables) == {"sts", "bias", "transfer"}
    for rows in tables.values():
        for row in rows:
            assert row["diff"] == 0 and row["ci"][0] <= 0 <= row["ci"][1] and row["p"] == 1.0, row
            assert not row["holds"]


@pytest.mark.slow
def test_figures_from_the_items_are_the_reported_ones(scored):
    (bow, tfidf), tables = _tables(scored, "bow", "tfidf")
    sts = {row["name"]: row for row in tables["sts"]}
    assert sts["Avg."]["a"] == pytest.approx(bow["sts"]["avg"])
    assert sts["Avg."]["b"] == pytest.approx(tfidf["sts"]["avg"])
    assert sts["STS-B"]["b"] == pytest.approx(tfidf["sts"]["STS-B"]["all"])
    bias = {row["name"]: row for row in tables["bias"]}
    assert bias["Cont."]["a"] == pytest.approx(bow["bias"]["splits"]["cont_wavg"])
    assert bias["Gap"]["b"] == pytest.approx(tfidf["bias"]["splits"]["gap"])
    transfer = {row["name"]: row for row in tables["transfer"]}
    assert transfer["CR"]["a"] == pytest.approx(bow["transfer"]["CR"]["acc"], abs=0.01)
    for rows in tables.values():
        for row in rows:
            assert row["ci"][0] <= row["diff"] <= row["ci"][1] and 0 < row["p"] <= row["p_holm"] <= 1


@pytest.mark.slow
def test_probe_compare_prints_intervals_p_values_and_what_differs(scored, capsys):
    assert main(["probe", "compare", str(scored / "bow.json"), str(scored / "tfidf.json"), "--resamples", "200",
                 "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "200 resamples), seed 3" in printed and "### tfidf vs bow: Bias" in printed
    assert "| Avg." in printed and "| Cont." in printed and "| MRPC" in printed and "95% CI" in printed
    assert "provenance.command: 'cselab probe run --model bow" in printed  # how each was made, side by side


@pytest.mark.slow  # the module's fixture runs three `probe run`s (80 s): make test-fast leaves it out
def test_results_over_different_data_files_are_compared_as_aggregates_only_naming_the_file(scored, data_dir,
                                                                                          tmp_path, capsys):
    edited = tmp_path / "data"
    (edited / STSB).parent.mkdir(parents=True)
    lines = (data_dir / STSB).read_text().splitlines(keepends=True)
    fields = lines[0].split("\t")
    fields[4] = "0.000" if fields[4] != "0.000" else "1.000"
    (edited / STSB).write_text("\t".join(fields) + "".join(lines[1:]))
    _run("bow", tmp_path / "edited.json", edited, "--suite", "sts", "--tasks", "stsb")
    assert main(["probe", "compare", str(scored / "bow.json"), str(tmp_path / "edited.json")]) == 0
    printed = capsys.readouterr().out
    assert ("not scored on the same items of the sts suite, so its figures are compared as aggregates only" in printed
            and f"{STSB} (another version of the file: its sha256 differs)" in printed)
    assert "### bow vs bow: STS" not in printed and "## Differences against bow" in printed  # no paired table


@pytest.mark.slow
def test_results_over_different_test_sets_pair_only_the_suites_whose_items_agree(scored, data_dir, tmp_path, capsys):
    from cselab.probes.transformations import handwritten_testset

    testset = tmp_path / "fewer.jsonl"
    testset.write_text("".join(handwritten_testset().read_text().splitlines(keepends=True)[1:]))  # one source less
    _run("tfidf", tmp_path / "other-set.json", data_dir, "--suite", "sts,bias", "--testset", str(testset))
    assert main(["probe", "compare", str(scored / "bow.json"), str(tmp_path / "other-set.json")]) == 0
    printed = capsys.readouterr().out
    assert "not scored on the same items of the bias suite's transformation probe" in printed
    assert "the transformation test set (" in printed and "### tfidf vs bow: STS" in printed
    bias = printed[printed.index("### tfidf vs bow: Bias"):]
    assert "| Cont." in bias and "| CANNOT cos." in bias and "| Para > neg" not in bias


@pytest.mark.slow  # the module's fixture runs three `probe run`s (80 s): make test-fast leaves it out
def test_a_changed_items_file_is_refused(scored, tmp_path, capsys):
    for name in ("bow.json", "bow.items.npz", "tfidf.json", "tfidf.items.npz"):
        shutil.copy(scored / name, tmp_path / name)
    with np.load(tmp_path / "tfidf.items.npz") as items:
        arrays = dict(items)
    arrays["sts/STS-B/test/sim"][0] += 0.5
    np.savez_compressed(tmp_path / "tfidf.items.npz", **arrays)
    assert main(["probe", "compare", str(tmp_path / "bow.json"), str(tmp_path / "tfidf.json")]) == 2
    assert "tfidf.items.npz: missing, or not the per-item file" in capsys.readouterr().err


def test_results_written_before_the_renames_still_read_their_settings():
    from cselab.probes.results import suite_setting

    older = {"transfer": {"protocol": "fast"}, "bias": {"splits": {"protocol": "footnote"}}}
    assert suite_setting(older["transfer"], "classifier") == "fast"
    assert suite_setting(older["bias"]["splits"], "split_rule") == "footnote"
    assert suite_setting({"classifier": "full", "protocol": "fast"}, "classifier") == "full"


@pytest.mark.slow
def test_results_with_other_limits_are_compared_as_aggregates_with_a_warning_naming_the_flag_and_both_files(
        scored, data_dir, tmp_path, capsys):
    other = tmp_path / "bow-60.json"
    assert main(["probe", "run", "--model", "bow", "--limit", "60", "--suite", "sts", "--data-dir", str(data_dir),
                 "--out", str(other)]) == 0
    capsys.readouterr()
    assert main(["probe", "compare", str(scored / "bow.json"), str(other)]) == 0
    printed = capsys.readouterr().out
    assert (f"**Warning**: bow ({other}) and bow ({scored / 'bow.json'}) were not scored on the same items of the sts "
            "suite" in printed and "--limit (40 vs 60)" in printed)
    assert f"| bow ({scored / 'bow.json'}) | " in printed  # one spec twice: the files tell them apart


@pytest.mark.slow
def test_labels_name_the_results_by_file_or_position(scored, capsys):
    a, b = str(scored / "bow.json"), str(scored / "tfidf.json")
    assert main(["probe", "compare", a, b, "--label", "1=A", "--label", f"{b}=tf-idf", "--resamples", "100"]) == 0
    printed = capsys.readouterr().out
    assert "| A      | " in printed and "| tf-idf | " in printed and "### tf-idf vs A: STS" in printed
    assert "| bow " not in printed
    for label, why in (("3=C", "3 is neither a result given"), ("A", "expected RESULT=NAME"),
                       ("2=A", "'A' names two results")):
        assert main(["probe", "compare", a, b, "--label", "1=A", "--label", label]) == 2
        assert why in capsys.readouterr().err


@pytest.mark.parametrize("p, resamples, shown", [(2 / 1001, 1000, "≤ 0.002"), (2 / 10001, 10000, "≤ 0.0002"),
                                                 (0.0123, 1000, "0.012"), (0.00041, 100000, "0.00041"),
                                                 (float("nan"), 1000, "n/a")])
def test_p_values_print_their_resampling_floor_not_zero(p, resamples, shown):
    from cselab.probes.report import p_cell

    assert p_cell(p, resamples) == shown
