"""``torchfair fit / validate / test / predict``: :class:`FairLightningCLI`, a ``LightningCLI`` over
:class:`~torchfair.training.FairRankingModule` and :class:`~torchfair.training.MovieLensDataModule`.

Configured by YAML (``--config configs/ml100k_dips.yaml``) and overridden from the command line
(``--model.lam 0.5 --trainer.max_epochs 5 --trainer.accelerator gpu``); everything ``LightningCLI`` offers works:
``--print_config``, ``--ckpt_path`` (resume), ``seed_everything``, callbacks and loggers by ``class_path``.
A misspelt key gets ``LightningCLI``'s error naming the key, in one line with a hint at ``--help`` (no usage
dump), with exit code 2.  A missing or unreadable ``--ckpt_path`` or ``--model.init_from`` is a one-line error
naming the argument and the path (exit code 2), checked before anything is built.
"""
from __future__ import annotations

import os
import sys
import zipfile
from typing import List, Optional, Sequence

from pytorch_lightning.cli import LightningArgumentParser, LightningCLI

from .datamodule import MovieLensDataModule
from .module import FairRankingModule

__all__ = ["FairLightningCLI", "run_lightning", "LIGHTNING_SUBCOMMANDS", "FitArgumentError"]

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")


class FitArgumentError(ValueError):
    """A bad path in the arguments of ``torchfair fit`` (printed as one line by :func:`run_lightning`)."""


def check_checkpoint(path: str, option: str) -> None:
    """``path`` is a readable checkpoint file: it exists, is a file, and is a complete ``torch.save`` zip archive
    (a truncated copy is not); else :class:`FitArgumentError` naming ``option`` and the path."""
    if not os.path.exists(path):
        raise FitArgumentError(f"{option}: no such file: {path}")
    if not os.path.isfile(path):
        raise FitArgumentError(f"{option}: not a file: {path}")
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                if z.testzip() is None:
                    return
        except (zipfile.BadZipFile, OSError, EOFError):
            pass
    else:  # the legacy (non-zip) torch.save format: try it
        import torch

        try:
            torch.load(path, map_location="cpu", weights_only=False)
            return
        except Exception:  # noqa: BLE001 - any failure means: not a readable checkpoint
            pass
    raise FitArgumentError(f"{option}: not a readable checkpoint (truncated, or not written by torch.save / "
                           f"torchfair fit): {path}")


class _Parser(LightningArgumentParser):
    """An argument error is one line (``error: ...`` plus a hint at ``--help``) instead of the usage dump."""

    def error(self, message, ex=None):
        if not self.exit_on_error:
            return super().error(message, ex)
        self._logger.error(message)
        prog = (getattr(ex, "subcommand_parser", None) or self).prog.replace(" [options]", "")
        sys.stderr.write(f"{prog}: error: {message} ({prog} --help for the options)\n")
        self.exit(2)


class FairLightningCLI(LightningCLI):
    """``LightningCLI(FairRankingModule, MovieLensDataModule)`` with torchfair's defaults: the config of each run
    is saved next to its logs (overwritten when the run restarts).  Another data source plugs in by subclassing
    :class:`MovieLensDataModule` or, in Python, by any LightningDataModule whose batches carry the keys of
    :func:`torchfair.data.recsys.collate_lists` and which exposes ``info``."""

    def __init__(self, args: Optional[Sequence[str]] = None, run: bool = True, **kwargs):
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("parser_kwargs", {"prog": "torchfair"})
        kwargs.setdefault("parser_class", _Parser)
        super().__init__(FairRankingModule, MovieLensDataModule, args=list(args) if args is not None else None,
                         run=run, **kwargs)

    def _parse_ckpt_path(self) -> None:  # LightningCLI reads --ckpt_path's hyperparameters here (torch.load)
        self._check_paths()
        parse = getattr(super(), "_parse_ckpt_path", None)
        if parse is not None:
            parse()

    def before_instantiate_classes(self) -> None:
        self._check_paths()

    def _check_paths(self) -> None:
        """Check the checkpoint paths before anything is built or trained."""
        if getattr(self, "_paths_checked", False):
            return
        self._paths_checked = True
        sub = self.config.get("subcommand")
        cfg = self.config[sub] if sub else self.config
        ckpt = cfg.get("ckpt_path")
        if ckpt and ckpt not in ("last", "best", "hpc", "registry"):
            check_checkpoint(ckpt, "--ckpt_path")
        init = (cfg.get("model") or {}).get("init_from")
        if init:
            check_checkpoint(init, "--model.init_from")


def run_lightning(argv: Sequence[str]) -> int:
    """Run ``torchfair <fit|validate|test|predict> ...``; returns the exit code (2 for a config error)."""
    saved = sys.argv
    # LightningCLI reads the arguments from sys.argv, which also is what DDP's launcher hands to the processes it
    # starts (`torchfair fit ...` again, one per device): it must hold this command, also when called from Python
    sys.argv = sys.argv[:1] + list(argv)
    try:
        FairLightningCLI()
    except SystemExit as e:  # --help, --print_config, config errors (jsonargparse prints them)
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except FitArgumentError as e:
        print(f"torchfair {argv[0] if argv else 'fit'}: error: {e}", file=sys.stderr)
        return 2
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_lightning(sys.argv[1:]))
