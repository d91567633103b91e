"""A cselab encoder in MTEB 2: mteb's own evaluate runs it, and its ModelMeta says what cselab knows."""

import shutil

import pytest

mteb = pytest.importorskip("mteb")

from cselab.encoders import load_encoder  # noqa: E402
from cselab.encoders.checkpoint import CheckpointInfo, write_checkpoint_info  # noqa: E402
from cselab.encoders.mteb_model import as_mteb, model_meta  # noqa: E402
from cselab.errors import ModelError  # noqa: E402
from cselab.probes.mteb_bridge import sts_tasks  # noqa: E402
from cselab.probes.sts import run_sts  # noqa: E402


def mteb_stsb(model, data_dir, limit=None) -> dict:
    result = mteb.evaluate(model, sts_tasks(data_dir, ("stsb",), limit), cache=None, show_progress_bar=False)
    return result.task_results[0].scores["test"][0]


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["tiny", "minilm"])
def test_mteb_scores_stsb_as_probe_run_does(spec, tiny_bert_dir, data_dir):
    """mteb.evaluate on an as_mteb encoder: the model's own similarity is cselab's float64 cosine, so MTEB's
    ``spearman`` is probe run's STS-B figure. Its main score, ``cosine_spearman``, comes from scikit-learn's float32
    cosine: on MiniLM it agrees to 1e-6; the random tiny BERT's cosines are packed so close together that float32
    rounding reorders some pairs, and it differs by about 1e-4 (x 100)."""
    encoder = load_encoder(str(tiny_bert_dir) if spec == "tiny" else spec, cache=False)
    model = as_mteb(encoder)
    assert isinstance(model, mteb.models.models_protocols.EncoderProtocol)
    with encoder.remembering():  # the same vectors (a transformer's output moves by ~1e-9 with its batch)
        scores = mteb_stsb(model, data_dir)
        ours = run_sts(encoder, ("stsb",), data_dir)[0]["STS-B"]["all"]
    assert scores["spearman"] * 100 == pytest.approx(ours, abs=1e-9)
    assert scores["main_score"] * 100 == pytest.approx(ours, abs=1e-6 if spec == "minilm" else 1e-3)


def test_lexical_baselines_run_in_mteb_too(data_dir):
    """bow: no weights (revision null); its float32 ties make MTEB's cosine_spearman differ from the model's own
    similarity, which equals probe run's."""
    encoder = load_encoder("bow")
    scores = mteb_stsb(as_mteb(encoder), data_dir, limit=300)
    ours = run_sts(encoder, ("stsb",), data_dir, limit=300)[0]["STS-B"]["all"]
    assert scores["spearman"] * 100 == pytest.approx(ours, abs=1e-9)
    assert as_mteb(encoder).mteb_model_meta.revision is None


def test_model_meta_of_a_folder(tiny_bert_dir):
    encoder = load_encoder(str(tiny_bert_dir), cache=False)
    meta = model_meta(encoder)
    assert meta.name == f"cselab/{tiny_bert_dir.name}"
    assert meta.revision == encoder.weights["model.safetensors"]
    assert (meta.embed_dim, meta.max_tokens, meta.similarity_fn_name.value) == (32, encoder.max_length, "cosine")
    assert meta.n_parameters == sum(p.numel() for p in encoder.model.parameters())
    assert meta.training_datasets is None and meta.adapted_from is None
    assert model_meta(encoder, name="me/mine").name == "me/mine"


def test_model_meta_of_the_packaged_minilm():
    meta = model_meta(load_encoder("minilm", cache=False))
    assert meta.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta.license == "apache-2.0" and "MSMARCO" in meta.training_datasets  # from mteb's own registry


@pytest.mark.parametrize("data, config, trained", [
    ({"kind": "table", "name": "stsb-rows"}, "stsb-rows", {"STSBenchmark"}),
    ({"kind": "augment-cache", "key": "k"}, "stsb-rows", None),  # --data overrides the preset's: the run's data counts
    ({}, "stsb-rows", {"STSBenchmark"}),  # a checkpoint written before cselab recorded its data: the method's own
])
def test_a_checkpoint_says_what_it_was_trained_on(tiny_bert_dir, tmp_path, data, config, trained):
    """SG trains on STS-B's rows: MTEB must see the model is not zero-shot there; a wiki1m run is. (Checkpoints that
    cselab train writes: tests/train/run/test_card.py.)"""
    folder = shutil.copytree(tiny_bert_dir, tmp_path / "run" / "best")
    write_checkpoint_info(folder, CheckpointInfo(pooler="avg", base_model=str(tiny_bert_dir), method="sg", data=data,
                                                 config={"data": config}))
    meta = model_meta(load_encoder(str(folder), cache=False))
    assert meta.name == "cselab/run-best" and meta.training_datasets == trained


def test_the_meta_loads_the_model_again_and_refuses_other_weights(tiny_bert_dir, tmp_path):
    folder = shutil.copytree(tiny_bert_dir, tmp_path / "model")
    meta = model_meta(load_encoder(str(folder), cache=False))
    assert meta.load_model().mteb_model_meta.revision == meta.revision
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ModelError, match="weights changed"):
        meta.load_model()


def test_a_factory_encoder_runs_in_mteb(tmp_path, monkeypatch, data_dir):
    (tmp_path / "hashing_model.py").write_text(
        "import numpy as np\n\n\nclass Hashing:\n    def encode(self, sentences):\n"
        "        return np.array([[len(s), s.count(' ') + 1, s.count('e')] for s in sentences], dtype=float)\n\n\n"
        "def factory():\n    return Hashing()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = as_mteb("hashing_model:factory")
    assert (model.mteb_model_meta.name, model.mteb_model_meta.revision) == ("cselab/hashing_model.factory", None)
    scores = mteb_stsb(model, data_dir, limit=50)
    assert scores["spearman"] * 100 == pytest.approx(
        run_sts(model.model, ("stsb",), data_dir, limit=50)[0]["STS-B"]["all"], abs=1e-9)
