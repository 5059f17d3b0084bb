"""What a result JSON records about how it was made: ``{"commit", "date", "machine", "command"}`` under the key
``provenance`` (the docs site's results pages print it as their header, ``docs/_generate.py``)."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]


def commit() -> Optional[str]:
    """The checkout's commit (``+dirty`` when tracked files differ from it), or ``None`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine() -> str:
    """CPUs, architecture, the load average when the result was written, and a GPU when torch sees one."""
    parts = [f"{os.cpu_count()} CPUs ({platform.machine()}, {platform.system()})"]
    try:
        parts.append("load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg()))
    except OSError:  # pragma: no cover - no load average here
        pass
    try:
        import torch

        if torch.cuda.is_available():
            parts.append(f"GPU {torch.cuda.get_device_name(0)}")
    except Exception:  # pragma: no cover - torch missing
        pass
    return ", ".join(parts)


def provenance(argv: Optional[Sequence[str]] = None, script: Optional[str] = None) -> Dict[str, Optional[str]]:
    """The ``provenance`` block of a result written now by ``python <script> <argv>`` (default: this process's)."""
    script = script or os.path.relpath(sys.argv[0], ROOT)
    argv = sys.argv[1:] if argv is None else list(argv)
    return {"commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "command": " ".join(["python", script, *map(shlex.quote, argv)])}
