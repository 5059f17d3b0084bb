"""experiments/bench_first_call.py --fast: the first dips() on 4 x 50 in fresh processes on an empty numba cache and
then on the cache it left: the same bits, no child process, and the table is written."""
from experiment_loader import experiment_fixture

bench = experiment_fixture("bench_first_call")


def test_fast_round_times_a_cold_and_a_warm_first_call(bench, tmp_path):
    out = tmp_path / "first_call.md"
    assert bench.main(["--fast", "--out", str(out)]) == 0  # 0: the same bits cold and warm, no child process
    text = out.read_text()
    assert "| cold: first dips() | warm: first dips() |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    cold = float(row.split("|")[2].strip().rstrip(" s"))
    assert cold >= 0
    assert "Same bits cold and warm: **yes**" in text and "pairs:torch" in text  # 4 x 50: the torch code
    assert out.with_suffix(".json").exists()
