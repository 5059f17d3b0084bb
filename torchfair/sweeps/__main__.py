"""``python -m torchfair.sweeps _trial DIR``: run one trial in a fresh interpreter (the runner's trial process)."""
import sys

from .trial import _main

if __name__ == "__main__":  # pragma: no cover - the trial subprocess entry point
    sys.exit(_main(sys.argv[1:]))
