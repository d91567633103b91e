"""Plug-ins are found, not listed, one way for every kind (cselab.registry.discover): cselab's own modules of the
kind (every module of cselab/train/plugins/ for the training kinds), then every module a package names in the
kind's entry-point group (``cselab.train_plugins``, ``cselab.poolers``, ``cselab.suites``,
``cselab.backtranslation``)."""

import sys

import pytest
import torch

from cselab import registry
from cselab.errors import ConfigError, TrainingError
from cselab.train.out.folder import check_or_write
from tests.conftest import installed

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


def _installed(tmp_path, monkeypatch, own_registry, module: str, group: str = "cselab.train_plugins") -> None:
    """A distribution acme-losses whose metadata declares ``module`` in ``group``, on sys.path, found anew."""
    installed(tmp_path, monkeypatch, "acme-losses", group, module)
    own_registry._DISCOVERED.pop("cselab.train_plugins")


def test_every_in_tree_kind_is_found_without_a_list():
    assert {"info_nce", "two_way_margin", "recall", "nt_xent", "sg_opt"} <= set(registry.names("loss"))
    assert registry.names("head") == ["batchnorm_mlp", "mlm_transform", "mlp", "projection"]
    assert "sam" in registry.names("weight_hook")
    assert "gmm" in registry.names("negatives") and "gaussian_noise" in registry.names("input_augment")
    assert "queue" in registry.names("negatives") and registry.names("token_augment") == ["word_repetition"]
    assert "rtd" in registry.names("loss")
    from cselab.train.config.schema import VIEW

    assert registry.names("layer_pooler") == ["avg", "first", "last", "mask", "max", "weighted_mean"]
    assert VIEW["layer_pooler"].allowed() == tuple(registry.names("layer_pooler"))  # a view offers every one


def test_a_package_declares_its_plug_ins_with_an_entry_point(tmp_path, monkeypatch, own_registry):
    (tmp_path / "acme_losses.py").write_text(PLUGIN)
    _installed(tmp_path, monkeypatch, own_registry, "acme_losses")
    monkeypatch.delitem(sys.modules, "acme_losses", raising=False)
    plugin = registry.get("loss", "constant_one")  # found when asked for
    assert plugin.summary == "1 for the batch: a third-party loss." and registry.origin(plugin) == "acme-losses==0.1"
    assert registry.discover("head") == {"acme_losses": "acme-losses==0.1"}  # one group for the training kinds
    assert registry.origin(registry.get("loss", "info_nce")) is None  # cselab's own


def test_an_entry_point_that_does_not_import_names_its_package(tmp_path, monkeypatch, own_registry):
    _installed(tmp_path, monkeypatch, own_registry, "acme_missing")
    with pytest.raises(ConfigError, match=r"entry point acme_missing of acme-losses==0.1 \(group "
                                          r"cselab.train_plugins\): "
                                          "importing 'acme_missing' failed: ModuleNotFoundError"):
        registry.names("loss")
    with pytest.raises(ConfigError, match="acme_missing"):  # refused again, not remembered as found
        registry.names("loss")


def test_a_broken_module_of_cselabs_own_names_its_file_and_line(tmp_path, monkeypatch, own_registry):
    import cselab.train.plugins as package

    broken = tmp_path / "plugins"
    broken.mkdir()
    (broken / "broken.py").write_text("x = 1\nraise RuntimeError('half an edit')\n")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(broken)])
    own_registry._DISCOVERED.pop("cselab.train_plugins")
    with pytest.raises(ConfigError, match=r"broken.py:2: the plug-in module cannot be imported \(RuntimeError: half "
                                          r"an edit\); fix or remove it"):
        registry.names("loss")


BASES = {"loss": "cselab.train.plugins.kinds.Loss", "negatives": "cselab.train.plugins.kinds.NegativeSource",
         "logit_transform": "cselab.train.plugins.kinds.LogitTransform",
         "input_augment": "cselab.train.plugins.kinds.Augment",
         "output_augment": "cselab.train.plugins.kinds.Augment",
         "token_augment": "cselab.train.plugins.kinds.TokenAugment",
         "weight_hook": "cselab.train.plugins.kinds.WeightHook",
         "head": "cselab.train.plugins.kinds.Head", "adapter": "cselab.train.plugins.kinds.Adapter",
         "text": "cselab.train.plugins.kinds.TextTransform",
         "pooler": "cselab.encoders.pooling.Pooler",
         "layer_pooler": "cselab.encoders.pooling.LayerPooler", "suite": "cselab.probes.suite.Suite",
         "backtranslation": "cselab.augment.backtranslate.Translator"}


@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_kinds_plug_in_must_subclass_its_base(own_registry, kind):
    for wrong in (lambda values, params, gradient=None: values, torch.nn.Module):  # a function, another class
        with pytest.raises(TypeError, match=f"{kind} 'plain' \\(.*\\): a {kind} plug-in is a subclass of "
                                            f"{BASES[kind]}"):
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


@pytest.mark.parametrize("kind, group, base", [
    ("pooler", "cselab.poolers", "cselab.encoders.pooling:Pooler"),
    ("suite", "cselab.suites", "cselab.probes.suite:Suite"),
    ("backtranslation", "cselab.backtranslation", "cselab.augment.backtranslate:Translator")])
def test_each_kind_is_found_in_its_own_entry_point_group(tmp_path, monkeypatch, own_registry, kind, group, base):
    module, cls = base.split(":")
    (tmp_path / "acme_kind.py").write_text(
        f"from {module} import {cls}\nfrom cselab.registry import register\n\n\n"
        f"@register({kind!r}, 'acme')\nclass Acme({cls}):\n    name = 'acme'\n")
    installed(tmp_path, monkeypatch, "acme-kind", group, "acme_kind")
    own_registry._DISCOVERED.pop(group)
    monkeypatch.delitem(sys.modules, "acme_kind", raising=False)
    assert "acme" in registry.names(kind) and registry.origin(registry.get(kind, "acme")) == "acme-kind==0.1"


def test_a_plug_in_package_is_part_of_a_runs_identity(tmp_path, monkeypatch, own_registry):
    from cselab.train.out.folder import identity

    mine = {"method": "acme", "losses": {"one": {"kind": "constant_one", "weight": 1.0}}}
    assert "plugin_packages" not in identity({"method": "simcse"}, "m", {})  # none installed: the identity it had
    (tmp_path / "acme_losses.py").write_text(PLUGIN)
    _installed(tmp_path, monkeypatch, own_registry, "acme_losses")
    monkeypatch.delitem(sys.modules, "acme_losses", raising=False)
    first = identity(mine, "m", {})
    assert first["plugin_packages"] == ["acme-losses==0.1"]
    assert "plugin_packages" not in identity({"method": "simcse", "losses": {"info_nce": {}}}, "m", {})  # unused
    installed(tmp_path, monkeypatch, "acme-losses", "cselab.train_plugins", "acme_losses", "0.2")  # another release
    own_registry._DISCOVERED.pop("cselab.train_plugins")
    assert identity(mine, "m", {})["plugin_packages"] == ["acme-losses==0.2"]
    out = tmp_path / "run"  # a run begun with 0.1 is not resumed with 0.2: its loss's code may differ
    out.mkdir()
    check_or_write(out, first, mine)
    with pytest.raises(TrainingError, match=r"a different run: plugin_packages \(\['acme-losses==0.2'\] now, "
                                            r"\['acme-losses==0.1'\] in this OUT\)"):
        check_or_write(out, identity(mine, "m", {}), mine)


def test_every_field_of_a_runs_identity_is_compared_on_resume(tmp_path):
    """By class: a field the identity gains is compared without being listed (plugin_packages was recorded, never
    compared, and a run resumed after its plug-in changed trained another loss)."""
    from cselab.train.out.folder import identity

    mine = identity({"method": "simcse"}, "m", {})
    check_or_write(tmp_path, {**mine, "future_field": 1}, {"method": "simcse"})
    with pytest.raises(TrainingError, match=r"a different run: future_field \(2 now, 1 in this OUT\)"):
        check_or_write(tmp_path, {**mine, "future_field": 2}, {"method": "simcse"})
    check_or_write(tmp_path, {**mine, "future_field": 1}, {"method": "simcse"})  # the same run resumes


@pytest.mark.slow
def test_a_package_pooler_is_found_in_a_fresh_process(tmp_path, monkeypatch):
    import json
    import os
    import subprocess

    (tmp_path / "acme_pool.py").write_text(
        "from cselab.encoders.pooling import Avg\nfrom cselab.registry import register\n\n\n"
        "@register('pooler', 'acme_mean')\nclass AcmeMean(Avg):\n    \"\"\"A package's pooler.\"\"\"\n")
    installed(tmp_path, monkeypatch, "acme-pool", "cselab.poolers", "acme_pool")
    code = ("import json; from cselab.train.config.methods import load_method; from cselab import registry; "
            "method = load_method('simcse', ['encoder.pooler=acme_mean']); "
            "print(json.dumps([method.encoder.pooler, registry.origin(registry.get('pooler', 'acme_mean'))]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["acme_mean", "acme-pool==0.1"]


def test_a_plug_in_in_a_sibling_module_has_its_package_and_a_failed_import_registers_nothing(tmp_path, monkeypatch,
                                                                                            own_registry):
    package = tmp_path / "acme_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "impl.py").write_text(PLUGIN)
    (package / "plugins.py").write_text("from acme_pkg import impl  # noqa: F401\n")  # the entry point re-exports
    _installed(tmp_path, monkeypatch, own_registry, "acme_pkg.plugins")
    assert registry.origin(registry.get("loss", "constant_one")) == "acme-losses==0.1"
    (tmp_path / "acme_half.py").write_text(PLUGIN + "\nraise RuntimeError('half an edit')\n")
    monkeypatch.setattr(registry, "_REGISTRY", {kind: dict(found) for kind, found in registry._REGISTRY.items()})
    registry._REGISTRY["loss"].pop("constant_one")
    _installed(tmp_path, monkeypatch, own_registry, "acme_half")
    for _ in range(2):  # the same error again, not "registered twice"
        with pytest.raises(ConfigError, match="importing 'acme_half' failed: RuntimeError: half an edit"):
            registry.names("loss")
        assert "constant_one" not in registry._REGISTRY["loss"]
