import numpy as np
import pytest
from scipy import stats

from cselab.probes.significance import Stratum, compare, hierarchical, holm, interval, p_value, t_interval


def _correlated(n, noise, seed):
    rng = np.random.default_rng(seed)
    gold = rng.normal(size=n)
    return gold, gold + rng.normal(scale=noise, size=n)


def _agrees_with_scipy(ours, a, b, gold, seed):
    """``ours`` within a tenth of the interval's width of scipy's paired percentile bootstrap of the Spearman
    difference, at each end (both Monte Carlo, 4000 resamples)."""
    def difference(x, y, g):
        return 100 * (stats.spearmanr(y, g)[0] - stats.spearmanr(x, g)[0])

    theirs = stats.bootstrap((a, b, gold), difference, paired=True, vectorized=False, n_resamples=4000,
                             method="percentile", rng=np.random.default_rng(seed)).confidence_interval
    width = theirs.high - theirs.low
    assert abs(ours[0] - theirs.low) < 0.1 * width and abs(ours[1] - theirs.high) < 0.1 * width


def test_holm_matches_the_hand_computed_adjustment():
    # sorted .01 .03 .04 .2: x4 = .04, x3 = .09, x2 = .08 -> .09 (monotone), x1 = .2
    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_a_model_against_itself_differs_by_nothing():
    gold, sims = _correlated(300, 1.0, 0)
    result = compare([Stratum(sims, sims, gold)], scale=100)
    assert result["diff"] == 0 and result["ci"] == [0.0, 0.0] and result["p"] == 1.0
    correct = (np.arange(200) % 3 > 0).astype(float)
    assert compare([Stratum(correct, correct)])["p"] == 1.0


@pytest.mark.slow
def test_a_known_difference_is_covered_and_0_is_left_out():
    rng = np.random.default_rng(1)
    a = rng.normal(size=2000)
    b = a + 0.1 + rng.normal(scale=0.5, size=2000)  # B's mean is A's + 0.1
    result = compare([Stratum(a, b)], resamples=2000)
    assert result["ci"][0] <= 0.1 <= result["ci"][1] and result["ci"][0] > 0
    assert result["p"] < 0.01


def test_a_small_difference_within_the_noise_is_not_claimed():
    gold, a = _correlated(100, 1.0, 2)
    b = a + np.random.default_rng(3).normal(scale=0.05, size=100)
    result = compare([Stratum(a, b, gold)], scale=100)
    assert result["ci"][0] < 0 < result["ci"][1] and result["p"] > 0.05


@pytest.mark.slow
def test_the_paired_bootstrap_agrees_with_scipys_on_a_small_case():
    gold, a = _correlated(60, 1.0, 4)
    b = gold + np.random.default_rng(5).normal(scale=0.7, size=60)
    ours = interval([Stratum(a, b, gold)], scale=100, resamples=4000)
    _agrees_with_scipy(ours, a, b, gold, seed=9)


@pytest.mark.slow
def test_the_permutation_p_value_is_mcnemars_on_correctness():
    rng = np.random.default_rng(6)
    a = (rng.random(400) < 0.7).astype(float)
    b = a.copy()
    flip = rng.choice(400, 40, replace=False)
    b[flip] = 1 - b[flip]  # discordant items: those flipped
    ones, zeros = int(((a == 0) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum())
    exact = stats.binomtest(ones, ones + zeros).pvalue
    assert p_value([Stratum(a, b)], resamples=20000) == pytest.approx(exact, abs=0.03)


def test_strata_weigh_into_one_figure():
    gold1, x1 = _correlated(80, 1.0, 7)
    gold2, x2 = _correlated(50, 0.5, 8)
    result = compare([Stratum(x1, x1[::-1].copy(), gold1, 0.5), Stratum(x2, x2, gold2, 0.5)], scale=100)
    expected = 50 * (stats.spearmanr(x1, gold1)[0] + stats.spearmanr(x2, gold2)[0])
    assert result["a"] == pytest.approx(expected) and result["n"] == 130


def test_the_t_interval_over_seeds():
    low, high = t_interval([79.0, 80.0, 81.0])
    assert (low, high) == pytest.approx((80 - 4.302653 * 1 / np.sqrt(3), 80 + 4.302653 / np.sqrt(3)))
    assert t_interval([80.0]) is None


def test_the_hierarchical_bootstrap_counts_the_seeds_variance():
    gold, _ = _correlated(400, 1.0, 10)
    rng = np.random.default_rng(11)
    tasks = [slice(0, 150), slice(150, 400)]
    runs = np.stack([gold + rng.normal(scale=1.0, size=400) for _ in range(3)])
    itself = hierarchical(runs, runs, gold, tasks, resamples=500)
    assert itself["diff"] == 0 and itself["ci"][0] < 0 < itself["ci"][1] and itself["p"] == 1.0
    better = np.stack([gold + rng.normal(scale=0.6, size=400) for _ in range(3)])
    result = hierarchical(runs, better, gold, tasks, resamples=500)
    means = [100 * np.mean([stats.spearmanr(r[t], gold[t])[0] for t in tasks]) for r in (*runs, *better)]
    assert result["a"] == pytest.approx(np.mean(means[:3])) and result["b"] == pytest.approx(np.mean(means[3:]))
    assert result["ci"][0] > 0 and result["p"] < 0.01
    # seeds that disagree widen the interval beyond what the pairs alone give
    spread = runs + np.arange(3)[:, None] * np.linspace(-3, 3, 400)[None, :] ** 3
    pairs_only = hierarchical(runs[:1], better[:1], gold, tasks, resamples=500)
    with_seeds = hierarchical(spread, better, gold, tasks, resamples=500)
    assert np.diff(with_seeds["ci"]) > np.diff(pairs_only["ci"])


@pytest.mark.slow
def test_with_one_seed_each_the_hierarchical_bootstrap_is_scipys_paired_one():
    gold, a = _correlated(80, 1.0, 12)
    b = gold + np.random.default_rng(13).normal(scale=0.7, size=80)
    ours = hierarchical(a[None], b[None], gold, [slice(0, 80)], resamples=4000)["ci"]
    _agrees_with_scipy(ours, a, b, gold, seed=14)
