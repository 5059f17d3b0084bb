"""Rankers: modules mapping a batch of padded lists to scores ``[B, N]``.

A batch (from :class:`~torchfair.training.MovieLensDataModule`) is a dict with ``user [B]``, ``items [B, N]``,
``mask [B, N]`` and the feature tensors ``user_features [B, Fu]`` (categorical codes, 0 = unknown),
``item_genres [B, N, num_genres]`` (multi-hot) and ``item_decade [B, N]`` (code, 0 = unknown).  Any
``nn.Module`` whose ``forward(batch)`` returns ``[B, N]`` scores plugs into
:class:`~torchfair.training.FairRankingModule`; scores at padded slots are ignored.

* :class:`MatrixFactorization`: ``s(u, i) = <p_u, q_i> + b_u + b_i + mu`` (Koren, Bell & Volinsky, "Matrix
  factorization techniques for recommender systems", IEEE Computer 2009, eq. 3).
  ``init="ials"`` starts it from implicit alternating least squares (Hu, Koren & Volinsky, "Collaborative
  filtering for implicit feedback datasets", ICDM 2008, eq. 3-5) on the training ratings: the usual strong
  baseline, fitted in closed form when a fit starts, then trained (fine-tuned) by the loop like any other start.
* :class:`TwoTower`: a user tower (id + demographics) and an item tower (id + genres + release decade), each an
  MLP to ``dim``, scored by their inner product (Yi et al., "Sampling-bias-corrected neural modeling for large
  corpus item recommendations", RecSys 2019, §3).
"""
from __future__ import annotations

import importlib
import inspect
import re
import typing
import warnings
from typing import Any, Dict, Literal, Mapping, Optional, Sequence, Union

import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import Tensor, nn

from .._validation import check_number

__all__ = ["MatrixFactorization", "TwoTower", "Popularity", "RANKERS", "build_ranker", "implicit_als"]


def _check_batch(batch: Mapping[str, Tensor], keys: Sequence[str], who: str) -> None:
    if not isinstance(batch, Mapping):
        raise ValueError(f"`batch` must be a dict of tensors for {who}; got {type(batch).__name__}")
    missing = [k for k in keys if k not in batch]
    if missing:
        raise ValueError(f"`batch` lacks {missing} needed by {who}; it has {sorted(batch)}")
    user, items = batch["user"], batch["items"]
    for name, x, dim in (("user", user, 1), ("items", items, 2)):  # shape and dtype only: no host sync
        if not isinstance(x, torch.Tensor) or x.dim() != dim or x.is_floating_point() or x.dtype == torch.bool:
            raise ValueError(f"`batch['{name}']` must be an integer tensor with {dim} dimension(s) of ids; got "
                             f"{type(x).__name__ if not isinstance(x, torch.Tensor) else (x.dtype, tuple(x.shape))}")
    if items.shape[0] != user.shape[0]:
        raise ValueError(f"`batch['items']` has {items.shape[0]} lists for {user.shape[0]} users in `batch['user']`")


def implicit_als(users, items, num_users: int, num_items: int, dim: int, *, alpha: float = 10.0,
                 reg: float = 0.1, iterations: int = 15, seed: int = 0, weights=None):
    r"""Implicit-feedback ALS (Hu, Koren & Volinsky, ICDM 2008): user and item factors minimising

    .. math:: \sum_{u, i} c_{ui} (p_{ui} - x_u^\top y_i)^2 + \lambda \Big(\sum_u \|x_u\|^2 + \sum_i \|y_i\|^2\Big)

    over *every* (user, item) cell (eq. 3), with preference ``p_ui = 1`` for an observed pair, 0 otherwise, and
    confidence ``c_ui = 1 + alpha w_ui`` (eq. 2's linear form; ``w_ui``: ``weights`` of the observed pairs, default 1;
    unobserved cells have ``c = 1``).  Each half-step is the closed form of eq. 4 (users) / eq. 5 (items),
    ``x_u = (Y^T Y + Y^T (C^u - I) Y + lambda I)^{-1} Y^T C^u p(u)``, with the paper's speed-up: ``Y^T Y`` once per
    half-step and the observed pairs' ``alpha w y_i y_i^T`` added per user.  float64, deterministic given ``seed``.

    ``users``, ``items``: ``[nnz]`` int ids of the observed pairs (a repeated pair adds its weights).  Returns
    ``(X [num_users, dim], Y [num_items, dim])`` float64 tensors.

    Example::

        >>> X, Y = implicit_als(torch.tensor([0, 0, 1]), torch.tensor([0, 1, 1]), 2, 3, dim=2, iterations=5)
        >>> (X @ Y.T).argmax(1).tolist()   # each user's top item is one of their own
        [0, 1]
    """
    num_users = check_number(num_users, "num_users", low=1, integer=True)
    num_items = check_number(num_items, "num_items", low=1, integer=True)
    dim = check_number(dim, "dim", low=1, integer=True)
    alpha = check_number(alpha, "alpha", low=0)
    reg = check_number(reg, "reg", low=0, low_open=True)
    iterations = check_number(iterations, "iterations", low=1, integer=True)
    users = torch.as_tensor(users, dtype=torch.long).reshape(-1)
    items = torch.as_tensor(items, dtype=torch.long).reshape(-1)
    if users.shape != items.shape:
        raise ValueError(f"`users` and `items` must have one id per observed pair; got {tuple(users.shape)} and "
                         f"{tuple(items.shape)}")
    if users.numel() and (int(users.min()) < 0 or int(users.max()) >= num_users):
        raise ValueError(f"`users` must hold ids in [0, {num_users})")
    if items.numel() and (int(items.min()) < 0 or int(items.max()) >= num_items):
        raise ValueError(f"`items` must hold ids in [0, {num_items})")
    w = torch.ones(users.shape, dtype=torch.float64) if weights is None else \
        torch.as_tensor(weights, dtype=torch.float64).reshape(-1)
    if w.shape != users.shape or not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("`weights` must hold one finite non-negative weight per observed pair")
    gen = torch.Generator().manual_seed(int(seed))
    X = torch.randn(num_users, dim, generator=gen, dtype=torch.float64) * 0.01
    Y = torch.randn(num_items, dim, generator=gen, dtype=torch.float64) * 0.01
    eye = torch.eye(dim, dtype=torch.float64)

    # the observed pairs as sparse [users, items] matrices: P (1 per distinct pair) and W (alpha times the summed
    # weights); the per-row sums of eq. 4 / 5 are then sparse-dense products: sum_i alpha w_ui y_i y_i^T is W times
    # the rows y_i y_i^T flattened to [items, d^2] (nnz d^2 work, no [nnz, d, d] temporary)
    with torch.sparse.check_sparse_tensor_invariants(True), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta": the products used are not
        W = torch.sparse_coo_tensor(torch.stack([users, items]), alpha * w, (num_users, num_items)).coalesce()
        P = torch.sparse_coo_tensor(W.indices(), torch.ones_like(W.values()), W.shape).coalesce()
        Wt, Pt = (x.t().coalesce().to_sparse_csr() for x in (W, P))
        W, P = W.to_sparse_csr(), P.to_sparse_csr()

    def half_step(Wm: Tensor, Pm: Tensor, F: Tensor) -> Tensor:
        """The closed form for every row (user or item) given the other side's factors ``F``."""
        n_rows = Wm.shape[0]
        outer = (F[:, :, None] * F[:, None, :]).reshape(F.shape[0], dim * dim)
        A = (F.T @ F + reg * eye).reshape(1, dim * dim) + Wm @ outer
        rhs = Pm @ F + Wm @ F
        return torch.linalg.solve(A.reshape(n_rows, dim, dim), rhs)

    for _ in range(int(iterations)):
        X = half_step(W, P, Y)
        Y = half_step(Wt, Pt, X)
    return X, Y


class MatrixFactorization(nn.Module):
    """Biased matrix factorisation: ``s(u, i) = <p_u, q_i> + b_u + b_i + mu``.

    Args:
        num_users, num_items: sizes of the id spaces (from the data module's ``info``).
        dim: latent dimension.
        init_std: standard deviation of the initial factors (biases start at 0).
        init: ``"normal"`` (random factors) or ``"ials"``: when a fit starts (not resumed, no ``init_from``), the
            factors are set by :func:`implicit_als` on the data module's training ratings (biases 0), so the fit
            starts from the implicit-ALS recommender and the loop trains on from there (``trainer.max_epochs: 0``
            keeps it as it is).
        ials_alpha, ials_reg, ials_iterations: ``alpha``, ``reg`` (lambda) and the number of alternations of
            :func:`implicit_als`; ``ials_weights``: ``"one"`` (every training rating one observation) or
            ``"rating"`` (the rating value as the observation's weight: ``c = 1 + alpha r``).

    Example::

        >>> mf = MatrixFactorization(num_users=3, num_items=5, dim=4)
        >>> mf({"user": torch.tensor([0, 2]), "items": torch.tensor([[0, 1, 2], [3, 4, 0]])}).shape
        torch.Size([2, 3])
    """

    #: whether ``forward`` reads ``item_genres`` / ``item_decade`` (the data module may leave them out otherwise)
    uses_item_features = False

    def __init__(self, num_users: PositiveInt, num_items: PositiveInt, dim: PositiveInt = 32,
                 init_std: NonNegativeFloat = 0.1, init: Literal["normal", "ials"] = "normal",
                 ials_alpha: NonNegativeFloat = 10.0, ials_reg: PositiveFloat = 0.1,
                 ials_iterations: PositiveInt = 15, ials_weights: Literal["one", "rating"] = "one"):
        super().__init__()
        num_users = check_number(num_users, "num_users", low=1, integer=True)
        num_items = check_number(num_items, "num_items", low=1, integer=True)
        dim = check_number(dim, "dim", low=1, integer=True)
        init_std = check_number(init_std, "init_std", low=0)
        if init not in ("normal", "ials"):
            raise ValueError(f"`init` must be 'normal' or 'ials'; got {init!r}")
        self.init = init
        if ials_weights not in ("one", "rating"):
            raise ValueError(f"`ials_weights` must be 'one' or 'rating'; got {ials_weights!r}")
        self.ials_weights = ials_weights
        self.ials = {"alpha": check_number(ials_alpha, "ials_alpha", low=0),
                     "reg": check_number(ials_reg, "ials_reg", low=0, low_open=True),
                     "iterations": int(check_number(ials_iterations, "ials_iterations", low=1, integer=True))}
        self.user_factors = nn.Embedding(num_users, dim)
        self.item_factors = nn.Embedding(num_items, dim)
        self.user_bias = nn.Embedding(num_users, 1)
        self.item_bias = nn.Embedding(num_items, 1)
        self.global_bias = nn.Parameter(torch.zeros(()))
        nn.init.normal_(self.user_factors.weight, std=init_std)
        nn.init.normal_(self.item_factors.weight, std=init_std)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)

    def initialize(self, datamodule, seed: int = 0) -> None:
        """With ``init="ials"``: set the factors by :func:`implicit_als` on ``datamodule.splits.train`` (a set-up
        :class:`~torchfair.training.MovieLensDataModule`; every training rating is one observed pair) and the biases
        to 0.  With ``init="normal"``: nothing.  Called by :class:`~torchfair.training.FairRankingModule` when a fit
        starts from scratch."""
        if self.init != "ials":
            return
        datamodule.setup("fit")
        train = datamodule.splits.train
        X, Y = implicit_als(torch.tensor(train["user"].to_numpy(), dtype=torch.long),
                            torch.tensor(train["item"].to_numpy(), dtype=torch.long),
                            self.user_factors.num_embeddings, self.item_factors.num_embeddings,
                            self.user_factors.embedding_dim, seed=seed,
                            weights=None if self.ials_weights == "one" else train["rating"].to_numpy(), **self.ials)
        with torch.no_grad():
            self.user_factors.weight.copy_(X)
            self.item_factors.weight.copy_(Y)
            self.user_bias.weight.zero_()
            self.item_bias.weight.zero_()
            self.global_bias.zero_()

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        _check_batch(batch, ("user", "items"), "MatrixFactorization")
        user, items = batch["user"], batch["items"]
        p = self.user_factors(user)                                    # [B, d]
        if items.dim() == 2 and 4 * items.shape[1] >= self.item_factors.num_embeddings:
            # lists holding much of the catalogue (full-catalogue evaluation): score every item with one
            # [B, d] x [d, M] product and gather, instead of gathering [B, N, d] factors (2.5x faster at ML-20M)
            dot = (p @ self.item_factors.weight.T).gather(1, items)
        else:
            q = self.item_factors(items)                               # [B, N, d]
            dot = torch.einsum("bd,bnd->bn", p, q)
        return dot + self.user_bias(user) + self.item_bias(items).squeeze(-1) + self.global_bias


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, out))


class TwoTower(nn.Module):
    """Feature-aware two-tower scorer: ``s(u, i) = <f(user id, demographics), g(item id, genres, decade)>``.

    Args:
        num_users, num_items: id space sizes.
        user_cardinalities: number of codes of each categorical user feature (``[]`` when the data has none).
        num_genres: width of the multi-hot genre vector (0: no genre input).
        num_decades: number of decade codes (0: no decade input).
        dim: output dimension of each tower; ``hidden``: width of the towers' hidden layer.
        use_ids: embed the user and item ids too (False: a pure content model that scores unseen ids).

    Example::

        >>> tt = TwoTower(num_users=3, num_items=5, user_cardinalities=[4, 3], num_genres=2, num_decades=3, dim=4)
        >>> batch = {"user": torch.tensor([0]), "items": torch.tensor([[0, 1]]),
        ...          "user_features": torch.tensor([[1, 2]]), "item_genres": torch.tensor([[[1., 0.], [0., 1.]]]),
        ...          "item_decade": torch.tensor([[1, 2]])}
        >>> tt(batch).shape
        torch.Size([1, 2])
    """

    #: whether ``forward`` reads ``item_genres`` / ``item_decade`` (the data module may leave them out otherwise)
    uses_item_features = True

    def __init__(self, num_users: PositiveInt, num_items: PositiveInt, user_cardinalities: Sequence[PositiveInt] = (),
                 num_genres: NonNegativeInt = 0, num_decades: NonNegativeInt = 0, dim: PositiveInt = 32,
                 hidden: PositiveInt = 64, use_ids: bool = True):
        super().__init__()
        num_users = check_number(num_users, "num_users", low=1, integer=True)
        num_items = check_number(num_items, "num_items", low=1, integer=True)
        self.num_genres = check_number(num_genres, "num_genres", low=0, integer=True)
        self.num_decades = check_number(num_decades, "num_decades", low=0, integer=True)
        dim = check_number(dim, "dim", low=1, integer=True)
        hidden = check_number(hidden, "hidden", low=1, integer=True)
        cards = [check_number(c, "user_cardinalities", low=1, integer=True) for c in user_cardinalities]
        self.use_ids = bool(use_ids)
        emb = dim
        self.user_id = nn.Embedding(num_users, emb) if self.use_ids else None
        self.item_id = nn.Embedding(num_items, emb) if self.use_ids else None
        self.user_feats = nn.ModuleList(nn.Embedding(c + 1, emb) for c in cards)
        self.decade = nn.Embedding(self.num_decades + 1, emb) if self.num_decades else None
        self.genres = nn.Linear(self.num_genres, emb, bias=False) if self.num_genres else None
        u_in = emb * (int(self.use_ids) + len(cards))
        i_in = emb * (int(self.use_ids) + int(self.decade is not None) + int(self.genres is not None))
        if u_in == 0 or i_in == 0:
            raise ValueError("`use_ids=False` needs user features and item features (genres or decades)")
        self.user_tower = _mlp(u_in, hidden, dim)
        self.item_tower = _mlp(i_in, hidden, dim)
        self.item_bias = nn.Embedding(num_items, 1) if self.use_ids else None
        if self.item_bias is not None:
            nn.init.zeros_(self.item_bias.weight)

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        keys = ["user", "items"] + (["user_features"] if len(self.user_feats) else []) \
            + (["item_genres"] if self.genres is not None else []) + (["item_decade"] if self.decade is not None else [])
        _check_batch(batch, keys, "TwoTower")
        user, items = batch["user"], batch["items"]
        u_parts = [self.user_id(user)] if self.user_id is not None else []
        if len(self.user_feats):
            uf = batch["user_features"]
            if uf.shape[-1] != len(self.user_feats):
                raise ValueError(f"`batch['user_features']` has {uf.shape[-1]} columns; the model was built for "
                                 f"{len(self.user_feats)}")
            u_parts += [e(uf[:, j].clamp(0, e.num_embeddings - 1)) for j, e in enumerate(self.user_feats)]
        i_parts = [self.item_id(items)] if self.item_id is not None else []
        if self.genres is not None:
            i_parts.append(self.genres(batch["item_genres"].to(self.genres.weight.dtype)))
        if self.decade is not None:
            i_parts.append(self.decade(batch["item_decade"].clamp(0, self.num_decades)))
        u = self.user_tower(torch.cat(u_parts, -1))                     # [B, d]
        v = self.item_tower(torch.cat(i_parts, -1))                     # [B, N, d]
        s = torch.einsum("bd,bnd->bn", u, v)
        if self.item_bias is not None:
            s = s + self.item_bias(items).squeeze(-1)
        return s



class Popularity(nn.Module):
    """Popularity baseline: every user's list is ordered by the items' training rating counts.

    Args:
        counts: ``[num_items]`` score of each item (the number of its training ratings); stored as a buffer.

    ``Popularity.from_datamodule(dm)`` counts the training ratings of a set-up
    :class:`~torchfair.training.MovieLensDataModule` (its ``splits.train``): the items of the validation and test
    ratings are not counted.  Tied counts keep the list order (the evaluator breaks ties by list index).

    Example::

        >>> pop = Popularity(torch.tensor([3., 0., 7.]))
        >>> pop({"user": torch.tensor([0]), "items": torch.tensor([[1, 2, 0]])})
        tensor([[0., 7., 3.]])
    """

    #: whether ``forward`` reads ``item_genres`` / ``item_decade`` (the data module may leave them out otherwise)
    uses_item_features = False

    def __init__(self, counts):
        super().__init__()
        counts = torch.as_tensor(counts, dtype=torch.float32)
        if counts.dim() != 1 or counts.numel() == 0 or not bool(torch.isfinite(counts).all()):
            raise ValueError(f"`counts` must be a non-empty 1-D vector of finite scores; got shape "
                             f"{tuple(counts.shape)}")
        self.register_buffer("counts", counts)

    @classmethod
    def from_datamodule(cls, datamodule) -> "Popularity":
        """The training rating counts of ``datamodule`` (set up, or set up here)."""
        import numpy as np

        datamodule.setup("fit")
        items = datamodule.splits.train["item"].to_numpy()
        return cls(np.bincount(items, minlength=datamodule.num_items).astype("float32"))

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        _check_batch(batch, ("user", "items"), "Popularity")
        return self.counts[batch["items"]]

#: rankers by short name (``ranker: mf`` in a config); a dotted path ``package.module.Class`` works too
RANKERS: Dict[str, type] = {"mf": MatrixFactorization, "two_tower": TwoTower}


def _resolve(spec: str) -> Any:
    if spec in RANKERS:
        return RANKERS[spec]
    if "." not in spec:
        raise ValueError(f"`ranker` must be one of {sorted(RANKERS)} or a dotted path `package.module.Class`; "
                         f"got {spec!r}")
    mod, name = spec.rsplit(".", 1)
    try:
        return getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"`ranker` {spec!r} cannot be imported: {e}") from None


_OPERATOR = re.compile(r"\bv\s*(<=|>=|==|!=|<|>)\s*")


def _range_text(tp: type) -> str:
    """``"an int > 0"`` for jsonargparse's ``PositiveInt`` (any ``restricted_number_type``)."""
    kind = "an int" if getattr(tp, "_type", float) is int else "a number"
    return f"{kind} {_OPERATOR.sub(lambda m: m.group(1) + ' ', str(tp._expression))}"


def _range_problem(hint: Any, value: Any) -> Optional[Sequence[Any]]:
    """``(where, requirement, bad value)`` when ``value`` breaks a range type (jsonargparse's ``restricted_number_type``:
    ``PositiveInt``...) of the annotation ``hint``, also inside ``Optional[...]`` and ``Sequence[...]``; ``None``
    when it does not, or when ``hint`` declares no range."""
    origin = typing.get_origin(hint)
    if origin is Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(inner) < len(typing.get_args(hint)):
            return None
        return _range_problem(inner[0], value) if len(inner) == 1 else None
    if origin in (list, tuple, Sequence, typing.get_origin(Sequence[int])) and typing.get_args(hint):
        if not isinstance(value, (list, tuple)):
            return None
        for i, v in enumerate(value):
            bad = _range_problem(typing.get_args(hint)[0], v)
            if bad is not None:
                return f"[{i}]{bad[0]}", bad[1], bad[2]
        return None
    if isinstance(hint, type) and hasattr(hint, "_expression") and hasattr(hint, "_type"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                hint(value)
            except (ValueError, TypeError, OverflowError):
                ok = False
        return None if ok else ("", _range_text(hint), value)
    return None


def _check_ranker_args(spec: Union[str, nn.Module], args: Optional[Mapping[str, Any]]) -> None:
    """Check ``args`` against the constructor of the ranker ``spec`` names, before any data is loaded: the class
    exists, takes every key, and each value is in the range its annotation declares (``dim: PositiveInt``).
    ``ValueError`` naming ``ranker`` or ``ranker_args.<key>`` otherwise; a module ``spec`` is not checked."""
    if isinstance(spec, nn.Module) or not isinstance(spec, str):
        return
    cls = _resolve(spec)
    if not args:
        return
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # pragma: no cover - a class without a readable signature
        return
    if not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(k for k in args if k not in params)
        if unknown:
            takes = [k for k, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            raise ValueError(f"`ranker_args` {unknown} are not arguments of {cls.__name__} (it takes {takes})")
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - unresolvable annotations: leave the checks to the constructor
        return
    for key, value in args.items():
        bad = _range_problem(hints.get(key), value)
        if bad is not None:
            raise ValueError(f"`ranker_args.{key}{bad[0]}` must be {bad[1]} ({cls.__name__}); got {bad[2]!r}")


def build_ranker(spec: Union[str, nn.Module], info: Optional[Mapping[str, Any]] = None,
                 args: Optional[Mapping[str, Any]] = None) -> nn.Module:
    """The ranker ``spec`` names, built for the data described by ``info`` (a data module's ``info`` dict).

    ``spec`` is a name of :data:`RANKERS`, a dotted class path, or a module (returned as is).  The class is called
    with ``args`` plus those entries of ``info`` (``num_users``, ``num_items``, ``user_cardinalities``,
    ``num_genres``, ``num_decades``...) that its constructor accepts and ``args`` does not set.

    Example::

        >>> build_ranker("mf", {"num_users": 3, "num_items": 5, "num_groups": 2}, {"dim": 8}).user_factors.weight.shape
        torch.Size([3, 8])
    """
    if isinstance(spec, nn.Module):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"`ranker` must be a name, a dotted class path or an nn.Module; got {type(spec).__name__}")
    cls = _resolve(spec)
    args = dict(args or {})
    info = dict(info or {})
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    for k, v in info.items():
        if k not in args and (k in params or takes_any and k in ("num_users", "num_items")):
            args[k] = v
    try:
        ranker = cls(**args)
    except TypeError as e:
        raise ValueError(f"`ranker_args` do not fit {cls.__name__}: {e}") from None
    if not isinstance(ranker, nn.Module):
        raise ValueError(f"`ranker` {spec!r} built a {type(ranker).__name__}, not an nn.Module")
    return ranker
