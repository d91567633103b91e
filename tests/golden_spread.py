"""How much the golden numbers move: ``tests/golden_numbers.py`` (pinned) run N times on one core (``taskset -c
0``) and N times beside a load of busy processes, once at each other thread count (:data:`THREADS`), and once under
each other kernel path (:data:`KERNEL_PATHS`), one pinned setting changed at a time, every number compared with the
golden file's.

    CSELAB_DATA_DIR=../shared/data .venv/bin/python -m tests.golden_spread [--runs 5] [--load 3] [--write]

prints the largest relative difference per condition and, with ``--write``, keeps each condition's per section in
``tests/golden.json`` under ``_spread``. The basis of ``tests/test_golden.py``'s tolerance (a section's is twice its
largest difference, where wider than 1e-6) is the repeated, loaded and thread-count runs: the golden process pins its
kernel paths on every AVX2 CPU, so another machine differs from this one in the order its kernels sum in (which the
thread counts change) and not in the kernels themselves; the kernel paths' differences are kept beside, to show what
the pins hold off (RankCSE's ranking of near-tied teacher scores moves by 1.7e-2 under them). Takes about 2.5 minutes
a run.
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

from tests.conftest import write_tiny_cache
from tests.golden_numbers import PINNED, VARIED

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).with_name("golden.json")


#: Thread counts other than the pinned one: another order of the kernels' sums (part of the tolerance's basis).
THREADS = {
    "2 threads": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    "4 threads": {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"},
}
#: Kernel paths other than the pinned ones, which the golden process never takes (measured and kept, not the basis).
KERNEL_PATHS = {
    "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
    "ATEN_CPU_CAPABILITY=avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS": ""},
}


def differences(found: dict, golden: dict) -> dict[str, tuple[float, str | None]]:
    """Each section's largest relative difference from the golden file's numbers, and where it is."""
    result = {}
    for section, values in found.items():
        if "error" in values:
            raise SystemExit(f"{section} failed:\n{values['error']}")
        worst, where = 0.0, None
        for key, value in values.items():
            expected = golden[section][key]
            if value != expected and not (value != value and expected != expected):  # NaN equals NaN here
                difference = abs(value - expected) / max(abs(expected), 1e-12)
                if difference > worst:
                    worst, where = difference, key
        result[section] = (worst, where)
    return result


def one_run(inputs: list[str], out: Path, pinned_core: bool, load: int, settings: dict | None = None) -> dict:
    tiny_bert = Path(tempfile.mkdtemp()) / "tiny-bert"  # built by the run, under its settings
    command = [sys.executable, "-m", "tests.golden_numbers", str(out), str(tiny_bert), *inputs, tempfile.mkdtemp()]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    env = {**os.environ, **PINNED, **(settings or {}), VARIED: ",".join(settings or {})}
    try:
        subprocess.run(["taskset", "-c", "0", *command] if pinned_core else command, check=True, cwd=ROOT,
                       env={key: value for key, value in env.items() if value}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
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

    work = Path(tempfile.mkdtemp(prefix="golden-spread-"))
    inputs = [str(write_tiny_cache(work / "cache" / "key")), os.environ["CSELAB_DATA_DIR"]]
    golden = json.loads(GOLDEN.read_text())
    conditions = {"one core (taskset -c 0)": (True, 0, args.runs, None),
                  f"beside {args.load} busy processes": (False, args.load, args.runs, None),
                  **{name: (False, 0, 1, settings) for name, settings in {**THREADS, **KERNEL_PATHS}.items()}}
    spread, basis = {}, {}
    for name, (pinned_core, load, runs, settings) in conditions.items():
        found = [differences(one_run(inputs, work / "numbers.json", pinned_core, load, settings), golden)
                 for _ in range(runs)]
        sections = {section: max(each[section][0] for each in found) for section in found[0]}
        if name not in KERNEL_PATHS:
            basis = {section: max(basis.get(section, 0.0), value) for section, value in sections.items()}
        worst = max(((value, f"{section}: {key}") for each in found for section, (value, key) in each.items()),
                    default=(0.0, None))
        worst = worst if worst[0] else (0.0, None)
        spread[name] = {"runs": runs, "largest_relative_difference": worst[0], "where": worst[1],
                        "basis": name not in KERNEL_PATHS, "sections": {k: v for k, v in sorted(sections.items()) if v}}
        print(f"{name}: {runs} run(s), largest relative difference from the golden file {worst[0]:.3g}"
              + (f" ({worst[1]})" if worst[1] else ""), flush=True)
    if args.write:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor())
        golden["_spread"] = {"date": date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
                             "python": platform.python_version(), "pinned": PINNED, "threads": THREADS,
                             "kernel_paths": KERNEL_PATHS, "conditions": spread,
                             "sections": {k: v for k, v in sorted(basis.items()) if v}}
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
