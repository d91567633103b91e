"""Maintainer tooling: does every row of the protocol ledger (``cselab/train/protocols.yaml``) still hold? Each row is
resolved (a preset and profile's key, a package constant) and compared with what the ledger says cselab uses; the
tests test rows name are run. ``python -m tests.ledger_check`` from the checkout lists the rows that no longer hold
(exit 1 if any); ``tests/train/test_protocols.py`` asserts there are none."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from cselab.train import protocols

ROOT = Path(__file__).resolve().parents[1]


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
    if status not in protocols.STATUSES:
        found.append(f"{name}: {pair} status {status!r} is not one of {', '.join(protocols.STATUSES)}")
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
    book, found, tests = protocols.ledger(), [], {}
    for number, row in enumerate(book["rows"], 1):
        found += _row_problems(number, row, book["papers"])
        name = f"row {number} ({row.get('paper')}, {row.get('quantity')})"
        if "test" in row:
            tests.setdefault(row["test"], []).append(name)
            continue
        try:
            actual = protocols.resolve(row)
        except (KeyError, ValueError, AttributeError, TypeError) as err:
            found.append(f"{name}: cannot be resolved ({err})")
            continue
        if actual != row.get("cselab_value"):
            found.append(f"{name}: the ledger says cselab uses {row.get('cselab_value')!r}, cselab uses {actual!r}")
    for test, why in failing_tests(list(tests), root or Path.cwd()).items():
        found += [f"{name}: its test {test} {why}" for name in tests[test]]
    return found




def main() -> int:
    found = problems(ROOT)
    print("\n".join(found) or f"all {len(protocols.ledger()['rows'])} rows hold")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
