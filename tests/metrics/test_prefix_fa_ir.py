"""torchfair.metrics.prefix: FA*IR's ranked group fairness test (Zehlike et al., CIKM 2017) -- ``fa_ir_mtable``,
``fa_ir_adjusted_alpha`` and ``fa_ir_test`` against the binomial loops of tests/references/rerank_reference.py, the
paper's table, scipy's quantile and the enumeration of every 0/1 sequence.  (The prefix measure ``fair`` is in
test_prefix.py; the FA*IR re-ranker in tests/rerank/test_fa_ir.py.)
"""
import itertools
import math

import pytest
import torch
from hypothesis import given, strategies as st

import rerank_reference as R
from rerank_cases import SETTINGS, _batch, _real
from torchfair.metrics import FaIrTest, fa_ir_adjusted_alpha, fa_ir_mtable, fa_ir_test


def _binom_cdf(m, k, p):
    return sum(math.comb(k, j) * p ** j * (1 - p) ** (k - j) for j in range(0, m + 1))


def test_mtable_against_the_binomial_by_hand_and_the_paper():
    assert fa_ir_mtable(10, 0.5, 0.1, adjust=False).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]  # Zehlike et al. Table
    for p, a in ((0.3, 0.1), (0.7, 0.05)):
        ref = [next(m for m in range(k + 1) if _binom_cdf(m, k, p) > a) for k in range(1, 31)]
        assert fa_ir_mtable(30, p, a, adjust=False).tolist() == ref


def test_adjusted_alpha_by_enumeration_on_the_papers_setting():
    from torchfair.metrics import fa_ir_adjusted_alpha
    k, p, alpha = 10, 0.5, 0.1
    ac = fa_ir_adjusted_alpha(k, p, alpha)

    def fail_prob(a):
        m = fa_ir_mtable(k, p, a, adjust=False).tolist()
        tot = 0.0
        for seq in itertools.product((0, 1), repeat=k):
            c, ok = 0, True
            for i, x in enumerate(seq):
                c += x
                ok &= c >= m[i]
            if not ok:
                tot += p ** sum(seq) * (1 - p) ** (k - sum(seq))
        return tot

    assert ac < alpha and fail_prob(ac) <= alpha + 1e-12
    assert fail_prob(min(alpha, ac * 1.05)) > alpha or fail_prob(alpha) <= alpha  # the largest such alpha_c


def test_mtable_is_the_papers_table():
    # Zehlike et al., CIKM 2017, Table 1, p = 0.5, alpha = 0.1
    assert fa_ir_mtable(10, 0.5, 0.1, adjust=False).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert R.mtable(10, 0.5, 0.1) == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]  # the reference agrees with the paper too
    m = fa_ir_mtable(7, 0.3, 0.1)
    assert m.dtype == torch.long and m.shape == (7,) and m.device.type == "cpu"


@SETTINGS
@given(k=st.integers(1, 40), p=st.floats(0.02, 0.98), alpha=st.floats(0.005, 0.5))
def test_mtable_unadjusted_is_the_binomial_quantile(k, p, alpha):
    assert fa_ir_mtable(k, p, alpha, adjust=False).tolist() == R.mtable(k, p, alpha)


@pytest.mark.parametrize("p, alpha", [(0.3, 0.1), (0.7, 0.05), (0.45, 0.2), (0.1, 0.01)])
def test_mtable_against_scipy_ppf(p, alpha):
    """At an alpha that is no CDF value, m(i) = min{m : cdf > alpha} = binom.ppf(alpha; i, p) (scipy's quantile,
    min{m : cdf >= alpha}); a cross-check of the exact reference and of the library."""
    from scipy.stats import binom
    ref = [int(binom.ppf(alpha, i, p)) for i in range(1, 61)]
    assert R.mtable(60, p, alpha) == ref
    assert fa_ir_mtable(60, p, alpha, adjust=False).tolist() == ref


@pytest.mark.parametrize("k, p, alpha", [(10, 0.5, 0.1), (12, 0.5, 0.1), (8, 0.3, 0.1), (12, 0.7, 0.05),
                                         (11, 0.4, 0.2), (6, 0.5, 0.25), (9, 0.2, 0.15), (12, 0.6, 0.01)])
def test_adjusted_alpha_by_enumerating_every_sequence(k, p, alpha):
    ac = fa_ir_adjusted_alpha(k, p, alpha)
    assert 0 < ac <= alpha
    m = R.mtable(k, p, ac)
    assert fa_ir_mtable(k, p, alpha).tolist() == m  # adjust=True is the table at alpha_c
    assert R.failure_probability(m, p) <= alpha + 1e-12  # the family-wise error is within alpha ...
    nxt = R.next_table_change(k, p, ac)
    if nxt <= alpha:  # ... and alpha_c is the largest such: the next, stricter table exceeds it
        assert R.mtable(k, p, nxt) != m
        assert R.failure_probability(R.mtable(k, p, nxt), p) > alpha
        assert ac >= nxt * (1 - 1e-6)  # just below the change point (a margin for the test's float CDF)
    else:
        assert fa_ir_mtable(k, p, alpha, adjust=False).tolist() == m  # no correction needed
        assert ac >= alpha * (1 - 1e-6)


def test_adjusted_alpha_corrects_something_on_the_papers_setting():
    # with k = 10, p = 0.5, alpha = 0.1 the unadjusted table fails a fair ranking far more often than alpha
    m = R.mtable(10, 0.5, 0.1)
    assert R.failure_probability(m, 0.5) > 0.1
    assert fa_ir_adjusted_alpha(10, 0.5, 0.1) < 0.1


@pytest.mark.parametrize("seed", range(4))
def test_fair_test_against_the_binomial_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    B, N = 8, 11
    s, g, mask = _batch(gen, B, N, 3)
    p, alpha, k = (0.3, 0.5, 0.6, 0.45)[seed], (0.1, 0.05, 0.2, 0.1)[seed], (None, 7, 11, 20)[seed]
    for adjust in (True, False):
        res = fa_ir_test(s, g, p=p, alpha=alpha, k=k, adjust=adjust, mask=mask, num_groups=3)
        K = N if k is None else k
        a = fa_ir_adjusted_alpha(K, p, alpha) if adjust else alpha
        assert isinstance(res, FaIrTest) and res.alpha == a
        for b in range(B):
            idx, sb, gb = _real(b, s, g, mask)
            ranking = R.start_order(sb)
            assert bool(res.passed[b]) == R.fa_ir_test_passes(ranking, gb, 1, p, a, K), b
            c = R.prefix_counts(ranking, gb, 1)
            pv = min(float(R.binom_cdf(c[i - 1], i, p)) for i in range(1, min(K, len(idx)) + 1))
            assert math.isclose(float(res.p_value[b]), pv, rel_tol=1e-9)
            assert bool(res.valid[b])


def test_fair_test_agrees_with_the_mtable_where_alpha_is_a_cdf_value():
    """At an alpha equal to a binomial CDF value the prefix at exactly that CDF fails (the test is ``> alpha``);
    the test and the m-table (hence FA*IR) must agree there too: every 0/1 sequence for small k."""
    cases = [(3, 0.5, 0.125), (2, 0.5, 0.25), (4, 0.5, 0.0625), (5, 0.5, 0.1875), (3, 0.25, 0.421875)]
    for k, p, alpha in cases:
        for adjust in (False, True):
            m = fa_ir_mtable(k, p, alpha, adjust=adjust).tolist()
            for seq in itertools.product((0, 1), repeat=k):
                res = fa_ir_test(torch.arange(k, 0, -1).double(), torch.tensor(seq), p=p, alpha=alpha,
                                adjust=adjust, num_groups=2)
                assert bool(res.passed) == R.satisfies_mtable(list(range(k)), list(seq), 1, m), (k, p, alpha, seq)
    # and the exact answer where the float values are exact (p = 1/2): m(3) at alpha = 1/8 is 1
    assert fa_ir_mtable(3, 0.5, 0.125, adjust=False).tolist() == [0, 0, 1]
    assert not bool(fa_ir_test(torch.tensor([3., 2., 1.]), torch.tensor([0, 0, 0]), p=0.5, alpha=0.125,
                              adjust=False, num_groups=2).passed)


_S, _G = torch.randn(5), torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("call, arg", [
    (lambda: fa_ir_mtable(0, 0.5, 0.1), "k"),
    (lambda: fa_ir_mtable(5, 1.5, 0.1), "p"),
    (lambda: fa_ir_mtable(5, 0.5, 1.0), "alpha"),
    (lambda: fa_ir_adjusted_alpha(5, 0.0, 0.1), "p"),
    (lambda: fa_ir_test(_S, _G, p=0.5, alpha=0.0), "alpha"),
    (lambda: fa_ir_test(_S, torch.rand(5, 2), p=0.5), "groups"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


# ------------------------------------------------------------------------------------------ the old names
@pytest.mark.parametrize("old, new", [("fair_test", "fa_ir_test"), ("fair_mtable", "fa_ir_mtable"),
                                      ("fair_adjusted_alpha", "fa_ir_adjusted_alpha"), ("FairTest", "FaIrTest")])
def test_old_names_are_deprecated_aliases(old, new):
    """``fair`` is Raj & Ekstrand's FAIR measure; FA*IR's names were ``fair_*`` until this release."""
    import torchfair.metrics as M

    with pytest.warns(FutureWarning, match=new):
        obj = getattr(M, old)
        if callable(obj) and old != "FairTest":
            args = ((_S, _G) if old == "fair_test" else (5,))
            kwargs = {"p": 0.5}
            got, want = obj(*args, **kwargs), getattr(M, new)(*args, **kwargs)
            assert str(got) == str(want)
        else:
            assert obj is getattr(M, new)
    assert old not in M.__all__ and new in M.__all__
