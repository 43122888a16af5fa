"""Exact intervals for accuracy deltas: Clopper-Pearson against tabulated values, the rule of three, and the
case the bootstrap gets wrong (no question changed -> a zero-width interval read as certainty)."""
import numpy as np
import pytest

from fp8lab import stats


# Clopper-Pearson 95 % intervals as tabulated (e.g. Clopper & Pearson 1934; Hollander & Wolfe's tables),
# to 4 decimals: (k, n) -> (lower, upper)
@pytest.mark.parametrize("k,n,lo,hi", [
    (0, 10, 0.0, 0.3085),
    (1, 10, 0.0025, 0.4450),
    (5, 10, 0.1871, 0.8129),
    (10, 10, 0.6915, 1.0),
    (3, 20, 0.0321, 0.3789),
    (0, 40, 0.0, 0.0881),
])
def test_clopper_pearson_matches_tabulated_values(k, n, lo, hi):
    got = stats.clopper_pearson(k, n)
    assert got == pytest.approx((lo, hi), abs=6e-5)


def test_clopper_pearson_refuses_impossible_counts():
    for k, n in ((3, 2), (-1, 5), (0, 0)):
        with pytest.raises(ValueError):
            stats.clopper_pearson(k, n)


def test_rule_of_three_is_the_exact_zero_event_bound():
    assert stats.rule_of_three(40) == pytest.approx(1 - 0.05 ** (1 / 40))
    assert stats.rule_of_three(40) == pytest.approx(3 / 40, rel=0.05)            # the rule's name
    assert stats.rule_of_three(1000) == pytest.approx(3 / 1000, rel=0.01)
    # the one-sided 95 % Clopper-Pearson upper bound for 0 of n (= the two-sided 90 % one)
    assert stats.rule_of_three(40) == pytest.approx(stats.clopper_pearson(0, 40, level=0.90)[1])


def test_no_question_changed_gives_an_honest_interval_not_a_point():
    a = np.array([1, 1, 0, 1] * 10, float)               # 40 questions, recipe == baseline on every one
    d, lo, hi = stats.delta_with_ci(stats.acc_delta_pp, (a, a))
    assert (d, lo, hi) == (0.0, 0.0, 0.0)                # the bootstrap collapses to a point...
    r = stats.acc_delta_with_ci(a, a)
    assert r.delta == 0.0 and r.changed == 0 and "rule of three" in r.method
    assert r.low == pytest.approx(-100 * stats.rule_of_three(40)) and r.high == pytest.approx(7.2158, abs=1e-3)


def test_few_changes_use_clopper_pearson_on_improved_and_worsened():
    b = np.zeros(40)
    b[:24] = 1
    r_ = b.copy()
    r_[0] = 0                                            # one question worsened
    r_[30] = r_[31] = 1                                  # two improved
    r = stats.acc_delta_with_ci(r_, b)
    assert (r.changed, r.improved, r.worsened, r.n) == (3, 2, 1, 40)
    assert r.delta == pytest.approx(2.5)
    u = stats.clopper_pearson(2, 40, 0.975)
    w = stats.clopper_pearson(1, 40, 0.975)
    assert r.low == pytest.approx((u[0] - w[1]) * 100) and r.high == pytest.approx((u[1] - w[0]) * 100)
    assert r.low < 0 < r.high and "Clopper-Pearson" in r.method


def test_many_changes_use_the_bootstrap_and_report_the_count():
    rng = np.random.default_rng(0)
    b = (rng.random(400) < 0.5).astype(float)
    r_ = b.copy()
    flip = rng.choice(400, 40, replace=False)
    r_[flip] = 1 - r_[flip]
    r = stats.acc_delta_with_ci(r_, b)
    assert r.method == "paired bootstrap" and r.changed == 40
    assert (r.delta, r.low, r.high) == stats.delta_with_ci(stats.acc_delta_pp, (r_, b))


def test_exact_interval_covers_the_true_delta_at_least_95_percent():
    """Simulated: 40 questions, 3 % improve and 1 % worsen (true delta +2 points); few changes per run."""
    rng = np.random.default_rng(1)
    n, p_up, p_down, covered, runs = 40, 0.03, 0.01, 0, 600
    for _ in range(runs):
        u = rng.random(n)
        b = np.zeros(n)
        r = np.zeros(n)
        r[u < p_up] = 1                                   # improved: recipe right, baseline wrong
        b[(u >= p_up) & (u < p_up + p_down)] = 1          # worsened: baseline right, recipe wrong
        res = stats.exact_acc_delta(r, b)
        covered += res.low <= 2.0 <= res.high
    assert covered / runs >= 0.95


def test_exact_interval_refuses_non_binary_or_unpaired_input():
    with pytest.raises(ValueError, match="0/1"):
        stats.exact_acc_delta([0.5, 1], [1, 0])
    with pytest.raises(ValueError, match="equal-length"):
        stats.exact_acc_delta([1, 0, 1], [1, 0])


def test_one_unit_is_too_few_for_a_bootstrap_interval():
    with pytest.raises(ValueError, match="too few"):
        stats.paired_bootstrap_ci(stats.acc_delta_pp, (np.ones(1), np.zeros(1)))


def test_median_interval_is_the_order_statistic_interval():
    """[x_(k), x_(n+1-k)] covers the median with probability 1 - 2 P(Bin(n, 1/2) <= k - 1): the textbook k for n = 20
    at 95 % is 6 (x_6 .. x_15, 95.9 %); six runs give [min, max] at 96.9 %; two runs [min, max] at 50 %."""
    from fp8lab.stats import median_interval

    assert median_interval(list(range(1, 21))) == (6.0, 15.0, pytest.approx(0.958610534))
    assert median_interval([3, 1, 2, 5, 4, 6]) == (1.0, 6.0, 0.96875)
    assert median_interval([2.0, 1.0]) == (1.0, 2.0, 0.5) and median_interval([7]) == (7.0, 7.0, 0.0)
    lo, hi, cov = median_interval(list(range(1, 101)), level=0.99)
    assert cov >= 0.99 and (lo, hi) == (37.0, 64.0)
    rng = np.random.default_rng(0)   # the coverage holds for a skewed distribution too (median of Exp(1) = ln 2)
    hits = sum(lo <= np.log(2) <= hi for lo, hi, _ in (median_interval(rng.exponential(size=9)) for _ in range(4000)))
    assert 0.95 <= hits / 4000 <= 0.99   # n = 9: [x_2, x_8], exact coverage 96.1 %
    with pytest.raises(ValueError):
        median_interval([])
