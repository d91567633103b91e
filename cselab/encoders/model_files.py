"""The files a model is made of, read once: what its vectors, its cache key and its provenance depend on.

A model folder's files are those at its top (the transformer, its tokenizer, ``cselab.json``) and, for a
sentence-transformers folder, every file under each module's folder that ``modules.json`` lists (``1_Pooling/``,
``2_Dense/`` ...): the weights (``*.safetensors``, ``*.bin``, ``*.pt``, ``*.pth`` and their indexes) and the
configuration, vocabulary and code files (``*.json``, ``*.txt``, ``*.model``, ``*.py``, ``*.yaml``). Weights in
formats torch never loads (TensorFlow, Flax, ONNX) and documentation are left out.

:meth:`ModelFiles.read` notes each file's inode, size and modification time, then hashes it; once the model is
loaded, :meth:`ModelFiles.check_unchanged` looks again and refuses a folder that changed in between (a training run
replaces ``OUT/best`` at each better evaluation), so the weights hashed are the weights loaded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cselab.checksum import sha256
from cselab.errors import ModelError
from cselab.files import read_json

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SETTING_SUFFIXES = (".json", ".txt", ".model", ".py", ".yaml")


def _module_folders(folder: Path) -> list[Path]:
    """The folders of a sentence-transformers model's modules (``modules.json``), the top one aside."""
    listing = folder / "modules.json"
    if not listing.is_file():
        return []
    modules = read_json(listing, ModelError, expect=list)
    paths = [module.get("path") if isinstance(module, dict) else None for module in modules]
    names = [path for path in paths if isinstance(path, str)]
    if len(names) != len(paths):
        raise ModelError(f"{listing}: not in the form sentence-transformers writes, a list of {{idx, name, path, "
                         "type}}")
    found = []
    for path in names:
        module = (folder / path).resolve()
        if path and module.is_dir() and module.is_relative_to(folder.resolve()):
            found.append(folder / path)
    return found


def _is_model_file(path: Path) -> bool:
    name = path.name
    return (not name.startswith(".") and path.is_file()
            and (name.endswith(WEIGHT_SUFFIXES) or name.endswith(SETTING_SUFFIXES)))


def list_files(folder: Path) -> list[Path]:
    """The files of the model in ``folder`` (see the module docstring), sorted."""
    files = {path for path in folder.iterdir() if _is_model_file(path)}
    for module in _module_folders(folder):
        files.update(path for path in module.rglob("*") if _is_model_file(path))
    return sorted(files)


def _stamp(path: Path) -> tuple[int, int, int]:
    status = path.stat()
    return status.st_ino, status.st_size, status.st_mtime_ns


def _stamps(folder: Path) -> dict[str, tuple[int, int, int]]:
    try:
        return {path.relative_to(folder).as_posix(): _stamp(path) for path in list_files(folder)}
    except OSError as err:
        raise ModelError(f"{folder}: cannot be read ({err.strerror or err})") from None


@dataclass(frozen=True)
class ModelFiles:
    """The files of a model folder by path inside it, with their sha256 (as ``sha256sum`` prints it)."""

    folder: Path
    sha256: dict[str, str]
    stamps: dict[str, tuple[int, int, int]]

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> ModelFiles:
        """Note every file's inode, size and time, then hash it."""
        folder = Path(folder)
        stamps = _stamps(folder)
        try:
            digests = {name: sha256(folder / name) for name in stamps}
        except OSError as err:
            raise ModelError(f"{folder}: a file cannot be read ({err.strerror or err}: {err.filename})") from None
        return cls(folder, digests, stamps)

    def weights(self) -> dict[str, str]:
        """The weight files among them."""
        return {name: digest for name, digest in self.sha256.items()
                if name.endswith(WEIGHT_SUFFIXES) or name.endswith((".safetensors.index.json", ".bin.index.json"))}

    def combined(self) -> str:
        """One sha256 over every file's path and sha256."""
        digest = hashlib.sha256()
        for name, file_digest in sorted(self.sha256.items()):
            digest.update(f"{name}\0{file_digest}\n".encode())
        return digest.hexdigest()

    def check_unchanged(self) -> None:
        """Refuse the folder when a file was added, removed, replaced or written since :meth:`read`."""
        now = _stamps(self.folder)
        if now != self.stamps:
            changed = sorted(name for name in set(now) | set(self.stamps) if now.get(name) != self.stamps.get(name))
            raise ModelError(f"{self.folder}: changed while it was being loaded ({', '.join(changed[:3])}"
                             f"{' ...' if len(changed) > 3 else ''}), so the weights read may not be the weights "
                             "hashed; load it again once it is no longer being written (a training run replaces "
                             "OUT/best at each better evaluation)")
