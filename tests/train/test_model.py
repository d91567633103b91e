import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from cselab.encoders import CheckpointInfo, load_encoder
from cselab.train.losses import info_nce
from cselab.train.model import TrainingEncoder, save_checkpoint

SENTENCES = ["a man plays the guitar", "two dogs run on the beach", "the market fell sharply today"]
PROMPT_A = 'This sentence : "{}" means [MASK] .'
PROMPT_B = 'This sentence of "{}" means [MASK] .'


def test_dropout_views_differ_in_training_and_gradients_reach_the_backbone(tiny_bert_dir):
    torch.manual_seed(0)
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, pooler="cls", head="mlp")
    first, second = encoder.embed(SENTENCES), encoder.embed(SENTENCES)
    assert not torch.allclose(first, second)  # two dropout masks
    info_nce(first, second).backward()
    assert encoder.backbone.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert encoder.head.dense.weight.grad.abs().sum() > 0
    encoder.eval()
    np.testing.assert_allclose(encoder.embed(SENTENCES).detach(), encoder.embed(SENTENCES).detach())


def test_prompt_views_use_the_mask_token(tiny_bert_dir):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, pooler="mask", prompt=PROMPT_A, max_length=24).eval()
    a, b = encoder.embed(SENTENCES), encoder.embed(SENTENCES, prompt=PROMPT_B)
    assert a.shape == b.shape == (3, 32) and not torch.allclose(a, b)


@pytest.mark.parametrize(("pooler", "normalize"), [("cls_before_pooler", False), ("avg", True)])
def test_checkpoint_loads_in_the_probe_and_in_sentence_transformers(tiny_bert_dir, tmp_path, pooler, normalize):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, pooler=pooler, head="mlp").eval()
    folder = save_checkpoint(tmp_path / "best", encoder, CheckpointInfo(
        pooler=pooler, max_length=32, normalize=normalize, method="simcse", base_model=str(tiny_bert_dir)))
    assert (folder / "model.safetensors").exists()
    expected = encoder.embed(SENTENCES, use_head=False).detach().numpy()
    if normalize:
        expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    probe = load_encoder(str(folder), device="cpu")
    assert (probe.pooler, probe.max_length, probe.normalize) == (pooler, 32, normalize)
    np.testing.assert_allclose(probe.encode(SENTENCES), expected, atol=1e-5)
    np.testing.assert_allclose(SentenceTransformer(str(folder), device="cpu").encode(SENTENCES), expected, atol=1e-5)


def test_prompt_checkpoint_loads_in_the_probe(tiny_bert_dir, tmp_path):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, pooler="mask", prompt=PROMPT_A).eval()
    folder = save_checkpoint(tmp_path / "best", encoder,
                             CheckpointInfo(pooler="mask", prompt=PROMPT_A, max_length=32, method="osscse"))
    assert not (folder / "modules.json").exists()  # sentence-transformers has no mask-token pooling
    np.testing.assert_allclose(load_encoder(str(folder), device="cpu").encode(SENTENCES),
                               encoder.embed(SENTENCES).detach().numpy(), atol=1e-5)
