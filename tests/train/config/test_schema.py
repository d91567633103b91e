"""Config mistakes are caught at load time, before any model loads: exit 2, one line naming the key and what is
allowed."""

import dataclasses

import pytest
import yaml

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.train.config.sections import EncoderConfig, TrainingConfig
from cselab.train.config.methods import load_method

NO_MODEL = "/nonexistent/backbone"  # were the model loaded, the error would name this folder instead


MISTAKES = {  # (method, --set): what the one line says after "METHOD: KEY: "
    ("input-noise", "views.positive.augment.sigmaa=0.5"): "unknown key (did you mean 'sigma'?); known: sigma",
    ("simcse", "training.lr=abc"): "'abc' is not valid; expected a number >= 0",
    ("simcse", "training.batch_size=0"): "0 is out of range; expected a whole number >= 1",
    ("simcse", "losses.info_nce.temperature=0"): "0.0 is out of range; expected a number > 0",
    ("input-dropout", "views.positive.augment.p=1.5"): "1.5 is out of range; expected a number >= 0 and < 1",
    ("simcse", "training.mixed_precision=fp8"): "'fp8' is not allowed; expected one of no, fp16, bf16",
    ("input-noise", "views.positive.augment.kind=gaussian_nois"):
        "unknown input augment 'gaussian_nois' (did you mean 'gaussian_noise' or 'gaussian_dropout'?); known: "
        "bernoulli_dropout, feature_dropout, fgsm",
    ("noise-neg", "losses.info_nce.generated.kind=gausian"):
        "unknown negatives 'gausian' (did you mean 'gaussian'?); known: ",
    ("sam", "hooks.weights.kind=sma"): "unknown weight hook 'sma' (did you mean 'sam'?); known: awp, sam",
    ("simcse", "losses.info_nce.kind=info_nse"): "unknown loss 'info_nse' (did you mean 'info_nce'?); known: ",
    ("simcse", "losses.info_nce.positive=positiv"): "'positiv' is not a view; views: anchor, positive",
    ("simcse", "encoder.head=mpl"): "unknown head 'mpl' (did you mean 'mlp'?); known: batchnorm_mlp, mlm_transform, "
                                    "mlp, projection",
    ("simcse", "training.optimizer=adam"): "'adam' is not allowed; expected one of adamw, adamw_legacy",
    ("simcse", "training.max_grad_norm=0"): "0.0 is out of range; expected a number > 0 or null",
    ("sg", "encoder.frozen_mode=on"): "'on' is not allowed; expected one of eval, train",
    ("sg", "encoder.head.output=0"): "0 is out of range; expected a whole number >= 1 or null",
    ("simcse", "encoder.head_init=xavier"): "'xavier' is not allowed; expected one of bert, torch",
    ("sg", "training.early_stop_rule=patience"): "'patience' is not allowed; expected one of no_improvement, drops",
    ("simcse", "losses.info_nce.multitask=true"): "true averages the transformed loss with the plain one, and "
                                                  "losses.info_nce has no transform",
    ("byop-d", "losses.info_nce.transform.margin=-dynamic"): "'-dynamic' is not valid; expected a number or "
                                                             "'dynamic'",
    ("ifm", "losses.info_nce.transform.kind=perturbb"):
        "unknown logit transform 'perturbb' (did you mean 'perturb'?); known: guided, perturb",
}


@pytest.mark.parametrize(("method", "setting"), MISTAKES)
def test_each_config_mistake_exits_2_with_one_line_before_any_model_loads(capsys, method, setting):
    assert main(["train", "--method", method, "--model", NO_MODEL, "--out", "unused", "--set", setting]) == 2
    err = capsys.readouterr().err
    key = setting.partition("=")[0]
    assert err.startswith(f"error: {method}: {key}: {MISTAKES[method, setting]}") and err.count("\n") == 1, err


def test_set_accepts_any_schema_key_a_user_yaml_leaves_out(tmp_path, capsys):
    config = load_method("simcse").to_dict()
    del config["training"]["epochs"], config["losses"]["info_nce"]["label_smoothing"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--method", str(path), "--set", "training.max_steps=2",
                 "--set", "losses.info_nce.label_smoothing=0.1", "--show-config"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["training"]["max_steps"] == 2 and shown["losses"]["info_nce"]["label_smoothing"] == 0.1
    assert shown["training"]["epochs"] == 1  # a left-out key gets the schema's default, and shows it


def test_a_required_key_missing_from_a_user_yaml_is_named(tmp_path, capsys):
    config = load_method("simcse").to_dict()
    del config["training"]["max_length"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--method", str(path), "--model", NO_MODEL, "--out", "unused"]) == 2
    assert capsys.readouterr().err == f"error: {path}: training.max_length: required (a whole number >= 1)\n"


def test_debug_shows_the_traceback(capsys):
    with pytest.raises(ValueError, match="training.lr"):
        main(["--debug", "train", "--set", "training.lr=abc", "--show-config"])


@pytest.mark.parametrize("preset", ["simcse", "osscse", "sg-opt", "noise-neg", "awp-fgsm", "output-mask"])
def test_show_config_output_loads_back_to_the_same_config(tmp_path, capsys, preset):
    assert main(["train", "--method", preset, "--profile", "minilm", "--show-config"]) == 0
    path = tmp_path / "config.yaml"
    path.write_text(capsys.readouterr().out)
    assert load_method(path) == load_method(preset, profile="minilm")


def test_a_null_over_a_default_is_kept_and_loads_back(tmp_path, capsys):
    assert main(["train", "--method", "simcse", "--set", "training.max_grad_norm=null", "--show-config"]) == 0
    printed = capsys.readouterr().out
    assert "  max_grad_norm: null\n" in printed
    (tmp_path / "method.yaml").write_text(printed)
    assert load_method(tmp_path / "method.yaml") == load_method("simcse", ["training.max_grad_norm=null"])
    assert load_method(tmp_path / "method.yaml").training.max_grad_norm is None  # not clipped
    assert load_method("simcse", ["training.seed=null"]).training.seed == 42  # cannot be null: the default
    # a section set to null is removed (a loss of the base, here in a profile's style)
    assert "two_way_margin" not in load_method("osscse", ["losses.two_way_margin=null"]).losses



def test_the_method_and_its_sections_are_typed_frozen_objects_checked_when_built():
    method = load_method("sg")
    training, encoder = method.training, method.encoder
    assert isinstance(training, TrainingConfig) and isinstance(encoder, EncoderConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        method.training = training
    with pytest.raises(TypeError):  # read-only all the way down
        method.losses["nt_xent"]["temperature"] = 1.0
    method = method.to_dict()  # the plain data, as OUT/config.yaml holds it
    assert (training.batch_size, training.warmup, training.early_stop_rule) == (16, 0.1, "drops")
    assert encoder.head == {"kind": "projection", "inner": 4096, "output": 4096} and encoder.frozen_mode == "train"
    assert TrainingConfig(**{**method["training"], "lr": 1}).lr == 1.0  # coerced as the YAML path coerces
    with pytest.raises(ValueError, match="training.batch_size: 0 is out of range; expected a whole number >= 1"):
        TrainingConfig(**{**method["training"], "batch_size": 0})
    with pytest.raises(ValueError, match="training.warmup: 2.5 is neither a fraction below 1"):
        TrainingConfig(**{**method["training"], "warmup": 2.5})
    with pytest.raises(TypeError, match="batch_sise"):  # a misspelt key is not a silently ignored one
        TrainingConfig(**{**method["training"], "batch_sise": 8})
    with pytest.raises(ValueError, match="encoder.pooler: unknown pooler|encoder.pooler: 'first' is not allowed"):
        EncoderConfig(**{**method["encoder"], "pooler": "first"})


def test_a_loss_is_chosen_with_kind_and_an_unknown_key_is_refused(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("extends: simcse\nlosses: {extra: {kind: info_nce, typo: 1, anchor: anchor, positive: positive}}\n")
    with pytest.raises(ConfigError, match="losses.extra.typo: unknown key"):
        load_method(path)
    assert load_method("sscl-simcse", profile="official").losses["plain_info_nce"]["kind"] == "info_nce"


def test_each_sections_rules_run_once_when_a_method_is_read(monkeypatch):
    calls = {"training": 0, "encoder": 0}
    for name, cls in (("training", TrainingConfig), ("encoder", EncoderConfig)):
        rules = cls.rules

        def counted(self, rules=rules, name=name):
            calls[name] += 1
            rules(self)
        monkeypatch.setattr(cls, "rules", counted)
    method = load_method("osscse")
    assert calls == {"training": 1, "encoder": 1} and isinstance(method.training, TrainingConfig)
