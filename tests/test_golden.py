"""The golden file: what every preset's first training steps and every probe suite give today, kept so that a
refactor of the training path or the probes (issue 24) shows any change of a number. Each preset trains three steps
of batch 16 on a tiny random BERT (CPU, seed 0, the preset's own dropout) and logs every step's loss, its parts and
the gradient norm, then one dev score (and its checkpoint must load in sentence-transformers with the vectors
``probe run`` gives); each probe suite scores a ``--limit 30`` run. All must equal
``tests/golden.json`` to 1e-6 (relative). A deliberate change regenerates the file in a commit of its own that says
why: ``CSELAB_WRITE_GOLDEN=1 pytest tests/test_golden.py``.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.encoders.checkpoint import CHECKPOINT_FILE, read_checkpoint_info
from cselab.encoders.st_module import needs_module
from cselab.train.methods import load_method, preset_names
from cselab.train.trainer import train

GOLDEN = Path(__file__).with_name("golden.json")
WRITE = os.environ.get("CSELAB_WRITE_GOLDEN") == "1"
SETTINGS = ["training.batch_size=16", "training.max_length=24", "training.max_steps=3", "training.eval_steps=3",
            "training.seed=0"]
UNTIMED = ("seconds", "_s", "wall_time")
SENTENCES = ["a man plays the guitar", "two dogs run on the beach", "the market fell sharply today"]


def _numbers(value, prefix=""):
    """Every number under ``value`` by its path, timings left out."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() if not str(key).endswith(UNTIMED)
                for k, v in _numbers(item, f"{prefix}{key}.").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _numbers(item, f"{prefix}{i}.").items()}
    if isinstance(value, bool) or not isinstance(value, int | float):
        return {}
    return {prefix[:-1]: float(value)}


def _check(section: str, found: dict[str, float]) -> None:
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if WRITE:
        golden[section] = found
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    assert section in golden, f"{section}: not in {GOLDEN.name}; write it with CSELAB_WRITE_GOLDEN=1"
    assert found.keys() == golden[section].keys()
    for key, value in golden[section].items():
        assert found[key] == pytest.approx(value, rel=1e-6, abs=1e-12, nan_ok=True), f"{section}: {key}"


@pytest.mark.parametrize("preset", preset_names())
def test_every_presets_first_steps_are_the_golden_ones_and_its_checkpoint_loads_in_sentence_transformers(
        preset, tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    method = load_method(preset, SETTINGS)
    train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", data_dir, eval_limit=20, log_every=1,
          progress=False)
    lines = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    _check(f"train/{preset}", _numbers(lines))
    best = str(tmp_path / "run" / "best")
    model = SentenceTransformer(best, device="cpu", trust_remote_code=needs_module(read_checkpoint_info(
        Path(best) / CHECKPOINT_FILE)))
    np.testing.assert_allclose(model.encode(SENTENCES), load_encoder(best, device="cpu", cache=False).encode(SENTENCES),
                               atol=1e-5)


@pytest.mark.parametrize("model", ["bow", "tiny-bert"])
def test_every_probe_suites_scores_are_the_golden_ones(model, tiny_bert_dir, data_dir, tmp_path):
    out = tmp_path / "result.json"
    spec = str(tiny_bert_dir) if model == "tiny-bert" else model
    assert main(["probe", "run", "--model", spec, "--suite", "sts,bias,transfer,geometry", "--limit", "30",
                 "--classifier", "fast", "--transfer-tasks", "CR,MRPC", "--data-dir", str(data_dir), "--no-cache",
                 "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    _check(f"probe/{model}", _numbers({suite: payload.get(suite) for suite in ("sts", "bias", "transfer",
                                                                              "geometry")}))
