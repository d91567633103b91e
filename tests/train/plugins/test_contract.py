"""Every registered plug-in keeps the contract outside authors check theirs against (:func:`cselab.testing.
check_plugin`), and the kit sees a plug-in that breaks it."""

from dataclasses import dataclass

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

    @registry.register("loss", "unexplained")
    class Unexplained(Loss):
        """A loss whose parameter says nothing."""

        roles = ("anchor",)

        @dataclass(frozen=True, kw_only=True)
        class Params(Loss.Params):
            scale: float = registry.setting(1.0, float)

    with pytest.raises(ContractError, match="loss 'unexplained' .*: parameter\\(s\\) scale without a help text"):
        check_plugin(Unexplained, {"anchor": "a"})

    @registry.register("loss", "deaf")
    class Deaf(Loss):
        """A loss whose constructor does not take the view it reads."""

        roles = ("anchor",)

        def __init__(self, params: Loss.Params):
            super().__init__(params)

    with pytest.raises(ContractError, match="its constructor does not take anchor as keywords"):
        check_plugin(Deaf, {"anchor": "a"})

    @registry.register("loss", "needy")
    class Needy(Loss):
        """A loss whose constructor requires what nobody hands it."""

        roles = ("anchor",)

        def __init__(self, params: Loss.Params, *, device: torch.device, **views):
            super().__init__(params, **views)

    with pytest.raises(ContractError, match="its constructor requires device"):
        check_plugin(Needy, {"anchor": "a"})

    @registry.register("loss", "restated")
    class Restated(Loss):
        """A loss that restates its parameter as a keyword instead of taking its Params."""

        roles = ("anchor",)

        @dataclass(frozen=True, kw_only=True)
        class Params(Loss.Params):
            scale: float = registry.setting(1.0, float, "a factor")

        def __init__(self, *, scale: float, **views):
            super().__init__(self.Params(scale=scale), **views)

    with pytest.raises(ContractError, match="its constructor does not take its Params first"):
        check_plugin(Restated, {"anchor": "a"})

    @registry.register("loss", "twice")
    class Twice(Loss):
        """A loss that takes its Params and its parameter again as a keyword."""

        roles = ("anchor",)
        Params = Restated.Params

        def __init__(self, params: Loss.Params, scale: float = 1.0, **views):
            super().__init__(params, **views)
            self.scale = scale

    with pytest.raises(ContractError, match="its constructor takes scale, a parameter of its Params, again"):
        check_plugin(Twice, {"anchor": "a"})

    @registry.register("loss", "forgetful")
    class Forgetful(Loss):
        """A loss that keeps its defaults instead of the Params it is given."""

        roles = ("anchor",)
        Params = Restated.Params

        def __init__(self, params: Loss.Params, **views):
            super().__init__(self.Params(), **views)

    check_plugin(Forgetful, {"anchor": "a"})  # built with the defaults: nothing to tell apart
    with pytest.raises(ContractError, match="self.params is not the Params it was built with"):
        check_plugin(Forgetful, {"anchor": "a", "scale": 3.0})

    class Unregistered(Loss):
        """Never registered."""

    with pytest.raises(ContractError, match="Unregistered: not registered"):
        check_plugin(Unregistered)


@pytest.mark.parametrize("declare", ["undecorated", "positional", "foreign"])
def test_a_params_type_that_would_declare_nothing_or_drift_is_refused_where_it_is_registered(own_registry, declare):
    from cselab.train.plugins.kinds import Loss

    base = dict if declare == "foreign" else Loss.Params
    namespace = {"__annotations__": {"scale": "float"}, "scale": registry.setting(1.0, float, "a factor")}
    params = type("Params", (base,), namespace)
    if declare == "positional":  # (a mutable one Python itself refuses: its base is frozen)
        params = dataclass(frozen=True)(params)
    cls = type("Scaled", (Loss,), {"__doc__": "A loss.", "Params": params})
    with pytest.raises(TypeError, match="loss 'scaled': (declare Scaled.Params with @dataclass\\(frozen=True, "
                                        "kw_only=True\\)|Scaled.Params is a subclass of cselab.registry.Params)"):
        registry.register("loss", "scaled")(cls)
