"""Training utilities on pytorch-lightning: :class:`MovieLensDataModule` (:mod:`.datamodule`).

Exports are loaded on first access (PEP 562), so importing this package does not load lightning or pandas.
"""
from __future__ import annotations

import importlib
from typing import Any, List

__all__ = ["MovieLensDataModule"]

#: public name -> submodule defining it
_LAZY = {"MovieLensDataModule": "datamodule"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
