"""The generated metric classes (torchfair.evaluation.metric) have the measure's real signature."""
import inspect

import pytest
import torch

import torchfair.evaluation.metric as M
from torchfair.evaluation.registry import get_measure
from torchfair.metrics import dips

CLASSES = [n for n in M.__all__ if n not in ("FairnessMetric", "metric_class")]
DATA = {"scores", "relevance", "groups", "mask", "num_groups", "return_valid", "reduction", "validate_args"}


def _measure_of(cls):
    return cls.measure


@pytest.mark.parametrize("name", CLASSES)
def test_signature_lists_every_option_of_the_measure_function(name):
    cls = getattr(M, name)
    fn = get_measure(_measure_of(cls)).fn
    expected = {p for p, prm in inspect.signature(fn).parameters.items()
                if p not in DATA and p not in ("column", "label") and prm.kind is not inspect.Parameter.VAR_KEYWORD}
    got = set(inspect.signature(cls).parameters)
    assert got == {"num_groups", "column", "validate_args"} | expected
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in inspect.signature(cls).parameters.values())


def test_options_reach_the_measure_and_defaults_change_nothing():
    gen = torch.Generator().manual_seed(0)
    s, r = torch.randn(4, 7, generator=gen), torch.randint(0, 3, (4, 7), generator=gen).float()
    g = torch.randint(0, 2, (4, 7), generator=gen)
    g[:, 0], g[:, 1] = 0, 1
    m = M.DIPS(tie_weight=0.0, browsing="uniform")
    m.update(s, r, g)
    ref = dips(s, r, g, tie_weight=0.0, browsing="uniform", num_groups=2)
    got = m.compute()
    assert torch.allclose(got["dips_gap"].double(), (ref[..., 0, 1] - ref[..., 1, 0]).double().mean(), atol=1e-6)
    # every default given explicitly (as LightningCLI does): the same request, columns and values
    defaults = {p.name: p.default for p in inspect.signature(M.DIPS).parameters.values()}
    a, b = M.DIPS(), M.DIPS(**defaults)
    assert a.request.options == b.request.options and a.columns == b.columns


def test_unknown_option_names_it():
    with pytest.raises(ValueError, match="tie_wieght"):
        M.DIPS(tie_wieght=0.0)


def test_lightningcli_parser_sees_the_options():
    from jsonargparse import ArgumentParser

    p = ArgumentParser()
    p.add_class_arguments(M.NDCG, "metric")
    ns = p.parse_args(["--metric.k", "5", "--metric.gain", "linear"])
    assert ns.metric.k == 5 and ns.metric.gain == "linear"
    m = M.NDCG(**vars(ns.metric))
    assert m.request.options == {"k": 5, "gain": "linear"}


def test_renamed_names_still_work_with_a_deprecation_warning():
    """``evaluation.evaluate`` is ``evaluate_lists`` and the RBP metric class is ``RankBiasedPrecision`` (``RBP`` is
    the browsing model); the old names keep working, with a DeprecationWarning."""
    import pytest

    import torchfair.evaluation as ev
    from torchfair.browsing import RBP as BrowsingRBP

    with pytest.warns(DeprecationWarning, match="evaluate_lists"):
        assert ev.evaluate is ev.evaluate_lists
    with pytest.warns(DeprecationWarning, match="RankBiasedPrecision"):
        assert ev.RBP is ev.RankBiasedPrecision
    assert ev.RankBiasedPrecision is not BrowsingRBP and "RBP" not in ev.__all__
    with pytest.raises(AttributeError):
        ev.no_such_name
