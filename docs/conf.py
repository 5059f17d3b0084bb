"""Sphinx configuration of the torchfair docs.

``make docs``: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (every warning an error).

Generated at build time (git-ignored, see ``docs/.gitignore``): ``measures/<name>.md``, one page per declaration of
``torchfair.metrics.MEASURES``; ``results/``: the experiments index and the committed result files of
``experiments/results/``, copied with their links made local and a header saying where their numbers come from;
``api/``: one page per public package listing its ``__all__``, and (autosummary) ``api/generated/``, one page per
public function and class.
"""
import importlib.util
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS))

import torchfair  # noqa: E402

from _generate import write_api_pages, write_measure_pages, write_results_pages  # noqa: E402

project = "torchfair"
author = "the torchfair authors"
copyright = "2026, the torchfair authors"
release = getattr(torchfair, "__version__", "0.1.0")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "README.md"]
templates_path = ["_templates"]
autosummary_generate = True          # one page per public name, into api/generated/ (git-ignored)
autosummary_imported_members = True  # the packages re-export what their modules define

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# the optional extras are mocked when they are not installed, so that a core install (+ [docs]) builds the API pages
_OPTIONAL = ["pytorch_lightning", "lightning", "lightning_fabric", "jsonargparse", "pandas", "matplotlib", "optuna",
             "ray", "filelock", "pyarrow", "yaml", "tensorboard", "torchmetrics"]
autodoc_mock_imports = [m for m in _OPTIONAL if importlib.util.find_spec(m) is None]
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"          # the signatures carry the defaults; the docstrings name the shapes
autodoc_inherit_docstrings = False  # torch.nn.Module / torchmetrics docstrings are not ours to check
autodoc_warningiserror = True
napoleon_google_docstring = True
napoleon_numpy_docstring = True

doctest_global_setup = "import torch\ntorch.manual_seed(0)"
doctest_test_doctest_blocks = ""  # the docstrings' >>> examples run in tests/test_docs.py; here: {doctest} blocks

html_theme = "alabaster"
html_title = "torchfair"
html_static_path = []

write_measure_pages(DOCS / "measures")
write_results_pages(ROOT / "experiments", DOCS / "results")
write_api_pages(DOCS / "api")

