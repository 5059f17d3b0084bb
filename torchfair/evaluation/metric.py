"""The Metric classes' earlier address: re-exported from :mod:`torchfair.metrics.classes`.

The torchmetrics classes (``FairnessMetric``, ``DIPS``, ``NDCG``...) are defined beside the measures, in
:mod:`torchfair.metrics.classes`, over the measure registry (:mod:`torchfair.metrics.registry`), and public as
``torchfair.metrics.DIPS``; this module keeps ``from torchfair.evaluation.metric import DIPS`` (and pickles that
name it) working.  It needs the ``[torchmetrics]`` extra, as they do.
"""
from ..metrics.classes import *  # noqa: F401,F403 - the public classes, listed in __all__
from ..metrics.classes import __all__  # noqa: F401
