"""Training: rankers, the LightningModule, the LightningDataModule over MovieLens, the ``torchfair fit`` CLI,
checkpoints back as rankers (:mod:`.checkpoint`) and their evaluation (:mod:`.evaluate`, ``torchfair evaluate``).
Imports pytorch-lightning; ``import torchfair`` does not import this package."""
from __future__ import annotations

import importlib
from typing import Any, List

from .._extras import require

require("torchfair.training", "train")

__all__ = ["FairRankingModule", "DEFAULT_MEASURES", "MatrixFactorization", "TwoTower", "Popularity", "RANKERS", "build_ranker",
           "MovieLensDataModule", "FairLightningCLI", "evaluate_checkpoints", "REPORT_BROWSING", "LoadedRun",
           "load_checkpoint", "score_lists"]

_WHERE = {"FairRankingModule": "module", "DEFAULT_MEASURES": "module", "MatrixFactorization": "rankers",
          "TwoTower": "rankers", "Popularity": "rankers", "RANKERS": "rankers", "build_ranker": "rankers",
          "MovieLensDataModule": "datamodule", "FairLightningCLI": "cli",
          **{n: "evaluate" for n in ("evaluate_checkpoints", "REPORT_BROWSING")},
          **{n: "checkpoint" for n in ("LoadedRun", "load_checkpoint", "score_lists")}}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
