"""Monotonicity test (``001`` §5): weighted PAV against brute force, per-position probabilities, chi-square."""
import itertools

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from torchfair.metrics.monotonicity import isotonic_regression, monotonicity_test
from torchfair.orderings import Hard


# ----------------------------------------------------------------------------- PAV vs brute force
def brute_isotonic(y, w, increasing=True):
    """Exact: the optimum is the vector of block means of some partition into consecutive blocks; enumerate."""
    n = len(y)
    best, best_sse = None, np.inf
    for cuts in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        fit = np.empty(n)
        for a, b in zip(bounds[:-1], bounds[1:]):
            fit[a:b] = np.dot(w[a:b], y[a:b]) / w[a:b].sum()
        d = np.diff(fit)
        if (increasing and (d < -1e-12).any()) or (not increasing and (d > 1e-12).any()):
            continue
        sse = float(np.dot(w, (y - fit) ** 2))
        if sse < best_sse - 1e-12:
            best, best_sse = fit, sse
    return best


@pytest.mark.parametrize("seed", range(25))
def test_pav_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    y = rng.integers(0, 4, n).astype(float) if seed % 3 == 0 else rng.normal(size=n)  # ties on some seeds
    w = rng.uniform(0.1, 3.0, n)
    for inc in (True, False):
        got = isotonic_regression(torch.tensor(y), torch.tensor(w), increasing=inc).numpy()
        np.testing.assert_allclose(got, brute_isotonic(y, w, inc), atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_pav_matches_quadratic_program(seed):
    rng = np.random.default_rng(100 + seed)
    y, w = rng.normal(size=6), rng.uniform(0.5, 2.0, 6)
    cons = [{"type": "ineq", "fun": (lambda x, i=i: x[i + 1] - x[i])} for i in range(5)]
    res = optimize.minimize(lambda x: np.dot(w, (y - x) ** 2), np.zeros(6), constraints=cons, method="SLSQP",
                            options={"ftol": 1e-14, "maxiter": 500})
    np.testing.assert_allclose(isotonic_regression(torch.tensor(y), torch.tensor(w)).numpy(), res.x, atol=1e-5)


def test_pav_closed_forms():
    y = torch.tensor([0.1, 0.2, 0.2, 0.9])
    torch.testing.assert_close(isotonic_regression(y), y)  # already monotone: identity
    torch.testing.assert_close(isotonic_regression(y, increasing=False), torch.full((4,), y.mean()))
    # two violators pool to their weighted mean: (3*1 + 1*0) / 4
    torch.testing.assert_close(isotonic_regression(torch.tensor([1.0, 0.0]), torch.tensor([3.0, 1.0])),
                               torch.tensor([0.75, 0.75]))
    assert isotonic_regression(torch.tensor([2, 1])).dtype == torch.float32


# ----------------------------------------------------------------------------- per-position probabilities
def ref_probabilities(scores, groups, mask, protected):
    """Count, for every position of every (stably sorted) ranking, whether a protected item sits there."""
    N = scores.shape[1]
    prot, cnt = [0.0] * N, [0.0] * N
    for s, g, m in zip(scores.tolist(), groups.tolist(), mask.tolist()):
        real = [i for i in range(N) if m[i]]
        for k, i in enumerate(sorted(real, key=lambda i: -s[i])):
            if g[i] < 0:
                continue
            cnt[k] += 1
            prot[k] += g[i] == protected
    return [p / c if c else 0.0 for p, c in zip(prot, cnt)], cnt


def ref_chi2(p, n, m):
    t = 0.0
    for pk, nk, mk in zip(p, n, m):
        if nk > 0 and 0 < mk < 1:
            t += (nk * pk - nk * mk) ** 2 / (nk * mk) + (nk * (1 - pk) - nk * (1 - mk)) ** 2 / (nk * (1 - mk))
    return t


@pytest.mark.parametrize("seed", range(4))
def test_probabilities_and_statistic_vs_loops(seed):
    g = torch.Generator().manual_seed(seed)
    B, N = 30, 8
    s = torch.rand(B, N, generator=g)
    grp = torch.randint(-1, 2, (B, N), generator=g)
    mask = torch.rand(B, N, generator=g) > 0.15
    t = monotonicity_test(s, grp, mask=mask)
    p, n = ref_probabilities(s, grp, mask, 1)
    torch.testing.assert_close(t.probabilities, torch.tensor(p))
    torch.testing.assert_close(t.counts, torch.tensor(n))
    obs = [k for k in range(N) if n[k] > 0]
    m = t.fitted.double().numpy()
    # the kept curve is the PAV fit of the chosen direction, monotone
    d = np.diff(m[obs])
    assert (d >= -1e-6).all() or (d <= 1e-6).all()
    fit = isotonic_regression(torch.tensor([p[k] for k in obs], dtype=torch.float64),
                              torch.tensor([n[k] for k in obs], dtype=torch.float64),
                              increasing=t.direction != "decreasing").numpy()
    np.testing.assert_allclose(m[obs], fit, atol=1e-6)
    stat = ref_chi2([p[k] for k in obs], [n[k] for k in obs], m[obs])
    assert abs(t.statistic.item() - stat) < 1e-3 * max(1.0, stat)
    # same statistic as scipy's Pearson test on the 2 x K table of counts
    f_obs = [n[k] * p[k] for k in obs] + [n[k] * (1 - p[k]) for k in obs]
    f_exp = [n[k] * m[k] for k in obs] + [n[k] * (1 - m[k]) for k in obs]
    keep = [i for i, e in enumerate(f_exp) if e > 1e-9]
    sp = stats.chisquare([f_obs[i] for i in keep], [f_exp[i] for i in keep])
    assert abs(sp.statistic - t.statistic.item()) < 1e-3 * max(1.0, stat)
    levels = len(set(np.round(m[obs], 6)))
    assert t.dof == len(obs) - levels
    if t.dof > 0:
        assert abs(t.p_value.item() - stats.chi2.sf(t.statistic.item(), t.dof)) < 1e-5


def test_hand_worked_example():
    # positions hold protected items with frequency 0, 1/2, 1/2, 1: already increasing
    s = torch.tensor([[4.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0]])
    t = monotonicity_test(s, torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]]))
    torch.testing.assert_close(t.probabilities, torch.tensor([0.0, 0.5, 0.5, 1.0]))
    assert t.direction == "increasing" and t.statistic.item() == 0 and t.dof == 1 and t.p_value.item() == 1.0
    # 4 rankings, protected frequency per position 3/4, 1/4, 3/4, 1/4 -> decreasing fit 3/4, 1/2, 1/2, 1/4
    grp = torch.tensor([[1, 0, 1, 0], [1, 0, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1]])
    t = monotonicity_test(s[:1].expand(4, 4), grp)
    torch.testing.assert_close(t.fitted, torch.tensor([0.75, 0.5, 0.5, 0.25]))
    # chi2 = 4 (1/4)^2 / (1/4) * 2 = 2 from the pooled positions; dof = 4 - 3
    torch.testing.assert_close(t.statistic, torch.tensor(2.0))
    assert t.direction == "decreasing" and t.dof == 1
    torch.testing.assert_close(t.p_value, torch.tensor(stats.chi2.sf(2.0, 1), dtype=torch.float32))


def test_directions_and_power():
    gen = torch.Generator().manual_seed(0)
    B, N = 400, 10
    grp = torch.randint(0, 2, (B, N), generator=gen)
    noise = torch.rand(B, N, generator=gen)
    adv = monotonicity_test(noise + 0.8 * grp, grp)  # protected pushed up: decreasing probability
    assert adv.direction == "decreasing" and adv.p_value > 0.01
    dis = monotonicity_test(noise - 0.8 * grp, grp)
    assert dis.direction == "increasing" and dis.p_value > 0.01
    # protected items clustered in the middle of the ranking: not monotone, rejected
    mid_scores = torch.where(grp.bool(), 0.5 + 0.1 * noise, torch.where(noise > 0.5, noise + 1.0, noise - 1.0))
    t = monotonicity_test(mid_scores, grp)
    assert t.p_value < 1e-6
    # uniformly random rankings: typically compatible with monotone (constant) behaviour
    fair = monotonicity_test(noise, grp)
    assert fair.p_value > 0.001


def test_stochastic_ordering_uses_position_matrix():
    # all scores tied: under Hard(ties="average") every position holds each item with prob 1/N
    s = torch.zeros(3, 4)
    grp = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    t = monotonicity_test(s, grp, ordering=Hard(ties="average"))
    torch.testing.assert_close(t.probabilities, torch.full((4,), 0.5))
    torch.testing.assert_close(t.counts, torch.full((4,), 3.0))
    assert t.direction == "constant" and t.statistic.item() == 0 and t.p_value.item() == 1.0
    # with Hard() (first index wins ties) the protected items are on top
    assert monotonicity_test(s, grp).direction == "decreasing"


def test_k_restricts_positions():
    s = torch.tensor([[4.0, 3.0, 2.0, 1.0]] * 2)
    g = torch.tensor([[1, 0, 1, 0], [1, 1, 0, 1]])
    t = monotonicity_test(s, g, k=2)
    assert t.observed.tolist() == [True, True, False, False]
    torch.testing.assert_close(t.probabilities, torch.tensor([1.0, 0.5, 0.0, 0.0]))
    with pytest.warns(FutureWarning, match="`k`"):  # `top` is the deprecated name of `k`
        t2 = monotonicity_test(s, g, top=2)
    torch.testing.assert_close(t2.probabilities, t.probabilities)


@pytest.mark.parametrize("kw,match", [(dict(protected=-1), "protected"), (dict(protected=5, num_groups=2), "protected"),
                                      (dict(k=0), "`k`"), (dict(k=2.0), "`k`"), (dict(protected=1.5), "protected"),
                                      (dict(protected=True), "protected"), (dict(mask=torch.zeros(2, 3, dtype=torch.bool)), "mask"),
                                      (dict(ordering=3), "ordering")])
def test_value_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        monotonicity_test(torch.rand(2, 3), torch.tensor([[0, 1, 0], [1, 1, 0]]), **kw)


def test_value_errors_isotonic_and_unknown_only():
    with pytest.raises(ValueError, match="`y`"):
        isotonic_regression(torch.ones(2, 2))
    with pytest.raises(ValueError, match="weights"):
        isotonic_regression(torch.ones(3), torch.tensor([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="`y`"):
        isotonic_regression(torch.tensor([1.0, float("inf")]))
    with pytest.raises(ValueError, match="`increasing`"):
        isotonic_regression(torch.ones(3), increasing="no")
    with pytest.raises(ValueError, match="known group"):
        monotonicity_test(torch.rand(1, 3), torch.tensor([[-1, -1, -1]]), num_groups=2)


def test_soft_protected_beyond_G_is_refused():
    """Soft ``[B, N, G]`` groups declare G: ``protected >= G`` is a ValueError naming ``protected`` (issue 28); the
    last group gives the same test as the one-hot ids."""
    s = torch.tensor([[4., 3., 2., 1.], [4., 3., 2., 1.]])
    ids = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]])
    soft = torch.nn.functional.one_hot(ids, 2).float()
    with pytest.raises(ValueError, match="`protected`"):
        monotonicity_test(s, soft, protected=2)
    got, want = monotonicity_test(s, soft, protected=1), monotonicity_test(s, ids, protected=1)
    torch.testing.assert_close(got.probabilities, want.probabilities)
    torch.testing.assert_close(got.probabilities, torch.tensor([0.0, 0.5, 0.5, 1.0]))  # hand count, as the docstring
    assert got.direction == want.direction == "increasing"
