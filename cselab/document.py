"""Reports as data: a document is a list of blocks (:class:`Heading`, :class:`Paragraph`, :class:`Table` of typed
columns, :class:`Figure`), rendered one way, to Markdown (:func:`to_markdown`) or to an HTML page (:func:`to_html`).
Results become blocks and blocks become text; nothing reads the text back. Every text of a block goes through
:func:`cselab.files.printable` as it is rendered (a heading, a cell, a column's label, a caption on one line too:
:func:`one_line`), so that a control character a user's label or a model's name holds is written visibly, never
raw, in every format: the terminal shows the Markdown."""

from __future__ import annotations

import base64
import html
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cselab.files import printable

KINDS = ("text", "number", "interval")


class Formatted(str):
    """A figure already written as text by the code that computed it (``85.00/80.00``, ``≤ 0.005``): the one kind of
    string a figure column takes. A plain string there (a figure a results file holds as text) is a TypeError, so
    that a report never shows text where a number belongs."""


def fixed(value: float | int | Sequence[float] | None, digits: int = 2, signed: bool = False) -> Formatted:
    """A figure with ``digits`` decimals (``signed``: with its sign); an int as it is, None as ``n/a``, a pair (an
    interval) as ``[low, high]``, each signed. A value that is no number is a TypeError naming it."""
    if value is None:
        return Formatted("n/a")
    if isinstance(value, (list, tuple)):
        low, high = (_figure(v) for v in value)
        return Formatted(f"[{low:+.{digits}f}, {high:+.{digits}f}]")
    figure = _figure(value)
    if isinstance(figure, numbers.Integral):  # numpy's integers too
        return Formatted(str(figure))
    return Formatted(f"{figure:{'+' if signed else ''}.{digits}f}")


def _figure(value: Any) -> numbers.Real:
    """``value`` when it is a number (not a bool), else a TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"a figure must be a number, not {type(value).__name__} {str(value)[:40]!r}")
    return value


@dataclass(frozen=True)
class Heading:
    """A heading of ``level`` 1 to 3."""

    text: str
    level: int = 2

    def __post_init__(self):
        if self.level not in (1, 2, 3):
            raise ValueError(f"Heading {self.text!r}: level {self.level}, expected 1, 2 or 3")


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of plain text (Markdown's inline marks, such as ``code``, pass through as written)."""

    text: str


@dataclass(frozen=True)
class Column:
    """A table column: its ``label`` and the ``kind`` of its values, which decides how they are written and aligned.

    - ``text``: any value, as ``str`` gives it; left-aligned.
    - ``number``: a float with ``digits`` decimals (``signed``: with its sign), an int as it is, None as ``n/a``, a
      :class:`Formatted` text as its suite wrote it (``85.00/80.00``, ``≤ 0.005``); right-aligned. Any other value
      (a plain string) is a TypeError.
    - ``interval``: a pair (low, high), each signed with ``digits`` decimals, in brackets; right-aligned.
    """

    label: str
    kind: Literal["text", "number", "interval"] = "text"
    digits: int = 2
    signed: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Column {self.label!r}: kind {self.kind!r}, expected one of {', '.join(KINDS)}")

    def format(self, value: Any) -> str:
        """``value`` as this column writes it."""
        if self.kind == "text" or isinstance(value, Formatted):
            return str(value)
        if self.kind == "interval" and value is not None:
            return fixed(tuple(value), self.digits)
        return fixed(value, self.digits, self.signed)


def number(label: str, digits: int = 2, signed: bool = False) -> Column:
    """A column of figures."""
    return Column(label, "number", digits, signed)


@dataclass(frozen=True)
class Table:
    """Rows of values under typed columns (each row as long as ``columns``)."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __init__(self, columns: Sequence[Column | str], rows: Sequence[Sequence[Any]]):
        """``columns``: a plain label is a text column."""
        typed = tuple(c if isinstance(c, Column) else Column(c) for c in columns)
        values = tuple(tuple(row) for row in rows)
        for row in values:
            if len(row) != len(typed):
                raise ValueError(f"Table ({', '.join(c.label for c in typed)}): a row of {len(row)} values for "
                                 f"{len(typed)} columns: {row!r}")
        object.__setattr__(self, "columns", typed)
        object.__setattr__(self, "rows", values)

    def cells(self) -> list[list[str]]:
        """Every row's values as text."""
        return [[column.format(value) for column, value in zip(self.columns, row)] for row in self.rows]


def stacked(tables: Sequence[Table]) -> list[Table]:
    """Tables of several models (one row each, the model first): one table of all their rows where their other
    columns agree, else each as it is."""
    if tables and all(t.columns[1:] == tables[0].columns[1:] for t in tables):
        return [Table(tables[0].columns, [row for t in tables for row in t.rows])]
    return list(tables)


@dataclass(frozen=True)
class Figure:
    """A picture (a file beside the report) and its caption."""

    path: str | os.PathLike
    caption: str


Block = Heading | Paragraph | Table | Figure


def check_blocks(blocks: Sequence[Any], where: str) -> list[Block]:
    """``blocks`` as given, each checked to be a block; ``where``: who made them, named in the error."""
    if not isinstance(blocks, (list, tuple)):
        raise TypeError(f"{where}: gave {type(blocks).__name__} {str(blocks)[:60]!r}; return a list of "
                        "cselab.document blocks (Heading, Paragraph, Table, Figure)")
    for block in blocks:
        if not isinstance(block, (Heading, Paragraph, Table, Figure)):
            raise TypeError(f"{where}: {type(block).__name__} {str(block)[:60]!r} is not a report block; return "
                            "cselab.document blocks (Heading, Paragraph, Table, Figure)")
    return list(blocks)


def one_line(text: str) -> str:
    """``text`` on one line: every line break Python knows (``\\n``, ``\\r``, ``\\r\\n``, ``\\v``, ``\\f``, the
    Unicode separators) a space, so that a user's label cannot end a table row or a heading, and any other control
    character written visibly (:func:`~cselab.files.printable`)."""
    return printable(" ".join(text.splitlines())) if text else text


def _paragraph(text: str) -> str:
    """A paragraph's text: its line breaks kept (a paragraph may hold several lines), any other control character
    written visibly."""
    return printable(text, keep="\n")


def _markdown_cell(text: str) -> str:
    """A cell's text in a Markdown table: on one line (:func:`one_line`), a ``|`` (a user's label) escaped, so that it
    stays in its cell."""
    return one_line(text).replace("\\", "\\\\").replace("|", "\\|")


def markdown_table(table: Table) -> str:
    """A Markdown table whose columns are padded to line up in a terminal."""
    lines = [[_markdown_cell(c.label) for c in table.columns], *([_markdown_cell(c) for c in row]
                                                                 for row in table.cells())]
    widths = [max(len(line[i]) for line in lines) for i in range(len(table.columns))]
    lines.insert(1, ["-" * w for w in widths])
    return "\n".join("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths)) + " |" for line in lines)


def _markdown_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {one_line(block.text)}"
    if isinstance(block, Paragraph):
        return _paragraph(block.text)
    if isinstance(block, Table):
        return markdown_table(block)
    return f"![{one_line(block.caption)}]({one_line(Path(block.path).name)})"


def to_markdown(blocks: Sequence[Block]) -> str:
    """The blocks as Markdown, a blank line between two."""
    return "\n\n".join(_markdown_block(block) for block in blocks)


def _image_source(name: str, folder: Path | None) -> str:
    """An image's ``src``: the picture itself (a base64 data URI) when it is a PNG in ``folder``, else its name."""
    path = folder / name if folder is not None else None
    if path is not None and path.suffix == ".png" and path.is_file():
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return html.escape(one_line(name))


def _html_table(table: Table) -> str:
    """A table whose figures (number and interval columns) are right-aligned, any other column left-aligned."""
    classes = ["text" if c.kind == "text" else "num" for c in table.columns]

    def row_html(row: Sequence[str], tag: str) -> str:
        return "<tr>" + "".join(f'<{tag} class="{kind}">{html.escape(one_line(text))}</{tag}>'
                                for kind, text in zip(classes, row)) + "</tr>"
    body = "".join(row_html(row, "td") for row in table.cells())
    return f"<table><thead>{row_html([c.label for c in table.columns], 'th')}</thead><tbody>{body}</tbody></table>"


def _html_block(block: Block, folder: Path | None) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{html.escape(one_line(block.text))}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{html.escape(_paragraph(block.text))}</p>"
    if isinstance(block, Table):
        return _html_table(block)
    name, caption = Path(block.path).name, html.escape(one_line(block.caption))
    return (f'<figure><img src="{_image_source(name, folder)}" alt="{caption}"><figcaption>{caption}'
            "</figcaption></figure>")


STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}table{border-collapse:collapse;"
         "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px}th{background:#eee}.num{text-align:right}"
         ".text{text-align:left}figure{margin:1em 0}img{max-width:100%;height:auto}figcaption{font-size:90%;"
         "color:#555}")


def to_html(blocks: Sequence[Block], images: str | os.PathLike | None = None, title: str = "cselab probe report"
            ) -> str:
    """The blocks as one HTML page; ``images``: the folder of its figures, which are then embedded, so that the page
    is complete on its own (moved, mailed, attached)."""
    folder = Path(images) if images is not None else None
    body = "\n".join(_html_block(block, folder) for block in blocks)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(one_line(title))}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")
