"""NCCL's device pipeline (sim/gpu/nccl_pipeline.py) against hand-derived chunk arithmetic."""

import math

import pytest

from sim.gpu.collectives import allreduce_cost
from sim.gpu.nccl_pipeline import chain_time, chunk_bytes, ring_time
from sim.gpu.nccl_tuning import BASE_LATENCY_US, NVLINK_LATENCY_US, protocol_options
from sim.gpu.presets import gpu_preset

MiB = 1 << 20
LAT = 3.4e-6           # NCCL hwLat, NVLink ring Simple
RATE = 240e9           # 12 NVLinks × 20 GB/s, Simple carries all of it


def test_chunks_are_nccls():
    assert chunk_bytes("Simple", "ring", 8, 1 << 30) == 2 * MiB     # 4 steps of 4 MiB / 8
    assert chunk_bytes("LL128", "ring", 8, 1 << 30) == 576000        # 614400 × 120 / 128
    assert chunk_bytes("LL", "ring", 8, 1 << 30) == 32768            # 64 KiB, half flags
    # tree Simple: 512 KiB halves while the share holds < depth × 8 chunks (depth 7)
    assert chunk_bytes("Simple", "tree", 8, 1 << 30) == 512 << 10
    assert chunk_bytes("Simple", "tree", 8, 7 * 8 * (256 << 10)) == 256 << 10


def test_ring_partial_loop_pays_one_latency_per_slice():
    # 16 MiB on 24 channels: one partial loop, chunk = share / 8 aligned, two slices
    size = 16 * MiB
    share = size / 24
    c = math.ceil(share / 8 / 16) * 16
    expected = 14 * (2 * LAT + c / (RATE / 24))
    got = ring_time("Simple", 8, size, 14, 24, 2 * 7 / 8 * size, RATE, LAT)
    assert got == pytest.approx(expected, rel=1e-12)


def test_ring_full_loops_then_a_partial_one():
    size = 1 << 30
    share = size / 24
    loop = 8 * 2 * MiB
    last = math.ceil((share - 2 * loop) / 8 / 16) * 16
    expected = 2 * 14 * (2 * LAT + 2 * MiB / (RATE / 24)) + 14 * (2 * LAT + last / (RATE / 24))
    got = ring_time("Simple", 8, size, 14, 24, 2 * 7 / 8 * size, RATE, LAT)
    assert got == pytest.approx(expected, rel=1e-12)


def test_small_simple_chunk_is_one_slice():
    # a chunk below the 32 KiB minimum slice goes in one slice: 14 latencies, not 28
    size = 1 * MiB
    c = math.ceil(size / 24 / 8 / 16) * 16
    got = ring_time("Simple", 8, size, 14, 24, 2 * 7 / 8 * size, RATE, LAT)
    assert got == pytest.approx(14 * (LAT + c / (RATE / 24)), rel=1e-12)


def test_chain_fills_its_pipeline():
    # 2 MiB on one channel down the 14-hop chain of 8 GPUs: NCCL's tree rule halves 512 KiB to
    # 128 KiB (share < 7 × 8 chunks), then to 64 KiB (< 7 × 4): 32 chunks; the busiest GPU
    # sends 2 bytes per byte
    size, rate = 2 * MiB, 10e9
    chunk = 64 << 10
    got = chain_time("Simple", "tree", 8, size, 14, 1, 2 * size, rate, LAT)
    expected = 32 * (LAT + 2 * chunk / rate) + 13 * (LAT + chunk / rate)
    assert got == pytest.approx(expected, rel=1e-12)


def test_tuner_chooses_pipeline_times():
    a100 = gpu_preset("a100")
    # 16 MiB: the tuner picks LL128, one loop, so the pipeline equals the tuner's estimate
    mid = allreduce_cost(a100, 8, 16 * MiB)
    assert mid.protocol == "LL128"
    opts = {p: (lat, rate) for p, lat, rate, _, _ in
            protocol_options(a100, "ring", "allreduce", 8, 16 * MiB, 14)}
    lat, rate = opts["LL128"]
    assert mid.time_s == pytest.approx(lat + mid.link_bytes / rate, rel=1e-3)
    # 1 GiB: Simple, 3 loops × 28 slices, each paying hwLat: slower than the tuner's estimate
    big = allreduce_cost(a100, 8, 1 << 30)
    assert big.protocol == "Simple"
    base = BASE_LATENCY_US["ring"]["Simple"] * 1e-6
    assert big.time_s == pytest.approx(
        base + ring_time("Simple", 8, 1 << 30, 14, 24, big.link_bytes, RATE,
                         NVLINK_LATENCY_US["ring"]["Simple"] * 1e-6), rel=1e-12)
    lat, rate = {p: (la, r) for p, la, r, _, _ in
                 protocol_options(a100, "ring", "allreduce", 8, 1 << 30, 14)}["Simple"]
    assert big.time_s > lat + big.link_bytes / rate
