"""torchfair.compat.trec_fair: TREC Fair 2021 / 2022 AWRF against a worked example and a plain loop that
follows the track scripts' steps (discount, page alignment rows, weighted sum, SciPy's Jensen-Shannon)."""
import math
import random

import pytest
import torch

from torchfair.compat.trec_fair import jensen_shannon, trec_fair_awrf
from torchfair.evaluation import read_trec
from torchfair.metrics import exposure as ex


def disc(rank):  # the tracks' discount, 1-based rank
    return 1.0 / math.log2(max(rank, 2))


def js(p, q):
    """Jensen-Shannon divergence (natural log) after normalising p and q, by hand."""
    p = [x / sum(p) for x in p]
    q = [x / sum(q) for x in q]
    m = [(a + b) / 2 for a, b in zip(p, q)]
    kl = lambda a: sum(x * math.log(x / y) for x, y in zip(a, m) if x > 0)  # noqa: E731
    return 0.5 * kl(p) + 0.5 * kl(q)


def ref_awrf(order, rows, target, year, listed=None):
    """One ranking (page indices, best first); rows[i] the alignment of page i over the known groups."""
    G = len(rows[0])
    acc = [0.0] * (G + (year == 2022))
    for r, i in enumerate(order, 1):
        if listed is not None and not listed[i]:
            continue  # 2022: not in the page table
        for g in range(G):
            acc[g] += disc(r) * rows[i][g]
        if year == 2022:
            acc[G] += disc(r) * max(0.0, 1 - sum(rows[i]))
    if sum(acc) == 0:
        if year == 2022:
            return None
        acc = [1.0] * len(acc)
    return 1 - js(acc, target)


def test_worked_example_2022():
    # groups Europe, Asia (+ unknown); page 1 Europe, page 2 half Europe / half unknown, page 3 unknown,
    # page 4 not in the page table
    s = torch.tensor([4., 3., 2., 1.], dtype=torch.float64)
    rows = torch.tensor([[1., 0.], [0.5, 0.], [0., 0.], [0., 0.]], dtype=torch.float64)
    listed = torch.tensor([True, True, True, False])
    got = trec_fair_awrf(s, rows, torch.tensor([0.4, 0.4, 0.2]), listed=listed)
    E = [1 + 0.5, 0.0, 0.5 + 1 / math.log2(3)]
    assert float(got) == pytest.approx(1 - js(E, [0.4, 0.4, 0.2]), abs=1e-12)
    spatial = pytest.importorskip("scipy.spatial.distance")
    assert float(got) == pytest.approx(1 - spatial.jensenshannon(E, [0.4, 0.4, 0.2]) ** 2, abs=1e-12)
    # page 4 listed and unknown: it joins the unknown group
    got4 = trec_fair_awrf(s, rows, torch.tensor([0.4, 0.4, 0.2]))
    assert float(got4) == pytest.approx(1 - js([1.5, 0.0, 0.5 + 1 / math.log2(3) + 0.5], [0.4, 0.4, 0.2]))


def test_worked_example_2021_unknown_dropped_multi_group_in_full():
    s = torch.tensor([4., 3., 2., 1.], dtype=torch.float64)
    # page 1 in both groups (counted in full), page 2 unknown, page 3 group 1, page 4 group 0
    rows = torch.tensor([[1., 1.], [0., 0.], [0., 1.], [1., 0.]], dtype=torch.float64)
    got = trec_fair_awrf(s, rows, torch.tensor([0.5, 0.5]), year=2021)
    E = [1 + 0.5, 1 + 1 / math.log2(3)]
    assert float(got) == pytest.approx(1 - js(E, [0.5, 0.5]), abs=1e-12)
    # the same with ids: page 1 in group 0 only
    ids = torch.tensor([0, -1, 1, 0])
    got_ids = trec_fair_awrf(s, ids, torch.tensor([0.5, 0.5]), year=2021)
    assert float(got_ids) == pytest.approx(1 - js([1.5, 1 / math.log2(3)], [0.5, 0.5]), abs=1e-12)
    # no known group anywhere: compared as the uniform distribution (the 2021 script's rule)
    none = trec_fair_awrf(s, torch.full((4,), -1), torch.tensor([0.8, 0.2]), year=2021, num_groups=2)
    assert float(none) == pytest.approx(1 - js([1, 1], [0.8, 0.2]))


def test_2021_matches_torchfair_convention_for_unknown():
    # with single-group rows, 2021's eps is the known groups' share, as torchfair.metrics.awrf computes it:
    # the nd distance of awrf to the target recovers |eps_g - p_g|
    s = torch.tensor([5., 4., 3., 2., 1.], dtype=torch.float64)
    g = torch.tensor([0, -1, 1, 1, -1])
    p = torch.tensor([0.3, 0.7], dtype=torch.float64)
    nd = ex.awrf(s, g, target=p, browsing="logarithmic", num_groups=2)  # any discount: compare eps directly
    disc0 = torch.tensor([1 / math.log2(k + 2) for k in range(5)], dtype=torch.float64)
    eps0 = float(disc0[0] / (disc0[0] + disc0[2] + disc0[3]))
    assert float(nd[0]) == pytest.approx(abs(eps0 - 0.3))


@pytest.mark.parametrize("year", [2021, 2022])
def test_random_against_the_loop(year):
    rng = random.Random(year)
    for _ in range(30):
        B, N, G = rng.randint(1, 3), rng.randint(1, 7), rng.randint(1, 3)
        scores = torch.rand(B, N, dtype=torch.float64, generator=torch.Generator().manual_seed(rng.randint(0, 99)))
        rows = torch.zeros(B, N, G, dtype=torch.float64)
        listed = torch.ones(B, N, dtype=torch.bool)
        for b in range(B):
            for i in range(N):
                kind = rng.random()
                if kind < 0.2:
                    continue  # unknown
                if year == 2022:
                    w = [rng.random() for _ in range(G)]
                    known = rng.choice([1.0, rng.random()])  # fully or partly known
                    rows[b, i] = torch.tensor(w, dtype=torch.float64) / sum(w) * known
                    listed[b, i] = rng.random() > 0.15
                else:
                    for g in range(G):
                        rows[b, i, g] = float(rng.random() < 0.5)
        Gp = G + (year == 2022)
        target = torch.rand(B, Gp, dtype=torch.float64) + 0.01
        got, ok = trec_fair_awrf(scores, rows, target, year=year, listed=listed if year == 2022 else None,
                                 return_valid=True)
        for b in range(B):
            order = sorted(range(N), key=lambda i: -float(scores[b, i]))
            want = ref_awrf(order, rows[b].tolist(), target[b].tolist(), year,
                            listed[b].tolist() if year == 2022 else None)
            if want is None:
                assert not ok[b] and float(got[b]) == 0
            else:
                assert ok[b] and float(got[b]) == pytest.approx(want, abs=1e-12)
                assert 1 - math.log(2) - 1e-12 <= float(got[b]) <= 1 + 1e-12


def test_partly_known_pages_from_a_group_file(tmp_path):
    # the worked example written as TREC files: 'page group=share' lines, -1 for the unknown page
    (tmp_path / "run.txt").write_text("q Q0 p1 1 4 s\nq Q0 p2 2 3 s\nq Q0 p3 3 2 s\nq Q0 p4 4 1 s\n")
    (tmp_path / "groups.txt").write_text("p1 Europe\np2 Europe=0.5\np3 -1\np4 Asia\n")
    data = read_trec(tmp_path / "run.txt", None, tmp_path / "groups.txt")
    lst = data.lists[0]
    assert data.group_names == ["Asia", "Europe"]
    rows = lst["groups"]
    torch.testing.assert_close(rows, torch.tensor([[0, 1.], [0, .5], [0, 0], [1, 0]], dtype=torch.float64))
    got = trec_fair_awrf(lst["scores"], rows, torch.tensor([0.4, 0.4, 0.2]))
    E = [0.5, 1.5, 0.5 + 1 / math.log2(3)]  # Asia (p4 at rank 4), Europe, unknown
    assert float(got) == pytest.approx(1 - js(E, [0.4, 0.4, 0.2]))


def test_gradients_finite_under_a_soft_ordering():
    from torchfair.orderings import SoftSort
    s = torch.tensor([[0.3, 0.3, 0.1, -2.0]], dtype=torch.float64, requires_grad=True)
    rows = torch.tensor([[[1., 0.], [0., 1.], [0., 0.], [0.5, 0.]]], dtype=torch.float64)
    v = trec_fair_awrf(s, rows, torch.tensor([0.3, 0.3, 0.4]), ordering=SoftSort(), reduction="mean")
    v.backward()
    assert torch.isfinite(s.grad).all()


def test_jensen_shannon_and_validation():
    p = torch.tensor([[1., 0.], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0., 1.], [0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(jensen_shannon(p, q), torch.tensor([math.log(2), 0.], dtype=torch.float64))
    s = torch.tensor([2., 1.])
    with pytest.raises(ValueError, match="`year`"):
        trec_fair_awrf(s, torch.tensor([0, 1]), torch.tensor([.5, .5]), year=2020)
    with pytest.raises(ValueError, match="`target`"):
        trec_fair_awrf(s, torch.tensor([0, 1]), torch.tensor([.5, .5]))  # 2022 needs G + 1 entries
    with pytest.raises(ValueError, match="at most 1"):
        trec_fair_awrf(s, torch.tensor([[1., 1.], [0., 1.]]), torch.tensor([.4, .4, .2]))
    with pytest.raises(ValueError, match="`listed`"):
        trec_fair_awrf(s, torch.tensor([0, 1]), torch.tensor([.4, .4, .2]), listed=torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="`groups`"):
        trec_fair_awrf(s, torch.tensor([0, 3]), torch.tensor([.4, .4, .2]), num_groups=2)
