"""SimCSE's MLM auxiliary: BERT's masking and the masked-LM loss (pure functions, hand-computed), the model's own
head, refused in one line for a model without one, and a run that resumes to the straight run's weights."""

import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertForMaskedLM

from cselab.cli import main
from cselab.encoders.loading import resolve_backbone
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.plugins import functional as L
from cselab.train.run.setup import build_encoder
from tests.conftest import save_tiny_bert
from tests.runs import one_line_error, train_killed_after_first_save

MLM = ["--set", "losses.mlm.source=anchor", "--set", "losses.mlm.weight=0.1"]  # docs/train.md's


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), BertForMaskedLM, hidden=32, layers=2)


def test_masking_picks_only_maskable_tokens_and_splits_them_80_10_10():
    ids = torch.randint(5, 1000, (400, 250), generator=torch.Generator().manual_seed(0))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = False  # [CLS]
    masked, labels = L.mask_tokens(ids, maskable, 1.0, 3, 1000, torch.Generator().manual_seed(1))
    assert (labels[:, 1:] == ids[:, 1:]).all() and (labels[:, 0] == -100).all() and (masked[:, 0] == ids[:, 0]).all()
    picked = maskable.sum().item()  # 99,600 tokens: the shares' standard deviation is below 0.0013
    assert (masked == 3).sum().item() / picked == pytest.approx(0.8, abs=0.01)
    assert ((masked != 3) & (masked == ids)).sum().item() / picked == pytest.approx(0.1, abs=0.01)
    few, labels = L.mask_tokens(ids, maskable, 0.15, 3, 1000, torch.Generator().manual_seed(2))
    assert (labels != -100).sum().item() / picked == pytest.approx(0.15, abs=0.01)
    assert ((labels == -100) == (few == ids)).float().mean() > 0.98  # unpicked tokens stay as they were


def test_the_masked_lm_loss_averages_the_masked_tokens():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    labels = torch.tensor([[0, -100]])
    assert L.masked_lm(logits, labels).item() == pytest.approx(-math.log(math.e ** 2 / (math.e ** 2 + 2)))
    assert L.masked_lm(logits, torch.full_like(labels, -100)).item() == 0.0


def test_the_loss_trains_the_models_own_head_and_the_backbone(tiny_mlm_dir):
    method = load_method("simcse", ["losses.mlm.source=anchor", "losses.mlm.weight=0.1", "training.max_length=16"])
    encoder = build_encoder(method, str(tiny_mlm_dir))
    saved = load_file(str(tiny_mlm_dir / "model.safetensors"))
    assert torch.equal(encoder.lm_head.predictions.transform.dense.weight,
                       saved["cls.predictions.transform.dense.weight"])
    assert encoder.lm_head.predictions.decoder.weight is encoder.backbone.get_input_embeddings().weight
    torch.manual_seed(0)
    parts = Objective(method)(encoder, {"text": ["a man plays a guitar on the street", "the cat sleeps today",
                                                 "it rains in the city", "we walk home"]})
    assert abs(parts["mlm"].item() - math.log(30522)) < 1.0  # a random head: about uniform over the vocabulary
    parts["mlm"].backward()
    assert encoder.lm_head.predictions.transform.dense.weight.grad.abs().sum() > 0
    assert encoder.backbone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def test_a_model_without_a_masked_lm_head_is_refused_in_one_line(capsys, tmp_path, tiny_cache, data_dir):
    assert main(["train", "--method", "simcse", "--model", "minilm", "--data", str(tiny_cache), "--data-dir",
                 str(data_dir), "--out", str(tmp_path / "run"), *MLM]) == 2
    assert "has no masked-LM head weights (cls.predictions" in one_line_error(capsys)
    with pytest.raises(Exception, match="has no masked-LM head weights"):
        build_encoder(load_method("simcse", MLM[1::2]), resolve_backbone("minilm"))


@pytest.mark.slow
def test_a_resumed_mlm_run_ends_with_the_straight_runs_weights(tiny_mlm_dir, tiny_cache, data_dir, tmp_path):
    """The head is part of the training state, and the masks are drawn from the saved generators."""
    args = ["train", "--method", "simcse", "--model", str(tiny_mlm_dir), "--data", str(tiny_cache), "--data-dir",
            str(data_dir), "--set", "training.batch_size=16", "--set", "training.max_length=24", "--set",
            "training.eval_steps=2", "--set", "training.max_steps=4", "--set", "training.dev=none", *MLM]
    assert main([*args, "--out", str(tmp_path / "straight")]) == 0
    train_killed_after_first_save([*args, "--out", str(tmp_path / "resumed")])
    assert main([*args, "--out", str(tmp_path / "resumed")]) == 0
    straight, resumed = (load_file(str(tmp_path / name / "last" / "model.safetensors"))
                         for name in ("straight", "resumed"))
    assert any(key.startswith("lm_head.") for key in straight)
    assert all((straight[k] - resumed[k]).abs().max() < 1e-5 for k in straight)


def test_the_documented_setting_is_the_released_one():
    """docs/train.md's `--set losses.mlm.source=anchor --set losses.mlm.weight=0.1`: SimCSE's mlm_weight 0.1 and
    mlm_probability 0.15 (train.py)."""
    loss = load_method("simcse", MLM[1::2]).losses["mlm"]
    assert (loss["weight"], loss["probability"], loss["source"]) == (0.1, 0.15, "anchor")
