"""Property tests of the fuzzed re-ranker defects: a measure's default group id absent from a batch leaves every
list as the scores rank it, for every declared measure with such a default."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchfair.rerank import targeted_rerank

import inspect

from torchfair.metrics import MEASURES

# the fairness measures with a default protected group id >= 1 that a re-rank can target without a reducer of its
# own (a declared loss reducer, an ordering): read from the declarations, written out so a change shows here
DEFAULT_PROTECTED_1 = ["rnd", "rrd", "rkl", "pref", "disparate_exposure"]


def test_the_list_is_every_such_measure():
    found = sorted(n for n, m in MEASURES.items() if m.kind == "fairness" and m.loss is not None
                   and "ordering" in inspect.signature(m.fn).parameters
                   and isinstance(inspect.signature(m.fn).parameters.get("protected", None) and
                                  inspect.signature(m.fn).parameters["protected"].default, int)
                   and inspect.signature(m.fn).parameters["protected"].default >= 1)
    assert found == sorted(DEFAULT_PROTECTED_1)


@pytest.mark.parametrize("measure", DEFAULT_PROTECTED_1)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_default_group_absent_from_the_batch_leaves_every_list_as_ranked(measure, data):
    B = data.draw(st.integers(1, 3), label="B")
    N = data.draw(st.integers(1, 9), label="N")
    values = st.floats(-5, 5, allow_nan=False, width=32)
    scores = torch.tensor(data.draw(st.lists(st.lists(values, min_size=N, max_size=N), min_size=B, max_size=B)))
    groups = torch.zeros(B, N, dtype=torch.long)  # one group: id 0 only
    out = targeted_rerank(scores, groups, measure=measure)
    want = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    assert out.ranking.tolist() == want.tolist()
    assert torch.isfinite(out.objective).all()
