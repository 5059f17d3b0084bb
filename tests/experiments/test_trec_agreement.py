"""experiments/trec_agreement.py: the --fast agreement table (synthetic collection and synthetic MovieLens) holds
trec_eval's own values, and the markdown is written only where asked."""
import pytest
from experiment_loader import experiment_fixture

mod = experiment_fixture("trec_agreement")


@pytest.fixture(scope="module")
def fast(mod):
    return mod.run_all(mod._parser().parse_args(["--fast"]), say=lambda *_: None)


def test_fast_tables_agree_with_trec_eval(mod, fast):
    for which in ("synthetic", "movielens"):
        res = fast[which]
        assert [r["measure"] for r in res["rows"]] == mod.NAMES
        for r in res["rows"]:
            assert r["same_queries"] and r["n"] == res["n_trec_eval"] > 0, (which, r)
            assert r["max_diff"] <= 1e-9 and r["mean_tf"] == pytest.approx(r["mean_te"], abs=1e-12), (which, r)
    # the popularity run: every user of the synthetic variant, judged = the test ratings
    assert fast["movielens"]["info"]["users"] == 60 and fast["movielens"]["info"]["judged"] == 600


def test_report_is_written_only_with_out(mod, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert mod.main(["--fast", "--queries", "20"]) == 0
    assert not (tmp_path / "experiments").exists()
    assert mod.main(["--fast", "--queries", "20", "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "trec_agreement.md").read_text()
    assert "| `map` |" in text and "NO" not in text
