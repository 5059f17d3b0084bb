"""experiments/bench_first_call.py --fast: one cold round (empty numba cache, the background compile stopped) and a
warm call, in fresh processes; both first calls give the same DIPS, and the table is written."""
from experiment_loader import experiment_fixture

bench = experiment_fixture("bench_first_call")


def test_fast_round_times_a_cold_and_a_warm_first_call(bench, tmp_path, capsys):
    out = tmp_path / "first_call.md"
    assert bench.main(["--fast", "--out", str(out)]) == 0  # 0: the cold and the warm call agree
    text = out.read_text()
    assert "| 1 |" in text and "| cold: first dips() | warm: first dips() |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    cold = float(row.split("|")[2].strip().rstrip(" s"))
    assert 0 < cold < 60  # a time in seconds, not the half-minute compile of a cold call
    assert "| background compile |" not in text  # --fast does not wait for it
