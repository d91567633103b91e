"""ESimCSE's parts as general mechanisms: the word-repetition token augment (its draw against the released bounds,
its application by hand), the queue of a view's vectors, the momentum copy's moving average, the config's refusals,
and the queue and momentum weights surviving a kill and a resume bit-identical, on one process and on two."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.registry import build, check_plugin, get
from cselab.train.config.methods import load_method
from cselab.train.config.sections import EncoderConfig
from cselab.train.model import TrainingEncoder
from cselab.train.objective import Objective
from cselab.train.plugins.augmentations import repeat_tokens, repetition_positions
from cselab.train.plugins.kinds import LossContext
from tests.runs import one_line_error, train_killed_after_first_save

ROOT = Path(__file__).resolve().parents[2]


def plugin(kind: str, name: str, **params):
    return build(get(kind, name), check_plugin(kind, {"kind": name, **params}, kind))


def test_repetition_draws_within_the_released_bounds():
    """caskcsg/sentemb ESimCSE/train.py 516-518: a row of L tokens repeats k in randrange(min(10, int(rate L)))
    inner positions (range(1, L - 1)); a row with int(rate L) == 0 repeats none."""
    torch.manual_seed(0)
    counts, positions = set(), set()
    for _ in range(400):
        drawn = repetition_positions([10, 3, 60], 0.32, 10)
        counts.add(len(drawn[0]))
        positions.update(drawn[0])
        assert drawn[1] == [] and len(drawn[2]) < 10 and drawn[0] == sorted(set(drawn[0]))
    assert counts == {0, 1, 2} and positions == set(range(1, 9))  # int(3.2) = 3: k in 0..2; never [CLS] or [SEP]
    assert max(len(repetition_positions([60], 0.32, 10)[0]) for _ in range(400)) == 9  # the cap: min(10, 19) - 1


def test_a_repeated_view_longer_than_the_models_positions_is_refused_before_the_run(tiny_bert_dir, tiny_cache,
                                                                                   data_dir, tmp_path, capsys):
    assert plugin("token_augment", "word_repetition").longest(10) == 12  # at most int(3.2) - 1 = 2 more
    assert plugin("token_augment", "word_repetition").longest(60) == 69  # the cap: 10 - 1 more
    args = esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run")
    assert main([*args, "--set", "training.max_length=128"]) == 2  # the tiny BERT has 128 positions
    assert "views.positive.tokens (training.max_length, lengthened): 137 is more than the 128 tokens" in \
        one_line_error(capsys)
    assert not (tmp_path / "run" / "run.json").exists()


def test_repeat_tokens_by_hand():
    ids = torch.tensor([[101, 7, 8, 9, 102], [101, 5, 102, 0, 0]])
    mask = (ids != 0).long()
    new_ids, new_mask = repeat_tokens(ids, mask, [[1, 3], [1]], pad_id=0)
    assert new_ids.tolist() == [[101, 7, 7, 8, 9, 9, 102], [101, 5, 5, 102, 0, 0, 0]]
    assert new_mask.tolist() == [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]
    same, same_mask = repeat_tokens(ids, mask, [[], []], pad_id=0)
    assert torch.equal(same, ids[:, :5]) and torch.equal(same_mask, mask)


def test_the_queue_holds_the_newest_vectors_of_its_view():
    queue = plugin("negatives", "queue", size=5, view="momentum")
    batches = [torch.randn(3, 4) for _ in range(3)]
    seen = []
    for vectors in batches:
        queue.new_batch()
        context = LossContext({"momentum": (vectors, [0, 1, 2])})
        seen.append(queue(torch.randn(3, 4, requires_grad=True), context))
        assert queue(torch.randn(3, 4), context) is seen[-1]  # one set per step
    assert seen[0] is None  # nothing queued before the first batch
    assert torch.equal(seen[1], batches[0])
    assert torch.equal(seen[2], torch.cat(batches[:2])[-5:])  # the oldest row dropped
    restored = plugin("negatives", "queue", size=5, view="momentum")
    restored.load_state_dict(queue.state_dict())
    assert torch.equal(restored.memory[0], torch.cat(batches)[-5:])


def test_the_momentum_copy_moves_by_its_moving_average(tiny_bert_dir):
    encoder = TrainingEncoder.from_pretrained(str(tiny_bert_dir), 16, pooler="cls_before_pooler", frozen="float32",
                                              momentum=0.75)
    with torch.no_grad():
        for p in encoder.backbone.parameters():
            p.add_(1.0)
    before = [m.clone() for m in encoder.frozen.parameters()]
    encoder.new_batch()
    for m, old, theta in zip(encoder.frozen.parameters(), before, encoder.backbone.parameters(), strict=True):
        torch.testing.assert_close(m, 0.75 * old + 0.25 * theta)
    assert not any(m.requires_grad for m in encoder.frozen.parameters())
    fixed = TrainingEncoder.from_pretrained(str(tiny_bert_dir), 16, pooler="cls_before_pooler", frozen="float32")
    copy = [m.clone() for m in fixed.frozen.parameters()]
    fixed.new_batch()  # no momentum: the frozen copy stays the initial backbone
    assert all(torch.equal(a, b) for a, b in zip(copy, fixed.frozen.parameters(), strict=True))


@pytest.mark.parametrize(("overrides", "message"), [
    (["encoder.frozen=bfloat16"], "encoder.momentum: a momentum encoder is the frozen copy kept in float32"),
    (["encoder.frozen=null", "encoder.momentum=null"], "views.momentum.frozen: encodes with the frozen copy, and "
                                                      "the method keeps none"),
    (["views.positive.prompt='This : {} [MASK]'"], "views.positive.tokens: a token augmentation changes a "
                                                  "sentence's own tokens"),
    (["losses.info_nce.generated.view=teacher"], "losses.info_nce.generated.view: 'teacher' is not a view"),
    (["views.positive.tokens.rate=1.5"], "views.positive.tokens.rate: 1.5 is out of range"),
])
def test_an_esimcse_config_that_cannot_run_is_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_method("esimcse", overrides)


def test_momentum_needs_a_float32_copy_in_the_section_too():
    with pytest.raises(ConfigError, match="set encoder.frozen: float32 \\(now None\\)"):
        EncoderConfig(pooler="avg", momentum=0.9)


def test_the_token_augmented_view_has_its_own_pass():
    objective = Objective(load_method("esimcse"))
    assert [v.name for v in objective.shared_pass["anchor"]] == ["anchor"]
    assert [v.name for v in objective.shared_pass["positive"]] == ["positive"]


def test_esimcse_trains_at_the_backbones_dropout_with_the_released_profiles(tiny_bert_dir):
    """run.sh's backbones with dropout 0.1 have profiles; roberta-large's 0.15 has none (cselab sets no rate)."""
    from cselab.train.config.methods import method_profiles
    from cselab.train.run.setup import build_encoder

    assert set(method_profiles("esimcse")) == {"minilm", "bert-base", "bert-large", "roberta-base", "official"}
    encoder = build_encoder(load_method("esimcse"), str(tiny_bert_dir))
    config = encoder.backbone.config
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.1, 0.1)
    assert encoder.frozen.config.hidden_dropout_prob == 0.1 and not encoder.frozen.training


def esimcse_args(model, cache, data_dir, out):
    return ["train", "--method", "esimcse", "--model", str(model), "--data", str(cache), "--data-dir", str(data_dir),
            "--eval-limit", "20", "--out", str(out), "--set", "training.batch_size=16", "--set",
            "training.max_length=24", "--set", "training.lr=1e-4", "--set", "training.eval_steps=2", "--set",
            "training.max_steps=4", "--set", "losses.info_nce.generated.size=24"]


def assert_same_state(a: Path, b: Path, ranks: int) -> None:
    """Two ``OUT/last`` folders hold the same weights, momentum weights and queues, bit for bit."""
    for name in ("model.safetensors", "momentum.safetensors"):
        x, y = load_file(str(a / name)), load_file(str(b / name))
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), name
    for rank in range(ranks):
        x, y = (torch.load(f / f"objective-{rank}.pt", weights_only=True) for f in (a, b))
        assert x.keys() == y.keys()
        for key in x:
            queued = x[key]["memory"]
            assert len(queued) == 1 and queued[0].shape[0] == 24  # full: 4 steps of 16 rows (8 a process on two)
            assert all(torch.equal(p, q) for p, q in zip(queued, y[key]["memory"], strict=True))


@pytest.mark.slow
def test_a_killed_esimcse_run_resumes_its_queue_and_momentum_bit_identical(tiny_bert_dir, tiny_cache, data_dir,
                                                                            tmp_path):
    assert main(esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "full")) == 0
    train_killed_after_first_save(esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half"))
    assert main(esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half")) == 0
    assert_same_state(tmp_path / "full" / "last", tmp_path / "half" / "last", 1)
    moved = load_file(str(tmp_path / "full" / "last" / "momentum.safetensors"))
    trained = load_file(str(tmp_path / "full" / "last" / "model.safetensors"))
    key = "embeddings.word_embeddings.weight"
    assert not torch.equal(moved[key], trained[f"backbone.{key}"])  # a copy of its own, not the weights again


@pytest.mark.slow
def test_a_restart_from_best_says_what_starts_afresh_and_the_momentum_copy_follows_best(tiny_bert_dir, tiny_cache,
                                                                                       data_dir, tmp_path, monkeypatch):
    from cselab.train.out.checkpoint import Checkpoints

    train_killed_after_first_save(esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run"))
    (tmp_path / "run" / "last" / "optimizer.pt").write_bytes(b"damaged")
    restore, copies = Checkpoints.restore_best, []

    def restored(self, core):
        saved = restore(self, core)
        copies.append(all(torch.equal(a, b) for a, b in zip(core.frozen.parameters(), core.backbone.parameters(),
                                                             strict=True)))
        return saved
    monkeypatch.setattr(Checkpoints, "restore_best", restored)
    assert main([*esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "run"), "--restart-from", "best"]) == 0
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["afresh"] for r in log if "restarted_from" in r] == [["optimizer", "head", "objective state"]]
    assert copies == [True]  # the momentum copy restarts as best's weights


KILLED = """import sys
from tests.runs import one_line_error, train_killed_after_first_save
train_killed_after_first_save(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
def test_two_processes_resume_each_its_own_queue_bit_identical(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                                capsys):
    """Each process queues its own rows (as the released trainer, whose pre_z1 is never gathered) and saves its own
    queue in OUT/last/objective-RANK.pt; killed after its first save and resumed, two processes end where a straight
    run of two ends, bit for bit; one process is refused the resume."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    environment = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    (tmp_path / "killed.py").write_text(KILLED)

    def run(script: list[str], out: str, port: int):
        args = esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / out)
        done = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(port), *script, *args],
                              capture_output=True, timeout=600, env=environment, cwd=ROOT)
        assert done.returncode == 0, done.stderr.decode()[-3000:]

    run(["-m", "cselab.cli"], "full", 29571)
    run([str(tmp_path / "killed.py")], "half", 29572)
    assert json.loads((tmp_path / "half" / "last" / "trainer_state.json").read_text())["step"] == 2
    # one process cannot hold the second's queue: refused, naming its file, nothing lost
    assert main(esimcse_args(tiny_bert_dir, tiny_cache, data_dir, tmp_path / "half")) == 2
    assert "objective-1.pt: the state was saved by a run with more processes" in one_line_error(capsys)
    run(["-m", "cselab.cli"], "half", 29573)
    assert_same_state(tmp_path / "full" / "last", tmp_path / "half" / "last", 2)
    queues = [torch.load(tmp_path / "full" / "last" / f"objective-{rank}.pt", weights_only=True) for rank in (0, 1)]
    assert not torch.equal(*(next(iter(q.values()))["memory"][0] for q in queues))  # each process's own rows
