"""torchfair.evaluation.metric: the Metric classes' earlier address re-exports them from torchfair.metrics.classes
(the classes themselves: tests/metrics/test_classes.py)."""
import pickle

import pytest

pytest.importorskip("torchmetrics")

import torchfair.evaluation.metric as old  # noqa: E402
import torchfair.metrics.classes as M  # noqa: E402


def test_the_earlier_module_re_exports_the_classes():
    """``torchfair.evaluation.metric`` (where a factory made them) names the same objects, and only them."""
    assert old.__all__ == M.__all__
    assert all(getattr(old, n) is getattr(M, n) for n in M.__all__)
    assert {n for n in vars(old) if not n.startswith("_")} == set(M.__all__)


def test_a_class_pickles_by_its_home():
    """A pickled metric names torchfair.metrics.classes; one pickled under the earlier module name still loads."""
    m = old.NDCG(k=3)
    assert b"torchfair.metrics.classes" in pickle.dumps(m)
    assert pickle.loads(pickle.dumps(m)).request.options == {"k": 3}
    earlier = pickle.dumps(M.NDCG, protocol=0).replace(b"torchfair.metrics.classes", b"torchfair.evaluation.metric")
    assert b"torchfair.evaluation.metric" in earlier and pickle.loads(earlier) is M.NDCG
