"""One way in for every file a user hands cselab: text, JSON and YAML read with one-line errors.

A file that cannot be read (missing, a folder, no permission), is not UTF-8, does not parse, nests deeper than
:data:`MAX_DEPTH`, holds a number of more than :data:`MAX_DIGITS` digits, or is not the type of document expected
raises the caller's error class (``DataError``, ``ConfigError``, ``ModelError``...) with a message that names the
file, and its line where there is one. YAML is read without aliases (an anchor bomb of a few hundred bytes expands
to gigabytes), and no message repeats more than :data:`SHOWN` characters of a value (:func:`shown`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from cselab.errors import ConfigError, CselabError, DataError, ModelError

MAX_DEPTH = 64
MAX_DIGITS = 64
SHOWN = 60
KINDS: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string"}


#: The control characters: C0 (0x00 to 0x1f), DEL (0x7f) and C1 (0x80 to 0x9f), Unicode's category Cc.
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` written visibly, as Python writes it in a string
    (``\\x1b`` for ESC, ``\\x7f`` for DEL, ``\\x0d`` for a carriage return): the one function through which a
    user's text (a label, a model name, a task's or a file's name) reaches a report or the terminal, so that an
    escape sequence, a backspace or a carriage return shows as what it is instead of acting on the screen."""
    return CONTROLS.sub(lambda found: found[0] if found[0] in keep else f"\\x{ord(found[0]):02x}", text)


def shown(value: Any, limit: int = SHOWN) -> str:
    """``repr(value)``, cut to ``limit`` characters (a message never copies an unbounded value)."""
    if isinstance(value, (dict, list, tuple, set)) and len(value) > limit:  # no repr of a huge container at all
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clipped(err: BaseException | str, limit: int = 120) -> str:
    """An exception's message (its first line), or a text, cut to ``limit`` characters: for one-line errors that
    quote a library's words."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__ if isinstance(err, BaseException) else ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read_text(path: str | os.PathLike, error: type[CselabError] = DataError) -> str:
    """The file as UTF-8 text (a leading byte-order mark dropped)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a file") from None
    except PermissionError:
        raise error(f"{path}: not readable (permission denied)") from None
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or err})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 text (byte {raw[err.start]:#04x})") from None


def _check_depth(value: Any, path: Path, error: type[CselabError]) -> None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise error(f"{path}: nested more than {MAX_DEPTH} levels deep")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _expect(value: Any, expect: type | None, path: Path, error: type[CselabError]) -> Any:
    if expect is not None and not isinstance(value, expect):
        found = KINDS.get(type(value), "null" if value is None else f"a {type(value).__name__}")
        raise error(f"{path}: expected {KINDS.get(expect, expect.__name__)} at the top, found {found}")
    return value


def _number(text: str, path: Path, error: type[CselabError], kind: type) -> Any:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise error(f"{path}: a number of {len(text)} characters (at most {MAX_DIGITS})")
    return kind(text)


def parse_json(text: str, where: str, error: type[CselabError]) -> Any:
    """JSON text (bounded depth and number length); ``where`` names it in errors. Raises
    :class:`json.JSONDecodeError` for text that is not JSON, so that a caller may try another reading."""
    path = Path(where)
    try:
        value = json.loads(text, parse_int=lambda t: _number(t, path, error, int),
                           parse_float=lambda t: _number(t, path, error, float))
    except RecursionError:
        raise error(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    _check_depth(value, path, error)
    return value


def read_tensors(path: str | os.PathLike, error: type[CselabError] = ModelError) -> dict[str, Any]:
    """The tensors of a weights file a user's folder holds: safetensors, or a torch file of tensors alone
    (``weights_only``); a missing, empty, truncated or damaged one is an ``error`` naming it, in one line."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # safetensors' SafetensorError (a short or bad header), torch's unpickling and zip errors
        raise error(f"{path}: not a readable weights file ({type(err).__name__}: {clipped(err, 100)}); write it again "
                    "or remove it") from None


def read_json(path: str | os.PathLike, error: type[CselabError] = DataError, expect: type | None = dict) -> Any:
    """A JSON document (``expect``: the type it must be at the top, None for any)."""
    path = Path(path)
    try:
        value = parse_json(read_text(path, error), str(path), error)
    except json.JSONDecodeError as err:
        raise error(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    return _expect(value, expect, path, error)


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases: a document is read as written, never expanded."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
        return super().compose_node(parent, index)


#: YAML texts up to this many characters are parsed once per process (a method's presets are read again for each
#: method that extends them); what a caller gets is its own copy.
PARSED_ONCE = 65536


def parse_yaml(text: str, where: str, error: type[CselabError]) -> Any:
    """YAML text (no aliases, bounded depth); ``where`` names it in errors (a file, or ``--set KEY``)."""
    if len(text) <= PARSED_ONCE:
        with contextlib.suppress(CselabError):  # refused: read again below, named as the caller names it
            return copy.deepcopy(_parsed_once(text))
    return _parse_yaml(text, where, error)


@functools.lru_cache(maxsize=512)
def _parsed_once(text: str) -> Any:
    return _parse_yaml(text, "", CselabError)


def _parse_yaml(text: str, where: str, error: type[CselabError]) -> Any:
    try:
        value = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader without aliases)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise error(f"{where}{line}: not valid YAML ({err.problem or err.context})") from None
    except yaml.YAMLError as err:
        raise error(f"{where}: not valid YAML ({err})") from None
    except RecursionError:
        raise error(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as err:  # a number too long for Python's int (YAML has no bound of its own)
        raise error(f"{where}: a value cannot be read ({clipped(err)})") from None
    _check_depth(value, Path(where), error)
    return value


def read_yaml(path: str | os.PathLike, error: type[CselabError] = DataError, expect: type | None = dict) -> Any:
    """A YAML document, read without aliases (``expect``: the type it must be at the top, None for any)."""
    path = Path(path)
    return _expect(parse_yaml(read_text(path, error), str(path), error), expect, path, error)


def member(folder: str | os.PathLike, name: Any, listed_in: str, error: type[CselabError] = DataError) -> Path:
    """``folder / name`` for a file a manifest lists: a plain file name inside the folder (no path, no ``..``),
    and not a link (whatever it pointed to outside would be read as the folder's own)."""
    folder = Path(folder)
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise error(f"{folder / listed_in}: lists {shown(name)}, which is not a file name inside {folder}")
    path = folder / name
    if path.is_symlink():
        raise error(f"{path}: a link, not a file (a folder's files are its own, never followed out of it)")
    return path


def cache_folder(name: str) -> Path:
    """cselab's cache folder ``name``: under ``$CSELAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/cselab``, else
    ``~/.cache/cselab``."""
    if os.environ.get("CSELAB_CACHE_DIR"):
        return Path(os.environ["CSELAB_CACHE_DIR"]).expanduser() / name
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cselab" / name


def remove_path(path: str | os.PathLike) -> None:
    """Remove a file, a folder with its contents, or a link (the link only: never what it points to)."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


@contextlib.contextmanager
def kept_only_if_written(folder: str | os.PathLike) -> Iterator[None]:
    """A folder that did not exist before the block is removed when the block fails having written no file into it
    (a run refused before its first save leaves no empty folder behind); one holding any file is kept."""
    folder = Path(folder)
    existed = folder.exists() or folder.is_symlink()
    try:
        yield
    except BaseException:
        if not existed and folder.is_dir() and not folder.is_symlink() and all(
                not files and all(not (Path(root) / d).is_symlink() for d in dirs)
                for root, dirs, files in os.walk(folder)):
            shutil.rmtree(folder, ignore_errors=True)
        raise


def check_folder(path: str | os.PathLike, flag: str = "--out", file: bool = False,
                 inputs: tuple[str | os.PathLike | None, ...] = ()) -> Path:
    """``path`` where a folder (or, with ``file``, a file) can be: inside folders only, for a folder itself a folder
    or nothing yet, in a place that can be written, and none of ``inputs`` (the files the command reads); else a
    ConfigError naming the flag. Checked before any work, so that the mistake is not found after it."""
    path = Path(path)
    if path.exists() and not path.is_dir() and not file:
        raise ConfigError(f"{flag} {path}: a file, where a folder goes")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{flag} {path}: {parent} is a file, not a folder")
    for given in (Path(name) for name in inputs if name is not None and Path(name).exists()):
        if path.exists() and os.path.samefile(path, given):
            raise ConfigError(f"{flag} {path}: is {given}, {'a folder' if given.is_dir() else 'a file'} this command "
                              f"reads; write {'elsewhere' if given.is_dir() else 'to another file'}")
        if given.is_dir() and path.resolve().is_relative_to(given.resolve()):
            raise ConfigError(f"{flag} {path}: inside {given}, a folder this command reads; write elsewhere")
    existing = next(folder for folder in (path, *path.parents) if folder.is_dir())  # where it would be made
    if not os.access(existing, os.W_OK | os.X_OK):
        read_only = hasattr(os, "statvfs") and os.statvfs(existing).f_flag & os.ST_RDONLY
        raise ConfigError(f"{flag} {path}: {existing} cannot be written ("
                          f"{'a read-only file system' if read_only else 'permission denied'}); give a {flag} where "
                          "this user can write")
    return path
