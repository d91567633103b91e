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
from typing import Any

import torch

from cselab.files import shown
from cselab.registry import KINDS, Plugin, build, check, contract_of, get, names


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


def check_plugin(cls: type, params: dict[str, Any] | None = None, *, registered_as: tuple[str, str] | None = None,
                 build_it: bool = True, **context) -> Any:
    """Run the contract's checks (see the module docstring) on the plug-in class ``cls`` (``registered_as`` (kind,
    name), where it is registered more than once), built with ``params`` (its required parameters; the rest take
    their defaults) and ``context`` (what its kind hands it besides: a head's ``hidden`` size); returns the object
    built. ``build_it=False`` checks the declarations alone, for a plug-in whose constructor loads what the machine
    lacks (a hub model, offline). A broken check is a :class:`ContractError` naming it."""
    plugin = registered(cls, *(registered_as or (None, None)))
    where = f"{plugin.kind} {plugin.name!r} ({cls.__module__}.{cls.__qualname__})"
    base = contract_of(plugin.kind)
    if not issubclass(cls, base):
        raise ContractError(f"{where}: not a subclass of {base.__module__}.{base.__qualname__}")
    if not plugin.summary:
        raise ContractError(f"{where}: no docstring; its first paragraph is the plug-in's summary in the docs")
    schema = plugin.schema()
    unexplained = [key for key, param in schema.items() if not param.help]
    if unexplained:
        raise ContractError(f"{where}: parameter(s) {', '.join(unexplained)} without a help text")
    _check_signature(cls, [key for key in schema if key not in plugin.params], context, where,
                     takes_params=getattr(cls, "Params", None) is not None)
    if not build_it:
        return None
    try:
        checked = check(dict(params or {}), schema, where)
        built = build(plugin, checked, **context)
        _check_kept(cls, built, {key: value for key, value in checked.items() if key in plugin.params}, where)
        if hasattr(built, "state_dict"):
            again = [build(plugin, check(dict(params or {}), schema, where), **context) for _ in range(2)]
            _check_state(plugin, again[0], again[1], where)  # two more: the object returned keeps its own state
    except ContractError:
        raise
    except Exception as err:  # built from its schema, or its state handed over: the contract's last two checks
        raise ContractError(f"{where}: built from {params or {}}: {type(err).__name__}: {err}") from err
    return built


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
