"""LoRA through peft (``encoder.adapter``) on a tiny random Llama: only the adapter's weights train, a run killed after
its first save resumes bit-identical, OUT/best holds the merged weights and loads in sentence-transformers,
``probe run`` and ``as_mteb`` to the same vectors, and what cannot be is refused in one line."""

import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.encoders.mteb_model import as_mteb
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.run.optim import build_optimizer
from cselab.train.run.setup import build_encoder
from tests.runs import SETTINGS, one_line_error, straight_and_resumed, without_package

LORA = "encoder.adapter={kind: lora, r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"
PREFIX = "backbone.base_model.model."
SENTENCES = ["a quick brown fox jumps over the lazy dog", "dogs run", "never trust a sentence that ends"]


def lora_args(model, cache, data_dir, out, *extra, adapter=LORA):
    return ["train", "--method", "simcse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), *SETTINGS, "--set", "training.lr=1e-2", "--set",
            "encoder.pooler=last", "--set", "encoder.head=null", "--set", adapter, *extra]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_decoders, tiny_cache, data_dir):
    """A LoRA run of 4 steps (saved at 2 and 4) and the same run killed after its save at step 2, then resumed."""
    return straight_and_resumed(tmp_path_factory.mktemp("lora"),
                                lambda out: lora_args(tiny_decoders["llama"], tiny_cache, data_dir, out))


@pytest.mark.slow
def test_only_the_adapters_weights_train_and_last_keeps_only_them(runs, tiny_decoders):
    trained = load_file(str(runs / "full" / "last" / "model.safetensors"))
    assert trained and all(name.startswith(PREFIX) and ".lora_" in name for name in trained)  # no base weight
    assert any(not torch.equal(trained[name], torch.zeros_like(trained[name])) for name in trained if "lora_B" in name)
    method = load_method("simcse", ["encoder.pooler=last", "encoder.head=null", "training.weight_decay=0.1", LORA])
    encoder, objective = build_encoder(method, str(tiny_decoders["llama"])), Objective(method)
    before = {name: tensor.clone() for name, tensor in encoder.state_dict().items()}
    optimizer = build_optimizer(encoder.named_parameters(), method.training)  # every parameter offered
    for _ in range(2):  # decay and steps of lr 3e-5 move every weight the optimizer holds
        sum(objective(encoder, {"text": SENTENCES}).values()).backward()
        optimizer.step()
        optimizer.zero_grad()
    moved = {name for name, tensor in encoder.state_dict().items() if not torch.equal(tensor, before[name])}
    assert moved and all(".lora_" in name for name in moved)


@pytest.mark.slow
def test_a_killed_run_resumes_bit_identical(runs):
    straight, resumed = (load_file(str(runs / name / "last" / "model.safetensors")) for name in ("full", "half"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)


def test_best_holds_the_merged_weights_and_loads_everywhere_alike(runs, tiny_decoders):
    best = runs / "full" / "best"
    weights = load_file(str(best / "model.safetensors"))
    assert not any(".lora_" in name or "base_model" in name for name in weights)  # a plain Llama
    ours = load_encoder(str(best), cache=False, device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(SentenceTransformer(str(best), device="cpu", trust_remote_code=True).encode(SENTENCES),
                               ours, atol=1e-6)
    mteb = as_mteb(str(best), device="cpu", cache=False)  # encoded as mteb calls a model: batches of texts
    found = mteb.encode([{"text": SENTENCES}], task_metadata=None, hf_split="test", hf_subset="default")
    np.testing.assert_allclose(found, ours, atol=1e-6)
    base = load_encoder(str(tiny_decoders["llama"]), pooler="last", cache=False, device="cpu").encode(SENTENCES)
    assert np.abs(ours - base).max() > 1e-4  # the adapter's update is in it
    assert "lora" in (best / "README.md").read_text()  # the card's config


def test_what_cannot_be_is_refused_in_one_line(runs, tiny_decoders, tiny_cache, data_dir, tmp_path, capsys,
                                               monkeypatch):
    shutil.copytree(runs / "full", tmp_path / "copy")
    assert main(lora_args(tiny_decoders["llama"], tiny_cache, data_dir, tmp_path / "copy", "--restart-from",
                          "best")) == 2
    assert "holds the adapter's weights merged into the base, which an adapter run cannot restart" in one_line_error(
        capsys)
    assert (tmp_path / "copy" / "last" / "model.safetensors").is_file()  # nothing removed
    bad = "encoder.adapter={kind: lora, target_modules: [nope]}"
    assert main(lora_args(tiny_decoders["llama"], tiny_cache, data_dir, tmp_path / "a", "--set", bad)) == 2
    assert "encoder.adapter.target_modules: " in (line := one_line_error(capsys)) and "k_proj, o_proj, q_proj" in line
    with pytest.raises(ConfigError, match="encoder.adapter: the adapter's weights alone train; a frozen or momentum"):
        load_method("sg", [LORA])
    with pytest.raises(ConfigError, match="encoder.adapter.r: 0 is out of range"):
        load_method("simcse", ["encoder.adapter={kind: lora, r: 0}"])
    without_package(monkeypatch, "peft")
    with pytest.raises(ConfigError, match="encoder.adapter: lora needs peft: pip install 'cselab-toolkit\\[llm\\]'"):
        build_encoder(load_method("simcse", ["encoder.pooler=last", "encoder.head=null", LORA]),
                      str(tiny_decoders["llama"]))


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_a_rank_no_memory_can_hold_is_refused_before_it_is_allocated(tiny_decoders, kind):
    """A rank whose factors (with gradients and Adam's states) need more than the machine's memory (1e8 on the tiny
    models: hundreds of GiB) is one line, GPT-2's Conv1D layers counted as linear ones; before peft allocates it."""
    adapter = "encoder.adapter={kind: lora, r: 100000000, target_modules: all-linear}"
    method = load_method("simcse", ["encoder.pooler=last", "encoder.head=null", adapter])
    with pytest.raises(ConfigError, match=r"encoder.adapter.r: 100000000 would take about [\d,]+ GiB for its "
                                          r"factors .* a rank beyond 32 \(its layers' full rank\) adds nothing"):
        build_encoder(method, str(tiny_decoders[kind]))
