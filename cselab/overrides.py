"""``--set KEY=VALUE``: the one parser of command-line overrides, for the augment config and for a method.

A value is read as JSON first (YAML 1.1 reads ``1e-5`` as a string), else as YAML (``[a, b]``, ``{kind: mlp}``,
bare words); YAML's ``yes``/``no``/``on``/``off`` stay strings (``mixed_precision=no`` means ``"no"``). The
schema the config is then checked against types every value; nothing here guesses a type.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from cselab.errors import ConfigError, did_you_mean
from cselab.files import parse_json, parse_yaml, shown


def parse_value(raw: str, key: str) -> Any:
    """The value of ``--set KEY=raw``."""
    try:
        return parse_json(raw, f"--set {key}", ConfigError)
    except json.JSONDecodeError:
        value = parse_yaml(raw, f"--set {key}", ConfigError)
        return raw if isinstance(value, bool) and raw.lower() not in ("true", "false") else value


def apply_override(config: dict[str, Any], item: str, example: str) -> None:
    """Set one ``dotted.key=value`` in ``config``: missing sections are created (the schema then checks the key);
    ``null`` removes a section and sets a value to null (the key's default where it cannot be null); an empty or
    blank value is refused (YAML would read it as null: ``--set KEY=$UNSET`` is no way to ask for a default)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {shown(item)}: expected KEY=VALUE, e.g. {example}")
    if not raw.strip():  # YAML reads it as null: a path or a name would silently become its default
        raise ConfigError(f"--set {shown(item)}: an empty value is no value; give one, or {key}=null for the "
                          "default")
    *parents, leaf = key.split(".")
    node = config
    for depth, part in enumerate(parents):
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {shown(item)}: {'.'.join(parents[:depth + 1])} is {shown(child)}, not a section")
        node = child
    value = parse_value(raw, key)
    if value is None and isinstance(node.get(leaf), dict):
        node.pop(leaf)  # a section (a view, a loss) is removed
    else:
        node[leaf] = value


def from_overrides(cls: Any, overrides: list[str], example: str) -> Any:
    """A flat config dataclass ``cls`` built from ``key=value`` overrides (checked as it is built); an unknown key is
    refused naming the known ones."""
    values: dict[str, Any] = {}
    for item in overrides:
        apply_override(values, item, example)
    known = {f.name for f in fields(cls)}
    for name in values:
        if name not in known:
            raise ConfigError(f"--set {name}: unknown key {shown(name)}{did_you_mean(name, known)}; known keys: "
                              f"{', '.join(sorted(known))}")
    return cls(**values)
