"""``probe run --dims``: each width a results set of its own, scored on the vectors cut to it (checked against the
cosines of the cut vectors by hand), the full width equal to a plain run, a comparison with paired intervals from the
widest and a plot; widths that cannot be are refused before any scoring."""

import json

import numpy as np
import pytest

from cselab.cli import main
from cselab.encoders import load_encoder
from tests.runs import one_line_error

STSB = "sts/STS-B/test"


@pytest.fixture(scope="module")
def widths(tmp_path_factory, tiny_bert_dir, data_dir):
    folder = tmp_path_factory.mktemp("widths")
    common = ["--model", str(tiny_bert_dir), "--suite", "sts,bias", "--limit", "30", "--data-dir", str(data_dir),
              "--no-cache"]
    assert main(["probe", "run", *common, "--dims", "8,32,16", "--out", str(folder / "w.json")]) == 0
    assert main(["probe", "run", *common, "--out", str(folder / "full.json")]) == 0
    return folder


@pytest.mark.slow
def test_each_width_is_scored_on_the_cut_vectors(widths, tiny_bert_dir, data_dir):
    from cselab.data.named import load_sts

    pairs = load_sts("stsb", data_dir=data_dir)[0]
    vectors = [load_encoder(str(tiny_bert_dir), cache=False).encode(s[:30])[:, :8]
               for s in (pairs.sentences1, pairs.sentences2)]
    cosines = (vectors[0] * vectors[1]).sum(1) / np.linalg.norm(vectors[0], axis=1) / np.linalg.norm(vectors[1], axis=1)
    with np.load(widths / "w.dim-8.items.npz") as items:
        np.testing.assert_allclose(items[f"{STSB}/sim"], cosines, rtol=1e-5, atol=1e-6)
    payload = json.loads((widths / "w.dim-8.json").read_text())
    assert payload["model"]["dim"] == 8 and payload["model"]["truncated_from"] == 32


@pytest.mark.slow
def test_the_full_width_equals_a_plain_run(widths):
    full, cut = (json.loads((widths / name).read_text()) for name in ("full.json", "w.dim-32.json"))
    assert cut["sts"]["avg"] == full["sts"]["avg"] and cut["bias"]["splits"]["gap"] == full["bias"]["splits"]["gap"]
    assert cut["sts"]["avg"] != json.loads((widths / "w.dim-8.json").read_text())["sts"]["avg"]


@pytest.mark.slow
def test_the_widths_are_compared_with_paired_intervals_and_a_plot(widths):
    report = (widths / "w.dims.md").read_text()
    for name in ("dim 8", "dim 16", "dim 32"):
        assert f"| {name} |" in report
    assert "## Differences against dim 32" in report and "![](w.dims.png)" in report
    assert (widths / "w.dims.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["probe", "compare", str(widths / "w.dim-8.json"), str(widths / "w.dim-32.json")]) == 0


@pytest.mark.parametrize("dims, suite, why", [
    ("8,64", "sts", "--dims 64: the model's vectors have 32 components"),
    ("8,8", "sts", "--dims 8,8: expected distinct widths"),
    ("8", "sts,mteb", "--dims with --suite mteb: mteb has no width setting for a custom model")])
def test_widths_that_cannot_be_are_refused(tiny_bert_dir, data_dir, tmp_path, capsys, dims, suite, why):
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--limit", "30", "--data-dir", str(data_dir),
                 "--no-cache", "--suite", suite, "--dims", dims, "--out", str(tmp_path / "w.json")]) == 2
    assert why in one_line_error(capsys)
    assert not list(tmp_path.iterdir())
