"""torchfair.evaluation.registry and torchfair.evaluation: the measure registry's public names, re-exported from
torchfair.metrics.registry, where it sits below the evaluation engine (the registry itself:
tests/metrics/test_registry.py)."""
import torchfair.evaluation as ev
import torchfair.evaluation.registry as old
import torchfair.metrics.registry as R


def test_the_earlier_module_re_exports_the_public_names():
    assert set(old.__all__) <= set(R.__all__) | {"default_columns"}
    assert set(R.__all__) <= set(old.__all__)
    assert all(getattr(old, n) is getattr(R, n) for n in old.__all__)


def test_one_registry_whichever_the_address():
    """A measure registered through torchfair.evaluation is the one torchfair.metrics.registry returns."""
    spec = ev.register("a_test_measure", lambda scores: scores.sum(-1), description="a test measure")
    try:
        assert R.get_measure("a_test_measure") is spec is old.get_measure("a_test_measure")
        assert "a_test_measure" in R.available_measures()
    finally:
        ev.unregister("a_test_measure")
    assert "a_test_measure" not in old.available_measures()
    for name in ("register", "unregister", "get_measure", "available_measures", "compute_columns", "parse_request",
                 "MeasureSpec", "MeasureRequest"):
        assert getattr(ev, name) is getattr(R, name), name
