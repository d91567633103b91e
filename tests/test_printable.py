"""Control characters in a user's text never reach a report or the terminal raw (issue 67, item 5): labels, model
names and task names are written through one function, cselab.files.printable, by the renderers of every format
and by the command line's output."""

import json
import re
import shutil
from pathlib import Path

import pytest

from cselab.cli import main
from cselab.document import Column, Figure, Heading, Paragraph, Table, to_html, to_markdown
from cselab.files import CONTROLS, printable

REPORTS = Path(__file__).parent / "probes" / "reports"
#: ESC with a colour code, backspace, DEL, 0x1f, a carriage return, a C1 control (CSI), a NUL and a tab.
NASTY = "a\x1b[31mred\x08b\x7fc\x1fd\re\x9bf\x00g\th"


def raw_controls(text: str, keep: str = "\n") -> list[str]:
    return [c for c in CONTROLS.findall(text) if c not in keep]


def test_printable_writes_every_control_character_visibly():
    assert printable(NASTY) == "a\\x1b[31mred\\x08b\\x7fc\\x1fd\\x0de\\x9bf\\x00g\\x09h"
    assert printable("é ü → ✓ \u00a0") == "é ü → ✓ \u00a0"  # printable text as it is
    assert printable("two\nlines\r", keep="\n") == "two\nlines\\x0d"
    assert all(printable(chr(c)) == f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)])


def _document(text: str) -> list:
    return [Heading(f"Report: {text}", 1), Paragraph(f"Model `{text}`\nsecond line"),
            Table([Column(text), "Model"], [[text, text]]), Figure(f"plot-{text}.png", f"caption {text}")]


@pytest.mark.parametrize("render", [to_markdown, lambda blocks: to_html(blocks, title=NASTY)])
def test_every_text_of_every_block_is_printable_in_each_format(render):
    written = render(_document(NASTY))
    assert raw_controls(written) == []
    assert "x1b[31mred" in written and "x7fc" in written and "x0de" in written


def test_a_model_name_in_a_probe_report_is_printable():
    """A planted variant on another path: the model's spec in a results JSON, in the one-result report."""
    from cselab.probes.report import report_blocks
    from cselab.probes.suite import suite_sections

    payload = json.loads((REPORTS / "bow.json").read_text())
    payload["model"]["spec"] = NASTY
    payload["sts"][NASTY] = payload["sts"].pop("STS12")  # a task's name too
    blocks = report_blocks(payload, suite_sections(payload))
    for written in (to_markdown(blocks), to_html(blocks)):
        assert raw_controls(written) == [] and "x1b[31mred" in written


@pytest.mark.slow
def test_probe_compare_labels_never_reach_the_terminal_or_the_report_raw(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("bow", "tinybert"):
        for suffix in (".json", ".items.npz"):
            shutil.copy(REPORTS / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    assert main(["probe", "compare", "bow.json", "tinybert.json", "--resamples", "100", "--label", f"1={NASTY}",
                 "--label", "2=\x1b]0;title\x07tiny", "--out", "compare\x1b[2J.md"]) == 0
    out = capsys.readouterr().out
    assert "wrote compare\\x1b[2J.md" in out  # a line the command prints itself, beside the tables
    for written in (out, (tmp_path / "compare\x1b[2J.md").read_text()):
        assert raw_controls(written) == [], [c for c in raw_controls(written)]
        assert "x1b[31mred" in written and "x1b]0;title" in written


def test_the_command_lines_output_and_errors_are_printable(tmp_path, capsys):
    """What a command prints beside a report (a path it names in an error, an argument it does not know)."""
    assert main(["probe", "compare", str(tmp_path / f"{NASTY.replace(chr(0), '')}.json")]) == 2  # no NUL in a path
    err = capsys.readouterr().err
    assert raw_controls(err) == [] and "x1b[31mred" in err
    with pytest.raises(SystemExit):
        main(["probe", "compare", "a.json", f"--x{NASTY}"])
    err = capsys.readouterr().err
    assert raw_controls(err) == [] and re.search(r"unrecognized arguments: --xa\\x1b\[31mred", err)
