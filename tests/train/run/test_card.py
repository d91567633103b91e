"""The model card every save of OUT/best writes (cselab.train.out.card): the hub's metadata header, the run's facts,
the ledger rows where the run differs from the papers, the config, and a folder sentence-transformers still loads;
and what a checkpoint written by ``cselab train`` carries of its base model (hub name, license, modules after pooling,
sentence-transformers' config) and its data (a user's table), checked against the run folder and through
sentence-transformers' and mteb's own entry points."""

import csv
import hashlib
import json
import os
import stat

import numpy as np
import pytest
import yaml

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.encoders.specs import packaged_minilm
from cselab.train.config.methods import load_method
from cselab.train.out.card import ledger_differences
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train
from tests.train.run.test_trainer import small


def test_the_ledger_rows_a_run_differs_on_are_the_deviating_ones_and_those_it_changed():
    kept = ledger_differences(load_method("simcse"))
    assert [(d["quantity"], d["released"], d["run"]) for d in kept] == [
        ("precision", "fp16", "no"), ("an evaluation at the last step", False, True),
        ("the order of the 2N rows of that pass", "interleaved", "stacked")]
    assert "fp16 needs a CUDA device" in kept[0]["why"]
    official = [d["quantity"] for d in ledger_differences(load_method("simcse", profile="official"))]
    assert "an evaluation at the last step" not in official and "the order of the 2N rows of that pass" not in official
    assert ledger_differences(load_method("osscse")) == []  # every ledgered setting is the paper's
    changed = {d["quantity"]: d for d in ledger_differences(load_method("simcse", ["training.lr=1e-4"]))}
    assert changed["learning rate"]["run"] == 1e-4 and changed["learning rate"]["paper_value"] == 3e-5
    assert changed["learning rate"]["why"] == "set for this run (the preset's value: 3e-05)"


@pytest.mark.slow
def test_every_best_checkpoint_carries_its_card(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    method = small("simcse", max_steps=2, eval_steps=2, lr=1e-4)
    train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20,
          progress=False))
    best, identity = tmp_path / "run" / "best", json.loads((tmp_path / "run" / "run.json").read_text())
    card = (best / "README.md").read_text()
    header = yaml.safe_load(card.split("---")[1])
    assert header["library_name"] == "sentence-transformers" and "simcse" in header["tags"]
    assert "base_model" not in header  # a local folder: no hub name to link
    saved = json.loads((best / "training.json").read_text())
    assert f"| saved at step | {saved['step']} |" in card and f"{saved['best']:.2f} on stsb" in card
    assert identity["data"]["key"] in card
    for name, digest in identity_weights(tmp_path / "run").items():
        assert f"`{digest}` {name}" in card  # each file's own sha256, as sha256sum prints it
    assert "| simcse | learning rate | 3e-05 | 3e-05 | 0.0001 | set for this run" in card
    config = yaml.safe_load(card.split("```yaml\n")[1].split("```")[0])
    assert config == yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert SentenceTransformer(str(best), device="cpu").encode(["still loads"]).shape == (1, 32)
    assert 'mteb.evaluate(cselab.encoders.mteb_model.as_mteb("PATH"), tasks)' in card


def identity_weights(out) -> dict[str, str]:
    return json.loads((out / "run.json").read_text())["provenance"]["weights_sha256"]


def sha256sum(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory, data_dir):
    """``cselab train`` of the packaged MiniLM on a user's CSV table, as a user types it (under umask 022)."""
    root = tmp_path_factory.mktemp("minilm-run")
    table = root / "t.csv"
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.prefix11913.txt").read_text(encoding="utf-8").splitlines()[:64]
    with open(table, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["text"], *([line] for line in lines)])
    mask = os.umask(0o022)
    try:
        assert main(["train", "--method", "simcse", "--profile", "minilm", "--model", "minilm", "--data", str(table),
                     "--out", str(root / "run"), "--data-dir", str(data_dir), "--eval-limit", "30",
                     "--set", "training.batch_size=8", "--set", "training.max_steps=2",
                     "--set", "training.eval_steps=2"]) == 0
    finally:
        os.umask(mask)
    return root / "run", table


@pytest.mark.slow
def test_every_fact_on_the_card_is_the_run_folders(minilm_run):
    out, table = minilm_run
    card, info = (out / "best" / "README.md").read_text(), json.loads((out / "best" / "cselab.json").read_text())
    header = yaml.safe_load(card.split("---")[1])
    assert header["base_model"] == info["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert header["license"] == "apache-2.0"  # what the base model's own card declares
    base = packaged_minilm() / "model.safetensors"
    assert f"| base weights sha256 | `{sha256sum(base)}` model.safetensors |" in card
    identity = json.loads((out / "run.json").read_text())
    assert info["data"] == identity["data"] and info["data"]["kind"] == "table"
    assert info["data"]["sha256"] in card and str(table.resolve()) in card  # the user's table, not the preset's data
    assert yaml.safe_load((out / "config.yaml").read_text())["data"] == str(table.resolve())
    saved = json.loads((out / "best" / "training.json").read_text())
    assert f"| dev score | {saved['best']:.2f} on stsb, its first 30 pairs (--eval-limit) |" in card
    assert "trust_remote_code" not in card  # Transformer + Pooling + Normalize: sentence-transformers' own modules


@pytest.mark.slow
def test_a_checkpoint_keeps_the_base_models_normalize_and_sentence_transformers_config(minilm_run):
    from sentence_transformers import SentenceTransformer

    best = minilm_run[0] / "best"
    base = SentenceTransformer(str(packaged_minilm()), device="cpu")
    model = SentenceTransformer(str(best), device="cpu")
    texts = ["A man is playing a guitar.", "Two dogs run across the field in the morning sun."]
    assert np.allclose(np.linalg.norm(base.encode(texts), axis=1), 1, atol=1e-5)
    assert np.allclose(np.linalg.norm(model.encode(texts), axis=1), 1, atol=1e-5)  # as the base: unit vectors
    assert model.similarity_fn_name == "cosine"
    assert json.loads((best / "config_sentence_transformers.json").read_text())["similarity_fn_name"] == "cosine"
    ours = load_encoder(str(best), cache=False).encode(texts)
    assert np.allclose(model.encode(texts), ours, atol=1e-5)


@pytest.mark.slow
def test_checkpoint_files_follow_the_umask(minilm_run):
    for folder in ("best", "last"):
        for path in (minilm_run[0] / folder).rglob("*"):
            if path.is_file():
                assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


@pytest.mark.slow
def test_mteb_sees_the_lineage_of_a_checkpoint_cselab_train_wrote(minilm_run, tiny_bert_dir, data_dir, tmp_path,
                                                                   caplog):
    from cselab.encoders.mteb_model import as_mteb

    meta = as_mteb(str(minilm_run[0] / "best")).mteb_model_meta
    assert meta.adapted_from == "sentence-transformers/all-MiniLM-L6-v2"
    assert "MSMARCO" in meta.training_datasets and "STSBenchmark" not in meta.training_datasets  # a user's table
    out = tmp_path / "run"
    assert main(["train", "--method", "simcse", "--model", str(tiny_bert_dir), "--data", "stsb-sentences",
                 "--out", str(out), "--data-dir", str(data_dir), "--eval-limit", "20", "--set", "training.max_steps=2",
                 "--set", "training.eval_steps=2", "--set", "training.batch_size=8",
                 "--set", "encoder.prompt='This sentence : \"{}\" means [MASK] .'",
                 "--set", "encoder.pooler=mask"]) == 0
    meta = as_mteb(str(out / "best")).mteb_model_meta
    assert meta.training_datasets == {"STSBenchmark"}  # --data stsb-sentences: not zero-shot on STS-B
    assert "trust_remote_code=True" in (out / "best" / "README.md").read_text()
    lineage_after_training_elsewhere(out / "best", tmp_path, caplog)


def lineage_after_training_elsewhere(best, tmp_path, caplog):
    """The checkpoint saved again by sentence-transformers keeps its lineage; trained further by
    SentenceTransformerTrainer (a cselab loss) and saved, it no longer claims the run's data, with a warning; and its
    weights replaced in place under the old cselab.json, mteb's lineage leaves the data out too."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, \
        SentenceTransformerTrainingArguments

    from cselab.encoders.mteb_model import as_mteb
    from cselab.integrations.sentence_transformers import CselabLoss

    model = SentenceTransformer(str(best), device="cpu", trust_remote_code=True)
    model.save(str(tmp_path / "as-saved"))
    assert json.loads((tmp_path / "as-saved" / "cselab.json").read_text())["data"]["name"] == "stsb-sentences"
    texts = [f"sentence number {i} of the test" for i in range(16)]
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "st"), max_steps=2, learning_rate=1e-3,
                                                per_device_train_batch_size=8, report_to=[], use_cpu=True,
                                                save_strategy="no", seed=0)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict({"a": texts, "b": texts}),
                               loss=CselabLoss(model, "info_nce")).train()
    with caplog.at_level("WARNING"):
        model.save(str(tmp_path / "further"))
    info = json.loads((tmp_path / "further" / "cselab.json").read_text())
    assert info["data"] == {} and info["method"] is None and "trained further?" in caplog.text
    assert not as_mteb(str(tmp_path / "further")).mteb_model_meta.training_datasets
    model.save(str(tmp_path / "as-saved"))  # new weights under... their own cselab.json: the same drop
    caplog.clear()
    old = json.loads((best / "cselab.json").read_text())
    (tmp_path / "as-saved" / "cselab.json").write_text(json.dumps(old))  # the old lineage over other weights
    with caplog.at_level("WARNING"):
        assert not as_mteb(str(tmp_path / "as-saved")).mteb_model_meta.training_datasets
    assert "its weights are not those its cselab.json describes" in caplog.text


@pytest.mark.slow
def test_the_metas_loader_loads_the_encoder_with_its_settings(minilm_run):
    from cselab.encoders.mteb_model import as_mteb

    best, texts = str(minilm_run[0] / "best"), ["A cat sits on the mat.", "Stocks fell sharply on Monday."]
    model = as_mteb(best, pooler="cls_before_pooler", max_length=8)
    again = model.mteb_model_meta.load_model()
    assert again.model.describe()["pooler"] == "cls_before_pooler" and again.model.max_length == 8
    assert np.array_equal(again.model.encode(texts), model.model.encode(texts))
