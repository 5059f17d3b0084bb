"""``torchfair fit / validate / test / predict``: :class:`FairLightningCLI`, a ``LightningCLI`` over
:class:`~torchfair.training.FairRankingModule` and :class:`~torchfair.training.MovieLensDataModule`.

Configured by YAML (``--config configs/ml100k_dips.yaml``) and overridden from the command line
(``--model.lam 0.5 --trainer.max_epochs 5 --trainer.accelerator gpu``); everything ``LightningCLI`` offers works:
``--print_config``, ``--ckpt_path`` (resume), ``seed_everything``, callbacks and loggers by ``class_path``.
A misspelt key gets ``LightningCLI``'s error naming the key, in one line with a hint at ``--help`` (no usage
dump), with exit code 2.  A missing or unreadable ``--ckpt_path`` or ``--model.init_from`` is a one-line error
naming the argument and the path (exit code 2), checked before anything is built.

Every numeric argument with a range declares it in its signature (jsonargparse's ``NonNegativeFloat``,
``PositiveInt``... in :class:`~torchfair.training.FairRankingModule`, :class:`~torchfair.training.MovieLensDataModule`
and the rankers), so a value out of range is refused while parsing, in one line naming the option
(``torchfair fit: error: --model.lam must be a number >= 0 (NonNegativeFloat); got -1``), exit code 2.  A check
across arguments that fails while the classes are built (``ValueError``, e.g. ``--data.split random`` with
``test_fraction + val_fraction >= 1``) is the same kind of one line, before anything trains.  At the end of ``fit``
the checkpoint paths (best and last) and the last validation's metrics are printed.
"""
from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import traceback
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

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


def _range_type(name: str) -> Optional[type]:
    """The jsonargparse range type called ``name`` (``PositiveInt``, ``UnitIntervalClosedOpen``...), if any."""
    from jsonargparse.typing import registered_types

    for tp in list(registered_types.values()):
        if getattr(tp, "__name__", None) == name and hasattr(tp, "_expression"):
            return tp
    return None


def _one_line_error(message: str) -> str:
    """jsonargparse's (multi-line) error ``message`` as one line naming the option.

    ``'Parser key "model.lam":\\n  Not of type NonNegativeFloat: -1 does not conform to restriction v>=0'`` ->
    ``'--model.lam must be a number >= 0 (NonNegativeFloat); got -1'``; a choice, a type or a union error is
    reworded the same way; a message of another form keeps its words, its lines joined by ``"; "``."""
    text = str(message).strip()
    m = re.match(r'Parser key "([^"]+)":\s*(.*)', text, re.S)
    if m is None:
        return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
    option, rest = "--" + m.group(1), m.group(2)
    given = re.search(r"Given value: ([^\n]*)", rest)
    r = re.search(r"Not of type (\w+): ([^\n]*)", rest)
    tp = _range_type(r.group(1)) if r is not None else None
    if tp is not None:
        from .rankers import _range_text

        want = f"must be {_range_text(tp)} ({tp.__name__})"
        c = re.match(r"(?:(.*?) )?does not conform to restriction", r.group(2))
        if c is not None:
            value = c.group(1) or (given.group(1).strip() if given else "?")
            return f"{option} {want}; got {value}"
        return f"{option} {want}: {r.group(2).strip()}"
    c = re.match(r"Expected a typing\.Literal\[(.*)\]\. Got value: (.*)", " ".join(rest.split()))
    if c is not None:
        return f"{option} must be one of {c.group(1)}; got {c.group(2)}"
    c = re.match(r"Expected a <class '(\w+)'>\. Got value: (.*)", " ".join(rest.split()))
    if c is not None:
        return f"{option} must be of type {c.group(1)}; got {c.group(2)}"
    if rest.startswith("Does not validate against any of the Union subtypes"):
        errors = [" ".join(e.split()) for e in re.findall(r"^\s*- (.*)$", rest, re.M)]
        value = given.group(1).strip() if given else "?"
        return f"{option}: got {value}; " + "; ".join(e[0].lower() + e[1:] for e in errors if e)
    return f"{option}: " + " ".join(rest.split())


class _Parser(LightningArgumentParser):
    """An argument error is one line (``error: ...`` plus a hint at ``--help``) instead of the usage dump."""

    def error(self, message, ex=None):
        if not self.exit_on_error:
            return super().error(message, ex)
        self._logger.error(message)
        prog = (getattr(ex, "subcommand_parser", None) or self).prog.replace(" [options]", "")
        sys.stderr.write(f"{prog}: error: {_one_line_error(message)} ({prog} --help for the options)\n")
        self.exit(2)


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


def _name_options(message: str, key: Optional[str], cls: Optional[type]) -> str:
    """Write the argument names quoted in ``message`` (`` `lam` ``, `` `test_fraction + val_fraction` ``) as the
    options (``--model.lam``...) when they are arguments of ``cls``, the class configured at ``key``; prefix
    ``--key:`` when the message names none."""
    import inspect

    if not key or cls is None:
        return message
    try:
        names = set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        names = set()

    def option(span: re.Match) -> str:
        return re.sub(r"(?<![\w.-])([A-Za-z_]\w*)", lambda w: f"--{key}.{w.group(1)}" if w.group(1) in names
                      else w.group(1), span.group(0))

    out = re.sub(r"`[^`]+`", option, message)
    return out if f"--{key}." in out else f"--{key}: {out}"


class _HoldRecords(logging.Filter):
    """A logging filter keeping the records it stops (to be handled later)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: List[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


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

    def _set_seed(self) -> None:
        """LightningCLI's seeding, with its log line ("Seed set to 0") held back until the classes are built: a
        config error is then the only line printed."""
        import pytorch_lightning as pl

        logger = logging.getLogger(pl.seed_everything.__module__)
        hold = _HoldRecords()
        logger.addFilter(hold)
        try:
            super()._set_seed()
        finally:
            logger.removeFilter(hold)
        self._held_logs = (logger, hold.records)

    def before_instantiate_classes(self) -> None:
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
            raise FitArgumentError(_name_options(" ".join(str(source).split()), key, cls)) from e
        logger, records = getattr(self, "_held_logs", (None, []))
        for record in records:
            logger.handle(record)
        self._held_logs = (None, [])

    def after_fit(self) -> None:
        """Print where the checkpoints are (best and last) and the last validation's metrics (rank 0 only)."""
        if getattr(self.trainer, "is_global_zero", True):
            print("\n".join(_fit_summary(self.trainer)), flush=True)

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
