"""The report a user opens: an HTML page complete on its own, readable at a page's width, in a real browser."""

import base64
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from cselab.cli import main
from cselab.document import Figure, Table, number, to_html
from cselab.probes.runner import write_outputs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# as the environment notes say: no sandbox as root, no background connections on a closed network
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
PAGE_WIDTH = 1280


@pytest.fixture(scope="module")
def report(tmp_path_factory, tiny_bert_dir, data_dir):
    """A tiny BERT's report with tables and the geometry, transfer and transformation figures."""
    out = tmp_path_factory.mktemp("report") / "tiny.json"
    assert main(["probe", "run", "--model", str(tiny_bert_dir), "--device", "cpu", "--suite",
                 "sts,bias,transfer,geometry", "--limit", "30", "--classifier", "fast", "--transfer-tasks", "CR",
                 "--data-dir", str(data_dir), "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_the_page_embeds_its_pictures_so_that_it_is_complete_on_its_own(report, tmp_path):
    page = report.with_suffix(".html").read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == 3 and all(s.startswith("data:image/png;base64,") for s in sources)
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in sources}
    assert embedded == {report.with_suffix(f".{name}.png").read_bytes() for name in
                        ("transfer", "geometry", "transformations")}
    markdown = report.with_suffix(".md").read_text()
    assert "(tiny.geometry.png)" in markdown  # the Markdown report still links the files beside it
    assert 'src="tiny.geometry.png"' in to_html([Figure(report.with_suffix(".geometry.png"), "geometry")])  # no folder



def test_a_column_of_text_is_left_aligned_and_a_column_of_figures_right_aligned():
    page = to_html([Table(["Model", number("STS12"), "L2"], [["runs/osscse/best", 72.3712, "per fold"],
                                                             ["minilm", None, "1e-05"]])])
    assert '<td class="text">runs/osscse/best</td><td class="num">72.37</td><td class="text">per fold</td>' in page
    assert '<td class="text">minilm</td><td class="num">n/a</td><td class="text">1e-05</td>' in page
    assert '<th class="text">Model</th><th class="num">STS12</th>' in page
    assert ".num{text-align:right}.text{text-align:left}" in page


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_every_output_gets_the_users_umask(tmp_path, mask):
    payload = {"cselab_version": "0", "suite": "sts", "model": {"spec": "bow", "class": "BagOfWords"},
               "wall_time_s": 1.0, "sts": {"STS12": {"all": 50.0, "n": 2}, "avg": 50.0},
               "items": {"sts/STS12/x/sim": np.zeros(2)}}
    old = os.umask(mask)
    try:
        written = write_outputs(payload, tmp_path / "r.json")
    finally:
        os.umask(old)
    assert len(written) == 4 and {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o666 & ~mask)}


# What the browser reports of the page once it is laid out at PAGE_WIDTH: each picture's natural and shown
# width, and the alignment of a text cell and of a figure cell.
MEASURE = """<script>window.addEventListener("load", () => {
  const images = [...document.images].map(i => [i.alt, i.naturalWidth, i.naturalHeight,
                                                 i.getBoundingClientRect().width]);
  const align = c => c ? getComputedStyle(c).textAlign : null;
  const out = document.createElement("pre"); out.id = "measured";
  out.textContent = JSON.stringify({images, text: align(document.querySelector("td.text")),
                                    num: align(document.querySelector("td.num"))});
  document.body.appendChild(out);
});</script>"""


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium); CI installs it")
def test_in_a_headless_browser_the_pictures_load_and_the_geometry_grid_is_shown_near_its_own_size(report, tmp_path):
    alone = tmp_path / "moved" / "report.html"  # the page alone, away from its PNGs
    alone.parent.mkdir()
    alone.write_text(report.with_suffix(".html").read_text().replace("</body>", MEASURE + "</body>"))
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={PAGE_WIDTH},2000"]
    dom = subprocess.run([*common, "--virtual-time-budget=10000", "--dump-dom", alone.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stderr[-2000:]
    measured = json.loads(found.group(1).replace("&quot;", '"'))
    assert measured["text"] == "left" and measured["num"] == "right"
    shown = {alt: (width, height, on_page) for alt, width, height, on_page in measured["images"]}
    assert len(shown) == 3 and all(width > 0 and height > 0 for width, height, _ in shown.values())  # all loaded
    width, height, on_page = shown["alignment, uniformity and the layer-wise measures"]
    # a grid, not a strip: at page width it is drawn at 85% of its size or more (the strip was at 45%)
    assert width / height < 2 and on_page / width >= 0.85
    shot = tmp_path / "page.png"
    subprocess.run([*common, f"--screenshot={shot}", alone.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:4] == b"\x89PNG" and int.from_bytes(shot.read_bytes()[16:20], "big") == PAGE_WIDTH
