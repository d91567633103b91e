"""cselab's bias benchmark as MTEB tasks, MTEB tasks in probe run with paired statistics, and the MTEB export."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

mteb = pytest.importorskip("mteb")

from cselab.cli import main  # noqa: E402
from cselab.data import load_sts  # noqa: E402
from cselab.encoders import load_encoder  # noqa: E402
from cselab.encoders.mteb_model import as_mteb  # noqa: E402
from cselab.probes.bias import run_bias  # noqa: E402
from cselab.probes.mteb_bridge import CselabCont, CselabSTSB, bias_tasks  # noqa: E402
from cselab.probes.suite import ProbeOptions, suite_parts  # noqa: E402

TASKS = "CselabSTSB,CselabCont,CselabOppn,CselabTransformations,CselabCANNOT"


def main_scores(model, tasks) -> dict[str, dict]:
    found = mteb.evaluate(model, tasks, cache=None, show_progress_bar=False)
    return {result.task_name: result.scores["test"][0] for result in found.task_results}


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["bow", "minilm"])
def test_bias_tasks_in_mteb_give_probe_runs_numbers(spec, data_dir):
    """Both from the same vectors (remembered: a transformer's float32 output moves by ~1e-9 with the batch a
    sentence is padded in, and mteb batches the two sides of the pairs apart)."""
    encoder = load_encoder(spec, cache=False)
    with encoder.remembering():
        scores = main_scores(as_mteb(encoder), bias_tasks(data_dir, limit=80))
        ours = run_bias(encoder, ProbeOptions(data_dir=data_dir, limit=80), [])
    assert 100 * scores["CselabCont"]["main_score"] == pytest.approx(ours["splits"]["cont_wavg"], abs=1e-9)
    assert 100 * scores["CselabOppn"]["main_score"] == pytest.approx(ours["splits"]["oppn_wavg"], abs=1e-9)
    for name, subset in ours["splits"]["subsets"].items():
        assert 100 * scores["CselabCont"][f"spearman.{name}"] == pytest.approx(subset["cont"], abs=1e-9)
        assert scores["CselabOppn"][f"n.{name}"] == subset["n_oppn"]
    hits = ours["transformations"]["paraphrase_over_negation"]
    assert scores["CselabTransformations"]["main_score"] == hits["accuracy"]
    assert scores["CselabTransformations"]["n_sources"] == hits["n"] == 48
    assert scores["CselabCANNOT"]["main_score"] == pytest.approx(ours["cannot"]["all"]["mean_cosine"], abs=1e-12)
    assert scores["CselabCANNOT"]["n"] == ours["cannot"]["all"]["n"]


def test_the_dataset_revision_changes_with_the_data_and_the_settings(data_dir, tmp_path):
    """The revision is known when the task is built (before mteb looks in its cache) and names the task's subset:
    each thing that changes the pairs changes both."""
    def revision(task):
        assert task.hf_subsets == [f"default-{task.metadata.revision[:16]}"]
        return task.metadata.revision

    base = revision(CselabCont(data_dir, 50))
    assert revision(CselabCont(data_dir, 50)) == base
    assert revision(CselabCont(data_dir, 60)) != base
    assert revision(CselabCont(data_dir, 50, split_rule="footnote")) != base
    assert revision(CselabCont(data_dir, 50, mer_normalize="none")) != base
    copy = tmp_path / "root"
    shutil.copytree(data_dir / "senteval" / "downstream" / "STS" / "STSBenchmark",
                    copy / "senteval" / "downstream" / "STS" / "STSBenchmark")
    stsb = revision(CselabSTSB(copy))
    test = copy / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv"
    test.write_text(test.read_text(encoding="utf-8").replace("\t5.000\t", "\t4.800\t", 1), encoding="utf-8")
    assert revision(CselabSTSB(copy)) != stsb


MTEB_DEFAULT_CACHE = """
import json, sys
import mteb
from cselab.encoders.mteb_model import as_mteb
from cselab.probes.mteb_bridge import CselabCont, CselabSTSB
model, root = as_mteb("bow"), sys.argv[1]
found = {}
for name, task in [("20", CselabCont(root, 20)), ("30", CselabCont(root, 30)), ("20 again", CselabCont(root, 20)),
                   ("stsb", CselabSTSB(root, 40))]:
    (result,) = mteb.evaluate(model, task, show_progress_bar=False).task_results  # mteb's default cache, only-missing
    found[name] = [result.get_score(), result.dataset_revision]
for name, pooler in (("minilm", None), ("minilm cls", "cls_before_pooler")):  # one weights' file, other settings
    model = as_mteb("minilm", **({"pooler": pooler} if pooler else {}))
    (result,) = mteb.evaluate(model, CselabSTSB(root, 40), show_progress_bar=False).task_results
    found[name] = [result.get_score(), result.dataset_revision]
print(json.dumps(found))
"""


def _default_cache_run(root, cache, edit=None) -> dict:
    env = {**os.environ, "MTEB_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", MTEB_DEFAULT_CACHE, str(root)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_mteb_default_cache_never_serves_a_result_of_other_data(data_dir, tmp_path):
    """Through mteb.evaluate's own default cache (MTEB_CACHE) and overwrite strategy: another limit, a data file
    edited in place and an encoder with another pooler are computed afresh; the same task again is served its own
    result."""
    root = tmp_path / "root"
    shutil.copytree(data_dir / "senteval", root / "senteval")
    cache = tmp_path / "mteb-cache"
    first = _default_cache_run(root, cache)
    assert first["30"][1] != first["20"][1] and first["30"][0] != first["20"][0]
    assert first["20 again"] == first["20"]
    assert any(cache.rglob("CselabCont.json"))  # the default cache was used
    assert first["minilm cls"][0] != first["minilm"][0]  # another pooler is another experiment, not a cache hit
    test = root / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv"
    text = test.read_text(encoding="utf-8")
    test.write_text(text.replace("\t2.500\t", "\t0.100\t", 1), encoding="utf-8")  # the first pair's gold score
    second = _default_cache_run(root, cache)
    for name in ("20", "30", "stsb"):  # each reads STS-B's test file
        assert second[name][1] != first[name][1] and second[name][0] != first[name][0], name


@pytest.mark.slow
def test_probe_run_mteb_compare_and_export(data_dir, tmp_path, capsys):
    """probe run --suite mteb keeps mteb's results and per-item outputs; probe compare gives paired intervals on
    them; probe export-mteb writes MTEB's layout, which mteb's own ResultCache reads back."""
    for spec in ("bow", "tfidf"):
        assert main(["probe", "run", "--model", spec, "--suite", "mteb", "--mteb-tasks", TASKS, "--limit", "60",
                     "--data-dir", str(data_dir), "--out", str(tmp_path / f"{spec}.json")]) == 0
    payload = json.loads((tmp_path / "bow.json").read_text())
    assert list(payload["mteb"]["tasks"]) == TASKS.split(",")
    assert payload["mteb"]["model_meta"]["name"] == "cselab/bow"
    items = np.load(tmp_path / "bow.items.npz")
    assert items["mteb/CselabCont/default/test/group"].max() == 15  # the paper's 16 subsets
    assert len(items["mteb/CselabTransformations/default/test/hit"]) == 48
    capsys.readouterr()
    assert main(["probe", "compare", str(tmp_path / "bow.json"), str(tmp_path / "tfidf.json"),
                 "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "### tfidf vs bow: MTEB (main score x 100)" in printed
    for task in TASKS.split(","):
        assert f"| {task} " in printed
    assert main(["probe", "export-mteb", str(tmp_path / "bow.json"), str(tmp_path / "export"),
                 "--name", "me/bow"]) == 0
    loaded = mteb.ResultCache(tmp_path / "export").load_results(include_remote=False)
    (model,) = loaded.model_results
    assert model.model_name == "me/bow"
    scores = {result.task_name: result.get_score() for result in model.task_results}
    assert scores == pytest.approx({name: t["main_score"] for name, t in payload["mteb"]["tasks"].items()},
                                   abs=1e-6)  # MTEB's files round to 6 decimals


def test_an_mteb_task_from_a_local_folder(data_dir, tmp_path):
    """STSBenchmark=FOLDER: mteb's own task on its data files, here SentEval's STS-B test as jsonl: the same score
    as cselab's CselabSTSB."""
    (pairs,) = load_sts("stsb", data_dir=data_dir)
    folder = tmp_path / "stsb"
    folder.mkdir()
    rows = [{"sentence1": a, "sentence2": b, "score": float(s)}
            for a, b, s in zip(pairs.sentences1[:200], pairs.sentences2[:200], pairs.scores[:200])]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["probe", "run", "--model", "bow", "--suite", "mteb", "--mteb-tasks",
                 f"STSBenchmark={folder},CselabSTSB", "--limit", "200", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "r.json")]) == 0
    tasks = json.loads((tmp_path / "r.json").read_text())["mteb"]["tasks"]
    assert tasks["STSBenchmark"]["main_score"] == tasks["CselabSTSB"]["main_score"]


def test_mteb_suite_errors_are_one_line(data_dir, tmp_path, capsys):
    out = str(tmp_path / "r.json")
    assert main(["probe", "run", "--model", "bow", "--suite", "mteb", "--out", out]) == 2
    assert "--suite mteb needs --mteb-tasks" in capsys.readouterr().err
    assert main(["probe", "run", "--model", "bow", "--suite", "mteb", "--mteb-tasks", "NoSuchTask", "--out",
                 out]) == 2
    assert "'NoSuchTask' is neither one of cselab's tasks" in capsys.readouterr().err
    assert main(["probe", "run", "--model", "bow", "--suite", "mteb", "--mteb-tasks", "STS12", "--out", out]) != 0
    err = capsys.readouterr().err
    assert "MTEB task STS12: its data (mteb/sts12-sts) could not be loaded without the hub" in err
    assert main(["probe", "run", "--model", "bow", "--suite", "sts", "--limit", "20", "--data-dir", str(data_dir),
                 "--out", out]) == 0
    assert main(["probe", "export-mteb", out, str(tmp_path / "x")]) == 2
    assert "holds no MTEB tasks" in capsys.readouterr().err


def test_all_leaves_the_mteb_suite_out():
    assert "mteb" not in suite_parts("all") and suite_parts("mteb") == ("mteb",)


def test_the_three_lines_of_probes_md_run(data_dir, monkeypatch):
    """docs/probes.md's example for MTEB users, on bow and 40 pairs per subset and set (the page's: MiniLM, all)."""
    from tests.test_docs import example_files

    code = example_files("probes.md")["mteb_bias.py"]
    assert 'as_mteb("minilm"), bias_tasks()' in code
    monkeypatch.setenv("CSELAB_DATA_DIR", str(data_dir))
    namespace: dict = {}
    exec(code.replace('"minilm"', '"bow"').replace("bias_tasks()", "bias_tasks(limit=40)"), namespace)
    assert [r.task_name for r in namespace["results"].task_results] == [
        "CselabCont", "CselabOppn", "CselabTransformations", "CselabCANNOT"]
