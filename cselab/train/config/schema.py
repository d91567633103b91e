"""The method config's schema, and :func:`resolve`: a method validated to the leaf, defaults filled in.

Every section has a typed schema, declared as a checked dataclass (:class:`~cselab.registry.Checked`: the file's top
level, a loss's common keys, its ``matryoshka``, ``hooks``; the encoder, view and training sections of
:mod:`~cselab.train.config.sections`); plug-in sections (a loss's parameters, a view's ``augment``,
``hooks.weights``, ``generated``) take theirs from the plug-in they name (its ``Params``). A mistake is a
:class:`~cselab.errors.ConfigError` naming the key and what is allowed, raised before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cselab.errors import ConfigError
from cselab.files import shown
from cselab.registry import (NAME, REQUIRED, Checked, Param, Plugin, check, check_params, check_plugin, get, schema_of,
                             setting)
from cselab.train.config.method import MethodConfig
from cselab.train.config.sections import ENCODER, TRAINING, VIEW, TrainingConfig, head_spec


@dataclass(frozen=True, kw_only=True)
class MethodFile(Checked):
    """A method file's top level: its name and data, and its sections (each checked by its own schema)."""

    method: str = setting(REQUIRED, "the method's name")
    description: str = setting("", "one line for --list-methods")
    data: str | None = setting(None, "corpus, cache or table trained on when --data is not given")
    data_columns: dict[str, str] | None = setting(
        None, "a table's column for each column the views read, e.g. {text: sent0, positive: sent1, "
        "hard_negative: hard_neg} (default: the table's own names or a known layout)")
    imports: list[str] = setting([], "modules imported first (a method's own plug-ins)", items=Param(str))
    texts: dict[str, Any] | None = setting(
        None, "a data column's texts changed before a training batch is tokenised: {COLUMN: {kind: NAME, ...}} "
        "(a text plug-in; SNCSE's released training: end_punctuation)")
    profile: str | None = setting(None, "the profile applied (a record)")
    encoder: dict[str, Any] = setting(REQUIRED, "how text becomes a vector (the encoder section)")
    views: dict[str, Any] = setting(REQUIRED, "the views a step encodes, by name")
    losses: dict[str, Any] = setting(REQUIRED, "the losses, by name")
    hooks: dict[str, Any] = setting({}, "step hooks")
    training: dict[str, Any] = setting(REQUIRED, "the optimisation and its schedule (the training section)")


@dataclass(frozen=True, kw_only=True)
class LossEntry(Checked):
    """The keys every loss of ``losses`` takes beside its plug-in's parameters."""

    kind: str | None = setting(None, "the plug-in, when the loss's name is not")
    weight: float = setting(1.0, "factor in the total loss", min=0.0)
    matryoshka: dict[str, Any] | None = setting(
        None, "Matryoshka training: {dims: [widths], weights: [one per width, default 1]}: the loss at each "
        "width the vectors are cut to, weighted and summed")


@dataclass(frozen=True, kw_only=True)
class Matryoshka(Checked):
    """A loss's ``matryoshka``: the widths its vectors are cut to, and a weight each."""

    dims: list[int] = setting(REQUIRED, "the widths the vectors are cut to", items=Param(int, min=1))
    weights: list[float] | None = setting(None, "one factor per width (default: 1 each)",
                                          items=Param(float, min=0.0))


@dataclass(frozen=True, kw_only=True)
class Hooks(Checked):
    """The ``hooks`` section: what a step does beside its forward and backward passes."""

    weights: dict[str, Any] | None = setting(None, "SAM/AWP", plugin="weight_hook")


TOP, LOSS, MATRYOSHKA, HOOKS = (schema_of(cls) for cls in (MethodFile, LossEntry, Matryoshka, Hooks))


def loss_plugin(name: str, params: Mapping[str, Any], where: str = "") -> Plugin:
    """The plug-in of loss ``name``: its ``kind`` when given (``{kind: NAME}``, as every other plug-in is chosen),
    else the loss's own name."""
    if params.get("kind"):
        return get("loss", params["kind"], f"{where}.kind" if where else "")
    return get("loss", name, where)


def reads_texts(plugin: Plugin, params: Mapping[str, Any], where: str = "") -> bool:
    """Whether loss ``plugin`` with ``params`` (the section ``where``) reads its views' tokens or texts: its
    ``needs_tokens``, or a nested plug-in's ``needs_reference`` (a guide encodes the texts)."""
    return plugin.cls.needs_tokens or any(getattr(nested.cls, "needs_reference", False)
                                          for _, nested in plugin.nested(params, where))


def named_models(plugin: Plugin, params: Mapping[str, Any], where: str = "") -> dict[str, str]:
    """The models loss ``plugin`` names with ``params`` (the section ``where``), by key (``teacher``,
    ``transform.guide``): its ``model_params`` and its nested plug-ins'."""
    own = {key: params[key] for key in plugin.cls.model_params if params.get(key) is not None}
    inner = {f"{key}.{name}": params[key][name] for key, nested in plugin.nested(params, where)
             for name in getattr(nested.cls, "model_params", ()) if params[key].get(name) is not None}
    return {**own, **inner}


def value_columns(losses: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The numeric data columns the resolved ``losses`` read (a scored pair's ``score``), each once."""
    return sorted({params[role] for name, params in losses.items()
                   for role in loss_plugin(name, params).cls.value_roles if params.get(role) is not None})


def _name(section: str, name: Any) -> str:
    """A view's or a loss's name: it names keys of the log and of ``--set``, so letters, digits, _ and - only."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(f"{section}: the name {shown(name)} is not allowed; names are lower-case letters, digits, "
                          "_ and -")
    return f"{section}.{name}"


def imported(config: dict[str, Any], source: str) -> list[str]:
    """The method's ``imports`` (checked before they are imported: the schema resolves after them)."""
    try:
        imports: list[str] = TOP["imports"].check(config.get("imports") or [], "imports")
        return imports
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None


def _views(views: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(views, dict) or not views:
        raise ConfigError("views: expected a mapping of view names to views")
    result = {}
    for name, view in views.items():
        if view is None:  # a view removed by `views.NAME: null`
            continue
        where = _name("views", name)
        result[name] = check(view or {}, VIEW, where)
        resolved = result[name]
        if ("of" in resolved) == ("column" in resolved):
            raise ConfigError(f"{where}: needs either column (a forward pass) or of (made from another view's "
                              "vectors)")
        if "of" in resolved and resolved["of"] not in views:
            raise ConfigError(f"{where}.of: {shown(resolved['of'])} is not a view; views: {', '.join(views)}")
        if "of" in resolved and "augment" not in resolved:
            raise ConfigError(f"{where}: is made of {shown(resolved['of'])} but has no augment")
        if "tokens" in resolved and ("of" in resolved or "prompt" in resolved):
            raise ConfigError(f"{where}.tokens: a token augmentation changes a sentence's own tokens: it needs a "
                              "column and no prompt (it would repeat the template's, [MASK] included)")
        if "tokens" in resolved and "augment" in resolved and \
                get("input_augment", resolved["augment"]["kind"]).cls.needs_gradient:
            raise ConfigError(f"{where}.tokens: the view's augment ({resolved['augment']['kind']}) encodes it twice a "
                              "step, and each pass would draw other tokens; drop one of them")
        if "augment" in resolved:
            kind = "output_augment" if "of" in resolved else "input_augment"
            resolved["augment"] = check_plugin(kind, resolved["augment"], f"{where}.augment")
    return result


def check_losses(losses: Any, views: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ``losses`` section checked against the method's ``views`` (each a view's resolved settings), defaults
    filled in: each loss's plug-in, parameters, the views it names and its ``matryoshka``."""
    if not isinstance(losses, dict) or not losses:
        raise ConfigError("losses: expected at least one loss")
    available = set(views) | {f"{name}.layers" for name, view in views.items() if view.get("layers")}
    result = {}
    for name, params in losses.items():
        if params is None:  # a loss removed by `losses.NAME: null`
            continue
        where = _name("losses", name)
        plugin = loss_plugin(name, params, where)
        resolved = check_params(plugin, params, where, extra=LOSS)
        if "matryoshka" in resolved:
            resolved["matryoshka"] = _matryoshka(resolved, plugin, f"{where}.matryoshka")
        for key in plugin.cls.view_schema():
            for view in resolved[key] if isinstance(resolved[key], list) else [resolved[key]]:
                if view not in available:
                    raise ConfigError(f"{where}.{key}: {shown(view)} is not a view; views: "
                                      f"{', '.join(sorted(available))}")
        _readable(plugin, resolved, views, where)
        generated = resolved.get("generated") or {}
        for key in get("negatives", generated["kind"]).cls.view_params if generated else ():
            if generated[key] not in views:
                raise ConfigError(f"{where}.generated.{key}: {shown(generated[key])} is not a view; views: "
                                  f"{', '.join(sorted(views))}")
        result[name] = resolved
    return result


def _matryoshka(params: dict[str, Any], plugin: Plugin, where: str) -> dict[str, Any]:
    """A loss's ``matryoshka`` checked: distinct widths, one weight each (1 by default), and a loss that reads only
    the vectors (no model of its own, no tokens, no weights, no generated negatives, which would be made once at
    one width)."""
    spec = check(params["matryoshka"], MATRYOSHKA, where)
    dims, weights = spec["dims"], spec.get("weights") or [1.0] * len(spec["dims"])
    if not dims or len(set(dims)) != len(dims):
        raise ConfigError(f"{where}.dims: expected distinct widths, got {shown(dims)}")
    if len(weights) != len(dims):
        raise ConfigError(f"{where}.weights: {len(weights)} weight(s) for {len(dims)} width(s); give one per width")
    reads = ("tokens or texts" if reads_texts(plugin, params) else "the initial weights"
             if plugin.cls.needs_initial_weights else
             "generated negatives" if params.get("generated") else None)
    if reads:
        raise ConfigError(f"{where}: the loss reads {reads}, not only vectors that can be cut to a width; Matryoshka "
                          "wraps losses of vectors (info_nce without generated, cosent, angle, two_way_margin ...)")
    return {"dims": dims, "weights": weights}


def _readable(plugin: Plugin, params: dict[str, Any], views: dict[str, dict[str, Any]], where: str) -> None:
    """A loss that reads a view's tokens, texts or vectors before the head (``needs_tokens``, ``needs_pooled``) reads
    forward views with their own tokens: not a view made of another, not a layers view, not one whose tokens an
    augment changed; and ``needs_pooled`` none that pools layers."""
    cls = plugin.cls
    if not (reads_texts(plugin, params) or cls.needs_pooled):
        return
    for key in cls.view_schema():
        for name in params[key] if isinstance(params[key], list) else [params[key]]:
            view = views.get(name)
            why = ("is not a forward view (a layers view, or one made of another): it has no tokens" if view is None
                   or "of" in view else "changes its tokens (tokens), and this loss reads the sentence's own"
                   if "tokens" in view else "pools layers too, and this loss reads its vectors before the head"
                   if cls.needs_pooled and "layers" in view else None)
            if why:
                raise ConfigError(f"{where}.{key}: {shown(name)} {why}; name a forward view of a column")


def _encoder(encoder: Any) -> dict[str, Any]:
    """The ``encoder`` section checked, its head (a name or a mapping) resolved against its plug-in, defaults filled
    in (the resolved config records them)."""
    if isinstance(encoder, dict) and encoder.get("head") is not None:
        encoder = {**encoder, "head": check_plugin("head", head_spec(encoder["head"]), "encoder.head")}
    return check(encoder, ENCODER, "encoder")


def _texts(texts: dict[str, Any], views: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ``texts`` section: each a column a view reads, changed by a text plug-in."""
    read = sorted({view["column"] for view in views.values() if "column" in view})
    result = {}
    for column, spec in texts.items():
        if column not in read:
            raise ConfigError(f"texts.{column}: no view reads the column {shown(column)}; the views read "
                              f"{', '.join(read)}")
        result[column] = check_plugin("text", spec, f"texts.{column}")
    return result


def _data_columns(columns: dict[str, Any]) -> dict[str, str]:
    for ours, theirs in columns.items():
        if not isinstance(theirs, str) or not theirs:
            raise ConfigError(f"data_columns.{ours}: expected the name of a column of the table, got {shown(theirs)}")
    return dict(columns)


def _training(training: Any) -> tuple[dict[str, Any], TrainingConfig]:
    """The training section checked (its values, defaults filled in) and its TrainingConfig, built once: its rules
    across keys (warm-up ...) run here, before the other sections' checks that read it."""
    resolved = check(training, TRAINING, "training")
    return resolved, TrainingConfig(**resolved)


def _copies_exist(resolved: dict[str, Any]) -> None:
    """A view encoded by the frozen copy needs ``encoder.frozen`` (a momentum copy is that copy too)."""
    for name, view in resolved["views"].items():
        if view.get("frozen") and not resolved["encoder"].get("frozen"):
            raise ConfigError(f"views.{name}.frozen: encodes with the frozen copy, and the method keeps none: set "
                              "encoder.frozen (its dtype, e.g. float32)")


def check_cacheable(resolved: dict[str, Any]) -> None:
    """Refuse ``training.mini_batch_size`` with what cannot be cached, naming the plug-in, or larger than the batch."""
    mini = resolved["training"].get("mini_batch_size")
    if mini is None:
        return
    batch = resolved["training"]["batch_size"]
    if mini > batch:
        raise ConfigError(f"training.mini_batch_size: {mini} is larger than training.batch_size ({batch}); a "
                          "mini-batch is a part of the batch")
    for name, params in resolved["losses"].items():
        if loss_plugin(name, params).cls.needs_tokens:
            raise ConfigError(f"training.mini_batch_size: losses.{name} runs the encoder on the batch itself, which "
                              "a cached step cannot replay; drop one of them")
    head = resolved["encoder"].get("head") or {}
    if head.get("kind") == "batchnorm_mlp":
        raise ConfigError("training.mini_batch_size: the batchnorm_mlp head normalises over a whole forward pass, and "
                          "a cached step would normalise over each mini-batch instead; drop one of them")
    for name, view in resolved["views"].items():
        augment = view.get("augment")
        kind = "output_augment" if view.get("of") else "input_augment"
        if augment and get(kind, augment["kind"]).cls.needs_gradient:
            raise ConfigError(f"training.mini_batch_size: views.{name}.augment ({augment['kind']}) needs the loss's "
                              "gradient before its own pass, which a cached step does not have; drop one of them")
    if resolved["hooks"].get("weights"):
        raise ConfigError(f"training.mini_batch_size: hooks.weights ({resolved['hooks']['weights']['kind']}) takes a "
                          "second pass over the whole batch at other weights; drop one of them")


def resolve(config: dict[str, Any], source: str) -> MethodConfig:
    """``config`` validated to the leaf, with defaults filled in (a key whose default is null is left out), as a
    frozen :class:`~cselab.train.config.method.MethodConfig`."""
    try:
        top = check(config, TOP, "")
        resolved: dict[str, Any] = {key: top[key] for key in ("method", "description", "data", "imports", "profile")
                                    if key in top}
        if top.get("data_columns") is not None:
            resolved["data_columns"] = _data_columns(top["data_columns"])
        resolved["encoder"] = _encoder(top["encoder"])
        resolved["views"] = _views(top["views"])
        _copies_exist(resolved)
        resolved["losses"] = check_losses(top["losses"], resolved["views"])
        resolved["hooks"] = check(top["hooks"] or {}, HOOKS, "hooks")
        resolved["training"], training = _training(top["training"])
        if top.get("texts"):
            resolved["texts"] = _texts(top["texts"], resolved["views"])
        check_cacheable(resolved)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    return MethodConfig.from_resolved(resolved, training)


def section_schema(config: dict[str, Any], section: list[str]) -> dict[str, Param]:
    """The schema of the section at path ``section`` of a resolved ``config`` (:meth:`MethodConfig.to_dict`; empty
    when it has none)."""
    if not section:
        return TOP
    if section in (["encoder"], ["training"], ["hooks"]):
        return {"encoder": ENCODER, "training": TRAINING, "hooks": HOOKS}[section[0]]
    if len(section) == 2 and section[0] == "views":
        return VIEW
    if len(section) >= 2 and section[0] == "losses":
        params = config["losses"][section[1]]
        schema = {**LOSS, **loss_plugin(section[1], params).schema()}
        for key in section[2:]:  # a plug-in inside the loss (its transform, its generated negatives)
            plugin = schema[key].plugin if key in schema else None
            if not plugin or key not in params:
                return {}
            schema, params = get(plugin, params[key]["kind"]).schema(), params[key]
        return schema
    return {}


def value_at(config: dict[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` of a resolved config (:meth:`MethodConfig.to_dict`); a key of the schema left out (its
    value null) is None, a key the schema does not know is a KeyError."""
    *parents, leaf = dotted.split(".")
    node = config
    for part in parents:
        node = node[part]
    if leaf not in node and leaf not in section_schema(config, parents):
        raise KeyError(dotted)
    return node.get(leaf)
