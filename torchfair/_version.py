"""The version of torchfair, in a module of its own at the bottom of the package, so that a module anywhere in it
(the CLI's usage line, a sweep trial's provenance) reads it without importing the package root, which imports
the subpackages; ``torchfair.__version__`` re-exports it.  It equals ``version`` in pyproject.toml (tested)."""

__version__ = "0.1.0"
