"""QLoRA (``encoder.adapter.quantize``): LoRA over a base whose linear layers load in 4 bits through bitsandbytes, on
a random Llama 64 wide (bitsandbytes' CPU kernels take rows of 64). Only the adapter trains, a killed run resumes
bit-identical, OUT/best is a plain model (the 4-bit weights dequantized, the update merged in) that loads in
sentence-transformers, ``probe run`` and ``as_mteb`` to the same vectors, and the merge is the trained model."""

import copy
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer

from cselab.encoders import load_encoder
from cselab.encoders.mteb_model import as_mteb
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.run.setup import build_encoder
from tests.conftest import save_tiny_decoder
from tests.runs import straight_and_resumed, without_package
from tests.train.test_lora import lora_args

QLORA = "encoder.adapter={kind: lora, r: 4, alpha: 8, target_modules: [q_proj, v_proj], quantize: nf4}"
SENTENCES = ["a quick brown fox jumps over the lazy dog", "dogs run", "never trust a sentence that ends"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny_decoder(tmp_path_factory.mktemp("llama-64"), "llama", hidden=64)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, llama, tiny_cache, data_dir):
    """A QLoRA run of 4 steps (saved at 2 and 4), and the same run killed after its save at step 2, then resumed."""
    return straight_and_resumed(tmp_path_factory.mktemp("qlora"),
                                lambda out: lora_args(llama, tiny_cache, data_dir, out, adapter=QLORA))


def with_random_update(method, model):
    """The training encoder of ``method`` with every LoRA B drawn at random (B starts at 0: no update to merge) and
    no dropout (GPT-2's config has some)."""
    encoder = build_encoder(method, str(model))
    torch.manual_seed(1)
    for name, parameter in encoder.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.5)
    for module in encoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return encoder


@pytest.mark.slow
def test_only_the_adapter_trains_over_the_4bit_base(runs, llama):
    from bitsandbytes.nn import Linear4bit

    trained = load_file(str(runs / "full" / "last" / "model.safetensors"))
    assert trained and all(".lora_" in name for name in trained)  # the 4-bit base is the base model's, not saved
    encoder = build_encoder(load_method("simcse", ["encoder.pooler=last", "encoder.head=null", QLORA]), str(llama))
    layers = encoder.backbone.get_base_model().layers[0]
    assert isinstance(layers.self_attn.q_proj.base_layer, Linear4bit) and isinstance(layers.mlp.up_proj, Linear4bit)
    assert {name for name, p in encoder.named_parameters() if p.requires_grad} == {
        name for name, _ in encoder.named_parameters() if ".lora_" in name}


@pytest.mark.slow
def test_a_killed_run_resumes_bit_identical(runs):
    straight, resumed = (load_file(str(runs / name / "last" / "model.safetensors")) for name in ("full", "half"))
    assert straight.keys() == resumed.keys() and all(torch.equal(straight[name], resumed[name]) for name in straight)


@pytest.mark.slow
def test_best_is_a_plain_model_that_loads_everywhere_alike(runs):
    best = runs / "full" / "best"
    config = json.loads((best / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"  # compute_dtype's
    assert not any(".lora_" in name or "absmax" in name for name in load_file(str(best / "model.safetensors")))
    ours = load_encoder(str(best), cache=False, device="cpu").encode(SENTENCES)
    theirs = SentenceTransformer(str(best), device="cpu", trust_remote_code=True).encode(SENTENCES)
    np.testing.assert_allclose(theirs, ours, atol=1e-6)
    mteb = as_mteb(str(best), device="cpu", cache=False)
    found = mteb.encode([{"text": SENTENCES}], task_metadata=None, hf_split="test", hf_subset="default")
    np.testing.assert_allclose(found, ours, atol=1e-6)


@pytest.mark.parametrize(("kind", "unquantized"), [("llama", "o_proj"), ("gpt2", "c_proj")])  # GPT-2's Conv1D
def test_the_checkpoint_is_the_trained_4bit_model(kind, unquantized, tmp_path, monkeypatch):  # load transposed
    """With float32 compute and no dropout, the merged checkpoint encodes as the 4-bit model with its update does in
    training (dequantize, matmul) within 1e-5 of the vectors' size; peft's own merge, which quantizes the sum again, or
    the base without the update are far off. Every linear layer has an update (all-linear), some of them over layers
    left unquantized (as transformers leaves some a model names)."""
    from transformers import BitsAndBytesConfig

    from cselab.train.plugins.adapters import LoRA

    options = LoRA.load_options
    monkeypatch.setattr(LoRA, "load_options", lambda self: {**options(self), "quantization_config": BitsAndBytesConfig(
        **{**options(self)["quantization_config"].to_dict(), "llm_int8_skip_modules": [unquantized]})})
    model = save_tiny_decoder(tmp_path / kind, kind, hidden=64)
    method = load_method("simcse", ["encoder.pooler=last", "encoder.head=null", QLORA,
                                    "encoder.adapter.target_modules=all-linear",
                                    "encoder.adapter.compute_dtype=float32", "encoder.adapter.dropout=0.0"])
    encoder = with_random_update(method, model).train()
    kept = {type(m.get_base_layer()).__name__ for n, m in encoder.named_modules() if n.endswith(f".{unquantized}")}
    assert kept and "Linear4bit" not in kept  # adapted over a layer in full precision
    trained = encoder.embed(SENTENCES).detach().numpy()
    scale = np.abs(trained).max()
    assert np.abs(encoder.checkpoint_view().encode(SENTENCES) - trained).max() <= 1e-5 * scale  # 1.3e-6 measured
    requantized = copy.copy(encoder.view)
    requantized.model = copy.deepcopy(encoder.backbone).merge_and_unload()
    base = copy.copy(encoder.view)
    base.model = copy.deepcopy(encoder.backbone).unload()
    for other in (requantized, base):
        assert np.abs(other.encode(SENTENCES) - trained).max() > 1e-3 * scale


def test_what_cannot_be_is_refused_in_one_line(llama, monkeypatch):
    with pytest.raises(ConfigError, match=r"encoder.adapter.double_quant: set, and it acts only on a quantized base"):
        load_method("simcse", ["encoder.adapter={kind: lora, double_quant: false}"])
    with pytest.raises(ConfigError, match=r"encoder.adapter.quantize: 'nf8' is not allowed; expected one of nf4, fp4"):
        load_method("simcse", ["encoder.adapter={kind: lora, quantize: nf8}"])
    without_package(monkeypatch, "bitsandbytes")
    with pytest.raises(ConfigError, match=r"encoder.adapter.quantize: 4-bit loading needs bitsandbytes: pip install "):
        build_encoder(load_method("simcse", ["encoder.pooler=last", "encoder.head=null", QLORA]), str(llama))
