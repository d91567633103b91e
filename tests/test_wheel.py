"""A built wheel works on its own: built from the checkout, installed into a fresh virtual environment (its
dependencies taken from the test environment's site-packages, cselab from the wheel alone), it lists the presets,
shows every preset's config, writes the protocol ledger and runs `probe run --model bow` with the bias suite, whose
transformation test set ships in the wheel: nothing is read from the source tree."""

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh virtual environment holding the wheel built from this checkout."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"  # the checkout's files alone: no build/ or egg-info of an earlier build
    for name in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True,
                               text=True).stdout.split("\0"):
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(folder / "dist"), str(source)], check=True, capture_output=True, cwd=folder)
    (wheel,) = (folder / "dist").glob("*.whl")
    venv.create(folder / "env", with_pip=False)
    python = folder / "env" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", purelib,
                    str(wheel)], check=True, capture_output=True)
    # the dependencies (torch ...) from this environment, appended after the wheel's own site-packages; a path line of
    # a .pth file runs none of the .pth files there, so the checkout's editable install is not seen
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run(python: Path, code: str, cwd: Path) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_installed_wheel_is_cselab_itself_not_the_checkout(installed, tmp_path):
    where = run(installed, "import cselab; print(cselab.__file__)", tmp_path).strip()
    assert Path(where).is_relative_to(installed.parents[1]) and not Path(where).is_relative_to(ROOT)


@pytest.mark.slow
def test_the_wheel_carries_the_presets_the_ledger_and_the_test_sets(installed, tmp_path, data_dir):
    code = f"""
import contextlib, io, json
from cselab.cli import main
from cselab.train.config.methods import preset_names
shown = {{}}
for name in preset_names():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["train", "--method", name, "--show-config"]) == 0
    shown[name] = buffer.getvalue()
with contextlib.redirect_stdout(io.StringIO()) as listing:
    assert main(["train", "--list-methods"]) == 0
assert main(["probe", "run", "--model", "bow", "--suite", "sts,bias", "--limit", "20", "--data-dir", {str(data_dir)!r},
             "--out", "r.json"]) == 0
from cselab.train import protocols
print(json.dumps({{"presets": sorted(shown), "listed": listing.getvalue(), "ledger": len(protocols.markdown())}}))
"""
    found = json.loads(run(installed, code, tmp_path).strip().splitlines()[-1])
    assert len(found["presets"]) == len(list((ROOT / "cselab" / "train" / "config" / "presets").glob("*.yaml")))
    assert all(name in found["listed"] for name in ("simcse", "osscse", "sg-opt")) and found["ledger"] > 10_000
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["sts"]["avg"] is not None and payload["bias"]["transformations"]["n_sources"] == 48
    assert Path(payload["bias"]["transformations"]["testset"]).is_relative_to(installed.parents[1])


@pytest.mark.slow
def test_the_wheel_carries_its_metadata_and_the_typed_marker(installed, tmp_path):
    code = """
import json
from importlib.metadata import metadata, files
meta = metadata("cselab-toolkit")
print(json.dumps({"author": meta.get("Author") or meta.get("Author-email"), "keywords": meta.get("Keywords"),
                  "classifiers": meta.get_all("Classifier"), "license": meta.get("License-Expression"),
                  "typed": any(str(f).endswith("cselab/py.typed") for f in files("cselab-toolkit")),
                  "readme": meta.get_payload(), "readme_type": meta.get("Description-Content-Type")}))
"""
    found = json.loads(run(installed, code, tmp_path).strip().splitlines()[-1])
    assert found["author"] == "The cselab developers" and "sentence embeddings" in found["keywords"]
    assert "Typing :: Typed" in found["classifiers"] and "Intended Audience :: Science/Research" in found["classifiers"]
    assert found["license"] == "MIT" and found["typed"]
    # the index's page: the README with no relative link (dead there), each written as the file it names
    assert found["readme_type"] == "text/markdown" and "# cselab" in found["readme"]
    assert "](docs/" not in found["readme"] and "| docs/install.md |" in found["readme"]


def test_the_index_readme_makes_relative_links_absolute_or_plain():
    sys.path.insert(0, str(ROOT / "build_backend"))
    try:
        from cselab_build import index_readme
    finally:
        sys.path.remove(str(ROOT / "build_backend"))
    text = "See [docs/train.md](docs/train.md), [the ledger](docs/protocols.md#x), [web](https://x.org) and [top](#a)."
    assert index_readme(text, "https://example.org/cselab/blob/main/") == (
        "See [docs/train.md](https://example.org/cselab/blob/main/docs/train.md), [the ledger]"
        "(https://example.org/cselab/blob/main/docs/protocols.md#x), [web](https://x.org) and [top](#a).")
    assert index_readme(text, None) == ("See docs/train.md, the ledger (docs/protocols.md#x), [web](https://x.org) "
                                        "and [top](#a).")
