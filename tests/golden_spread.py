"""How much the golden numbers move from run to run: ``tests/golden_numbers.py`` (pinned) run N times on one core
(``taskset -c 0``) and N times beside a load of busy processes, every number compared with the golden file's.

    CSELAB_DATA_DIR=../shared/data .venv/bin/python -m tests.golden_spread [--runs 5] [--load 3] [--write]

prints the largest relative difference per condition and, with ``--write``, keeps it in ``tests/golden.json`` under
``_spread`` (what ``tests/test_golden.py``'s tolerance is measured against). Takes about 2 minutes a run.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from tests.conftest import save_tiny_bert, write_tiny_cache
from tests.golden_numbers import PINNED

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).with_name("golden.json")


def largest_difference(found: dict, golden: dict) -> tuple[float, str | None]:
    """The largest relative difference between two sets of sections, and where it is."""
    worst, where = 0.0, None
    for section, values in found.items():
        if "error" in values:
            raise SystemExit(f"{section} failed:\n{values['error']}")
        for key, value in values.items():
            expected = golden[section][key]
            if value != expected and not (value != value and expected != expected):  # NaN equals NaN here
                difference = abs(value - expected) / max(abs(expected), 1e-12)
                if difference > worst:
                    worst, where = difference, f"{section}: {key}"
    return worst, where


def one_run(inputs: list[str], out: Path, pinned_core: bool, load: int) -> dict:
    command = [sys.executable, "-m", "tests.golden_numbers", str(out), *inputs, tempfile.mkdtemp()]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        subprocess.run(["taskset", "-c", "0", *command] if pinned_core else command, check=True, cwd=ROOT,
                       env={**os.environ, **PINNED}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        for process in busy:
            process.kill()
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per condition (default: 5)")
    parser.add_argument("--load", type=int, default=3, help="busy processes beside the loaded runs (default: 3)")
    parser.add_argument("--write", action="store_true", help="keep the result in tests/golden.json (_spread)")
    args = parser.parse_args()
    from transformers import BertModel

    work = Path(tempfile.mkdtemp(prefix="golden-spread-"))
    inputs = [str(save_tiny_bert(work / "tiny-bert", BertModel, hidden=32, layers=2)),
              str(write_tiny_cache(work / "cache" / "key")), os.environ["CSELAB_DATA_DIR"]]
    golden = json.loads(GOLDEN.read_text())
    conditions = {"one core (taskset -c 0)": (True, 0), f"beside {args.load} busy processes": (False, args.load)}
    spread = {}
    for name, (pinned_core, load) in conditions.items():
        differences = [largest_difference(one_run(inputs, work / "numbers.json", pinned_core, load), golden)
                       for _ in range(args.runs)]
        worst = max(differences)
        spread[name] = {"runs": args.runs, "largest_relative_difference": worst[0], "where": worst[1]}
        print(f"{name}: {args.runs} runs, largest relative difference from the golden file {worst[0]:.3g}"
              + (f" ({worst[1]})" if worst[1] else ""), flush=True)
    if args.write:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor())
        golden["_spread"] = {"date": date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
                             "pinned": PINNED, "conditions": spread}
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
