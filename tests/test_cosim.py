"""Co-simulation: the fast switch model against the RTL (cocotb, both simulators), the
scoreboard, and the closed loop."""

from pathlib import Path

import numpy as np
import pytest

from hw.packet import USER_LAYOUT, DType, Kind, encode
from hw.spec import INGRESS_LATENCY, SwitchSpec
from sim.cosim.driver import ReplayDriver
from sim.cosim.replay import replay_rtl
from sim.model.reduce import reduce_words
from sim.model.switch import replay_model
from sim.replay.config import REPLAY_JOB, ReplayConfig
from sim.replay.plan import PlanError, build_plan
from sim.replay.result import compare
from sim.trace.format import SWITCH_PORT, TraceRecord
from sim.trace.synthetic import stress_trace

from .conftest import one_simulator, require_simulator, spread_over_simulators

SMALL = dict(lanes=2, slots=8, chunk_flits=4, flit_scale=1, link_gbps=8.0, mtu_flits=16)
#: The replays here run tens of thousands of cycles: a quick (-O0) Verilator build is done
#: in a third of the optimised one's time and runs them in seconds (ignored by Icarus).
QUICK = dict(optimize=False)


def write(rid, gpu, peer, nbytes, t=0, dep=None):
    return TraceRecord.mem(gpu=gpu, peer=peer, id=rid, time_ns=t, bytes=nbytes, op="write",
                           dependency=dep)


def contrib(rid, gpu, nbytes, t=0, piece=0):
    return TraceRecord.grad(gpu=gpu, peer=SWITCH_PORT, id=rid, time_ns=t, bytes=nbytes,
                            algo="inswitch", bucket=piece)


@pytest.mark.slow
@pytest.mark.parametrize(*spread_over_simulators("ports, policy, seed, arbitration", [
    # In this order the 8-port switch falls to Verilator: Icarus took 205 s to simulate it.
    (8, "drr", 3, {"quantum_flits": 6}), (4, "rr", 1, {}), (4, "prio", 2, {}),
    (4, "wrr", 4, {"mem_weight": 2, "result_weight": 5})]))
def test_model_matches_rtl(sim, ports, policy, seed, arbitration, replay_build_dir):
    """Mixed memory writes, reads, dependency chains and in-switch reductions under contention:
    every delivery cycle of the model equals the RTL's, and every packet and result is exact;
    the replay's weights and quantum (``arbitration``) reach the RTL's pins and the model."""
    require_simulator(sim)
    # (issued within 6-15 us the messages contend more than within 30 us, in fewer cycles:
    # Icarus's time goes with the flits it moves. At 4 ports 15 messages in 6 us give
    # 2,490-2,705 deliveries in 9,426-11,679 cycles, where 30 in 10 us took 16,555-20,848)
    messages, span_ns = (25, 15_000) if ports > 4 else (15, 6_000)
    meta, records = stress_trace(gpus=ports, seed=seed, messages=messages, span_ns=span_ns)
    plan = build_plan(meta, records, ReplayConfig(ports=ports, policy=policy, **arbitration,
                                                  **SMALL))
    rtl = replay_rtl(plan, sim, build_dir=replay_build_dir, seed=seed, **QUICK)
    model = replay_model(plan)
    assert rtl.mismatches == 0
    assert not any(rtl.errors.values())
    agreement = compare(rtl, model)
    assert agreement["missing"] == 0
    assert agreement["deliveries"] > 1000
    assert agreement["mae_fraction"] <= 0.01
    assert agreement["makespan_error"] <= 0.005
    # The model is cycle-exact on these traces today; keep it so.
    assert agreement["exact"] == agreement["deliveries"], agreement
    assert sum(rtl.stall_cycles) > 0, "the trace should fill some ingress FIFOs"
    assert model.stall_cycles == rtl.stall_cycles
    assert max(rtl.summary()["egress_utilization"]) > 0.3


@pytest.mark.slow
@pytest.mark.parametrize("sim", one_simulator("icarus"))
def test_model_matches_rtl_with_one_flit_chunks(sim, replay_build_dir):
    """One-flit chunks and two slots: the engine rests a cycle after each chunk (its two-step
    pick skips one slot only; SwitchSpec.engine_restart_cycles) and both model cores follow
    the RTL delivery for delivery."""
    require_simulator(sim)
    # (two gradient pieces, not six: 3,384 deliveries in 16,741 cycles, where six took 36,565
    # cycles of Icarus; one-flit chunks through two slots are the replay's slowest part)
    meta, records = stress_trace(gpus=4, seed=3, messages=20, span_ns=10_000, pieces=2)
    plan = build_plan(meta, records, ReplayConfig(ports=4, policy="rr",
                                                  **dict(SMALL, slots=2, chunk_flits=1)))
    assert plan.config.switch.engine_restart_cycles == 2
    rtl = replay_rtl(plan, sim, build_dir=replay_build_dir, seed=3, **QUICK)
    assert_cores_follow_rtl(plan, rtl, 1000)


def assert_cores_follow_rtl(plan, rtl, deliveries):
    """The RTL replay is clean and both model cores deliver every packet on its cycle (more
    than ``deliveries`` of them)."""
    assert rtl.mismatches == 0 and not any(rtl.errors.values())
    for core in ("python", "c"):
        agreement = compare(rtl, replay_model(plan, core=core))
        assert agreement["missing"] == 0
        assert agreement["exact"] == agreement["deliveries"] > deliveries, (core, agreement)


@pytest.mark.slow
@pytest.mark.parametrize("sim", one_simulator("verilator"))   # the 4-port prio build again
def test_equal_priorities_are_round_robin(sim, replay_build_dir):
    """`innet run` replays round-robin windows on the prio build with equal priorities
    (sim.experiment.point.rtl_config): on a contended trace that RTL delivers exactly as the rr
    model, while the same build with memory traffic first does not."""
    from dataclasses import replace

    from sim.experiment.point import rtl_config

    require_simulator(sim)
    meta, records = stress_trace(gpus=4, seed=2, messages=40, span_ns=15_000)
    rr = ReplayConfig(ports=4, policy="rr", **SMALL)
    shared = rtl_config(rr, ("rr", "prio"))
    assert shared.policy == "prio" and shared.mem_priority == shared.result_priority
    model = replay_model(build_plan(meta, records, rr))
    rtl = replay_rtl(build_plan(meta, records, shared), sim, build_dir=replay_build_dir, **QUICK)
    agreement = compare(rtl, model)
    assert rtl.mismatches == 0 and agreement["missing"] == 0
    assert agreement["exact"] == agreement["deliveries"] > 1000, agreement
    unequal = replay_rtl(build_plan(meta, records, replace(shared, mem_priority=1)), sim,
                         build_dir=replay_build_dir, **QUICK)
    assert compare(unequal, model)["exact"] < agreement["deliveries"]


@pytest.mark.slow
@pytest.mark.parametrize("sim", one_simulator("verilator"))   # the 4-port prio build again
def test_switch_under_backpressure(sim, replay_build_dir):
    """Random backpressure on every egress (30 %): every memory packet intact and every
    reduction exact (the scoreboard fails the cocotb test otherwise), nothing dropped."""
    require_simulator(sim)
    meta, records = stress_trace(gpus=4, seed=11, messages=30, span_ns=20_000)
    plan = build_plan(meta, records, ReplayConfig(ports=4, policy="prio", **SMALL))
    rtl = replay_rtl(plan, sim, build_dir=replay_build_dir, seed=5, stall=0.3, **QUICK)
    assert rtl.mismatches == 0 and not any(rtl.errors.values())
    summary = rtl.summary()
    assert summary["results_delivered"] == plan.chunks * 4
    assert summary["memory_packets"] >= plan.packets - plan.chunks * 4
    # The stalls really happened: some egress carried fewer flits than cycles would allow.
    assert rtl.extra["driver"] == "player"
    assert sum(rtl.stall_cycles) > 0


@pytest.mark.slow
@pytest.mark.parametrize("sim", one_simulator("icarus"))
def test_model_matches_rtl_on_tree_dependencies(sim, replay_build_dir):
    """A tree all-reduce, whose parents wait for both children (several dependencies per
    message): both model cores follow the RTL delivery for delivery."""
    from sim.replay.allreduce import allreduce_trace

    require_simulator(sim)
    meta, records = allreduce_trace("tree", 4, 4096, 256)
    plan = build_plan(meta, records, ReplayConfig(ports=4, policy="rr", **SMALL))
    assert any(len(m.deps) == 2 for m in plan.messages)
    rtl = replay_rtl(plan, sim, build_dir=replay_build_dir, seed=5, **QUICK)
    assert_cores_follow_rtl(plan, rtl, 100)


@pytest.mark.slow
def test_player_matches_per_cycle_driver():
    """The Verilog packet player and the per-cycle Python driver are two independent drivers
    of the same closed loop: on the same plan every injection and delivery cycle agrees, and
    both scoreboards pass."""
    require_simulator("verilator")
    meta, records = stress_trace(gpus=4, seed=4, messages=20, span_ns=20_000)
    plan = build_plan(meta, records, ReplayConfig(ports=4, policy="prio", **SMALL))
    played = replay_rtl(plan, "verilator", **QUICK)
    driven = replay_rtl(plan, "verilator", player=False, **QUICK)
    assert played.mismatches == 0 and driven.mismatches == 0
    agreement = compare(driven, played)
    assert agreement["missing"] == 0 and agreement["deliveries"] > 500
    assert agreement["exact"] == agreement["deliveries"], agreement
    assert (played.inject == driven.inject).all()
    assert played.stall_cycles == driven.stall_cycles
    assert played.egress_flits == driven.egress_flits


@pytest.mark.slow
def test_player_sleeps_through_a_long_gap():
    """A message issued longer after the last one than the watchdog (here 3,000 cycles; by
    default WATCHDOG_CYCLES): the player must wake for it (it once waited forever) and
    deliver it when the model does."""
    require_simulator("verilator")
    cfg = ReplayConfig(ports=4, policy="prio", **SMALL)   # the 4-port prio build again
    later = int(4_500 * cfg.cycle_ns)
    plan = build_plan({"gpus": 2}, [write(0, 0, 1, 64), write(1, 1, 0, 64, t=later)], cfg)
    rtl = replay_rtl(plan, "verilator", watchdog=3_000, **QUICK)
    model = replay_model(plan)
    assert rtl.mismatches == 0 and rtl.cycles > 4_500
    assert compare(rtl, model)["exact"] == 2


def _played(plan, player, log):
    """Run ``player``'s online half by hand from ``log`` lines (what the harness would have
    told it: results, and memory packets that end their message), then its scoreboard."""
    from sim.cosim.stimulus import user_pid

    for line in log:
        f = line.split()
        if f[0] == "o":
            user = int(f[3], 16)
            pid = user_pid(user)
            kind = user >> USER_LAYOUT["kind"].offset & ((1 << USER_LAYOUT["kind"].width) - 1)
            if (kind != Kind.REDUCE_RESULT.value and pid < plan.packets
                    and pid != plan.messages[int(plan.msg[pid])].packets[-1]):
                continue   # not told: the log alone has it
            player._ended(int(f[2]), user, int(f[1]))
    return player.check("\n".join(log))


@pytest.mark.slow
def test_recorded_schedule_replays_the_same_log_with_seed_and_stalls(tmp_path):
    """The no-Python reference of `innet bench cosim` plays the co-simulation's own traffic:
    with a seed and egress stalls of its own, the schedule's log equals the replay's, packet
    for packet and cycle for cycle. (The quick bench's switch and trace: its builds.)"""
    require_simulator("verilator")
    from sim.cosim.replay import scheduled_rate

    cfg = ReplayConfig(ports=4, lanes=2, slots=8, chunk_flits=4, policy="prio", flit_scale=1,
                       link_gbps=32.0, mtu_flits=32)
    meta, records = stress_trace(gpus=4, seed=7, messages=30, pieces=4, max_bytes=4096,
                                 piece_bytes=4096, span_ns=2_000, reads=False)
    plan = build_plan(meta, records, cfg)
    rtl = replay_rtl(plan, "verilator", seed=5, stall=0.2, quiet=True, schedule_dir=tmp_path,
                     **QUICK)
    assert rtl.mismatches == 0 and sum(rtl.stall_cycles) > 0
    rate, log = scheduled_rate(plan, tmp_path, **QUICK)
    assert rate > 0
    assert log == (tmp_path / "player.log").read_text()


@pytest.mark.slow
def test_player_gives_credit_waits_ahead_with_link_latency(tmp_path):
    """With the GPUs a link hop away (100 cycles), the player gives a contribution whose credit
    is on its way at once, with the cycle it may start (the descriptor's `at`), instead of
    waking then: the replay still delivers every packet at the fast model's cycle, the
    recorded schedule holds such descriptors, and with no Python in the loop it replays the
    same log."""
    require_simulator("verilator")
    from sim.cosim.player_verilog import DESC_FIELDS, desc_width
    from sim.cosim.replay import scheduled_rate

    cfg = ReplayConfig(ports=4, lanes=2, slots=8, chunk_flits=4, policy="prio", flit_scale=1,
                       link_gbps=32.0, mtu_flits=32, link_latency_ns=25.0)
    assert cfg.link_cycles == 100
    meta, records = stress_trace(gpus=4, seed=7, messages=30, pieces=4, max_bytes=4096,
                                 piece_bytes=4096, span_ns=2_000, reads=False)
    plan = build_plan(meta, records, cfg)
    rtl = replay_rtl(plan, "verilator", quiet=True, schedule_dir=tmp_path, **QUICK)
    agreement = compare(rtl, replay_model(plan, core="python"))
    assert rtl.mismatches == 0 and agreement["missing"] == 0
    assert agreement["exact"] == agreement["deliveries"] > 1000
    width = desc_width(USER_LAYOUT.size)
    names = [name for name, _ in DESC_FIELDS]
    at_offset = sum(w for _, w in DESC_FIELDS[:names.index("at")])
    later = 0
    for k in range(cfg.ports):
        for line in (tmp_path / f"sched{k}.hex").read_text().split()[:-1]:
            word = int(line, 16)
            given, at = word >> width, word >> at_offset & 0xFFFFFFFF
            later += at > given
    assert later > 0
    rate, log = scheduled_rate(plan, tmp_path, **QUICK)
    assert rate > 0 and log == (tmp_path / "player.log").read_text()


def test_player_scoreboard_catches_corruption():
    """The player's scoreboard: a clean log passes; a payload flag, a digest, a source, a
    length, a changed header, a lost packet, or a packet of a message that Python did not see
    online delivered twice, lost or after the message's last, each fail it."""
    from sim.cosim.player import Player
    from sim.cosim.stimulus import digest, hashed_contribution_words

    cfg = ReplayConfig(ports=2, **SMALL)
    plan = build_plan({"gpus": 2}, [write(0, 0, 1, 3 * 8), contrib(1, 0, 4 * 8),
                                    contrib(2, 1, 4 * 8), write(3, 1, 0, 20 * 8)], cfg)
    two = [p for p in range(plan.packets) if plan.src[p] == 1 and plan.seq[p] < 0]
    assert [int(plan.flits[p]) for p in two] == [16, 4]   # the message of two packets

    def run(edit=None):
        player = Player(plan, seed=3)
        loop = player.loop
        mem = next(p for p in range(plan.packets) if plan.seq[p] < 0)
        user_mem = player._user(mem)[2]
        user_res = encode(USER_LAYOUT, {"kind": Kind.REDUCE_RESULT, "dtype": DType.FP32,
                                        "job": REPLAY_JOB, "slot": 0, "seq": 0})
        for k in range(2):
            while (pid := loop.next_packet(k, 0)) is not None:
                player.issued[k].append(pid)
                if plan.seq[pid] >= 0:
                    player.outstanding[k][0] = 0
        words = {k: hashed_contribution_words(3, 0, k, 4, cfg.lanes, DType.FP32)
                 for k in (0, 1)}
        good = digest(reduce_words(words, [0, 1], DType.FP32)[0])
        user_two = [player._user(p)[2] for p in two]
        log = {"i": "\n".join(f"i {n} {k}" for k in range(2)
                              for n in range(len(player.issued[k]))),
               "m": f"o 9 1 {user_mem:x} 0 1 3 1 1 0",
               "first": f"o 20 0 {user_two[0]:x} 1 0 16 1 1 0",
               "r0": f"o 12 0 {user_res:x} 0 0 4 0 1 {good:x}",
               "r1": f"o 12 1 {user_res:x} 0 1 4 0 1 {good:x}",
               "last": f"o 24 0 {user_two[1]:x} 1 0 4 1 1 0"}
        if edit:
            edit(log)
        _played(plan, player, "\n".join(v for v in log.values() if v).splitlines())
        return player.mismatches

    assert run() == []
    corruptions = {
        "payload": lambda log: log.update(m=log["m"].replace(" 3 1 1 0", " 3 0 1 0")),
        "digest": lambda log: log.update(r1=log["r1"][:-1] + ("0" if log["r1"][-1] != "0"
                                                              else "1")),
        "source": lambda log: log.update(m=log["m"].replace(" 0 1 3 ", " 1 1 3 ")),
        "length": lambda log: log.update(m=log["m"].replace(" 0 1 3 ", " 0 1 2 ")),
        "header": lambda log: log.update(r0=log["r0"].replace(" 4 0 1 ", " 4 0 0 ")),
        "lost": lambda log: log.update(m=None),
        "lost, not told": lambda log: log.update(first=None),
        "twice, not told": lambda log: log.update(again=log["first"]),
        "after the last": lambda log: log.update(first=log["first"].replace("o 20", "o 30")),
    }
    for name, edit in corruptions.items():
        assert run(edit), f"a {name} corruption passed the scoreboard"


def test_player_contributions_are_bounded():
    """The player's gradients: int32 in [-2^20, 2^20), floats finite with magnitude in
    [2^-6, 4) (bf16: both halves), different per member, chunk, flit and lane."""
    from sim.cosim.stimulus import hashed_contribution_words as contribution_words

    ints = contribution_words(1, 7, 2, 64, 8, DType.INT32).view(np.int32)
    assert ints.min() >= -(1 << 20) and ints.max() < (1 << 20)
    floats = np.abs(contribution_words(1, 7, 2, 64, 8, DType.FP32).view(np.float32))
    assert floats.min() >= 2.0 ** -6 and floats.max() < 4
    halves = contribution_words(1, 7, 2, 64, 8, DType.BF16)
    for part in (halves << 16, halves & 0xFFFF0000):
        mag = np.abs(part.astype(np.uint32).view(np.float32))
        assert mag.min() >= 2.0 ** -6 and mag.max() < 4
    assert len(np.unique(ints)) > 500
    assert not np.array_equal(contribution_words(1, 7, 2, 4, 2, DType.FP32),
                              contribution_words(1, 7, 3, 4, 2, DType.FP32))


def test_player_headers_and_chunks_in_bulk_match_one_by_one():
    """The replay's shortcuts give what the general forms give: a memory packet's ``tuser``
    equals the layout's full encoding of its fields (and its id reads back), and a batch of
    chunks hashes as each chunk alone."""
    from sim.cosim.stimulus import (PID_BITS, PID_FIELDS, hashed_contribution_words,
                                    memory_user, user_pid)

    for kind in (Kind.MEM_WRITE, Kind.MEM_READ_RESP):
        for pid in (0, 1, 12345, (1 << PID_BITS) - 1):
            fields = {"kind": kind, "dtype": DType.INT32, "job": 0}
            shift = PID_BITS
            for name, _, width in PID_FIELDS:
                shift -= width
                fields[name] = pid >> shift & ((1 << width) - 1)
            assert memory_user(pid, kind) == encode(USER_LAYOUT, fields)
            assert user_pid(memory_user(pid, kind)) == pid
    with pytest.raises(ValueError):
        memory_user(1 << PID_BITS)
    seqs = [0, 9, 1 << 20, (1 << 32) - 1]
    for dtype in (DType.INT32, DType.FP32, DType.BF16):
        batch = hashed_contribution_words((1 << 32) - 1, np.array(seqs), 7, 3, 4, dtype)
        one_by_one = [hashed_contribution_words((1 << 32) - 1, s, 7, 3, 4, dtype) for s in seqs]
        assert np.array_equal(batch, np.stack(one_by_one))


def test_model_single_packet_latency():
    cfg = ReplayConfig(ports=2, **SMALL)
    plan = build_plan({"gpus": 2}, [write(0, 0, 1, 5 * 8)], cfg)
    result = replay_model(plan)
    # First flit at the head INGRESS_LATENCY cycles after it entered, out of the switch
    # egress_latency cycles later (the arbiter's registered choice, the link register, the
    # egress stage);
    # then one flit a cycle.
    assert result.inject[0] == 0
    assert result.deliver[0] == INGRESS_LATENCY + cfg.switch.egress_latency + 5 - 1


def test_model_serialises_an_egress():
    """Two ports writing to the same port: the egress carries one flit a cycle, round robin,
    and the loser's source stalls once its ingress FIFO is full."""
    cfg = ReplayConfig(ports=3, **SMALL)
    records = [write(0, 0, 2, 16 * 8 * 4), write(1, 1, 2, 16 * 8 * 4)]
    result = replay_model(build_plan({"gpus": 3}, records, cfg))
    total = 2 * 4 * 16
    assert result.cycles == INGRESS_LATENCY + cfg.switch.egress_latency + total
    assert result.egress_flits[2] == total
    assert sum(result.stall_cycles) > 0


def test_model_reduction_latency():
    """The result leaves 7 + pipeline + egress_latency cycles after the last contribution flit is
    at the reduction unit (the hold FIFO, the landing registered beside the slot table and then
    in it, the engine's pick in two registered steps; bank read, adder levels, result select;
    result FIFO; the arbiter's registered choice, the link register and the egress stage), then
    one flit a cycle — plus the judge's wait: the hold FIFO's write register and registered read
    take two cycles more than a plain FIFO's, then the four headers head their hold FIFOs in the
    same cycle and the judge takes one port a cycle, so the member judged last waits
    2 + (ports - 1) = 5 cycles."""
    cfg = ReplayConfig(ports=4, **SMALL)
    records = [contrib(g, g, 4 * 8) for g in range(4)]
    result = replay_model(build_plan({"gpus": 4}, records, cfg))
    last_at_unit = INGRESS_LATENCY + 4 - 1
    pipeline = SwitchSpec(ports=4, slots=1, chunk_flits=1).reduction_pipeline_depth
    assert set(result.results.values()) == {last_at_unit + 2 + 3 + 7 + pipeline +
                                            cfg.switch.egress_latency + 4 - 1}


def test_model_takes_chunks_below_the_judges_line_rate_in_its_turns():
    """Two-flit chunks at 4 ports are half a turn of the judge: a port's back-to-back
    contributions are judged 4 cycles apart. With one slot per port's worth of window
    (8 slots, closed loop) the last result comes later than with 4-flit chunks, which are a
    whole turn, for the same bytes; both cores agree (the RTL agreement below line rate is
    test_model_matches_rtl's 8-port case, 4-flit chunks)."""
    records = [contrib(g, g, 2 * 8 * 2 * 8) for g in range(4)]
    below = build_plan({"gpus": 4}, records, ReplayConfig(ports=4, **dict(SMALL, chunk_flits=2)))
    at = build_plan({"gpus": 4}, records, ReplayConfig(ports=4, **dict(SMALL, chunk_flits=4)))
    assert not below.config.switch.line_rate and at.config.switch.line_rate
    python = replay_model(below, core="python")
    assert python.ingress_flits == replay_model(at, core="python").ingress_flits
    # 2-flit chunks take one turn (4 cycles) per 2 flits: at least 2 cycles a flit per port
    assert python.cycles >= 2 * python.ingress_flits[0]
    compiled = replay_model(below, core="c")
    agreement = compare(python, compiled)
    assert agreement["exact"] == agreement["deliveries"] > 0 and agreement["missing"] == 0
    assert compiled.cycles == python.cycles and compiled.stall_cycles == python.stall_cycles
    assert dict(compiled.results.items()) == dict(python.results.items())


def test_closed_loop_dependency():
    """A message waits for the one it depends on to be delivered."""
    cfg = ReplayConfig(ports=3, **SMALL)
    records = [write(0, 0, 1, 64), write(1, 1, 2, 64, dep=0)]
    result = replay_model(build_plan({"gpus": 3}, records, cfg))
    assert result.inject[1] == result.deliver[0] + 1


def test_closed_loop_waits_for_every_dependency():
    """A message of two dependencies waits for the later one, whichever it is."""
    cfg = ReplayConfig(ports=4, **SMALL)
    for late in (0, 1):
        sizes = [64, 64]
        sizes[late] = 1024
        records = [write(0, 0, 2, sizes[0]), write(1, 1, 2, sizes[1]),
                   write(2, 2, 3, 64).with_dependencies((0, 1))]
        result = replay_model(build_plan({"gpus": 4}, records, cfg))
        last = {r: max(result.deliver[p] for p in m.packets)
                for r, m in enumerate(result.plan.messages[:2])}
        assert last[late] > last[1 - late]
        assert result.inject[result.plan.messages[2].packets[0]] == last[late] + 1


def test_closed_loop_answers_ahead_only_what_is_certain():
    """Asked ahead (the port still busy), the loop gives the port's next packet only when no
    later event can change it: the packet a call at the free cycle would give, or None while
    the port's first message waits for a slot's credit (once the port is free, a later message
    may go first)."""
    from sim.replay.loop import ClosedLoop

    cfg = ReplayConfig(ports=2, **SMALL)
    chunks = cfg.slots + 1     # the last chunk reuses slot 0: it waits for chunk 0's result
    plan = build_plan({"gpus": 2}, [contrib(0, 0, chunks * 4 * 8), contrib(1, 1, chunks * 4 * 8),
                                    write(2, 0, 1, 64, t=20)], cfg)
    contribs = [p for p in range(plan.packets) if plan.src[p] == 0 and plan.seq[p] >= 0]
    mem = next(p for p in range(plan.packets) if plan.seq[p] < 0)
    due = plan.messages[int(plan.msg[mem])].issue
    assert due > 0

    # Certain: the first message is eligible; the write due later sorts behind it.
    ahead, later = ClosedLoop(plan), ClosedLoop(plan)
    assert ahead.next_packet(0, 0) == later.next_packet(0, 0) == contribs[0]
    assert ahead.next_packet(0, 0, ahead=True) == contribs[1]
    assert later.next_packet(0, due + 100) == contribs[1]

    # Not certain: the next contribution waits for slot 0's credit, the write is eligible.
    loop = ClosedLoop(plan)
    for p in contribs[:-1]:
        assert loop.next_packet(0, 0) == p
    assert loop.next_packet(0, due, ahead=True) is None
    assert loop.next_packet(0, due) == mem            # free, the port skips the waiting one
    loop.result(0, 0, due + 1)
    assert loop.next_packet(0, loop.credit_cycle(due + 1), ahead=True) == contribs[-1]


def test_closed_loop_tells_a_later_start_only_when_certain():
    """A free port with nothing to start is told the packet it will start next, and when,
    only when nothing delivered from now on can change it: a credit already on its way
    decides (the answer is what a call at that cycle gives); a message due by time before it,
    or no credit on its way, gives None and takes nothing."""
    import copy

    from sim.replay.loop import ClosedLoop

    cfg = ReplayConfig(ports=2, **dict(SMALL, link_latency_ns=3.0))   # 1 ns cycles
    chunks = cfg.slots + 2     # the last two chunks reuse slots 0 and 1
    plan = build_plan({"gpus": 2}, [contrib(0, 0, chunks * 4 * 8), contrib(1, 1, chunks * 4 * 8),
                                    write(2, 0, 1, 64, t=400)], cfg)
    contribs = [p for p in range(plan.packets) if plan.src[p] == 0 and plan.seq[p] >= 0]
    mem = next(p for p in range(plan.packets) if plan.seq[p] < 0)
    due = plan.messages[int(plan.msg[mem])].issue
    loop = ClosedLoop(plan)
    assert loop.round_trip == 6
    hop = cfg.link_cycles    # the trace's issue times reach the switch a hop later
    for p in contribs[:-2]:
        assert loop.next_packet(0, hop) == p
    now = 50
    assert loop.next_packet(0, now) is None
    assert loop.next_start(0, now) is None           # no credit on its way yet
    # Slot 1's credit comes first, but its chunk follows slot 0's in the message: the packet
    # told is slot 0's chunk, at its credit.
    loop.result(0, 1, now - 2)
    loop.result(0, 0, now - 1)
    before = copy.deepcopy(loop)
    told = loop.next_start(0, now)
    assert told == (contribs[-2], now - 1 + loop.round_trip + 1)
    at = told[1]
    assert not before.can_start(0, at - 1) and before.can_start(0, at)
    assert before.next_packet(0, at - 1) is None and before.next_packet(0, at) == contribs[-2]
    assert loop.next_packet(0, at) == contribs[-1] and loop.next_packet(0, due) == mem

    # the write due before the credit: not certain, nothing taken
    early = ClosedLoop(plan)
    for p in contribs[:-2]:
        early.next_packet(0, hop)
    early.result(0, 0, due - 3)
    started = early.started
    assert early.next_packet(0, due - 2) is None and early.next_start(0, due - 2) is None
    assert early.started == started


def test_plan_errors():
    cfg = ReplayConfig(ports=2, **SMALL)
    with pytest.raises(PlanError, match="3 GPUs but the switch has 2 ports"):
        build_plan({"gpus": 3}, [], cfg)
    cfg = ReplayConfig(ports=3, **SMALL)
    with pytest.raises(PlanError, match="not sent exactly once by every member"):
        build_plan({"gpus": 3}, [contrib(0, 0, 64), contrib(1, 1, 64),
                                 contrib(2, 0, 64, piece=1)], cfg)
    with pytest.raises(ValueError, match="policy"):
        ReplayConfig(policy="fifo")


def test_scoreboard_catches_corruption():
    cfg = ReplayConfig(ports=2, **SMALL)
    plan = build_plan({"gpus": 2}, [write(0, 0, 1, 8)], cfg)
    for corrupt in (False, True):
        driver = ReplayDriver(plan)
        changes = driver.drive()
        (port, beat), = changes
        assert port == 0 and beat[4] == 1
        driver.sample([True, False], [None, None])
        shown = (beat[0] ^ int(corrupt), beat[1], beat[2], beat[3], beat[4])
        driver.drive()
        driver.sample([False, False], [None, shown])
        assert bool(driver.mismatches) == corrupt
        assert driver.done()


def test_scoreboard_catches_a_wrong_sum():
    """The scoreboard compares each result with the numpy golden sum of what was sent."""
    cfg = ReplayConfig(ports=2, **SMALL)
    plan = build_plan({"gpus": 2}, [contrib(0, 0, 4 * 8), contrib(1, 1, 4 * 8)], cfg)
    for wrong in (False, True):
        driver = ReplayDriver(plan)
        shown = {}
        for _ in range(4):
            for port, beat in driver.drive():
                shown[port] = beat
            for port, beat in driver.sample([True, True], [None, None]):
                if beat != "end":
                    shown[port] = beat
        assert set(driver.contrib[0]) == {0, 1}
        want, _ = reduce_words(driver.contrib[0], [0, 1], DType.FP32)
        user = encode(USER_LAYOUT, {"kind": Kind.REDUCE_RESULT, "dtype": DType.FP32,
                                    "job": REPLAY_JOB, "slot": 0, "seq": 0})
        for flit in range(4):
            data = sum(int(w) << (32 * lane) for lane, w in enumerate(want[flit]))
            data ^= int(wrong and flit == 2)
            beats = [(data, user, d, 0, int(flit == 3)) for d in range(2)]
            driver.drive()
            driver.sample([False, False], beats)
        assert bool(driver.mismatches) == wrong
        assert len(driver.results) == 2 and driver.done()


def test_build_cache_is_per_toolchain(tmp_path, monkeypatch):
    """A cached simulator build names cocotb's files by absolute path, so two environments
    sharing a cache must not share builds (seen: a build left by a removed virtual
    environment failed every later replay with `No rule to make target .../verilator.cpp`)."""
    import sim.cosim.build as cosim
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    switch = SwitchSpec(ports=2, lanes=1, slots=2, chunk_flits=2, jobs=2, dtypes=("int32",))
    dirs = []
    for env in ("/venv-a", "/venv-b", "/venv-a"):
        monkeypatch.setattr(cosim, "toolchain_fingerprint", lambda sim, env=env: env)
        with cosim.switch_build(switch, "verilator") as (_, _, build_dir, _):
            dirs.append(build_dir)
    assert dirs[0] != dirs[1] and dirs[0] == dirs[2]
    monkeypatch.undo()
    import cocotb
    assert str(Path(cocotb.__file__).parent) in cosim.toolchain_fingerprint("verilator")
