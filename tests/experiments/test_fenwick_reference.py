"""experiments/fenwick_reference.py, the compiled Fenwick-tree DIPS that bench_speed.py times torchfair against,
computes torchfair's exact DIPS (a wrong peer would make the ratio meaningless)."""
import pytest
import torch
from experiment_loader import experiment_fixture

from torchfair.metrics import dips

peer = experiment_fixture("fenwick_reference")


@pytest.mark.parametrize("relevance", ["graded", "continuous"])
@pytest.mark.parametrize("G", [2, 3])
@pytest.mark.parametrize("parallel", [False, True])
def test_the_peer_computes_torchfairs_dips(peer, relevance, G, parallel):
    g = torch.Generator().manual_seed(G)
    B, N = 7, 120
    s = torch.randn(B, N, generator=g, dtype=torch.float64).round(decimals=1)  # score ties: broken by index
    r = (torch.randint(0, 5, (B, N), generator=g).double() if relevance == "graded"
         else torch.rand(B, N, generator=g, dtype=torch.float64))
    grp = torch.randint(-1, G, (B, N), generator=g)  # -1: in no group
    grp[0] = 0  # a list with one group only: the other entries undefined (0)
    for gamma, tie in ((0.9, 0.5), (0.7, 0.0), (1.0, 1.0)):
        ours = dips(s, r, grp, num_groups=G, browsing=f"rbp:{gamma}", tie_weight=tie)
        theirs = peer.dips_fenwick(s.numpy(), r.numpy(), grp.numpy(), G, gamma=gamma, tie_weight=tie,
                                   parallel=parallel)
        torch.testing.assert_close(torch.from_numpy(theirs), ours, rtol=1e-12, atol=1e-12)
