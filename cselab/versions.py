"""Versions of what shapes a result: Python packages, installed data packages and Debian tools."""

from __future__ import annotations

import platform
import shutil
import subprocess
from importlib import metadata

PACKAGES = ("cselab", "torch", "transformers", "sentence-transformers", "numpy", "scipy", "scikit-learn")


def package_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``packages`` (None when missing), and Python's. ``cselab`` is the code running: its
    ``__version__``, not a distribution's metadata (it is distributed as ``cselab-toolkit``; the ``cselab`` on the
    package index is another program)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        if name == "cselab":
            from cselab import __version__

            versions[name] = __version__
            continue
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def debian_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Versions of Debian packages (``dpkg-query``), None where it is not installed or there is no dpkg."""
    versions: dict[str, str | None] = dict.fromkeys(packages)
    if shutil.which("dpkg-query") is None:
        return versions
    for name in packages:
        run = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True,
                             check=False)
        versions[name] = run.stdout.strip() or None if run.returncode == 0 else None
    return versions
