"""A setting's type is its field's annotation (``count: int | None = setting(None, "...")``), stated once: no
``setting(...)`` in cselab restates it, and the schema the registry checks configs against reads it."""

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import cselab
from cselab.errors import ConfigError
from cselab.registry import REQUIRED, Checked, Param, param_type, schema_of, setting

PACKAGE = Path(cselab.__file__).parent


@pytest.mark.parametrize(("annotation", "expected"), [
    (int, (int, False)), (float | None, (float, True)), (list[str], (list, False)),
    (tuple[str, ...], (tuple, False)), (dict[str, Any] | None, (dict, True)), (bool | str, ((bool, str), False)),
    (list[int] | str | None, ((list, str), True)), (str | os.PathLike | None, (os.PathLike, True)),
    (int | float, ((int, float), False)),
])
def test_an_annotation_gives_the_params_type_and_whether_it_takes_null(annotation, expected):
    assert param_type(annotation) == expected


def test_an_annotation_a_param_cannot_check_is_refused():
    with pytest.raises(TypeError, match="a setting's annotation is made of bool, int, float, str"):
        param_type(set[str])


def test_the_schema_reads_the_annotation_and_the_field_the_rest():
    @dataclass(kw_only=True)
    class Options(Checked):
        where = "options"
        count: int | None = setting(None, "how many", min=1)
        names: list[str] = setting(["a"], "which", items=Param(str))
        rule: str = setting(REQUIRED, "the rule", choices=("x", "y"))

    schema = schema_of(Options)
    assert schema["count"] == Param(int, None, "how many", min=1, nullable=True)
    assert schema["names"] == Param(list, ["a"], "which", items=Param(str))
    assert schema["rule"] == Param(str, REQUIRED, "the rule", choices=("x", "y"))
    assert Options(rule="x", count=3).count == 3 and Options(rule="y").count is None
    with pytest.raises(ConfigError, match="options.count: '3' is not valid; expected a whole number >= 1 or null"):
        Options(rule="x", count="3")  # checked as the annotation says
    with pytest.raises(ConfigError, match="options.rule: null is not allowed"):
        Options(rule=None)  # str, not str | None


def test_a_setting_that_states_a_type_or_null_again_is_refused():
    for restated in (lambda: setting(1.0, float, "a factor"), lambda: setting(1.0, float),
                     lambda: setting(None, "x", nullable=True), lambda: setting(1, "x", type=int)):
        with pytest.raises(TypeError, match="the type, and None, are read from the field's annotation"):
            restated()


def restated(package: Path = PACKAGE) -> list[str]:
    """Each ``setting(...)`` call in ``package`` whose second argument is not its help text (a type stated again), or
    that says ``nullable``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "setting":
                second = node.args[1] if len(node.args) > 1 else None
                if (second is not None and not (isinstance(second, ast.Constant) and isinstance(second.value, str))
                        and not isinstance(second, (ast.Name, ast.JoinedStr, ast.BinOp))
                        or isinstance(second, ast.Name) and second.id in {"int", "float", "str", "bool", "list",
                                                                           "dict", "tuple"}
                        or any(keyword.arg == "nullable" for keyword in node.keywords)):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_no_setting_in_cselab_restates_its_type():
    assert restated() == []


def test_the_reading_sees_a_restated_type(tmp_path):
    (tmp_path / "cselab").mkdir()
    (tmp_path / "cselab" / "x.py").write_text(
        "a: int = setting(1, int, 'help')\nb: str = setting('x', HELP)\nc: int | None = setting(None, 'h', "
        "nullable=True)\nd: tuple = setting((), (str, int), 'h')\n")
    assert [line.split(": ")[0] for line in restated(tmp_path / "cselab")] == ["cselab/x.py:1", "cselab/x.py:3",
                                                                               "cselab/x.py:4"]


def test_rules_across_fields_are_the_params_own_and_name_the_section(own_registry):
    """One form for rules across fields: ``rules()`` on the typed object; the registry names the section it reads,
    and hands it the kind's parameters beside (a loss's views); one built by hand has none and its class's name."""
    from cselab.registry import build, check_plugin, get, register
    from cselab.train.config.schema import check_losses
    from cselab.train.plugins.kinds import Loss

    @register("loss", "ordered")
    class Ordered(Loss):
        """Two bounds in order, and a view list no longer than ``most``."""

        roles, view_lists = ("anchor",), ("extra",)

        @dataclass(frozen=True, kw_only=True)
        class Params(Loss.Params):
            low: float = setting(0.0, "the lower bound")
            high: float = setting(1.0, "the upper bound")
            most: int = setting(1, "extra views at most", min=0)

            def rules(self) -> None:
                if self.low >= self.high:
                    raise ConfigError(f"{self.at('low')}: not below {self.at('high')}")
                if self.beside is not None and len(self.beside["extra"]) > self.most:
                    raise ConfigError(f"{self.at('extra')}: more than {self.most}")

    views = {"a": {"column": "sent0"}, "b": {"column": "sent1"}}
    with pytest.raises(ConfigError, match=r"^losses.ordered.low: not below losses.ordered.high$"):
        check_losses({"ordered": {"anchor": "a", "low": 2.0}}, views)
    with pytest.raises(ConfigError, match=r"^losses.ordered.extra: more than 1$"):
        check_losses({"ordered": {"anchor": "a", "extra": ["a", "b"]}}, views)
    assert check_losses({"ordered": {"anchor": "a", "extra": ["a", "b"], "most": 2}}, views)["ordered"]["most"] == 2
    with pytest.raises(ConfigError, match=r"^low: not below high$"):
        Ordered.Params(low=2.0)
    assert Ordered.Params(low=0.5).beside is None and Ordered.Params().where == ""
    built = build(get("loss", "ordered"), {"anchor": "a", "extra": ["b"]})
    assert built.params.beside == {"anchor": "a", "extra": ["b"]}
    with pytest.raises(ConfigError, match=r"^encoder.adapter.compute_dtype: set, and it acts only on a quantized"):
        check_plugin("adapter", {"kind": "lora", "compute_dtype": "float16"}, "encoder.adapter")


def test_no_plugin_states_rules_another_way(own_registry):
    """The classmethod ``validate(params, where)`` on a raw mapping is gone: no registered class declares one, and a
    package's plug-in that still does is refused where it registers (its rules would never run)."""
    from cselab import registry
    from cselab.errors import PluginError
    from cselab.train.plugins.kinds import Loss

    stray = [f"{kind} {name}" for kind in registry.KINDS for name in registry.names(kind)
             if hasattr(registry.get(kind, name).cls, "validate")]
    assert stray == []
    with pytest.raises(PluginError, match=r"Old.validate is not called; state rules .* as rules\(self\) on its"):
        @registry.register("loss", "old")
        class Old(Loss):
            """Rules the old way."""

            roles = ("anchor",)

            @classmethod
            def validate(cls, params, where):
                pass


def test_a_nested_plugin_is_typed_and_built_by_the_registry():
    """``info_nce``'s ``transform`` and ``generated`` are plug-ins: the registry builds them as the loss's own
    modules (their state in its state), the loss's Params keep their specs, what the config holds."""
    from cselab.registry import build, get
    from cselab.train.config.schema import check_losses
    from cselab.train.plugins.kinds import LogitTransform, NegativeSource

    views = {"anchor": {"column": "sent0"}, "positive": {"column": "sent0"}}
    spec = check_losses({"info_nce": {"anchor": "anchor", "positive": "positive", "generated": {"kind": "gaussian"},
                                      "transform": {"kind": "perturb", "pattern": "p-n+", "margin": 0.1}}},
                        views)["info_nce"]
    loss = build(get("loss", "info_nce"), spec)
    assert isinstance(loss.transform, LogitTransform) and isinstance(loss.generated, NegativeSource)
    assert loss.params.generated == spec["generated"] and spec["generated"]["kind"] == "gaussian"
    assert dict(loss.named_children()).keys() >= {"transform", "generated"}
    plain = build(get("loss", "info_nce"), check_losses({"info_nce": {"anchor": "anchor", "positive": "positive"}},
                                                        views)["info_nce"])
    assert plain.transform is None and plain.generated is None
