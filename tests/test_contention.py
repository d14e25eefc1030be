"""SM, HBM and L2 contention: the model's numbers against hand-derived formulas."""

from dataclasses import replace

import pytest

from sim.gpu.collectives import allreduce_cost
from sim.gpu.contention import (
    L2_REFETCH,
    KernelSpec,
    comm_cta,
    gemm_kernel,
    l2_extra_bytes,
    retained_blocks,
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


def test_nccl_cta_from_nccl_source():
    """NCCL enqueue.cc: Simple ring 512 threads + 1 sync warp; maxrregcount 96; dynamic shared
    memory 20 warps x (8·32+1)·16 bytes on sm80."""
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    assert comm.protocol == "Simple"
    assert comm_cta(A100, comm) == (544, 544 * 96, 20 * 257 * 16)
    assert comm_cta(A100, replace(comm, protocol="LL"))[0] == 512
    assert comm_cta(A100, replace(comm, protocol="LL128"))[0] == 640


def test_partial_occupancy_by_hand():
    """A100 SM: 2048 threads, 64 Ki registers, 164 KiB shared memory (1 KiB reserved per
    block). An elementwise block (128 threads x 32 registers) fits 16 times alone; beside a
    Simple ring CTA (544 x 96 = 52,224 registers) the registers left hold 13,312 // 4,096 = 3.
    A cuBLAS 256x128 GEMM block (144 KiB shared memory) does not fit beside 82,240 + 1,024
    bytes: it loses the SM."""
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    assert retained_blocks(A100, KernelSpec("ew", 1.0, 1.0, False), comm) == 3 / 16
    assert retained_blocks(A100, KernelSpec("gemm", 1.0, 1.0), comm) == 0
    # LL's 512 threads leave 16,384 registers: 4 blocks
    assert retained_blocks(A100, KernelSpec("ew", 1.0, 1.0, False),
                           replace(comm, protocol="LL")) == 4 / 16


def test_slowdown_depends_on_protocol():
    """A compute-bound FP32 kernel keeps 3/16 of each channel's SM beside Simple, 4/16 beside
    LL: 1 / (1 − 24·13/16/108) vs 1 / (1 − 24·12/16/108)."""
    fp32 = KernelSpec("fp32", 1e13, 1e6, False)
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    simple = overlap(A100, fp32, comm).compute_slowdown
    ll = overlap(A100, fp32, replace(comm, protocol="LL")).compute_slowdown
    assert simple == pytest.approx(1 / (1 - 24 * 13 / 16 / 108) - 1)
    assert ll == pytest.approx(1 / (1 - 24 * 12 / 16 / 108) - 1)


def test_l2_eviction_by_hand():
    """The kernel keeps L2 · k / (k + c) of the cache; the evicted part of its working set is
    read again L2_REFETCH times."""
    gemm = KernelSpec("gemm", 1e12, 60e6)           # working set 60 MB > 40 MB L2
    k, c = 400e9, 600e9
    keeps = A100.l2_bytes * k / (k + c)
    evicted = (A100.l2_bytes - keeps) / A100.l2_bytes
    assert l2_extra_bytes(A100, gemm, k, c) == pytest.approx(L2_REFETCH * 60e6 * evicted)
    small = KernelSpec("gemm", 1e12, 1e6)            # fits in what it keeps: no loss
    assert l2_extra_bytes(A100, small, k, c) == 0
    assert l2_extra_bytes(A100, KernelSpec("ew", 0, 60e6, False), k, c) == 0   # no reuse


def test_compute_bound_kernel_loses_exactly_the_sm_share():
    gemm = KernelSpec("gemm", 2.0 * 8192**3, 2.0 * 3 * 8192**2)
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    o = overlap(A100, gemm, comm)
    share = 1 - comm.sms / A100.sms        # a GEMM block does not fit beside the CTA
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


def test_wave_quantization_by_hand():
    """A GEMM grid of B blocks (one per SM, the 256x128 tile does not fit twice) runs in
    ceil(B / slots) waves: 108 blocks on A100 are one wave alone, two beside 24 channels; 84
    blocks fit the 84 SMs left: no slowdown at all."""
    comm = allreduce_cost(A100, 8, 256 << 20, "ring")
    one_wave = gemm_kernel(A100, 256 * 12, 128 * 9, 4096)
    assert one_wave.blocks == 108
    assert overlap(A100, one_wave, comm).compute_slowdown == pytest.approx(1.0)
    fits = gemm_kernel(A100, 256 * 12, 128 * 7, 4096)
    assert fits.blocks == 84
    assert overlap(A100, fits, comm).sm_share == 1.0
    many = gemm_kernel(A100, 256 * 108, 128 * 84, 64)     # 9072 blocks: 84 vs 108 waves
    assert overlap(A100, many, comm).sm_share == pytest.approx(84 / 108)
