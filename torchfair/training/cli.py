"""``torchfair fit / validate / test / predict``: :class:`FairLightningCLI`, a ``LightningCLI`` over
:class:`~torchfair.training.FairRankingModule` and :class:`~torchfair.training.MovieLensDataModule`.

Configured by YAML (``--config configs/ml100k_dips.yaml``) and overridden from the command line
(``--model.lam 0.5 --trainer.max_epochs 5 --trainer.accelerator gpu``); everything ``LightningCLI`` offers works:
``--print_config``, ``--ckpt_path`` (resume), ``seed_everything``, callbacks and loggers by ``class_path``.
A misspelt key gets ``LightningCLI``'s error naming the key, in one line with a hint at ``--help`` (no usage
dump), with exit code 2.  A missing or unreadable ``--ckpt_path`` or ``--model.init_from`` is a one-line error
naming the argument and the path (exit code 2), checked before anything is built; a ``--config`` naming no file
and a bad ``--model.rerank`` / ``--model.measures`` spec are answered before Lightning is even imported
(:mod:`torchfair.training.cli_checks`, which ``torchfair`` runs first).  Every line comes from the one formatter,
:func:`torchfair._extras.error_line`.

Every numeric argument with a range declares it in its signature (jsonargparse's ``NonNegativeFloat``,
``PositiveInt``... in :class:`~torchfair.training.FairRankingModule`, :class:`~torchfair.training.MovieLensDataModule`
and the rankers), so a value out of range is refused while parsing, in one line naming the option
(``torchfair fit: error: --model.lam must be a number >= 0 (NonNegativeFloat); got -1``), exit code 2.  A check
across arguments that fails while the classes are built (``ValueError``, e.g. ``--data.split random`` with
``test_fraction + val_fraction >= 1``) is the same kind of one line, before anything trains.  At the end of ``fit``
the checkpoint paths (best and last) and the last validation's metrics are printed.

The last epoch is always validated (:class:`ValidateLastEpoch`): a run shortened below its config's
``check_val_every_n_epoch`` (``--trainer.max_epochs 3`` on a config validating every 10 epochs) still ends with
validation metrics and a monitored best checkpoint.  Lightning's own output is quiet by default: no
GPU/TPU/HPU banner, no "Tip" lines, no model summary (unless ``--trainer.enable_model_summary true``), and
none of the deprecation warnings Lightning raises about its own use of jsonargparse and torch; ``--verbose``
brings the banner, the tips and the summary back.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import re
import sys
import traceback
import warnings
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pytorch_lightning import Callback
from pytorch_lightning.cli import LightningCLI

from .._extras import error_line, error_text
from .cli_checks import check_argv
from .datamodule import MovieLensDataModule
from .module import FairRankingModule

__all__ = ["FairLightningCLI", "run_lightning", "LIGHTNING_SUBCOMMANDS", "FitArgumentError", "ValidateLastEpoch"]

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


def _raised_in(exc: BaseException, config: Any) -> Tuple[Optional[str], Optional[type]]:
    """The config key (``"model"``, ``"data"``, ``"model.fairness_loss.init_args"``...) and the class of the object
    whose ``__init__`` raised ``exc``: the outermost constructor in the traceback that is the model, the data module,
    or a class given by ``class_path`` in ``config``; ``(None, None)`` when none is."""
    import pytorch_lightning as pl

    paths: Dict[str, str] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, (list, tuple)):
            for i, x in enumerate(node):
                walk(x, f"{key}.{i}")
        elif isinstance(node, dict):
            if isinstance(node.get("class_path"), str):
                paths.setdefault(node["class_path"], f"{key}.init_args")
                try:  # also by the class's own module (`torchfair.losses.X` is `torchfair.losses.module.X`)
                    module, _, name = node["class_path"].rpartition(".")
                    cls = getattr(importlib.import_module(module), name)
                    paths.setdefault(f"{cls.__module__}.{cls.__qualname__}", f"{key}.init_args")
                except Exception:  # noqa: BLE001 - not importable: matched by its written path only
                    pass
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))

    try:
        walk(config.as_dict() if hasattr(config, "as_dict") else dict(config), "")
    except Exception:  # noqa: BLE001 - naming the option is a courtesy: never fail on it
        paths = {}
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        obj = frame.f_locals.get("self") if frame.f_code.co_name == "__init__" else None
        if obj is None:
            continue
        if isinstance(obj, pl.LightningModule):
            return "model", type(obj)
        if isinstance(obj, pl.LightningDataModule):
            return "data", type(obj)
        if isinstance(obj, pl.Trainer):
            return "trainer", type(obj)
        where = paths.get(f"{type(obj).__module__}.{type(obj).__qualname__}")
        if where is not None:
            return where, type(obj)
    return None, None


def _options_of(key: Optional[str], cls: Optional[type]) -> Dict[str, str]:
    """The arguments of ``cls``, the class configured at ``key``, as their options: ``{"lam": "--model.lam"}``."""
    if not key or cls is None:
        return {}
    try:
        return {name: f"--{key}.{name}" for name in inspect.signature(cls).parameters}
    except (TypeError, ValueError):  # pragma: no cover
        return {}


class _HoldRecords(logging.Filter):
    """A logging filter keeping the records it stops (to be handled later)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: List[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


class ValidateLastEpoch(Callback):
    """Validate the last epoch of a fit (epoch ``max_epochs``) also when ``check_val_every_n_epoch`` does not
    divide ``max_epochs``: a fit shortened below its validation cadence (``max_epochs=3`` with
    ``check_val_every_n_epoch=10``) otherwise ends with no validation metric and no monitored checkpoint.

    At the start of that epoch the trainer's ``check_val_every_n_epoch`` is set to the epoch's number, so that
    Lightning's own loop validates at its end (and ``ModelCheckpoint`` saves after that validation); the value is
    put back when training ends.  Nothing changes when the cadence already validates the last epoch, when it is
    ``1`` or ``None`` (validation by batches), or when validation is off (``limit_val_batches=0``, no
    ``validation_step``).  A fit that stops before ``max_epochs`` (``max_steps``, ``max_time``, early stopping) is
    not caught.  ``torchfair fit`` adds it; in Python::

        trainer = pl.Trainer(max_epochs=3, check_val_every_n_epoch=10, callbacks=[ValidateLastEpoch()])
    """

    def __init__(self) -> None:
        self._cadence: Optional[int] = None  # the trainer's value while this callback has replaced it

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        every, epoch, last = trainer.check_val_every_n_epoch, trainer.current_epoch + 1, trainer.max_epochs
        if every is None or every <= 1 or epoch % every == 0 or last is None or epoch != last:
            return
        if self._cadence is None:
            self._cadence = every
        trainer.check_val_every_n_epoch = epoch

    def _restore(self, trainer: Any) -> None:
        if self._cadence is not None:
            trainer.check_val_every_n_epoch, self._cadence = self._cadence, None

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._restore(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._restore(trainer)


#: the loggers of Lightning's ``rank_zero_info`` lines (the package's, and the unified ``lightning`` package's)
_RANK_ZERO_LOGGERS = ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero")
#: the lines of those loggers that ``torchfair fit`` drops unless ``--verbose``: the accelerator banner and tips
_BANNER = re.compile(r"^(GPU|TPU|HPU|IPU) available: |^\W*Tip: ")
#: (category, message, module) of the warnings Lightning raises about its own calls, which no user of ``torchfair
#: fit`` can act on: jsonargparse's deprecations (``add_instantiator``, ``instantiate_classes``, ``skip_none``: a
#: ``DeprecationWarning`` subclass) attributed to ``pytorch_lightning.cli``, torch's ``LeafSpec`` deprecation
#: attributed to Lightning's ``_pytree`` helper
_LIGHTNING_WARNINGS = ((DeprecationWarning, "", r"(pytorch_lightning|lightning\.pytorch)\.cli$"),
                       (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                        r"(pytorch_lightning|lightning\.pytorch)\.utilities\._pytree$"))


class _QuietBanner(logging.Filter):
    """Drops Lightning's banner and tip lines while ``cli`` is not verbose."""

    def __init__(self, cli: "FairLightningCLI") -> None:
        super().__init__()
        self.cli = cli

    def filter(self, record: logging.LogRecord) -> bool:
        return self.cli.verbose or not _BANNER.search(str(record.msg))


def _filter_lightning_warnings() -> None:
    """Ignore :data:`_LIGHTNING_WARNINGS` (within a ``warnings.catch_warnings()`` block of the caller)."""
    for category, message, module in _LIGHTNING_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class FairLightningCLI(LightningCLI):
    """``LightningCLI(FairRankingModule, MovieLensDataModule)`` with torchfair's defaults: the config of each run
    is saved next to its logs (overwritten when the run restarts).  Another data source plugs in by subclassing
    :class:`MovieLensDataModule` or, in Python, by any LightningDataModule whose batches carry the keys of
    :func:`torchfair.data.recsys.collate_lists` and which exposes ``info``.

    Only LightningCLI's public hooks are used: ``parser_kwargs`` (``exit_on_error=False`` for the main parser and
    every subcommand's: a bad argument raises ``argparse.ArgumentError``, which :func:`run_lightning` prints as one
    line), :meth:`parse_arguments` (the checkpoint paths are checked right after parsing, before LightningCLI
    reads ``--ckpt_path``'s hyperparameters with ``torch.load``: its own step then only meets readable files),
    :meth:`instantiate_classes`, :meth:`instantiate_trainer`, :meth:`add_arguments_to_parser`, :meth:`subcommands`
    and ``after_fit``.

    Quiet by default, ``--verbose`` for Lightning's output: the accelerator banner and the tips are dropped from
    Lightning's log, the model summary is off unless ``--trainer.enable_model_summary`` is given, and the warnings
    Lightning raises about its own calls are ignored while the CLI runs.  ``--verbose`` (every subcommand; it
    replaces the ``verbose`` argument of ``Trainer.validate`` / ``test`` / ``predict``, whose results table is
    always printed) brings the banner, the tips and the summary back.  :class:`ValidateLastEpoch` is added to the
    trainer's callbacks (``validate_last_epoch = False`` in a subclass leaves it out: a sweep's trial validates
    after its fit itself)."""

    #: add :class:`ValidateLastEpoch` to the trainer's callbacks
    validate_last_epoch: bool = True
    #: ``--verbose``'s value (known once the arguments are parsed)
    verbose: bool = False

    def __init__(self, args: Optional[Sequence[str]] = None, run: bool = True, **kwargs):
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        if self.validate_last_epoch:
            defaults = dict(kwargs.pop("trainer_defaults", None) or {})
            given = defaults.get("callbacks") or []
            defaults["callbacks"] = (list(given) if isinstance(given, (list, tuple)) else [given]) + \
                [ValidateLastEpoch()]
            kwargs["trainer_defaults"] = defaults
        parser_kwargs = {"prog": "torchfair", "exit_on_error": False, **(kwargs.pop("parser_kwargs", None) or {})}
        for sub in LIGHTNING_SUBCOMMANDS:
            parser_kwargs[sub] = {"prog": f"torchfair {sub}", "exit_on_error": parser_kwargs["exit_on_error"],
                                  **parser_kwargs.get(sub, {})}
        # LightningCLI logs "Seed set to N" (seed_everything) before it builds the classes: held back until they are
        # built, so that a config error is the only line printed
        import pytorch_lightning as pl

        self._seed_logger, self._held = logging.getLogger(pl.seed_everything.__module__), _HoldRecords()
        self._seed_logger.addFilter(self._held)
        quiet, banner = _QuietBanner(self), [logging.getLogger(name) for name in _RANK_ZERO_LOGGERS]
        for logger in banner:
            logger.addFilter(quiet)
        try:
            with warnings.catch_warnings():
                _filter_lightning_warnings()
                super().__init__(FairRankingModule, MovieLensDataModule,
                                 args=list(args) if args is not None else None, run=run, parser_kwargs=parser_kwargs,
                                 **kwargs)
        finally:
            self._seed_logger.removeFilter(self._held)
            for logger in banner:
                logger.removeFilter(quiet)

    @staticmethod
    def subcommands() -> Dict[str, set]:
        """LightningCLI's subcommands; ``Trainer.validate`` / ``test`` / ``predict``'s ``verbose`` is left to its
        default (the results table is printed): ``--verbose`` is torchfair's, for Lightning's output."""
        return {sub: set(skip) | ({"verbose"} if sub != "fit" else set())
                for sub, skip in LightningCLI.subcommands().items()}

    def add_arguments_to_parser(self, parser) -> None:
        """``--verbose``: Lightning's banner, tips and model summary (quiet by default)."""
        parser.add_argument("--verbose", type=bool, nargs="?", const=True, default=False,
                            help="print Lightning's output too: the GPU/TPU banner, its tips and the model summary "
                                 "(off by default)")

    def instantiate_trainer(self, **kwargs: Any):
        """LightningCLI's trainer; without ``--verbose`` and without ``--trainer.enable_model_summary``, no model
        summary."""
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        if not self.verbose and (config.get("trainer") or {}).get("enable_model_summary") is None:
            kwargs.setdefault("enable_model_summary", False)
        return super().instantiate_trainer(**kwargs)

    def parse_arguments(self, parser, args) -> None:
        """LightningCLI's parsing, then the checkpoint paths (before anything reads or builds)."""
        super().parse_arguments(parser, args)
        sub = self.config.get("subcommand")
        self.verbose = bool((self.config[sub] if sub else self.config).get("verbose"))
        self._check_paths()

    def instantiate_classes(self) -> None:
        """Build the classes; a ``ValueError`` of a constructor (a check across arguments, which parsing cannot
        make; or the Trainer's ``MisconfigurationException``) becomes a :class:`FitArgumentError` naming the
        options, printed as one line by :func:`run_lightning`, before anything trains."""
        from pytorch_lightning.utilities.exceptions import MisconfigurationException

        try:
            super().instantiate_classes()
        except FitArgumentError:
            raise
        except (ValueError, MisconfigurationException) as e:
            sub = self.config.get("subcommand")
            config = self.config[sub] if sub else self.config
            # jsonargparse re-raises a constructor's error of a `class_path` argument as a union error: the
            # constructor's own is in the chain
            source, key, cls = e, None, None
            chain: BaseException = e
            for _ in range(8):
                key, cls = _raised_in(chain, config)
                nxt = chain.__cause__ or chain.__context__
                if key is not None or nxt is None:
                    source = chain if key is not None else e
                    break
                chain = nxt
            raise FitArgumentError(error_text(source, _options_of(key, cls), where=key and f"--{key}")) from e
        self._seed_logger.removeFilter(self._held)
        for record in self._held.records:
            self._seed_logger.handle(record)
        self._held.records.clear()

    def after_fit(self) -> None:
        """Print where the checkpoints are (best and last) and the last validation's metrics (rank 0 only)."""
        if getattr(self.trainer, "is_global_zero", True):
            print("\n".join(_fit_summary(self.trainer)), flush=True)

    def _check_paths(self) -> None:
        """Check the checkpoint paths before anything is read, built or trained."""
        sub = self.config.get("subcommand")
        cfg = self.config[sub] if sub else self.config
        ckpt = cfg.get("ckpt_path")
        if ckpt and ckpt not in ("last", "best", "hpc", "registry"):
            check_checkpoint(ckpt, "--ckpt_path")
        init = (cfg.get("model") or {}).get("init_from")
        if init:
            check_checkpoint(init, "--model.init_from")


def _fit_summary(trainer: Any) -> List[str]:
    """The lines printed at the end of ``torchfair fit``: each checkpoint file of the trainer's
    ``ModelCheckpoint`` callbacks (``best`` with its monitored score, ``last``), absolute paths, and the validation
    metrics the trainer holds (``trainer.callback_metrics`` under ``val/``: those of the last validation), as an
    aligned table.

    Example (a fit of one epoch)::

        checkpoint best: /runs/ml100k_listnet/version_0/checkpoints/best-epoch=0.ckpt  (val/ndcg@10 = 0.0312)
        checkpoint last: /runs/ml100k_listnet/version_0/checkpoints/last.ckpt
        validation metrics after 1 epoch(s), 15 step(s):
          val/ndcg@10       0.0312
          val/utility_loss  5.1254
    """
    lines: List[str] = []
    seen = set()
    for cb in getattr(trainer, "checkpoint_callbacks", None) or []:
        for kind, path in (("best", getattr(cb, "best_model_path", "")), ("last", getattr(cb, "last_model_path", ""))):
            if not path or not os.path.isfile(path) or (kind, os.path.abspath(path)) in seen:
                continue
            seen.add((kind, os.path.abspath(path)))
            line = f"checkpoint {kind}: {os.path.abspath(path)}"
            score = getattr(cb, "best_model_score", None)
            if kind == "best" and score is not None and getattr(cb, "monitor", None):
                line += f"  ({cb.monitor} = {float(score):.4f})"
            lines.append(line)
    if not lines:
        lines.append("no checkpoint saved (checkpointing disabled, fast_dev_run, or no epoch completed)")
    metrics = {k: v for k, v in (getattr(trainer, "callback_metrics", None) or {}).items() if k.startswith("val/")}
    if metrics:
        lines.append(f"validation metrics after {trainer.current_epoch} epoch(s), {trainer.global_step} step(s):")
        width = max(len(k) for k in metrics)
        for k in sorted(metrics):
            lines.append(f"  {k:<{width}}  {float(metrics[k]):.4f}")
    else:
        lines.append("no validation metrics logged")
    return lines


def run_lightning(argv: Sequence[str]) -> int:
    """Run ``torchfair <fit|validate|test|predict> ...``; returns the exit code (2 for a config error, printed as
    one line: :func:`torchfair._extras.error_line`)."""
    command = argv[0] if argv else "fit"
    try:
        check_argv(argv)  # config files and the model's specs (torchfair.cli checks them before importing Lightning)
    except ValueError as e:
        return print(error_line(command, e), file=sys.stderr) or 2
    saved = sys.argv
    # LightningCLI reads the arguments from sys.argv, which also is what DDP's launcher hands to the processes it
    # starts (`torchfair fit ...` again, one per device): it must hold this command, also when called from Python
    sys.argv = sys.argv[:1] + list(argv)
    try:
        FairLightningCLI()
    except SystemExit as e:  # --help, --print_config
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except argparse.ArgumentError as e:  # jsonargparse's (exit_on_error=False)
        print(error_line(command, e, hint=True), file=sys.stderr)
        return 2
    except FitArgumentError as e:
        print(error_line(command, e), file=sys.stderr)
        return 2
    finally:
        sys.argv = saved
        _end_process_group()
    return 0


def _end_process_group() -> None:
    """Destroy the DDP process group this command created, if any: a gloo group left to the interpreter's exit
    can abort the process (``terminate called without an active exception``, exit code -6) after a finished fit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_lightning(sys.argv[1:]))
