import pytest
import torch

from cselab.cli import main
from cselab.encoders.pooling import pool_states
from cselab.train.config.methods import load_method, preset_names
from cselab.train.model import TrainingEncoder
from cselab.train.objective import Objective
from cselab.train.run.setup import build_encoder, initial_weights
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train
from tests.runs import base_for, data_for, models_for
from tests.train.run.test_trainer import with_loss_setting

ROWS = {"text": ["a man plays the guitar", "two dogs run on the beach", "the market fell sharply today"],
        "paraphrase": ["a guitar is played by a man", None, "stocks dropped a lot today"],
        "negation": ["a man does not play the guitar", "two dogs do not run", None]}


def test_sscl_adds_one_negative_column_per_row_and_layer_from_the_same_pass(tiny_bert_dir):
    torch.manual_seed(0)
    method = load_method("sscl-simcse", ["views.anchor.layers=[-2,-3]"])  # progressive SSCL: two layers
    encoder = build_encoder(method, str(tiny_bert_dir)).eval()  # no dropout: the pass can be replayed
    encoded = Objective(method).encode(encoder, ROWS)
    final, layers = encoded["anchor"][0], encoded["anchor.layers"][0]
    assert final.shape == (3, 32) and layers.shape == (3, 2, 32)
    ids, mask = encoder.tokenize(ROWS["text"])
    hidden = encoder.backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    torch.testing.assert_close(layers[:, 0], pool_states(hidden[-2], mask, "first"))  # eval: no head applied
    # in training the same head is applied to the layer vectors as to the last layer's
    encoder.train()
    torch.manual_seed(0)
    objective = Objective(with_loss_setting(method, "info_nce", temperature=1.0))
    with_negatives = objective.losses_on(objective.encode(encoder, ROWS))["info_nce"]
    assert with_negatives.requires_grad
    # the loss is InfoNCE over 3 positives + 6 layer columns: recompute it from the views
    torch.manual_seed(0)
    encoded = objective.encode(encoder, ROWS)
    from cselab.train.plugins.functional import info_nce
    expected = info_nce(encoded["anchor"][0], encoded["positive"][0], 1.0, encoded["anchor.layers"][0].flatten(0, 1))
    torch.testing.assert_close(with_negatives, expected)


def test_dropout_views_of_one_column_share_one_forward_pass_of_their_rows_repeated(tiny_bert_dir):
    """SimCSE's two views are one pass of 2N rows, as in its released code; each copy draws its own dropout masks, and
    without dropout each view is the rows' own vectors. A view with an input augment or another prompt or layers
    has a pass of its own."""
    method = load_method("simcse")
    objective = Objective(method)
    assert {name: [v.name for v in views] for name, views in objective.shared_pass.items()} == \
        {"anchor": ["anchor", "positive"], "positive": ["positive", "anchor"]}
    for preset in ("input-noise", "osscse", "sscl-simcse", "sg"):
        assert all(len(views) == 1 for views in Objective(load_method(preset)).shared_pass.values()), preset
    encoder = build_encoder(method, str(tiny_bert_dir))
    shapes = []
    encoder.backbone.register_forward_pre_hook(lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
                                               with_kwargs=True)
    ids, mask = encoder.tokenize(ROWS["text"])
    torch.manual_seed(0)
    encoded = objective.encode(encoder.train(), ROWS)
    assert shapes == [(6, ids.shape[1])]
    assert encoded["anchor"][1] == encoded["positive"][1] == [0, 1, 2]
    assert not torch.allclose(encoded["anchor"][0], encoded["positive"][0])  # other dropout masks
    encoded = objective.encode(encoder.eval(), ROWS)
    alone = encoder(ids, mask)
    torch.testing.assert_close(encoded["anchor"][0], alone)
    torch.testing.assert_close(encoded["positive"][0], alone)


def test_sscl_negatives_carry_gradient_below_layer_m_only(tiny_bert_dir):
    encoder = TrainingEncoder.from_pretrained(tiny_bert_dir, 32, pooler="cls_before_pooler")
    _, layers = encoder.embed(ROWS["text"], layers=[-2])  # 2-layer BERT: hidden state -2 is layer 1's output
    (layers * torch.randn_like(layers)).sum().backward()  # (a plain sum of LayerNorm outputs has no gradient)
    assert encoder.backbone.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0
    assert encoder.backbone.encoder.layer[1].output.dense.weight.grad is None


@pytest.mark.slow
def test_frozen_copy_gives_layer_views_without_gradient_and_stays_put(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    method = load_method("sg-opt")
    encoder = build_encoder(method, str(tiny_bert_dir))
    assert encoder.frozen is not None and not any(p.requires_grad for p in encoder.frozen.parameters())
    assert not any(name.startswith("frozen") for name, _ in encoder.named_parameters())  # not trained, not saved
    assert not any(p.requires_grad for p in encoder.backbone.embeddings.parameters())  # layer 0 frozen
    assert initial_weights(encoder)[0] is next(encoder.frozen.parameters())  # no third copy for the regularizer
    objective = Objective(method)
    encoded = objective.encode(encoder, ROWS)
    assert encoded["guide.layers"][0].shape == (3, 3, 4096)  # embeddings + 2 layers, max pooled, through the head
    before = [p.clone() for p in encoder.frozen.parameters()]
    objective.losses_on(encoded, lambda: (list(encoder.backbone.parameters()), initial_weights(encoder))
                        )["sg_opt"].backward()
    assert encoder.head[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in encoder.frozen.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, encoder.frozen.parameters(), strict=True))
    half = build_encoder(load_method("sg", ["encoder.frozen=bfloat16"]), str(tiny_bert_dir))
    assert next(half.frozen.parameters()).dtype == torch.bfloat16
    assert objective.encode(half, ROWS)["guide.layers"][0].dtype == torch.float32


@pytest.mark.slow
@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_trains_a_few_steps(preset, tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    base, overrides = base_for(preset, tiny_bert_dir, tmp_path)
    method = load_method(preset, ["training.batch_size=16", "training.max_length=24", "training.lr=1e-4",
                                  "training.max_steps=2", "training.eval_steps=2", *models_for(preset, tmp_path),
                                  *overrides])
    summary = train(method, base, data_for(preset, tiny_cache), tmp_path / "run", RunOptions(data_dir=data_dir,
                    eval_limit=20, progress=False))
    assert summary["steps"] == 2 and (tmp_path / "run" / "best" / "model.safetensors").exists()


def test_composition_profiles_and_removal():
    assert load_method("osscse+byop-c").losses["info_nce"] == {
        **load_method("osscse").losses["info_nce"],
        "transform": {"kind": "perturb", "pattern": "n-", "margin": 0.01}, "multitask": False}
    assert load_method("osscse+byop-c").name == "osscse+byop-c"
    large = load_method("byop-c-m", profile="roberta-large")
    assert (large.training.batch_size, large.training.lr) == (256, 3e-5)
    assert large.losses["info_nce"]["transform"] == {"kind": "perturb", "pattern": "p+n-", "margin": 0.02}
    assert set(load_method("sg-opt").losses) == {"sg_opt", "recall"}  # `nt_xent: null` removed SG's loss
    with pytest.raises(ValueError, match="no profile 'gpt'; profiles: minilm, official, bert-base, bert-large, "):
        load_method("byop-d", profile="gpt")
    with pytest.raises(ValueError, match="transform.pattern: 'p\\+\\+' is not allowed; expected one of p\\+, p-"):
        load_method("byop-c", ["losses.info_nce.transform.pattern=p++"])
    with pytest.raises(ValueError, match="negatives: 'anchor.layers' is not a view; views: anchor, positive"):
        load_method("simcse", ['losses.info_nce.negatives=["anchor.layers"]'])


def test_list_methods_has_one_line_per_preset(capsys):
    assert main(["train", "--list-methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == preset_names()
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)


def test_set_reads_yaml_words_as_strings_and_json_as_values():
    config = load_method("simcse", ["training.mixed_precision=no", "training.lr=1e-5", "encoder.head=null",
                                    "training.adam_betas=[0.9, 0.98]"])
    assert config.training.mixed_precision == "no"  # not YAML 1.1's False
    assert config.training.lr == 1e-5 and config.encoder.head is None and "head" not in config.to_dict()["encoder"]
    assert config.training.adam_betas == [0.9, 0.98]
