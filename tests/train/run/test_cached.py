"""Cached InfoNCE (training.mini_batch_size): the whole batch's loss and gradient, one mini-batch's activations at a
time, dropout masks replayed; what cannot be cached is refused when the config loads."""

import json
import os

import pytest
import torch

from cselab.cli import main
from cselab.encoders.loading import resolve_backbone
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.step import Step
from cselab.train.step.cached import mini_batch
from cselab.train.run.setup import build_encoder, initial_weights

ROWS = {"text": [f"sentence number {i} about topic {i % 7} and some more words {'so ' * (i % 5)}" for i in range(10)],
        "paraphrase": [f"about topic {i % 7}, sentence {i}" for i in range(10)],
        "negation": [f"sentence number {i} is not about topic {i % 7}" for i in range(10)],
        "text_pair": [f"a sentence on topic {i % 3}" for i in range(10)], "score": [float(i % 6) for i in range(10)]}


def minilm(tmp_path, dropout: bool):
    """The packaged MiniLM (its files linked), with dropout off unless ``dropout``."""
    source, folder = resolve_backbone("minilm"), tmp_path / "minilm"
    folder.mkdir()
    for name in os.listdir(source):
        if name != "config.json":
            os.symlink(os.path.join(source, name), folder / name)
    config = json.loads(open(os.path.join(source, "config.json")).read())
    if not dropout:
        config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def gradients(preset: str, model: str, mini: int | None, reference: bool = False, packed: bool = False):
    method = load_method(preset, ["training.max_length=24"], profile="minilm")
    torch.manual_seed(0)
    encoder, objective = build_encoder(method, model), Objective(method)
    encoder.packing = packed  # (training.packing)
    initial = initial_weights(encoder) if objective.needs_initial_weights else None
    weights = (lambda: (list(encoder.backbone.parameters()), initial)) if initial is not None else None
    torch.manual_seed(5)
    if reference:  # the mini-batches forwarded with their gradients kept, then one loss over them all
        batch = objective.as_batch(encoder, ROWS)
        pieces = [objective.encode(encoder, mini_batch(batch, start, start + mini)) for start in range(0, 10, mini)]
        encoded = {name: (torch.cat([p[name][0] for p in pieces]),
                          [start + row for p, start in zip(pieces, range(0, 10, mini)) for row in p[name][1]])
                   for name in pieces[0]}
        loss = objective.total(objective.losses_on(encoded, weights, batch=batch))
        loss.backward()
    else:
        loss, _ = Step(encoder, objective, mini_batch_size=mini, initial_weights=weights).backward_pass(ROWS)
    return loss.item(), {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}


def assert_same(found, expected):
    """The losses to 1e-6, and every parameter's gradient to 1e-5 relative; the attention key biases, whose true
    gradient is 0 (softmax ignores a constant added to every key's score), are float32 noise below 1e-6 of the whole
    gradient's norm in both."""
    assert found[0] == pytest.approx(expected[0], rel=1e-6)
    total = torch.cat([g.flatten() for g in expected[1].values()]).norm()
    assert found[1].keys() == expected[1].keys()
    for name, gradient in expected[1].items():
        if gradient.norm() > 1e-6 * total:
            assert (found[1][name] - gradient).norm() <= 1e-5 * gradient.norm(), name
        else:
            assert "key.bias" in name and found[1][name].norm() <= 1e-6 * total, name


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["simcse", "osscse", "sg", "angle"])
def test_without_dropout_the_cached_gradient_is_the_full_batchs(preset, tmp_path):
    """Mini-batches of 1, 3 and 4 rows (3 and 4 do not divide the batch of 10) and of the whole batch; osscse has four
    views, a margin loss and the recall to the initial weights, sg a frozen copy and a whole-batch loss, angle three
    whole-batch losses of two columns and each row's score."""
    model = minilm(tmp_path, dropout=False)
    full = gradients(preset, model, None)
    for mini in (1, 3, 4, 10):
        assert_same(gradients(preset, model, mini), full)


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True])
def test_with_dropout_each_mini_batch_draws_its_masks_twice_alike(packed, tmp_path, monkeypatch):
    """The second pass of each mini-batch gives exactly its first pass's vectors, and the gradient is that of the
    mini-batches forwarded once with their gradients kept; packed passes (training.packing) too, whose dropout draws
    over the packed row."""
    model = minilm(tmp_path, dropout=True)
    passes = []
    encode = Objective.encode

    def recorded(self, *args, **kwargs):
        out = encode(self, *args, **kwargs)
        passes.append({name: vectors.detach().clone() for name, (vectors, _) in out.items()})
        return out

    monkeypatch.setattr(Objective, "encode", recorded)
    cached = gradients("simcse", model, 4, packed=packed)
    first, second = passes[:3], passes[3:]
    assert len(second) == 3 and all(torch.equal(a[name], b[name]) for a, b in zip(first, second) for name in a)
    assert not torch.equal(first[0]["anchor"], first[0]["positive"])  # dropout is on: the two views differ
    monkeypatch.undo()
    assert_same(cached, gradients("simcse", model, 4, reference=True, packed=packed))


@pytest.mark.parametrize("settings, message", [
    (["training.mini_batch_size=128"], "mini_batch_size: 128 is larger than training.batch_size \\(64\\)"),
    (["training.mini_batch_size=8", "losses.mlm.source=anchor"], "losses.mlm runs the encoder on the batch"),
    (["training.mini_batch_size=8", "views.positive.augment={kind: fgsm}"],
     "views.positive.augment \\(fgsm\\) needs the loss's gradient"),
    (["training.mini_batch_size=8", "hooks.weights={kind: sam}"], "hooks.weights \\(sam\\) takes a second pass")])
def test_what_cannot_be_cached_is_refused_when_the_config_loads(settings, message):
    with pytest.raises(ConfigError, match=message):
        load_method("simcse", settings)


@pytest.mark.slow
def test_a_cached_run_trains_through_the_cli(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--method", "simcse", "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
                 "--data-dir", str(data_dir), "--out", str(out), "--set", "training.batch_size=32", "--set",
                 "training.mini_batch_size=12", "--set", "training.max_steps=2", "--set", "training.eval_steps=2",
                 "--set", "training.dev=none"]) == 0
    assert json.loads((out / "last" / "trainer_state.json").read_text())["step"] == 2
