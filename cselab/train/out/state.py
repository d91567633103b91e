"""The training state a run leaves in ``OUT/last``, written and read by cselab, with no pickle that can hold code.

Files: ``model.safetensors`` (the training encoder: backbone and head; with an adapter, only the weights that train,
the adapter's and a head's, the base's frozen ones being the base model's, whose sha256 is the run's identity),
``momentum.safetensors`` (a momentum
encoder's weights, when the method has one), ``optimizer.pt``, ``scheduler.pt``, ``scaler.pt`` (fp16 only),
``rng-RANK.pt`` (each process's Python, NumPy, torch and CUDA generators), ``objective-RANK.pt`` (each process's
objective ``state_dict``: its losses' own state, e.g. a memory bank or a queue of that process's rows; a state saved
before per-process objectives has one ``objective.pt``, the main process's),
``trainer_state.json`` (the step, the best score and the state of each callback that has one, e.g. the early stop's
count) and
``MANIFEST.json``, written last: the size and sha256 of every other file. The ``.pt`` files are ``torch.save`` of
tensors and plain containers, read with ``weights_only=True``.

:func:`verify` checks a state folder against its manifest before anything in it is read: a missing, damaged,
unlisted or planted file is a :class:`StateError` naming it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from cselab.atomic import with_umask, write_json_atomic
from cselab.checksum import sha256
from cselab.encoders.transformer import is_sharded
from cselab.errors import TrainingError
from cselab.files import member, read_json
from cselab.train import sharding

MANIFEST = "MANIFEST.json"
STATE_FILE = "trainer_state.json"
OBJECTIVE_FILE = "objective-{rank}.pt"
SHARED_OBJECTIVE_FILE = "objective.pt"  # a state saved before each process kept its own
MOMENTUM_FILE = "momentum.safetensors"
FORMAT = "cselab-training-state"


class StateError(TrainingError):
    """A state folder that cannot be resumed from: the message names the file."""


def rng_state() -> dict[str, Any]:
    """This process's random generators, as tensors and plain values."""
    legacy = np.random.get_state()
    assert isinstance(legacy, tuple)  # the global RandomState's generator is MT19937: its legacy tuple
    name, keys, position, has_gauss, cached = legacy
    state = {"python": random.getstate(), "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position,
                                                    has_gauss, cached), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_process_state(folder: Path, rank: int, objective: torch.nn.Module) -> None:
    """Every process's own part: its random generators and its objective's state."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), folder / f"rng-{rank}.pt")
    torch.save(objective.state_dict(), folder / OBJECTIVE_FILE.format(rank=rank))


def save_shared_state(folder: Path, model: torch.nn.Module, optimizer, scheduler, scaler,
                      trainer: dict[str, Any], optimizer_state: dict[str, Any] | None = None) -> None:
    """The main process's part: weights (a momentum copy's too), optimizer (``optimizer_state``: its state gathered
    from the shards, instead of ``optimizer.state_dict()``), schedule and the trainer's counters."""
    folder.mkdir(parents=True, exist_ok=True)
    trained = trained_weights(model)
    if trained is None:
        save_model(model, str(folder / "model.safetensors"))
    else:
        save_file({name: tensor.detach().contiguous() for name, tensor in trained.items()},
                  str(folder / "model.safetensors"))
    momentum_copy = _momentum_copy(model)
    if momentum_copy is not None:
        save_model(momentum_copy, str(folder / MOMENTUM_FILE))
    torch.save(optimizer.state_dict() if optimizer_state is None else optimizer_state, folder / "optimizer.pt")
    torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    if scaler is not None:
        torch.save(scaler.state_dict(), folder / "scaler.pt")
    (folder / STATE_FILE).write_text(json.dumps(trainer), encoding="utf-8")


def _momentum_copy(model: torch.nn.Module) -> torch.nn.Module | None:
    """A momentum encoder's copy (a TrainingEncoder's frozen copy, with momentum; not a submodule), or None."""
    return model.__dict__["frozen"] if getattr(model, "momentum", None) is not None else None


def trained_weights(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """With an adapter, the weights that train (the adapter's, a head's), by name: all ``OUT/last`` keeps of the
    model; None without one (the whole model is kept)."""
    if getattr(model, "adapter", None) is None:
        return None
    return {name: parameter for name, parameter in model.named_parameters() if parameter.requires_grad}


def _load_trained(model: torch.nn.Module, expected: dict[str, torch.Tensor], path: Path, device: str) -> None:
    """An adapter run's saved weights into ``model``: exactly the weights that train (``expected``), or a
    StateError."""
    saved = load_file(str(path), device=device)
    if saved.keys() != expected.keys():
        differ = sorted(saved.keys() ^ expected.keys())
        raise StateError(f"{path}: holds {len(saved)} tensors where the run trains {len(expected)} (e.g. {differ[0]}); "
                         "it was saved by a run with other adapter settings")
    model.load_state_dict(saved, strict=False)


def write_manifest(folder: Path) -> Path:
    """The size and sha256 of every file in ``folder``; written last, atomically."""
    with_umask(folder)  # safetensors' save leaves its file 0600
    files = {path.name: {"bytes": path.stat().st_size, "sha256": sha256(path)}
             for path in sorted(folder.iterdir()) if path.is_file() and path.name != MANIFEST}
    return write_json_atomic(folder / MANIFEST, {"format": FORMAT, "version": 1, "files": files})


def verify(folder: Path) -> dict[str, Any]:
    """Check every file of a state folder against its manifest; returns the trainer's counters."""
    if folder.is_symlink():
        raise StateError(f"{folder}: a link, not the run's own folder; nothing is resumed through it")
    try:
        listed = read_json(folder / MANIFEST, StateError).get("files")
    except StateError as err:
        raise StateError(f"{err}, so nothing in {folder} can be trusted") from None
    if not isinstance(listed, dict) or not all(isinstance(r, dict) and isinstance(r.get("bytes"), int)
                                               and isinstance(r.get("sha256"), str) for r in listed.values()):
        raise StateError(f"{folder / MANIFEST}: files: expected name -> {{bytes, sha256}}, so nothing in {folder} "
                         "can be trusted")
    unlisted = sorted({path.name for path in folder.iterdir()} - {MANIFEST} - set(listed))
    if unlisted:
        raise StateError(f"{folder / unlisted[0]}: not written by the run (not in {MANIFEST})")
    for name, expected in listed.items():
        path = member(folder, name, MANIFEST, StateError)
        if not path.is_file():
            raise StateError(f"{path}: missing (listed in {MANIFEST})")
        if path.stat().st_size != expected["bytes"] or sha256(path) != expected["sha256"]:
            raise StateError(f"{path}: damaged ({path.stat().st_size} bytes, {expected['bytes']} written; the "
                             "sha256 differs)")
    counters = read_json(folder / STATE_FILE, StateError)
    if not all(isinstance(counters.get(k), (int, float)) for k in ("step", "best")) \
            or not isinstance(counters.get("callbacks"), dict):
        raise StateError(f"{folder / STATE_FILE}: expected the numbers step and best, and the callbacks' states")
    return counters


def _load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # any failure to read a verified file: name it, never fall back to pickle
        raise StateError(f"{path}: cannot be read safely ({type(err).__name__}: {err})") from None


def load_state(folder: Path, rank: int, model: torch.nn.Module, optimizer, scheduler, scaler,
               objective: torch.nn.Module, processes: int = 1) -> None:
    """Restore everything :func:`save_process_state` and :func:`save_shared_state` wrote (verify first), on one of
    ``processes`` processes; a state of more processes whose objective keeps state of its own (a queue, a memory bank)
    is refused: the other processes' would be lost."""
    path = folder / f"rng-{rank}.pt"
    if not path.is_file():
        raise StateError(f"{path}: missing: the state was saved by a run with fewer processes")
    more = folder / OBJECTIVE_FILE.format(rank=processes)
    if more.is_file() and objective.state_dict():
        raise StateError(f"{more}: the state was saved by a run with more processes, each with its own objective "
                         f"state (a queue, a memory bank) that {processes} process(es) cannot hold; resume with as "
                         "many processes as the run had")
    device = str(next(model.parameters()).device)
    weights, trained = [(model, "model.safetensors")], trained_weights(model)
    momentum_copy = _momentum_copy(model)
    if momentum_copy is not None:
        weights.append((momentum_copy, MOMENTUM_FILE))
    for module, name in weights:
        if not (folder / name).is_file():  # the only one a state may lack (model.safetensors is in every manifest)
            raise StateError(f"{folder / name}: missing: the state was saved by a run without a momentum encoder")
        try:
            if module is model and trained is not None:
                _load_trained(model, trained, folder / name, device)
            elif is_sharded(module):  # FSDP2: the full tensors saved, cut to this process's shards
                sharding.load_full_model_state(module, load_file(str(folder / name)))
            else:
                load_model(module, str(folder / name), device=device)
        except StateError:
            raise
        except Exception as err:
            raise StateError(f"{folder / name}: does not fit the model ({type(err).__name__}: {err})") from None
    saved_optimizer = _load(folder / "optimizer.pt")
    optimizer.load_state_dict(sharding.shard_optimizer_state(optimizer, saved_optimizer)
                              if is_sharded(model) else saved_optimizer)
    scheduler.load_state_dict(_load(folder / "scheduler.pt"))
    if scaler is not None:
        scaler.load_state_dict(_load(folder / "scaler.pt"))
    own = folder / OBJECTIVE_FILE.format(rank=rank)
    saved = own if own.is_file() or not (folder / SHARED_OBJECTIVE_FILE).is_file() else folder / SHARED_OBJECTIVE_FILE
    try:
        objective.load_state_dict(_load(saved))
    except StateError:
        raise
    except Exception as err:
        raise StateError(f"{saved}: does not fit the method's objective ({type(err).__name__}: {err})") from None
    rng = _load(path)
    try:
        set_rng_state(rng)
    except Exception as err:
        raise StateError(f"{path}: the random generators cannot be restored ({type(err).__name__}: {err})") from None
