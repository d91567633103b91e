"""The protocol ledger holds, its page is current, and every preset and profile resolves to the papers' optimizer."""

import copy
from pathlib import Path

import pytest
import yaml

from cselab.cli import main
from cselab.train import protocols, reference
from cselab.train.methods import load_method, method_profiles, preset_names

ROOT = Path(__file__).resolve().parents[2]


def test_every_ledger_row_holds():
    assert protocols.problems(ROOT) == []


def test_the_docs_page_is_generated_from_the_ledger():
    page = (ROOT / "docs" / "protocols.md").read_text(encoding="utf-8")
    assert page == protocols.markdown(), "run: python -m cselab.train.protocols --markdown docs/protocols.md"


def test_a_row_that_no_longer_holds_is_named(monkeypatch):
    book = copy.deepcopy(protocols.ledger())
    row = next(r for r in book["rows"] if r.get("at", {}).get("key") == "training.weight_decay")
    row["cselab_value"] = row["paper_value"] = 0.01
    monkeypatch.setattr(protocols, "ledger", lambda: book)
    (problem,) = protocols.problems(ROOT)
    assert "AdamW weight decay): the ledger says cselab uses 0.01, cselab uses 0.0" in problem


def _every_resolved_config():
    for name in preset_names():
        yield name, None, load_method(name)
        for profile in load_method(name).get("profiles", {}):
            yield name, profile, load_method(name, profile=profile)


def test_every_preset_and_profile_has_adamw_without_weight_decay():
    for name, profile, config in _every_resolved_config():
        training = config["training"]
        assert training["weight_decay"] == 0.0, (name, profile)
        assert training["adam_eps"] == 1e-8 and len(training["adam_betas"]) == 2, (name, profile)


def test_the_minilm_profile_keeps_mean_pooling_and_drops_prompts():
    for name in preset_names():
        config = load_method(name, profile="minilm")
        assert config["encoder"]["pooler"] == "avg", name
        assert config["encoder"].get("prompt") is None, name
        assert all(view.get("prompt") is None for view in config["views"].values()), name
        assert config["losses"] == load_method(name)["losses"], name  # the objective is untouched
        assert config["profile"] == "minilm" and "profile" not in load_method(name), name


def test_profiles_are_inherited_through_extends_and_replaced_by_name():
    profiles = method_profiles("byop-c")
    assert {"minilm", "bert-base", "bert-large", "roberta-base", "roberta-large"} <= set(profiles)
    assert load_method("byop-c", profile="bert-large")["losses"]["info_nce"]["margin"] == 0.04
    assert load_method("sg-opt", profile="bert-base")["training"]["early_stop"] == 10


def test_show_config_prints_the_resolved_config(capsys):
    assert main(["train", "--method", "byop-c", "--profile", "roberta-large", "--show-config"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["training"]["batch_size"] == 256 and config["training"]["lr"] == 3e-5
    assert config["training"]["weight_decay"] == 0.0
    assert config["losses"]["info_nce"]["perturbation"] == "p-n-"


def test_early_stop_must_be_a_positive_whole_number():
    with pytest.raises(ValueError, match="training.early_stop: 0 is out of range; expected a whole number >= 1"):
        load_method("simcse", ["training.early_stop=0"])


def test_the_presets_page_is_generated_from_the_registry():
    page = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    assert page == reference.markdown(), "run: python -m cselab.train.reference --markdown docs/presets.md"
