"""Data: the synthetic two-group data of the DIPS paper (:mod:`torchfair.data.synthetic`), MovieLens
(:mod:`torchfair.data.movielens`), synthetic ratings with ML-20M's shape (:mod:`torchfair.data.ml20m`) and
recommender splits, item groups and ranking lists (:mod:`torchfair.data.recsys`).

The MovieLens and recommender names are loaded on first access (PEP 562), so ``import torchfair`` does not load
pandas.
"""
from __future__ import annotations

import importlib
from typing import Any, List

from .synthetic import ideal_ranking, promote, tie_breaking_rankings, two_group_relevance

#: public name -> submodule defining it (imported on first access)
_LAZY = {name: "movielens" for name in ("MovieLens", "load_movielens", "synthetic_movielens", "DataFormatError",
                                        "ChecksumError", "DataUnavailableError", "VARIANTS")}
_LAZY.update({name: "recsys" for name in ("Encoded", "encode", "Split", "split_ratings", "ItemGroups", "item_groups",
                                          "FeatureTables", "build_features", "RankingLists", "training_lists",
                                          "evaluation_lists", "collate_lists", "TrainingListDataset",
                                          "EvaluationListDataset")})
_LAZY.update({name: "ml20m" for name in ("generate_ml20m", "ml20m_shape")})

__all__ = ["two_group_relevance", "ideal_ranking", "promote", "tie_breaking_rankings", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
