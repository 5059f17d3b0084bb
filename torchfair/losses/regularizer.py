"""``loss = utility + lambda * fairness``, with a lambda schedule that resumes, and both parts kept for logging."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import Tensor, nn

from .._validation import check_choice, check_number

__all__ = ["FairnessRegularizer"]

_SCHEDULES = ("constant", "linear")


class FairnessRegularizer(nn.Module):
    """Combine a utility loss and a fairness loss: ``utility(s, r, g, m) + lambda_t * fairness(s, r, g, m)``.

    ``schedule="constant"`` keeps ``lambda_t = lam``; ``"linear"`` warms it up linearly from 0 to ``lam`` over
    ``warmup_steps`` calls of :meth:`step` (call it once per optimiser step).  The step counter is part of the
    module's ``state_dict``, so a run resumed from a checkpoint continues its warm-up where it stopped.

    ``fairness_every = k > 1`` regularises lazily: the fairness term enters the loss only on the steps with
    ``current_step % k == 0``, weighted ``k * lambda_t`` there, so that over ``k`` steps its gradient weighs what
    ``lambda_t`` every step weighs, at ``1/k`` of its cost ("lazy regularization", Karras et al. 2020, *Analyzing
    and Improving the Image Quality of StyleGAN*, CVPR, section 3.1: their R1 term every 16 minibatches).  Steps
    are counted by :meth:`step`: a loop that never calls it regularises every call.  Measured on ML-100K by an
    earlier version of ``experiments/ramp_tradeoff.py --every 4`` (``experiments/results/ramp_tradeoff_every4.md``,
    kept as a historical result).

    When ``lambda_t = 0`` (``lam=0`` or the first warm-up step) the fairness term does not enter the loss.  It is
    then computed for logging only every ``log_fairness_every`` calls (without a graph; ``0``, the default, never),
    so a regulariser at ``lam=0`` costs what the utility loss costs.  Measured (``experiments/bench_regularizer.py``,
    B = 64, N = 500, DIPS on SoftRank, 2 CPU threads): a lambda = 0 step costs 1.0x a ListNet step with ``0``,
    16x with ``10`` and 144x with ``1``.  While ``lambda_t > 0`` it is computed on every regularised step (every
    call with ``fairness_every=1``); the other calls of a lazy regulariser follow the same logging rule.

    After each forward, :attr:`last` holds detached ``utility``, ``lambda``, ``total`` and, when it was computed,
    ``fairness`` (e.g. ``self.log_dict(reg.last)`` in a LightningModule), with ``fairness/<name>`` for each term of
    a fairness loss that exposes ``last_terms`` (:class:`~torchfair.losses.MultiMeasureLoss`).  :meth:`terms`
    returns both terms *with* their graphs, to log gradient norms of each part separately.

    Example::

        >>> from torchfair.losses import DIPSLoss, ListNetLoss
        >>> reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=0.5, schedule="linear",
        ...                           warmup_steps=100, log_fairness_every=10)
        >>> s = torch.randn(4, 10, requires_grad=True)
        >>> reg(s, torch.rand(4, 10), torch.randint(0, 2, (4, 10))).backward()
        >>> reg.step()
        >>> sorted(reg.last), reg.state_dict()["_extra_state"]
        (['fairness', 'lambda', 'total', 'utility'], {'current_step': 1, 'calls': 1})
    """

    def __init__(self, utility: nn.Module, fairness: nn.Module, lam: float = 1.0, schedule: str = "constant",
                 warmup_steps: int = 0, log_fairness_every: int = 0, fairness_every: int = 1):
        super().__init__()
        check_choice(schedule, "schedule", _SCHEDULES)
        self.lam = check_number(lam, "lam", low=0)
        self.warmup_steps = check_number(warmup_steps, "warmup_steps", low=0, integer=True)
        if schedule == "linear" and self.warmup_steps < 1:
            raise ValueError(f"`warmup_steps` must be >= 1 for the linear schedule; got {warmup_steps!r}")
        self.log_fairness_every = check_number(log_fairness_every, "log_fairness_every", low=0, integer=True)
        self.fairness_every = check_number(fairness_every, "fairness_every", low=1, integer=True)
        if not callable(utility) or not callable(fairness):
            raise ValueError("`utility` and `fairness` must be losses called as loss(scores, relevance, groups, mask)")
        self.utility = utility
        self.fairness = fairness
        self.schedule = schedule
        self.current_step = 0
        self._calls = 0
        self.last: Dict[str, Tensor] = {}

    # ------------------------------------------------------------------ schedule
    @property
    def current_lambda(self) -> float:
        """``lambda_t`` at the current step."""
        if self.schedule == "linear":
            return self.lam * min(1.0, self.current_step / self.warmup_steps)
        return self.lam

    @property
    def regularizes_now(self) -> bool:
        """Whether the next call trains the fairness term: ``lambda_t > 0`` and, with ``fairness_every = k``, a step
        ``current_step % k == 0``."""
        return self.current_lambda > 0 and self.current_step % self.fairness_every == 0

    @property
    def weight(self) -> float:
        """The weight of the fairness term in the next call's loss: ``fairness_every * lambda_t`` when it
        :attr:`regularizes_now`, else 0."""
        return self.fairness_every * self.current_lambda if self.regularizes_now else 0.0

    def step(self) -> None:
        """Advance the schedule by one optimiser step."""
        self.current_step += 1

    def get_extra_state(self) -> Dict[str, Any]:
        return {"current_step": self.current_step, "calls": self._calls}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.current_step = int(state["current_step"])
        self._calls = int(state.get("calls", 0))  # the logging rhythm of log_fairness_every continues too

    # ------------------------------------------------------------------ losses
    def terms(self, scores: Tensor, relevance: Tensor, groups: Tensor,
              mask: Optional[Tensor] = None) -> Dict[str, Optional[Tensor]]:
        """Both terms with their graphs: ``{"utility": u, "fairness": f, "lambda": w}``, ``w`` = :attr:`weight`
        (``lambda_t``, or ``fairness_every * lambda_t`` on the regularised steps of a lazy regulariser; 0 on its other
        steps).

        ``fairness`` is ``None`` when ``w = 0`` and this call is not a logging call (see the class doc); when
        ``w = 0`` and it is, it is computed without a graph."""
        lam = self.weight
        u = self.utility(scores, relevance, groups, mask)
        self._calls += 1
        if lam > 0:
            f = self.fairness(scores, relevance, groups, mask)
        elif self.log_fairness_every and (self._calls - 1) % self.log_fairness_every == 0:
            with torch.no_grad():
                f = self.fairness(scores, relevance, groups, mask)
        else:
            f = None
        return {"utility": u, "fairness": f, "lambda": torch.tensor(lam, dtype=u.dtype, device=u.device)}

    def forward(self, scores: Tensor, relevance: Tensor, groups: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        t = self.terms(scores, relevance, groups, mask)
        u, f, lam = t["utility"], t["fairness"], t["lambda"]
        total = u + lam * f if (f is not None and self.weight > 0) else u
        self.last = {"utility": u.detach(), "lambda": lam, "total": total.detach()}
        if f is not None:
            self.last["fairness"] = f.detach()
            # a loss of several terms (MultiMeasureLoss) exposes each one: logged as fairness/<name>
            for name, value in (getattr(self.fairness, "last_terms", None) or {}).items():
                self.last[f"fairness/{name}"] = value
        return total
