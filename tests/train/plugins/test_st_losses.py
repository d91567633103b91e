"""sentence-transformers' losses named in a cselab method (st_single, st_pair, st_triplet): the views' vectors go to
the loss class's own compute_loss_from_embeddings, so that they equal cselab's losses where the maths is the same;
what cannot run is refused when the method is read."""

import json
import math

import pytest
import torch
import yaml

from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.config.schema import value_columns
from cselab.train.objective import Objective
from cselab.train.plugins.functional import cosent, info_nce
from cselab.train.run.setup import build_encoder

ROWS = {"text": ["a man plays a guitar", "a dog runs on the beach", "the market fell", "two kids swim"],
        "text_pair": ["someone plays music", "a dog is running", "stocks dropped", "children in a pool"],
        "score": [4.2, 3.8, 4.5, 0.4]}


def st_method(tmp_path, **loss):
    """The cosent preset with its loss replaced by ``st`` (``loss``: its parameters)."""
    with open("cselab/train/config/presets/cosent.yaml") as preset:
        config = yaml.safe_load(preset)
    config.pop("profiles")
    config.update(method="st", losses={"st": {"kind": "st_pair", "anchor": "anchor", "other": "other", **loss}},
                  encoder={**config["encoder"], "pooler": "avg"})
    (tmp_path / "st.yaml").write_text(yaml.safe_dump(config))
    return load_method(str(tmp_path / "st.yaml"))


def st_loss_on_rows(method, encoder_dir):
    objective = Objective(method)
    encoder = build_encoder(method, str(encoder_dir)).eval()
    batch = objective.as_batch(encoder, ROWS)
    encoded = objective.encode(encoder, batch)
    return objective.losses_on(encoded, batch=batch)["st"], encoded["anchor"][0], encoded["other"][0]


def test_cosent_and_mnrl_named_in_a_method_equal_cselabs_own(tmp_path, tiny_bert_dir):
    method = st_method(tmp_path, loss="CoSENTLoss", args={"scale": 20.0}, label="score")
    assert value_columns(method.losses) == ["score"]
    loss, anchors, others = st_loss_on_rows(method, tiny_bert_dir)
    torch.testing.assert_close(loss, cosent(anchors, others, torch.tensor(ROWS["score"]), 20.0))
    method = st_method(tmp_path, loss="MultipleNegativesRankingLoss", args={"scale": 20.0})
    assert value_columns(method.losses) == []  # no label: no numeric column read
    loss, anchors, others = st_loss_on_rows(method, tiny_bert_dir)
    torch.testing.assert_close(loss, info_nce(anchors, others, 0.05))  # scale 20 = temperature 0.05
    assert not torch.isclose(loss, info_nce(anchors, others, 0.1))


@pytest.mark.parametrize("loss, why", [
    ({"loss": "CoSENTLos"}, "losses.st.loss: 'CoSENTLos' is not a loss of sentence-transformers that computes from "
                            "vectors; choose one of AnglELoss"),
    ({"loss": "MultipleNegativesRankingLoss", "args": {"scal": 2}},
     "losses.st.args.scal: MultipleNegativesRankingLoss takes no such argument; it takes scale, similarity_fct"),
    ({"loss": "CoSENTLoss"}, "losses.st: CoSENTLoss on 2 view\\(s\\) reads labels: name their column with label"),
    ({"loss": "MultipleNegativesRankingLoss", "args": {"scale": "big"}}, "losses.st: MultipleNegativesRankingLoss"),
])
def test_a_loss_that_cannot_run_is_refused_when_the_method_is_read(tmp_path, loss, why):
    with pytest.raises(ConfigError, match=why):
        st_method(tmp_path, **loss)


@pytest.mark.slow
def test_a_method_with_a_sentence_transformers_loss_trains(tmp_path, tiny_bert_dir, data_dir):
    from cselab.train.run.options import RunOptions
    from cselab.train.recipe import train

    st_method(tmp_path, loss="CoSENTLoss", label="score")  # writes st.yaml
    method = load_method(str(tmp_path / "st.yaml"), ["training.max_steps=2", "training.eval_steps=2",
                                                     "training.batch_size=8", "training.dev=none"])
    summary = train(method, str(tiny_bert_dir), "stsb-train", tmp_path / "run",
                    RunOptions(data_dir=data_dir, progress=False))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [entry["loss"] for entry in log if "loss" in entry]
    assert summary["steps"] == 2 and losses and all(math.isfinite(value) for value in losses)
