"""The plug-in contract as one call, for authors of plug-ins outside cselab (as scikit-learn's
``parametrize_with_checks``): ``check_plugin(MyLoss, {"anchor": "a", "positive": "b"})`` in a test of theirs runs the
checks cselab's own tests run on every registered plug-in (tests/train/plugins/test_contract.py).

A plug-in keeps the contract when it is registered (:func:`cselab.registry.register`, or through an entry point) as
a subclass of its kind's base class; says what it does (the first paragraph of its docstring, the docs' summary) and
what each parameter means (each setting of its ``Params`` has a help text: the docs table and ``--show-config`` show
it); takes its ``Params`` first and the parameters its kind adds (the views a loss reads) and the kind's context as
keywords, and nothing else without a default (:func:`cselab.registry.build`, the one constructor convention); is built
from the schema's defaults and the given ``params``; and, where it is a ``torch.nn.Module``, hands its state (extra
state included, which a resumed run restores) to a second instance built alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch

from cselab.errors import ConfigError
from cselab.files import shown
from cselab.registry import KINDS, REQUIRED, Param, Plugin, build, check, contract_of, get, names, schema_of


class ContractError(AssertionError):
    """A plug-in that breaks the contract: the message names the plug-in and the check."""


def registered(cls: type, kind: str | None = None, name: str | None = None) -> Plugin:
    """The registry's entry of ``cls`` (as plug-in ``name`` of ``kind`` where it is registered more than once), or a
    :class:`ContractError`."""
    found = [get(k, n) for k in KINDS for n in names(k) if get(k, n).cls is cls and kind in (None, k)
             and name in (None, n)]
    label = f"{cls.__module__}.{cls.__qualname__}"
    if not found:
        raise ContractError(f"{label}: not registered{f' as {kind} {name!r}' if kind or name else ''} (cselab."
                            "registry.register(KIND, NAME) in a module cselab imports, or an entry point)")
    if len(found) > 1:
        raise ContractError(f"{label}: registered as {', '.join(f'{p.kind} {p.name!r}' for p in found)}; give "
                            "registered_as=(KIND, NAME) to say which to check")
    return found[0]


class PluginContract:
    """The contract's checks of one plug-in class, each a method that raises a :class:`ContractError` naming the
    plug-in and the check; :meth:`checks` lists them for a test per check (:func:`parametrize_with_checks`)."""

    def __init__(self, cls: type, params: dict[str, Any] | None = None, *,
                 registered_as: tuple[str, str] | None = None, build_it: bool = True, **context):
        self.cls, self.params, self.registered_as, self.build_it, self.context = (cls, dict(params or {}),
                                                                                registered_as, build_it, context)
        self._built: Any = None  # the object :meth:`builds_from_its_schema` built, which later checks read

    @property
    def plugin(self) -> Plugin:
        return registered(self.cls, *(self.registered_as or (None, None)))

    @property
    def where(self) -> str:
        plugin = self.plugin
        return f"{plugin.kind} {plugin.name!r} ({self.cls.__module__}.{self.cls.__qualname__})"

    def checks(self) -> list[tuple[str, Callable[[], Any]]]:
        """(name, check) in the order :func:`check_plugin` runs them; the building ones only with ``build_it``."""
        found = [("registered", self.is_registered), ("subclass", self.is_a_subclass_of_its_kind),
                 ("documented", self.is_documented), ("parameters_explained", self.explains_its_parameters),
                 ("constructor", self.takes_what_its_kind_hands_it),
                 ("refuses_bad_values", self.refuses_values_outside_its_declaration)]
        if self.build_it:
            found += [("builds", self.builds_from_its_schema), ("keeps_params", self.keeps_its_params),
                      ("hands_on_state", self.hands_on_its_state)]
        return found

    def is_registered(self) -> None:
        self.plugin  # noqa: B018  (raises when it is not)

    def is_a_subclass_of_its_kind(self) -> None:
        base = contract_of(self.plugin.kind)
        if not issubclass(self.cls, base):
            raise ContractError(f"{self.where}: not a subclass of {base.__module__}.{base.__qualname__}")

    def is_documented(self) -> None:
        if not self.plugin.summary:
            raise ContractError(f"{self.where}: no docstring; its first paragraph is the plug-in's summary in the "
                                "docs")

    def explains_its_parameters(self) -> None:
        unexplained = [key for key, param in self.plugin.schema().items() if not param.help]
        if unexplained:
            raise ContractError(f"{self.where}: parameter(s) {', '.join(unexplained)} without a help text")

    def takes_what_its_kind_hands_it(self) -> None:
        plugin = self.plugin
        _check_signature(self.cls, [key for key in plugin.schema() if key not in plugin.params], self.context,
                         self.where, takes_params=getattr(self.cls, "Params", None) is not None)

    def refuses_values_outside_its_declaration(self) -> None:
        """Its ``Params``, built from Python as from a config, refuse each value outside a setting's declaration
        (below its bounds or above them, not among its choices, of another type, of another length): scikit-learn's
        way of feeding an estimator what it must refuse."""
        declared = getattr(self.cls, "Params", None)
        if declared is None:
            return
        schema = schema_of(declared)
        given = {key: value for key, value in self.params.items() if key in schema}
        for key, param in schema.items():
            for bad in bad_values(param):
                try:
                    declared(**{**given, key: bad})
                except ConfigError:
                    continue
                except TypeError as err:  # a required setting the check was not given
                    raise ContractError(f"{self.where}: its Params cannot be built from {shown(given)} ({err}); "
                                        "give its required parameters") from None
                raise ContractError(f"{self.where}: its Params take {key}={shown(bad)}, outside its declaration "
                                    f"({param.describe()}); refuse it in the Params (a setting's bounds, rules())")

    def builds_from_its_schema(self) -> Any:
        self._built = self._build()
        return self._built

    @property
    def built(self) -> Any:
        """The object built from the schema (built now, the first time a check asks)."""
        return self._built if self._built is not None else self.builds_from_its_schema()

    def _build(self) -> Any:
        plugin = self.plugin
        try:
            return build(plugin, check(dict(self.params), plugin.schema(), self.where), **self.context)
        except ContractError:
            raise
        except Exception as err:
            raise ContractError(f"{self.where}: built from {self.params}: {type(err).__name__}: {err}") from err

    def keeps_its_params(self) -> None:
        plugin = self.plugin
        checked = check(dict(self.params), plugin.schema(), self.where)
        _check_kept(self.cls, self.built,
                    {key: value for key, value in checked.items() if key in plugin.params}, self.where)

    def hands_on_its_state(self) -> None:
        if hasattr(self.built, "state_dict"):
            again = [self._build() for _ in range(2)]  # two more: the object built keeps its own state
            try:
                _check_state(self.plugin, again[0], again[1], self.where)
            except ContractError:
                raise
            except Exception as err:
                raise ContractError(f"{self.where}: its state handed over: {type(err).__name__}: {err}") from err


def check_plugin(cls: type, params: dict[str, Any] | None = None, *, registered_as: tuple[str, str] | None = None,
                 build_it: bool = True, **context) -> Any:
    """Run the contract's checks (see the module docstring, :class:`PluginContract`) on the plug-in class ``cls``
    (``registered_as`` (kind, name), where it is registered more than once), built with ``params`` (its required
    parameters; the rest take their defaults) and ``context`` (what its kind hands it besides: a head's ``hidden``
    size); returns the object built. ``build_it=False`` checks the declarations alone, for a plug-in whose
    constructor loads what the machine lacks (a hub model, offline). A broken check is a :class:`ContractError`
    naming it."""
    contract = PluginContract(cls, params, registered_as=registered_as, build_it=build_it, **context)
    for _, run in contract.checks():
        run()
    return contract.built if build_it else None


def parametrize_with_checks(plugins: Iterable[type | tuple[type, dict[str, Any]]], **options) -> Any:
    """A ``pytest.mark.parametrize`` over every check of each plug-in (a class, or (class, params)), one test id per
    plug-in and check (``Triplet-refuses_bad_values``), as scikit-learn's: ``@parametrize_with_checks([MyLoss])``
    then ``def test_contract(check): check()``. ``options``: :class:`PluginContract`'s keywords."""
    import pytest

    cases = []
    for entry in plugins:
        cls, params = entry if isinstance(entry, tuple) else (entry, None)
        cases += [pytest.param(run, id=f"{cls.__qualname__}-{name}")
                  for name, run in PluginContract(cls, params, **options).checks()]
    return pytest.mark.parametrize("check", cases)


def bad_values(param: Param) -> list[Any]:
    """Values ``param`` must refuse, from its declaration: below or above its bounds, outside its choices, of none
    of its types, with one item too many."""
    kinds = param.type if isinstance(param.type, tuple) else (param.type,)
    found: list[Any] = []
    if param.min is not None:
        found.append(param.min if param.above else param.min - 1)
    if param.max is not None:
        found.append(param.max if param.below else param.max + 1)
    if isinstance(param.choices, tuple) and param.choices and all(isinstance(c, str) for c in param.choices):
        found.append("-".join(param.choices) + "-none-of-these")
    found.append(3.5 if dict in kinds else {"not": "a value"})
    if param.length is not None:
        found.append([param.items.default if param.items and param.items.default is not REQUIRED else 0]
                     * (param.length + 1))
    return found


def _check_signature(cls: type, added: list[str], context: dict[str, Any], where: str, takes_params: bool) -> None:
    """The constructor takes the parameters its kind ``added`` (and the context) as keywords, and requires nothing
    else (that it takes its ``Params`` first and none of its settings again is checked where it is registered,
    :func:`cselab.registry.register`)."""
    parameters = list(inspect.signature(cls).parameters.values())  # the constructor's, without self
    rest = parameters[1:] if takes_params and parameters[0].kind != parameters[0].VAR_POSITIONAL else parameters
    taken = {p.name for p in rest if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    if not any(p.kind == p.VAR_KEYWORD for p in rest):
        missing = sorted((set(added) | set(context)) - taken)
        if missing:
            raise ContractError(f"{where}: its constructor does not take {', '.join(missing)} as keywords (what its "
                                "kind adds to its Params)")
    required = [p.name for p in rest if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
                and p.name not in added and p.name not in context]
    if required:
        raise ContractError(f"{where}: its constructor requires {', '.join(required)}, which is none of what its "
                            "kind hands it (its Params, its views, the kind's context)")


def _check_kept(cls: type, built: Any, own: dict[str, Any], where: str) -> None:
    """A plug-in that declares ``Params`` keeps the instance it was built with as ``self.params``."""
    declared = getattr(cls, "Params", None)
    if declared is not None and getattr(built, "params", None) != declared(**own):
        raise ContractError(f"{where}: self.params is not the Params it was built with "
                            f"({shown(getattr(built, 'params', None), 80)}); hand it to the base class's constructor")


def _check_state(plugin: Plugin, built: Any, again: Any, where: str) -> None:
    """``built``'s state, made to differ from a fresh one's (its tensors drawn anew, a source of negatives given a few
    batches to remember), handed to ``again``, a second instance, gives back the same state (extra state included)."""
    with torch.no_grad():
        for value in built.state_dict().values():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                value.copy_(torch.randn_like(value))
            elif isinstance(value, torch.Tensor) and value.dtype != torch.bool:
                value.add_(1)
        if plugin.kind == "negatives":
            for _ in range(3):
                built.remember(torch.randn(4, 8))
    saved = built.state_dict()
    again.load_state_dict(saved)
    lost = _differences(saved, again.state_dict())
    if lost:
        raise ContractError(f"{where}: its state does not come back when handed to a second instance ({lost[0]}); "
                            "a resumed run would not continue this one (check get_extra_state/set_extra_state)")


def _differences(saved: Any, restored: Any, key: str = "state") -> list[str]:
    """Where ``restored`` differs from ``saved`` (mappings, sequences, tensors and plain values compared alike)."""
    if isinstance(saved, torch.Tensor) or isinstance(restored, torch.Tensor):
        same = isinstance(saved, torch.Tensor) and isinstance(restored, torch.Tensor) and \
            saved.shape == restored.shape and bool(torch.equal(saved.cpu(), restored.cpu()))
        return [] if same else [f"{key} differs"]
    if isinstance(saved, dict) and isinstance(restored, dict):
        if saved.keys() != restored.keys():
            return [f"{key} has keys {sorted(map(str, restored))}, not {sorted(map(str, saved))}"]
        return [found for name in saved for found in _differences(saved[name], restored[name], f"{key}.{name}")]
    if isinstance(saved, (list, tuple)) and isinstance(restored, (list, tuple)):
        if len(saved) != len(restored):
            return [f"{key} has {len(restored)} items, not {len(saved)}"]
        return [found for i, (a, b) in enumerate(zip(saved, restored)) for found in _differences(a, b, f"{key}[{i}]")]
    return [] if saved == restored else [f"{key} is {shown(restored, 60)}, not {shown(saved, 60)}"]
