"""The document model of reports: typed columns write and align their values; Markdown and HTML from the same
blocks."""

import numpy as np
import pytest

from cselab.document import (Column, Figure, Formatted, Heading, Paragraph, Table, check_blocks, fixed, number,
                             stacked, to_html, to_markdown)


def test_a_column_writes_its_values_by_its_kind():
    assert [number("x").format(v) for v in (72.3749, None, 12, np.int64(7), Formatted("85.00/80.00"))] == [
        "72.37", "n/a", "12", "7", "85.00/80.00"]
    assert number("d", 3, signed=True).format(0.1234) == "+0.123" and number("d", signed=True).format(-1.0) == "-1.00"
    assert Column("ci", "interval", 2).format((-0.125, 1.5)) == "[-0.12, +1.50]"
    assert Column("name").format(3.14159) == "3.14159"  # text: as str gives it
    assert fixed([0.5, 1.25], 1, True) == "[+0.5, +1.2]" and fixed(None) == "n/a"
    with pytest.raises(ValueError, match="kind 'numeric', expected one of text, number, interval"):
        Column("x", "numeric")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["72.37", "n/a", True, b"72", {"a": 1}])
def test_a_figure_column_refuses_what_is_no_number_unless_its_code_wrote_it(value):
    """By class: text where a figure belongs (a results file holding a figure as a string) is an error, not a cell;
    only text the computing code wrote (Formatted) stands in a figure column."""
    with pytest.raises(TypeError, match="a figure must be a number"):
        number("STS").format(value)
    with pytest.raises(TypeError, match="a figure must be a number"):
        Column("CI", "interval").format(["low", 2.0])


@pytest.mark.parametrize("line_break", ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x85", "\u2028", "\u2029"])
def test_no_line_break_of_a_label_ends_a_table_row_or_a_heading(line_break):
    """By class: every line break Python knows, in a cell or a heading (a user's --label), is written as a space."""
    label = f"run{line_break}two"
    markdown = to_markdown([Heading(f"Differences against {label}"), Table(["Model", number("STS")],
                                                                           [[label, 1.0], ["other", 2.0]])])
    assert markdown.splitlines() == ["## Differences against run two", "", "| Model   | STS  |", "| ------- | ---- |",
                                     "| run two | 1.00 |", "| other   | 2.00 |"]


def test_a_table_is_refused_a_row_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"Table \(Model, STS\): a row of 3 values for 2 columns"):
        Table(["Model", number("STS")], [["bow", 1.0, 2.0]])


def test_tables_of_several_models_stack_where_their_columns_agree():
    a = Table(["Model", number("STS")], [["bow", 45.0]])
    b = Table(["Model", number("STS")], [["tfidf", 50.0]])
    assert stacked([a, b]) == [Table(["Model", number("STS")], [["bow", 45.0], ["tfidf", 50.0]])]
    other = Table(["Model", number("STS", 3)], [["x", 1.0]])  # other decimals: another column
    assert stacked([a, other]) == [a, other] and stacked([]) == []


def test_markdown_pads_and_escapes_and_html_aligns_by_kind():
    blocks = [Heading("Report", 1), Paragraph("Split rule `paper`."),
              Table(["Model", number("STS"), Column("CI", "interval")], [["a|b", 45.678, (-1.0, 2.0)]]),
              Figure("/somewhere/r.geometry.png", "layers")]
    assert to_markdown(blocks) == (
        "# Report\n\nSplit rule `paper`.\n\n"
        "| Model | STS   | CI             |\n| ----- | ----- | -------------- |\n| a\\|b  | 45.68 | [-1.00, +2.00] |"
        "\n\n![layers](r.geometry.png)")
    page = to_html(blocks)
    assert ('<tr><td class="text">a|b</td><td class="num">45.68</td><td class="num">[-1.00, +2.00]</td></tr>'
            in page)
    assert "<h1>Report</h1>" in page and '<img src="r.geometry.png" alt="layers">' in page


def test_anything_but_a_block_is_refused_naming_who_made_it():
    with pytest.raises(TypeError, match="suite lengths: sections\\(\\): str '## Lengths' is not a report block"):
        check_blocks([Heading("Lengths"), "## Lengths"], "suite lengths: sections()")
    with pytest.raises(ValueError, match="level 4"):
        Heading("deep", 4)


def test_a_suite_that_returns_text_is_told_to_return_a_list_of_blocks():
    with pytest.raises(TypeError, match="suite x: sections\\(\\): gave str '## X'; return a list of cselab.document "
                                        "blocks"):
        check_blocks("## X", "suite x: sections()")
