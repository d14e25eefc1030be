"""Reliability, short versions of the benchmarks (docs/hw.md, Reliability): the soak with every
fault class and a reset on the RTL switch, bit-identical results over arrival permutations, the
soak scoreboard's own failure detection, and fuzzing of the tools' inputs."""

import numpy as np
import pytest

from hw.packet import USER_LAYOUT, DType, Kind, encode
from sim.cosim.stimulus import memory_words, tdata
from sim.reliability.soak import FAULTS, SoakConfig, SoakDriver

from .conftest import require_simulator


@pytest.mark.slow
def test_soak_with_faults_and_reset_is_clean():
    """12,000 cycles on the 8-port switch (Verilator): three jobs (int32 saturating, fp32,
    bf16; two of them changing groups), memory traffic, idle gaps, egress backpressure, every
    malformed-packet class, one reset. Nothing lost, duplicated or corrupted; every counter
    equals the faults injected since the reset. (At 8c4c30d: 1,387 reductions, 1,965 memory
    packets, 71 reconfigurations, each fault class one to seven times.)"""
    require_simulator("verilator")
    from sim.bench.soak import soak_rtl
    stats = soak_rtl(12_000, seed=3, resets=1, optimize=False)
    assert stats["failures"] == []
    assert stats["lost"] == stats["duplicated"] == stats["mismatches"] == 0
    assert stats["resets"] == 1 and stats["reconfigurations"] > 0
    assert stats["reductions"] > 500 and stats["memory_packets"] > 500
    assert all(stats["faults_injected"][kind] > 0 for kind in FAULTS), stats["faults_injected"]
    assert sum(stats["counters"].values()) > 0


@pytest.mark.slow
def test_results_bit_identical_over_arrival_orders():
    require_simulator("verilator")
    from sim.bench.numerics import permutations_rtl
    stats = permutations_rtl(90, optimize=False)
    assert stats["mismatches"] == 0
    assert stats["distinct_orders"] == 90
    assert not any(stats["errors"].values())
    assert stats["naive_distinct"]["fp32"] > 1   # the values are order-sensitive


def _driver_with_outstanding_chunk():
    driver = SoakDriver(SoakConfig(ports=4, fault_rate=0, chunk_faults=0, mem_rate=0), seed=5)
    while driver.config_write():
        pass
    driver.drive({})
    job = next(j for j in driver.jobs if j.outstanding)
    seq, (rows, left) = next(iter(job.outstanding.items()))
    return driver, job, seq, rows, sorted(left)


def _result_beats(job, seq, rows, dst):
    user = encode(USER_LAYOUT, {"kind": Kind.REDUCE_RESULT, "dtype": job.dtype, "job": job.job,
                                "slot": job.base + seq % job.count, "seq": seq})
    return [(row, user, dst, 0, int(f == len(rows) - 1)) for f, row in enumerate(rows)]


def _deliver(driver, d, beats):
    for beat in beats:
        egress = [None] * driver.N
        egress[d] = beat
        driver.ready_out = [True] * driver.N
        driver.sample([False] * driver.N, egress)


def test_soak_scoreboard_catches_corrupted_duplicated_and_lost():
    """The scoreboard is not blind: a wrong sum, a second copy of a result, a packet nobody
    sent, and results that never came are each reported."""
    driver, job, seq, rows, members = _driver_with_outstanding_chunk()
    bad = list(rows)
    bad[0] ^= 1
    _deliver(driver, members[0], _result_beats(job, seq, bad, members[0]))
    assert driver.stats["mismatches"] == 1
    _deliver(driver, members[0], _result_beats(job, seq, rows, members[0]))
    assert driver.stats["duplicated"] == 1
    stray = encode(USER_LAYOUT, {"kind": Kind.MEM_WRITE, "dtype": DType.INT32, "seq": 77})
    _deliver(driver, 1, [(tdata(memory_words(77, 0, driver.L)), stray, 1, 0, 1)])
    assert driver.stats["duplicated"] == 2
    counters = dict.fromkeys(driver.expected, 0)
    stats = driver.finish(counters)
    assert stats["lost"] == len(members) - 1 + sum(
        len(left) for j in driver.jobs if j is not job for _, left in j.outstanding.values())


def test_soak_counts_must_match_the_faults():
    """A drop counter that disagrees with the faults injected fails the run."""
    driver = SoakDriver(SoakConfig(ports=4), seed=2)
    driver.expected["err_duplicate"] = 2
    counters = dict.fromkeys(driver.expected, 0)
    counters["err_duplicate"] = 1
    driver.finish(counters)
    assert any("err_duplicate" in f for f in driver.failures)


def test_edge_contributions_cover_the_special_values():
    from sim.reliability.numerics import edge_contributions
    words = np.stack(list(edge_contributions(DType.FP32, 8, 4, 2, 1).values()))
    values = words.view(np.float32)
    assert np.isnan(values).any() and np.isinf(values).any()
    assert ((words & 0x7F800000) == 0).any()          # zeros and subnormals
    assert (words == 0x80000000).any()                # -0


def test_fuzz_tools_short(tmp_path, monkeypatch):
    """The CI share of `innet bench fuzz`: bad traces, configurations and arguments all give
    one line and exit 2, no traceback, no file left behind."""
    pytest.importorskip("hypothesis")
    from sim.cli.main import main
    from sim.reliability.fuzz import fuzz
    monkeypatch.chdir(tmp_path)
    report = fuzz(240, seed=4, main=main)
    assert all(r["cases"] == 80 for r in report.values()), report
    assert report["cli"]["rejected"] == 80
    assert report["trace"]["rejected"] > 40 and report["config"]["rejected"] > 40
