"""Method configs: one YAML file each, composed of plug-in parts.

A method (``cselab/train/config/presets/*.yaml``, or any path) has:

- ``encoder``: pooler, prompt, training-only ``head`` (``mlp``, ``projection``), a ``frozen`` copy
  of the initial backbone (its dtype; with ``momentum`` it follows the backbone, a momentum encoder) and
  ``freeze_embeddings``;
- ``views``: name -> the cache column encoded, with an optional prompt, ``layers`` (pooled
  hidden layers of the same forward pass, available to losses as ``NAME.layers``; pooled with
  ``layer_pooler``) and ``frozen`` (encode with the frozen copy). Views of one column, prompt,
  layers and copy with no input augment share one forward pass over the rows repeated once per
  view (SimCSE's released code: one pass of 2N rows), so they differ by their dropout masks;
  A view ``of`` another (no forward pass) is made from its vectors by an output ``augment``; a
  forward view's ``augment`` acts on its input embeddings and its ``tokens`` on its token ids
  (:mod:`cselab.train.plugins.augmentations`);
- ``losses``: name -> parameters (``kind`` when the name is not the loss's, ``weight``), see
  :mod:`cselab.train.plugins.losses` and ``docs/presets.md``;
- ``hooks``: ``weights: {kind: sam|awp, size}`` perturbs the weights for a second pass each
  step (:mod:`cselab.train.plugins.hooks`);
- ``training``: batch size, learning rate, AdamW's ``weight_decay``, ``adam_betas`` and ``adam_eps``,
  epochs, ``early_stop`` (patience in evaluations) ... (see :mod:`cselab.train.recipe`);
- optionally ``texts`` (a data column's texts changed before a training batch is tokenised, by a text
  plug-in: SNCSE's released " ." after a sentence without final punctuation), ``data`` (the corpus or
  cache the method trains on when ``--data`` is not given, e.g. SG's STS-B sentences), ``description``
  (one line for ``--list-methods``), ``extends`` (a preset this one changes; deep-merged,
  ``section: null`` removes a section of the base and ``key: null`` sets a value to null) and
  ``profiles`` (name ->
  ``{dotted.key: value}``, e.g. a paper's per-backbone defaults, picked with ``--profile``; a preset
  inherits the profiles of the one it extends, and its own profile of the same name replaces the base's).

Every paper setting a preset or profile carries is a row of the protocol ledger
(:mod:`cselab.train.protocols`).

``A+B`` composes presets: B's own settings (not those it extends) are merged onto A, so
``osscse+byop-c`` is OssCSE with BYOP's margin on its InfoNCE. ``--set a.b=value`` sets any key of the
schema; ``imports`` names modules holding a method's own plug-ins. The result is resolved and validated to the
leaf by :func:`cselab.train.config.schema.resolve` (defaults filled in; a mistake names the key and what is allowed).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cselab.errors import ConfigError, did_you_mean
from cselab.files import read_yaml, shown
from cselab.overrides import apply_override

if TYPE_CHECKING:  # torch-free: --help and --list-methods import this module
    from cselab.train.config.method import MethodConfig


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("cselab.train.config").joinpath("presets").iterdir()
                  if p.name.endswith(".yaml"))


def _read(name_or_path: str | os.PathLike[str], beside: Path | None = None) -> tuple[dict[str, Any], str]:
    """A YAML method as written (``extends`` not applied) and where it came from (a path relative to ``beside``,
    the folder of the method that extends it, where it is found there): a mapping, or a one-line ConfigError naming
    the file (unreadable, not UTF-8, not YAML, aliases, not a mapping)."""
    path = Path(name_or_path)
    if beside is not None and not path.is_absolute() and (beside / path).exists():
        path = beside / path
    if path.exists():
        path = path.resolve()
    else:
        names = preset_names()
        if str(name_or_path) not in names:
            hint = did_you_mean(name_or_path, names)
            if hint:  # the few names meant, not all of them
                raise ConfigError(f"Unknown method {shown(str(name_or_path))}{hint}: not a YAML file nor one of the "
                                  f"{len(names)} presets (cselab train --list-methods)")
            raise ConfigError(f"Unknown method {shown(str(name_or_path))}: not a YAML file, and the presets are "
                              f"{', '.join(names)}")
        path = Path(str(resources.files("cselab.train.config").joinpath("presets", f"{name_or_path}.yaml")))
    config = read_yaml(path, ConfigError)
    profiles = config.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(p, dict) for p in profiles.values()):
        raise ConfigError(f"{path}: profiles: expected a mapping of profile names to {{dotted.key: value}} mappings")
    return config, str(path)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None and isinstance(merged.get(key), dict):
            merged.pop(key)  # `section: null` removes a section of the base (a view, a loss)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _resolve(name_or_path: str | os.PathLike[str], chain: tuple[str, ...] = (), beside: Path | None = None
             ) -> tuple[dict[str, Any], str]:
    config, source = _read(name_or_path, beside)
    if "extends" in config:
        base_name = config["extends"]
        if not isinstance(base_name, str):
            raise ConfigError(f"{source}: extends: expected one preset name or YAML path, got {shown(base_name)}")
        if source in chain:
            raise ConfigError(f"{source}: extends goes round in a loop: {' -> '.join([*chain, source])}")
        base, _ = _resolve(base_name, (*chain, source), Path(source).parent)
        profiles = {**base.get("profiles", {}), **config.get("profiles", {})}  # a same-named profile is replaced
        config = _merge({k: v for k, v in base.items() if k not in ("description", "profiles")},
                        {k: v for k, v in config.items() if k not in ("extends", "profiles")})
        if profiles:
            config["profiles"] = profiles
    return config, source


def load_method(name_or_path: str | os.PathLike[str], overrides: Sequence[str] = (), profile: str | None = None
                ) -> MethodConfig:
    """A method config from a preset name, a YAML path or ``A+B+...``, with a profile and ``key.path=value``
    overrides, resolved and validated to the leaf (:func:`cselab.train.config.schema.resolve`): a frozen
    :class:`~cselab.train.config.method.MethodConfig`."""
    first, *more = str(name_or_path).split("+") if not Path(name_or_path).is_file() else [name_or_path]
    config, _ = _resolve(first)
    source = str(name_or_path)
    for name in more:
        addition, _ = _read(name)
        own = {k: v for k, v in addition.items() if k not in ("extends", "method", "description")}
        config = _merge(config, own)
        config["method"] = f"{config.get('method')}+{addition.get('method')}"
    profiles = config.pop("profiles", {})
    if profile is not None:
        if profile not in profiles:
            raise ConfigError(f"{source}: no profile {shown(profile)}; profiles: {', '.join(profiles) or 'none'}")
        overrides = [f"{key}={json.dumps(value)}" for key, value in profiles[profile].items()] + list(overrides)
        config["profile"] = profile  # recorded with the run (OUT/config.yaml, OUT/best/cselab.json)
    for item in overrides:
        apply_override(config, item, "training.lr=1e-5")
    from cselab.train.plugins import load_plugins  # the plug-ins' modules (torch), only when a method resolves
    from cselab.train.config.schema import imported, resolve

    load_plugins(imported(config, source), f"{source}: imports")
    return resolve(config, source)


def preset_base(name: str) -> str | None:
    """The preset a preset extends (None for a base preset)."""
    return _read(name)[0].get("extends")


def method_profiles(name_or_path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """A method's profiles (its own and those of the methods it extends), by name."""
    profiles: dict[str, dict[str, Any]] = _resolve(name_or_path)[0].get("profiles", {})
    return profiles


def describe_presets() -> list[tuple[str, str]]:
    """Each preset's name and one-line description."""
    return [(name, _read(name)[0].get("description", "")) for name in preset_names()]
