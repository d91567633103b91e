"""RankCSE's parts: ListMLE, ListNet and the two consistency forms by hand; the teachers (any spec, their own
tokenizer, their vectors from the embedding cache the second time); a run's teachers in its identity, refused when
out of reach, and a killed run resuming bit-identical."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertModel

from cselab.cli import main
from cselab.train.config.methods import load_method
from cselab.train.objective import Objective
from cselab.train.plugins.functional import jensen_shannon, list_mle, list_net, released_rank_consistency
from cselab.train.plugins.kinds import LossContext
from cselab.train.run.setup import attach_auxiliary, build_encoder
from tests.conftest import save_tiny_bert
from tests.runs import one_line_error, train_killed_after_first_save


def test_list_mle_by_hand():
    """The teacher ranks columns 2, 0, 1: -log of the Plackett-Luce probability of that order under the student."""
    student, teacher = torch.tensor([[1.0, 0.0, 2.0]]), torch.tensor([[0.5, 0.1, 0.9]])
    e = [math.exp(v) for v in (1.0, 0.0, 2.0)]
    expected = -(math.log(e[2] / (e[2] + e[0] + e[1])) + math.log(e[0] / (e[0] + e[1])) + math.log(1.0))
    torch.testing.assert_close(list_mle(student, teacher), torch.tensor([expected]), rtol=1e-5, atol=0)
    assert list_mle(student, teacher * 10).item() == pytest.approx(expected, rel=1e-5)  # the order alone counts


def test_list_net_by_hand_leaves_each_rows_own_column_out():
    student, teacher = torch.tensor([[9.0, 1.0, 0.0]]), torch.tensor([[9.0, 0.0, 2.0]])
    q = [1 / (1 + math.exp(2.0)), math.exp(2.0) / (1 + math.exp(2.0))]
    log_p = [1.0 - math.log(math.exp(1.0) + 1.0), 0.0 - math.log(math.exp(1.0) + 1.0)]
    expected = -(q[0] * log_p[0] + q[1] * log_p[1])
    assert list_net(student, teacher, torch.tensor([0])).item() == pytest.approx(expected, rel=1e-6)


def test_the_two_consistency_forms_by_hand():
    first, second = torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[math.log(3.0), 0.0]])
    p, q = [0.25, 0.75], [0.75, 0.25]  # their softmax; the mixture is (0.5, 0.5)
    kl = sum(a * math.log(a / 0.5) for a in p)
    assert jensen_shannon(first, second).item() == pytest.approx(kl, rel=1e-6)  # the two KLs are equal here
    assert jensen_shannon(first, first).item() == pytest.approx(0.0, abs=1e-7)
    entropy = -sum(a * math.log(a) for a in p)
    released = 0.5 * (sum(a * (math.log(a) - 1e-7) for a in p) + sum(a * (math.log(a) - 1e-7) for a in q))
    assert released_rank_consistency(first, second).item() == pytest.approx(released, rel=1e-6)
    assert released == pytest.approx(-entropy - 1e-7, rel=1e-6)  # minus the entropy: no divergence at all


def rankcse(teacher, second=None, *overrides):
    settings = [f"losses.rank_distillation.teacher={teacher}", "training.batch_size=8", "training.max_length=24"]
    one = ["losses.rank_distillation.second_teacher=null", "losses.rank_distillation.second_teacher_pooler=null"]
    settings += [f"losses.rank_distillation.second_teacher={second}"] if second else one
    return load_method("rankcse", [*settings, *overrides])


def test_a_teacher_with_its_own_tokenizer_and_width_is_read_from_the_cache_the_second_time(tiny_bert_dir,
                                                                                         monkeypatch):
    from cselab.encoders.transformer import TransformerEncoder

    method = rankcse("minilm", None, "losses.rank_distillation.teacher_pooler=avg")  # 384 wide, its own vocabulary
    objective = Objective(method)
    encoder = build_encoder(method, str(tiny_bert_dir))
    attach_auxiliary(encoder, objective)
    calls = []
    encode = TransformerEncoder._encode_unique
    monkeypatch.setattr(TransformerEncoder, "_encode_unique", lambda self, s, *a: calls.append(len(s)) or encode(
        self, s, *a))
    loss = objective.losses[objective.names.index("rank_distillation")]
    texts = ["A man plays a guitar.", "Two dogs run in a field.", "The market opens at nine."]
    first = loss.teacher_lists(texts, texts, torch.device("cpu"))
    second = loss.teacher_lists(texts, texts, torch.device("cpu"))
    assert calls == [3] and torch.equal(first, second)  # encoded once, then served (the positives' are the same)
    assert first.shape == (3, 3) and torch.allclose(first.diagonal(), torch.full((3,), 1 / 0.05))
    pairs = {"anchor": texts, "positive": [f"{t} Indeed." for t in texts]}
    context = LossContext({"anchor": (torch.randn(3, 32), [0, 1, 2]), "positive": (torch.randn(2, 32), [0, 2])},
                          texts=lambda name: pairs[name] if name == "anchor" else [pairs[name][0], pairs[name][2]])
    assert loss.texts(context) == [[texts[0], texts[2]], [pairs["positive"][0], pairs["positive"][2]]]
    lists = loss.teacher_lists(*loss.texts(context), torch.device("cpu"))
    assert lists.shape == (2, 2) and lists[0, 0] < 1 / 0.05  # each anchor against the positives' own texts


def run_args(model, cache, data_dir, out, teacher, *extra):
    return ["train", "--method", "rankcse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), "--set", f"losses.rank_distillation.teacher={teacher}", "--set",
            "losses.rank_distillation.second_teacher=minilm", "--set",
            "losses.rank_distillation.second_teacher_pooler=avg", "--set", "training.batch_size=16", "--set",
            "training.max_length=24", "--set", "training.lr=1e-4", "--set", "training.eval_steps=2", "--set",
            "training.max_steps=4", *extra]


@pytest.mark.slow
def test_a_rankcse_run_resumes_bit_identical_and_its_teachers_are_its_identity(tiny_bert_dir, tiny_cache, data_dir,
                                                                              tmp_path, capsys):
    teacher = save_tiny_bert(tmp_path / "teacher", BertModel, hidden=32, layers=1)
    args = ["train", "--method", "rankcse", "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
            "--data-dir", str(data_dir), "--out", str(tmp_path / "refused")]
    assert main(args) == 2  # the preset's teachers: hub names, offline and not cached
    assert one_line_error(capsys).startswith("error: losses.rank_distillation.teacher: "
                                             "'voidism/diffcse-bert-base-uncased-sts' is not a local folder")
    assert main(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "full", teacher)) == 0
    train_killed_after_first_save(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half", teacher))
    assert main(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half", teacher)) == 0
    full, half = (load_file(str(tmp_path / run / "last" / "model.safetensors")) for run in ("full", "half"))
    assert full.keys() == half.keys() and all(torch.equal(full[k], half[k]) for k in full)
    log = [json.loads(line) for line in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["rank_distillation"]) for r in log if "rank_distillation" in r)
    identity = json.loads((tmp_path / "full" / "run.json").read_text())["auxiliary"]
    assert set(identity) == {"losses.rank_distillation.teacher", "losses.rank_distillation.second_teacher"}
    other = save_tiny_bert(tmp_path / "other", BertModel, hidden=32, layers=2)
    for name in ("model.safetensors", "config.json"):
        (teacher / name).write_bytes((other / name).read_bytes())
    assert main(run_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "full", teacher)) == 2
    assert "a different run: auxiliary.losses.rank_distillation.teacher.weights_sha256" in one_line_error(capsys)
