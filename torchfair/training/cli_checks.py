"""The checks ``torchfair fit|validate|test|predict|sweep`` make before importing Lightning (which takes seconds):
a ``--config`` that names no file, a sweep file given as ``--config`` (the last release's spelling), and the model's
re-ranker spec and measure requests (``--model.rerank``, ``--model.measures``, from the command line or the config
files) checked in full (:mod:`torchfair.evaluation.checks`).  Each is one ``ValueError`` naming the option; this
module imports neither Lightning nor the training code.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["check_argv", "config_paths", "SWEEP_FIELDS"]

#: the fields of a sweep file (:func:`torchfair.sweeps.load_sweep`) that no file of a command's options holds
SWEEP_FIELDS = ("base", "overrides", "grid", "random", "variants")
#: the model's options that are specs, checked before Lightning is imported
_SPECS = ("rerank", "measures")


def config_paths(argv: Sequence[str]) -> List[tuple]:
    """``(index, path)`` of each ``--config PATH`` / ``-c PATH`` / ``--config=PATH`` in ``argv`` that reads as a
    path (jsonargparse also takes the config itself as a YAML string: one holding a newline, ``{`` or ``": "``)."""
    out = []
    for i, tok in enumerate(argv):
        value = tok.split("=", 1)[1] if tok.startswith("--config=") else \
            argv[i + 1] if tok in ("--config", "-c") and i + 1 < len(argv) else None
        if value is not None and not any(c in value for c in ("\n", "{", ": ")):
            out.append((i, value))
    return out


def _load(path: str) -> Any:
    import yaml

    if not os.path.exists(path):
        raise ValueError(f"--config: no such file: {path}")
    if not os.path.isfile(path):
        raise ValueError(f"--config: not a file: {path}")
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"--config: {path} is not a YAML file ({' '.join(str(e).split())[:200]})") from None


def check_argv(argv: Sequence[str]) -> None:
    """Check ``argv`` (``["fit", "--config", ...]``) before any work; ``ValueError`` naming the option otherwise.
    The model's specs are the last given, in the order jsonargparse reads them (a later config file or option
    wins), so that a value given and then replaced is not checked."""
    command, rest = (argv[0], list(argv[1:])) if argv else ("fit", [])
    configs = dict(config_paths(rest))
    model: Dict[str, Any] = {}
    for i, tok in enumerate(rest):
        if i in configs:
            content, path = _load(configs[i]), configs[i]
            if command == "sweep" and isinstance(content, dict) and set(SWEEP_FIELDS) & set(content):
                others = rest[:i] + rest[i + (1 if tok.startswith("--config=") else 2):]
                raise ValueError(f"--config {path} is a sweep file; `torchfair sweep` takes the sweep file as its "
                                 f"first argument: torchfair sweep {' '.join([path] + others)}")
            section = content.get("model") if isinstance(content, dict) else None
            if isinstance(section, dict):
                section = section.get("init_args", section) if "class_path" in section else section
                model.update({k: section[k] for k in _SPECS if isinstance(section, dict) and k in section})
        for key in _SPECS:
            for spelling in (f"--model.{key}", f"--model.init_args.{key}"):
                if tok == spelling and i + 1 < len(rest):
                    model[key] = _value(rest[i + 1])
                elif tok.startswith(spelling + "="):
                    model[key] = _value(tok.split("=", 1)[1])
    if command == "sweep":
        return
    from ..evaluation.checks import check_measures, check_rerank

    if isinstance(model.get("rerank"), str):
        check_rerank(model["rerank"], "--model.rerank")
    measures = model.get("measures")
    if isinstance(measures, str) or (isinstance(measures, list) and all(isinstance(m, str) for m in measures)):
        check_measures(measures, "--model.measures")


def _value(text: str) -> Optional[Any]:
    """A command-line value as jsonargparse reads it: YAML (``[ndcg@10, dips]``, ``null``), else the string."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
