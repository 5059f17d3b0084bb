"""Browsing models: the probability F(k) that a user examines 0-based position k.

Every model maps positions (0 = top) to weights on any device and dtype, for integer positions (hard rankings)
and for real-valued positions (soft orderings, which place an item at an *expected* position).  Each gives

* ``weight(k)``: F at positions ``k`` (a tensor, integer- or real-valued);
* ``weights(n)``: the vector ``[F(0), ..., F(n-1)]``;
* ``cumulative(n, max_n)``: ``sum_{k < n} F(k)`` for a tensor of (possibly fractional) counts ``n``, the
  normaliser sum DIPS needs (Fabris et al., WSDM 2023, eq. 10).  A fractional count (soft group sizes) is
  interpolated linearly: ``sum_{k < floor(n)} F(k) + (n - floor(n)) F(floor(n))``;
* ``item_exposure(relevance_sorted)``: the exposure of every position of a ranked list ``[..., N]`` given the
  relevance of the items in ranked order.  This is the one method orderings call to weigh positions.  For a
  position-based model it is ``F(k)`` broadcast (the relevance is not read); a *relevance-dependent* model
  (:class:`Cascade`, whose user stops after a relevant item) declares ``relevance_dependent = True`` and computes
  it from the relevance.  Orderings ask ``relevance_dependent`` only to know whether they must sort the relevance
  (and to refuse what they cannot express, e.g. a doubly stochastic matrix); they never special-case a class.

Sources: Fabris et al., WSDM 2023, §3.1, §4.3 and §6.1 (RBP ``gamma**k``); Raj & Ekstrand, SIGIR 2022, table 3
(geometric, logarithmic, RBP, cascade; its ranks are 1-based, ours 0-based, so its RBP ``gamma**L(d)`` is ours
times the constant ``gamma``).

Every constructor argument is checked: a bad value (NaN, inf, a bool, out of range) raises ``ValueError`` naming it.

Example::

    >>> RBP(0.5).weights(4)
    tensor([1.0000, 0.5000, 0.2500, 0.1250])
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
from torch import Tensor

from ._validation import check_bool, check_int, check_number

__all__ = ["BrowsingModel", "RBP", "Geometric", "Logarithmic", "ReciprocalRank", "Uniform", "Cascade", "TopK",
           "Custom", "get_browsing"]


#: position weights of parameter-only browsing models, by (model, n, dtype, device): a bounded cache
_WEIGHTS: dict = {}
_WEIGHTS_MAX = 64


class BrowsingModel:
    """Base class. Subclasses implement :meth:`_weight` for real-valued, 0-based positions; a relevance-dependent
    model also sets ``relevance_dependent = True`` and overrides :meth:`item_exposure`."""

    #: True when the exposure of a position also depends on the relevance of the items ranked above it
    #: (:class:`Cascade`): orderings then pass the relevance in ranked order to :meth:`item_exposure`.
    relevance_dependent: bool = False

    def weight(self, k: Tensor) -> Tensor:
        """F at 0-based positions ``k`` (integer positions are converted to the default float dtype).

        For a relevance-dependent model this is the position part only (the largest exposure the position can
        get), used for normalisers."""
        if not k.is_floating_point():
            k = k.to(torch.get_default_dtype())
        return self._weight(k)

    def _weight(self, k: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, k: Tensor) -> Tensor:
        return self.weight(k)

    def weights(self, n: int, *, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
        """``[F(0), ..., F(n-1)]``.  For a model whose parameters are plain numbers (every built-in position model)
        the vector is computed once per ``(model, n, dtype, device)`` and reused (a read-only constant: the
        losses ask for it on every call)."""
        key = None if torch.compiler.is_compiling() else self._cache_key()
        if key is None:
            return self.weight(torch.arange(n, dtype=dtype, device=device))
        key = key + (n, dtype, str(torch.device(device) if device is not None else torch.device("cpu")))
        w = _WEIGHTS.get(key)
        if w is None:
            with torch.no_grad():
                w = self.weight(torch.arange(n, dtype=dtype, device=device))
            if len(_WEIGHTS) >= _WEIGHTS_MAX:
                _WEIGHTS.pop(next(iter(_WEIGHTS)))
            _WEIGHTS[key] = w
        return w

    def _cache_key(self):
        """A hashable identity of the model when all its parameters are numbers, bools or strings (else None: not
        cached)."""
        items = []
        for k, v in sorted(vars(self).items()):
            if isinstance(v, BrowsingModel):
                inner = v._cache_key()
                if inner is None:
                    return None
                items.append((k, inner))
            elif isinstance(v, (bool, int, float, str)) or v is None:
                items.append((k, v))
            else:
                return None
        return (type(self),) + tuple(items)

    def item_exposure(self, relevance_sorted: Tensor) -> Tensor:
        """Exposure of each position ``[..., N]`` of a ranked list, given the relevance of its items in ranked order
        ``relevance_sorted [..., N]`` (position 0 first).

        Position-based models return ``[F(0), ..., F(N-1)]`` broadcast to the shape of ``relevance_sorted``, whose
        values are not read (only its shape, floating dtype and device)."""
        dt = relevance_sorted.dtype if relevance_sorted.is_floating_point() else torch.get_default_dtype()
        n = relevance_sorted.shape[-1]
        return self.weights(n, dtype=dt, device=relevance_sorted.device).expand(relevance_sorted.shape)

    def cumulative(self, n: Tensor, max_n: int) -> Tensor:
        """``sum_{k < n} F(k)`` elementwise for counts ``0 <= n <= max_n``; fractional ``n`` interpolated."""
        w = self.weights(max_n + 1, dtype=n.dtype if n.is_floating_point() else torch.float32, device=n.device)
        c = torch.cat([w.new_zeros(1), torch.cumsum(w, 0)])
        nf = n.to(w.dtype).clamp(0, max_n)
        lo = nf.floor().long().clamp(max=max_n)
        return c[lo] + (nf - lo.to(w.dtype)) * w[lo]

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def _check_prob(x, name: str) -> float:
    """A probability in (0, 1] (NaN, inf and bools rejected)."""
    return check_number(x, name, low=0, high=1, low_open=True)





class RBP(BrowsingModel):
    """Rank-biased precision / exponential decay: ``F(k) = gamma**k`` (Fabris et al., WSDM 2023, §6.1; Raj &
    Ekstrand, SIGIR 2022, table 3).

    ``gamma`` is the patience (continuation probability) in (0, 1]; the DIPS paper's synthetic study uses 0.9.
    """

    def __init__(self, gamma: float = 0.9):
        self.gamma = _check_prob(gamma, "gamma")

    def _weight(self, k: Tensor) -> Tensor:
        return torch.pow(torch.as_tensor(self.gamma, dtype=k.dtype, device=k.device), k)


class Geometric(BrowsingModel):
    """Geometric stopping: ``F(k) = p (1 - p)**k`` (Raj & Ekstrand, SIGIR 2022, table 3 with 0-based k; ``p`` in
    (0, 1] is the stopping probability)."""

    def __init__(self, p: float = 0.5):
        self.p = _check_prob(p, "p")

    def _weight(self, k: Tensor) -> Tensor:
        return self.p * torch.pow(torch.as_tensor(1 - self.p, dtype=k.dtype, device=k.device), k)


class Logarithmic(BrowsingModel):
    """The DCG discount ``F(k) = 1 / log2(k + 2)``.

    ``flat_top=True`` gives the variant of Raj & Ekstrand, SIGIR 2022, table 3, ``1 / log2(max(k + 1, 2))``
    (positions 0 and 1 weigh 1).
    """

    def __init__(self, flat_top: bool = False):
        self.flat_top = check_bool(flat_top, "flat_top")

    def _weight(self, k: Tensor) -> Tensor:
        if self.flat_top:
            return 1.0 / torch.log2(torch.clamp(k + 1, min=2.0))
        return 1.0 / torch.log2(k + 2.0)


class ReciprocalRank(BrowsingModel):
    """``F(k) = 1 / (k + 1)``."""

    def _weight(self, k: Tensor) -> Tensor:
        return 1.0 / (k + 1.0)


class Uniform(BrowsingModel):
    """``F(k) = 1`` for every position: the implicit model of IGI and REE (Fabris et al., WSDM 2023, §3.1,
    eq. 4-5)."""

    def _weight(self, k: Tensor) -> Tensor:
        return torch.ones_like(k)


class Cascade(BrowsingModel):
    """Cascade browsing (Raj & Ekstrand, SIGIR 2022, table 3):
    ``F(k) = gamma**k * prod_{k' < k} (1 - phi(r_{sigma(k')}))``.

    The user continues with patience ``gamma`` and stops after an item of relevance ``r`` with probability
    ``phi(r)``.  ``stop`` is that function (its values are clipped to [0, 1]); the default is ERR's
    ``phi(r) = (2**r - 1) / 2**max_grade``, computed as ``2**(r - max_grade) - 2**(-max_grade)`` so that no
    grade overflows (the plain form is ``inf`` in float32 from ``r = 128`` on, and its gradient NaN).  Grades
    above ``max_grade`` are allowed: ``phi`` keeps following ERR's formula and is clipped at probability 1
    (reached at ``r = log2(2**max_grade + 1)``, just above ``max_grade``), so such an item always stops the
    user; the gradient with respect to the relevance is 0 there.

    Exposure depends on the relevance of the items ranked above (``relevance_dependent = True``): :meth:`weight`
    gives the position part ``gamma**k`` only (used for normalisers, e.g. DIPS eq. 10, where it is the largest
    exposure the position can get) and :meth:`item_exposure` the full weight along a sorted list.
    """

    relevance_dependent = True

    def __init__(self, gamma: float = 0.9, max_grade: float = 1.0,
                 stop: Optional[Callable[[Tensor], Tensor]] = None):
        self.gamma = _check_prob(gamma, "gamma")
        self.max_grade = check_number(max_grade, "max_grade", low=0, low_open=True)
        if stop is not None and not callable(stop):
            raise ValueError(f"`stop` must be a callable relevance -> stop probability, or None; got {stop!r}")
        self.stop = stop

    def stop_probability(self, relevance: Tensor) -> Tensor:
        """``phi(r)`` in [0, 1], elementwise."""
        if self.stop is not None:
            return self.stop(relevance).clamp(0, 1)
        mg = self.max_grade
        # 2**(r - mg) <= 2 after the clamp: nothing overflows, and phi is already clipped to 1 from r = mg + 1 on
        x = torch.exp2(relevance.clamp(max=mg + 1) - mg)
        return (x - 2.0 ** (-mg)).clamp(0, 1)

    def _weight(self, k: Tensor) -> Tensor:
        return torch.pow(torch.as_tensor(self.gamma, dtype=k.dtype, device=k.device), k)

    def item_exposure(self, relevance_sorted: Tensor) -> Tensor:
        """Exposure of each position ``[..., N]`` given the relevance of the items in ranked order."""
        n = relevance_sorted.shape[-1]
        cont = 1.0 - self.stop_probability(relevance_sorted)
        survive = torch.cumprod(torch.cat([torch.ones_like(cont[..., :1]), cont[..., :-1]], -1), -1)
        return survive * self.weights(n, dtype=relevance_sorted.dtype, device=relevance_sorted.device)


class TopK(BrowsingModel):
    """A cut-off of another model: ``F(k) = base(k)`` for ``k < K``, 0 below.

    On real positions (soft orderings) the cut-off is a linear ramp ``clamp(K - k, 0, 1)``, exact at integers.
    Relevance-dependent when ``base`` is.
    """

    def __init__(self, base: Optional[BrowsingModel] = None, k: int = 10):
        self.k = check_int(k, "k", low=1)
        self.base = base if base is not None else Uniform()
        if not isinstance(self.base, BrowsingModel):
            raise ValueError(f"`base` must be a BrowsingModel; got {type(base).__name__}")

    @property
    def relevance_dependent(self) -> bool:  # type: ignore[override]
        return self.base.relevance_dependent

    def _weight(self, k: Tensor) -> Tensor:
        return self.base.weight(k) * torch.clamp(self.k - k, 0.0, 1.0)

    def item_exposure(self, relevance_sorted: Tensor) -> Tensor:
        e = self.base.item_exposure(relevance_sorted)
        n = relevance_sorted.shape[-1]
        return e * (torch.arange(n, device=e.device) < self.k).to(e.dtype)


class Custom(BrowsingModel):
    """A user-given weight vector ``[F(0), ..., F(L-1)]``; positions ``>= L`` weigh 0.

    Real positions are interpolated linearly between neighbouring entries.
    """

    def __init__(self, weights: Union[Sequence[float], Tensor]):
        try:
            w = torch.as_tensor(weights, dtype=torch.float64).flatten()
        except (TypeError, ValueError, RuntimeError):
            raise ValueError("`weights` must be a non-empty vector of finite, non-negative numbers; got "
                             f"{weights!r}") from None
        if w.numel() == 0 or not torch.isfinite(w).all() or (w < 0).any():
            raise ValueError("`weights` must be a non-empty vector of finite, non-negative numbers")
        self._w = w

    def _weight(self, k: Tensor) -> Tensor:
        w = torch.cat([self._w, self._w.new_zeros(1)]).to(dtype=k.dtype, device=k.device)
        L = self._w.numel()
        kc = k.clamp(0, L)
        lo = kc.floor().long().clamp(max=L)
        hi = (lo + 1).clamp(max=L)
        frac = kc - lo.to(k.dtype)
        return w[lo] * (1 - frac) + w[hi] * frac

    def __repr__(self) -> str:
        return f"Custom(weights={self._w.tolist()!r})"


_NAMES = {"rbp": RBP, "exponential": RBP, "geometric": Geometric, "logarithmic": Logarithmic, "log": Logarithmic,
          "dcg": Logarithmic, "reciprocal": ReciprocalRank, "rr": ReciprocalRank, "uniform": Uniform,
          "cascade": Cascade}
#: the one numeric parameter a spec string may give, per name (``"rbp:0.8"``)
_PARAM = {"rbp": "gamma", "exponential": "gamma", "geometric": "p", "cascade": "gamma"}

SPEC_HELP = ("a BrowsingModel or a spec string: 'rbp', 'rbp:0.8', 'geometric:0.5', 'logarithmic', 'reciprocal', "
             "'uniform', 'cascade:0.9', 'topk:10' (uniform cut at 10), 'topk:10:rbp:0.8'")


def _parse(spec: str) -> BrowsingModel:
    parts = [p.strip() for p in spec.strip().split(":")]
    name = parts[0].lower()
    try:
        if name == "topk":
            if len(parts) < 2:
                raise ValueError
            base = _parse(":".join(parts[2:])) if len(parts) > 2 else None
            return TopK(base, int(parts[1]))
        if name not in _NAMES or len(parts) > 2 or (len(parts) == 2 and name not in _PARAM):
            raise ValueError
        if len(parts) == 1:
            return _NAMES[name]()
        return _NAMES[name](**{_PARAM[name]: float(parts[1])})
    except ValueError as e:
        detail = f" ({e})" if str(e) else ""
        raise ValueError(f"`browsing` must be {SPEC_HELP}; got {spec!r}{detail}") from None


def get_browsing(browsing: Union[str, BrowsingModel, None], default: Optional[BrowsingModel] = None) -> BrowsingModel:
    """The browsing model named by ``browsing``: a :class:`BrowsingModel` is returned as it is, ``None`` gives
    ``default`` (``RBP(0.9)`` when no default is given), and a spec string is parsed: ``"rbp"``, ``"rbp:0.8"``,
    ``"geometric:0.5"``, ``"logarithmic"``, ``"reciprocal"``, ``"uniform"``, ``"cascade:0.9"``, ``"topk:10"``
    (uniform cut at 10), ``"topk:10:rbp:0.8"`` (RBP cut at 10).  The one spec language of the library: measure
    functions, the losses, :mod:`torchfair.evaluation` and the ``torchfair metrics`` CLI all read it here.

    Example::

        >>> get_browsing("topk:3:rbp:0.5").weights(4)
        tensor([1.0000, 0.5000, 0.2500, 0.0000])
    """
    if browsing is None:
        return default if default is not None else RBP()
    if isinstance(browsing, BrowsingModel):
        return browsing
    if isinstance(browsing, str):
        return _parse(browsing)
    raise ValueError(f"`browsing` must be {SPEC_HELP}; got {browsing!r}")
