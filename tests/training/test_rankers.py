"""torchfair/training/rankers.py: MF, two-tower and build_ranker against their formulas."""
import math
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

from torchfair.training import MatrixFactorization, TwoTower, build_ranker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("ml100k_*.yaml"))
#: the synthetic stand-in (60 users, 80 items, no network) for every config
SYNTH = ["--data.variant", "synthetic", "--data.n_test", "3", "--data.n_val", "2", "--data.num_negatives", "5",
         "--data.batch_size", "16", "--data.eval_batch_size", "32", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false"]


# ------------------------------------------------------------------------------------------------ rankers
def test_mf_is_dot_plus_biases():
    mf = MatrixFactorization(num_users=4, num_items=6, dim=3)
    with torch.no_grad():
        for p in mf.parameters():
            p.normal_()
    user, items = torch.tensor([1, 3]), torch.tensor([[0, 5, 2], [4, 4, 1]])
    with torch.no_grad():
        got = mf({"user": user, "items": items})
    for b in range(2):
        u = int(user[b])
        for n in range(3):
            i = int(items[b, n])
            P, Q = mf.user_factors.weight.detach(), mf.item_factors.weight.detach()
            want = sum(float(P[u, d] * Q[i, d]) for d in range(3)) \
                + float(mf.user_bias.weight[u, 0]) + float(mf.item_bias.weight[i, 0]) + float(mf.global_bias.detach())
            assert math.isclose(float(got[b, n]), want, rel_tol=1e-5, abs_tol=1e-5)


def test_mf_scores_long_lists_from_the_whole_catalogue_the_same():
    """Lists holding much of the catalogue are scored by one product with every item's factors and a gather:
    the same scores (up to float32 rounding) and gradients as the per-list gather."""
    torch.manual_seed(0)
    mf = MatrixFactorization(num_users=5, num_items=40, dim=4)
    for p in mf.parameters():
        torch.nn.init.normal_(p)
    user = torch.tensor([0, 3, 4])
    items = torch.stack([torch.randperm(40)[:30] for _ in range(3)])  # 30 of 40 items: the catalogue path
    short = [mf({"user": user, "items": items[:, a:a + 5]}) for a in range(0, 30, 5)]  # 5 of 40: the gather path
    full = mf({"user": user, "items": items})
    torch.testing.assert_close(full, torch.cat(short, 1), rtol=1e-6, atol=1e-6)
    g1 = torch.autograd.grad(full.square().sum(), list(mf.parameters()))
    g2 = torch.autograd.grad(torch.cat(short, 1).square().sum(), list(mf.parameters()))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_two_tower_uses_features_and_checks_the_batch():
    tt = TwoTower(num_users=3, num_items=5, user_cardinalities=[4, 3], num_genres=2, num_decades=3, dim=4)
    batch = {"user": torch.tensor([0, 2]), "items": torch.tensor([[0, 1, 4], [2, 3, 0]]),
             "user_features": torch.tensor([[1, 2], [3, 0]]),
             "item_genres": torch.rand(2, 3, 2), "item_decade": torch.tensor([[1, 2, 0], [3, 3, 1]])}
    s = tt(batch)
    assert s.shape == (2, 3) and torch.isfinite(s).all()
    changed = dict(batch, item_genres=batch["item_genres"] + 1)
    assert not torch.allclose(tt(changed), s)  # the genres enter the score
    with pytest.raises(ValueError, match="item_genres"):
        tt({k: v for k, v in batch.items() if k != "item_genres"})
    with pytest.raises(ValueError, match="use_ids"):
        TwoTower(num_users=3, num_items=5, use_ids=False)


def test_build_ranker_by_name_path_and_module():
    info = {"num_users": 3, "num_items": 5, "num_groups": 2, "user_cardinalities": [2], "num_genres": 2,
            "num_decades": 1}
    assert build_ranker("mf", info, {"dim": 7}).user_factors.weight.shape == (3, 7)
    assert isinstance(build_ranker("torchfair.training.rankers.TwoTower", info), TwoTower)
    mod = torch.nn.Linear(2, 2)
    assert build_ranker(mod, info) is mod
    with pytest.raises(ValueError, match="`ranker`"):
        build_ranker("nope", info)
    with pytest.raises(ValueError, match="`ranker`"):
        build_ranker("no.such.module.Class", info)
    with pytest.raises(ValueError, match="`ranker_args`"):
        build_ranker("mf", info, {"width": 3})
    with pytest.raises(ValueError, match="`num_users`"):
        MatrixFactorization(0, 3)
    mf = MatrixFactorization(3, 5)
    for bad, name in (({"user": torch.tensor([0.5]), "items": torch.tensor([[0, 1]])}, "user"),
                      ({"user": torch.tensor([0]), "items": torch.tensor([0, 1])}, "items"),
                      ({"user": torch.tensor([0, 1]), "items": torch.tensor([[0, 1]])}, "items"),
                      ({"user": torch.tensor([0])}, "items")):
        with pytest.raises(ValueError, match=name):
            mf(bad)
