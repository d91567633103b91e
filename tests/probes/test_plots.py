"""The pictures the suites draw: a PNG for any section they can be asked to draw, its parts skipped included."""

import pytest

from cselab.probes.accuracy import AccuracyPresenter
from cselab.probes.plots import plot_accuracies, plot_geometry
from cselab.probes.suite import presenters

PNG = b"\x89PNG\r\n\x1a\n"
GEOMETRY = {"alignment_uniformity": {"alignment": 0.41, "uniformity": -2.3},
            "layers": {"layers": 2, "inter_layer_cosine": [0.9, 0.8], "token_similarity": [0.5, 0.4, 0.3],
                       "sts_by_layer": {"avg": [40.0, 55.0, None], "cls": [30.0, 45.0, 50.0]}},
            "pca": {"reference": "wiki1m.txt", "reference_sentences": 100, "dims": {"2": {"avg": 30.0},
                                                                                    "16": {"avg": 60.0}}}}


def test_an_accuracy_bar_chart_is_a_png(tmp_path):
    path = plot_accuracies({"CR": 80.0, "MRPC": 71.3}, tmp_path / "deep" / "acc.png", "title")
    assert path == tmp_path / "deep" / "acc.png" and path.read_bytes()[:8] == PNG


@pytest.mark.slow
@pytest.mark.parametrize("skipped", [(), ("layers",), ("pca",), ("layers", "pca")])
def test_the_geometry_panels_draw_every_part_or_say_why_it_was_skipped(tmp_path, skipped):
    section = {**GEOMETRY, **{part: {"skipped": f"no {part} here"} for part in skipped}}
    assert plot_geometry(section, tmp_path / "g.png", "model").read_bytes()[:8] == PNG


def test_each_suite_names_its_pictures_after_itself_beside_the_results(tmp_path):
    out = tmp_path / "r.json"
    transfer = {"CR": {"acc": 80.0}, "MR": {"acc": 75.0}, "avg": 77.5, "classifier": "fast"}
    drawn = presenters()["transfer"].plots(transfer, out, "bow")
    assert drawn == {tmp_path / "r.transfer.png": "test accuracy per transfer task"}
    assert presenters()["geometry"].plots(GEOMETRY, out, "bow") == {
        tmp_path / "r.geometry.png": "alignment, uniformity and the layer-wise measures"}
    # a probing section whose every task was absent draws nothing
    assert isinstance(presenters()["probing"], AccuracyPresenter)
    assert presenters()["probing"].plots({"skipped": "no probing files"}, out, "bow") == {}
