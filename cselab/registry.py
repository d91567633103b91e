"""One registry for every plug-in kind, each plug-in declared once next to its code.

A plug-in is a name and a class, a subclass of its kind's base class (the kind's contract, declared with
:func:`contract`: :mod:`cselab.train.plugins.kinds`, :class:`cselab.encoders.pooling.Pooler`,
:class:`~cselab.probes.suite.Suite` ...), whose parameters are one checked type, its nested :class:`Params` (each
field a :func:`setting`): the registry's schema, the docs table and ``--show-config`` come from it, and the plug-in is
built with one instance of it (:func:`build`)::

    @register("loss", "triplet")
    class Triplet(Loss):
        roles = ("anchor", "positive", "negative")

        @dataclass(frozen=True, kw_only=True)
        class Params(Loss.Params):
            margin: float = setting(0.5, "the positive beats the negative by at least this", min=0.0)

        def forward(self, views, context):
            ... self.params.margin ...

Kinds (the modules that register them): ``loss`` (:mod:`cselab.train.plugins.losses`), ``input_augment``,
``output_augment`` and ``token_augment`` (:mod:`cselab.train.plugins.augmentations`), ``negatives``
(:mod:`cselab.train.plugins.negatives`), ``logit_transform`` (:mod:`cselab.train.plugins.transforms`), ``weight_hook``
(:mod:`cselab.train.plugins.hooks`), ``head`` (:mod:`cselab.train.plugins.heads`), ``adapter``
(:mod:`cselab.train.plugins.adapters`), ``text`` (:mod:`cselab.train.plugins.texts`), ``pooler`` and ``layer_pooler``
(:mod:`cselab.encoders.pooling`), ``suite``
(:mod:`cselab.probes`; a suite on its dev split is also what ``training.dev`` selects checkpoints with) and
``backtranslation`` (:mod:`cselab.augment.backtranslate`). Every kind is found one way, :func:`discover`, when a plug-in
of it is first asked for: those modules (:data:`SOURCES`), then the modules installed packages declare in the kind's
entry-point group; :func:`origin` names the package of a plug-in a package adds.
:func:`check` validates a config section against a schema: every key known, every value type-checked, coerced and
range-checked, defaults filled in; a mistake is a :class:`~cselab.errors.ConfigError` naming the key and what is
allowed.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import math
import os
import pkgutil
import re
import sys
import traceback
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from cselab.boundary import Check, guard, package_of
from cselab.errors import ConfigError, PluginError, did_you_mean
from cselab.files import clipped, shown

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

REQUIRED = object()  # a Param default: the key must be given
NAME = re.compile(r"[a-z0-9_-]+")  # the names of plug-ins, views and losses
MAX_SEED = 2**32 - 1  # the largest seed numpy, scikit-learn and torch all take
MAX_SEEDS = 1000  # seeds of one sweep (`cselab sweep --seeds`): each is a training run
TRAIN_KINDS = ("loss", "input_augment", "output_augment", "token_augment", "negatives", "logit_transform",
               "weight_hook", "head", "adapter", "text")
KINDS = (*TRAIN_KINDS, "pooler", "layer_pooler", "suite", "backtranslation")
PluginClass = TypeVar("PluginClass", bound=type)  # what @register returns: the class it registers

#: Where each kind's plug-ins are found (:func:`discover`): its entry-point group, and cselab's own modules that
#: register it (a package stands for each of its modules).
SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    **{kind: ("cselab.train_plugins", ("cselab.train.plugins",)) for kind in TRAIN_KINDS},
    "pooler": ("cselab.poolers", ("cselab.encoders.pooling",)),
    "layer_pooler": ("cselab.poolers", ("cselab.encoders.pooling",)),
    "suite": ("cselab.suites", ("cselab.probes",)),
    "backtranslation": ("cselab.backtranslation", ("cselab.augment.backtranslate", "cselab.augment.ct2")),
}


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


@dataclass(frozen=True)
class Param:
    """A typed parameter: ``type`` is bool, int, float, str, list, tuple, dict or ``os.PathLike`` (a path, given as
    a string too), or a tuple of them; ``min``/``max`` bound numbers (``above``/``below``: strictly); ``words`` are
    the strings allowed beside a number; ``choices`` lists the allowed values (those of a plug-in kind when it is
    ``"plugin:KIND"``); ``nullable`` allows None; ``items`` types a list's or tuple's items and ``length`` fixes its
    length; ``plugin`` makes the value a ``{kind: NAME, ...}`` mapping checked against that kind's plug-in. An empty
    string, list or tuple is refused (code that reads the value would take it for no value at all: peft's default
    modules for an empty ``target_modules``, no prompt for an empty ``prompt``) unless ``empty`` allows it, which it
    does by default where the default itself is empty."""

    type: type | tuple[type, ...]
    default: Any = REQUIRED
    help: str = ""
    min: float | None = None
    max: float | None = None
    above: bool = False
    below: bool = False
    choices: tuple[Any, ...] | str | Callable[[], Sequence[Any]] | None = None
    nullable: bool = False
    items: Param | None = None
    length: int | None = None
    plugin: str | None = None
    words: tuple[str, ...] | None = None
    empty: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.choices, str) and not self.choices.startswith("plugin:"):
            raise ValueError(f"Param choices {self.choices!r}: a string names a plug-in kind, 'plugin:KIND'; give "
                             "the allowed values as a tuple")

    def allowed(self) -> tuple[Any, ...] | None:
        """The allowed values: ``choices``, a kind's plug-ins for ``"plugin:KIND"``, what a function ``choices``
        gives when called (values found when they are checked, not when the schema is declared)."""
        if isinstance(self.choices, str):  # "plugin:KIND", the one string form
            return tuple(names(self.choices.removeprefix("plugin:")))
        return tuple(self.choices()) if callable(self.choices) else self.choices

    def describe(self) -> str:
        """The allowed values in words, for error messages and generated docs."""
        if self.plugin:
            return f"a mapping with kind: one of {', '.join(names(self.plugin))}"
        allowed = self.allowed()
        if allowed:
            return "one of " + ", ".join(map(str, allowed)) + (" or null" if self.nullable else "")
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        string = " or ".join(map(repr, self.words)) if self.words else "a string"
        words = " or ".join({bool: "true/false", int: "a whole number", float: "a number", str: string,
                             list: "a list", tuple: "a list", dict: "a mapping", os.PathLike: "a path"}[t]
                            for t in types)
        bounds = []
        if self.min is not None:
            bounds.append(f"{'>' if self.above else '>='} {_bound(self.min)}")
        if self.max is not None:
            bounds.append(f"{'<' if self.below else '<='} {_bound(self.max)}")
        if self.length is not None:
            bounds.append(f"of {self.length} items")
        return " ".join([words, " and ".join(bounds)] if bounds else [words]) + (" or null" if self.nullable else "")

    def check(self, value: Any, where: str) -> Any:
        """``value`` coerced to this parameter's type, or a ConfigError naming ``where``."""
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{where}: null is not allowed; expected {self.describe()}")
        if self.plugin:
            return check_plugin(self.plugin, value, where)
        value = self._coerce(value, where)
        if isinstance(value, (str, list, tuple)) and not value and not self._takes_empty():
            kind = "an empty string" if isinstance(value, str) else "an empty list"
            raise ConfigError(f"{where}: {kind} is no value (it would be read as none); give one"
                              + (", or leave the key out" if self.default is not REQUIRED else ""))
        allowed = self.allowed()
        if allowed is not None and value not in allowed:
            raise ConfigError(f"{where}: {shown(value)} is not allowed; expected {self.describe()}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._bounds(value, where)
        if isinstance(value, (list, tuple)):
            if self.length is not None and len(value) != self.length:
                raise ConfigError(f"{where}: {shown(value)} has {len(value)} items; expected {self.describe()}")
            if self.items is not None:
                value = type(value)(self.items.check(item, f"{where}[{i}]") for i, item in enumerate(value))
        return value

    def _takes_empty(self) -> bool:
        if self.empty is not None:
            return self.empty
        return isinstance(self.default, (str, list, tuple)) and not self.default

    def _coerce(self, value: Any, where: str) -> Any:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        for kind in types:
            if kind is bool and isinstance(value, bool):
                return value
            if kind is int and isinstance(value, int) and not isinstance(value, bool):
                return value
            if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
                try:
                    return float(value)
                except OverflowError:  # an int too large for a float
                    continue
            if kind is float and isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string
                try:
                    number = float(value)
                except ValueError:
                    continue
                if math.isfinite(number):
                    return number
            if kind is str and isinstance(value, str) and (self.words is None or value in self.words):
                return value
            if kind in (list, dict) and isinstance(value, kind):
                return value
            if kind is tuple and isinstance(value, (list, tuple)):
                return tuple(value)
            if kind is os.PathLike and isinstance(value, (str, os.PathLike)):
                return value
        raise ConfigError(f"{where}: {shown(value)} is not valid; expected {self.describe()}")

    def _bounds(self, value: float, where: str) -> None:
        low_fails = self.min is not None and (value <= self.min if self.above else value < self.min)
        high_fails = self.max is not None and (value >= self.max if self.below else value > self.max)
        if low_fails or high_fails or (isinstance(value, float) and not math.isfinite(value)):
            raise ConfigError(f"{where}: {shown(value)} is out of range; expected {self.describe()}")


@dataclass(frozen=True)
class Plugin:
    """A registered plug-in: its kind, name and class (a subclass of the kind's base class, :func:`contract`, whose
    ``Params`` declares its parameters, and which may add parameters that name views through a ``view_schema()``
    class method, and numeric data columns through ``value_schema()``)."""

    kind: str
    name: str
    cls: Any = field(repr=False)  # the class: its kind's class attributes are read from it
    summary: str = ""

    @property
    def params(self) -> dict[str, Param]:
        """The plug-in's own parameters: the schema of its ``Params`` (none for a class without one)."""
        declared = getattr(self.cls, "Params", None)
        return schema_of(declared) if declared is not None else {}

    def schema(self) -> dict[str, Param]:
        """The parameters, those naming views first, then those naming numeric data columns (a loss's
        ``value_schema()``)."""
        views, values = getattr(self.cls, "view_schema", None), getattr(self.cls, "value_schema", None)
        return {**(views() if views is not None else {}), **(values() if values is not None else {}), **self.params}

    def nested(self, params: Mapping[str, Any], where: str = "") -> list[tuple[str, Plugin]]:
        """The plug-ins ``params`` sets in settings declared ``plugin=KIND`` (info_nce's ``transform``): each one's
        key and plug-in (an unknown kind named by ``where``, the parameters' section)."""
        return [(key, get(param.plugin, params[key]["kind"], f"{where}.{key}.kind" if where else f"{key}.kind"))
                for key, param in self.params.items()
                if param.plugin and isinstance(params.get(key), Mapping) and "kind" in params[key]]


_REGISTRY: dict[str, dict[str, Plugin]] = {kind: {} for kind in KINDS}
_CONTRACTS: dict[str, type] = {}
_WORK: dict[str, dict[str, Check | None]] = {}  # kind -> its work methods and their return checks (contract())
_LOADING: dict[str, str] = {}  # entry-point modules being imported -> their package (name==version)
_BY_CLASS: dict[type, Plugin] = {}  # a registered class -> its plug-in (the first, where registered more than once)
_DISCOVERED: dict[str, dict[str, str]] = {}  # entry-point group -> the modules it imported -> "package==version"
_REGISTERED_BY: dict[tuple[str, str], str] = {}  # (kind, name) -> the entry-point module whose import registered it


def _import_own(module: str) -> None:
    """Import one of cselab's own plug-in modules; one that does not parse or raises (a user's module dropped into
    the folder, a checkout with a broken edit) is a ConfigError naming its file and line."""
    try:
        importlib.import_module(module)
    except Exception as err:
        spec = importlib.util.find_spec(module)
        path = spec.origin if spec is not None and spec.origin else module
        where = next((frame for frame in reversed(traceback.extract_tb(err.__traceback__))
                      if frame.filename == path), None)
        line = getattr(err, "lineno", None) if isinstance(err, SyntaxError) else where.lineno if where else None
        raise ConfigError(f"{path}{f':{line}' if line else ''}: the plug-in module cannot be imported "
                          f"({type(err).__name__}: {clipped(err)}); fix or remove it") from None


def discover(kind: str) -> dict[str, str]:
    """Import every module that registers plug-ins of ``kind``, once: cselab's own (:data:`SOURCES`), then each
    module an installed package declares in the kind's entry-point group (an error names the package). Returns the
    modules of the group's entry points, each with its package and version (``name==version``)."""
    group, own = SOURCES[kind]
    if group in _DISCOVERED:
        return _DISCOVERED[group]
    _DISCOVERED[group] = found = {}  # before importing: a module that asks for its own kind's names finds them so far
    try:
        for name in own:
            _import_own(name)
            for info in pkgutil.iter_modules(getattr(sys.modules[name], "__path__", [])):
                _import_own(f"{name}.{info.name}")
        for entry in entry_points(group=group):
            module = entry.value.split(":")[0]
            package = f"{entry.dist.name}=={entry.dist.version}" if entry.dist else "an installed package"
            before = {(kind, name) for kind, plugins in _REGISTRY.items() for name in plugins}
            try:
                _LOADING[module] = package  # what registers while it is imported names the package
                importlib.import_module(module)
            except Exception as err:  # the package's module to fix, named with the package
                for kind, plugins in _REGISTRY.items():  # what it registered before it failed: as if never imported
                    for name in [name for name in plugins if (kind, name) not in before]:
                        del plugins[name]
                said = str(err) if isinstance(err, PluginError) else clipped(err)  # a refused plug-in: said whole
                raise ConfigError(f"entry point {entry.name} of {package} (group {group}): importing {module!r} "
                                  f"failed: {type(err).__name__}: {said}") from None
            finally:
                _LOADING.pop(module, None)
            _REGISTERED_BY.update({(kind, name): module for kind, plugins in _REGISTRY.items() for name in plugins
                                   if (kind, name) not in before})
            found[module] = package
    except BaseException:
        del _DISCOVERED[group]  # found again, and refused again, next time
        raise
    return found


def origin(plugin: Plugin) -> str | None:
    """The package (``name==version``, as installed now) whose entry point registered ``plugin``, in whichever of
    its modules; None for cselab's own and for a method's ``imports``."""
    found = discover(plugin.kind)
    module = _REGISTERED_BY.get((plugin.kind, plugin.name), plugin.cls.__module__)
    return next((package for name, package in found.items() if module == name or module.startswith(name + ".")),
                None)


def _package(module: str) -> str:
    """The package a plug-in class's ``module`` comes from: the entry point's being imported, else the installed
    distribution that holds it (:func:`cselab.boundary.package_of`)."""
    loading = next((package for name, package in _LOADING.items() if module == name or
                    module.startswith(name + ".")), None)
    return loading or package_of(module)


def origins(kind: str) -> dict[str, str]:
    """The plug-ins of ``kind`` that installed packages add: name -> package (``name==version``)."""
    return {name: package for name in names(kind) if (package := origin(get(kind, name))) is not None}


def contract(kind: str, base: type, work: Mapping[str, Check | None] | None = None) -> None:
    """Declare that every plug-in of ``kind`` is a subclass of ``base`` (:mod:`cselab.train.plugins.kinds`), whose
    ``work`` methods (name -> the check of what it returns, :mod:`cselab.boundary`) are guarded in every plug-in of it:
    what one raises names the plug-in, what one returns is checked."""
    _CONTRACTS[kind] = base
    _WORK[kind] = dict(work or {})


def described(obj: Any) -> str:
    """``"KIND 'NAME' (PACKAGE==VERSION)"`` of the registered plug-in ``obj`` is (or a class of it, or a class
    that derives from one); a class registered nowhere by its name and package."""
    cls = obj if isinstance(obj, type) else type(obj)
    for klass in cls.__mro__:
        plugin = _BY_CLASS.get(klass)
        if plugin is not None:
            return f"{plugin.kind} {plugin.name!r} ({origin(plugin) or _package(klass.__module__)})"
    return f"{cls.__qualname__} ({package_of(cls.__module__)})"


def contract_of(kind: str) -> type:
    """The base class every plug-in of ``kind`` subclasses (``object`` for a kind that declares none)."""
    discover(kind)
    return _CONTRACTS.get(kind, object)


def register(kind: str, name: str) -> Callable[[PluginClass], PluginClass]:
    """Class decorator: register the class as plug-in ``name`` of ``kind``; its ``Params``, where it has one, is a
    frozen, keyword-only :class:`Params` dataclass (a nested class left undecorated would declare nothing)."""
    if kind not in _REGISTRY:
        raise ValueError(f"unknown plug-in kind {kind!r}; kinds: {', '.join(KINDS)}")
    if not NAME.fullmatch(name):  # names reach YAML keys, log keys and --set
        raise ValueError(f"plug-in name {name!r}: lower-case letters, digits, _ and - only")

    def add(cls: PluginClass) -> PluginClass:
        base = _CONTRACTS.get(kind, object)  # every kind declares its base when its module is imported

        def label() -> str:  # (only where one is refused: finding the package reads every distribution's files)
            module = getattr(cls, "__module__", "?")
            return f"{kind} {name!r} ({module}.{getattr(cls, '__name__', cls)}; {_package(module)})"
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise PluginError(f"{label()}: a {kind} plug-in is a subclass of {base.__module__}.{base.__name__}")
        if name in _REGISTRY[kind]:
            raise ValueError(f"{kind} {name!r} is registered twice")
        _check_params_type(cls, label)
        _check_params_taken(cls, label)
        if hasattr(cls, "validate"):  # the form before Params.rules: it would never be called
            raise PluginError(f"{label()}: {cls.__qualname__}.validate is not called; state rules across its "
                              "parameters as rules(self) on its Params (self.at(KEY) names a key, self.beside a view)")
        summary = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        _REGISTRY[kind][name] = plugin = Plugin(kind, name, cls, summary=summary)
        _BY_CLASS.setdefault(cls, plugin)
        guard(cls, _WORK.get(kind, {}), described)
        return cls
    return add


def _check_params_type(cls: type, label: Callable[[], str]) -> None:
    declared = getattr(cls, "Params", None)
    if declared is None:
        return
    if not (isinstance(declared, type) and issubclass(declared, Params)):
        raise PluginError(f"{label()}: {cls.__qualname__}.Params is a subclass of cselab.registry.Params")
    undecorated = "__dataclass_fields__" not in vars(declared)
    if undecorated or any(not f.kw_only for f in fields(declared)):  # (frozen: its base is, as Python requires)
        raise PluginError(f"{label()}: declare {cls.__qualname__}.Params with @dataclass(frozen=True, kw_only=True)")
    for key, param in schema_of(declared).items():  # each default within its own bounds, types and listed choices
        if param.default is not REQUIRED and not (param.default is None and not param.nullable):
            static = replace(param, plugin=None, choices=param.choices if isinstance(param.choices, tuple) else None)
            try:  # (choices found when a value is checked, a kind's plug-ins say, are not looked up while importing)
                static.check(copy.deepcopy(param.default), f"{cls.__qualname__}.Params.{key}")
            except ConfigError as err:
                raise PluginError(f"{label()}: the default of {err}") from None


def _check_params_taken(cls: type, label: Callable[[], str]) -> None:
    """A plug-in with ``Params`` takes it first and none of its fields again as a constructor keyword (a keyword that
    no config reaches: the setting would be recorded and never used)."""
    declared = getattr(cls, "Params", None)
    if declared is None:
        return
    parameters = list(inspect.signature(cls).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    if not parameters or parameters[0].kind not in positional:
        raise PluginError(f"{label()}: its constructor does not take its Params first (cls(params, ...))")
    restated = sorted(p.name for p in parameters[1:] if p.name in {f.name for f in fields(declared)})
    if restated:
        raise PluginError(f"{label()}: its constructor takes {', '.join(restated)}, a setting of its Params, again "
                          "as a keyword, which no config reaches; read it from self.params")


def names(kind: str) -> list[str]:
    """The plug-ins of ``kind``, once every module that registers them is imported (:func:`discover`)."""
    discover(kind)
    return sorted(_REGISTRY[kind])


def get(kind: str, name: Any, where: str = "") -> Plugin:
    """The plug-in, or a ConfigError naming the valid ones."""
    if name not in _REGISTRY[kind]:
        discover(kind)
    if name not in _REGISTRY[kind]:
        label = kind.replace("_", " ")
        raise ConfigError(f"{where + ': ' if where else ''}unknown {label} {shown(name)}"
                          f"{did_you_mean(name, _REGISTRY[kind])}; known: {', '.join(sorted(_REGISTRY[kind]))}")
    return _REGISTRY[kind][name]


def check(section: Any, schema: dict[str, Param], where: str) -> dict[str, Any]:
    """``section`` (a mapping) validated against ``schema``: unknown keys, missing required keys, types, ranges;
    defaults filled in (a None default leaves the key out). A null given for a key that cannot be null means its
    default; a null given for a nullable key whose default is not null is kept (e.g. ``max_grad_norm: null``, no
    clipping), so that the resolved config loads back to itself."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where or 'the file'}: expected a mapping of keys, got {shown(section)}")
    unknown = sorted(set(section) - set(schema))
    if unknown:
        raise ConfigError(f"{_join(where, unknown[0])}: unknown key{did_you_mean(unknown[0], schema)}; known: "
                          f"{', '.join(sorted(schema))}")
    result: dict[str, Any] = {}
    for key, param in schema.items():
        given = section.get(key)
        if given is not None or (key in section and (param.nullable or param.default is REQUIRED)):
            value = param.check(given, _join(where, key))
            if value is None and param.default is not None:
                result[key] = None
        elif param.default is REQUIRED:
            raise ConfigError(f"{_join(where, key)}: required ({param.describe()})")
        else:
            value = copy.deepcopy(param.default)  # the schema's own default stays as declared
        if value is not None:
            result[key] = value
    return result


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def build(plugin: Plugin, params: Mapping[str, Any], **context: Any) -> Any:
    """The plug-in's object from its validated ``params``, the one constructor convention of every kind: its
    ``Params`` built from its own parameters, handed first (where its class declares one: the kinds a method
    configures); the parameters its kind adds (the views a loss reads, its data columns: None for one left out) and
    what the kind hands it besides (``context``: a head's ``hidden`` size) as keywords. A parameter that is itself a
    plug-in (``setting(..., plugin=KIND)``) is built here too and set as the object's attribute of that name (None
    where not given) once its constructor returns; its ``Params`` keeps the spec, what the config holds."""
    beside = {key: plain(params.get(key)) for key in plugin.schema() if key not in plugin.params}
    obj = plugin.cls(*_typed(plugin, params, "", beside), **context, **beside)
    for key, param in plugin.params.items():
        if param.plugin:
            setattr(obj, key, build_plugin(param.plugin, params.get(key)))
    return obj


def _typed(plugin: Plugin, params: Mapping[str, Any], where: str, beside: Mapping[str, Any]) -> tuple[Any, ...]:
    """The plug-in's ``Params`` from ``params`` (none where its class declares none), checked and its rules run
    with ``where`` and ``beside`` (:attr:`Params.beside`) known."""
    declared = getattr(plugin.cls, "Params", None)
    if declared is None:
        return ()
    token = _CHECKING.set((where, beside))
    try:
        return (declared(**{key: plain(params[key]) for key in plugin.params if key in params}),)
    finally:
        _CHECKING.reset(token)


def plain(value: Any) -> Any:
    """A plain copy of a value: mappings (read-only ones too) as dicts, tuples as lists, as YAML reads them and as a
    plug-in's constructor is given them."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def build_plugin(kind: str, spec: Mapping[str, Any] | None, **context: Any) -> Any:
    """The object of a checked ``{kind: NAME, ...parameters}`` mapping of plug-in ``kind`` (None for None)."""
    return None if spec is None else build(get(kind, spec["kind"]), spec, **context)


def check_plugin(kind: str, value: Any, where: str) -> dict[str, Any]:
    """A ``{kind: NAME, params...}`` mapping checked against plug-in NAME's schema (:func:`check_params`)."""
    if not isinstance(value, dict) or "kind" not in value:
        raise ConfigError(f"{where}: expected a mapping with kind: one of {', '.join(names(kind))}")
    plugin = get(kind, value["kind"], f"{where}.kind")
    return {"kind": plugin.name, **check_params(plugin, {k: v for k, v in value.items() if k != "kind"}, where)}


def check_params(plugin: Plugin, params: Mapping[str, Any], where: str,
                 extra: Mapping[str, Param] | None = None) -> dict[str, Any]:
    """``params`` checked against the plug-in's schema (and the ``extra`` keys its caller adds: a loss's
    ``weight``), defaults filled in, then its ``Params`` built, which runs the rules across its fields
    (:meth:`Checked.rules`) naming ``where``, with the kind's own parameters in :attr:`Params.beside`."""
    checked = check(dict(params), {**(extra or {}), **plugin.schema()}, where)
    _typed(plugin, checked, where, {key: checked.get(key) for key in plugin.schema() if key not in plugin.params})
    return checked


def setting(default: Any, help: str = "", *restated: Any, **constraints: Any) -> Any:
    """A dataclass field that declares its :class:`Param`: its type, and whether it takes None, read from the
    field's annotation (:func:`param_type`), ``constraints`` (``min``, ``choices``, ``items`` ...) the rest. A list or
    mapping default is copied for each instance; a ``REQUIRED`` one has no default (in a ``kw_only`` dataclass it may
    stand anywhere)."""
    if restated or not isinstance(help, str) or "type" in constraints or "nullable" in constraints:
        raise TypeError("setting(DEFAULT, HELP, **constraints): the type, and None, are read from the field's "
                        "annotation (e.g. `count: int | None = setting(None, \"...\")`)")
    metadata = {"setting": (help, constraints)}
    if default is REQUIRED:
        return field(metadata=metadata)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


#: The types a :class:`Param` checks (a generic's origin: ``list[str]`` is a list).
PARAM_TYPES = (bool, int, float, str, list, tuple, dict, os.PathLike)


def param_type(annotation: Any) -> tuple[type | tuple[type, ...], bool]:
    """A field annotation's :class:`Param` type and whether it takes None: ``int | None`` -> (int, True),
    ``list[str]`` -> (list, False), ``bool | str`` -> ((bool, str), False), ``str | os.PathLike`` -> os.PathLike (a
    path, given as a string too)."""
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    members = typing.get_args(annotation) if union else (annotation,)
    kinds = [typing.get_origin(member) or member for member in members if member is not type(None)]
    if os.PathLike in kinds:
        kinds = [os.PathLike]
    unknown = [kind for kind in kinds if kind not in PARAM_TYPES]
    if unknown or not kinds:
        raise TypeError(f"{annotation!r}: a setting's annotation is made of "
                        f"{', '.join(kind.__name__ for kind in PARAM_TYPES)} and None")
    return (kinds[0] if len(kinds) == 1 else tuple(kinds)), type(None) in members


#: While the registry builds a plug-in's Params: the section it is read from and the kind's parameters beside it.
_CHECKING: ContextVar[tuple[str, Mapping[str, Any] | None]] = ContextVar("cselab_checking", default=("", None))


class Checked:
    """The one base of cselab's config dataclasses (a method's ``encoder`` and ``training`` sections, a plug-in's
    ``Params``, the augment config, the classifier settings, the probe options): each field declares its
    :class:`Param` with :func:`setting`, and building an object checks every field against that schema (one error
    format: the key, the value, what is allowed), coerces the values in place (frozen dataclasses too), then applies
    :meth:`rules`, the one place rules across fields are stated. ``where`` names the object in errors: the class's,
    or, for a plug-in's Params, the config section the registry reads it from (``losses.sup``)."""

    where: ClassVar[str] = ""

    def __post_init__(self) -> None:
        section = _CHECKING.get()[0]
        if section:
            object.__setattr__(self, "where", section)  # this object's section, over the class's
        data = asdict(cast("DataclassInstance", self))  # every Checked is a dataclass
        for name, value in check(data, schema_of(type(self)), self.where).items():
            object.__setattr__(self, name, value)
        self.rules()

    def rules(self) -> None:
        """Refuse (a ConfigError naming ``self.at(KEY)``) a combination of checked values that has no meaning;
        nothing by default."""

    def at(self, key: str) -> str:
        """``where.KEY``, a field's name in an error."""
        return _join(self.where, key)


@dataclass(frozen=True, kw_only=True)
class Params(Checked):
    """A plug-in's parameters (this one: none): a plug-in class declares its own as a nested subclass of its kind's
    ``Params``, frozen and keyword-only, each field a :func:`setting`; its schema is the registry's (checked configs,
    the docs table, ``--show-config``), and one instance, ``self.params``, is what the plug-in reads. Its
    :meth:`~Checked.rules` may read :attr:`beside`."""

    def __post_init__(self) -> None:
        beside = _CHECKING.get()[1]
        object.__setattr__(self, "beside", None if beside is None else dict(beside))
        super().__post_init__()

    #: The parameters the plug-in's kind adds beside these (a loss's views and data columns, None for one left
    #: out), as checked, where the registry builds the object; None for one built by hand.
    beside: ClassVar[Mapping[str, Any] | None]


def schema_of(cls: type[Any]) -> dict[str, Param]:
    """The schema a dataclass declares with :func:`setting`: each field's Param, typed by its annotation, with the
    field's default (read once per class; a mapping of the caller's own)."""
    if cls not in _SCHEMAS:
        _SCHEMAS[cls] = _schema(cls)
    return dict(_SCHEMAS[cls])


_SCHEMAS: dict[type, dict[str, Param]] = {}  # each class's schema, read once


def _schema(cls: type[Any]) -> dict[str, Param]:
    hints = typing.get_type_hints(cls)
    schema: dict[str, Param] = {}
    for f in fields(cls):
        help, constraints = f.metadata["setting"]
        kind, nullable = param_type(hints[f.name])
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        schema[f.name] = Param(kind, REQUIRED if default is MISSING else default, help, nullable=nullable,
                               **constraints)
    return schema
