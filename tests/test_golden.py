"""The golden file: what every preset's first training steps and every probe suite give today, kept so that a
refactor of the training path or the probes shows any change of a number. Each preset trains three steps of batch
16 on a tiny random BERT (CPU, seed 0, the preset's own dropout) and logs every step's loss, its parts and the
gradient norm, then one dev score (and its checkpoint must load in sentence-transformers with the vectors ``probe
run`` gives); each probe suite scores a ``--limit 30`` run.

The numbers are computed in a process whose numerical libraries are pinned to one thread and to the same kernels on
every x86-64 CPU with AVX2 (``tests/golden_numbers.py``): unpinned, thread counts and CPUs move rank-based figures by
up to 2e-3. Pinned, repeated runs on one machine give the same bits, but another CPU still moves a figure whose
rounding its computation amplifies (PromptBERT's denoising subtracts two nearly equal vectors: a gradient norm moved
by 2e-6 on another AMD EPYC). ``tests/golden_spread.py`` measures, per section, the largest difference from the
golden file in repeated and loaded runs and at other thread counts (another order of the same kernels' sums, as
another CPU's; ``_spread`` in the golden file: its CPU, date and conditions, and the kernel paths the pins hold off):
a section's numbers must equal ``tests/golden.json``'s to :data:`RELATIVE` or twice its measured spread, whichever is
wider (:func:`tolerance`), and every tolerance stays below the 1e-4 change the check must catch (a test plants one).
A deliberate change regenerates the file in a commit of its own that says why:
``CSELAB_WRITE_GOLDEN=1 pytest tests/test_golden.py``.
"""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from cselab.encoders import load_encoder
from cselab.encoders.checkpoint import CHECKPOINT_FILE, needs_module, read_checkpoint_info
from cselab.train.config.methods import preset_names
from tests.golden_numbers import PINNED, PROBE_MODELS

pytestmark = pytest.mark.slow  # its numbers are those of every preset's training steps

GOLDEN = Path(__file__).with_name("golden.json")
WRITE = os.environ.get("CSELAB_WRITE_GOLDEN") == "1"
RELATIVE = 1e-6
SENTENCES = ["a man plays the guitar", "two dogs run on the beach", "the market fell sharply today"]


def _pinnable() -> bool:
    """x86-64 with AVX2: the kernels :data:`PINNED` names exist."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module")
def computed(tmp_path_factory, tiny_cache, data_dir):
    """Every section's numbers (tests/golden_numbers.py, pinned, the tiny BERT built there too), and the folder of each
    preset's run."""
    if not _pinnable():
        pytest.skip("the golden numbers are those of x86-64 kernels with AVX2, which this machine lacks")
    folder = tmp_path_factory.mktemp("golden")
    out, runs = folder / "numbers.json", folder / "runs"
    ran = subprocess.run([sys.executable, "-m", "tests.golden_numbers", str(out), str(folder / "tiny-bert"),
                          str(tiny_cache), str(data_dir), str(runs)], env={**os.environ, **PINNED}, capture_output=True,
                         text=True,
                         cwd=Path(__file__).parent.parent, timeout=1800)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(out.read_text()), runs


def tolerance(section: str, golden: dict) -> float:
    """``section``'s relative tolerance: :data:`RELATIVE`, or twice the spread measured for it in repeated runs and
    across thread counts (``_spread.sections``), whichever is wider."""
    return max(RELATIVE, 2 * golden.get("_spread", {}).get("sections", {}).get(section, 0.0))


def check(section: str, found: dict[str, float], golden: dict) -> None:
    """``found`` equals the golden numbers of ``section`` to its :func:`tolerance`."""
    assert "error" not in found, found.get("error")
    assert section in golden, f"{section}: not in {GOLDEN.name}; write it with CSELAB_WRITE_GOLDEN=1"
    assert found.keys() == golden[section].keys()
    relative = tolerance(section, golden)
    for key, value in golden[section].items():
        assert found[key] == pytest.approx(value, rel=relative, abs=1e-12, nan_ok=True), f"{section}: {key}"


def _compare(section: str, computed) -> None:
    found = computed[0][section]
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if WRITE:
        assert "error" not in found, found.get("error")
        golden[section] = found
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    check(section, found, golden)


@pytest.mark.parametrize("preset", preset_names())
def test_every_presets_first_steps_are_the_golden_ones_and_its_checkpoint_loads_in_sentence_transformers(
        preset, computed):
    _compare(f"train/{preset}", computed)
    best = computed[1] / preset / "best"
    model = SentenceTransformer(str(best), device="cpu", trust_remote_code=needs_module(read_checkpoint_info(
        best / CHECKPOINT_FILE)))
    np.testing.assert_allclose(model.encode(SENTENCES), load_encoder(str(best), device="cpu", cache=False).encode(
        SENTENCES), atol=1e-5)


@pytest.mark.parametrize("model", PROBE_MODELS)
def test_every_probe_suites_scores_are_the_golden_ones(model, computed):
    _compare(f"probe/{model}", computed)


def test_a_planted_change_of_1e_4_fails_the_check():
    golden = json.loads(GOLDEN.read_text())
    assert all(tolerance(section, golden) < 1e-4 for section in golden if not section.startswith("_"))
    for section in ("train/osscse", "probe/tiny-bert"):
        found = dict(golden[section])
        check(section, found, golden)
        key = next(k for k, v in found.items() if v)
        found[key] *= 1 + 1e-4
        with pytest.raises(AssertionError, match=key.replace(".", r"\.")):
            check(section, found, golden)
