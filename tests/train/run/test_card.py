"""The model card every save of OUT/best writes (cselab.train.run.card): the hub's metadata header, the run's facts,
the ledger rows where the run differs from the papers, the config, and a folder sentence-transformers still loads."""

import json

import yaml

from cselab.train.config.methods import load_method
from cselab.train.run.card import ledger_differences
from cselab.train.run.trainer import train
from tests.train.run.test_trainer import small


def test_the_ledger_rows_a_run_differs_on_are_the_deviating_ones_and_those_it_changed():
    kept = ledger_differences(load_method("simcse"))
    assert [(d["quantity"], d["released"], d["run"]) for d in kept] == [("precision", "fp16", "no")]
    assert "fp16 needs a CUDA device" in kept[0]["why"]
    assert ledger_differences(load_method("osscse")) == []  # every ledgered setting is the paper's
    changed = {d["quantity"]: d for d in ledger_differences(load_method("simcse", ["training.lr=1e-4"]))}
    assert changed["learning rate"]["run"] == 1e-4 and changed["learning rate"]["paper_value"] == 3e-5
    assert changed["learning rate"]["why"] == "set for this run (the preset's value: 3e-05)"


def test_every_best_checkpoint_carries_its_card(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    method = small("simcse", max_steps=2, eval_steps=2, lr=1e-4)
    train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", data_dir, eval_limit=20, progress=False)
    best, identity = tmp_path / "run" / "best", json.loads((tmp_path / "run" / "run.json").read_text())
    card = (best / "README.md").read_text()
    header = yaml.safe_load(card.split("---")[1])
    assert header["library_name"] == "sentence-transformers" and "simcse" in header["tags"]
    assert "base_model" not in header  # a local folder: no hub name to link
    saved = json.loads((best / "training.json").read_text())
    assert f"| saved at step | {saved['step']} |" in card and f"{saved['best']:.2f} on stsb" in card
    assert identity["base_weights_sha256"] in card and identity["data"]["key"] in card
    assert "| simcse | learning rate | 3e-05 | 3e-05 | 0.0001 | set for this run" in card
    config = yaml.safe_load(card.split("```yaml\n")[1].split("```")[0])
    assert config == yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert SentenceTransformer(str(best), device="cpu").encode(["still loads"]).shape == (1, 32)
    assert 'mteb.evaluate(cselab.encoders.mteb_model.as_mteb("PATH"), tasks)' in card
