"""Every preset's own part acts: a part silently dropped (a misspelt key, a plug-in that ignores a parameter)
would leave the first steps' losses and gradients equal to those of the preset it extends."""

import pytest
import torch

from cselab.train.config.method import MethodConfig
from cselab.train.config.methods import load_method, preset_base, preset_names
from cselab.train.objective import Objective
from cselab.train.run.setup import attach_auxiliary, build_encoder, initial_weights
from cselab.train.step import Step
from tests.runs import models_for

BATCHES = [{"text": [f"sentence number {i} of batch {b} about {topic}" for i, topic in
                     enumerate(["music", "dogs", "markets", "rivers", "trains", "bread"])],
            "paraphrase": [f"about {topic}, sentence {i} of batch {b}" for i, topic in
                           enumerate(["music", "dogs", "markets", "rivers", "trains", "bread"])],
            "negation": [f"sentence number {i} of batch {b} is not about {topic}" for i, topic in
                         enumerate(["music", "dogs", "markets", "rivers", "trains", "bread"])]}
           for b in range(3)]
for rows in BATCHES:  # a triplet table's columns, for the supervised presets
    rows["positive"], rows["hard_negative"] = rows["paraphrase"], rows["negation"]
EXTENDING = [name for name in preset_names() if preset_base(name)]


def first_steps(method: MethodConfig, model: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Losses and gradients of three batches at the initial weights (no update between: the second and third let
    memory banks and history-based generators act)."""
    torch.manual_seed(0)
    encoder = build_encoder(method, model)
    objective = Objective(method)
    attach_auxiliary(encoder, objective)
    initial = initial_weights(encoder) if objective.needs_initial_weights else None
    trainable = [p for p in encoder.parameters() if p.requires_grad]
    step = Step(encoder, objective, trainable=trainable,
                initial_weights=lambda: (list(encoder.backbone.parameters()), initial))
    losses, gradients = [], []
    for rows in BATCHES:
        encoder.zero_grad()
        loss, _ = step.backward_pass(rows)
        losses.append(loss.detach())
        gradients.append(torch.cat([p.grad.flatten() for p in trainable if p.grad is not None]))
    return torch.stack(losses), torch.cat(gradients)


@pytest.mark.slow
@pytest.mark.parametrize("preset", EXTENDING)
def test_each_presets_own_part_changes_the_first_steps(preset, tiny_bert_dir, tmp_path):
    base = preset_base(preset)
    settings = ["training.max_length=16"]  # and a tiny local model for each model a loss names (GISTEmbed's guide)
    own, parent = (load_method(name, [*settings, *models_for(name, tmp_path)]) for name in (preset, base))
    mine_dict, theirs_dict = own.to_dict(), parent.to_dict()
    changed = {key for key in mine_dict if key not in ("method", "description")
               and mine_dict[key] != theirs_dict.get(key)}
    if changed == {"training"}:  # a trainer setting (e.g. batch-128's batch size) acts across steps, not in one
        assert own.training.batch_size != parent.training.batch_size
        return
    mine = first_steps(own, str(tiny_bert_dir))
    theirs = first_steps(parent, str(tiny_bert_dir))
    same_loss = torch.allclose(mine[0], theirs[0], rtol=1e-6, atol=1e-7)
    same_gradient = mine[1].shape == theirs[1].shape and torch.allclose(mine[1], theirs[1], rtol=1e-6, atol=1e-9)
    assert not (same_loss and same_gradient), f"{preset} trains exactly as {base}: its own part did nothing"


def test_the_check_fails_for_a_part_that_does_nothing(tiny_bert_dir):
    settings = ["training.max_length=16"]
    inert = load_method("simcse", [*settings, "losses.info_nce.label_smoothing=0.0"])  # the default: no change
    assert all(torch.equal(a, b) for a, b in zip(first_steps(inert, str(tiny_bert_dir)),
                                                  first_steps(load_method("simcse", settings), str(tiny_bert_dir)),
                                                  strict=True))
