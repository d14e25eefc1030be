"""Collectives: the message expansions really compute an all-reduce (executed on numpy data),
and the cost model agrees with the expansions and with the nccl-tests definitions."""

import numpy as np
import pytest

from sim.gpu.collectives import (
    ALGORITHMS,
    SWITCH,
    allreduce_cost,
    collective_cost,
    expand_collective,
)
from sim.gpu.presets import gpu_preset


def execute(algo, n, size, rng):
    """Run the schedule on random int64 buffers; every message carries the sender's current
    value of its chunk (the whole buffer for tree/inswitch); receivers reduce in the first half
    of the schedule and copy in the second. Dependencies are honoured: a message is sent only
    after its dependency was delivered."""
    data = rng.integers(-1000, 1000, size=(n, size))
    expected = data.sum(axis=0)
    msgs = expand_collective(algo, n, size)
    chunk = -(-size // n)
    bounds = lambda c: (c * chunk, min(size, (c + 1) * chunk))  # noqa: E731
    buf = data.copy()
    switch_sum = np.zeros(size, dtype=np.int64)
    delivered = set()
    reduce_steps = {"ring": n - 1, "direct": 1, "tree": 1, "inswitch": 1, "nvls": 1}[algo]
    pending = list(enumerate(msgs))
    progress = True
    while pending and progress:
        progress = False
        # deliver every message of the lowest step whose dependency is met (lock-step rounds)
        ready = [(i, m) for i, m in pending if set(m.deps) <= delivered]
        if not ready:
            break
        step = min(m.step for _, m in ready)
        batch = [(i, m) for i, m in ready if m.step == step]
        payloads = []
        for i, m in batch:
            if algo in ("ring", "direct"):
                lo, hi = bounds(m.chunk)
                src_data = buf[m.src, lo:hi].copy() if m.src != SWITCH else None
            elif m.src == SWITCH:
                lo, hi, src_data = 0, size, switch_sum.copy()
            elif algo == "tree":   # each of the two trees carries one half
                half = -(-size // 2)
                lo, hi = (0, half) if m.chunk == 0 else (half, size)
                src_data = buf[m.src, lo:hi].copy()
            else:
                lo, hi, src_data = 0, size, buf[m.src].copy()
            payloads.append((i, m, lo, hi, src_data))
        for i, m, lo, hi, src_data in payloads:
            if m.dst == SWITCH:
                switch_sum[lo:hi] += src_data
            elif m.step < reduce_steps:
                buf[m.dst, lo:hi] += src_data
            else:
                buf[m.dst, lo:hi] = src_data
            delivered.add(i)
        done = {i for i, *_ in payloads}
        pending = [(i, m) for i, m in pending if i not in done]
        progress = True
    assert not pending, f"{len(pending)} messages never became ready"
    return buf, expected


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("algo", ["ring", "inswitch", "direct", "tree", "nvls"])
def test_expansion_computes_the_sum(algo, n):
    rng = np.random.default_rng(n)
    buf, expected = execute(algo, n, 37, rng)
    for g in range(n):
        np.testing.assert_array_equal(buf[g], expected, err_msg=f"GPU {g}")


def run_schedule(msgs, buf, reduce_steps_below, bounds):
    """Deliver messages in dependency order (lock-step by step); messages with
    step < reduce_steps_below add into the receiver, the others overwrite."""
    delivered, pending = set(), list(enumerate(msgs))
    while pending:
        ready = [(i, m) for i, m in pending if set(m.deps) <= delivered]
        assert ready, "a message never became ready"
        step = min(m.step for _, m in ready)
        batch = [(i, m) for i, m in ready if m.step == step]
        payloads = [(i, m, *bounds(m), buf[m.src, slice(*bounds(m))].copy()) for i, m in batch]
        for i, m, lo, hi, data in payloads:
            if m.step < reduce_steps_below:
                buf[m.dst, lo:hi] += data
            else:
                buf[m.dst, lo:hi] = data
            delivered.add(i)
        pending = [(i, m) for i, m in pending if i not in delivered]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("algo", ["ring", "direct"])
def test_reduce_scatter_then_all_gather(algo, n):
    size = 41
    rng = np.random.default_rng(n)
    data = rng.integers(-99, 99, size=(n, size))
    expected = data.sum(axis=0)
    chunk = -(-size // n)
    bounds = lambda m: (m.chunk * chunk, min(size, (m.chunk + 1) * chunk))  # noqa: E731
    buf = data.copy()
    run_schedule(expand_collective(algo, n, size, "reducescatter"), buf, 1 << 30, bounds)
    for g in range(n):   # GPU g owns chunk (g+1) mod n, fully reduced
        lo, hi = bounds(type("M", (), {"chunk": (g + 1) % n})())
        np.testing.assert_array_equal(buf[g, lo:hi], expected[lo:hi])
    run_schedule(expand_collective(algo, n, size, "allgather"), buf, -1, bounds)
    for g in range(n):
        np.testing.assert_array_equal(buf[g], expected)


@pytest.mark.parametrize("n", [2, 3, 6, 8])
@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_reduce_and_broadcast(algo, n):
    size = 9
    data = np.random.default_rng(n).integers(-99, 99, size=(n, size))
    whole = lambda m: (0, size)  # noqa: E731
    buf = data.copy()
    run_schedule(expand_collective(algo, n, size, "reduce"), buf, 1 << 30, whole)
    np.testing.assert_array_equal(buf[0], data.sum(axis=0))   # the root holds the sum
    buf2 = data.copy()
    run_schedule(expand_collective(algo, n, size, "broadcast"), buf2, -1, whole)
    for g in range(n):
        np.testing.assert_array_equal(buf2[g], data[0])


def test_double_binary_tree_balances_inner_nodes():
    from sim.gpu.collectives import double_trees
    for n in (4, 8, 16):
        inner = [set(mapping[p] for p in range(n) if 2 * p + 1 < n)
                 for mapping in double_trees(n)]
        assert not inner[0] & inner[1], f"n={n}: ranks inner in both trees"


def test_p2p():
    assert [(m.src, m.dst, m.nbytes) for m in expand_collective("ring", 2, 10, "p2p")] == \
        [(0, 1, 10)]


def test_ring_dependencies_chain_steps():
    msgs = expand_collective("ring", 4, 400)
    for m in msgs:
        if m.step == 0:
            assert m.deps == ()
        else:
            (dep,) = (msgs[d] for d in m.deps)
            assert dep.dst == m.src and dep.step == m.step - 1


@pytest.mark.parametrize("algo", ["ring", "direct", "inswitch"])
def test_cost_link_bytes_match_expansion(algo):
    n, size = 8, 8 * 1000
    msgs = expand_collective(algo, n, size)
    sent = sum(m.nbytes for m in msgs if m.src == 0)
    assert sent == pytest.approx(allreduce_cost(gpu_preset("a100"), n, size, algo).sent_bytes)


def test_busbw_definition():
    cost = allreduce_cost(gpu_preset("h100"), 8, 1 << 30, "ring")
    assert cost.algbw_gbps == pytest.approx((1 << 30) / cost.time_s / 1e9)
    assert cost.busbw_gbps == pytest.approx(cost.algbw_gbps * 2 * 7 / 8)


def test_inswitch_moves_less_than_ring():
    gpu = gpu_preset("a100")
    ring, sw = (allreduce_cost(gpu, 8, 100 << 20, a) for a in ("ring", "inswitch"))
    assert sw.link_bytes < ring.link_bytes and sw.hbm_bytes < ring.hbm_bytes
    assert sw.time_s < ring.time_s
    assert sw.sms == gpu.nvls_channels and ring.sms == gpu.ring_channels


def test_small_messages_pick_low_latency_protocol():
    gpu = gpu_preset("a100")
    assert allreduce_cost(gpu, 8, 4096).protocol == "LL"
    assert allreduce_cost(gpu, 8, 1 << 30).protocol == "Simple"


@pytest.mark.parametrize("op", ["reducescatter", "allgather", "reduce", "broadcast", "p2p"])
def test_other_collectives_have_costs(op):
    # nvls is on H100 only, and for all-reduce, reduce-scatter and all-gather only
    for algo in ALGORITHMS:
        if algo == "nvls":
            continue
        cost = collective_cost(gpu_preset("v100"), 4, 1 << 20, op, algo)
        assert cost.time_s > 0 and cost.link_bytes > 0


def test_validation():
    with pytest.raises(ValueError, match="unknown algorithm 'mesh'"):
        allreduce_cost(gpu_preset("a100"), 8, 1, "mesh")
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        allreduce_cost(gpu_preset("a100"), 1, 1)
