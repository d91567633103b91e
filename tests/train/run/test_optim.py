"""The optimizer settings against hand-computed steps: the AdamW variant, the weight-decay groups, the warm-up and the
clipping."""

import math
from dataclasses import replace

import pytest
import torch

from cselab.train.config.methods import load_method
from cselab.train.run.optim import LegacyAdamW, build_optimizer, build_scheduler, set_schedule_step
from cselab.train.step import clip_and_step
from cselab.train.config.sections import TrainingConfig, warmup_steps

GRADIENTS = [[0.5, -1.0], [0.1, 0.2], [-0.3, 0.05]]


def legacy_by_hand(theta, lr, betas, eps, decay):
    """transformers 4.x's AdamW on two numbers, written out: eps added to sqrt(v) before the bias correction, the
    step scaled by sqrt(1 - b2^t) / (1 - b1^t), then the decay of the updated weight."""
    (b1, b2), m, v = betas, [0.0, 0.0], [0.0, 0.0]
    for t, grads in enumerate(GRADIENTS, 1):
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            theta[i] -= lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m[i] / (math.sqrt(v[i]) + eps)
            theta[i] -= lr * decay * theta[i]
    return theta


def stepped(optimizer_class, **arguments):
    parameter = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    optimizer = optimizer_class([parameter], **arguments)
    for grads in GRADIENTS:
        parameter.grad = torch.tensor(grads, dtype=torch.float64)
        optimizer.step()
    return parameter.detach().tolist()


def test_legacy_adamw_takes_transformers_4_steps():
    arguments = {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-3, "weight_decay": 0.1}
    expected = legacy_by_hand([1.0, -2.0], 0.1, (0.9, 0.999), 1e-3, 0.1)
    assert stepped(LegacyAdamW, **arguments) == pytest.approx(expected, rel=1e-12)
    # torch's AdamW divides by sqrt(v / (1 - b2^t)) + eps and decays first: another result, as it should be
    assert stepped(torch.optim.AdamW, **arguments) != pytest.approx(expected, rel=1e-4)


def test_legacy_adamw_steps_each_parameter_as_if_alone():
    """The batched update is the per-parameter one: parameters of other shapes, one whose gradients start a step
    later (its own step count) and one with no gradient at a step all move as each would alone."""
    torch.manual_seed(0)
    shapes, arguments = [(3, 4), (5,), (2, 2)], {"lr": 0.01, "eps": 1e-6, "weight_decay": 0.05}
    together = [torch.nn.Parameter(torch.randn(shape, dtype=torch.float64)) for shape in shapes]
    alone = [torch.nn.Parameter(p.detach().clone()) for p in together]
    optimizers = [LegacyAdamW([p], **arguments) for p in alone]
    optimizer = LegacyAdamW(together, **arguments)
    for step in range(4):
        for i, (a, b) in enumerate(zip(together, alone)):
            grad = None if (i == 2 and step == 0) or (i == 1 and step == 2) else torch.randn_like(a)
            a.grad = b.grad = grad
        optimizer.step()
        for single in optimizers:
            single.step()
    for a, b in zip(together, alone):
        assert torch.equal(a, b)
    assert [optimizer.state[p]["step"] for p in together] == [4, 3, 3]


def test_legacy_eps_is_larger_in_effect_at_the_first_step():
    """At step 1 the legacy step is lr * g / (|g| + eps / sqrt(1 - b2)): eps acts 31.6 times larger (3.2e-7 for 1e-8)
    than in torch's lr * g / (|g| + eps)."""
    g, lr, eps = 1e-7, 1.0, 1e-8
    for optimizer_class, effective in ((LegacyAdamW, eps / math.sqrt(1 - 0.999)), (torch.optim.AdamW, eps)):
        parameter = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
        optimizer = optimizer_class([parameter], lr=lr, betas=(0.9, 0.999), eps=eps, weight_decay=0.0)
        parameter.grad = torch.tensor([g], dtype=torch.float64)
        optimizer.step()
        assert parameter.item() == pytest.approx(-lr * g / (g + effective), rel=1e-9)


def test_the_optimizer_and_its_groups_come_from_the_config():
    named = [("backbone.encoder.dense.weight", torch.nn.Parameter(torch.ones(2))),
             ("backbone.encoder.dense.bias", torch.nn.Parameter(torch.ones(2))),
             ("backbone.encoder.LayerNorm.weight", torch.nn.Parameter(torch.ones(2))),
             ("head.0.weight", torch.nn.Parameter(torch.ones(2)))]
    training = load_method("sg").training
    optimizer = build_optimizer(named, training)
    assert isinstance(optimizer, LegacyAdamW)
    decayed, exempt = optimizer.param_groups
    assert (decayed["weight_decay"], exempt["weight_decay"]) == (0.01, 0.0)
    assert {id(p) for p in decayed["params"]} == {id(named[0][1]), id(named[3][1])}
    assert {id(p) for p in exempt["params"]} == {id(named[1][1]), id(named[2][1])}
    assert (decayed["lr"], decayed["betas"], decayed["eps"]) == (5e-5, (0.9, 0.9), 1e-6)
    torch_adamw = build_optimizer(named, replace(training, optimizer="adamw"))
    assert type(torch_adamw) is torch.optim.AdamW and torch_adamw.param_groups[0]["eps"] == 1e-6


def test_warm_up_is_a_fraction_of_the_steps_or_a_count():
    assert warmup_steps(0.1, 1078) == 108  # SG-BERT: ceil(17,256 / 16 x 0.1)
    assert (warmup_steps(0, 100), warmup_steps(25, 100), warmup_steps(1, 100)) == (0, 25, 1)
    with pytest.raises(ValueError, match=r"training.warmup: 1.5 is neither a fraction below 1 nor a whole number"):
        load_method("simcse", ["training.warmup=1.5"])
    with pytest.raises(ValueError, match=r"training.warmup: -1 is out of range"):
        load_method("simcse", ["training.warmup=-1"])


def scheduled_rates(schedule: str = "linear") -> list[float]:
    """The learning rate of each of 10 steps, 2 of them warm-up, peak 1."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    training = TrainingConfig(**{**load_method("simcse").to_dict()["training"], "lr": 1.0, "warmup": 0.2,
                                 "lr_schedule": schedule})
    optimizer = build_optimizer([("w", parameter)], training)
    scheduler = build_scheduler(optimizer, training, 10)
    rates = []
    for _ in range(10):
        rates.append(scheduler.get_last_lr()[0])
        parameter.grad = torch.ones(1)
        optimizer.step()
        scheduler.step()
    return rates


def test_the_schedule_warms_up_then_decays_to_zero_or_stays():
    assert scheduled_rates() == pytest.approx([0.0, 0.5, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8])
    assert scheduled_rates("constant") == pytest.approx([0.0, 0.5] + [1.0] * 8)  # Keras' fixed rate (cosent)
    with pytest.raises(ValueError, match="training.lr_schedule: 'cosine' is not allowed; expected one of linear"):
        load_method("simcse", ["training.lr_schedule=cosine"])


def test_a_restart_puts_the_schedule_at_its_step_and_it_goes_on_from_there():
    parameter = torch.nn.Parameter(torch.zeros(1))
    training = TrainingConfig(**{**load_method("simcse").to_dict()["training"], "lr": 1.0, "warmup": 0.2})
    optimizer = build_optimizer([("w", parameter)], training)
    scheduler = build_scheduler(optimizer, training, 10)
    set_schedule_step(scheduler, 4)  # as the hand-computed schedule above: 6/8 at step 4, then 5/8
    rates = {group["lr"] for group in optimizer.param_groups}
    assert scheduler.last_epoch == 4 and set(scheduler.get_last_lr()) == {0.75} == rates
    parameter.grad = torch.ones(1)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5 / 8)


def test_clipping_scales_the_total_norm_and_null_leaves_it():
    first, second = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([first, second], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    first.grad, second.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])  # total norm 5
    assert clip_and_step(optimizer, scheduler, [first, second], 1.0) == pytest.approx(5.0)
    assert first.tolist() == pytest.approx([-0.6, 0.0]) and second.tolist() == pytest.approx([-0.8])
    first.grad, second.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert clip_and_step(optimizer, scheduler, [first, second], None) is None
    assert first.tolist() == pytest.approx([-3.6, 0.0]) and second.grad is None
    config = load_method("simcse", ["training.max_grad_norm=null"])
    assert config.training.max_grad_norm is None  # kept as null, not the default 1.0
