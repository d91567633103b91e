"""Method configs: one YAML file each, composed of plug-in parts.

A method (``cselab/train/presets/*.yaml``, or any path) has:

- ``encoder``: pooler, prompt, training-only ``head`` (``mlp``, ``projection``), a ``frozen`` copy
  of the initial backbone (its dtype) and ``freeze_embeddings``;
- ``views``: name -> the cache column encoded, with an optional prompt, ``layers`` (pooled
  hidden layers of the same forward pass, available to losses as ``NAME.layers``; pooled with
  ``layer_pooler``) and ``frozen`` (encode with the frozen copy). Each view is one forward pass,
  so two views of one column differ by their dropout masks;
  A view ``of`` another (no forward pass) is made from its vectors by an output ``augment``; a
  forward view's ``augment`` acts on its input embeddings (:mod:`cselab.train.augmentations`);
- ``losses``: name -> parameters (``type`` when the name is not the loss's, ``weight``), see
  :mod:`cselab.train.objectives`;
- ``hooks``: ``weights: {kind: sam|awp, size}`` perturbs the weights for a second pass each
  step (:mod:`cselab.train.hooks`);
- ``training``: batch size, learning rate, AdamW's ``weight_decay``, ``adam_betas`` and ``adam_eps``,
  epochs, ``early_stop`` (patience in evaluations) ... (see :mod:`cselab.train.trainer`);
- optionally ``data`` (the corpus or cache the method trains on when ``--data`` is not given, e.g. SG's
  STS-B sentences), ``description`` (one line for ``--list-methods``), ``extends`` (a preset this one
  changes; deep-merged, ``key: null`` removes a key of the base) and ``profiles`` (name ->
  ``{dotted.key: value}``, e.g. a paper's per-backbone defaults, picked with ``--profile``; a preset
  inherits the profiles of the one it extends, and its own profile of the same name replaces the base's).

Every paper setting a preset or profile carries is a row of the protocol ledger
(:mod:`cselab.train.protocols`).

``A+B`` composes presets: B's own settings (not those it extends) are merged onto A, so
``osscse+byop-c`` is OssCSE with BYOP's margin on its InfoNCE. ``--set a.b=value`` overrides
any leaf; an unknown key is an error that names it.
"""

from __future__ import annotations

import copy
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cselab.train.objectives import LOSSES

SECTIONS = ("method", "description", "extends", "data", "encoder", "views", "losses", "hooks", "training",
            "profiles", "profile")
HOOK_KEYS = {"weights"}
ENCODER_KEYS = {"pooler", "head", "prompt", "frozen", "freeze_embeddings"}
VIEW_KEYS = {"column", "prompt", "layers", "layer_pooler", "frozen", "of", "augment"}
TRAINING_KEYS = {"batch_size", "lr", "epochs", "max_steps", "max_length", "eval_steps", "grad_accum",
                 "mixed_precision", "seed", "adam_betas", "adam_eps", "weight_decay", "early_stop"}
VIEW_ROLES = ("anchor", "positive", "paraphrase", "negation", "guide")


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("cselab.train").joinpath("presets").iterdir()
                  if p.name.endswith(".yaml"))


def _read(name_or_path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """A YAML method as written (``extends`` not applied) and where it came from."""
    path = Path(name_or_path)
    if not path.is_file():
        if str(name_or_path) not in preset_names():
            raise ValueError(f"Unknown method {name_or_path!r}: not a YAML file, and the presets are "
                             f"{', '.join(preset_names())}")
        path = Path(str(resources.files("cselab.train").joinpath("presets", f"{name_or_path}.yaml")))
    return yaml.safe_load(path.read_text(encoding="utf-8")), str(path)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)  # `key: null` removes what the base had
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _resolve(name_or_path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    config, source = _read(name_or_path)
    if "extends" in config:
        base, _ = _resolve(config["extends"])
        profiles = {**base.get("profiles", {}), **config.get("profiles", {})}  # a same-named profile is replaced
        config = _merge({k: v for k, v in base.items() if k not in ("description", "profiles")},
                        {k: v for k, v in config.items() if k not in ("extends", "profiles")})
        if profiles:
            config["profiles"] = profiles
    return config, source


def load_method(name_or_path: str | os.PathLike, overrides: list[str] = (), profile: str | None = None
                ) -> dict[str, Any]:
    """A method config from a preset name, a YAML path or ``A+B+...``, with a profile and ``key.path=value``
    overrides, validated."""
    first, *more = str(name_or_path).split("+") if not Path(name_or_path).is_file() else [name_or_path]
    config, source = _resolve(first)
    for name in more:
        addition, _ = _read(name)
        own = {k: v for k, v in addition.items() if k not in ("extends", "method", "description")}
        config = _merge(config, own)
        config["method"] = f"{config['method']}+{addition['method']}"
        source = f"{source}+{name}"
    if profile is not None:
        profiles = config.get("profiles", {})
        if profile not in profiles:
            raise ValueError(f"{source}: no profile {profile!r}; profiles: {', '.join(profiles) or 'none'}")
        overrides = [f"{key}={json.dumps(value)}" for key, value in profiles[profile].items()] + list(overrides)
        config["profile"] = profile  # recorded with the run (OUT/best/cselab.json)
    for item in overrides:
        _override(config, item)
    validate(config, source)
    return config


def _override(config: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. training.lr=1e-5")
    parts = key.split(".")
    node = config
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"--set {item!r}: unknown key {key!r} (no {part!r} there)")
        node = node[part]
    if not isinstance(node, dict) or (parts[-1] not in node and len(parts) < 3):
        raise ValueError(f"--set {item!r}: unknown key {key!r}")
    try:
        node[parts[-1]] = json.loads(raw)  # JSON first: YAML 1.1 reads 1e-5 as a string
    except json.JSONDecodeError:
        value = yaml.safe_load(raw)
        # YAML 1.1 also reads no/yes/on/off as booleans: mixed_precision=no means the string "no"
        node[parts[-1]] = raw if isinstance(value, bool) and raw.lower() not in ("true", "false") else value


def validate(config: dict[str, Any], source: str = "method") -> None:
    """Every section and key known, every view a loss names defined."""
    def unknown(found, known, where):
        extra = sorted(set(found) - set(known))
        if extra:
            raise ValueError(f"{source}: unknown key(s) {', '.join(extra)} in {where}; "
                             f"known: {', '.join(sorted(known))}")

    unknown(config, SECTIONS, "the top level")
    unknown(config.get("encoder", {}), ENCODER_KEYS, "encoder")
    unknown(config.get("training", {}), TRAINING_KEYS, "training")
    unknown(config.get("hooks") or {}, HOOK_KEYS, "hooks")
    patience = config.get("training", {}).get("early_stop")
    if patience is not None and (not isinstance(patience, int) or isinstance(patience, bool) or patience < 1):
        raise ValueError(f"{source}: training.early_stop must be a whole number of evaluations >= 1, or null; "
                         f"got {patience!r}")
    views = config.get("views", {})
    for name, view in views.items():
        unknown(view, VIEW_KEYS, f"views.{name}")
        if "of" in view and view["of"] not in views:
            raise ValueError(f"{source}: views.{name}.of names view {view['of']!r}, which is not in views")
        if ("of" in view) == ("column" in view):
            raise ValueError(f"{source}: views.{name} needs either a column (a forward pass) or of (a view made "
                             "from another view's vectors)")
        if "of" in view and not view.get("augment"):
            raise ValueError(f"{source}: views.{name} is made of {view['of']!r} but has no augment")
    available = set(views) | {f"{name}.layers" for name, view in views.items() if view.get("layers")}
    if not config.get("losses"):
        raise ValueError(f"{source}: no losses")
    for name, params in config["losses"].items():
        kind = params.get("type", name)
        if kind not in LOSSES:
            raise ValueError(f"{source}: losses.{name} is of unknown type {kind!r}; types: {', '.join(LOSSES)}")
        unknown(params, LOSSES[kind].keys | {"type", "weight"}, f"losses.{name}")
        missing = sorted(LOSSES[kind].required - set(params))
        if missing:
            raise ValueError(f"{source}: losses.{name} needs {', '.join(missing)}")
        pattern = params.get("perturbation")
        if pattern and not re.fullmatch(r"(p[+-])?(n[+-])?", pattern):
            raise ValueError(f"{source}: losses.{name}.perturbation {pattern!r}: expected p+, p-, n+, n- or a pair "
                             "such as p+n-")
        named = [params[role] for role in VIEW_ROLES if role in params] + list(params.get("negatives", []))
        for view in named:
            if view not in available:
                raise ValueError(f"{source}: losses.{name} names view {view!r}, which is not one of "
                                 f"{', '.join(sorted(available))}")


def describe_presets() -> list[tuple[str, str]]:
    """Each preset's name and one-line description."""
    return [(name, _read(name)[0].get("description", "")) for name in preset_names()]
