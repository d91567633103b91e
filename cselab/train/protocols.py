"""The protocol ledger (``protocols.yaml`` beside this module): every setting of the papers behind cselab's presets,
three ways - what the paper says, what the authors' released code does (repository, commit, file and line), and
what cselab does and where - with a status for cselab against each of the other two: ``same``, ``deviates`` (with
the reason), ``interpretation`` (a source read one way among several, with the reason) or ``unstated`` (the source
gives no value: where cselab's comes from).

``python -m cselab.train.protocols --markdown docs/protocols.md`` writes the ledger as a page. Checking that every row
still holds (resolving each, running the tests test rows name) is maintainer tooling, in the checkout's
``tests/ledger_check.py`` (``python -m tests.ledger_check``; ``tests/train/test_protocols.py`` runs it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from functools import cache
from importlib import resources
from typing import Any

import yaml

from cselab.atomic import write_text_atomic
from cselab.registry import plain
from cselab.train.config.methods import load_method
from cselab.train.config.schema import value_at

STATUSES = ("same", "deviates", "interpretation", "unstated")


@cache
def ledger() -> dict[str, Any]:
    """The ledger as written: ``papers`` (key -> ``{cite, code}``) and ``rows``."""
    return yaml.safe_load(resources.files("cselab.train").joinpath("protocols.yaml").read_text(encoding="utf-8"))


def _lookup(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def _constant(path: str) -> Any:
    """``module.ATTRIBUTE[.key...]``: the longest importable module prefix, then attributes or keys."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        return _lookup(module, ".".join(parts[cut:]))
    raise ValueError(f"{path}: no module of cselab holds it")


def resolve(row: dict[str, Any]) -> Any:
    """What cselab uses today for an ``at`` or ``constant`` row (a ``test`` row is checked by running its test)."""
    if "at" in row:
        at = row["at"]
        config = load_method(at["preset"], profile=at.get("profile")).to_dict()
        if "keys" in at:
            return [plain(value_at(config, key)) for key in at["keys"]]
        return plain(value_at(config, at["key"]))
    if "constant" in row:
        return plain(_constant(row["constant"]))
    raise ValueError("a row needs at, constant or test")


def cell(value: Any) -> str:
    """A value in a Markdown table: a string as it is, anything else as JSON, None as a dash."""
    text = value if isinstance(value, str) else json.dumps(value)
    return "—" if value is None else text.replace("|", "\\|").replace("\n", " ")


def _where(row: dict[str, Any]) -> str:
    if "at" in row:
        at = row["at"]
        keys = ", ".join(at["keys"]) if "keys" in at else at["key"]
        return f"`{at['preset']}`" + (f" `--profile {at['profile']}`" if at.get("profile") else "") + f": `{keys}`"
    return f"`{row.get('constant') or row.get('test')}`"


def _status(status: str, why: str | None) -> str:
    return cell(f"**{status}**" + (f": {why}" if why else ""))


def _counts(statuses: list[str]) -> str:
    return ", ".join(f"{statuses.count(s)} {s}" for s in STATUSES)


def markdown() -> str:
    """The ledger as a Markdown page: one table per paper, a row per setting, three columns of values."""
    book = ledger()
    rows = book["rows"]
    coded = [r["released"]["status"] for r in rows if "released" in r]
    lines = ["# Protocol ledger", "",
             "Generated from `cselab/train/protocols.yaml` by `python -m cselab.train.protocols --markdown "
             "docs/protocols.md`; `tests/train/test_protocols.py` resolves every row against the presets, profiles "
             "and constants it names, runs the tests it names, and fails when one no longer holds or this page is "
             "stale.", "",
             "Each row: what the paper says, what the authors' released code does (file and line at the commit "
             "named), what cselab does and where, and cselab's status against each: **same**, **deviates** (with "
             "the reason), **interpretation** (the source can be read more than one way: cselab's reading) or "
             "**unstated** (the source gives no value: where cselab's comes from). Where a paper is silent the "
             "presets follow its released code, whose runs gave the paper's tables; where the two disagree on the "
             "objective the preset keeps the paper and `--profile official` gives the code.", "",
             f"{len(rows)} settings. Against the papers: {_counts([r['status'] for r in rows])}. Against the "
             f"released code ({len(coded)} rows of papers with code): {_counts(coded)}."]
    for key, paper in book["papers"].items():
        code = paper.get("code")
        source = (f"released code: [{code['repo']}](https://github.com/{code['repo']}) at `{code['commit']}`"
                  if code else "no code released: the paper is the only reference")
        lines += ["", f"## {key}", "", f"{paper['cite']} {source[0].upper() + source[1:]}.", "",
                  "| Quantity | Paper | Released code | cselab | vs paper | vs released code |",
                  "|---|---|---|---|---|---|"]
        for row in (r for r in rows if r["paper"] == key):
            released = row.get("released") or {}
            code_cell = (f"{cell(released.get('value'))} (`{cell(released['at'])}`)" if released
                         else "no code released")
            code_status = _status(released["status"], released.get("why")) if released else "—"
            lines.append(f"| {cell(row['quantity'])} | {cell(row.get('paper_value'))} ({cell(row['where'])}) | "
                         f"{code_cell} | {cell(row.get('cselab_value'))} ({_where(row)}) | "
                         f"{_status(row['status'], row.get('why'))} | {code_status} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cselab.train.protocols", description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", metavar="PATH", required=True, help="write the ledger as Markdown to PATH")
    args = parser.parse_args(argv)
    print(f"wrote {write_text_atomic(args.markdown, markdown())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
