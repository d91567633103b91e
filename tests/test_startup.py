"""The command line starts without the model libraries: ``--help``, ``--version`` and ``--list-methods`` import
none of torch, transformers, spaCy, datasets, scikit-learn or SciPy (issue 24, item 8; the CPU time is a benchmark in
benchmarks/RESULTS.md, not a test)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "spacy", "datasets", "sklearn", "scipy", "accelerate")
SCRIPT = """
import json, sys
from cselab.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(name for name in {heavy} if name in sys.modules)), file=sys.stderr)
"""


def heavy_imports(*argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY), *argv], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("train", "--list-methods"), ("probe", "run", "--help"),
                                  ("train", "--help"), ("augment", "--help"), ("sweep", "--help")])
def test_help_and_listing_import_no_model_library(argv):
    assert heavy_imports(*argv) == []


@pytest.mark.slow
def test_show_config_needs_no_model_loader():
    # the plug-ins' schemas live beside their torch code, so torch is imported; nothing else heavy is
    assert heavy_imports("train", "--method", "osscse", "--show-config") == ["torch"]
