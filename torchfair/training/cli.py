"""``torchfair fit / validate / test / predict``: :class:`FairLightningCLI`, a ``LightningCLI`` over
:class:`~torchfair.training.FairRankingModule` and :class:`~torchfair.training.MovieLensDataModule`.

Configured by YAML (``--config configs/ml100k_dips.yaml``) and overridden from the command line
(``--model.lam 0.5 --trainer.max_epochs 5 --trainer.accelerator gpu``); everything ``LightningCLI`` offers works:
``--print_config``, ``--ckpt_path`` (resume), ``seed_everything``, callbacks and loggers by ``class_path``.
A misspelt key gets ``LightningCLI``'s error naming the key, with exit code 2.
"""
from __future__ import annotations

import sys
from typing import List, Optional, Sequence

from pytorch_lightning.cli import LightningCLI

from .datamodule import MovieLensDataModule
from .module import FairRankingModule

__all__ = ["FairLightningCLI", "run_lightning", "LIGHTNING_SUBCOMMANDS"]

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")


class FairLightningCLI(LightningCLI):
    """``LightningCLI(FairRankingModule, MovieLensDataModule)`` with torchfair's defaults: the config of each run
    is saved next to its logs (overwritten when the run restarts).  Another data source plugs in by subclassing
    :class:`MovieLensDataModule` or, in Python, by any LightningDataModule whose batches carry the keys of
    :func:`torchfair.data.recsys.collate_lists` and which exposes ``info``."""

    def __init__(self, args: Optional[Sequence[str]] = None, run: bool = True, **kwargs):
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("parser_kwargs", {"prog": "torchfair"})
        super().__init__(FairRankingModule, MovieLensDataModule, args=list(args) if args is not None else None,
                         run=run, **kwargs)


def run_lightning(argv: Sequence[str]) -> int:
    """Run ``torchfair <fit|validate|test|predict> ...``; returns the exit code (2 for a config error)."""
    saved = sys.argv
    sys.argv = sys.argv[:1]  # the arguments are given explicitly (LightningCLI warns when sys.argv holds them too)
    try:
        FairLightningCLI(args=list(argv))
    except SystemExit as e:  # --help, --print_config, config errors (jsonargparse prints them)
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_lightning(sys.argv[1:]))
