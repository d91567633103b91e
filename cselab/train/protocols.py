"""The protocol ledger (``protocols.yaml`` beside this module): every paper setting cselab carries, where it lives,
and whether cselab follows it (``same``), departs from it (``deviates``, with the reason) or had to read it one way
among several (``interpretation``, with the reason).

``python -m cselab.train.protocols --markdown docs/protocols.md`` writes the ledger as a page; ``--check`` resolves
every row (a preset and profile's key, a package constant, or a test's name) and lists the rows that no longer hold.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cselab.atomic import write_text_atomic
from cselab.train.methods import load_method
from cselab.train.schema import setting

STATUSES = ("same", "deviates", "interpretation")


@cache
def ledger() -> dict[str, Any]:
    """The ledger as written: ``papers`` (key -> citation) and ``rows``."""
    return yaml.safe_load(resources.files("cselab.train").joinpath("protocols.yaml").read_text(encoding="utf-8"))


def _lookup(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def _plain(value: Any) -> Any:
    """Tuples as lists, so a constant compares with what YAML reads."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _code(path: str) -> Any:
    """``module.ATTRIBUTE[.key...]``: the longest importable module prefix, then attributes or keys."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        return _lookup(module, ".".join(parts[cut:]))
    raise ValueError(f"{path}: no module of cselab holds it")


def resolve(row: dict[str, Any], root: Path | None = None) -> Any:
    """What cselab uses today for ``row``; a ``test`` row resolves to its ``cselab_value`` when the test exists."""
    if "at" in row:
        at = row["at"]
        config = load_method(at["preset"], profile=at.get("profile"))
        if "keys" in at:
            return [setting(config, key) for key in at["keys"]]
        return _plain(setting(config, at["key"]))
    if "code" in row:
        return _plain(_code(row["code"]))
    if "test" in row:
        file, _, name = row["test"].partition("::")
        path = (root or Path.cwd()) / file
        if not path.is_file() or f"def {name}(" not in path.read_text(encoding="utf-8"):
            raise ValueError(f"{row['test']}: no such test")
        return row["cselab_value"]
    raise ValueError("a row needs at, code or test")


def problems(root: Path | None = None) -> list[str]:
    """Each row that no longer holds, as one line; empty when the ledger is true."""
    found = []
    papers = ledger()["papers"]
    for number, row in enumerate(ledger()["rows"], 1):
        name = f"row {number} ({row.get('paper')}, {row.get('quantity')})"
        if row.get("paper") not in papers:
            found.append(f"{name}: paper {row.get('paper')!r} is not in the ledger's papers")
        if row.get("status") not in STATUSES:
            found.append(f"{name}: status {row.get('status')!r} is not one of {', '.join(STATUSES)}")
        if row.get("status") != "same" and not row.get("why"):
            found.append(f"{name}: a {row.get('status')} row needs its reason (why)")
        if row.get("status") == "same" and row.get("paper_value") != row.get("cselab_value"):
            found.append(f"{name}: marked same, but the paper says {row.get('paper_value')!r} and the row "
                         f"{row.get('cselab_value')!r}")
        try:
            actual = resolve(row, root)
        except (KeyError, ValueError, AttributeError, TypeError) as err:
            found.append(f"{name}: cannot be resolved ({err})")
            continue
        if actual != row.get("cselab_value"):
            found.append(f"{name}: the ledger says cselab uses {row.get('cselab_value')!r}, cselab uses {actual!r}")
    return found


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return "—" if value is None else text.replace("|", "\\|").replace("\n", " ")


def _where(row: dict[str, Any]) -> str:
    if "at" in row:
        at = row["at"]
        keys = ", ".join(at["keys"]) if "keys" in at else at["key"]
        return f"`{at['preset']}`" + (f" `--profile {at['profile']}`" if at.get("profile") else "") + f": `{keys}`"
    return f"`{row.get('code') or row.get('test')}`"


def markdown() -> str:
    """The ledger as a Markdown page: papers, then one table row per setting."""
    book = ledger()
    rows = book["rows"]
    counts = {status: sum(r["status"] == status for r in rows) for status in STATUSES}
    lines = ["# Protocol ledger", "",
             "Generated from `cselab/train/protocols.yaml` by `python -m cselab.train.protocols --markdown "
             "docs/protocols.md`; `tests/train/test_protocols.py` resolves every row against the presets, profiles, "
             "constants and tests it names, and fails when one no longer holds or this page is stale.", "",
             f"{len(rows)} settings: {counts['same']} as the paper, {counts['deviates']} deviating (with the reason), "
             f"{counts['interpretation']} interpretations (with the reason).", "", "## Papers", ""]
    lines += [f"- **{key}**: {citation}" for key, citation in book["papers"].items()]
    lines += ["", "## Settings", "", "| Paper | Where | Quantity | Paper | cselab | Status | In cselab |",
              "|---|---|---|---|---|---|---|"]
    for row in rows:
        status = row["status"] + (f": {row['why']}" if row.get("why") else "")
        lines.append(f"| {row['paper']} | {row['where']} | {row['quantity']} | {_cell(row.get('paper_value'))} | "
                     f"{_cell(row.get('cselab_value'))} | {_cell(status)} | {_where(row)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cselab.train.protocols", description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", metavar="PATH", help="write the ledger as Markdown to PATH")
    parser.add_argument("--check", action="store_true", help="list the rows that no longer hold (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.markdown:
        print(f"wrote {write_text_atomic(args.markdown, markdown())}")
    if args.check:
        found = problems()
        print("\n".join(found) or f"all {len(ledger()['rows'])} rows hold")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
