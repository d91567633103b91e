"""DiffCSE's parts: the replaced-token detection loss by hand, the BatchNorm projector, the discriminator conditioned
on a sentence vector, the generator's refusals, and the auxiliary models' place in a run (its identity, OUT/last on
a kill and a resume, never OUT/best)."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertModel

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.plugins.electra import ConditionedDiscriminator
from cselab.train.plugins.functional import replaced_token_detection
from cselab.train.plugins.heads import BatchNormMLPHead
from cselab.train.run.setup import attach_auxiliary, build_encoder
from tests.conftest import save_tiny_bert
from tests.runs import one_line_error, tiny_model, train_killed_after_first_save


def test_replaced_token_detection_by_hand():
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 3.0], [0.0, 0.0]]])
    replaced = torch.tensor([[0, 0, 1], [0, 1, 0]])
    softplus = lambda x: math.log1p(math.exp(x))  # noqa: E731  cross-entropy of two logits: softplus(other - own)
    first = (softplus(0.0) + softplus(-2.0) + softplus(-1.0)) / 3
    second = (softplus(0.0) + softplus(-3.0) + softplus(0.0)) / 3
    torch.testing.assert_close(replaced_token_detection(logits, replaced), torch.tensor([first, second]))


def test_the_batchnorm_projector_normalises_each_dimension_over_the_rows():
    torch.manual_seed(0)
    head = BatchNormMLPHead(BatchNormMLPHead.Params(), hidden=8)
    out = head(torch.randn(32, 8) * 5 + 3)
    assert out.shape == (32, 8) and not any(p.requires_grad for p in head[4].parameters())
    torch.testing.assert_close(out.mean(dim=0), torch.zeros(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(dim=0, unbiased=False), torch.ones(8), atol=1e-3, rtol=0)
    assert [type(m).__name__ for m in head] == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d"]
    assert head[0].bias is None and head[3].bias is None


def test_the_discriminator_reads_the_vector_at_the_first_position(tiny_bert_dir):
    torch.manual_seed(0)
    model = BertModel.from_pretrained(str(tiny_bert_dir)).eval()
    discriminator = ConditionedDiscriminator(model, 32)
    ids, mask = torch.tensor([[101, 2000, 2001, 102]]), torch.ones(1, 4, dtype=torch.long)
    condition = torch.randn(1, 32, requires_grad=True)
    logits = discriminator(ids, mask, condition)
    assert logits.shape == (1, 4, 2)
    seen = {}
    model.encoder.register_forward_pre_hook(lambda module, args, kwargs: seen.update(first=args[0][:, 0]),
                                            with_kwargs=True)
    discriminator(ids, mask, condition)
    torch.testing.assert_close(seen["first"], condition)  # what the layers read at position 0
    logits.sum().backward()
    assert condition.grad.abs().sum() > 0  # the sentence vector gets the detection's gradient
    assert not torch.allclose(discriminator(ids, mask, condition + 1.0), logits)
    assert not model.embeddings._forward_hooks  # each pass removes its hook


def diffcse(generator, *overrides):
    return load_method("diffcse", [f"losses.rtd.generator={generator}", "training.batch_size=16",
                                   "training.max_length=24", *overrides], profile="minilm")


def test_a_generator_with_another_vocabulary_is_refused_in_one_line(tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer, BertForMaskedLM, BertTokenizerFast

    other = tmp_path / "other"
    save_tiny_bert(other, BertForMaskedLM, hidden=32, layers=1)
    vocabulary = sorted(AutoTokenizer.from_pretrained(other).get_vocab().items(), key=lambda item: item[1])
    words = [word for word, _ in vocabulary]
    words[2000], words[2001] = words[2001], words[2000]  # the same tokens, two of them at each other's id
    for path in other.iterdir():
        if "token" in path.name or path.name == "vocab.txt":
            path.unlink()
    (other / "vocab.txt").write_text("\n".join(words) + "\n")
    BertTokenizerFast(str(other / "vocab.txt")).save_pretrained(other)
    method = diffcse(other)
    encoder = build_encoder(method, str(tiny_bert_dir))
    with pytest.raises(ConfigError, match=r"losses.rtd.generator: '.* has another vocabulary than the model "
                                          r"\(30522 and 30522 tokens; '.*' differs\)"):
        attach_auxiliary(encoder, Objective(method))


def test_a_generator_without_masked_lm_weights_or_out_of_reach_is_refused(tiny_bert_dir, tiny_cache, data_dir,
                                                                           tmp_path, capsys):
    args = ["train", "--method", "diffcse", "--model", str(tiny_bert_dir), "--data", str(tiny_cache), "--data-dir",
            str(data_dir), "--out", str(tmp_path / "run")]
    assert main(args) == 2  # the preset's distilbert-base-uncased: offline and not cached
    assert one_line_error(capsys).startswith("error: losses.rtd.generator: 'distilbert-base-uncased' is not a local "
                                             "folder")
    assert main([*args, "--set", f"losses.rtd.generator={tiny_bert_dir}"]) == 2  # an encoder without an MLM head
    assert "has no masked-LM head weights" in one_line_error(capsys)
    assert not (tmp_path / "run" / "run.json").exists()  # nothing of a run that never started


def run_args(model, cache, data_dir, out, generator):
    return ["train", "--method", "diffcse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), "--set", f"losses.rtd.generator={generator}", "--set",
            "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4", "--set",
            "training.eval_steps=2", "--set", "training.max_steps=4"]


@pytest.mark.slow
def test_the_discriminator_resumes_bit_identical_and_never_reaches_best(tiny_bert_dir, tiny_cache, data_dir,
                                                                       tmp_path, capsys):
    generator = tiny_model(tmp_path / "generator", masked_lm=True)
    assert main(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "full", generator)) == 0
    train_killed_after_first_save(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half", generator))
    assert main(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half", generator)) == 0
    full, half = (load_file(str(tmp_path / run / "last" / "model.safetensors")) for run in ("full", "half"))
    assert any(key.startswith("auxiliary.rtd.") for key in full)
    assert full.keys() == half.keys() and all(torch.equal(full[k], half[k]) for k in full)
    initial = BertModel.from_pretrained(str(tiny_bert_dir)).state_dict()
    key = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(full[f"auxiliary.rtd.model.{key}"], initial[key])  # trained from the initial backbone
    best = load_file(str(tmp_path / "full" / "best" / "model.safetensors"))
    assert not any("rtd" in k or "discriminator" in k for k in best) and len(best) == len(initial)
    identity = json.loads((tmp_path / "full" / "run.json").read_text())
    assert identity["auxiliary"]["losses.rtd.generator"]["model"] == str(generator)
    assert "auxiliary model (losses.rtd.generator)" in (tmp_path / "full" / "best" / "README.md").read_text()
    # the generator's weights are the run's: other weights at the same path make it another run
    from transformers import BertForMaskedLM

    other = save_tiny_bert(tmp_path / "other", BertForMaskedLM, hidden=32, layers=2)
    for name in ("model.safetensors", "config.json"):
        (generator / name).write_bytes((other / name).read_bytes())
    assert main(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "full", generator)) == 2
    assert "a different run: auxiliary.losses.rtd.generator.weights_sha256" in one_line_error(capsys)


@pytest.mark.parametrize(("preset", "overrides", "message"), [
    ("diffcse", ["views.noisy={of: anchor, augment: {kind: batch_noise}}", "losses.rtd.views=[noisy]"],
     "losses.rtd.views: 'noisy' is not a forward view"),
    ("diffcse", ["views.positive.tokens={kind: word_repetition}"], "losses.rtd.views: 'positive' changes its tokens"),
    ("infocse", ["views.anchor.layers=[-2]"], "losses.aggregation_mlm.views: 'anchor' pools layers too"),
    ("simcse", ["encoder.head=batchnorm_mlp", "training.mini_batch_size=8"],
     "training.mini_batch_size: the batchnorm_mlp head normalises"),
    ("rankcse", ["losses.rank_distillation.second_teacher=null", "losses.rank_distillation.second_teacher_pooler=null",
                 "losses.rank_distillation.alpha=0.5"], "losses.rank_distillation.alpha: weighs two teachers' lists"),
    ("esimcse", ["views.positive.augment={kind: fgsm}"], "views.positive.tokens: the view's augment \\(fgsm\\) "
                                                         "encodes it twice a step"),
])
def test_a_view_a_loss_cannot_read_as_it_needs_is_refused_when_the_config_loads(preset, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_method(preset, overrides)
