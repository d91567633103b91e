"""The docs' worked examples run."""

import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from cselab import registry
from cselab.document import to_markdown
from cselab.registry import build, get
from cselab.train.config.method import with_data
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train
from tests.conftest import isolated_registry

DOCS = Path(__file__).resolve().parents[1] / "docs"


def example_files(page: str) -> dict[str, str]:
    """The files a page spells out: each fenced block right after a ``<!-- file: NAME -->`` line."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S))


SMALL = ["training.batch_size=16", "training.max_length=24", "training.max_steps=2", "training.eval_steps=2",
         "training.dev=none"]  # two steps, no data root


def page_method(tmp_path, monkeypatch, module: str, method: str, *overrides: str) -> dict:
    """The method ``method``.yaml of adding-a-method.md, its plug-in ``module`` imported from the page's own
    files (its registration kept to the calling test), resolved with :data:`SMALL` and ``overrides``."""
    for name, text in example_files("adding-a-method.md").items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    isolated_registry(monkeypatch)
    monkeypatch.delitem(sys.modules, module, raising=False)
    return load_method(tmp_path / f"{method}.yaml", [*SMALL, *overrides])


@pytest.mark.slow
def test_adding_a_method_is_one_module_and_one_yaml_that_train(tmp_path, monkeypatch, tiny_bert_dir, tiny_cache):
    assert sorted(example_files("adding-a-method.md")) == ["angular.py", "simcse-arc.yaml", "simcse-sphere.yaml",
                                                           "simcse-triplet.yaml", "sphere.py",
                                                           "test_plugins_of_this_page.py", "triplet.py"]
    method = page_method(tmp_path, monkeypatch, "triplet", "simcse-triplet")
    assert method.losses["triplet"] == {"weight": 0.5, "anchor": "anchor", "positive": "paraphrase",
                                           "negative": "negation", "margin": 0.1}
    # the function against a hand-computed value: cos(a, p) = 1, cos(a, n) = 0.6 -> max(0, 0.1 - 0.4) = 0; and
    # cos(a, p) = 0.6, cos(a, n) = 1 -> 0.1 + 0.4 = 0.5
    a, p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0]]), torch.tensor([[0.6, 0.8]])
    loss = build(get("loss", "triplet"), method.losses["triplet"])  # as the objective builds it
    assert loss.views == {"anchor": "anchor", "positive": "paraphrase", "negative": "negation"}
    assert loss([a, p, n], None).tolist() == pytest.approx([0.0])
    assert loss([a, n, p], None).tolist() == pytest.approx([0.5])
    with pytest.raises(ValueError, match="losses.triplet.margin: -1.0 is out of range; expected a number >= 0"):
        load_method(tmp_path / "simcse-triplet.yaml", ["losses.triplet.margin=-1"])
    # trains without the data root (no dev set), the triplet loss logged beside InfoNCE
    summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(progress=False, log_every=1))
    assert summary["steps"] == 2 and summary["best_dev"] is None
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "loss" in r]
    assert all({"info_nce", "triplet"} <= set(r) and math.isfinite(r["triplet"]) for r in steps)
    assert all(r["loss"] == pytest.approx(r["info_nce"] + 0.5 * r["triplet"], rel=1e-5) for r in steps)
    assert load_method(tmp_path / "run" / "config.yaml") == with_data(method, tiny_cache)  # it repeats the run
    assert (tmp_path / "run" / "best" / "model.safetensors").exists()


@pytest.mark.slow
def test_a_source_of_negatives_is_one_module_and_one_yaml_that_train(tmp_path, monkeypatch, tiny_bert_dir,
                                                                      tiny_cache):
    method = page_method(tmp_path, monkeypatch, "sphere", "simcse-sphere")
    assert method.losses["info_nce"]["generated"] == {"kind": "sphere", "count": 16}
    source = Objective(method).losses[0].generated  # as the run builds it
    anchors = torch.randn(8, 5, requires_grad=True)
    negatives = source(anchors)
    assert negatives.shape == (16, 5) and not negatives.requires_grad
    torch.testing.assert_close(negatives.norm(dim=-1), torch.ones(16))
    assert source(torch.randn(8, 5)) is negatives  # one set per step
    with pytest.raises(ValueError, match="generated.count: 0 is out of range; expected a whole number >= 1"):
        load_method(tmp_path / "simcse-sphere.yaml", ["losses.info_nce.generated.count=0"])
    summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(progress=False))
    assert summary["steps"] == 2 and (tmp_path / "run" / "last" / "objective-0.pt").exists()


@pytest.mark.slow
def test_a_logit_transform_is_one_module_and_one_yaml_that_train(tmp_path, monkeypatch, tiny_bert_dir, tiny_cache):
    method = page_method(tmp_path, monkeypatch, "angular", "simcse-arc", "losses.info_nce.transform.margin=0.5236")
    assert method.losses["info_nce"]["transform"] == {"kind": "angular_margin", "margin": 0.5236}
    transform = Objective(method).losses[0].transform  # as the run builds it
    # hand-computed: the positive 0.5 = cos(pi/3) becomes cos(pi/3 + pi/6) = 0; the negative 0.2 stays
    shifted = transform(torch.tensor([[0.5, 0.2], [0.2, 0.5]]), torch.tensor([0, 1]))
    assert shifted.tolist() == [pytest.approx([0.0, 0.2], abs=1e-4), pytest.approx([0.2, 0.0], abs=1e-4)]
    with pytest.raises(ValueError, match="transform.margin: -0.1 is out of range; expected a number >= 0"):
        load_method(tmp_path / "simcse-arc.yaml", ["losses.info_nce.transform.margin=-0.1"])
    summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(progress=False, log_every=1))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert summary["steps"] == 2 and all(math.isfinite(r["info_nce"]) for r in log if "loss" in r)


def test_the_pages_plugins_keep_the_contract_through_its_own_test(tmp_path, monkeypatch):
    """The page's test of its plug-ins (cselab.testing.check_plugin) passes, and fails for a plug-in that breaks the
    contract: its parameter's help text removed."""
    for name, text in example_files("adding-a-method.md").items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    isolated_registry(monkeypatch)
    for module in ("triplet", "sphere", "angular", "test_plugins_of_this_page"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    import test_plugins_of_this_page

    test_plugins_of_this_page.test_the_pages_plugins_keep_cselabs_contract()
    count = next(f for f in dataclasses.fields(get("negatives", "sphere").cls.Params) if f.name == "count")
    monkeypatch.setattr(count, "metadata", {"setting": ("", count.metadata["setting"][1])})
    monkeypatch.setattr(registry, "_SCHEMAS", {})  # a class's schema is read once: this one was changed after that
    with pytest.raises(AssertionError, match="negatives 'sphere' .*count without a help text"):
        test_plugins_of_this_page.test_the_pages_plugins_keep_cselabs_contract()


def test_a_factory_encoder_is_scored_like_any_other(tmp_path, monkeypatch, capsys, data_dir):
    from cselab.cli import main

    (tmp_path / "mybaseline.py").write_text(
        "from cselab.encoders import LexicalEncoder\n\n\n"
        "class Wrapped:\n    def __init__(self):\n        self.inner = LexicalEncoder()\n\n"
        "    def encode(self, sentences):\n        return self.inner.encode(sentences)\n\n\n"
        "def factory():\n    return Wrapped()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "factory.json"
    assert main(["probe", "run", "--model", "mybaseline:factory", "--suite", "sts", "--tasks", "sts12,stsb",
                 "--limit", "50", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    assert main(["probe", "run", "--model", "bow", "--suite", "sts", "--tasks", "sts12,stsb", "--limit", "50",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "bow.json")]) == 0
    factory, bow = (json.loads(p.read_text()) for p in (out, tmp_path / "bow.json"))
    assert factory["model"]["spec"] == "mybaseline:factory" and factory["model"]["factory_returned"] == "Wrapped"
    assert factory["sts"] == bow["sts"]  # the same vectors through the factory give the same scores
    assert main(["probe", "run", "--model", "mybaseline:nothing", "--out", str(out)]) == 2
    assert "mybaseline has no function 'nothing'" in capsys.readouterr().err


def test_the_readme_is_a_front_door_that_links_every_page():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", readme))
    assert linked == {page.name for page in DOCS.glob("*.md")}
    for page in DOCS.glob("*.md"):  # every relative link of the docs points at a file
        for target in re.findall(r"\]\(((?!https?:)[^)#]+)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links {target}"


@pytest.mark.slow
def test_adding_a_probe_is_one_module_that_run_report_compare_and_sweeps_pick_up(tmp_path, monkeypatch, data_dir,
                                                                                tiny_bert_dir, tiny_cache, capsys,
                                                                                own_registry):
    from cselab.cli import main
    from cselab.encoders import load_encoder
    from cselab.experiments.sweep import SweepSpec, run_sweep
    from cselab.probes import suite
    from cselab.probes.runner import run_probes, write_outputs

    files = example_files("adding-a-probe.md")
    assert sorted(files) == ["lengths.py", "test_lengths.py"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("lengths", "test_lengths"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    __import__("test_lengths").test_the_lengths_suite_keeps_cselabs_contract()  # the page's own test of it
    options = suite.ProbeOptions(data_dir=data_dir, limit=12)
    for name, model in (("bow", "bow"), ("tiny", str(tiny_bert_dir))):  # unit vectors, and vectors of any norm
        payload = run_probes(load_encoder(model, data_dir=data_dir, cache=False), "sts,lengths", options)
        assert payload["lengths"]["n"] == 12 and payload["items"]["lengths/norm"].shape == (12,)
        assert payload["lengths"]["norm_split"] == "dev"  # its setting's default
        assert "## Vector norms (STS-B dev)\n\n| Model " in to_markdown(suite.suite_sections(payload))
        write_outputs(payload, tmp_path / f"{name}.json")
    # probe compare: its column in the summary table, and the mean norm's difference with its interval
    assert main(["probe", "compare", str(tmp_path / "bow.json"), str(tmp_path / "tiny.json")]) == 0
    printed = capsys.readouterr().out
    assert "| Model" in printed and "| STS avg. | Mean norm |" in printed
    table = printed[printed.index("vs bow: Vector norms"):]
    row = next(line for line in table.splitlines() if line.startswith("| Mean norm"))
    low, high = (float(x) for x in row.split("[")[1].split("]")[0].split(","))
    assert low <= high and low != high
    # its setting is an option of probe run, listed under the suite's name and checked by its declaration
    with pytest.raises(SystemExit):
        main(["probe", "run", "--help"])
    assert "lengths suite:\n  --norm-split {dev,test}" in capsys.readouterr().out
    assert main(["probe", "run", "--model", "bow", "--suite", "lengths", "--norm-split", "test", "--limit", "12",
                 "--data-dir", str(data_dir), "--no-cache", "--out", str(tmp_path / "test.json")]) == 0
    assert json.loads((tmp_path / "test.json").read_text())["lengths"]["norm_split"] == "test"
    assert main(["probe", "compare", str(tmp_path / "bow.json"), str(tmp_path / "test.json")]) == 0
    printed = capsys.readouterr().out
    assert "were not scored on the same items of the lengths suite" in printed and "norm split ('dev' vs 'test')" \
        in printed and "| Mean norm" not in printed.split("## Differences against")[1]  # no item-by-item figures
    # a sweep scored with it: its column in the summary
    spec = SweepSpec(("simcse",), (0,), tmp_path / "sweep", str(tiny_bert_dir), data=tiny_cache,
                     overrides=(*SMALL[:2], "training.max_steps=1", "training.eval_steps=1", "training.dev=none"),
                     data_dir=data_dir, sts_limit=12, suites=("sts", "lengths"))
    summary = run_sweep(spec, progress=False)
    assert summary["columns"]["mean_norm"] == {"suite": "lengths", "label": "Mean norm", "digits": 3, "main": True}
    header = next(line for line in (tmp_path / "sweep" / "summary.md").read_text().splitlines()
                  if line.startswith("| Method"))
    assert "| avg " in header and "| mean_norm " in header


@pytest.mark.slow
def test_the_callback_example_of_train_md_ends_a_run_and_keeps_its_state(tmp_path, monkeypatch, tiny_bert_dir,
                                                                          tiny_cache):
    (tmp_path / "stop_below.py").write_text(example_files("train.md")["stop_below.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "stop_below", raising=False)
    from stop_below import StopBelow

    method = load_method("simcse", [*SMALL[:2], "training.max_steps=6", "training.eval_steps=6", "training.dev=none"])
    summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(progress=False,
                    callbacks=[StopBelow(math.inf, steps=2)]))  # every loss is below infinity: it stops at step 2
    assert summary["steps"] == 2 and summary["stopped_by"] == "StopBelow"
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[-1] == {"step": 2, "stopped_by": "StopBelow", "reason": "the loss stayed below inf for 2 steps"}
    saved = json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())
    assert saved["callbacks"] == {"StopBelow": {"below": 2}}
    # a loss never below 0: the run goes to its end
    summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "other", RunOptions(progress=False,
                    callbacks=[StopBelow(0.0)]))
    assert summary["steps"] == 6 and summary["stopped_by"] is None


def test_the_one_step_example_of_train_md_is_the_trainers_step(tmp_path, monkeypatch, tiny_bert_dir):
    (tmp_path / "one_step.py").write_text(example_files("train.md")["one_step.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "one_step", raising=False)
    from one_step import one_step

    sentences = [f"sentence {i} about the {topic}" for i, topic in enumerate(["sea", "hills", "city", "plain"] * 32)]
    torch.manual_seed(0)
    losses = one_step(str(tiny_bert_dir), sentences)
    assert math.isfinite(losses["loss"]) and losses["loss"] > 0 and losses["grad_norm"] > 0
    assert len(losses.per_batch()) == 1


@pytest.mark.slow
def test_a_back_translation_backend_from_a_package_builds_a_cache_keyed_by_its_version(tmp_path, monkeypatch,
                                                                                       own_registry):
    from cselab.augment.backtranslate import backend_package
    from cselab.augment.cache import AugmentConfig
    from cselab.cli import main
    from cselab.data.augmented import load_cache, read_manifest
    from cselab.errors import ConfigError
    from tests.conftest import installed

    (tmp_path / "rotate_backend.py").write_text(example_files("augment.md")["rotate_backend.py"])
    installed(tmp_path, monkeypatch, "rotate-backend", "cselab.backtranslation", "rotate_backend")
    own_registry._DISCOVERED.pop("cselab.backtranslation")
    monkeypatch.delitem(sys.modules, "rotate_backend", raising=False)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The committee approved the new budget on Monday.\nShe walked to the station in the rain.\n"
                      "Rain.\n")
    assert main(["augment", "--corpus", str(corpus), "--out", str(tmp_path / "cache"), "--backend", "rotate"]) == 0
    (folder,) = (tmp_path / "cache").iterdir()
    manifest = read_manifest(folder)
    assert manifest["models"]["backtranslation"] == "rotate" and manifest["config"]["backend"] == "rotate"
    rows = load_cache(folder)
    assert rows["paraphrase"][:2] == ["committee approved the new budget on Monday. The",
                                      "walked to the station in the rain. She"]
    assert rows["paraphrase"][2] is None  # one word: no candidate
    key = AugmentConfig(backend="rotate").key("0" * 64)
    assert folder.name == AugmentConfig(backend="rotate").key(manifest["input_sha256"])
    assert backend_package("rotate") == "rotate-backend==0.1" and backend_package("apertium") is None
    installed(tmp_path, monkeypatch, "rotate-backend", "cselab.backtranslation", "rotate_backend", "0.2")  # a release
    own_registry._DISCOVERED.pop("cselab.backtranslation")
    assert backend_package("rotate") == "rotate-backend==0.2" and AugmentConfig(backend="rotate").key("0" * 64) != key
    with pytest.raises(ConfigError, match="augment config.backend: 'rotat' is not a backend \\(did you mean "
                                          "'rotate'\\?\\); choose one of auto, apertium, ctranslate2, hf, rotate, "
                                          "none"):
        AugmentConfig(backend="rotat")


def test_every_augment_setting_is_a_row_of_the_settings_table():
    from cselab.augment.cache import AugmentConfig

    text = (DOCS / "augment.md").read_text(encoding="utf-8")
    table = text[text.index("**Settings**"):text.index("A cluster array job")]
    assert re.findall(r"^\| `(\w+)` \|", table, re.M) == [f.name for f in dataclasses.fields(AugmentConfig)]
