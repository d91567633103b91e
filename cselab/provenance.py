"""Where a number came from: the machine, torch's determinism settings, cselab's own source and the command line.

Written into every results JSON and every run folder's ``run.json`` (``"provenance"``), beside the weights' sha256
that the encoder adds; ``probe compare`` lists what differs between two results. None of it decides whether a run
may resume (that is the identity's job, :mod:`cselab.train.out.folder`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import cselab
from cselab.checksum import sha256

DETERMINISM_ENV = ("CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED")
CHANGED_SHOWN = 50


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), or what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    run = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True, check=False, timeout=30)
    return run.stdout.strip().splitlines()[0] if run.returncode == 0 and run.stdout.strip() else None


def device_info(device: str | None = None) -> dict[str, Any]:
    """The device that computed: the CPU (model, cores torch uses) and, when CUDA is in use, the GPU's name, the
    driver, CUDA's and cuDNN's versions."""
    import torch

    info: dict[str, Any] = {"type": "cuda" if str(device or "cpu").startswith("cuda") else "cpu", "cpu": cpu_name(),
                            "torch_threads": torch.get_num_threads()}
    if device is not None and info["type"] == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index or 0
        info.update({"gpu": torch.cuda.get_device_name(index), "driver": _nvidia_driver(), "cuda": torch.version.cuda,
                     "cudnn": torch.backends.cudnn.version()})
    return info


def determinism() -> dict[str, Any]:
    """torch's settings that make a computation repeat bit for bit, or not."""
    import torch

    cudnn = torch.backends.cudnn
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_deterministic": cudnn.deterministic, "cudnn_benchmark": cudnn.benchmark,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            **{name: os.environ.get(name) for name in DETERMINISM_ENV}}


def package_sha256() -> str:
    """One sha256 over every file of cselab's package (its code and its data: presets, the ledger, test sets), by
    path: what changes when the code that computes a number changes, installed or checked out, committed or not."""
    package = Path(cselab.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(package).as_posix()}\0{sha256(path)}\n".encode())
    return digest.hexdigest()


def source() -> dict[str, Any]:
    """cselab's version and the sha256 of its package's files; when it runs from a git checkout, also the commit,
    whether the package has changes (files modified, added or untracked, as ``git status --porcelain`` lists them;
    files outside ``cselab/`` do not count) and their list (``changed``, the first :data:`CHANGED_SHOWN`)."""
    info: dict[str, Any] = {"version": cselab.__version__, "commit": None, "dirty": None, "changed": None,
                            "source_sha256": package_sha256()}
    package = Path(cselab.__file__).resolve().parent
    root = package.parent
    if (root / ".git").exists() and shutil.which("git"):
        def git(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False,
                                  timeout=60)

        head = git("rev-parse", "HEAD")
        if head.returncode == 0:
            status = git("status", "--porcelain", "--untracked-files=all", "--", package.name)
            changed = status.stdout.splitlines() if status.returncode == 0 else None
            info.update({"commit": head.stdout.strip(), "dirty": None if changed is None else bool(changed),
                         "changed": None if changed is None else changed[:CHANGED_SHOWN]
                         + ([f"... and {len(changed) - CHANGED_SHOWN} more"] if len(changed) > CHANGED_SHOWN else [])})
    return info


_command: list[str] | None = None


def record_command(words: list[str]) -> None:
    """The command the CLI runs (``cselab ...``), for :func:`command_line`; the process's own arguments otherwise."""
    global _command
    _command = list(words)


def command_line() -> str:
    """The command as it was given: the program's name and its arguments, quoted for a shell."""
    words = _command if _command is not None else [Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv else []
    return shlex.join(words)


def provenance(device: str | None = None, weights: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything above, with the weight files' sha256 (name to digest) when there are weights."""
    return {"weights_sha256": weights or None, "device": device_info(device), "determinism": determinism(),
            "cselab": source(), "command": command_line()}
