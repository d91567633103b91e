"""A resolved method as one frozen, typed object (:class:`MethodConfig`), what :func:`~cselab.train.config.methods.
load_method` returns: its ``encoder`` and ``training`` sections are the checked dataclasses of
:mod:`~cselab.train.config.sections`, each view a :class:`ViewConfig`, the losses and hooks read-only mappings of their
plug-ins' checked parameters. The plain dict appears only where a file is written or a run is identified
(:meth:`MethodConfig.to_dict`: ``OUT/config.yaml``, ``--show-config``, the run identity, the checkpoint's
``cselab.json``)."""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cselab.train.config.sections import EncoderConfig, TrainingConfig, ViewConfig


def frozen(value: Any) -> Any:
    """``value`` read-only all the way down: mappings as read-only mappings, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(item) for item in value)
    return value


@dataclass(frozen=True)
class MethodConfig:
    """A method validated to the leaf, defaults filled in (:func:`~cselab.train.config.schema.resolve`)."""

    name: str
    encoder: EncoderConfig
    views: Mapping[str, ViewConfig]
    losses: Mapping[str, Mapping[str, Any]]
    hooks: Mapping[str, Any]
    training: TrainingConfig
    description: str = ""
    data: str | None = None  # the corpus, cache or table trained on when --data is not given
    data_columns: Mapping[str, str] | None = None  # a table's column for each column the views read
    imports: tuple[str, ...] = ()
    profile: str | None = None
    texts: Mapping[str, Mapping[str, Any]] | None = None  # a column's texts changed before tokenising (kind text)
    _resolved: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_resolved(cls, resolved: dict[str, Any], training: TrainingConfig) -> MethodConfig:
        """The object of a resolved method dict (each section already checked) and its ``training`` section's
        object, built once where the section was checked."""
        views = {name: ViewConfig(**view) for name, view in resolved["views"].items()}
        return cls(name=resolved["method"], encoder=EncoderConfig(**resolved["encoder"]),
                   views=MappingProxyType(views), losses=frozen(resolved["losses"]), hooks=frozen(resolved["hooks"]),
                   training=training, description=resolved.get("description", ""),
                   data=resolved.get("data"), data_columns=frozen(resolved.get("data_columns")),
                   imports=tuple(resolved.get("imports", ())), profile=resolved.get("profile"),
                   texts=frozen(resolved.get("texts")), _resolved=copy.deepcopy(resolved))

    def to_dict(self) -> dict[str, Any]:
        """The resolved method as plain data (``method`` is its name; a key whose default is null is left out): what
        ``OUT/config.yaml`` holds and the run identity hashes."""
        return copy.deepcopy(self._resolved)


def with_data(method: MethodConfig, data: str | os.PathLike[str] | None) -> MethodConfig:
    """``method`` with ``--data`` as its ``data`` (a file or folder by its absolute path, a name as it is), so that
    ``OUT/config.yaml``, the run's identity and its model card record what the run trains on, and ``--method
    OUT/config.yaml`` repeats it; ``method`` itself when no ``data`` is given."""
    if data is None:
        return method
    path = Path(os.path.expanduser(str(data)))
    value = str(path.resolve()) if path.exists() else str(data)
    if value == method.data:
        return method
    return dataclasses.replace(method, data=value, _resolved={**method.to_dict(), "data": value})
