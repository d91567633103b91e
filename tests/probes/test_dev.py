import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from cselab.data import DataNotFoundError, load_sts
from cselab.data.transfer import TRANSFER_TASKS
from cselab.encoders import LexicalEncoder, load_encoder
from cselab.errors import ConfigError
from cselab.probes.dev import DevSet, dev_names, dev_set, dev_suites, log_key
from cselab.probes.transfer import run_transfer
from cselab.train.config.methods import load_method
from cselab.train.run.options import RunOptions
from cselab.train.recipe import train

SETTINGS = ["training.batch_size=16", "training.max_length=24", "training.max_steps=2", "training.eval_steps=2"]


def _cosine_spearman(encoder, pairs, limit):
    a, b = encoder.encode(pairs.sentences1[:limit]), encoder.encode(pairs.sentences2[:limit])
    cosines = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return 100 * spearmanr(cosines, pairs.scores[:limit]).statistic


def dev_scorer(name, data_dir=None, limit=None) -> DevSet:
    found = dev_set(name, data_dir, limit)
    assert found is not None
    return found


def test_the_dev_sets_score_stsb_and_sickr_dev_and_their_mean(data_dir, tiny_bert_dir):
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", cache=False)
    (stsb,), (sickr,) = load_sts("stsb", "dev", data_dir), load_sts("sickr", "trial", data_dir)
    expected = {"stsb": _cosine_spearman(encoder, stsb, 40), "sickr": _cosine_spearman(encoder, sickr, 40)}
    for name, value in expected.items():
        assert dev_scorer(name, data_dir, 40).run(encoder).headline == pytest.approx(value, rel=1e-6)
    average = dev_scorer("sts-dev-avg", data_dir, 40).run(encoder)
    assert average.headline == pytest.approx((expected["stsb"] + expected["sickr"]) / 2, rel=1e-6)
    assert list(average.scores) == ["STS-B", "SICK-R", "avg"] and len(average.files) == 2
    assert dev_set("none") is None
    assert dev_names() == ("cr", "mpqa", "mr", "mrpc", "sickr", "sst2", "sts-dev-avg", "stsb", "subj",
                           "transfer-dev-avg", "trec", "none")  # the named sets, then none
    assert dev_suites() == ["sts", "transfer"]
    assert [log_key(name) for name in ("stsb", "sickr", "sts-dev-avg", "mr", "transfer-dev-avg")] == [
        "stsb_dev", "sickr_dev", "sts_dev_avg", "mr_dev", "transfer_dev_avg"]


@pytest.mark.slow
def test_a_transfer_dev_set_is_sentevals_devacc_without_the_test_split(data_dir):
    encoder = LexicalEncoder()
    full, _ = run_transfer(encoder, TRANSFER_TASKS, data_dir, "fast", limit=40)
    average = dev_scorer("transfer-dev-avg", data_dir, 40).run(encoder)
    assert {task: average.scores[task]["devacc"] for task in TRANSFER_TASKS} == {
        task: full[task]["devacc"] for task in TRANSFER_TASKS}
    assert average.metadata["split"] == "dev" and "n_test" not in average.scores["SST2"]
    assert average.headline == pytest.approx(np.mean([full[task]["devacc"] for task in TRANSFER_TASKS]))
    assert dev_scorer("trec", data_dir, 40).run(encoder).headline == full["TREC"]["devacc"]
    read = {path.name for path in average.files}
    assert "rt-polarity.pos" in read and not read & {"sentiment-test", "TREC_10.label", "msr_paraphrase_test.txt"}
    assert dev_scorer("mrpc", data_dir, 40).identity()["settings"]["classifier"] == "fast"
    with pytest.raises(ConfigError, match="--eval-limit 5: a transfer dev score needs at least 10 pairs or lines per "
                                          "file"):
        dev_scorer("mr", data_dir, 5)


def test_an_unknown_dev_set_is_refused_when_the_method_is_read():
    with pytest.raises(ConfigError, match=r"training.dev: 'sts' is not allowed \(did you mean 'stsb'\?\); expected "
                                          "one of cr, mpqa, .*, sts-dev-avg, stsb, subj, transfer-dev-avg, trec, none, "
                                          "or a mapping"):
        load_method("simcse", ["training.dev=sts"])


@pytest.mark.parametrize("value, message", [
    ("{suite: geometry}", "training.dev.suite: 'geometry' is not a suite that scores a dev split; those that do: "
                          "sts, transfer"),
    ("{suite: sts, split: test}", "training.dev.split: 'test': a run selects its checkpoint on dev data"),
    ("{suite: sts, tasks: [sts12]}", None),  # checked when its data is read: STS12 has no dev split
    ("{suite: sts, taks: [stsb]}", r"training.dev.taks: unknown key \(did you mean 'tasks'\?\)"),
    ("{suite: transfer, classifier: slow}", "training.dev.classifier: 'slow' is not allowed"),
    ("{tasks: [stsb]}", "expected a dev set's name or a mapping with suite: NAME")])
def test_a_dev_set_given_as_a_suite_is_checked_when_the_method_is_read(value, message):
    if message is None:
        load_method("simcse", [f"training.dev={value}"])
        return
    with pytest.raises(ConfigError, match=message):
        load_method("simcse", [f"training.dev={value}"])


def test_a_suite_on_its_dev_split_is_the_named_dev_set(data_dir, tiny_bert_dir):
    """{suite: sts, tasks: [stsb]} scores what stsb scores; the same suite run by probe run on split dev too."""
    from cselab.probes.runner import run_probes
    from cselab.probes.suite import ProbeOptions

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", cache=False)
    named = dev_scorer("stsb", data_dir, 40)
    mapping = dev_scorer({"suite": "sts", "tasks": ["stsb"]}, data_dir, 40)
    assert mapping.score(encoder) == named.score(encoder)
    assert log_key({"suite": "sts", "tasks": ["stsb"]}) == "sts_dev"
    assert mapping.identity()["sha256"] == named.identity()["sha256"]
    payload = run_probes(encoder, "sts", ProbeOptions(data_dir=data_dir, limit=40, batch_size=128,
                                                      settings={"tasks": ["stsb"], "split": "dev"}), progress=False)
    assert payload["sts"]["avg"] == named.score(encoder) and payload["sts"]["split"] == "dev"
    with pytest.raises(ConfigError, match="split dev: the STS task sts12 has no dev split; the tasks with one: stsb, "
                                          "sickr"):
        dev_scorer({"suite": "sts", "tasks": ["sts12"]}, data_dir, 40).run(encoder)


@pytest.mark.parametrize("name", ["stsb", "transfer-dev-avg"])
def test_a_dev_set_reads_its_data_when_first_used_not_when_made(tmp_path, name):
    scorer = dev_scorer(name, tmp_path / "no-data-here", 40)  # built by the training setup, which reads no file
    with pytest.raises(DataNotFoundError, match="no-data-here"):
        scorer.identity()


@pytest.mark.slow
def test_training_keeps_the_checkpoint_best_on_sickr_dev(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    summary = train(load_method("simcse", [*SETTINGS, "training.dev=sickr"]), str(tiny_bert_dir), tiny_cache,
                    tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    scored = [record for record in log if "sickr_dev" in record]
    assert [r["step"] for r in scored] == [2] and summary["dev"] == "sickr"
    assert summary["best_dev"] == scored[0]["best"] == scored[0]["sickr_dev"]
    best = load_encoder(summary["best"], device="cpu", cache=False)
    assert dev_scorer("sickr", data_dir, 20).run(best).headline == pytest.approx(summary["best_dev"], abs=1e-4)
    identity = json.loads((tmp_path / "run" / "run.json").read_text())
    assert identity["dev"]["set"] == "sickr" and identity["dev"]["limit"] == 20
    assert identity["dev"]["settings"] == {"tasks": ["sickr"], "split": "dev"}


@pytest.mark.slow
def test_training_can_keep_the_checkpoint_best_on_the_transfer_dev_average(tiny_bert_dir, tiny_cache, data_dir,
                                                                           tmp_path):
    summary = train(load_method("simcse", [*SETTINGS, "training.dev=transfer-dev-avg"]), str(tiny_bert_dir), tiny_cache,
                    tmp_path / "run", RunOptions(data_dir=data_dir, eval_limit=20, progress=False))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    (scored,) = [record for record in log if "transfer_dev_avg" in record]
    assert summary["best_dev"] == scored["transfer_dev_avg"]
    best = load_encoder(summary["best"], device="cpu", cache=False)
    assert dev_scorer("transfer-dev-avg", data_dir, 20).run(best).headline == pytest.approx(summary["best_dev"],
                                                                                          abs=0.01)
    identity = json.loads((tmp_path / "run" / "run.json").read_text())["dev"]
    assert identity["set"] == "transfer-dev-avg" and identity["settings"]["classifier"] == "fast"
    assert identity["limit"] == 20
