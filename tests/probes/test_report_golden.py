"""Reports are blocks rendered one way (issue 49, item 1): the reports of two real results are the ones cselab
wrote before the document model, to the character.

``reports/`` holds two results ``probe run`` wrote at commit 290424a (``--suite sts,bias,transfer,geometry,mteb
--mteb-tasks CselabSTSB,CselabCont --limit 40 --classifier fast --transfer-tasks CR,MRPC``: ``bow``, and a tiny
random BERT saved by tests.conftest.save_tiny_bert(folder, BertModel, 32, 2)), the Markdown reports that commit
wrote of each (``NAME.report.md``) and its ``probe compare bow.json tinybert.json --resamples 200 --seed 0 --label
'1=bag|of words'`` (``compare.md``). ``NAME.report.html`` is the page without its pictures. It differs from that
commit's in two places, on purpose: the columns "Paraphrase > negation" and "L2" are figures, so their cells are
right-aligned (the regex that guessed alignment had called them text).
"""

import json
import shutil
from pathlib import Path

import pytest

from cselab.cli import main
from cselab.document import to_html, to_markdown
from cselab.probes.report import report_blocks
from cselab.probes.runner import write_plots
from cselab.probes.suite import suite_sections

REPORTS = Path(__file__).parent / "reports"


@pytest.fixture
def results(tmp_path):
    for name in ("bow", "tinybert"):
        for suffix in (".json", ".items.npz"):
            shutil.copy(REPORTS / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bow", "tinybert"])
def test_a_results_report_is_the_one_written_before_the_document_model(results, name):
    payload = json.loads((results / f"{name}.json").read_text())
    plots = write_plots(payload, results / f"{name}.json")  # as the runner draws them, beside the results
    markdown = to_markdown(report_blocks(payload, suite_sections(payload), plots)) + "\n"
    assert markdown == (REPORTS / f"{name}.report.md").read_text()
    page = to_html(report_blocks(payload, suite_sections(payload)))
    assert page == (REPORTS / f"{name}.report.html").read_text()


@pytest.mark.slow
def test_probe_compare_prints_and_writes_the_tables_written_before_the_document_model(results, capsys, monkeypatch):
    monkeypatch.chdir(results)
    assert main(["probe", "compare", "bow.json", "tinybert.json", "--resamples", "200", "--seed", "0", "--label",
                 "1=bag|of words", "--out", "compare.md"]) == 0
    expected = (REPORTS / "compare.md").read_text()
    assert (results / "compare.md").read_text() == expected
    assert expected in capsys.readouterr().out
