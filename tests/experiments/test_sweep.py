import json

import numpy as np
import pytest
from scipy import stats

from cselab.cli import main
from cselab.errors import ConfigError
from cselab.experiments.sweep import SweepSpec, parse_seeds, run_sweep, summarize


@pytest.mark.slow
def test_sweep_runs_every_seed_resumes_and_reports_mean_and_std(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                                capsys):
    settings = ["training.batch_size=16", "training.max_length=24", "training.max_steps=2", "training.eval_steps=2"]
    spec = SweepSpec(("simcse", "noise-neg"), (0, 1), tmp_path / "sweep", str(tiny_bert_dir), data=tiny_cache,
                     overrides=settings, data_dir=data_dir, eval_limit=20, sts_limit=20)
    summary = run_sweep(spec, progress=False)
    assert [row["label"] for row in summary["rows"]] == ["simcse", "noise-neg"]
    assert all(row["seeds"] == [0, 1] for row in summary["rows"])
    simcse = [r["scores"]["avg"] for r in summary["runs"] if r["method"] == "simcse"]
    assert summary["rows"][0]["avg"]["mean"] == pytest.approx(np.mean(simcse))
    assert summary["rows"][0]["avg"]["std"] == pytest.approx(np.std(simcse, ddof=1))
    assert simcse[0] != simcse[1]  # the seed changes the run
    half = stats.t.ppf(0.975, 1) * np.std(simcse, ddof=1) / np.sqrt(2)
    assert summary["rows"][0]["avg"]["ci95"] == pytest.approx([np.mean(simcse) - half, np.mean(simcse) + half])
    (row,) = summary["comparison"]["rows"]  # noise-neg against simcse, over both seeds and the pairs
    noise = [r["scores"]["avg"] for r in summary["runs"] if r["method"] == "noise-neg"]
    assert row["label"] == "noise-neg" and row["seeds"] == [2, 2]
    assert row["a"] == pytest.approx(np.mean(simcse)) and row["b"] == pytest.approx(np.mean(noise))
    assert row["ci"][0] <= row["diff"] <= row["ci"][1] and 0 < row["p"] <= 1 and row["p_holm"] == row["p"]
    assert not row["holds"]  # two seeds a side: too few to say a difference holds, whatever the interval
    assert "hierarchical bootstrap" in (tmp_path / "sweep" / "summary.md").read_text()
    assert "Fewer than 3 seeds on a side (noise-neg)" in (tmp_path / "sweep" / "summary.md").read_text()
    for name in ("summary.json", "summary.md", "summary.png"):
        assert (tmp_path / "sweep" / name).exists()
    # started again: every run is scored already, nothing trains
    (tmp_path / "sweep" / "runs").rename(tmp_path / "moved")
    again = run_sweep(spec, progress=False)
    assert again["rows"] == summary["rows"] and not (tmp_path / "sweep" / "runs").exists()
    assert summarize(summary["runs"]) == summary["rows"]


@pytest.mark.slow
def test_sweep_over_devices_shares_the_runs_between_workers(tiny_bert_dir, tiny_cache, data_dir, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("CSELAB_CACHE_DIR", str(tmp_path / "embeddings"))  # the workers' processes inherit it
    arguments = ["sweep", "--methods", "simcse", "--seeds", "0,1", "--model", str(tiny_bert_dir),
                 "--data", str(tiny_cache), "--data-dir", str(data_dir), "--eval-limit", "20",
                 "--set", "training.batch_size=16", "--set", "training.max_length=24", "--set", "training.max_steps=1",
                 "--set", "training.eval_steps=1", "--sts-limit", "20", "--out", str(tmp_path / "sweep"),
                 "--devices", "0,1", "--no-cache"]
    assert main(arguments) == 0  # on CPU the device ids change nothing; the two workers split the runs
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    assert [r["seed"] for r in summary["runs"]] == [0, 1] and summary["rows"][0]["seeds"] == [0, 1]
    assert not (tmp_path / "embeddings").exists()  # --no-cache: no vector kept


def test_seeds_are_a_count_a_list_or_a_papers_named_set():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("5,7") == [5, 7]
    assert parse_seeds("thesis") == [19984, 5838, 16822, 19294, 17173]
    assert parse_seeds("sg-opt") == [1, 2, 3, 4, 1234, 2345, 3456, 7890]
    with pytest.raises(ValueError, match="no seed to run"):
        parse_seeds("0")
    with pytest.raises(ValueError, match="expected a number N, a comma-separated list of seeds, or one of thesis"):
        parse_seeds("five")


@pytest.mark.slow
def test_a_grid_sweep_with_a_profile_scores_the_bias_suite(tiny_bert_dir, tiny_cache, data_dir, tmp_path):
    """The mechanism check's path: OssCSE's margin weight on a grid, the minilm profile, bias figures per run."""
    settings = ["training.batch_size=16", "training.max_length=24", "training.max_steps=1", "training.eval_steps=1"]
    spec = SweepSpec(("osscse",), (0,), tmp_path / "sweep", str(tiny_bert_dir),
                     grid=("losses.two_way_margin.weight=0,0.1",), data=tiny_cache, overrides=settings,
                     data_dir=data_dir, eval_limit=20, sts_limit=20, profile="minilm", suites=("sts", "bias"))
    summary = run_sweep(spec, progress=False)
    assert [row["label"] for row in summary["rows"]] == ["osscse[losses.two_way_margin.weight=0]",
                                                         "osscse[losses.two_way_margin.weight=0.1]"]
    for run in summary["runs"]:
        assert {"cont", "oppn", "gap", "para_over_neg", "cannot_cosine"} <= set(run["scores"])
        assert run["columns"]["cannot_cosine"] == {"suite": "bias", "label": "CANNOT cos.", "digits": 3, "main": True}
        assert run["scores"]["gap"] == pytest.approx(run["scores"]["cont"] - run["scores"]["oppn"])
    header = next(line for line in (tmp_path / "sweep" / "summary.md").read_text().splitlines()
                  if line.startswith("| Method"))
    assert "para_over_neg" in header and "cannot_cosine" in header
    assert (tmp_path / "sweep" / "summary-main.png").read_bytes()[:4] == b"\x89PNG"
    for info in (tmp_path / "sweep" / "runs").glob("*/best/cselab.json"):
        assert json.loads(info.read_text())["pooler"] == "avg" and json.loads(info.read_text())["prompt"] is None


def test_suites_a_sweep_cannot_score_are_refused_before_any_run(tmp_path):
    spec = SweepSpec(("simcse",), (0,), tmp_path / "sweep", "minilm", suites=("sts", "mteb"))
    with pytest.raises(ConfigError, match="mteb needs options of its own that a sweep does not carry"):
        spec.scoring_suites()
    with pytest.raises(ConfigError, match="a sweep scores the sts suite too"):
        SweepSpec(("simcse",), (0,), tmp_path / "sweep", "minilm", suites=("bias",)).scoring_suites()
