"""Hard negatives as a view: extra InfoNCE columns, SimCSE's hard-negative weight on each anchor's own, and the
supervised preset training from a triplet file."""

import json
import math

import pytest
import torch
import yaml

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.registry import build
from cselab.train.config.methods import load_method
from cselab.train.config.schema import loss_plugin
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import LossContext


def test_the_weight_is_added_to_the_logit_of_the_own_hard_negative():
    """One anchor, its positive at cosine 1, another positive at 0, its hard negative at 0: the weight w multiplies
    e^{0/tau} of the hard negative by e^w."""
    anchors = torch.tensor([[1.0, 0.0]])
    positives = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    negatives = torch.tensor([[0.0, 1.0]])
    tau, w = 0.5, math.log(3.0)
    bias = torch.tensor([[0.0, 0.0, w]])
    loss = L.info_nce(anchors, positives, tau, negatives, logit_bias=bias)
    expected = -math.log(math.e ** 2 / (math.e ** 2 + 1 + 3))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert L.info_nce(anchors, positives, tau, negatives).item() == pytest.approx(
        -math.log(math.e ** 2 / (math.e ** 2 + 2)), rel=1e-6)


def test_each_anchor_weighs_its_own_rows_hard_negative():
    """Rows 0, 1, 2 have anchors and positives; only rows 0 and 2 have a hard negative: the weight sits at row 0's
    column for anchor 0, row 2's for anchor 2, nowhere for anchor 1."""
    params = {"anchor": "a", "positive": "p", "negatives": ["h"], "temperature": 0.05, "hard_negative_weight": 2.0}
    loss = build(loss_plugin("info_nce", {**params, "weight": 1.0}), params)
    vectors = torch.eye(3)
    context = LossContext({"a": (vectors, [0, 1, 2]), "p": (vectors, [0, 1, 2]), "h": (vectors[:2], [0, 2])})
    bias = loss._hard_negative_bias(context, 3, 3, 0, 2)
    assert bias.tolist() == [[0, 0, 0, 2, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 2]]


def test_the_weight_needs_exactly_one_negatives_view():
    with pytest.raises(ConfigError, match="hard_negative_weight: weighs each anchor's own hard negative"):
        load_method("simcse", ["losses.info_nce.hard_negative_weight=1.0"])
    load_method("simcse-sup", ["losses.info_nce.hard_negative_weight=1.0"])


def test_simcse_sup_weighs_its_hard_negatives_as_released():
    """hard_negative_weight 0, train.py's default: the hard negatives are plain extra columns."""
    assert load_method("simcse-sup").losses["info_nce"]["hard_negative_weight"] == 0.0


def test_simcse_sup_official_profile_is_the_released_script(capsys):
    assert main(["train", "--method", "simcse-sup", "--profile", "official", "--show-config"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    training = config["training"]
    assert (training["lr"], training["batch_size"], training["epochs"], training["max_length"],
            training["eval_steps"], training["mixed_precision"]) == (5e-5, 512, 3, 32, 125, "fp16")
    assert config["encoder"]["pooler"] == "cls_before_pooler" and config["encoder"]["head"] == {"kind": "mlp"}
    assert config["encoder"]["head_at_test"] and config["losses"]["info_nce"]["temperature"] == 0.05


@pytest.mark.slow
def test_simcse_sup_trains_from_a_triplet_csv(tiny_bert_dir, tmp_path, data_dir):
    rows = [("A man plays a guitar.", "Someone plays music.", "Nobody plays music.")] + \
        [(f"Sentence {i} is here.", f"Here is sentence {i}.", f"Sentence {i} is not here.") for i in range(40)]
    data = tmp_path / "nli_for_simcse.csv"
    data.write_text("sent0,sent1,hard_neg\n" + "".join(f'"{a}","{b}","{c}"\n' for a, b, c in rows))
    out = tmp_path / "run"
    assert main(["train", "--method", "simcse-sup", "--model", str(tiny_bert_dir), "--data", str(data),
                 "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out),
                 "--set", "training.batch_size=8", "--set", "training.max_steps=2", "--set", "training.eval_steps=2",
                 "--set", "losses.info_nce.hard_negative_weight=0.5"]) == 0
    record = json.loads((out / "run.json").read_text())["data"]
    assert record["kind"] == "table" and record["rows"] == 41
    assert record["columns"] == {"text": "sent0", "positive": "sent1", "hard_negative": "hard_neg"}
    assert (out / "best" / "cselab.json").is_file()


@pytest.mark.slow
def test_negations_train_as_hard_negatives_from_cannot(tiny_bert_dir, tmp_path, data_dir):
    """simcse-negation-hn on the CANNOT pairs (text, negation): the negation is its row's extra column."""
    out = tmp_path / "run"
    assert main(["train", "--method", "simcse-negation-hn", "--model", str(tiny_bert_dir), "--data", "cannot",
                 "--data-dir", str(data_dir), "--out", str(out), "--set", "training.batch_size=8",
                 "--set", "training.max_steps=2", "--set", "training.eval_steps=2", "--set", "training.dev=none"]) == 0
    assert json.loads((out / "run.json").read_text())["data"]["columns"] == {"text": "text", "negation": "negation"}
