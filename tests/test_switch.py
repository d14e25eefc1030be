"""The switch in the Amaranth simulator: memory traffic and reductions share the links under
random backpressure; every memory packet arrives once, intact, in order; every result is exact.
"""

import random
from dataclasses import replace

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.packet import DType, Header, Kind, Packet, flits_to_packets, pack_flit, unpack_flit
from hw.reduce import ERROR_CAUSES
from hw.spec import SwitchSpec
from hw.switch import DROP_CAUSES, Switch
from sim.model.reduce import reduce_words

from .reduce_harness import configure_jobs, contribution, flatten_traffic, random_words


def run_switch(sw, jobs, traffic, *, seed=0, idle=0.0, stall=0.0, max_cycles=30000,
               class_cfg=None, raw_flits=None):
    """traffic: {port: [Packet or (Packet, gate)]}; honours ingress ready. ``raw_flits``
    ({port: [flit ints]}) replaces the traffic's flits (for malformed framing)."""
    rng = random.Random(seed)
    N, L = sw.ports, sw.lanes
    flits, gates = flatten_traffic(traffic, N)
    if raw_flits is not None:
        flits = {k: list(raw_flits.get(k, [])) for k in range(N)}
    outputs = {k: [] for k in range(N)}
    received = {k: set() for k in range(N)}
    result = {}

    async def bench(ctx):
        for name, value in (class_cfg or {}).items():
            ctx.set(getattr(sw, name), value)
        await configure_jobs(ctx, sw.cfg, jobs)
        pos = {k: 0 for k in range(N)}
        offered = {k: False for k in range(N)}
        quiet = 0
        for cycle in range(max_cycles):
            for k in range(N):
                if not offered[k]:
                    gate = gates[k].get(pos[k])
                    offered[k] = pos[k] < len(flits[k]) and (gate is None or gate in
                                                             received[k]) and \
                        (idle == 0 or rng.random() >= idle)
                ctx.set(sw.i[k].valid, offered[k])
                if offered[k]:
                    ctx.set(sw.i[k].payload.as_value(), flits[k][pos[k]])
                ready = stall == 0 or rng.random() >= stall
                ctx.set(sw.o[k].ready, ready)
            took = [offered[k] and ctx.get(sw.i[k].ready) for k in range(N)]
            for k in range(N):
                if ctx.get(sw.o[k].ready) and ctx.get(sw.o[k].valid):
                    bits = ctx.get(sw.o[k].payload.as_value())
                    outputs[k].append(bits)
                    header, _, last = unpack_flit(L, bits)
                    if last and header.kind == Kind.REDUCE_RESULT:
                        received[k].add((header.job, header.seq))
            await ctx.tick()
            for k in range(N):
                if took[k]:
                    pos[k] += 1
                    offered[k] = False
            done = all(pos[k] == len(flits[k]) for k in range(N))
            quiet = quiet + 1 if done else 0
            if quiet > 300:
                break
        result["drops"] = {c: ctx.get(sw.drops[i]) for i, c in enumerate(DROP_CAUSES)}
        result["reduce_errors"] = [ctx.get(sw.reduce_errors[i])
                                   for i in range(len(ERROR_CAUSES))]
        result["sent_all"] = all(pos[k] == len(flits[k]) for k in range(N))

    sim = Simulator(sw)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return {k: flits_to_packets(L, outputs[k]) for k in range(N)}, result


def frame_like_a_receiver(lanes, flits, dst):
    """The packets egress ``dst`` should deliver from one sender's raw flit stream, framed by
    the rule alone: a flit whose header differs from its packet's first flit ends that packet
    (which arrives as a NULLIFIED packet of its flits so far) and starts the next; packets not
    addressed to ``dst`` or not memory kinds never arrive. Returns (packets, truncations)."""
    memory = (Kind.MEM_WRITE, Kind.MEM_READ_REQ, Kind.MEM_READ_RESP)
    packets, current, header, truncated = [], [], None, 0
    for bits in flits:
        flit_header, words, last = unpack_flit(lanes, bits)
        if header is not None and flit_header != header:
            truncated += 1
            if header.kind in memory and header.dst == dst:
                packets.append(Packet(replace(header, kind=Kind.NULLIFIED), tuple(current)))
            current, header = [], None
        header = flit_header
        current.append(tuple(words))
        if last:
            if header.kind in memory and header.dst == dst:
                packets.append(Packet(header, tuple(current)))
            current, header = [], None
    return packets, truncated


@pytest.mark.parametrize("seed", range(3))
def test_random_truncations_frame_as_the_rule_says(seed):
    """Senders that drop `last` at random — two broken packets in a row, a packet broken by
    its own last flit, a broken packet that was being dropped — under back-pressure: each
    receiver gets exactly the packets the framing rule gives (a Python golden of the rule
    alone), and every break is counted once. The rule is applied when a flit enters its
    ingress FIFO and acted on when it leaves, so this also checks that the two ends agree."""
    rng = random.Random(seed)
    N, L = 3, 1
    sw = Switch(SwitchSpec(ports=N, lanes=L, slots=2, chunk_flits=2, jobs=2))
    kinds = [Kind.MEM_WRITE, Kind.MEM_READ_REQ, Kind.MEM_READ_RESP, Kind.CONFIG]
    flits = {}
    for src in range(N):
        stream = []
        header = None
        for n in range(120):
            if header is None or rng.random() < 0.15:   # a new packet, or a break
                header = Header(kind=rng.choice(kinds), src=src,
                                dst=rng.choice([d for d in range(N) if d != src]),
                                seq=rng.randrange(4))
            last = rng.random() < 0.3 or n == 119
            stream.append(pack_flit(header, [rng.getrandbits(32)], last))
            if last:
                header = None
        flits[src] = stream
    packets, res = run_switch(sw, {}, {k: [] for k in range(N)}, raw_flits=flits,
                              seed=seed, idle=0.2, stall=0.4)
    assert res["sent_all"]
    truncations = 0
    for d in range(N):
        want = []
        for src in range(N):
            got, cut = frame_like_a_receiver(L, flits[src], d)
            want.append(got)
            truncations += cut if d == 0 else 0
        mine = {src: [p for p in packets[d] if p.header.src == src] for src in range(N)}
        assert [mine[src] for src in range(N)] == want
    assert res["drops"]["truncated"] == truncations > 10


def memory_packets(rng, N, L, count, src):
    out = []
    for seq in range(count):
        header = Header(kind=rng.choice([Kind.MEM_WRITE, Kind.MEM_READ_REQ, Kind.MEM_READ_RESP]),
                        src=src, dst=rng.choice([d for d in range(N) if d != src]), job=7,
                        slot=src, seq=seq)
        out.append(Packet(header, [[rng.getrandbits(32) for _ in range(L)]
                                   for _ in range(rng.randint(1, 4))]))
    return out


@pytest.mark.parametrize("policy, class_cfg", [
    ("rr", {}),
    ("prio", {"cfg_mem_priority": 1, "cfg_result_priority": 5}),
    ("wrr", {"cfg_mem_weight": 2, "cfg_result_weight": 1}),
    ("drr", {"cfg_quantum": 4}),
])
def test_memory_and_reductions_share_the_links(policy, class_cfg):
    rng = random.Random(1)
    nrng = np.random.default_rng(1)
    N, L, S, P = 4, 2, 4, 2
    sw = Switch(SwitchSpec(ports=N, lanes=L, slots=S, chunk_flits=P, jobs=4, policy=policy,
                           ingress_depth=4))
    members = [0, 1, 2, 3]
    chunks, traffic = {}, {k: [] for k in range(N)}
    mem = {k: memory_packets(rng, N, L, 10, k) for k in range(N)}
    for seq in range(6):
        slot = seq % S
        contribs = {k: random_words(nrng, DType.FP32, (P, L)) for k in members}
        chunks[(1, seq)] = (slot, contribs)
        gate = (1, seq - S) if seq >= S else None
        for k in members:
            traffic[k].append((contribution(k, 1, slot, seq, contribs[k], DType.FP32), gate))
    for k in range(N):   # interleave memory packets between contributions
        items = traffic[k] + [(p, None) for p in mem[k]]
        contrib_items = [it for it in items if it[0].header.kind == Kind.REDUCE_CONTRIB]
        mem_items = [it for it in items if it[0].header.kind != Kind.REDUCE_CONTRIB]
        order = ["c"] * len(contrib_items) + ["m"] * len(mem_items)
        rng.shuffle(order)
        traffic[k] = [contrib_items.pop(0) if o == "c" else mem_items.pop(0) for o in order]
    packets, res = run_switch(sw, {1: (members, DType.FP32, False)}, traffic, seed=2,
                              idle=0.2, stall=0.35, class_cfg=class_cfg)
    assert res["sent_all"], "ingress stalled: deadlock?"
    assert all(v == 0 for v in res["drops"].values()) and not any(res["reduce_errors"])
    for d in range(N):
        got_mem = [p for p in packets[d] if p.header.kind != Kind.REDUCE_RESULT]
        for src in range(N):
            want = [p for p in mem[src] if p.header.dst == d]
            assert [p for p in got_mem if p.header.src == src] == want, \
                f"memory packets {src} -> {d} lost, duplicated, corrupted or reordered"
        for (job, seq), (slot, contribs) in chunks.items():
            want, _ = reduce_words(contribs, members, DType.FP32)
            got = [p for p in packets[d] if p.header.kind == Kind.REDUCE_RESULT and
                   p.header.seq == seq]
            assert len(got) == 1
            np.testing.assert_array_equal(np.array(got[0].flits, dtype=np.uint32), want)


def test_the_crossbar_alone_what_if_carries_memory_and_swallows_contributions():
    """``Switch(spec, reduction=False)`` (``innet synth switch --without-reduction``): the
    same ingresses, crossbar and egresses, with a sink where the reduction unit was. Memory
    packets arrive intact and in order among contributions, which are all taken and never
    answered; nothing is counted."""
    rng = random.Random(4)
    nrng = np.random.default_rng(4)
    N, L = 4, 2
    sw = Switch(SwitchSpec(ports=N, lanes=L, slots=4, chunk_flits=2, jobs=4,
                           ingress_depth=4), reduction=False)
    mem = {k: memory_packets(rng, N, L, 8, k) for k in range(N)}
    traffic = {}
    for k in range(N):
        contribs = [contribution(k, 1, seq % 4, seq, random_words(nrng, DType.INT32, (2, L)),
                                 DType.INT32) for seq in range(4)]
        items = mem[k] + contribs
        rng.shuffle(items)
        # (memory packets keep their order among themselves)
        order = iter(mem[k])
        traffic[k] = [next(order) if p.header.kind != Kind.REDUCE_CONTRIB else p for p in items]
    packets, res = run_switch(sw, {}, traffic, seed=3, idle=0.1, stall=0.3)
    assert res["sent_all"]
    assert not any(res["drops"].values()) and not any(res["reduce_errors"])
    for d in range(N):
        assert all(p.header.kind != Kind.REDUCE_RESULT for p in packets[d])
        for src in range(N):
            want = [p for p in mem[src] if p.header.dst == d]
            assert [p for p in packets[d] if p.header.src == src] == want


def test_bad_packets_are_dropped_at_ingress():
    N, L = 3, 1
    sw = Switch(SwitchSpec(ports=N, lanes=L, slots=2, chunk_flits=1, jobs=2))
    hdr = lambda kind, dst=0: Header(kind=kind, src=0, dst=dst)  # noqa: E731
    traffic = {0: [Packet(hdr(Kind.MEM_WRITE, dst=5), [[1], [2]]),        # no such port
                   Packet(hdr(Kind.MEM_WRITE, dst=0), [[5]]),                # to itself
                   Packet(hdr(Kind.CONFIG), [[3]]),                          # in-band config
                   Packet(hdr(Kind.REDUCE_RESULT), [[4]]),                   # from a GPU
                   Packet(Header(kind=Kind.MEM_WRITE, src=0, dst=1), [[9]])]}   # good
    packets, res = run_switch(sw, {}, traffic)
    assert {c: n for c, n in res["drops"].items() if n} == {"bad_kind": 1, "bad_dest": 2,
                                                            "config_packet": 1}
    assert [p.flits for p in packets[1]] == [((9,),)]
    assert packets[0] == [] and packets[2] == []


def test_truncated_packets_are_ended_and_counted():
    """A sender drops `last`: the next header ends its packet. A memory write reaches its
    receiver as its flits plus a NULLIFIED tail (it does not hold the egress or swallow the
    next packet); a contribution is abandoned by the reduction unit. Both are counted, and
    the traffic after them is exact."""
    N, L, P = 3, 1, 2
    sw = Switch(SwitchSpec(ports=N, lanes=L, slots=2, chunk_flits=P, jobs=2))
    cut_write = Header(kind=Kind.MEM_WRITE, src=0, dst=1, seq=1)
    good_write = Header(kind=Kind.MEM_WRITE, src=0, dst=1, seq=2)
    stray = Header(kind=Kind.REDUCE_CONTRIB, src=1, dst=0, job=1, slot=1, seq=5,
                   dtype=DType.INT32)
    words = {1: [[10], [11]], 2: [[20], [22]]}
    real = {k: Header(kind=Kind.REDUCE_CONTRIB, src=k, dst=0, job=1, slot=0, seq=0,
                      dtype=DType.INT32) for k in (1, 2)}
    flits = {0: [pack_flit(cut_write, [7], 0), pack_flit(cut_write, [8], 0)] +
             [pack_flit(good_write, [9], 1)],
             1: [pack_flit(stray, [99], 0)] +
             [pack_flit(real[1], w, f == P - 1) for f, w in enumerate(words[1])],
             2: [pack_flit(real[2], w, f == P - 1) for f, w in enumerate(words[2])]}
    traffic = {k: [] for k in range(N)}
    packets, res = run_switch(sw, {1: ([1, 2], DType.INT32, False)}, traffic,
                              raw_flits=flits)
    assert {c: n for c, n in res["drops"].items() if n} == {"truncated": 2}
    assert not any(res["reduce_errors"])
    cut, good = [p for p in packets[1] if p.header.kind != Kind.REDUCE_RESULT]
    assert cut.header.kind == Kind.NULLIFIED and cut.header.seq == 1
    assert cut.flits == ((7,), (8,))                # its two flits, then the tail
    assert good.header == good_write and good.flits == ((9,),)
    want = np.array([[30], [33]], dtype=np.uint32)
    for k in (1, 2):
        results = [p for p in packets[k] if p.header.kind == Kind.REDUCE_RESULT]
        assert len(results) == 1 and np.array_equal(np.array(results[0].flits), want)


def _departures(sw, flits, cycles=60):
    """Cycle by cycle: port 0 sends ``flits`` back to back, every egress takes every flit;
    ``{(egress, flit): cycle it left}``."""
    left = {}

    async def bench(ctx):
        pos = 0
        for cycle in range(cycles):
            ctx.set(sw.i[0].valid, pos < len(flits))
            if pos < len(flits):
                ctx.set(sw.i[0].payload.as_value(), flits[pos])
            for k in range(sw.ports):
                ctx.set(sw.o[k].ready, 1)
            took = pos < len(flits) and ctx.get(sw.i[0].ready)
            for k in range(sw.ports):
                if ctx.get(sw.o[k].valid):
                    left.setdefault((k, ctx.get(sw.o[k].payload.as_value())), cycle)
            await ctx.tick()
            pos += took

    sim = Simulator(sw)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return left


def test_what_follows_a_packet_does_not_change_when_it_leaves():
    """A truncated packet to egress 1, then a one-flit write to egress 2: the write leaves in
    the same cycle whether its ingress FIFO holds more behind it or nothing. (The ingress
    works out its next state for both outcomes of the head's move; after a tail moves, the
    head it cut stays, and is there next cycle even with nothing behind it.)"""
    def sent(behind):
        cut = Header(kind=Kind.MEM_WRITE, src=0, dst=1, seq=1)
        write = Header(kind=Kind.MEM_WRITE, src=0, dst=2, seq=2)
        flits = [pack_flit(cut, [7], 0), pack_flit(cut, [8], 0), pack_flit(write, [9], 1)]
        flits += [pack_flit(Header(kind=Kind.MEM_WRITE, src=0, dst=1, seq=3), [5], 1)] * behind
        sw = Switch(SwitchSpec(ports=3, lanes=1, slots=2, chunk_flits=2, jobs=2))
        left = _departures(sw, flits)
        return [cycle for (k, bits), cycle in left.items()
                if k == 2 and unpack_flit(1, bits)[0] == write]

    alone, followed = sent(0), sent(3)
    assert len(alone) == 1 and alone == followed
