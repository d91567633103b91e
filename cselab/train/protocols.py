"""The protocol ledger (``protocols.yaml`` beside this module): every setting of the papers behind cselab's presets,
three ways - what the paper says, what the authors' released code does (repository, commit, file and line), and
what cselab does and where - with a status for cselab against each of the other two: ``same``, ``deviates`` (with
the reason), ``interpretation`` (a source read one way among several, with the reason) or ``unstated`` (the source
gives no value: where cselab's comes from).

``python -m cselab.train.protocols --markdown docs/protocols.md`` writes the ledger as a page; ``--check`` resolves
every row (a preset and profile's key, a package constant, or a test, which is run) and lists the rows that no longer
hold.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cselab.atomic import write_text_atomic
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


def _plain(value: Any) -> Any:
    """Tuples as lists, so a constant compares with what YAML reads."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


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
        config = load_method(at["preset"], profile=at.get("profile"))
        if "keys" in at:
            return [_plain(value_at(config, key)) for key in at["keys"]]
        return _plain(value_at(config, at["key"]))
    if "constant" in row:
        return _plain(_constant(row["constant"]))
    raise ValueError("a row needs at, constant or test")


def failing_tests(names: list[str], root: Path) -> dict[str, str]:
    """Run the tests ``names`` (``tests/FILE.py::test_name``, every parametrisation of it) in one pytest process
    under ``root``; returns the ones that did not pass, each with why."""
    missing = {name: "no such test" for name in names if not _test_exists(name, root)}
    present = sorted(set(names) - set(missing))
    if not present:
        return missing
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                        *present], cwd=root, capture_output=True, text=True)
        outcomes = _outcomes(report) if report.is_file() else {}
    for name in present:
        file, _, test = name.partition("::")
        mine = [passed for (case_file, case), passed in outcomes.items()
                if case_file == file and (case == test or case.startswith(test + "["))]
        if not mine:
            missing[name] = "did not run"
        elif not all(mine):
            missing[name] = "fails"
    return missing


def _test_exists(name: str, root: Path) -> bool:
    file, _, test = name.partition("::")
    path = root / file
    return path.is_file() and f"def {test}(" in path.read_text(encoding="utf-8")


def _outcomes(report: Path) -> dict[tuple[str, str], bool]:
    """(test file, test name) -> passed, from a JUnit XML report."""
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        file = case.get("classname", "").replace(".", "/") + ".py"
        outcomes[file, case.get("name", "")] = not any(child.tag in ("failure", "error", "skipped") for child in case)
    return outcomes


def _pair_problems(name: str, pair: str, status: Any, value: Any, why: Any, cselab: Any) -> list[str]:
    found = []
    if status not in STATUSES:
        found.append(f"{name}: {pair} status {status!r} is not one of {', '.join(STATUSES)}")
    if status != "same" and not why:
        found.append(f"{name}: a {status} row needs its reason ({pair})")
    if status == "same" and value != cselab:
        found.append(f"{name}: marked same as the {pair}, but the {pair} says {value!r} and cselab {cselab!r}")
    if status == "unstated" and value is not None:
        found.append(f"{name}: marked unstated by the {pair}, which says {value!r}")
    return found


def _row_problems(number: int, row: dict[str, Any], papers: dict[str, Any]) -> list[str]:
    """What is wrong with a row as written (its statuses, reasons and released-code column)."""
    name = f"row {number} ({row.get('paper')}, {row.get('quantity')})"
    if row.get("paper") not in papers:
        return [f"{name}: paper {row.get('paper')!r} is not in the ledger's papers"]
    found = _pair_problems(name, "paper", row.get("status"), row.get("paper_value"), row.get("why"),
                           row.get("cselab_value"))
    released = row.get("released")
    if papers[row["paper"]].get("code") is None:
        if released is not None:
            found.append(f"{name}: {row['paper']} released no code, yet the row has a released column")
        return found
    if not isinstance(released, dict) or not released.get("at"):
        return [*found, f"{name}: {row['paper']} released code ({papers[row['paper']]['code']['repo']}): the row "
                        "needs released: {at, value, status}"]
    return found + _pair_problems(name, "released code", released.get("status"), released.get("value"),
                                  released.get("why"), row.get("cselab_value"))


def problems(root: Path | None = None) -> list[str]:
    """Each row that no longer holds, as one line; empty when the ledger is true. Test rows run their tests (found
    under ``root``, the checkout)."""
    book, found, tests = ledger(), [], {}
    for number, row in enumerate(book["rows"], 1):
        found += _row_problems(number, row, book["papers"])
        name = f"row {number} ({row.get('paper')}, {row.get('quantity')})"
        if "test" in row:
            tests.setdefault(row["test"], []).append(name)
            continue
        try:
            actual = resolve(row)
        except (KeyError, ValueError, AttributeError, TypeError) as err:
            found.append(f"{name}: cannot be resolved ({err})")
            continue
        if actual != row.get("cselab_value"):
            found.append(f"{name}: the ledger says cselab uses {row.get('cselab_value')!r}, cselab uses {actual!r}")
    for test, why in failing_tests(list(tests), root or Path.cwd()).items():
        found += [f"{name}: its test {test} {why}" for name in tests[test]]
    return found


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return "—" if value is None else text.replace("|", "\\|").replace("\n", " ")


def _where(row: dict[str, Any]) -> str:
    if "at" in row:
        at = row["at"]
        keys = ", ".join(at["keys"]) if "keys" in at else at["key"]
        return f"`{at['preset']}`" + (f" `--profile {at['profile']}`" if at.get("profile") else "") + f": `{keys}`"
    return f"`{row.get('constant') or row.get('test')}`"


def _status(status: str, why: str | None) -> str:
    return _cell(f"**{status}**" + (f": {why}" if why else ""))


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
            code_cell = (f"{_cell(released.get('value'))} (`{_cell(released['at'])}`)" if released
                         else "no code released")
            code_status = _status(released["status"], released.get("why")) if released else "—"
            lines.append(f"| {_cell(row['quantity'])} | {_cell(row.get('paper_value'))} ({_cell(row['where'])}) | "
                         f"{code_cell} | {_cell(row.get('cselab_value'))} ({_where(row)}) | "
                         f"{_status(row['status'], row.get('why'))} | {code_status} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cselab.train.protocols", description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", metavar="PATH", help="write the ledger as Markdown to PATH")
    parser.add_argument("--check", action="store_true", help="list the rows that no longer hold (exit 1 if any); "
                        "run from a checkout, whose tests the test rows run")
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
