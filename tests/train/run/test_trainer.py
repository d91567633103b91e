import dataclasses
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from cselab.cli import main
from cselab.encoders import load_encoder
from cselab.train.run.data import training_rows, warn_if_paraphrases_differ
from cselab.train.run.callbacks import Callback
from cselab.train.config.method import MethodConfig, frozen
from cselab.train.config.methods import load_method
from cselab.train.run.callbacks import EarlyStop, early_stop_count
from cselab.train.run.options import RunOptions
from cselab.train.recipe import Trainer, TrainingError, train


def small(method: str, **training) -> MethodConfig:
    settings = {"batch_size": 16, "max_length": 24, "eval_steps": 10, "lr": 1e-4, **training}
    return load_method(method, [f"training.{k}={json.dumps(v)}" for k, v in settings.items()])


def with_loss_setting(method: MethodConfig, loss: str, **settings) -> MethodConfig:
    """``method`` with settings of one loss changed after it was read."""
    losses = {name: dict(params) for name, params in method.losses.items()}
    losses[loss].update(settings)
    return dataclasses.replace(method, losses=frozen(losses))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simcse", "osscse", "simcse-bt"])
def test_short_cpu_run_writes_a_best_checkpoint_the_probe_loads(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                                 method):
    summary = train(small(method, max_steps=30, epochs=10), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
                    RunOptions(data_dir=data_dir, eval_limit=40, progress=False))
    assert summary["steps"] == 30
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "stsb_dev" in r] == [10, 20, 30]
    losses = {key for r in log if "loss" in r for key in r}
    expected = {"simcse": {"info_nce"}, "simcse-bt": {"info_nce"},
                "osscse": {"info_nce", "two_way_margin", "recall"}}[method]
    assert expected <= losses
    info = json.loads((tmp_path / "run" / "best" / "cselab.json").read_text())
    assert info["method"] == method
    encoder = load_encoder(str(tmp_path / "run" / "best"), device="cpu")
    assert encoder.encode(["a test sentence"]).shape == (1, 32)


@pytest.mark.slow
@pytest.mark.parametrize(("at_end", "evaluated"), [(True, [10, 20, 25]), (False, [10, 20])])
def test_the_last_step_is_evaluated_unless_eval_at_end_is_off(tiny_bert_dir, tiny_cache, data_dir, tmp_path, at_end,
                                                                evaluated):
    """The presets score the last step too (25, no multiple of eval_steps 10); SimCSE's released Trainer, which the
    official profiles follow, scores every eval_steps only: the last step is then saved to OUT/last, not scored."""
    summary = train(small("simcse", max_steps=25, epochs=10, eval_at_end=at_end), str(tiny_bert_dir), tiny_cache,
                    tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "stsb_dev" in r] == evaluated and summary["steps"] == 25
    assert json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())["step"] == 25
    assert load_method("simcse", profile="official").training.eval_at_end is False
    short = train(small("simcse", max_steps=5, epochs=10, eval_at_end=False), str(tiny_bert_dir), tiny_cache,
                  tmp_path / "short", RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    assert (tmp_path / "short" / "best").is_dir() and short["best_dev"] is not None  # shorter than eval_steps


def test_a_pooler_set_alone_keeps_the_presets_training_head():
    """encoder.head is its own key: --set encoder.pooler=avg keeps SimCSE's MLP in training (the released code builds
    none for avg); the minilm profile drops both together."""
    assert load_method("simcse", ["encoder.pooler=avg"]).encoder.head == {"kind": "mlp"}
    assert load_method("simcse", ["encoder.pooler=avg", "encoder.head=null"]).encoder.head is None
    assert load_method("simcse", profile="minilm").encoder.head is None


@pytest.mark.slow
def test_promptbert_denoises_in_training_and_dev_scoring_and_its_checkpoint_does_not(tiny_bert_dir, tiny_cache,
                                                                                     data_dir, tmp_path, monkeypatch):
    """As the released code: --mask_embedding_sentence_delta in training and in the trainer's dev scoring; its
    evaluation.py encodes with the first template and no denoising, which is what the checkpoint does."""
    seen = {}
    build = Trainer.__init__

    def keep(self, *args, **kwargs):
        build(self, *args, **kwargs)
        seen["train"], seen["dev"] = self.core.view.denoise, self.dev_view.denoise
    monkeypatch.setattr(Trainer, "__init__", keep)
    train(small("promptbert", max_steps=2, eval_steps=2), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
          RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    best = load_encoder(str(tmp_path / "run" / "best"), cache=False)
    assert seen == {"train": True, "dev": True} and not best.denoise
    assert best.prompt.startswith('This sentence of "') and best.pooler == "mask"


@pytest.mark.slow
def test_promptbert_roberta_tokenises_in_pieces_in_training_and_dev_scoring_and_its_checkpoint_does_not(
        tiny_roberta_dir, tiny_cache, data_dir, tmp_path, monkeypatch):
    """run.sh unsup-roberta: the training rows and the trainer's dev scoring join the template's ids and the
    sentence's (train.py 674-690, models.py 307-330); evaluation.py fills the template as text."""
    seen = {}
    build = Trainer.__init__

    def keep(self, *args, **kwargs):
        build(self, *args, **kwargs)
        seen["train"], seen["dev"] = self.core.view.pieces is not None, self.dev_view.pieces is not None
    monkeypatch.setattr(Trainer, "__init__", keep)
    method = load_method("promptbert", ["training.batch_size=16", "training.max_steps=2", "training.eval_steps=2"],
                         profile="roberta-base")
    train(method, str(tiny_roberta_dir), tiny_cache, tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20,
          progress=False))
    best = load_encoder(str(tmp_path / "run" / "best"), cache=False)
    assert seen == {"train": True, "dev": True} and best.pieces is None and not best.denoise
    assert best.prompt == "This sentence : ' {} ' means<mask>."


@pytest.mark.slow
@pytest.mark.parametrize("method", ["osscse", "sam"])  # sam: the weight hook's second pass resumes too
def test_resume_after_a_kill_is_bit_identical_to_a_straight_run(tiny_bert_dir, tiny_cache, data_dir, tmp_path, method):
    overrides = ["--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.lr=1e-4",
                 "--set", "training.eval_steps=10", "--set", "training.max_steps=40", "--set", "training.epochs=10"]
    command = [sys.executable, "-m", "cselab.cli", "train", "--method", method, "--model", str(tiny_bert_dir),
               "--data", str(tiny_cache), "--data-dir", str(data_dir), "--eval-limit", "40", *overrides]
    straight = subprocess.run([*command, "--out", str(tmp_path / "straight")], capture_output=True, timeout=600)
    assert straight.returncode == 0, straight.stderr.decode()[-2000:]

    process = subprocess.Popen([*command, "--out", str(tmp_path / "killed")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    state = tmp_path / "killed" / "last" / "trainer_state.json"
    deadline = time.time() + 300
    while time.time() < deadline and not state.exists():
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    step = json.loads(state.read_text())["step"]
    assert step < 40  # killed part-way
    resumed = subprocess.run([*command, "--out", str(tmp_path / "killed")], capture_output=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    # piped: progress lines, the resumed run's starting where it resumed
    assert f"train {method}: started, {step}/40 steps" in resumed.stderr.decode()
    assert f"train {method}: done, 40/40 steps (100%)" in resumed.stderr.decode()

    a = load_file(str(tmp_path / "straight" / "last" / "model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "last" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.slow
def test_a_diverging_loss_stops_with_the_step_named(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    # a temperature the schema takes (> 0) over which every similarity overflows to inf, and inf - inf is nan
    method = with_loss_setting(small("simcse", max_steps=5), "info_nce", temperature=1e-45)
    with pytest.raises(TrainingError, match=r"the loss became nan at step 1; the last good state is"):
        train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20,
              progress=False))


@pytest.mark.slow
def test_steps_count_optimizer_steps_with_gradient_accumulation(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    summary = train(small("simcse", max_steps=3, grad_accum=2), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
                    RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    assert summary["steps"] == 3
    optimizer = torch.load(tmp_path / "run" / "last" / "optimizer.pt", weights_only=True)
    assert {float(state["step"]) for state in optimizer["state"].values()} == {3.0}
    # 96 rows = 6 batches of 16 = 3 steps of 2 batches per epoch
    assert train(small("simcse", grad_accum=2, epochs=1), str(tiny_bert_dir), tiny_cache, tmp_path / "epoch",
                 RunOptions(data_dir=data_dir, eval_limit=20, progress=False))["steps"] == 3


@pytest.mark.slow
def test_a_tracker_gets_the_logged_figures_the_config_and_the_run_identity(tiny_bert_dir, tiny_cache, data_dir,
                                                                           tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    out = tmp_path / "run"
    assert main(["train", "--method", "simcse", "--model", str(tiny_bert_dir), "--data", str(tiny_cache),
                 "--data-dir", str(data_dir), "--eval-limit", "20", "--out", str(out), "--tensorboard",
                 *(f"--set=training.{k}={v}" for k, v in {"batch_size": 16, "max_length": 24, "max_steps": 2,
                                                           "eval_steps": 2}.items())]) == 0
    assert "warning: --tensorboard is now --report-to tensorboard" in capsys.readouterr().err
    accumulators = [EventAccumulator(str(events.parent)).Reload()
                    for events in (out / "tensorboard").rglob("events.out.tfevents.*")]
    (figures,) = [a for a in accumulators if a.Tags()["scalars"]]
    assert {"loss", "info_nce", "lr", "grad_norm", "stsb_dev", "best"} <= set(figures.Tags()["scalars"])
    assert [e.step for e in figures.Scalars("stsb_dev")] == [2]
    hparams = {}
    for accumulator in accumulators:
        try:
            contents = accumulator.PluginTagToContent("hparams").values()
        except KeyError:  # the figures' own events file
            continue
        for content in contents:
            hparams.update(plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams)
    identity = json.loads((out / "run.json").read_text())
    assert hparams["config.training.lr"].number_value == 3e-5  # simcse's, as OUT/config.yaml holds it
    assert hparams["run.config_sha256"].string_value == identity["config_sha256"]


@pytest.mark.parametrize(("tracker", "message"), [
    ("nosuch", "--report-to nosuch: not a tracker; choose from tensorboard, wandb, mlflow, trackio"),
    ("swanlab", "--report-to swanlab: the swanlab package is not installed: pip install swanlab")])
def test_a_tracker_that_cannot_run_is_one_line_before_work(tmp_path, tiny_bert_dir, tiny_cache, capsys, tracker,
                                                           message):
    assert main(["train", "--model", str(tiny_bert_dir), "--data", str(tiny_cache), "--out", str(tmp_path / "run"),
                 "--report-to", tracker]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "run" / "config.yaml").exists()


def test_bad_keys_are_named(capsys):
    assert main(["train", "--out", "x", "--set", "training.lrr=1"]) == 2
    assert "simcse: training.lrr: unknown key (did you mean 'lr'?); known: adam_betas" in capsys.readouterr().err
    assert main(["train", "--out", "x", "--method", "osscse", "--set", "losses.two_way_margin.gama=1"]) == 2
    # no key is close: no suggestion
    assert "osscse: losses.two_way_margin.gama: unknown key; known: alpha, anchor, beta" in capsys.readouterr().err
    assert main(["train", "--out", "x", "--method", "nosuch"]) == 2
    assert "Unknown method 'nosuch'" in capsys.readouterr().err


@pytest.mark.slow
def test_early_stop_ends_the_run_after_patience_evaluations_without_a_better_score(tiny_bert_dir, tiny_cache,
                                                                                  data_dir, tmp_path):
    # lr 0: every evaluation gives the first one's score, so none is better
    summary = train(small("simcse", max_steps=20, eval_steps=1, lr=0.0, early_stop=2), str(tiny_bert_dir), tiny_cache,
                    tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    assert summary["steps"] == 3 and summary["stopped_early"]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[-1] == {"step": 3, "stopped_by": "EarlyStop", "reason": "2 evaluations without a better dev score"}
    saved = json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())
    assert saved["callbacks"]["EarlyStop"]["count"] == 2


@pytest.mark.slow
def test_sg_trains_on_every_stsb_row_by_default(tiny_bert_dir, data_dir, tmp_path):
    from cselab.data import load_corpus, load_sts

    method = load_method("sg", ["training.max_steps=2", "training.eval_steps=2", "training.max_length=16"])
    summary = train(method, str(tiny_bert_dir), None, tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20,
                    progress=False))
    sentences = load_corpus("stsb-rows", data_dir)
    digest = hashlib.sha256("\n".join(sentences).encode()).hexdigest()
    assert summary["data"] == {"kind": "corpus", "name": "stsb-rows", "rows": len(sentences), "sha256": digest}
    pairs = sum(len(p.scores) for split in ("train", "dev", "test") for p in load_sts("stsb", split, data_dir))
    assert len(sentences) == 2 * pairs > len(set(sentences)) == len(load_corpus("stsb-sentences", data_dir))


@pytest.mark.slow
def test_an_epoch_drops_its_last_partial_batch(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    # 96 rows in batches of 20: four full batches, the last 16 rows left out of the epoch
    summary = train(small("simcse", batch_size=20, epochs=1), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
                    RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    assert summary["steps"] == 4


@pytest.mark.parametrize(("rule", "counts"), [("drops", [0, 0, 1, 1, 2, 3]), ("no_improvement", [0, 0, 1, 2, 3, 4])])
def test_the_early_stop_count_by_hand(rule, counts):
    count, best, previous, seen = 0, -math.inf, 0.0, []
    for score in (50.0, 60.0, 55.0, 58.0, 57.0, 40.0):
        count = early_stop_count(rule, count, score, previous, score > best)
        best, previous = max(best, score), score
        seen.append(count)
    assert seen == counts


@pytest.mark.slow
def test_the_initial_model_is_scored_first_and_stays_best_until_beaten(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    # lr 0: no evaluation beats the initial score, and none drops below the one before
    summary = train(small("simcse", max_steps=4, eval_steps=1, lr=0.0, early_stop=2, early_stop_rule="drops",
                          eval_at_start=True), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
                              RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    assert summary["steps"] == 4 and not summary["stopped_early"]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    first = next(r for r in log if "stsb_dev" in r)
    assert first["step"] == 0 and first["initial"] and [r["step"] for r in log if "stsb_dev" in r] == [0, 1, 2, 3, 4]
    assert json.loads((tmp_path / "run" / "best" / "training.json").read_text())["step"] == 0
    logged = [r for r in log if "loss" in r]
    assert logged and all(r["grad_norm"] > 0 for r in logged)  # clipped, and the norm before clipping logged


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 is refused only where it cannot run")
def test_fp16_without_a_cuda_device_is_refused_not_trained_in_fp32(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    with pytest.raises(TrainingError, match="training.mixed_precision fp16 is not available on cpu"):
        train(small("simcse", max_steps=1, mixed_precision="fp16"), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
              RunOptions(data_dir=data_dir, eval_limit=20, progress=False))


def test_a_plain_corpus_is_refused_for_a_method_that_reads_paraphrases(data_dir):
    with pytest.raises(ValueError, match="stsb-sentences is a plain corpus .* it has no negation, paraphrase column"):
        training_rows(load_method("osscse"), "stsb-sentences", data_dir)


def test_paraphrases_not_made_by_the_papers_models_are_warned_about(caplog, tmp_path):
    apertium = {"models": {"backtranslation": "apertium", "pivots": [["eng-spa", "spa-eng"]],
                           "paper_backtranslation": False}}
    paper = {"models": {"backtranslation": "hf", "paper_backtranslation": True}}
    assert warn_if_paraphrases_differ(load_method("osscse"), apertium, tmp_path)
    assert "paraphrases made by apertium (eng-spa+spa-eng), not the paper's WMT19" in caplog.text
    assert not warn_if_paraphrases_differ(load_method("osscse"), paper, tmp_path)
    assert not warn_if_paraphrases_differ(load_method("simcse"), apertium, tmp_path)  # reads no paraphrase
    int8 = {"models": {"backtranslation": "ctranslate2", "pivots": [["facebook/wmt19-en-de", "facebook/wmt19-de-en"]],
                       "paper_backtranslation": False}, "config": {"compute_type": "int8"}}
    assert warn_if_paraphrases_differ(load_method("osscse"), int8, tmp_path)
    assert "paraphrases made by ctranslate2 in int8 (facebook/wmt19-en-de+facebook/wmt19-de-en), not" in caplog.text


@pytest.mark.slow
def test_a_callback_sees_every_step_and_can_end_the_run(tiny_bert_dir, tiny_cache, tmp_path):
    seen = []

    class StopAtThree(Callback):
        def on_step(self, state, control):
            seen.append((state.step, sorted(state.losses), state.epoch))
            if state.step == 3:
                control.stop("three is enough")

    summary = train(small("simcse", max_steps=10, eval_steps=2, dev="none"), str(tiny_bert_dir), tiny_cache,
                    tmp_path / "run", RunOptions(progress=False, log_every=1, callbacks=[StopAtThree()]))
    assert summary["steps"] == 3 and summary["stopped_by"] == "StopAtThree" and not summary["stopped_early"]
    assert [step for step, _, _ in seen] == [1, 2, 3] and seen[0][1] == ["grad_norm", "info_nce", "loss"]
    assert seen[0][2] == 16 / 96  # batches of 16 over the cache's 96 rows
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    # the last step is saved although eval_steps is 2, then the stop is logged
    assert log[-2:] == [{"step": 3, "saved": "best"}, {"step": 3, "stopped_by": "StopAtThree",
                                                        "reason": "three is enough"}]
    assert json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())["step"] == 3


@pytest.mark.slow
def test_the_state_a_callback_reads_cannot_be_written(tiny_bert_dir, tiny_cache, tmp_path):
    class Writer(Callback):
        def on_step(self, state, control):
            state.losses["loss"] = 0.0

    with pytest.raises(TypeError):
        train(small("simcse", max_steps=2, eval_steps=2, dev="none"), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
              RunOptions(progress=False, callbacks=[Writer()]))


@pytest.mark.slow
def test_a_callback_asks_for_an_evaluation_and_is_told_its_score(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    scores = []

    class EvaluateAtOne(Callback):
        def on_step(self, state, control):
            control.should_evaluate |= state.step == 1

        def on_evaluate(self, state, control):
            scores.append((state.step, state.dev, state.best, state.improved))

    train(small("simcse", max_steps=2, eval_steps=2), str(tiny_bert_dir), tiny_cache, tmp_path / "run",
          RunOptions(data_dir=data_dir, eval_limit=20, progress=False, callbacks=[EvaluateAtOne()]))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    dev = {r["step"]: r["stsb_dev"] for r in log if "stsb_dev" in r}
    assert [(step, score) for step, score, _, _ in scores] == [(1, dev[1]), (2, dev[2])]
    assert scores[0][2:] == (dev[1], True) and scores[1][2] == max(dev.values())


@pytest.mark.slow
def test_a_resumed_run_goes_on_with_the_early_stop_count_it_saved(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                                  monkeypatch):
    # lr 0: the first evaluation is the best and every later one counts; killed after its save at step 2 (count 1)
    method = small("simcse", max_steps=20, eval_steps=1, lr=0.0, early_stop=3)
    save = Trainer.evaluate_and_save

    class Killed(BaseException):
        pass

    def save_then_die_at_two(self, *args):
        stopped = save(self, *args)
        if self.step == 2:
            raise Killed
        return stopped

    with monkeypatch.context() as patch, pytest.raises(Killed):
        patch.setattr(Trainer, "evaluate_and_save", save_then_die_at_two)
        train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20,
              progress=False))
    saved = json.loads((tmp_path / "run" / "last" / "trainer_state.json").read_text())
    assert saved["step"] == 2 and saved["callbacks"] == {"EarlyStop": {"count": 1, "previous": saved["best"]}}
    summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / "run", RunOptions(data_dir=data_dir,
                    eval_limit=20, progress=False))
    assert summary["steps"] == 4 and summary["stopped_by"] == "EarlyStop"  # counted on from 1, not from 0


@pytest.mark.slow
def test_runs_of_other_precisions_follow_each_other_in_one_process(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    """accelerate keeps one state per process: a bf16 run after an fp32 one (a sweep's, a notebook's) trains in
    bf16 rather than being refused."""
    for number, precision in enumerate(("no", "bf16", "no")):
        method = load_method("simcse", ["training.batch_size=16", "training.max_length=24", "training.max_steps=1",
                                        "training.eval_steps=1", f"training.mixed_precision={precision}"])
        summary = train(method, str(tiny_bert_dir), tiny_cache, tmp_path / str(number), RunOptions(data_dir=data_dir,
                        eval_limit=20, progress=False))
        assert summary["steps"] == 1


def test_run_options_are_checked_when_they_are_made():
    with pytest.raises(TrainingError, match="--restart-from 'worst': expected one of best"):
        RunOptions(restart_from="worst")
    with pytest.raises(TrainingError, match="log_every 0: expected a whole number of steps >= 1"):
        RunOptions(log_every=0)
    with pytest.raises(TrainingError, match="--eval-limit 1: expected a number of pairs >= 2"):
        RunOptions(eval_limit=1)
    options = RunOptions(report_to=["tensorboard"], callbacks=[EarlyStop(2, "drops")])
    assert options.report_to == ("tensorboard",) and options.reporting and len(options.callbacks) == 1
    assert not RunOptions().reporting
