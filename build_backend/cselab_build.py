"""cselab's build backend: setuptools' own, with the long description made for the package index first.

README.md links the docs by relative paths, which are dead on the package index's page. Each hook first writes
``build/index-readme.md``, the long description pyproject.toml names: README.md with every relative link made
absolute against the project's ``Source`` URL (``[project.urls]``), or, while the project has none, written as the
file it names. The README itself stays as it is, for the repository and the source distribution.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import build_meta

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[([^\]]+)\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s]+)\)")  # a link to a path, not to a URL or anchor
SOURCE = re.compile(r'^\[project\.urls\][^\[]*?^Source\s*=\s*"([^"]+)"', re.M | re.S)


def index_readme(text: str, source: str | None) -> str:
    """``text`` with each relative link absolute under ``source`` (a folder URL), or, without one, as plain text
    naming its file."""
    if source:
        return LINK.sub(lambda m: f"[{m[1]}]({source.rstrip('/')}/{m[2]})", text)
    return LINK.sub(lambda m: m[1] if m[1] == m[2] else f"{m[1]} ({m[2]})", text)


def write_index_readme(root: Path = ROOT) -> Path:
    found = SOURCE.search((root / "pyproject.toml").read_text(encoding="utf-8"))
    out = root / "build" / "index-readme.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(index_readme((root / "README.md").read_text(encoding="utf-8"), found and found[1]),
                   encoding="utf-8")
    return out


def _hook(name: str):
    """setuptools' hook ``name``, once the long description is written."""
    def hook(*args, **kwargs):
        write_index_readme()
        return getattr(build_meta, name)(*args, **kwargs)
    hook.__name__ = hook.__qualname__ = name
    return hook


HOOKS = ("get_requires_for_build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_editable",
         "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable", "build_wheel", "build_sdist",
         "build_editable")
globals().update({name: _hook(name) for name in HOOKS})
