"""`make gpu-check`'s script runs end to end with tiny models, on the CPU here and on CUDA where there is a device, so
that it cannot rot between devices."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # runs the GPU check's every section

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


CUDA = torch.cuda.is_available()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not CUDA, reason="no CUDA device here: the cuda run of this check happens where one is"))])
def test_every_section_runs_with_tiny_models(tmp_path, device):
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", device, "--tiny", "--no-compile", "--steps", "2",
                          "--warmup", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    configurations = {(r["method"], r["batch"], r["mode"]) for r in report["steps"]}
    assert configurations == {(m, b, mode) for m in ("simcse", "osscse") for b in (8, 16) for mode in ("fp32", "bf16")}
    for row in report["steps"]:
        assert "error" not in row and row["steps_per_s"] > 0 and row["tflops"] > 0
        views = 2 if row["method"] == "simcse" else 4
        assert row["tokens_per_s"] >= row["sentences_per_s"] * views * 32 * 0.99  # every sequence fills its 32
    assert report["agreement"]["finite"] and report["agreement"]["agree"]
    run_section = report["run"]
    assert run_section["ok"] and run_section["final_step"] == 6 and run_section["evaluations"]
    assert all(v["finite"] for v in run_section["variants"].values())
    # the batched masking's speed-up is a timing (benchmarks/RESULTS.md has the GPU's): on a loaded 2-core CPU and
    # tiny models it can fall below 1, so the test checks it was measured, not its size
    assert report["augment"]["mlm_speedup"] > 0 and report["augment"]["masks"] > report["augment"]["sentences"]
    assert report["probes"]["encode_cpu_sentences_per_s"] > 0 and report["probes"]["classifier_cpu_s"] > 0
    assert [p["batch"] for p in report["profile"]] == [16] and report["profile"][0]["collate_ms"] > 0
    levers = [(r["method"], r["batch"], r["lever"]) for r in report["levers"]]
    eager = ["as the trainer steps", "+ collated ahead"]  # no compilation, no CUDA graphs here
    assert levers == [("osscse", 8, lever) for lever in eager] + [
        ("simcse", b, lever) for b in (8, 16) for lever in [*eager, "+ fused update"]]
    assert all(r["steps_per_s"] > 0 for r in report["levers"])
    assert report["cached"]["mini_batch_size"] == 16 and report["cached"]["cached"]["batch"] == 64
    assert report["cached"]["time_per_sentence_ratio"] > 0
    ceiling = report["ceiling"]
    # the same work: both libraries' loss of one batch (dropout off, fp32) within float error: 1.1e-7 measured here
    # (6e-8 at BERT-base size); 6.8e-6 (9e-4 at BERT-base size) when cselab's side added BERT's pooler layer
    assert ceiling["same_work"]["relative_difference"] < 1e-6
    runs = [(r["trainer"], r["method"], r["batch"]) for r in ceiling["runs"]]
    assert runs == [(t, "simcse", b) for b in (16, 8) for t in ("ceiling", "cselab", "sentence-transformers")] + [
        ("cselab", "osscse", 8)]
    assert all(r["steps_per_s"] > 0 for r in ceiling["runs"])
    assert set(ceiling["ratios"]) == {f"cselab/{other}@{b}" for other in ("ceiling", "sentence-transformers")
                                      for b in (16, 8)}
    executions = [r["execution"] for r in ceiling["runs"] if r["trainer"] == "cselab"]
    assert all(not e["compile"] and e["prefetch"] == 2 for e in executions)  # --no-compile: compile false
    family = ("promptbert", "promptbert-sup", "sncse", "esimcse", "diffcse", "rankcse", "infocse")  # one row each
    assert [r["method"] for r in report["family"]] == list(family)
    assert all("error" not in r and r["steps_per_s"] > 0 for r in report["family"]), report["family"]
    encode = report["encode"]
    assert encode["cselab_sentences_per_s"] > 0 and encode["sentence_transformers_sentences_per_s"] > 0
    assert encode["min_cosine"] > 0.9999 and encode["pair_similarity_spearman"] > 0.9999  # fp32 here: the same
    markdown = (tmp_path / "gpu-check.md").read_text()
    assert "| simcse | 8 | fp32 | False |" in markdown and "| cselab | osscse | 8 |" in markdown
    lora = report["lora"]  # a tiny Llama here; a Qwen2 of Qwen2-0.5B's shape on a GPU
    assert [(r["variant"], r["size"], r["batch"]) for r in lora] == [("lora", "tiny", 8), ("lora-ckpt", "tiny", 8),
                                                                      ("qlora-ckpt", "tiny", 8)]
    assert all(r["step_s"] > 0 and r["peak_mib"] > 0 and 0 < r["trainable"] < r["parameters"] for r in lora)


@pytest.mark.skipif(CUDA, reason="a CUDA device is present, so it cannot be missing")
def test_a_missing_device_is_said_plainly(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "sees no CUDA device" in run.stderr


def test_past_the_deadline_sections_are_skipped_and_said_to_be(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--only", "cached,ceiling",
                          "--deadline", "0", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["skipped"] == ["cached", "ceiling"] and "cached" not in report
    assert "Skipped, past the deadline: cached, ceiling." in (tmp_path / "gpu-check.md").read_text()


def test_a_failing_row_is_reported_with_the_others_and_the_run_exits_1(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--only", "family",
                          "--family", "nosuchmethod,esimcse", "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1
    rows = json.loads((tmp_path / "gpu-check.json").read_text())["family"]
    assert [r["method"] for r in rows] == ["nosuchmethod", "esimcse"]
    assert "nosuchmethod" in rows[0]["error"] and rows[1]["steps_per_s"] > 0
