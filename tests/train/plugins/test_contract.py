"""Every registered plug-in keeps the contract outside authors check theirs against (:func:`cselab.testing.
check_plugin`), and the kit sees a plug-in that breaks it."""

import re
from dataclasses import dataclass

import pytest
import torch

from cselab import registry
from cselab.errors import ConfigError, PluginError
from cselab.testing import ContractError, PluginContract, check_plugin, parametrize_with_checks

#: The required parameters of the plug-ins that have some (a loss's views, a sentence-transformers loss's name ...).
EXAMPLES = {
    ("loss", "st_single"): {"anchor": "a", "loss": "BatchAllTripletLoss", "label": "score"},
    ("loss", "st_pair"): {"anchor": "a", "other": "b", "loss": "CoSENTLoss", "label": "score"},
    ("loss", "st_triplet"): {"anchor": "a", "positive": "b", "negative": "c", "loss": "TripletLoss"},
    ("logit_transform", "perturb"): {"pattern": "p-n+", "margin": 0.1},
    ("loss", "rtd"): {"views": ["a"], "generator": "g"},
    ("loss", "aggregation_mlm"): {"views": ["a"]},
}
#: What each kind hands its plug-ins besides their parameters.
CONTEXT = {"head": {"hidden": 8}}
#: Plug-ins whose constructor loads what this machine lacks: their declarations are checked, not a build.
NOT_BUILT = {("backtranslation", "hf"): "loads its translation models from the hub",
             ("backtranslation", "ctranslate2"): "converts translation models it loads from the hub"}


def contract(kind: str, name: str) -> PluginContract:
    """The contract of plug-in ``name`` of ``kind``, given its required parameters and its kind's context."""
    plugin = registry.get(kind, name)
    required = [key for key, param in plugin.schema().items() if param.default is registry.REQUIRED]
    params = EXAMPLES.get((kind, name), {key: f"view_{i}" for i, key in enumerate(required)})
    context = CONTEXT.get(kind, {})
    return PluginContract(plugin.cls, params, registered_as=(kind, name), build_it=(kind, name) not in NOT_BUILT,
                          **context)


def every_check():
    """One test per plug-in and check (scikit-learn's ``parametrize_with_checks``)."""
    return [pytest.param(run, id=f"{kind}-{name}-{check}") for kind in registry.KINDS for name in registry.names(kind)
            for check, run in contract(kind, name).checks()]


@pytest.mark.parametrize("check", every_check())
def test_every_plugin_keeps_the_contract(check):
    check()


def test_the_kit_sees_a_plugin_that_breaks_the_contract(own_registry):
    from cselab.train.plugins.kinds import Loss

    @registry.register("loss", "unexplained")
    class Unexplained(Loss):
        """A loss whose parameter says nothing."""

        roles = ("anchor",)

        @dataclass(frozen=True, kw_only=True)
        class Params(Loss.Params):
            scale: float = registry.setting(1.0)

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

    @dataclass(frozen=True, kw_only=True)
    class Scale(Loss.Params):
        scale: float = registry.setting(1.0, "a factor")

    @registry.register("loss", "forgetful")
    class Forgetful(Loss):
        """A loss that keeps its defaults instead of the Params it is given."""

        roles = ("anchor",)
        Params = Scale

        def __init__(self, params: Loss.Params, **views):
            super().__init__(self.Params(), **views)

    check_plugin(Forgetful, {"anchor": "a"})  # built with the defaults: nothing to tell apart
    with pytest.raises(ContractError, match="self.params is not the Params it was built with"):
        check_plugin(Forgetful, {"anchor": "a", "scale": 3.0})

    class Unregistered(Loss):
        """Never registered."""

    with pytest.raises(ContractError, match="Unregistered: not registered"):
        check_plugin(Unregistered)


def test_the_kit_feeds_each_setting_what_its_declaration_refuses(own_registry):
    """A Params that skips the checks (a __post_init__ of its own) takes a margin below its bound when a plug-in is
    built from Python: the check fed from the bounds fails it, in the test of its own."""
    from cselab.testing import bad_values
    from cselab.train.plugins.kinds import Loss

    assert bad_values(registry.Param(float, 0.5, min=0.0, max=1.0, below=True)) == [-1.0, 1.0, {"not": "a value"}]
    assert bad_values(registry.Param(str, "a", choices=("a", "b"))) == ["a-b-none-of-these", {"not": "a value"}]
    assert bad_values(registry.Param(list, [0.1, 0.2], items=registry.Param(float), length=2)) == [
        {"not": "a value"}, [0, 0, 0]]

    @registry.register("loss", "lax")
    class Lax(Loss):
        """A loss whose Params do not check their values."""

        roles = ("anchor",)

        @dataclass(frozen=True, kw_only=True)
        class Params(Loss.Params):
            margin: float = registry.setting(0.5, "a margin", min=0.0)

            def __post_init__(self):  # skips the checks
                pass

    with pytest.raises(ContractError, match=r"loss 'lax' .*: its Params take margin=-1\.0, outside its declaration "
                                            r"\(a number >= 0\)"):
        check_plugin(Lax, {"anchor": "a"})
    checks = dict(PluginContract(Lax, {"anchor": "a"}).checks())
    checks["builds"]()  # every other check passes
    with pytest.raises(ContractError, match="outside its declaration"):
        checks["refuses_bad_values"]()


@parametrize_with_checks([(registry.get("loss", "info_nce").cls, {"anchor": "a", "positive": "b"})])
def test_an_authors_plugin_is_checked_one_test_per_check(check, request):
    assert request.node.callspec.id.startswith("InfoNCE-")
    check()


@pytest.mark.parametrize("declare", ["undecorated", "positional", "foreign"])
def test_a_params_type_that_would_declare_nothing_or_drift_is_refused_where_it_is_registered(own_registry, declare):
    from cselab.train.plugins.kinds import Loss

    base = dict if declare == "foreign" else Loss.Params
    namespace = {"__annotations__": {"scale": "float"}, "scale": registry.setting(1.0, "a factor")}
    params = type("Params", (base,), namespace)
    if declare == "positional":  # (a mutable one Python itself refuses: its base is frozen)
        params = dataclass(frozen=True)(params)
    cls = type("Scaled", (Loss,), {"__doc__": "A loss.", "Params": params})
    with pytest.raises(PluginError, match="loss 'scaled' \\(.*Scaled; module .*\\): (declare Scaled.Params with "
                                          "@dataclass\\(frozen=True, kw_only=True\\)|Scaled.Params is a subclass of "
                                          "cselab.registry.Params)"):
        registry.register("loss", "scaled")(cls)


def _scaled(params, init=None, base=None):
    """A plug-in class of ``base`` (a loss by default) with ``params`` as its Params and ``init`` as its constructor
    (the kind's by default)."""
    from cselab.train.plugins.kinds import Loss

    namespace = {"__doc__": "A plug-in.", "roles": ("anchor",), "Params": params}
    if init is not None:
        namespace["__init__"] = init
    return type("Scaled", (base or Loss,), namespace)


def _params(base, **declared):
    """A Params type of ``base`` declaring ``declared`` (name -> (annotation, setting()))."""
    namespace = {"__annotations__": {name: kind for name, (kind, _) in declared.items()},
                 **{name: field for name, (_, field) in declared.items()}}
    return dataclass(frozen=True, kw_only=True)(type("Params", (base,), namespace))


@pytest.mark.parametrize("kind", ["loss", "head"])
def test_a_constructor_that_takes_a_setting_again_is_refused_where_it_is_registered(own_registry, kind):
    """A keyword of the constructor that is also a setting of its Params: no config reaches it (build() hands the
    Params alone), so two configs would train alike while config.yaml records the value never used; refused when the
    class is registered, for any kind, not only by check_plugin."""
    from cselab.train.plugins.kinds import Head, Loss

    base = Loss if kind == "loss" else Head
    params = _params(base.Params, scale=(float, registry.setting(1.0, "a factor")))

    def twice(self, params, scale: float = 1.0, **rest):
        base.__init__(self, params, **rest)

    def restated(self, *, scale: float, **rest):
        base.__init__(self, params(scale=scale), **rest)

    with pytest.raises(PluginError, match=f"{kind} 'twice' \\(.*; module .*\\): its constructor takes scale, a "
                                          "setting of its Params, again as a keyword, which no config reaches"):
        registry.register(kind, "twice")(_scaled(params, twice, base))
    with pytest.raises(PluginError, match=f"{kind} 'restated' .*: its constructor does not take its Params first"):
        registry.register(kind, "restated")(_scaled(params, restated, base))
    assert "twice" not in registry.names(kind) and "restated" not in registry.names(kind)


@pytest.mark.parametrize(("declared", "why"), [
    ({"scale": (float, registry.setting(-1.0, "a factor", min=0.0))}, "scale: -1.0 is out of range; expected a "
                                                                       "number"),
    ({"rule": (str, registry.setting("max", "a rule", choices=("mean", "sum")))}, "rule: 'max' is not allowed"),
    ({"count": (int, registry.setting(2.5, "a count"))}, "count: 2.5 is not valid; expected a whole number"),
])
def test_a_default_outside_its_own_declaration_is_refused_where_it_is_registered(own_registry, declared, why):
    """--show-config would print the default and training fail later in a line naming neither the plug-in nor its
    package: refused at registration, the plug-in, its kind and its package named."""
    from cselab.train.plugins.kinds import Loss

    with pytest.raises(PluginError, match=f"loss 'bounded' \\(.*Scaled; module .*\\): the default of "
                                          f"Scaled.Params.{re.escape(why)}"):
        registry.register("loss", "bounded")(_scaled(_params(Loss.Params, **declared)))


SHADY = '''from dataclasses import dataclass
from cselab.registry import register, setting
from cselab.train.plugins.kinds import Loss


@register("loss", "shady")
class Shady(Loss):
    """A loss."""

    roles = ("anchor",)

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        margin: float = setting(5.0, "a margin", max=1.0)
'''


def test_a_package_whose_plugin_breaks_the_params_contract_is_named(own_registry, tmp_path, monkeypatch):
    """Registered through an entry point, the same refusal names the package and its version."""
    from tests.conftest import installed

    (tmp_path / "shady_loss.py").write_text(SHADY)
    installed(tmp_path, monkeypatch, "shady-losses", "cselab.train_plugins", "shady_loss", version="2.1")
    del registry._DISCOVERED["cselab.train_plugins"]
    with pytest.raises(ConfigError, match="entry point shady_loss of shady-losses==2.1 .*loss 'shady' "
                                          ".*shady-losses==2.1.*the default of Shady.Params.margin: 5.0 is out of "
                                          "range"):
        registry.names("loss")


def test_check_plugin_sees_a_state_that_does_not_come_back(own_registry):
    """A plug-in whose set_extra_state drops what it is handed: a resumed run would not continue the one saved."""
    from cselab.train.plugins.kinds import NegativeSource

    @registry.register("negatives", "amnesiac")
    class Amnesiac(NegativeSource):
        """Remembers the anchors, forgets them on a resume."""

        def generate(self, anchors, past):
            return past

        def remember(self, anchors):
            self.memory.append(anchors)

        def set_extra_state(self, state):
            self.memory = []

    with pytest.raises(ContractError, match="negatives 'amnesiac' .*its state does not come back .*memory has 0 "
                                            "items, not 3"):
        check_plugin(Amnesiac)

    @registry.register("negatives", "faithful")
    class Faithful(Amnesiac):
        """Remembers the anchors and keeps them on a resume."""

        set_extra_state = NegativeSource.set_extra_state

    check_plugin(Faithful)


def test_check_plugin_sees_a_buffer_that_does_not_come_back(own_registry):
    """The planted variant on another kind: a head that keeps its own buffer whatever it is handed."""
    from cselab.train.plugins.kinds import Head

    @registry.register("head", "stubborn")
    class Stubborn(Head):
        """Scales the vectors by a buffer it never restores."""

        def __init__(self, params, hidden: int):
            super().__init__(params)
            self.register_buffer("scale", torch.ones(hidden))

        def forward(self, vectors):
            return vectors * self.scale

        def load_state_dict(self, state_dict, strict=True, assign=False):
            return super().load_state_dict({k: v for k, v in state_dict.items() if k != "scale"}, strict=False)

    with pytest.raises(ContractError, match="head 'stubborn' .*its state does not come back .*state.scale differs"):
        check_plugin(Stubborn, hidden=4)
