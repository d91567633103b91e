"""The training step is written once (:class:`cselab.train.step.Step`): it is its batches' forward and backward
passes then one update, and nothing else in cselab or its benchmarks writes a backward pass or an optimizer update of
a method."""

import ast
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import cselab
from cselab.errors import TrainingError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.run.setup import build_encoder
from cselab.train.step import Step

ROOT = Path(cselab.__file__).parent.parent
HOME = "cselab/train/step/"
#: Files that step a model of their own, not a method's, and why.
OWN_STEPS = {
    "cselab/train/plugins/negatives.py": "the VAE negative generator trains itself on past vectors (its own model)",
    "cselab/evaluation/classifier.py": "SentEval's probing classifiers, trained on frozen vectors",
    "benchmarks/ceiling.py": "the plain PyTorch loop cselab's trainer is compared with",
    "benchmarks/host_overhead.py": "the plain PyTorch loop cselab's trainer is compared with",
    "benchmarks/train_speed.py": "its reference row: the plain PyTorch step the presets are compared with",
    "benchmarks/senteval_reference.py": "SentEval's own classifier, a probe's reference",
}
BATCHES = [{"text": [f"sentence {i} of batch {b} about {topic}" for i, topic in enumerate(["music", "dogs", "rivers"])]}
           for b in range(2)]


def steps_written(root: Path = ROOT) -> list[str]:
    """Each call of a backward pass (``x.backward()``, ``torch.autograd.backward``) or of an optimizer's update
    (``.step()`` on a name that says optimizer or scaler) in cselab/ and benchmarks/, outside :data:`HOME` and
    :data:`OWN_STEPS`."""
    found = []
    for path in sorted([*(root / "cselab").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]):
        where = str(path.relative_to(root))
        if where.startswith(HOME) or where in OWN_STEPS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr == "backward" or (node.func.attr == "step" and any(
                    word in receiver.lower() for word in ("optim", "scaler"))):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node.func)}()")
    return found


def test_no_other_module_writes_a_step():
    assert steps_written() == []


def test_the_search_sees_a_planted_step(tmp_path):
    (tmp_path / "cselab" / "train" / "step").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "cselab" / "train" / "step" / "x.py").write_text("loss.backward()\n")  # the home: allowed
    (tmp_path / "cselab" / "loop.py").write_text("def f(loss, optimizer):\n    loss.backward()\n    optimizer.step()\n")
    (tmp_path / "benchmarks" / "b.py").write_text("torch.autograd.backward(x)\nscheduler.step()\n")
    assert steps_written(tmp_path) == ["benchmarks/b.py:1: torch.autograd.backward()",
                                       "cselab/loop.py:2: loss.backward()", "cselab/loop.py:3: optimizer.step()"]


def quiet_simcse(tiny_bert_dir):
    """simcse over the tiny BERT with its dropout off (the same vectors whichever way the step is taken)."""
    method = load_method("simcse", ["training.max_length=16"])
    torch.manual_seed(0)
    encoder = build_encoder(method, str(tiny_bert_dir))
    encoder.eval()
    return encoder, Objective(method)


def test_a_step_is_its_batches_backward_passes_then_one_update(tiny_bert_dir):
    """Two batches: the losses' gradients summed, clipped to the max norm, one SGD update; the losses the mean."""
    encoder, objective = quiet_simcse(tiny_bert_dir)
    weights = [p.detach().clone() for p in encoder.parameters()]
    losses = []
    for batch in BATCHES:  # by hand
        loss = objective.total(objective(encoder, batch))
        loss.backward()
        losses.append(loss.item())
    grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in encoder.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = min(1.0, 0.5 / (norm.item() + 1e-6))
    expected = [w - 0.1 * scale * g for w, g in zip(weights, grads)]
    with torch.no_grad():
        for p, w in zip(encoder.parameters(), weights):
            p.copy_(w)
            p.grad = None
    step = Step(encoder, objective, torch.optim.SGD(encoder.parameters(), lr=0.1), max_grad_norm=0.5)
    found = step(BATCHES)
    assert found["loss"] == pytest.approx(sum(losses) / 2, rel=1e-6)
    assert found["grad_norm"] == pytest.approx(norm.item(), rel=1e-5)
    assert [float(loss) for loss in found.per_batch()] == pytest.approx(losses, rel=1e-6)
    for p, e in zip(encoder.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in encoder.parameters())  # cleared by the update


def test_a_step_without_an_optimizer_takes_backward_passes_only(tiny_bert_dir):
    encoder, objective = quiet_simcse(tiny_bert_dir)
    step = Step(encoder, objective)
    step.backward_pass(BATCHES[0])
    assert any(p.grad is not None for p in encoder.parameters())
    with pytest.raises(TrainingError, match="without an optimizer"):
        step.update()


def test_each_phase_of_a_step_is_a_profiler_range(tiny_bert_dir):
    encoder, objective = quiet_simcse(tiny_bert_dir)
    step = Step(encoder, objective, torch.optim.SGD(encoder.parameters(), lr=0.1))
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        step(BATCHES[:1])
    assert {"forward", "backward", "optimizer"} <= {event.key for event in profiler.key_averages()}
