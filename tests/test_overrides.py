from dataclasses import asdict

import pytest

from cselab.augment.cache import AugmentConfig
from cselab.errors import ConfigError
from cselab.overrides import apply_override, parse_value
from cselab.registry import schema_of


def test_a_value_is_json_then_yaml_and_yes_no_stay_words():
    assert parse_value("1e-5", "k") == 1e-5 and isinstance(parse_value("1e-5", "k"), float)
    assert parse_value("[a, b]", "k") == ["a", "b"] and parse_value("{kind: mlp}", "k") == {"kind": "mlp"}
    assert parse_value("no", "k") == "no" and parse_value("On", "k") == "On" and parse_value("true", "k") is True
    assert parse_value("null", "k") is None and parse_value("runs/a b", "k") == "runs/a b"


def test_an_override_makes_its_sections_and_null_removes_one():
    config = {"losses": {"recall": {"gamma": 1.0}}, "training": 3}
    apply_override(config, "views.anchor.column=text", "x=1")
    apply_override(config, "losses.recall=null", "x=1")
    assert config == {"views": {"anchor": {"column": "text"}}, "losses": {}, "training": 3}
    with pytest.raises(ConfigError, match=r"--set 'training.lr=1': training is 3, not a section"):
        apply_override(config, "training.lr=1", "x=1")
    with pytest.raises(ConfigError, match=r"--set 'lr': expected KEY=VALUE, e.g. training.lr=1e-5"):
        apply_override(config, "lr", "training.lr=1e-5")


def test_augment_and_train_read_a_value_the_same_way():
    config = AugmentConfig.from_overrides(["mer_band=[0.2, 0.5]", "backend=apertium"])
    assert config.mer_band == [0.2, 0.5] and config.backend == "apertium"
    with pytest.raises(ConfigError, match="augment config.chunk_size: 1000.0 is not valid; expected a whole number"):
        AugmentConfig.from_overrides(["chunk_size=1e3"])
    with pytest.raises(ConfigError, match="augment config.contractions: 'yes' is not valid; expected true/false"):
        AugmentConfig.from_overrides(["contractions=yes"])


def test_the_augment_schema_is_the_dataclass_fields():
    schema = schema_of(AugmentConfig)
    assert {name: param.default for name, param in schema.items()} == asdict(AugmentConfig())
    assert all(p.help for p in schema.values())
    assert AugmentConfig(backend="apertium").backend == "apertium"  # the backend names are the registry's
    with pytest.raises(ConfigError, match="augment config.backend: 'google' is not a backend; choose one of auto, "
                                          "apertium, ctranslate2, hf, none"):
        AugmentConfig(backend="google")
    first, second = AugmentConfig(), AugmentConfig()
    first.mer_band.append(1.0)
    assert second.mer_band == [0.15, 0.6]  # a list default is each instance's own
