"""``innet bench reduce``: sustained rates come from the simulated RTL."""

from sim.bench.reduce import bench_line_rate


def test_line_rate_with_skew_and_its_drop_under_shuffled_order():
    same = bench_line_rate(ports=4, lanes=1, slots=8, chunk_flits=4, chunks=24, skew=3)
    assert same["in_flits_per_cycle_per_port"] == 1.0
    assert same["out_flits_per_cycle_per_port"] == 1.0
    assert same["latency_cycles"] >= 4 + 3 * 3   # the last port's skew, plus the chunk
    shuffled = bench_line_rate(ports=4, lanes=1, slots=4, chunk_flits=4, chunks=24,
                               order="shuffled")
    assert shuffled["in_flits_per_cycle_per_port"] < 1.0
