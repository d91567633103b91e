"""The protocol ledger holds, its page is current, and every preset and profile resolves to the papers' optimizer."""

import copy
from pathlib import Path

import pytest
import yaml

from cselab.cli import main
from cselab.train import protocols
from cselab.train.config import reference
from cselab.train.config.methods import load_method, method_profiles, preset_names
from tests import ledger_check

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the ledger check runs the tests its rows name
def test_every_ledger_row_holds():
    assert ledger_check.problems(ROOT) == []


def test_the_docs_page_is_generated_from_the_ledger():
    page = (ROOT / "docs" / "protocols.md").read_text(encoding="utf-8")
    assert page == protocols.markdown(), "run: python -m cselab.train.protocols --markdown docs/protocols.md"


def test_a_row_that_no_longer_holds_is_named(monkeypatch):
    book = copy.deepcopy(protocols.ledger())
    row = next(r for r in book["rows"] if r.get("at", {}).get("key") == "training.weight_decay")
    row["cselab_value"] = row["released"]["value"] = 0.01
    monkeypatch.setattr(protocols, "ledger", lambda: book)
    monkeypatch.setattr(ledger_check, "failing_tests", lambda names, root: {})
    (problem,) = ledger_check.problems(ROOT)
    assert "AdamW weight decay): the ledger says cselab uses 0.01, cselab uses 0.0" in problem


def test_each_pair_of_a_row_is_checked(monkeypatch):
    book = copy.deepcopy(protocols.ledger())
    rows = {r["quantity"]: r for r in book["rows"] if r["paper"] == "simcse"}
    rows["learning rate"]["released"]["value"] = 1e-5  # marked same as the code, which now says otherwise
    del rows["batch size"]["released"]  # a paper with code needs the code's column
    rows["epochs"]["status"] = "deviates"  # a deviation needs its reason
    monkeypatch.setattr(protocols, "ledger", lambda: book)
    monkeypatch.setattr(ledger_check, "failing_tests", lambda names, root: {})
    assert ledger_check.problems(ROOT) == [
        "row 1 (simcse, learning rate): marked same as the released code, but the released code says 1e-05 and "
        "cselab 3e-05",
        "row 2 (simcse, batch size): simcse released code (princeton-nlp/SimCSE): the row needs released: {at, "
        "value, status}",
        "row 5 (simcse, epochs): a deviates row needs its reason (paper)"]


def test_a_test_row_holds_only_while_its_test_passes(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_planted.py").write_text(
        "import pytest\n\ndef test_holds():\n    assert 1 + 1 == 2\n\n\ndef test_broken():\n    assert 1 + 1 == 3\n"
        "\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_half(x):\n    assert x == 1\n")
    names = [f"tests/test_planted.py::{name}" for name in ("test_holds", "test_broken", "test_half", "test_gone")]
    assert ledger_check.failing_tests(names, tmp_path) == {"tests/test_planted.py::test_broken": "fails",
                                                        "tests/test_planted.py::test_half": "fails",
                                                        "tests/test_planted.py::test_gone": "no such test"}


# (weight decay, eps, optimizer) of the presets whose released trainer is not SimCSE's (ledger rows): galsang/SG-BERT's
# fit(), CoSENT's Keras Adam, AnglE's Hugging Face Trainer (torch's AdamW)
OWN_OPTIMIZER = {"sg": (0.01, 1e-6, "adamw_legacy"), "sg-opt": (0.01, 1e-6, "adamw_legacy"),
                 "cosent": (0.0, 1e-6, "adamw"), "angle": (0.0, 1e-8, "adamw"), "llm2vec-mntp": (0.0, 1e-8, "adamw"),
                 "llm2vec": (0.0, 1e-8, "adamw")}


def optimizer_problems(names=None, profiles=method_profiles) -> tuple[int, list[str]]:
    """How many (method, profile) configs were resolved, and each one whose AdamW settings are not its paper's."""
    count, found = 0, []
    for name in names or preset_names():
        for profile in [None, *profiles(name)]:
            count += 1
            training = load_method(name, profile=profile).training
            expected = OWN_OPTIMIZER.get(name, (0.0, 1e-8, "adamw_legacy"))
            if (training.weight_decay, training.adam_eps, training.optimizer) != expected:
                found.append(f"{name} --profile {profile}: {training.weight_decay}, {training.adam_eps}, "
                             f"{training.optimizer}")
    return count, found


def test_every_preset_and_profile_has_its_papers_optimizer():
    count, found = optimizer_problems()
    assert found == []
    assert count == sum(1 + len(method_profiles(name)) for name in preset_names()) > 2 * len(preset_names())


def test_the_optimizer_check_sees_a_planted_profile_and_counts_every_profile(tmp_path):
    planted = tmp_path / "planted.yaml"
    planted.write_text("extends: simcse\nmethod: planted\nprofiles:\n  decayed: {training.weight_decay: 0.5}\n")
    count, found = optimizer_problems([str(planted)])
    assert found == [f"{planted} --profile decayed: 0.5, 1e-08, adamw_legacy"]
    assert count == 1 + len(method_profiles(planted))
    # profiles read from the resolved config (which drops them), as this check once did, visit none: the count shows it
    count, _ = optimizer_problems(profiles=lambda name: load_method(name).to_dict().get("profiles", {}))
    assert count == len(preset_names())


def test_the_minilm_profile_keeps_mean_pooling_and_drops_prompts():
    for name in preset_names():
        config = load_method(name, profile="minilm")
        assert config.encoder.pooler == "avg", name
        assert config.encoder.prompt is None, name
        assert all(view.prompt is None for view in config.views.values()), name
        assert config.losses == load_method(name).losses, name  # the objective is untouched
        assert config.profile == "minilm" and load_method(name).profile is None, name


def test_profiles_are_inherited_through_extends_and_replaced_by_name():
    profiles = method_profiles("byop-c")
    assert {"minilm", "bert-base", "bert-large", "roberta-base", "roberta-large"} <= set(profiles)
    assert load_method("byop-c", profile="bert-large").losses["info_nce"]["transform"]["margin"] == 0.04
    assert load_method("sg-opt", profile="bert-base").training.early_stop == 10


def test_show_config_prints_the_resolved_config(capsys):
    assert main(["train", "--method", "byop-c", "--profile", "roberta-large", "--show-config"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["training"]["batch_size"] == 256 and config["training"]["lr"] == 3e-5
    assert config["training"]["weight_decay"] == 0.0
    assert config["losses"]["info_nce"]["transform"]["pattern"] == "p-n-"


def test_early_stop_must_be_a_positive_whole_number():
    with pytest.raises(ValueError, match="training.early_stop: 0 is out of range; expected a whole number >= 1"):
        load_method("simcse", ["training.early_stop=0"])


def test_the_presets_page_is_generated_from_the_registry():
    page = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    assert page == reference.markdown(), "run: python -m cselab.train.config.reference --markdown docs/presets.md"
