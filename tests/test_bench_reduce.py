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


def test_below_the_judges_line_rate_the_unit_back_pressures():
    """Two-flit chunks at 4 ports: the one judge serves a port every 4 cycles, so a port's
    chunks enter at 2 flits per 4 cycles once its hold FIFO (`judge_hold_flits` = chunk_flits
    + ports + 2 = 8 flits, its write register's included) has filled: the sustained rate is 0.5
    (hand-derived: chunk_flits / (ports × ⌈chunk_flits / ports⌉)), the measured window shorter
    only by the FIFO's initial fill (at most its 8 flits taken ahead of the judge) and the
    spread of the ports' first turns (up to 3 cycles)."""
    run = bench_line_rate(ports=4, lanes=1, slots=8, chunk_flits=2, chunks=48)
    flits = 48 * 2
    assert 0.5 <= run["in_flits_per_cycle_per_port"] <= flits / (2 * flits - 8 - 3)
    assert run["out_flits_per_cycle_per_port"] <= run["in_flits_per_cycle_per_port"] + 0.01
