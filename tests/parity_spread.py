"""How far cselab's official profiles and the released code part, figure by figure, across thread counts and CPU
kernel paths: ``tests/train/test_parity.py``'s comparisons run under each variation below (one setting changed at a
time from the machine's defaults), each recording its differences (loss, gradients, gradient norms, weights, their
moves) instead of asserting them; the largest per test and figure, with the variations, the CPU and the date, is the
basis of the tests' tolerances (twice it, where wider than their own: :func:`tests.train.test_parity.limits`).
With ``--execution``, the same for ``tests/train/run/test_execution.py``'s comparisons of a run with the speed levers
(merged passes, a compiled step, packed passes) against today's path (:func:`tests.train.run.test_execution.within`).
``-k EXPR`` measures only the comparisons pytest's ``-k EXPR`` selects among them; with ``--write`` their figures
replace those kept, each test's date beside it (``dates``), and the others' stay as measured.

    CSELAB_DATA_DIR=../shared/data .venv/bin/python -m tests.parity_spread [--execution] [-k EXPR] [--write]

Python 3.12 is not among the variations: torch 2.13's CPU build for it is not on this machine's disk, and PyPI's
default build for it is CUDA's (gigabytes).
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

ROOT = Path(__file__).parent.parent
#: What each measurement runs: the test file, the tests (-k), the variable naming the record file, the result's file.
TARGETS = {"parity": ("tests/train/test_parity.py", "matches_the_released", "CSELAB_PARITY_RECORD",
                      Path(__file__).parent / "train" / "parity_spread.json"),
           "execution": ("tests/train/run/test_execution.py", "trains_todays_steps or compiled_step",
                         "CSELAB_EXECUTION_RECORD", Path(__file__).parent / "train" / "run" / "execution_spread.json")}
VARIATIONS = {
    "1 thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "2 threads": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    "4 threads": {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"},
    "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ATEN_CPU_CAPABILITY=avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
}


def run(name: str, settings: dict[str, str], target: str, only: str | None = None) -> list[dict]:
    """Every comparison's differences under one variation (those ``only`` selects, a pytest ``-k`` expression)."""
    record = Path(tempfile.mkdtemp()) / "record.jsonl"
    tests, chosen, variable, _ = TARGETS[target]
    chosen = f"({chosen}) and ({only})" if only else chosen
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests, "-k", chosen], cwd=ROOT,
                   check=False, stdout=subprocess.DEVNULL, env={**os.environ, **settings, variable: str(record)})
    found = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    print(f"{name}: {len(found)} comparisons", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--execution", action="store_true", help="the speed levers' comparisons, not the parity ones")
    parser.add_argument("--write", action="store_true", help="keep the result (tests/train/parity_spread.json, or "
                        "tests/train/run/execution_spread.json)")
    parser.add_argument("-k", dest="only", help="only the comparisons this pytest -k expression selects (with "
                        "--write, the others' figures are kept)")
    args = parser.parse_args()
    target = "execution" if args.execution else "parity"
    largest: dict[str, dict[str, float]] = {}
    for name, settings in VARIATIONS.items():
        for row in run(name, settings, target, args.only):
            test = largest.setdefault(row.pop("test"), {})
            for figure, value in row.items():
                test[figure] = max(test.get(figure, 0.0), value)
    for test, figures in sorted(largest.items()):
        print(test, " ".join(f"{figure} {value:.2g}" for figure, value in figures.items()))
    if args.write:
        write(TARGETS[target][3], largest, args.only is not None)


def write(path: Path, largest: dict[str, dict[str, float]], partial: bool) -> None:
    """Keep the measured figures in ``path``, with the machine and each test's date; ``partial``: over those kept."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    kept = json.loads(path.read_text()) if partial and path.exists() else {"tests": {}}
    today = date.today().isoformat()
    dates = {**{test: kept.get("date", today) for test in kept["tests"]}, **kept.get("dates", {}),
             **{test: today for test in largest}}
    path.write_text(json.dumps({"date": today, "dates": dates, "cpu": cpu, "cores": os.cpu_count(),
                                "python": platform.python_version(), "variations": VARIATIONS,
                                "tests": {**kept["tests"], **largest}}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
