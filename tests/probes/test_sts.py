import numpy as np
import pytest

from cselab.data import STSPairs
from cselab.encoders import LexicalEncoder
from cselab.metrics import spearman
from cselab.probes import run_sts
from cselab.probes.sts import score_task


def test_score_task_pools_and_averages_subsets():
    a = STSPairs("T", "a", ["x"] * 4, ["y"] * 4, np.array([1.0, 2.0, 3.0, 4.0]))
    b = STSPairs("T", "b", ["x"] * 2, ["y"] * 2, np.array([1.0, 5.0]))
    sims = [np.array([0.1, 0.2, 0.4, 0.3]), np.array([0.9, 0.1])]
    result = score_task([a, b], sims)
    assert result["subsets"]["a"] == {"spearman": pytest.approx(80.0), "pearson": pytest.approx(
        100 * np.corrcoef(sims[0], a.scores)[0, 1], abs=1e-3), "n": 4}
    assert result["subsets"]["b"]["spearman"] == pytest.approx(-100.0)
    assert result["mean"] == pytest.approx((80 - 100) / 2)
    assert result["wmean"] == pytest.approx((80 * 4 - 100 * 2) / 6)
    pooled = spearman(np.concatenate(sims), np.concatenate([a.scores, b.scores]))
    assert result["all"] == pytest.approx(100 * pooled, abs=1e-4)
    assert result["n"] == 6


def test_run_sts_on_real_data_subset(data_dir):
    scores, files = run_sts(LexicalEncoder(), ["sts12", "sickr"], data_dir=data_dir, limit=30)
    assert list(scores) == ["STS12", "SICK-R", "avg"]
    assert scores["STS12"]["n"] == 5 * 30 and len(scores["STS12"]["subsets"]) == 5
    assert scores["avg"] == pytest.approx((scores["STS12"]["all"] + scores["SICK-R"]["all"]) / 2, abs=1e-3)
    assert 0 < scores["SICK-R"]["all"] < 100
    assert len(files) == 11  # five input/gold pairs and one SICK file
