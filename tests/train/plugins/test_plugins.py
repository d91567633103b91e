"""Plug-ins are found, not listed: every module of cselab/train/plugins/ and every module a package names in the
``cselab.plugins`` entry-point group registers when the package is imported."""

import sys

import pytest
import torch

from cselab import registry
from cselab.errors import ConfigError
from cselab.train.plugins import ENTRY_POINTS, discover

PLUGIN = '''
from cselab.registry import register
from cselab.train.plugins.kinds import Loss


@register("loss", "constant_one")
class ConstantOne(Loss):
    """1 for the batch: a third-party loss."""

    reduce = "replicated"

    def forward(self, views, context):
        return 1.0
'''


def _installed(tmp_path, monkeypatch, module: str) -> None:
    """A distribution whose metadata declares ``module`` in the entry-point group, on sys.path."""
    info = tmp_path / "acme_losses-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-losses\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\nacme = {module}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", {kind: dict(found) for kind, found in registry._REGISTRY.items()})


def test_every_in_tree_kind_is_found_without_a_list():
    assert {"info_nce", "two_way_margin", "recall", "nt_xent", "sg_opt"} <= set(registry.names("loss"))
    assert registry.names("head") == ["batchnorm_mlp", "mlp", "projection"] and "sam" in registry.names("weight_hook")
    assert "gmm" in registry.names("negatives") and "gaussian_noise" in registry.names("input_augment")
    assert "queue" in registry.names("negatives") and registry.names("token_augment") == ["word_repetition"]
    assert "rtd" in registry.names("loss")
    from cselab.train.config.schema import VIEW

    assert registry.names("layer_pooler") == ["avg", "first", "last", "mask", "max", "weighted_mean"]
    assert VIEW["layer_pooler"].choices == tuple(registry.names("layer_pooler"))  # a view offers every one


def test_a_package_declares_its_plug_ins_with_an_entry_point(tmp_path, monkeypatch):
    (tmp_path / "acme_losses.py").write_text(PLUGIN)
    _installed(tmp_path, monkeypatch, "acme_losses")
    monkeypatch.delitem(sys.modules, "acme_losses", raising=False)
    assert discover() == ["acme_losses"]
    assert registry.get("loss", "constant_one").summary == "1 for the batch: a third-party loss."


def test_an_entry_point_that_does_not_import_names_its_package(tmp_path, monkeypatch):
    _installed(tmp_path, monkeypatch, "acme_missing")
    with pytest.raises(ConfigError, match="entry point acme of acme-losses: cannot import 'acme_missing'"):
        discover()


BASES = {"loss": "cselab.train.plugins.kinds.Loss", "negatives": "cselab.train.plugins.kinds.NegativeSource",
         "logit_transform": "cselab.train.plugins.kinds.LogitTransform",
         "input_augment": "cselab.train.plugins.kinds.Augment",
         "output_augment": "cselab.train.plugins.kinds.Augment",
         "token_augment": "cselab.train.plugins.kinds.TokenAugment",
         "weight_hook": "cselab.train.plugins.kinds.WeightHook",
         "head": "cselab.train.plugins.kinds.Head", "adapter": "cselab.train.plugins.kinds.Adapter",
         "pooler": "cselab.encoders.pooling.Pooler",
         "layer_pooler": "cselab.encoders.pooling.LayerPooler"}


@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_kinds_plug_in_must_subclass_its_base(monkeypatch, kind):
    monkeypatch.setattr(registry, "_REGISTRY", {kind: dict(found) for kind, found in registry._REGISTRY.items()})
    for wrong in (lambda values, params, gradient=None: values, torch.nn.Module):  # a function, another class
        with pytest.raises(TypeError, match=f"{kind} 'plain': a {kind} plug-in is a subclass of {BASES[kind]}"):
            registry.register(kind, "plain")(wrong)
    assert all(issubclass(registry.get(kind, name).cls, registry._CONTRACTS[kind]) for name in registry.names(kind))


def test_a_loss_with_an_unknown_reduction_is_refused_where_it_is_defined():
    from cselab.train.plugins.kinds import Loss

    with pytest.raises(TypeError, match="RowMean.reduce = 'row': expected one of rows, whole_batch, replicated"):
        class RowMean(Loss):
            reduce = "row"  # a typo that would have been summed as 'replicated' on every process


def test_a_weight_hook_is_a_module_of_the_objective_so_its_state_is_saved_with_the_run():
    from cselab.train.config.methods import load_method
    from cselab.train.objective import Objective

    objective = Objective(load_method("sam"))
    assert dict(objective.named_children())["weight_hook"] is objective.weight_hook
    objective.weight_hook.register_buffer("calls", torch.tensor(3))
    assert int(objective.state_dict()["weight_hook.calls"]) == 3
