"""Every registered plug-in keeps the contract outside authors check theirs against (:func:`cselab.testing.
check_plugin`), and the kit sees a plug-in that breaks it."""

import pytest
import torch

from cselab import registry
from cselab.testing import ContractError, check_plugin

#: The required parameters of the plug-ins that have some (a loss's views, a sentence-transformers loss's name ...).
EXAMPLES = {
    ("loss", "st_single"): {"anchor": "a", "loss": "BatchAllTripletLoss"},
    ("loss", "st_pair"): {"anchor": "a", "other": "b", "loss": "CoSENTLoss"},
    ("loss", "st_triplet"): {"anchor": "a", "positive": "b", "negative": "c", "loss": "TripletLoss"},
    ("logit_transform", "perturb"): {"pattern": "p-n+", "margin": 0.1},
}
#: What each kind hands its plug-ins besides their parameters.
CONTEXT = {"head": {"hidden": 8}}
#: Plug-ins whose constructor loads what this machine lacks: their declarations are checked, not a build.
NOT_BUILT = {("backtranslation", "hf"): "loads its translation models from the hub"}


def every_plugin():
    return [(kind, name) for kind in registry.KINDS for name in registry.names(kind)]


@pytest.mark.parametrize(("kind", "name"), every_plugin())
def test_every_plugin_keeps_the_contract(kind, name):
    plugin = registry.get(kind, name)
    required = [key for key, param in plugin.schema().items() if param.default is registry.REQUIRED]
    params = EXAMPLES.get((kind, name), {key: f"view_{i}" for i, key in enumerate(required)})
    context = {"name": name} if kind == "dev_scorer" else CONTEXT.get(kind, {})
    check_plugin(plugin.cls, params, registered_as=(kind, name), build_it=(kind, name) not in NOT_BUILT, **context)


def test_the_kit_sees_a_plugin_that_breaks_the_contract(own_registry):
    from cselab.train.plugins.kinds import Loss

    @registry.register("loss", "unexplained", params={"scale": registry.Param(float, 1.0)})
    class Unexplained(Loss):
        """A loss whose parameter says nothing."""

        roles = ("anchor",)

        def __init__(self, anchor: str, scale: float):
            super().__init__(anchor=anchor)

    with pytest.raises(ContractError, match="loss 'unexplained' .*: parameter\\(s\\) scale without a help text"):
        check_plugin(Unexplained, {"anchor": "a"})

    @registry.register("loss", "deaf", params={"scale": registry.Param(float, 1.0, "a factor")})
    class Deaf(Loss):
        """A loss whose constructor does not take its parameter."""

        roles = ("anchor",)

        def __init__(self, anchor: str, device: torch.device):
            super().__init__(anchor=anchor)

    with pytest.raises(ContractError, match="its constructor does not take scale"):
        check_plugin(Deaf, {"anchor": "a"})

    class Unregistered(Loss):
        """Never registered."""

    with pytest.raises(ContractError, match="Unregistered: not registered"):
        check_plugin(Unregistered)
