"""The plug-in boundary (cselab.boundary): what a plug-in raises during work is one line naming it, its package and
version, when it failed and what was kept; what it returns is checked against its kind's documented type; a
presenter that fails costs the report alone."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from cselab import registry
from cselab.boundary import failure_of
from cselab.cli import main
from cselab.errors import PluginError
from tests.conftest import installed
from tests.runs import one_line_error, train_args

PLANTED_TEXTS = '''from dataclasses import dataclass

from cselab.registry import register, setting
from cselab.train.plugins.kinds import LogitTransform, TextTransform


@register("text", "shout")
class Shout(TextTransform):
    """Upper-cases texts; after ``after`` texts it fails as ``fault`` says."""

    @dataclass(frozen=True, kw_only=True)
    class Params(TextTransform.Params):
        fault: str = setting("raise", "how it fails", choices=("raise", "list", "none", "number", "bytes"))
        after: int = setting(32, "the texts it changes before it fails", min=0)

    def __init__(self, params):
        super().__init__(params)
        self.seen = 0

    def __call__(self, text):
        self.seen += 1
        if self.seen <= self.params.after:
            return text.upper()
        if self.params.fault == "raise":
            raise ValueError("planted fault")
        return {"list": text.split(), "none": None, "number": 3, "bytes": text.encode()}[self.params.fault]


@register("logit_transform", "sour")
class Sour(LogitTransform):
    """A logit transform that raises at its first call."""

    def forward(self, similarities, labels):
        raise KeyError("sour")
'''


@pytest.fixture
def planted(tmp_path, monkeypatch, own_registry):
    (tmp_path / "planted_texts.py").write_text(PLANTED_TEXTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_texts", raising=False)
    return tmp_path


DURING = "the tokenising of text before the first step, rows 1 to 96"


def _method(folder: Path, body: str) -> str:
    (folder / "method.yaml").write_text(f"extends: simcse\nimports: [planted_texts]\n{body}")
    return str(folder / "method.yaml")


def _train(folder: Path, body: str, tiny_bert_dir, tiny_cache, data_dir, *extra) -> list[str]:
    argv = train_args(tiny_bert_dir, tiny_cache, data_dir, folder / "run", *extra)
    argv[argv.index("--method") + 1] = _method(folder, body)
    return argv


@pytest.mark.slow
def test_a_text_plugin_that_raises_during_training_is_one_line(planted, tiny_bert_dir, tiny_cache, data_dir, capsys):
    """The text plug-in runs where the column's token ids are made, before the first step: past its 32nd text it
    raises, one line naming the plug-in, where it comes from, the rows it failed in, and what the run kept."""
    argv = _train(planted, "texts: {text: {kind: shout}}\n", tiny_bert_dir, tiny_cache, data_dir)
    assert main(argv) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: text 'shout' (module planted_texts, not from an installed package): __call__() "
                           f"raised ValueError: planted fault (during {DURING}); "), line
    assert f"{planted / 'run'} holds no saved state yet" in line and "--debug shows the traceback" in line
    argv[argv.index("--out") + 1] = str(planted / "debug")  # --debug: the plug-in's own traceback, as it was raised
    with pytest.raises(ValueError, match="planted fault") as raised:
        main(["--debug", *argv])
    assert failure_of(raised.value).during == DURING


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "returned"), [("list", "list ['"), ("none", "NoneType None")])
def test_a_text_plugin_that_returns_no_string_is_refused_by_name(planted, tiny_bert_dir, tiny_cache, data_dir,
                                                                 capsys, fault, returned):
    """A list was read by the tokenizer as pre-split words and trained with exit 0; None gave a tokenizer traceback
    naming no plug-in."""
    body = f"texts: {{text: {{kind: shout, fault: {fault}}}}}\n"
    assert main(_train(planted, body, tiny_bert_dir, tiny_cache, data_dir)) == 2
    line = one_line_error(capsys)
    assert f"error: text 'shout' (module planted_texts, not from an installed package): __call__() returned " \
           f"{returned}" in line
    assert f"expected one string (the text changed) for the one text it was given (during {DURING})" in line


@pytest.mark.slow
def test_the_innermost_plugin_is_named(planted, tiny_bert_dir, tiny_cache, data_dir, capsys):
    """A logit transform that raises inside the loss that applies it: the transform is named, not the loss."""
    body = "losses: {info_nce: {transform: {kind: sour}}}\n"
    assert main(_train(planted, body, tiny_bert_dir, tiny_cache, data_dir)) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: logit_transform 'sour' (module planted_texts, not from an installed package): "
                           "forward() raised KeyError: 'sour' (during step 1); "), line
    assert "holds no saved state yet" in line


FLAKY = '''from cselab.augment.backtranslate import Translator
from cselab.registry import register


@register("backtranslation", "flaky")
class Flaky(Translator):
    """Gives one text's candidates too few."""

    name = "flaky"

    def round_trip(self, texts):
        return [[text] for text in texts][1:]
'''


@pytest.mark.slow
def test_a_backend_that_returns_too_few_candidates_is_named_with_its_package(tmp_path, monkeypatch, own_registry,
                                                                             capsys):
    """Another command, another kind: augment's back-translation backend from an installed package."""
    (tmp_path / "flaky_backend.py").write_text(FLAKY)
    installed(tmp_path, monkeypatch, "acme-flaky", "cselab.backtranslation", "flaky_backend", version="0.3")
    own_registry._DISCOVERED.pop("cselab.backtranslation", None)
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"The river number {i} flows to the sea.\n" for i in range(50)))
    out = tmp_path / "cache"
    assert main(["augment", "--corpus", str(corpus), "--out", str(out), "--set", "backend=flaky",
                 "--set", "chunk_size=20"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: backtranslation 'flaky' (acme-flaky==0.3): round_trip() returned list [['The river "
                           "number 1 "), line
    assert f"expected a list of 20 lists of strings (the candidates of each text given) (during chunk 0, lines 1 " \
           f"to 20 of {corpus}); the chunks finished in {out} are kept" in line


SUITE = '''from cselab.document import Heading, Table
from cselab.errors import ConfigError
from cselab.evaluation.scoring import Result
from cselab.probes.suite import Presenter, Score, Suite, register_suite


class Shaky(Presenter):
    """Presents as FAULT says."""

    def sections(self, section, spec):
        fault = FAULT
        if fault == "raise":
            raise RuntimeError("planted presenter fault")
        if fault == "mistake":
            raise ConfigError("a setting the presenter cannot show")
        if fault == "short row":
            return [Heading("Shaky"), Table(["Model", "Score"], [[spec]])]
        return {"string": "a table", "none": None}[fault]


@register_suite
class Steady(Suite):
    name, title, main, presenter = "steady", "Steady", {"score": Score("Score")}, Shaky

    def run(self, encoder):
        return Result({"score": 42.0}, 42.0)
'''


@pytest.mark.parametrize(("fault", "said"), [
    ("raise", "sections() raised RuntimeError: planted presenter fault"),
    ("short row", "sections() raised ValueError: Table (Model, Score): a row of 1 values for 2 columns"),
    ("string", "sections() returned str 'a table'; expected a list of cselab.document blocks"),
    ("none", "sections() returned NoneType None; expected a list of cselab.document blocks"),
    ("mistake", None),  # a user's mistake a presenter finds is no plug-in failure: said as it is, the JSON kept
])
def test_a_presenter_that_fails_costs_the_report_alone(tmp_path, monkeypatch, own_registry, capsys, fault, said):
    """The results JSON is written (atomically, before any report); the report says it could not be made; one line
    says so, naming the suite and its package."""
    (tmp_path / "steady_suite.py").write_text(SUITE.replace("FAULT", repr(fault)))
    installed(tmp_path, monkeypatch, "acme-steady", "cselab.suites", "steady_suite", version="1.2")
    own_registry._DISCOVERED.pop("cselab.suites", None)
    monkeypatch.delitem(sys.modules, "steady_suite", raising=False)
    out = tmp_path / "r.json"
    assert main(["probe", "run", "--model", "bow", "--suite", "steady", "--out", str(out)]) == 2
    line = one_line_error(capsys)
    if said is None:
        assert line == "error: the report could not be made (ConfigError: a setting the presenter cannot show); the " \
                       f"results JSON {out} (and its items) was written; its report (r.md, r.html) says only that it " \
                       "could not be made (--debug shows the traceback)"
    else:
        assert line.startswith(f"error: suite 'steady' (acme-steady==1.2): {said}"), line
        assert f"(during the report); the results JSON {out} (and its items) was written" in line
        assert "The report could not be made: suite 'steady' (acme-steady==1.2): sections() failed" in \
            out.with_suffix(".md").read_text()
    assert json.loads(out.read_text())["steady"] == {"score": 42.0}
    assert "The report could not be made" in out.with_suffix(".html").read_text()


class _Loss(registry.get("loss", "info_nce").cls.__mro__[1]):  # the kind's base class: Loss
    """A loss returning what it is told to."""

    roles = ("anchor",)

    def __init__(self, params, returned=None, **views):
        super().__init__(params, **views)
        self.returned = returned

    def forward(self, views, context):
        return self.returned


def _built(kind: str, cls: type, *args, **kwargs):
    registry.register(kind, "wrong")(cls)
    return cls(cls.Params(), *args, **kwargs) if hasattr(cls, "Params") else cls(*args, **kwargs)


def test_every_training_kind_checks_what_its_plugins_return(own_registry):
    """Each kind's documented return, checked where the plug-in returns it, the plug-in named (unit level: the
    training test above sees the text kind's through the command)."""
    from cselab.train.plugins.kinds import Augment, Head, LogitTransform, NegativeSource, TokenAugment, WeightHook

    loss = _built("loss", _Loss, anchor="a", returned=torch.ones(2, 2))
    with pytest.raises(PluginError, match=r"loss 'wrong' \(module tests.test_plugin_boundary, .*\): forward\(\) "
                                          r"returned a torch.float32 tensor of shape \(2, 2\); expected a 1-D tensor "
                                          "of one loss per row"):
        loss([], None)
    loss.returned = torch.ones(3)
    assert loss([], None).shape == (3,)

    class Wide(LogitTransform):
        """Adds a column."""

        def forward(self, similarities, labels):
            return torch.cat([similarities, similarities[:, :1]], 1)

    with pytest.raises(PluginError, match=r"logit_transform 'wrong' .*: forward\(\) returned a torch.float32 tensor "
                                          r"of shape \(2, 4\); expected a floating-point tensor of its input's shape"):
        _built("logit_transform", Wide)(torch.ones(2, 3), torch.zeros(2))

    class Shrinking(Head):
        """Drops a row."""

        def forward(self, vectors):
            return vectors[1:]

    with pytest.raises(PluginError, match="expected a floating-point tensor of one row per input row \\(3\\)"):
        registry.register("head", "wrong")(Shrinking)
        Shrinking(Shrinking.Params())(torch.ones(3, 4))

    class Lonely(TokenAugment):
        """Gives the ids alone."""

        def forward(self, input_ids, attention_mask, pad_id):
            return input_ids

    with pytest.raises(PluginError, match=r"token_augment 'wrong' .*: forward\(\) returned .*; expected "
                                          r"\(input_ids, attention_mask\)"):
        _built("token_augment", Lonely)(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long), 0)

    class Chatty(WeightHook):
        """Returns what it moved."""

        def forward(self, with_grad):
            return with_grad

    with pytest.raises(PluginError, match=r"weight_hook 'wrong' .*: forward\(\) returned list \[\]; expected None"):
        _built("weight_hook", Chatty)([])

    class Listed(NegativeSource):
        """Gives a list."""

        def generate(self, anchors, past):
            return [anchors]

    with pytest.raises(PluginError, match=r"negatives 'wrong' .*: generate\(\) returned list"):
        _built("negatives", Listed)(torch.ones(2, 3))

    class Flat(Augment):
        """Flattens its input."""

        def forward(self, values, gradient=None):
            return values.flatten()

    with pytest.raises(PluginError, match="input_augment 'wrong' .*: forward\\(\\) returned .*of its input's shape"):
        _built("input_augment", Flat)(torch.ones(2, 3))


def test_what_a_plugin_raises_goes_on_unchanged_for_library_callers(own_registry):
    """The type and message stay (``except ValueError`` keeps working); the tag names the innermost plug-in once."""
    from cselab.train.plugins.kinds import TextTransform

    class Raising(TextTransform):
        """Raises."""

        def __call__(self, text):
            raise ValueError(f"no {text}")

    registry.register("text", "raising")(Raising)
    with pytest.raises(ValueError, match="^no way$") as raised:
        Raising(Raising.Params())("way")
    failure = failure_of(raised.value)
    assert failure is not None and failure.who.startswith("text 'raising' (module tests.test_plugin_boundary")
    assert re.fullmatch(r"text 'raising' \(.*\): __call__\(\) raised ValueError: no way; kept X \(--debug shows the "
                        r"traceback\)", failure.line(kept="kept X"))


def test_a_subclass_calling_its_registered_base_is_checked_once_outside(own_registry):
    """A whole-batch loss whose forward averages its registered base's per-row losses (super().forward): the base's
    per-row value is not refused by the subclass's rule, the subclass's one number is checked against it."""
    class PerRow(_Loss):
        """Per-row losses."""

        def forward(self, views, context):
            return torch.ones(3)

    class Averaged(PerRow):
        """Their mean."""

        reduce = "whole_batch"

        def forward(self, views, context):
            return super().forward(views, context).mean() * self.scale

    registry.register("loss", "per-row")(PerRow)
    registry.register("loss", "averaged")(Averaged)
    loss = Averaged(Averaged.Params(), anchor="a")
    loss.scale = 1.0
    assert float(loss([], None)) == 1.0
    loss.scale = torch.ones(2)
    with pytest.raises(PluginError, match="loss 'averaged' .*; expected one number \\(its reduce is 'whole_batch'\\)"):
        loss([], None)
