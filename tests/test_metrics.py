"""The per-point metrics (sim/experiment/metrics.py, docs/metrics.md) on hand-built replays and
GPU-model results whose answers are worked out by hand here."""

from types import SimpleNamespace

import numpy as np
import pytest

from hw.packet import Kind
from sim.experiment import metrics
from sim.gpu.iteration import IterationResult
from sim.model.switch import replay_model
from sim.replay.config import ReplayConfig
from sim.replay.plan import Message, Plan, build_plan
from sim.replay.result import ReplayResult, ResultCycles, slot_occupancy
from sim.trace.format import SWITCH_PORT, TraceRecord


def gpu_result(forward_s=0.010, backward_alone_s=0.040, backward_s=0.050, optimizer_s=0.005,
               attribution=None):
    """A GPU-model result with only the fields the metrics read set to something."""
    return IterationResult(n_gpus=2, algo="ring", forward_s=forward_s,
                           backward_alone_s=backward_alone_s, backward_s=backward_s,
                           backprop_slowdown=0.0, slowdown_attribution=attribution or {},
                           allreduce_s=0.0, allreduce_alone_s=0.0, exposed_comm_s=0.0,
                           optimizer_s=optimizer_s, iteration_s=0.0, buckets=0,
                           bucket_bytes=[], link_utilization=0.0)


def hand_replay(messages, packets, message_done, egress_flits=(0,), stall_cycles=(0,),
                slot_peak=0, slot_mean=0.0):
    """A replay result from a table of packets.

    ``messages``: (src, kind, record) or (src, kind, record, issue cycle) per message,
    message id = position; without an issue cycle, a message is issued when its first packet
    enters the switch. ``packets``: (message id, inject cycle, deliver cycle or -1) per packet,
    packet id = position.
    """
    first_in = {}
    for mid, inject, _ in packets:
        first_in.setdefault(mid, inject)
    msgs = [Message(mid, src, kind, 1, issue[0] if issue else first_in.get(mid, 0), -1, record)
            for mid, (src, kind, record, *issue) in enumerate(messages)]
    for pid, (mid, _, _) in enumerate(packets):
        msgs[mid].packets = [*msgs[mid].packets, pid]   # any sequence of packet ids
    def column(i):
        return np.array([p[i] for p in packets], dtype=np.int64)

    n = len(packets)
    plan = Plan(config=None, gpus=4, messages=msgs,
                src=np.array([msgs[p[0]].src for p in packets], dtype=np.int64),
                dst=np.ones(n, np.int64), kind=np.array([msgs[p[0]].kind.value for p in packets],
                                                         dtype=np.int64),
                flits=np.ones(n, np.int64), msg=column(0), seq=np.full(n, -1, np.int64),
                members=0, chunks=0, meta={})
    return ReplayResult(backend="hand", plan=plan, cycles=1, inject=column(1),
                        deliver=column(2), results={}, egress_flits=list(egress_flits),
                        ingress_flits=[0] * len(egress_flits), stall_cycles=list(stall_cycles),
                        slot_peak=slot_peak, slot_mean=slot_mean, message_done=message_done)


def grad(rid, gpu, bucket, peer=1):
    return TraceRecord.grad(gpu=gpu, peer=peer, id=rid, time_ns=0, bytes=64, algo="ring",
                            bucket=bucket)


def mem(rid, gpu, peer, op="write"):
    return TraceRecord.mem(gpu=gpu, peer=peer, id=rid, time_ns=0, bytes=64, op=op)


# -- gradient windows, all-reduce time, link utilization ---------------------------------------

def gradient_replay():
    """Buckets 0 and 1 overlap ([10, 40] and [35, 60]), bucket 4 lies inside bucket 0
    ([12, 20]), bucket 2 stands apart ([100, 109]); bucket 3's only message never completes
    (first packet in at cycle 8); a memory write (in at 5, out at 200) is not gradient traffic.
    """
    records = {0: grad(0, 0, 0), 1: grad(1, 1, 0, peer=2),
               2: grad(2, 0, 1, peer=SWITCH_PORT), 3: grad(3, 2, 2), 4: mem(4, 2, 0),
               5: grad(5, 3, 3), 6: grad(6, 1, 4, peer=0)}
    messages = [(0, Kind.MEM_WRITE, 0), (1, Kind.MEM_WRITE, 1), (0, Kind.REDUCE_CONTRIB, 2),
                (2, Kind.MEM_WRITE, 3), (2, Kind.MEM_WRITE, 4), (3, Kind.MEM_WRITE, 5),
                (1, Kind.MEM_WRITE, 6)]
    packets = [(0, 10, 25), (0, 14, 30), (1, 20, 40), (2, 35, -1), (3, 100, 109), (4, 5, 200),
               (5, 8, -1), (6, 12, 20)]
    done = {0: 30, 1: 40, 2: 60, 3: 109, 4: 200, 6: 20}
    return hand_replay(messages, packets, done, egress_flits=[10, 30, 0, 20]), records


def test_gradient_messages_leave_out_memory_traffic():
    replay, records = gradient_replay()
    assert [m.record for m in metrics.gradient_messages(replay, records)] == [0, 1, 2, 3, 5, 6]


def test_gradient_window_counts_every_piece_in_and_every_completion():
    replay, records = gradient_replay()
    # first: bucket 3's packet at 8 (the memory write at 5 does not count); last: bucket 2 at 109
    assert metrics.gradient_window_cycles(replay, records) == (8, 109)


def test_gradient_window_without_gradients_is_zero():
    replay = hand_replay([(0, Kind.MEM_WRITE, 0)], [(0, 3, 9)], {0: 9})
    assert metrics.gradient_window_cycles(replay, {0: mem(0, 0, 1)}) == (0, 0)


def test_bucket_windows():
    replay, records = gradient_replay()
    assert metrics.bucket_windows_cycles(replay, records) == {
        0: (10, 40), 1: (35, 60), 2: (100, 109), 4: (12, 20)}


def test_allreduce_is_the_union_of_bucket_windows():
    replay, records = gradient_replay()
    # [10, 60] (buckets 0, 1, 4) = 51 cycles, [100, 109] = 10 cycles; 2.5 ns a cycle
    assert metrics.allreduce_ms(replay, records, cycle_ns=2.5) == pytest.approx(61 * 2.5 / 1e6)


def test_bucket_window_starts_when_the_bucket_is_ready():
    """A bucket's window starts at its earliest message's issue cycle, not when a first
    packet entered the switch: time a bucket waited at its GPU (behind other traffic) is
    all-reduce time (docs/metrics.md, "Two results that look wrong")."""
    records = {0: grad(0, 0, 0), 1: grad(1, 1, 0, peer=0), 2: grad(2, 0, 1)}
    # bucket 0: issued at 3 and 5, in at 10 and 12, done at 20 and 25; bucket 1: issued at
    # 18, in at 30 (it waited behind bucket 0's message on GPU 0), done at 40
    replay = hand_replay([(0, Kind.MEM_WRITE, 0, 3), (1, Kind.MEM_WRITE, 1, 5),
                          (0, Kind.MEM_WRITE, 2, 18)],
                         [(0, 10, 20), (1, 12, 25), (2, 30, 40)], {0: 20, 1: 25, 2: 40})
    assert metrics.bucket_windows_cycles(replay, records) == {0: (3, 25), 1: (18, 40)}
    # [3, 40] = 38 cycles; from the first packets in it would be [10, 25] + [30, 40] = 27
    assert metrics.allreduce_ms(replay, records, cycle_ns=1e6) == pytest.approx(38.0)


def test_allreduce_counts_adjacent_windows_whole():
    records = {0: grad(0, 0, 0), 1: grad(1, 0, 1)}
    replay = hand_replay([(0, Kind.MEM_WRITE, 0), (0, Kind.MEM_WRITE, 1)],
                         [(0, 0, 9), (1, 10, 19)], {0: 9, 1: 19})
    assert metrics.allreduce_ms(replay, records, cycle_ns=1e6) == pytest.approx(20.0)


def test_link_utilization_over_the_gradient_window():
    replay, _ = gradient_replay()
    mean, busiest = metrics.link_utilization(replay, 8, 109)
    assert mean == pytest.approx((10 + 30 + 0 + 20) / 4 / 102)
    assert busiest == pytest.approx(30 / 102)


def test_link_utilization_of_an_empty_window_is_per_cycle():
    replay = hand_replay([], [], {}, egress_flits=[2, 4])
    assert metrics.link_utilization(replay, 0, 0) == (3.0, 4.0)


def test_allreduce_on_a_replayed_trace_matches_a_cycle_set():
    """A tiny trace through the fast model: two buckets whose windows overlap, each a message
    each way (one waiting for the other); the all-reduce time is the number of distinct cycles
    any bucket's window (ready to done) covers."""
    records = [grad(0, 0, 0), grad(1, 1, 0, peer=0),
               TraceRecord.grad(gpu=0, peer=1, id=2, time_ns=4, bytes=512, algo="ring",
                                bucket=1, dependency=1),
               TraceRecord.grad(gpu=1, peer=0, id=3, time_ns=6, bytes=256, algo="ring",
                                bucket=1)]
    cfg = ReplayConfig(ports=2, lanes=2, slots=4, chunk_flits=4, flit_scale=1, link_gbps=8.0,
                       mtu_flits=16)
    replay = replay_model(build_plan({"gpus": 2}, records, cfg))
    by_id = {r.id: r for r in records}
    ready, done = {}, {}
    for m in replay.plan.messages:
        b = by_id[m.record].bucket
        ready[b] = min(ready.get(b, m.issue), m.issue)
        done[b] = max(done.get(b, 0), replay.message_done[m.mid])
    covered = {b: set(range(ready[b], done[b] + 1)) for b in ready}
    assert covered[0] & covered[1] and covered[0] - covered[1]   # the windows overlap
    expected_ns = len(covered[0] | covered[1]) * cfg.cycle_ns
    assert metrics.allreduce_ms(replay, by_id, cfg.cycle_ns) == pytest.approx(expected_ns / 1e6)
    first_in = min(int(replay.inject[m.packets[0]]) for m in replay.plan.messages)
    assert metrics.gradient_window_cycles(replay, by_id) == (first_in, max(done.values()))


# -- point-to-point link delay -----------------------------------------------------------------

def p2p_replay(gpu0_last, gpu1_last):
    """GPU 0 writes two packets (out at 50 and ``gpu0_last``), GPU 1 one (``gpu1_last``); a
    read request, a gradient message to a peer (a MEM_WRITE packet, but not a mem record) and
    an undelivered write do not count."""
    records = {10: mem(10, 0, 1), 11: mem(11, 1, 2), 12: mem(12, 2, 0, op="read"),
               13: grad(13, 2, 0, peer=0), 14: mem(14, 3, 0)}
    messages = [(0, Kind.MEM_WRITE, 10), (1, Kind.MEM_WRITE, 11), (2, Kind.MEM_READ_REQ, 12),
                (2, Kind.MEM_WRITE, 13), (3, Kind.MEM_WRITE, 14)]
    packets = [(0, 0, 50), (0, 1, gpu0_last), (1, 0, gpu1_last), (2, 0, 300), (3, 0, 400),
               (4, 0, -1)]
    return hand_replay(messages, packets, {}), records


def test_p2p_delivery_cycles():
    replay, records = p2p_replay(70, 40)
    assert metrics.p2p_delivery_cycles(replay, records) == {0: 70, 1: 40}


def test_link_delay_is_the_largest_lateness_over_gpus():
    shared, records = p2p_replay(70, 40)
    alone, _ = p2p_replay(60, 45)
    # GPU 0 is 10 cycles late, GPU 1 5 early; 3 ns a cycle
    assert metrics.p2p_link_delay_ns(shared, alone, records, cycle_ns=3.0) == pytest.approx(30.0)


def test_link_delay_is_never_negative():
    shared, records = p2p_replay(55, 40)
    alone, _ = p2p_replay(60, 45)
    assert metrics.p2p_link_delay_ns(shared, alone, records, cycle_ns=3.0) == 0.0


def test_link_delay_of_a_gpu_missing_alone_is_zero():
    shared, records = p2p_replay(70, 40)
    alone = hand_replay([], [], {})
    assert metrics.p2p_link_delay_ns(shared, alone, records, cycle_ns=3.0) == 0.0


def test_link_delay_without_p2p_traffic_is_zero():
    replay, records = gradient_replay()
    records = {**records, 4: grad(4, 2, 5, peer=0)}   # no mem records at all
    assert metrics.p2p_link_delay_ns(replay, replay, records, cycle_ns=3.0) == 0.0


# -- backprop and iteration --------------------------------------------------------------------

def test_backprop_rows():
    """40 ms alone, 50 ms overlapped, 2 ms of link delay: 52 ms, 30 % slower, 5 % of it the
    link's; the SM and HBM shares are the GPU model's."""
    gpu = gpu_result(attribution={"sm": 0.10, "hbm": 0.10, "l2": 0.05})
    delay_ns = 2e6
    assert metrics.backprop_alone_ms(gpu) == pytest.approx(40.0)
    assert metrics.backprop_ms(gpu, delay_ns) == pytest.approx(52.0)
    assert metrics.backprop_slowdown(gpu, delay_ns) == pytest.approx(0.30)
    assert metrics.slowdown_link(gpu, delay_ns) == pytest.approx(0.05)
    assert (metrics.slowdown_sm(gpu), metrics.slowdown_hbm(gpu), metrics.slowdown_l2(gpu)) == \
        (0.10, 0.10, 0.05)
    # the attribution adds up to the slowdown
    assert metrics.slowdown_sm(gpu) + metrics.slowdown_hbm(gpu) + metrics.slowdown_l2(gpu) + \
        metrics.slowdown_link(gpu, delay_ns) == pytest.approx(0.30)


def test_slowdown_shares_default_to_zero():
    gpu = gpu_result(attribution={})
    assert (metrics.slowdown_sm(gpu), metrics.slowdown_hbm(gpu), metrics.slowdown_l2(gpu)) == \
        (0.0, 0.0, 0.0)
    assert metrics.slowdown_link(gpu, 0.0) == 0.0


def test_exposed_communication_and_iteration_when_gradients_finish_last():
    """Backward ends at 10 + 50 + 2 = 62 ms; the last gradient lands at 30,000 cycles of
    2,500 ns = 75 ms: 13 ms exposed, iteration 75 + 5 ms of optimizer."""
    gpu = gpu_result()
    assert metrics.exposed_comm_ms(gpu, 2e6, 30_000, 2500.0) == pytest.approx(13.0)
    assert metrics.iteration_ms(gpu, 2e6, 30_000, 2500.0) == pytest.approx(80.0)


def test_exposed_communication_and_iteration_when_backprop_finishes_last():
    """The last gradient at 50 ms, before backward ends at 62 ms: nothing exposed."""
    gpu = gpu_result()
    assert metrics.exposed_comm_ms(gpu, 2e6, 20_000, 2500.0) == 0.0
    assert metrics.iteration_ms(gpu, 2e6, 20_000, 2500.0) == pytest.approx(67.0)


# -- switch counters ---------------------------------------------------------------------------

def test_stall_cycles_sum_over_ingress_ports():
    replay = hand_replay([], [], {}, stall_cycles=[3, 0, np.int64(7)])
    assert metrics.stall_cycles(replay) == 10
    assert type(metrics.stall_cycles(replay)) is int


def test_slot_occupancy_as_reported():
    replay = hand_replay([], [], {}, slot_peak=np.int64(4), slot_mean=1.23456)
    peak, mean = metrics.slot_occupancy(replay)
    assert (peak, mean) == (4, 1.235) and type(peak) is int


def test_rtl_errors_sum_the_drop_counters():
    assert metrics.rtl_errors({"drop_no_route": 2, "err_overflow": 3, "drop_bad_kind": 0}) == 5
    assert metrics.rtl_errors({}) == 0


def test_rtl_agreement():
    assert metrics.rtl_agreement({"exact": 3, "deliveries": 4, "mae_fraction": 0.01,
                                  "makespan_error": 0.002, "packets": 9}) == {
        "rtl_exact_fraction": 0.75, "rtl_mae_fraction": 0.01, "rtl_makespan_error": 0.002}
    # nothing compared (compare() then reports only deliveries and missing)
    assert metrics.rtl_agreement({"deliveries": 0, "missing": 2}) == {
        "rtl_exact_fraction": 0.0, "rtl_mae_fraction": None, "rtl_makespan_error": None}


def test_replay_slot_occupancy_matches_a_cycle_by_cycle_count():
    """sim.replay.result.slot_occupancy (one sort of starts and ends) against counting, cycle
    by cycle, the chunks between their first contribution in and their last result out."""
    rng = np.random.default_rng(7)
    for _ in range(100):
        chunks, ports = int(rng.integers(1, 12)), 2
        seq = np.concatenate([rng.permutation(chunks), [-1, -1]])   # two memory packets
        inject = rng.integers(0, 30, len(seq))
        start = {int(c): int(inject[i]) for i, c in enumerate(seq) if c >= 0}
        cycles = np.array([[start[c] + int(rng.integers(0, 8)) for c in range(chunks)]
                           for _ in range(ports)])
        cycles[:, rng.random(chunks) < 0.2] = -1   # not finished
        end = cycles.max(axis=0)
        if not (end >= 0).any():
            continue
        level = [sum(1 for c in range(chunks) if end[c] >= 0 and start[c] <= t <= end[c])
                 for t in range(int(end.max()) + 2)]
        life = sum(end[c] + 1 - start[c] for c in range(chunks) if end[c] >= 0)
        span = max(end) + 1 - min(start[c] for c in range(chunks) if end[c] >= 0)
        peak, mean = slot_occupancy(SimpleNamespace(chunks=chunks, seq=seq), inject,
                                    ResultCycles(cycles))
        assert peak == max(level)
        assert mean == pytest.approx(life / span)
