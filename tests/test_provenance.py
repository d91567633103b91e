"""Provenance that tells the truth: cselab's package as it ran, committed, modified or with files git does not
track."""

import subprocess

import pytest

import cselab
from cselab import provenance


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout of a small ``cselab`` package, which provenance takes for cselab's own."""
    root = tmp_path / "checkout"
    (root / "cselab" / "train" / "plugins").mkdir(parents=True)
    (root / "cselab" / "__init__.py").write_text("__version__ = '0.1.0'\n")
    (root / "cselab" / "train" / "plugins" / "losses.py").write_text("LOSSES = []\n")
    (root / "README.md").write_text("cselab\n")

    def git(*args):
        subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    monkeypatch.setattr(cselab, "__file__", str(root / "cselab" / "__init__.py"))
    return root


def test_a_clean_checkout_is_not_dirty(checkout):
    found = provenance.source()
    assert found["dirty"] is False and found["changed"] == [] and len(found["commit"]) == 40


@pytest.mark.parametrize(("change", "listed"), [
    ("an untracked plug-in module", "?? cselab/train/plugins/planted.py"),
    ("a modified module", " M cselab/train/plugins/losses.py"),
])
def test_untracked_and_modified_package_files_make_the_tree_dirty_and_are_listed(checkout, change, listed):
    before = provenance.source()
    if change.startswith("an untracked"):
        (checkout / "cselab" / "train" / "plugins" / "planted.py").write_text("print('trains with me')\n")
    else:
        (checkout / "cselab" / "train" / "plugins" / "losses.py").write_text("LOSSES = ['changed']\n")
    found = provenance.source()
    assert found["dirty"] is True and found["changed"] == [listed]
    assert found["source_sha256"] != before["source_sha256"] and found["commit"] == before["commit"]


def test_a_change_outside_the_package_leaves_it_clean(checkout):
    (checkout / "README.md").write_text("edited\n")
    (checkout / "notes.txt").write_text("untracked, outside the package\n")
    assert provenance.source()["dirty"] is False
