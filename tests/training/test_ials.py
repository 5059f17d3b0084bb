"""torchfair.training.implicit_als and MatrixFactorization(init="ials"): the closed-form half-steps against a plain
per-user loop of Hu, Koren & Volinsky (2008) eq. 4 over every cell, the objective (eq. 3, brute force over the
dense matrix) never increasing, repeated pairs and weights, the ranker's initialisation when a fit starts, and bad
input."""
import numpy as np
import pytest
import torch

from torchfair.training.rankers import MatrixFactorization, implicit_als


def _objective(X, Y, C, P, reg):
    """Eq. 3 over every (user, item) cell, dense."""
    E = P - X @ Y.T
    return float((C * E ** 2).sum() + reg * ((X ** 2).sum() + (Y ** 2).sum()))


def _dense(users, items, U, I, alpha, w=None):
    C = np.ones((U, I))
    P = np.zeros((U, I))
    w = np.ones(len(users)) if w is None else np.asarray(w, float)
    for u, i, x in zip(users, items, w):
        C[u, i] += alpha * x
        P[u, i] = 1.0
    return C, P


def _loop_half_step(C, P, F, reg):
    """x_u = (F^T C^u F + reg I)^-1 F^T C^u p(u), one row at a time (the paper's eq. 4 without the speed-up)."""
    d = F.shape[1]
    out = np.zeros((C.shape[0], d))
    for u in range(C.shape[0]):
        Cu = np.diag(C[u])
        out[u] = np.linalg.solve(F.T @ Cu @ F + reg * np.eye(d), F.T @ Cu @ P[u])
    return out


@pytest.fixture
def pairs():
    rng = np.random.default_rng(0)
    users = rng.integers(0, 7, 30)
    items = rng.integers(0, 9, 30)
    return users, items


@pytest.mark.parametrize("iterations", [1, 2])
def test_implicit_als_equals_the_per_user_closed_form(pairs, iterations):
    users, items = pairs
    alpha, reg, d = 4.0, 0.5, 3
    X, Y = implicit_als(torch.tensor(users), torch.tensor(items), 7, 9, d, alpha=alpha, reg=reg,
                        iterations=iterations, seed=3)
    # the same start: the generator draws X then Y
    gen = torch.Generator().manual_seed(3)
    X0 = (torch.randn(7, d, generator=gen, dtype=torch.float64) * 0.01).numpy()
    Yr = (torch.randn(9, d, generator=gen, dtype=torch.float64) * 0.01).numpy()
    C, P = _dense(users, items, 7, 9, alpha)
    for _ in range(iterations):
        Xr = _loop_half_step(C, P, Yr, reg)
        Yr = _loop_half_step(C.T, P.T, Xr, reg)
    np.testing.assert_allclose(X.numpy(), Xr, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(Y.numpy(), Yr, rtol=1e-9, atol=1e-12)
    assert X0.shape == (7, d)


def test_implicit_als_objective_never_increases(pairs):
    users, items = pairs
    C, P = _dense(users, items, 7, 9, 10.0)
    values = []
    for it in range(1, 6):
        X, Y = implicit_als(torch.tensor(users), torch.tensor(items), 7, 9, 4, alpha=10.0, reg=0.1, iterations=it)
        values.append(_objective(X.numpy(), Y.numpy(), C, P, 0.1))
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:]))


def test_implicit_als_weights_and_repeated_pairs_add_up():
    # a pair given twice with weight 1 each is the pair once with weight 2
    u, i = torch.tensor([0, 0, 1, 2]), torch.tensor([1, 1, 2, 0])
    X1, Y1 = implicit_als(u, i, 3, 4, 2, alpha=3.0, iterations=3)
    X2, Y2 = implicit_als(u[1:], i[1:], 3, 4, 2, alpha=3.0, iterations=3, weights=[2.0, 1.0, 1.0])
    torch.testing.assert_close(X1, X2)
    torch.testing.assert_close(Y1, Y2)
    # weights change the confidence: c = 1 + alpha w (eq. 2), checked on one half-step against the loop
    C, P = _dense([0, 1, 2], [1, 2, 0], 3, 4, 3.0, w=[2.0, 1.0, 1.0])
    gen = torch.Generator().manual_seed(0)
    torch.randn(3, 2, generator=gen, dtype=torch.float64)
    Y0 = (torch.randn(4, 2, generator=gen, dtype=torch.float64) * 0.01).numpy()
    X, _ = implicit_als(u[1:], i[1:], 3, 4, 2, alpha=3.0, iterations=1, weights=[2.0, 1.0, 1.0])
    np.testing.assert_allclose(X.numpy(), _loop_half_step(C, P, Y0, 0.1), rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("kw, arg", [({"dim": 0}, "dim"), ({"alpha": -1.0}, "alpha"), ({"reg": 0.0}, "reg"),
                                     ({"iterations": 0}, "iterations"), ({"num_users": 0}, "num_users")])
def test_implicit_als_bad_arguments_name_them(kw, arg):
    args = {"num_users": 3, "num_items": 4, "dim": 2, **kw}
    with pytest.raises(ValueError, match=f"`{arg}`"):
        implicit_als(torch.tensor([0]), torch.tensor([1]), **args)


@pytest.mark.parametrize("users, items, arg", [([0, 3], [1, 1], "users"), ([0, 1], [1, 9], "items"),
                                               ([0, 1], [1], "users")])
def test_implicit_als_bad_ids(users, items, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        implicit_als(torch.tensor(users), torch.tensor(items), 3, 4, 2)


def test_implicit_als_bad_weights():
    with pytest.raises(ValueError, match="`weights`"):
        implicit_als(torch.tensor([0]), torch.tensor([1]), 3, 4, 2, weights=[-1.0])


def test_matrix_factorization_ials_init_sets_the_factors():
    from torchfair.training import MovieLensDataModule

    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5)
    dm.setup("fit")
    mf = MatrixFactorization(dm.num_users, dm.num_items, dim=8, init="ials", ials_alpha=10.0, ials_reg=0.1)
    before = mf.user_factors.weight.clone()
    mf.initialize(dm)
    assert not torch.equal(before, mf.user_factors.weight)
    assert float(mf.user_bias.weight.abs().sum()) == 0.0
    train = dm.splits.train
    u = torch.tensor(train["user"].to_numpy(), dtype=torch.long)
    i = torch.tensor(train["item"].to_numpy(), dtype=torch.long)
    X, Y = implicit_als(u, i, dm.num_users, dm.num_items, 8, alpha=10.0, reg=0.1, seed=0)
    torch.testing.assert_close(mf.user_factors.weight, X.float())
    # a "normal" MF ignores initialize()
    plain = MatrixFactorization(dm.num_users, dm.num_items, dim=8)
    w = plain.user_factors.weight.clone()
    plain.initialize(dm)
    assert torch.equal(w, plain.user_factors.weight)


def test_a_fit_from_scratch_starts_from_ials_and_init_from_skips_it(tmp_path):
    import pytorch_lightning as pl

    from torchfair.training import FairRankingModule, MovieLensDataModule

    dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5)
    m = FairRankingModule("mf", {"dim": 8, "init": "ials"}, lr=1e-12)
    tr = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                    default_root_dir=str(tmp_path), limit_train_batches=1, num_sanity_val_steps=0)
    tr.fit(m, dm)
    u = torch.tensor(dm.splits.train["user"].to_numpy(), dtype=torch.long)
    i = torch.tensor(dm.splits.train["item"].to_numpy(), dtype=torch.long)
    X, _ = implicit_als(u, i, dm.num_users, dm.num_items, 8, seed=dm.seed)
    torch.testing.assert_close(m.ranker.user_factors.weight, X.float(), atol=1e-6, rtol=1e-5)  # lr ~ 0: unchanged
    ckpt = tmp_path / "a.ckpt"
    tr.save_checkpoint(str(ckpt))
    with torch.no_grad():
        m.ranker.user_factors.weight.mul_(2.0)  # the start file differs from a fresh ALS
        torch.save({"state_dict": {f"ranker.{k}": v for k, v in m.ranker.state_dict().items()}}, tmp_path / "b.pt")
    m2 = FairRankingModule("mf", {"dim": 8, "init": "ials"}, lr=1e-12, init_from=str(tmp_path / "b.pt"))
    tr2 = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=str(tmp_path / "2"), limit_train_batches=1, num_sanity_val_steps=0)
    tr2.fit(m2, MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5))
    torch.testing.assert_close(m2.ranker.user_factors.weight, 2 * X.float(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kw, arg", [({"init": "xavier"}, "init"), ({"ials_reg": 0.0}, "ials_reg"),
                                     ({"ials_weights": "count"}, "ials_weights"),
                                     ({"ials_iterations": 0}, "ials_iterations")])
def test_matrix_factorization_bad_ials_arguments(kw, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        MatrixFactorization(3, 4, **kw)
