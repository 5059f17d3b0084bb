"""``loss = utility + lambda * fairness``, with a lambda schedule and both parts kept for logging."""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor, nn

__all__ = ["FairnessRegularizer"]


class FairnessRegularizer(nn.Module):
    """Combine a utility loss and a fairness loss: ``utility(s, r, g, m) + lambda_t * fairness(s, r, g, m)``.

    ``schedule="constant"`` keeps ``lambda_t = lam``; ``"linear"`` warms it up linearly from 0 to ``lam`` over
    ``warmup_steps`` calls of :meth:`step` (call it once per optimiser step, or set ``current_step``).
    After each forward, :attr:`last` holds detached ``utility``, ``fairness``, ``lambda`` and ``total`` for
    logging (e.g. ``self.log_dict(reg.last)`` in a LightningModule).

    Example::

        >>> from torchfair.losses import DIPSLoss, ListNetLoss
        >>> reg = FairnessRegularizer(ListNetLoss(), DIPSLoss(num_groups=2), lam=0.5)
        >>> s = torch.randn(4, 10, requires_grad=True)
        >>> reg(s, torch.rand(4, 10), torch.randint(0, 2, (4, 10))).backward()
        >>> sorted(reg.last)
        ['fairness', 'lambda', 'total', 'utility']
    """

    def __init__(self, utility: nn.Module, fairness: nn.Module, lam: float = 1.0, schedule: str = "constant",
                 warmup_steps: int = 0):
        super().__init__()
        if schedule not in ("constant", "linear"):
            raise ValueError(f"`schedule` must be 'constant' or 'linear'; got {schedule!r}")
        if not lam >= 0:
            raise ValueError(f"`lam` must be non-negative; got {lam!r}")
        if schedule == "linear" and warmup_steps < 1:
            raise ValueError(f"`warmup_steps` must be >= 1 for the linear schedule; got {warmup_steps!r}")
        self.utility = utility
        self.fairness = fairness
        self.lam = float(lam)
        self.schedule = schedule
        self.warmup_steps = int(warmup_steps)
        self.current_step = 0
        self.last: Dict[str, Tensor] = {}

    @property
    def current_lambda(self) -> float:
        if self.schedule == "linear":
            return self.lam * min(1.0, self.current_step / self.warmup_steps)
        return self.lam

    def step(self) -> None:
        """Advance the schedule by one optimiser step."""
        self.current_step += 1

    def forward(self, scores: Tensor, relevance: Tensor, groups: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        u = self.utility(scores, relevance, groups, mask)
        lam = self.current_lambda
        if lam > 0:
            f = self.fairness(scores, relevance, groups, mask)
        else:  # still measured for logging, without building a graph
            with torch.no_grad():
                f = self.fairness(scores, relevance, groups, mask)
        total = u + lam * f
        self.last = {"utility": u.detach(), "fairness": f.detach(), "lambda": torch.tensor(lam),
                     "total": total.detach()}
        return total
