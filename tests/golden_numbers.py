"""The numbers the golden file keeps, computed in a process of their own whose numerical libraries are pinned
(:data:`PINNED`): one thread each, and the same kernels on every x86-64 CPU with AVX2. Unpinned, two CPUs (or one CPU
with another thread count) sum in other orders, and a figure that ranks near-tied cosines (Spearman's rho of a tiny
random BERT, of bag-of-words vectors after PCA) moves by up to 2e-3 (relative): more than the golden check must
catch. ``tests/test_golden.py`` runs it; ``tests/golden_spread.py`` measures its spread.

    python -m tests.golden_numbers OUT.json TINY_BERT TINY_CACHE DATA_DIR RUNS [SECTION ...]

writes ``{section: {path: number}}`` (or ``{"error": traceback}`` for a section that failed) for every section
(``train/PRESET``, ``probe/bow``, ``probe/tiny-bert``) or the ones named; each preset's run folder is left in
``RUNS/PRESET``. A ``TINY_BERT`` folder that does not exist yet is built here, under the pins: its random weights are
drawn by kernels too (``ATEN_CPU_CAPABILITY=default`` draws other ones than AVX2 and AVX-512, which agree).
"""

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

PINNED = {  # threads, and kernels every x86-64 CPU with AVX2 has: MKL (torch), OpenBLAS (NumPy, SciPy), ATen, NumPy
    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_CBWR": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
    "OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}
#: the environment variable naming the PINNED settings a run of tests/golden_spread.py changes on purpose
VARIED = "CSELAB_GOLDEN_VARIED"
SETTINGS = ["training.batch_size=16", "training.max_length=24", "training.max_steps=3", "training.eval_steps=3",
            "training.seed=0"]
UNTIMED = ("seconds", "_s", "wall_time")
PROBE_MODELS = ("bow", "tiny-bert")


def numbers(value, prefix=""):
    """Every number under ``value`` by its path, timings left out."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() if not str(key).endswith(UNTIMED)
                for k, v in numbers(item, f"{prefix}{key}.").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in numbers(item, f"{prefix}{i}.").items()}
    if isinstance(value, bool) or not isinstance(value, int | float):
        return {}
    return {prefix[:-1]: float(value)}


def train_numbers(preset: str, tiny_bert: str, cache: str, data_dir: str, out: Path) -> dict[str, float]:
    """Every logged figure of three steps of ``preset`` on the tiny BERT (and its one dev score)."""
    from cselab.train.config.methods import load_method
    from cselab.train.run.options import RunOptions
    from cselab.train.recipe import train
    from tests.runs import base_for, data_for, models_for

    base, overrides = base_for(preset, tiny_bert, out.parent)
    train(load_method(preset, [*SETTINGS, *models_for(preset, out.parent), *overrides]), base, data_for(preset, cache),
          out, RunOptions(data_dir=data_dir, eval_limit=20, log_every=1, progress=False))
    return numbers([json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()])


def probe_numbers(model: str, tiny_bert: str, data_dir: str) -> dict[str, float]:
    """Every figure of the sts, bias, transfer and geometry suites (``--limit 30``) of ``bow`` or the tiny BERT."""
    from cselab.cli import main

    out = Path(tempfile.mkdtemp()) / "result.json"
    spec = tiny_bert if model == "tiny-bert" else model
    assert main(["probe", "run", "--model", spec, "--suite", "sts,bias,transfer,geometry", "--limit", "30",
                 "--classifier", "fast", "--transfer-tasks", "CR,MRPC", "--data-dir", data_dir, "--no-cache",
                 "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    return numbers({suite: payload.get(suite) for suite in ("sts", "bias", "transfer", "geometry")})


def sections() -> list[str]:
    from cselab.train.config.methods import preset_names

    return [*(f"train/{preset}" for preset in preset_names()), *(f"probe/{model}" for model in PROBE_MODELS)]


def main(argv: list[str]) -> None:
    varied = os.environ.get(VARIED, "").split(",")  # what golden_spread.py changes on purpose
    unpinned = [name for name, value in PINNED.items() if os.environ.get(name) != value and name not in varied]
    if unpinned:
        raise SystemExit(f"set {', '.join(unpinned)} as tests/golden_numbers.py's PINNED says, before Python starts")
    out, tiny_bert, cache, data_dir, runs, *wanted = argv
    if not Path(tiny_bert).exists():
        from transformers import BertModel

        from tests.conftest import save_tiny_bert

        save_tiny_bert(Path(tiny_bert), BertModel, hidden=32, layers=2)
    found = {}
    for section in wanted or sections():
        kind, name = section.split("/", 1)
        try:
            found[section] = (train_numbers(name, tiny_bert, cache, data_dir, Path(runs) / name) if kind == "train"
                              else probe_numbers(name, tiny_bert, data_dir))
        except Exception:  # the test of that section fails with it; the others are still compared
            found[section] = {"error": traceback.format_exc()}
    Path(out).write_text(json.dumps(found))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1:])
