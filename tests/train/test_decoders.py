"""Decoder LMs as backbones (Llama, Qwen2, GPT-2, OPT; tiny random ones from their configs): each pooler gives a row
in a padded batch the vector it has alone (the last token's by hand too), a tokenizer without a padding token pads
with its end token on the right, gradient checkpointing leaves the loss and gradients as they are, and a run of the
docs' decoder example (bf16, checkpointing) trains, its checkpoint loading in sentence-transformers and ``probe run``
to the same vectors."""

import json
import re
import shlex
import shutil

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.encoders.checkpoint import read_checkpoint_info
from cselab.encoders.pretrained import load_tokenizer
from cselab.errors import ConfigError, ModelError, TrainingError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.run.setup import build_encoder, checkpoint_activations
from tests.conftest import DECODERS
from tests.test_docs import example_files

SENTENCES = ["a quick brown fox jumps over the lazy dog", "dogs run", "never trust a sentence that ends"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", DECODERS)
def test_each_pooler_gives_a_row_of_a_padded_batch_its_own_vector(kind, tiny_decoders):
    folder = str(tiny_decoders[kind])
    for pooler in ("last", "avg", "weighted_mean"):
        encoder = load_encoder(folder, pooler=pooler, cache=False, device="cpu")
        batch = encoder.encode(SENTENCES)
        for row, sentence in zip(batch, SENTENCES):
            np.testing.assert_allclose(row, encoder.encode([sentence])[0], atol=2e-6)
    ids = load_tokenizer(folder)(SENTENCES[1], return_tensors="pt")["input_ids"]  # the shortest row: padded above
    with torch.no_grad():
        states = AutoModel.from_pretrained(folder).eval()(input_ids=ids).last_hidden_state[0]
    last = load_encoder(folder, pooler="last", cache=False, device="cpu").encode(SENTENCES)[1]
    np.testing.assert_allclose(last, states[-1].numpy(), atol=2e-6)


def test_a_tokenizer_without_a_padding_token_pads_with_its_end_token_on_the_right(tiny_decoders, tmp_path):
    tokenizer = load_tokenizer(str(tiny_decoders["llama"]))
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>" and tokenizer.padding_side == "right"
    shutil.copytree(tiny_decoders["llama"], tmp_path / "bare", dirs_exist_ok=True)
    tokenizer.eos_token = tokenizer.pad_token = tokenizer.bos_token = tokenizer.unk_token = None
    tokenizer.save_pretrained(tmp_path / "bare")
    with pytest.raises(ModelError, match="bare: the tokenizer has no padding token and no end-of-sequence token"):
        load_tokenizer(str(tmp_path / "bare"))
    with pytest.raises(ConfigError, match="pooler 'mask' needs a tokenizer with a mask token"):
        load_encoder(str(tiny_decoders["llama"]), pooler="mask", prompt='This : "{}" means [MASK] .', cache=False)


def loss_and_gradients(encoder, method):
    torch.manual_seed(0)
    losses = Objective(method)(encoder, {"text": SENTENCES})
    loss = sum(losses.values())
    loss.backward()
    gradients = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    encoder.zero_grad()
    return loss.detach(), gradients


def test_gradient_checkpointing_leaves_the_loss_and_gradients_as_they_are(tiny_decoders):
    method = load_method("simcse", ["encoder.pooler=last", "encoder.head=null", "training.max_length=24",
                                    "training.gradient_checkpointing=true"])
    encoder = build_encoder(method, str(tiny_decoders["gpt2"])).train()  # GPT-2's dropout is on: masks replayed
    plain = loss_and_gradients(encoder, method)
    checkpoint_activations(encoder.backbone, "gpt2")
    assert getattr(encoder.backbone, "is_activation_checkpointing", None) or encoder.backbone.is_gradient_checkpointing
    checkpointed = loss_and_gradients(encoder, method)
    torch.testing.assert_close(checkpointed[0], plain[0])
    assert checkpointed[1].keys() == plain[1].keys()
    for name, gradient in plain[1].items():
        torch.testing.assert_close(checkpointed[1][name], gradient, rtol=1e-5, atol=1e-7, msg=name)
    encoder.backbone.supports_gradient_checkpointing = False
    with pytest.raises(TrainingError, match="gradient_checkpointing: gpt2 \\(GPT2Model\\) does not support"):
        checkpoint_activations(encoder.backbone, "gpt2")


@pytest.mark.slow
@pytest.mark.parametrize("kind", DECODERS)
def test_the_docs_decoder_example_trains_and_its_checkpoint_loads_everywhere_alike(kind, tiny_decoders, tiny_cache,
                                                                                   data_dir, tmp_path):
    """train.md's decoder example (bf16, gradient checkpointing) with the tiny decoder as MODEL, two steps; its
    OUT/best in sentence-transformers and in ``probe run`` gives the same vectors."""
    script = re.sub(r"\\\n\s*", "", example_files("train.md")["decoder.sh"])
    (train, probe) = [shlex.split(line.replace("$MODEL", str(tiny_decoders[kind])).replace("runs/", f"{tmp_path}/"))
                      for line in script.splitlines() if line.startswith(("cselab ", "probe "))]
    small = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.max_steps=2",
             "--set", "training.eval_steps=2", "--data", str(tiny_cache), "--data-dir", str(data_dir),
             "--eval-limit", "20"]
    assert main([*train[1:], *small]) == 0
    best = next(tmp_path.glob("*/best"))
    assert main([*probe, "--limit", "20", "--data-dir", str(data_dir), "--no-cache",
                 "--out", str(tmp_path / "r.json")]) == 0
    ours = load_encoder(str(best), cache=False, device="cpu").encode(SENTENCES)
    theirs = SentenceTransformer(str(best), device="cpu", trust_remote_code=True).encode(SENTENCES)
    np.testing.assert_allclose(theirs, ours, atol=1e-6)


@pytest.mark.slow
def test_the_docs_decoder_methods_train_and_their_checkpoints_load_everywhere_alike(tiny_causal_llama, data_dir,
                                                                                    tmp_path):
    """train.md's PromptEOL, echo and LLM2Vec runs (two steps each, LLM2Vec's step 2 on step 1's OUT/best) with a
    tiny Llama causal LM as MODEL; each OUT/best keeps its template, pooling and attention, and encodes alike in
    sentence-transformers and cselab."""
    script = example_files("train.md")["decoder-methods.sh"]
    lines = [shlex.split(line.replace("$MODEL", str(tiny_causal_llama)).replace("runs/", f"{tmp_path}/"))
             for line in script.splitlines() if line.startswith(("cselab ", "probe "))]
    small = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.max_steps=2",
             "--set", "training.eval_steps=2", "--data-dir", str(data_dir), "--eval-limit", "20"]
    for train in lines[:-1]:
        assert main([*train[1:], *small]) == 0
    assert main([*lines[-1], "--limit", "20", "--data-dir", str(data_dir), "--no-cache",
                 "--out", str(tmp_path / "r.json")]) == 0
    expected = {"prompteol": ("last", "all", False), "echo": ("avg", "last_copy", False),
                "llm2vec-mntp": ("avg", "all", True), "llm2vec": ("avg", "all", True)}
    for name, settings in expected.items():
        best = tmp_path / name / "best"
        info = read_checkpoint_info(best / "cselab.json")
        assert (info.pooler, info.pool_tokens, info.bidirectional) == settings
        ours = load_encoder(str(best), cache=False, device="cpu").encode(SENTENCES)
        theirs = SentenceTransformer(str(best), device="cpu", trust_remote_code=True).encode(SENTENCES)
        np.testing.assert_allclose(theirs, ours, atol=1e-6)
        outside_cselab(best, info, ours)


def outside_cselab(best, info, ours):
    """What transformers and peft make of a decoder run's checkpoint: its LoRA adapter, as peft writes it, loads onto
    the base with peft's own loader to the same vectors; a bidirectional one is refused by transformers' AutoModel
    (its classes would attend causally), and its config keeps the base's dropout, not training's; the card says the
    folder holds no LM head."""
    from peft import PeftModel

    from cselab.encoders import TransformerEncoder
    from cselab.encoders.pretrained import bidirectional_checkpoint, load_model

    adapter = json.loads((best / "adapter" / "adapter_config.json").read_text())
    assert (best / "adapter" / "adapter_model.safetensors").is_file()
    base = adapter["base_model_name_or_path"]  # LLM2Vec's second step's: the first step's checkpoint, which
    # transformers refuses (bidirectional), so cselab loads that one; every other base through transformers' own class
    base = load_model(base) if bidirectional_checkpoint(base) else AutoModel.from_pretrained(base)
    model = PeftModel.from_pretrained(base, str(best / "adapter")).eval()
    theirs = TransformerEncoder(model, load_tokenizer(str(best)), pooler=info.pooler, prompt=info.prompt,
                                max_length=info.max_length, pool_tokens=info.pool_tokens,
                                bidirectional=info.bidirectional).encode(SENTENCES)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    card = (best / "README.md").read_text()
    assert "`adapter/` holds the adapter alone" in card
    # the Llama causal LM's head is not kept (LLM2Vec's second step starts from the first's checkpoint, which has none)
    assert ("LlamaForCausalLM head" in card) == (adapter["base_model_name_or_path"] != str(best.parent.parent /
                                                                                          "llm2vec-mntp" / "best"))
    config = json.loads((best / "config.json").read_text())
    if info.bidirectional:
        assert config["model_type"] == "cselab-bidirectional" and config["cselab_base_model_type"] == "llama"
        with pytest.raises(ValueError, match="cselab-bidirectional"):
            AutoModel.from_pretrained(best)
        assert config["attention_dropout"] == 0.0  # LLM2Vec trains at 0.3 (encoder.model_config)
    else:
        assert config["model_type"] == "llama" and isinstance(AutoModel.from_pretrained(best), torch.nn.Module)
