import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from cselab.encoders import CheckpointInfo, load_encoder
from cselab.train.plugins.functional import info_nce
from cselab.train.model import TrainingEncoder, save_checkpoint

SENTENCES = ["a man plays the guitar", "two dogs run on the beach", "the market fell sharply today"]
PROMPT_A = 'This sentence : "{}" means [MASK] .'
PROMPT_B = 'This sentence of "{}" means [MASK] .'


def test_dropout_views_differ_in_training_and_gradients_reach_the_backbone(tiny_bert_dir):
    torch.manual_seed(0)
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler="cls", head="mlp")
    first, second = encoder.embed(SENTENCES), encoder.embed(SENTENCES)
    assert not torch.allclose(first, second)  # two dropout masks
    info_nce(first, second).backward()
    assert encoder.backbone.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert encoder.head.dense.weight.grad.abs().sum() > 0
    encoder.eval()
    np.testing.assert_allclose(encoder.embed(SENTENCES).detach(), encoder.embed(SENTENCES).detach())


def test_prompt_views_use_the_mask_token(tiny_bert_dir):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, 24, pooler="mask", prompt=PROMPT_A).eval()
    a, b = encoder.embed(SENTENCES), encoder.embed(SENTENCES, prompt=PROMPT_B)
    assert a.shape == b.shape == (3, 32) and not torch.allclose(a, b)


@pytest.mark.parametrize(("pooler", "normalize"), [("cls_before_pooler", False), ("avg", True)])
def test_checkpoint_loads_in_the_probe_and_in_sentence_transformers(tiny_bert_dir, tmp_path, pooler, normalize):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler=pooler, head="mlp").eval()
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


@pytest.mark.parametrize(("pooler", "prompt", "normalize"), [("mask", PROMPT_A, False), ("cls", None, True),
                                                             ("avg_first_last", None, False), ("avg", PROMPT_B, False),
                                                             ("last", None, False), ("weighted_mean", None, True)])
def test_every_other_checkpoint_loads_in_sentence_transformers_through_cselabs_module(tiny_bert_dir, tmp_path, pooler,
                                                                                      prompt, normalize):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, 12, pooler=pooler, prompt=prompt).eval()
    folder = save_checkpoint(tmp_path / "best", encoder, CheckpointInfo(pooler=pooler, prompt=prompt, max_length=12,
                                                                        normalize=normalize, method="osscse"))
    long = SENTENCES + ["a sentence long enough to be cut at twelve word pieces by the prompt budget of the encoder"]
    expected = encoder.embed(long, use_head=False).detach().numpy()
    if normalize:
        expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(load_encoder(str(folder), device="cpu").encode(long), expected, atol=1e-5)
    model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(model.encode(long), expected, atol=1e-5)
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(folder), device="cpu")  # sentence-transformers imports cselab's class only when told


def test_a_bert_initialised_head_has_the_backbones_spread_and_no_bias(tiny_bert_dir):
    torch.manual_seed(0)
    bert = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler="cls_before_pooler", head_init="bert",
                                           head={"kind": "projection", "inner": 4096, "output": 4096})
    first, last = bert.head[0], bert.head[2]
    assert (first.in_features, first.out_features, last.out_features) == (32, 4096, 4096)
    for layer in (first, last):  # normal(0, 0.02): BertConfig's initializer_range
        assert layer.weight.mean().abs() < 1e-3 and layer.weight.std().item() == pytest.approx(0.02, rel=0.01)
        assert not layer.bias.any()
    torch.manual_seed(0)
    default = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler="cls_before_pooler", head="mlp",
                                             head_init="torch").head.dense
    bound = 1 / 32 ** 0.5  # torch's Linear: uniform(+-1/sqrt(fan_in)) weights and biases
    assert default.weight.abs().max() <= bound and default.weight.std().item() == pytest.approx(bound / 3 ** 0.5,
                                                                                                   rel=0.1)
    assert default.bias.abs().max() > 0.02
    output = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler="cls_before_pooler",
                                             head={"kind": "projection"}).head[2].out_features
    assert output == 32  # output null: the backbone's width


@pytest.mark.parametrize(("mode", "differ"), [("eval", False), ("train", True)])
def test_the_frozen_copy_has_dropout_only_in_train_mode(tiny_bert_dir, mode, differ):
    torch.manual_seed(0)
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler="cls_before_pooler", frozen="float32",
                                              frozen_mode=mode)
    first, second = (encoder.embed(SENTENCES, frozen=True) for _ in range(2))
    assert (not torch.equal(first, second)) is differ and not first.requires_grad
    encoder.eval()  # at evaluation no view has dropout
    assert torch.equal(encoder.embed(SENTENCES, frozen=True), encoder.embed(SENTENCES, frozen=True))


@pytest.mark.parametrize(("pooler", "trained"), [("cls_before_pooler", False), ("avg", False), ("cls", True)])
def test_the_backbones_pooler_layer_is_frozen_unless_it_pools(tiny_bert_dir, pooler, trained):
    """BERT's dense + tanh pooler trains only where it makes the sentence vector (pooler cls); elsewhere it is in no
    loss, and frozen it takes no weight decay either (SG-BERT's released AdamW decays it: a ledger row)."""
    encoder = TrainingEncoder.from_pretrained(str(tiny_bert_dir), 16, pooler=pooler)
    assert all(p.requires_grad is trained for p in encoder.backbone.pooler.parameters())


def test_template_denoising_subtracts_the_templates_mask_state_at_the_sentences_positions(tiny_bert_dir):
    """By hand: a row's [MASK] state less the [MASK] state of its template encoded alone, the tokens after the
    sentence at the position ids they have in the row (moved on by the sentence's word-pieces), every token attending
    every other (transformers 5.25 reads a jump of the position ids without a mask as two packed sequences)."""
    from transformers import AutoModel, AutoTokenizer

    from cselab.encoders.transformer import TransformerEncoder

    model, tokenizer = AutoModel.from_pretrained(tiny_bert_dir).eval(), AutoTokenizer.from_pretrained(tiny_bert_dir)
    plain = TransformerEncoder(model, tokenizer, pooler="mask", prompt=PROMPT_B)
    denoised = TransformerEncoder(model, tokenizer, pooler="mask", prompt=PROMPT_B, denoise=True)
    ids, mask = plain.pad(plain.tokenize(SENTENCES))
    template = tokenizer(PROMPT_B.replace("{}", "").replace("[MASK]", tokenizer.mask_token))["input_ids"]
    with torch.no_grad():
        expected = []
        for row, length in zip(plain.forward_batch(ids, mask), mask.sum(1) - len(template)):
            positions = torch.arange(len(template))
            positions[5:] += length  # [CLS] this sentence of " | the template's tokens after the sentence
            alone = model(input_ids=torch.tensor([template]), attention_mask=torch.ones(1, len(template)),
                          position_ids=positions.unsqueeze(0)).last_hidden_state
            expected.append(row - alone[0, template.index(tokenizer.mask_token_id)])
        torch.testing.assert_close(denoised.forward_batch(ids, mask), torch.stack(expected), rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="denoise: template denoising .* it needs pooler mask and a prompt"):
        TransformerEncoder(model, tokenizer, pooler="avg", denoise=True)
