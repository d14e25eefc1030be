"""SM and HBM contention: the model's numbers against hand-derived formulas."""

import pytest

from sim.gpu.collectives import allreduce_cost
from sim.gpu.contention import (
    CTA_SM_OCCUPANCY,
    KernelSpec,
    hbm_rate,
    kernel_time,
    overlap,
    split_hbm,
)
from sim.gpu.presets import gpu_preset

A100 = gpu_preset("a100")


def test_roofline():
    gemm = KernelSpec("gemm", 2e12, 1e6)
    assert kernel_time(A100, gemm) == pytest.approx(2e12 / (312e12 * 0.70))
    stream = KernelSpec("copy", 0, 1e9, False)
    assert kernel_time(A100, stream) == pytest.approx(1e9 / (1555e9 * 0.85))


def test_compute_bound_kernel_loses_exactly_the_sm_share():
    gemm = KernelSpec("gemm", 2.0 * 8192**3, 2.0 * 3 * 8192**2)
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    o = overlap(A100, gemm, comm)
    share = 1 - comm.sms * CTA_SM_OCCUPANCY / A100.sms
    assert o.sm_share == pytest.approx(share)
    assert o.compute_slowdown == pytest.approx(1 / share - 1)
    assert o.compute_attribution["sm"] == pytest.approx(o.compute_slowdown)
    assert o.compute_attribution["hbm"] == 0


def test_memory_bound_kernel_gets_a_proportional_share():
    stream = KernelSpec("stream", 0.0, 2e9, False)
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    o = overlap(A100, stream, comm)
    capacity = hbm_rate(A100)
    comm_demand = comm.hbm_bytes / (comm.link_bytes / (comm.link_rate_gbps * 1e9))
    granted = capacity * capacity / (capacity + comm_demand)   # proportional to demand
    assert o.compute_overlapped_s == pytest.approx(2e9 / granted)
    assert o.compute_attribution["hbm"] == pytest.approx(o.compute_slowdown)
    assert o.comm_slowdown > 0   # the all-reduce is slowed too


def test_split_hbm_without_contention_leaves_the_rest():
    capacity = hbm_rate(A100)
    assert split_hbm(A100, [100.0, 200.0]) == [capacity - 200.0, capacity - 100.0]
    grants = split_hbm(A100, [capacity, capacity])
    assert grants == [capacity / 2, capacity / 2]


def test_inswitch_slows_compute_less_than_ring():
    layer_mix = [KernelSpec("gemm", 2.0 * 4096**3, 2.0 * 3 * 4096**2),
                 KernelSpec("norm", 8 * 2**27, 4 * 2**27, False)]
    for kernel in layer_mix:
        ring = overlap(A100, kernel, allreduce_cost(A100, 8, 256 << 20, "ring"))
        switch = overlap(A100, kernel, allreduce_cost(A100, 8, 256 << 20, "inswitch"))
        assert switch.compute_slowdown < ring.compute_slowdown
