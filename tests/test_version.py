"""The version is declared once, in ``cselab.__version__``: the distribution's metadata reads it from there."""

from importlib.metadata import version
from pathlib import Path

import pytest

import cselab

tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_distribution_takes_its_version_from_the_package():
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cselab.__version__"}
    assert version("cselab-toolkit") == cselab.__version__
