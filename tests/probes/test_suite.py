"""The suites of `probe run` come from one registry: the runner and the report read them through it, and a new
suite is one class in one module."""

import dataclasses
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from cselab.data import load_sts
from cselab.document import Heading, Table, number, to_markdown
from cselab.encoders import load_encoder
from cselab.errors import ConfigError
from cselab.evaluation.scoring import Result
from cselab.probes.runner import run_probes
from cselab.cli import build_parser, main
from cselab.probes.suite import (Presenter, ProbeOptions, Score, Suite, presenters, register_suite, suite_parts,
                                 suite_sections, suite_settings, suites)
from cselab.registry import REQUIRED, Checked, Param, setting
from tests.conftest import installed


ALL = ("sts", "bias", "transfer", "probing", "geometry")


def test_the_registry_holds_the_suites_in_their_order():
    assert list(suites()) == [*ALL, "mteb"]
    assert suite_parts("bias,sts") == ("sts", "bias") and suite_parts("all") == ALL
    with pytest.raises(ConfigError, match=r"Unknown suite 'stss' \(did you mean 'sts'\?\); choose from sts, bias, "
                                          "transfer, probing, geometry, mteb"):
        suite_parts("sts,stss")


class Lengths(Suite):
    """The mean vector norm of the STS-B dev sentences (a made-up probe)."""

    name, title = "lengths", "Lengths"
    main = {"mean_norm": Score("Mean norm", 3)}

    def run(self, encoder):
        (pairs,) = load_sts("stsb", "dev", self.options.data_dir)
        norms = np.linalg.norm(encoder.encode(pairs.sentences1[:self.options.limit]), axis=1)
        return Result({"mean_norm": float(norms.mean())}, float(norms.mean()), {"lengths/norm": norms}, pairs.files)


def test_a_suite_is_one_class_the_runner_and_the_report_pick_up(own_registry, data_dir):
    register_suite(Lengths)
    payload = run_probes(load_encoder("bow", data_dir=data_dir, cache=False), "lengths",
                         ProbeOptions(data_dir=data_dir, limit=10))
    assert payload["lengths"]["mean_norm"] > 0 and payload["items"]["lengths/norm"].shape == (10,)
    assert len(payload["data"]["sha256"]) == 1
    norm = payload["lengths"]["mean_norm"]  # the default presenter: the title and the main scores
    assert suite_sections(payload) == [Heading("Lengths"), Table(["Model", number("Mean norm", 3)], [["bow", norm]])]
    assert to_markdown(suite_sections(payload)).endswith(f"| bow   | {norm:.3f}     |")


def test_a_suites_results_are_read_by_its_presenter_without_options(own_registry):
    """Reading a stored section builds no ProbeOptions (nor any Suite): a presenter is given the suite's class."""

    class Plain(Presenter):
        def sections(self, section, spec):
            return [Heading(f"{self.suite.title} of {spec}")]

    register_suite(type("Described", (Lengths,), {"name": "described", "presenter": Plain}))
    assert presenters()["described"].sections({"mean_norm": 1.0}, "bow") == [Heading("Lengths of bow")]
    assert presenters()["described"].main_scores({"mean_norm": 1.0}) == {"mean_norm": 1.0}
    with pytest.raises(TypeError, match="Drawn.presenter = <class 'dict'>: expected a subclass of cselab.probes.suite."
                                        "Presenter"):
        type("Drawn", (Lengths,), {"name": "drawn", "presenter": dict})
    # a suite written as before the split: its sections() would never be called
    with pytest.raises(TypeError, match="Reported.sections: a presenter's method, never called on a suite"):
        type("Reported", (Lengths,), {"name": "reported", "sections": lambda self, section, spec: []})
    # the default presenter with nothing to report
    with pytest.raises(TypeError, match="suite 'bare': the default presenter reports the suite's title and main "
                                        "scores, and it declares none"):
        register_suite(type("Bare", (Lengths,), {"name": "bare", "main": {}}))


def test_a_package_adds_a_suite_with_an_entry_point(tmp_path, monkeypatch, own_registry):
    installed(tmp_path, monkeypatch, "acme-probes", "cselab.suites", "acme_probes")
    own_registry._DISCOVERED.pop("cselab.suites")
    (tmp_path / "acme_probes.py").write_text(
        "from cselab.probes.suite import Score, Suite, register_suite\n\n\n@register_suite\nclass Acme(Suite):\n"
        "    name, title, main = 'acme', 'Acme', {'x': Score('X')}\n\n    def run(self, encoder):\n"
        "        raise NotImplementedError\n")
    assert list(suites()) == [*ALL, "mteb", "acme"]
    (tmp_path / "acme_probes.py").unlink()
    monkeypatch.delitem(sys.modules, "acme_probes")
    own_registry._DISCOVERED.pop("cselab.suites")
    with pytest.raises(ConfigError, match=r"entry point acme_probes of acme-probes==0.1 \(group cselab.suites\): "
                                          "importing 'acme_probes' failed"):
        suites()


def test_every_config_object_is_checked_when_built_in_one_error_format(tmp_path):
    from cselab.augment.cache import AugmentConfig
    from cselab.errors import ConfigError
    from cselab.evaluation.classifier import ClassifierConfig
    from cselab.probes.suite import ProbeOptions
    from cselab.registry import Checked
    from cselab.train.config.sections import EncoderConfig, TrainingConfig

    assert all(issubclass(cls, Checked) for cls in (AugmentConfig, ClassifierConfig, ProbeOptions, EncoderConfig,
                                                    TrainingConfig))
    options = ProbeOptions(data_dir=tmp_path, settings={"tasks": ["sts12", "stsb"]}, seed=3)
    assert options.settings["tasks"] == ("sts12", "stsb") and options.data_dir == tmp_path
    for wrong, message in ((dict(batch_size=0), "probe options.batch_size: 0 is out of range"),
                           (dict(settings={"classifier": "slow"}), "probe options.classifier: 'slow' is not allowed; "
                                                                   "expected one of full, fast"),
                           (dict(seed=-1), "probe options.seed: -1 is out of range"),
                           (dict(limit=1), "probe options.limit: 1 is out of range"),
                           (dict(settings={"tasks": ["sts12", 3]}), r"probe options.tasks\[1\]: 3 is not valid"),
                           (dict(data_dir=3), "probe options.data_dir: 3 is not valid; expected a path or null")):
        with pytest.raises(ConfigError, match=message):
            ProbeOptions(**wrong)


def test_a_suites_own_settings_are_checked_by_its_declaration_and_read_typed_by_it(monkeypatch):
    from cselab.probes.bias import BiasSuite
    from cselab.probes.sts import STSSuite
    from cselab.probes.transfer import TransferSuite

    options = ProbeOptions(limit=10, settings={"tasks": ["stsb"], "classifier": "fast"})
    sts, transfer, bias = STSSuite(options), TransferSuite(options), BiasSuite(options)
    assert isinstance(sts.params, STSSuite.Options) and (sts.params.tasks, sts.params.split) == (("stsb",), "test")
    assert (transfer.params.classifier, bias.params.split_rule, bias.params.testset) == ("fast", "paper", None)
    assert not hasattr(options, "tasks")  # no bag of every suite's settings: each suite reads its own
    assert set(suite_settings()) == {"tasks", "split", "split_rule", "testset", "mer_normalize", "classifier",
                                     "n_jobs", "transfer_tasks", "probing_dir", "mteb_tasks"}
    assert [cls.name for cls in suite_settings()["classifier"][1]] == ["transfer", "probing"]  # one declaration
    assert [cls.name for cls in suite_settings()["split"][1]] == ["sts", "transfer"]
    with pytest.raises(ConfigError, match=r"probe options.batchsize: unknown setting \(did you mean 'batch_size'\?\)"):
        ProbeOptions(settings={"batchsize": 3})
    assert dataclasses.replace(options, settings={"tasks": ("sts12",)}).settings["tasks"] == ("sts12",)


def _declaring(name, **fields):
    """A suite ``name`` whose Options declares ``fields`` (name -> (annotation, setting()))."""
    options = dataclass(type("Options", (Checked,), {"__annotations__": {k: kind for k, (kind, _) in fields.items()},
                                                     **{k: declared for k, (_, declared) in fields.items()},
                                                     "where": "probe options"}))
    return type(f"S{name}", (Suite,), {"name": name, "title": name, "main": {"x": Score("X")}, "Options": options,
                                       "run": lambda self, encoder: None})


def test_two_suites_share_a_setting_only_by_declaring_it_alike(own_registry):
    register_suite(_declaring("acme", tasks=(tuple[str, ...], setting(("sts12",), "other tasks", items=Param(str)))))
    with pytest.raises(ConfigError, match="suite acme: its setting 'tasks' is declared otherwise by suite sts"):
        suite_settings()
    own_registry._REGISTRY["suite"].pop("acme")
    register_suite(_declaring("acme", limit=(int, setting(3, "a limit of its own"))))
    with pytest.raises(ConfigError, match="suite acme: its setting 'limit' is a name every probe run's options have"):
        suite_settings()
    for name, declared in (("rules", (int, setting(3, "shadowed by a method"))),
                           ("depth", (int, setting(REQUIRED, "no default")))):
        own_registry._REGISTRY["suite"].pop("acme")
        register_suite(_declaring("acme", **{name: declared}))
        with pytest.raises(ConfigError, match=f"suite acme: its setting '{name}' "):
            suite_settings()


def test_probe_runs_options_are_generated_from_the_declarations(own_registry, capsys):
    register_suite(_declaring("acme", depth=(int, setting(2, "how deep acme digs", min=1, max=9)),
                              deep=(bool, setting(False, "dig past the floor"))))
    assert build_parser().parse_args(["probe", "run", "--model", "bow", "--no-deep"]).deep is False
    assert build_parser().parse_args(["probe", "run", "--model", "bow", "--deep"]).deep is True
    with pytest.raises(SystemExit):
        main(["probe", "run", "--help"])
    shown = capsys.readouterr().out
    assert "acme suite:\n  --depth N   " in shown and "how deep acme digs (default: 2)" in shown
    assert "which probes to run: sts, bias, transfer, probing, geometry, mteb, acme, all," in " ".join(shown.split())
    with pytest.raises(SystemExit):
        main(["probe", "run", "--model", "bow", "--depth", "10"])
    assert "argument --depth: 10 is out of range; expected a whole number from 1 to 9" in capsys.readouterr().err


def test_a_broken_package_of_suites_stops_the_probe_commands_alone(tmp_path, monkeypatch, own_registry, capsys):
    from cselab.cli import probe_main

    (tmp_path / "acme_broken.py").write_text("raise RuntimeError('half an edit')\n")
    installed(tmp_path, monkeypatch, "acme-broken", "cselab.suites", "acme_broken")
    own_registry._DISCOVERED.pop("cselab.suites")
    monkeypatch.delitem(sys.modules, "acme_broken", raising=False)
    why = ("error: entry point acme_broken of acme-broken==0.1 (group cselab.suites): importing 'acme_broken' failed: "
           "RuntimeError: half an edit")
    assert main(["probe", "run", "--model", "bow"]) == 2 and capsys.readouterr().err.strip() == why
    assert probe_main(["compare", "a.json"]) == 2 and capsys.readouterr().err.strip() == why
    with pytest.raises(SystemExit) as done:  # another command builds no suite's options
        main(["data", "--help"])
    assert done.value.code == 0
