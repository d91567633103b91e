"""InfoCSE's parts: the vectors before the training head a loss reads (NAME.pooled), the aggregation head's weights
(BERT's initialisation, or a Condenser folder's c_head), its refusals, and its place in a run (OUT/last on a kill and
a resume, never OUT/best)."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertForMaskedLM

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.run.setup import attach_auxiliary, build_encoder
from tests.conftest import save_tiny_bert
from tests.runs import one_line_error, train_killed_after_first_save


@pytest.fixture(scope="module")
def masked_bert(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("masked-bert"), BertForMaskedLM, hidden=32, layers=2)


def infocse(*overrides):
    return load_method("infocse", ["losses.aggregation_mlm.layers=1", "training.batch_size=8", "training.max_length=24",
                                   *overrides])


def test_a_loss_that_needs_them_reads_each_views_vectors_before_the_head(masked_bert):
    method = infocse()
    objective, encoder = Objective(method), build_encoder(method, str(masked_bert))
    assert objective.pooled == {"anchor", "positive"}
    encoder.eval()  # no dropout and BatchNorm's running statistics: the head maps each row alone
    encoded = objective.encode(encoder, {"text": ["A man plays a guitar.", "Two dogs run in a field."]})
    for name in ("anchor", "positive"):
        before, rows = encoded[f"{name}.pooled"]
        assert rows == encoded[name][1] == [0, 1]
        ids, mask = encoder.tokenize(["A man plays a guitar.", "Two dogs run in a field."])
        with torch.no_grad():
            states = encoder.backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        torch.testing.assert_close(before, states)  # [CLS] before the projector
    encoder.train()
    encoded = objective.encode(encoder, {"text": ["A man plays a guitar.", "Two dogs run in a field."]})
    both = torch.cat([encoded["anchor.pooled"][0], encoded["positive.pooled"][0]])  # the pass's rows, stacked
    projected = encoder.head(both)  # in training the head (BatchNorm over the pass) maps them to the views' vectors
    torch.testing.assert_close(torch.cat([encoded["anchor"][0], encoded["positive"][0]]), projected)
    assert "anchor.pooled" not in Objective(load_method("simcse")).encode(encoder, {"text": ["One."]})


def test_the_head_layers_start_as_bert_or_as_a_condenser_folders_c_head(masked_bert, tmp_path):
    import shutil

    method = infocse()
    encoder = build_encoder(method, str(masked_bert))
    attach_auxiliary(encoder, Objective(method))
    head = encoder.auxiliary["aggregation_mlm"]
    assert len(head.layers) == 2 and not any(p.requires_grad for p in head.frozen.parameters())
    assert len(head.frozen.encoder.layer) == 1  # the base model's first layer, frozen
    condenser = tmp_path / "condenser"
    shutil.copytree(masked_bert, condenser)
    saved = {f"c_head.{key}": torch.full_like(value, 0.5) for key, value in head.layers.state_dict().items()}
    torch.save(saved, condenser / "model.pt")
    encoder = build_encoder(method, str(condenser))
    attach_auxiliary(encoder, Objective(method))
    assert all(torch.equal(value, torch.full_like(value, 0.5))
               for value in encoder.auxiliary["aggregation_mlm"].layers.state_dict().values())


def test_a_base_without_masked_lm_weights_or_too_few_layers_is_refused(masked_bert, tiny_bert_dir):
    method = infocse("losses.aggregation_mlm.layers=3")
    with pytest.raises(ConfigError, match="losses.aggregation_mlm.layers: 3, and .* has 2 layers"):
        attach_auxiliary(build_encoder(method, str(masked_bert)), Objective(method))
    method = infocse()
    with pytest.raises(ConfigError, match="has no masked-LM head weights .* which the aggregation_mlm loss predicts"):
        attach_auxiliary(build_encoder(method, str(tiny_bert_dir)), Objective(method))


def run_args(model, cache, data_dir, out):
    return ["train", "--method", "infocse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), "--set", "losses.aggregation_mlm.layers=1", "--set",
            "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4", "--set",
            "training.eval_steps=2", "--set", "training.max_steps=4"]


@pytest.mark.slow
def test_the_aggregation_head_resumes_bit_identical_and_never_reaches_best(masked_bert, tiny_cache, data_dir,
                                                                          tmp_path, capsys):
    assert main(run_args("minilm", tiny_cache, data_dir, tmp_path / "minilm")) == 2  # no masked-LM head weights
    assert "has no masked-LM head weights" in one_line_error(capsys)
    assert main(run_args(masked_bert, tiny_cache, data_dir, tmp_path / "full")) == 0
    train_killed_after_first_save(run_args(masked_bert, tiny_cache, data_dir, tmp_path / "half"))
    assert main(run_args(masked_bert, tiny_cache, data_dir, tmp_path / "half")) == 0
    full, half = (load_file(str(tmp_path / run / "last" / "model.safetensors")) for run in ("full", "half"))
    assert any(key.startswith("auxiliary.aggregation_mlm.layers.") for key in full)
    assert full.keys() == half.keys() and all(torch.equal(full[k], half[k]) for k in full)
    best = load_file(str(tmp_path / "full" / "best" / "model.safetensors"))
    assert not any("aggregation" in key for key in best)


def test_a_condenser_folders_head_weights_are_part_of_the_base_weights_identity(masked_bert, tmp_path):
    import shutil

    from cselab.encoders.pretrained import combined_sha256, weight_files

    condenser = tmp_path / "condenser"
    shutil.copytree(masked_bert, condenser)
    before = combined_sha256(weight_files(str(condenser)))
    torch.save({"c_head.0.output.dense.bias": torch.zeros(32)}, condenser / "model.pt")
    assert "model.pt" in weight_files(str(condenser)) and combined_sha256(weight_files(str(condenser))) != before
