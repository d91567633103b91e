"""What a run folder is and who writes it.

``OUT/config.yaml`` is the resolved method and ``OUT/run.json`` the run's identity: the config's sha256, the data
fingerprint (an augment cache's key and manifest sha256, or a corpus's sha256), the base model (its name and its
weights' sha256), the models the losses name (a generator, a teacher: each by spec and weights' sha256), the dev set
(its file's sha256 and the pair limit) and cselab's version; beside it, not part of it, the provenance of each
session that trained (the weight files' sha256, device, cselab's commit, the command).
A run started on an existing ``OUT`` resumes only when its identity is the same; otherwise it stops naming the
field that differs.
``OUT/.lock`` holds the writer's pid, host, process start time and wall-clock start: a second run on the same
``OUT`` stops naming them, and a lock whose process is gone (a killed run) is taken over with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cselab import __version__
from cselab.registry import TRAIN_KINDS, origins
from cselab.atomic import write_json_atomic, write_text_atomic
from cselab.errors import CselabError, TrainingError
from cselab.files import read_json, read_yaml, remove_path
from cselab.locking import FolderLock

if TYPE_CHECKING:
    from cselab.train.config.method import MethodConfig

logger = logging.getLogger(__name__)

CONFIG = "config.yaml"
IDENTITY = "run.json"
LOCK = ".lock"
ARTIFACTS = ("best", "best.tmp", "best.old", "last", "last.tmp", "last.old", "log.jsonl", "tensorboard", CONFIG,
             IDENTITY)
RESTARTS = ("best",)  # what --restart-from may name
# run.json's fields that are not compared one by one: the config (by its resolved settings) and the data (by content)
# are compared their own way; the provenance of each session is a record, not the run's identity
NOT_COMPARED = {"config_sha256", "data", "provenance", "resumed"}
AFRESH = "start afresh with --overwrite (deletes this run's files), or give another --out"


def config_sha256(method: dict[str, Any]) -> str:
    """The sha256 of the resolved config, its ``data`` left out: what the run trains on is the identity's ``data``,
    by content, not by where it lies."""
    return hashlib.sha256(json.dumps(_settings(method), sort_keys=True).encode()).hexdigest()


def _settings(method: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in method.items() if key != "data"}


def _content(data: Any) -> Any:
    """The data's description as a run compares it: by content where it has a sha256 (its name, a path as it was
    typed or resolved, left out)."""
    if isinstance(data, dict) and data.get("sha256"):
        return {key: value for key, value in data.items() if key != "name"}
    return data


def _written_settings(out: Path, written: dict[str, Any]) -> dict[str, Any]:
    """``OUT/config.yaml`` resolved by this cselab (keys added since it was written take their defaults), so that a
    run begun before a new key existed is still its own run; as written when it no longer resolves."""
    from cselab.train.config.methods import load_method

    try:
        return _settings(load_method(out / CONFIG).to_dict())
    except CselabError:
        return _settings(written)


def identity(method: dict[str, Any], base_model: str, data: dict[str, Any], base_weights: str | None = None,
             dev: dict[str, Any] | None = None, auxiliary: dict[str, Any] | None = None) -> dict[str, Any]:
    """What makes a run this run: its config, its data by content (not where it lies), its base model by name and
    by its weights' sha256, the dev set it picks ``best`` with (the file's sha256 and the pair limit), the models
    its losses name (a generator, a teacher: ``auxiliary``, each by spec and weights' sha256), when any, and the
    installed packages that add a plug-in it names (:func:`plugin_packages`), when any."""
    found = {"format": "cselab-run", "version": 2, "cselab": __version__, "config_sha256": config_sha256(method),
             "base_model": base_model, "base_weights_sha256": base_weights,
             "data": {k: v for k, v in data.items() if k not in ("path", "backtranslation")}, "dev": dev}
    packages = plugin_packages(method)
    return {**found, **({"auxiliary": auxiliary} if auxiliary else {}),
            **({"plugin_packages": packages} if packages else {})}


def plugin_packages(method: dict[str, Any]) -> list[str]:
    """The installed packages (``name==version``) that add a plug-in the resolved ``method`` names (a loss, a
    pooler, a head, an augmentation, a dev set's suite ...): a run resumed after one of them changed is another run,
    since its code may have changed."""
    named = set(method.get("losses", {})) | set(_strings(method))
    return sorted({package for kind in (*TRAIN_KINDS, "pooler", "layer_pooler", "suite")
                   for name, package in origins(kind).items() if name in named})


def _strings(value: Any) -> list[str]:
    """Every string in a nested config."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _strings(item)]
    return []


def loss_models(method: MethodConfig) -> dict[str, str]:
    """Each model a loss names (its plug-in's ``model_params`` and its nested plug-ins': a generator, a teacher, a
    guide) by its key, e.g. ``losses.rtd.generator``, ``losses.info_nce.transform.guide``."""
    from cselab.train.config.schema import loss_plugin, named_models

    return {f"losses.{name}.{key}": spec for name, params in method.losses.items()
            for key, spec in named_models(loss_plugin(name, params), params).items()}


def auxiliary_models(method: MethodConfig) -> dict[str, dict[str, str | None]]:
    """Each model a loss names (:func:`loss_models`), by its key: the spec and its weights' sha256."""
    from cselab.encoders.loading import resolve_backbone
    from cselab.encoders.pretrained import combined_sha256, weight_files

    return {key: {"model": spec, "weights_sha256": combined_sha256(weight_files(resolve_backbone(spec)))}
            for key, spec in loss_models(method).items()}


def run_identity(method: MethodConfig, model: str, source: dict[str, Any], data_dir=None,
                 eval_limit: int | None = None, weights: dict[str, str] | None = None) -> dict[str, Any]:
    """The :func:`identity` of a run of ``method`` from ``model`` (whose ``weights``, :func:`weight_files`, are read
    when not given) on the data ``source`` (:func:`~cselab.train.run.data.training_rows`'s description) with the dev
    set ``training.dev`` names: what ``OUT/run.json`` records and a resumed run must match."""
    from cselab.encoders.pretrained import combined_sha256, weight_files  # torch: not for `train --help`
    from cselab.probes.dev import NONE, dev_set

    weights = weight_files(str(model)) if weights is None else weights
    probe = dev_set(method.training.dev, data_dir, eval_limit)
    return identity(method.to_dict(), str(model), source, combined_sha256(weights),
                    {"set": NONE} if probe is None else probe.identity(), auxiliary_models(method))


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new), key=str)
                for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")]
    return [] if old == new else [f"{prefix[:-1]} ({new!r} now, {old!r} in this OUT)"]


def check_or_write(out: Path, mine: dict[str, Any], method: dict[str, Any], write: bool = True,
                   provenance: dict[str, Any] | None = None) -> None:
    """Write the run's config and identity (:func:`identity`) into a new ``OUT`` (``write``: the main process only);
    on an existing one, refuse to continue a different run, naming the first field that differs. ``provenance``
    (:func:`cselab.provenance.provenance`: weights' sha256 by file, device, cselab's commit, the command) is kept
    beside the identity, not compared: a resumed run appends its own to ``resumed``."""
    if not (out / IDENTITY).exists():
        if not write:
            return
        if (out / "last").exists() or (out / "best").exists():
            raise TrainingError(f"{out}: holds a run without {IDENTITY} (written by an older cselab), so it cannot "
                                f"be checked to be this run; {AFRESH}")
        write_text_atomic(out / CONFIG, yaml.safe_dump(method, sort_keys=False, width=110))
        write_json_atomic(out / IDENTITY, {**mine, "provenance": provenance})
        return
    try:
        theirs = read_json(out / IDENTITY, TrainingError)
        written = read_yaml(out / CONFIG, TrainingError)
    except TrainingError as err:
        raise TrainingError(f"{err}; {AFRESH}") from None
    changed = []
    if theirs.get("config_sha256") != mine["config_sha256"]:
        # config.yaml as the run wrote it (hashed now, or as cselab hashed it before data left the hash): compared as
        # this cselab resolves it, so keys added since take their defaults; an edited config.yaml is refused
        legacy = hashlib.sha256(json.dumps(written, sort_keys=True).encode()).hexdigest()
        changed = _differences(_written_settings(out, written), _settings(method))
        if not changed and theirs.get("config_sha256") not in (config_sha256(written), legacy):
            changed = [f"{CONFIG} (edited since the run began)"]
    changed += _differences({"data": _content(theirs.get("data"))}, {"data": _content(mine["data"])})
    for field in sorted((set(theirs) | set(mine)) - NOT_COMPARED):  # every other field of the identity, by name
        changed += _differences({field: theirs.get(field)}, {field: mine.get(field)})
    if changed:
        raise TrainingError(f"{out}: a different run: {changed[0]}" + (f" and {len(changed) - 1} more"
                                                                        if len(changed) > 1 else "")
                            + f"; to continue the run in {out}, use its config (--method {out / CONFIG}) and data; "
                            + AFRESH)
    if write and provenance is not None:
        write_json_atomic(out / IDENTITY, {**theirs, "resumed": [*theirs.get("resumed", []), provenance]})


@contextlib.contextmanager
def forgotten_unless_saved(out: Path) -> Iterator[None]:
    """A new run (no ``run.json`` in ``OUT`` yet) that ends in an error or an interrupt before its first save leaves
    no ``config.yaml``, ``run.json`` or ``log.jsonl`` behind: they would record what was refused (a folder without
    weights, say) and refuse the corrected retry as another run."""
    fresh = not (out / IDENTITY).exists()
    try:
        yield
    except BaseException:
        if fresh and not any((out / name).exists() for name in ("best", "best.old", "last", "last.old")):
            for name in (CONFIG, IDENTITY, "log.jsonl"):
                remove_path(out / name)
        raise


def overwrite(out: Path) -> None:
    """Delete a run's own files from ``OUT`` (anything else there stays)."""
    for name in ARTIFACTS:
        remove_path(out / name)  # a link is removed, never what it points to


class RunLock(FolderLock):
    """``OUT/.lock`` while a run writes ``OUT`` (a context manager; see :class:`cselab.locking.FolderLock`)."""

    def __init__(self, out: Path):
        super().__init__(out / LOCK, TrainingError, "give another --out")
