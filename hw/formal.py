"""Formal harnesses: RTL blocks wrapped with the assumptions and properties SymbiYosys proves.

Each harness is an :class:`~amaranth.hdl.Elaboratable` whose ``Assume`` statements constrain the
inputs to what the stream rules allow and whose ``Assert`` statements are the properties.
:func:`harness_rtlil` turns one into RTLIL for ``yowasp-sby`` (driven by ``innet formal``).
"""

from amaranth.asserts import AnySeq
from amaranth.back import rtlil
from amaranth.hdl import (Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, ResetSignal,
                          Signal)

from .arbiter import LinkArbiter
from .reduce import PICK_GROUP, ReductionUnit
from .spec import Policy, SwitchSpec

__all__ = ["ArbiterProperties", "ReductionProperties", "harness_rtlil"]


class ArbiterProperties(Elaboratable):
    """The link arbiter with its inputs free but for the stream rules, and these properties:

    1. ``grant`` is one-hot or zero, and whenever the output is valid or a choice is held it
       is ``choice`` (the ungated decode the switch zeroes a tail's data by).
    2. No grant without a request: a fresh grant (not mid-packet) goes to a requester whose
       ``valid`` is high, and the output is valid only when the granted requester's is.
    3. The grant is stable from the first presented flit until the last flit is accepted.
    4. Round-robin only: while a requester waits, at most N−1 packets of others start
       (with its inductive strengthening: that count never exceeds the circular distance the
       round-robin pointer has moved past the waiting requester).
    5. Only the granted requester sees ``ready``; a flit moves only when the output accepts it.
    6. The output carries the granted requester's flit, every bit of it (the multiplexer is
       built in slices, each selected by its own copy of the choice register, asserted equal
       to it inside the arbiter).

    Parameters
    ----------
    ports : int
    policy : Policy or str
    starvation_bound : int, optional
        The bound asserted by property 4 (default N−1). Tests set it to N−2 and demand a
        counterexample, which shows the proof is not vacuous.
    """

    def __init__(self, ports, policy, *, starvation_bound=None):
        self.ports = ports
        self.policy = Policy.parse(policy)
        self.starvation_bound = ports - 1 if starvation_bound is None else starvation_bound
        self.dut = LinkArbiter(ports, 1, self.policy)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        n = self.ports
        m.d.comb += Assume(~ResetSignal())   # registers start at their reset values

        # Every input is free in every cycle (an undriven signal would be its constant init).
        for port in dut.i:
            width = len(port.payload.as_value())
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.as_value().eq(AnySeq(width))]
        m.d.comb += dut.o.ready.eq(AnySeq(1))
        if self.policy == Policy.PRIO:
            m.d.comb += dut.priority.as_value().eq(AnySeq(len(dut.priority.as_value())))
        if self.policy == Policy.WRR:
            m.d.comb += dut.weight.as_value().eq(AnySeq(len(dut.weight.as_value())))
        if self.policy == Policy.DRR:
            m.d.comb += dut.quantum.eq(AnySeq(len(dut.quantum)))

        valid = Cat(port.valid for port in dut.i)
        ready = Cat(port.ready for port in dut.i)
        accept = dut.o.valid & dut.o.ready
        release = accept & dut.o.payload.last

        # Stream rules on the inputs: valid holds until accepted, and the flit (its `last`
        # bit is all the arbiter reads) is stable meanwhile.
        past_valid = Signal(n)
        past_ready = Signal(n)
        past_last = Signal(n)
        started = Signal()   # one cycle has passed (the past_* registers mean something)
        m.d.sync += [
            past_valid.eq(valid),
            past_ready.eq(ready),
            past_last.eq(Cat(port.payload.last for port in dut.i)),
            started.eq(1),
        ]
        for k in range(n):
            with m.If(started & past_valid[k] & ~past_ready[k]):
                m.d.comb += [
                    Assume(dut.i[k].valid),
                    Assume(dut.i[k].payload.last == past_last[k]),
                ]

        grant = dut.grant
        # 1. one-hot or zero; and while a choice is held, exactly one (the held index is a port)
        m.d.comb += Assert((grant & (grant - 1)) == 0)
        with m.If(dut.busy):
            m.d.comb += Assert(grant.any())
        with m.If(dut.busy | dut.o.valid):
            m.d.comb += Assert(grant == dut.choice)
        m.d.comb += Assert(dut.pointer < n)
        # 2. no grant without request
        with m.If(~dut.busy & grant.any()):
            m.d.comb += Assert((grant & valid).any())
        with m.If(dut.o.valid):
            m.d.comb += Assert((grant & valid).any())
        # 3. stable until the last flit is accepted
        past_grant = Signal(n)
        past_hold = Signal()
        m.d.sync += [
            past_grant.eq(grant),
            past_hold.eq((dut.o.valid | dut.busy) & ~release),
        ]
        with m.If(started & past_hold & past_grant.any()):
            m.d.comb += Assert(grant == past_grant)
        # 5. ready only to the granted requester, and only when the output accepts
        m.d.comb += Assert((ready & ~grant) == 0)
        m.d.comb += Assert((ready & valid).any() == accept)
        # 6. the output is the granted requester's flit
        for k in range(n):
            with m.If(dut.o.valid & grant[k]):
                m.d.comb += Assert(dut.o.payload.as_value() == dut.i[k].payload.as_value())

        # 4. round-robin starvation bound
        if self.policy == Policy.RR:
            start = dut.o.valid & ~dut.busy
            ptr = dut.pointer
            for k in range(n):
                waited = Signal(range(n + 1), name=f"waited{k}")
                with m.If(start):
                    with m.If(grant[k]):
                        m.d.sync += waited.eq(0)
                    with m.Elif(valid[k]):
                        m.d.sync += waited.eq(waited + 1)
                m.d.comb += Assert(waited <= self.starvation_bound)
                # Strengthening: the pointer sits `distance` steps past k, and each start by
                # another while k waits moved it at least one step further without passing k.
                distance = Signal(range(n + 1), name=f"distance{k}")
                m.d.comb += distance.eq(Mux(ptr >= k, ptr - k, ptr + n - k))
                with m.If(waited != 0):
                    m.d.comb += Assert(waited <= distance)
                    m.d.comb += Assert(valid[k])
                with m.If(dut.busy & grant[k]):   # a requester mid-packet is not waiting
                    m.d.comb += Assert(waited == 0)
        return m


class ReductionProperties(Elaboratable):
    """The reduction unit with every input free — any flit on any port in any cycle (wrong
    kinds, jobs, slots, lengths, duplicates, truncations), job-table writes at any time
    (groups changing with chunks in flight), any egress backpressure — and these properties:

    1. **Release only when complete**: a slot is freed only while it is valid and every member
       of its snapshot has arrived (a non-empty snapshot).
    2. **Counted once**: a member's arrival marks a bit that was clear (in the table and in the
       register its landing passes on the way, ``slot_landed``), in a valid slot whose
       snapshot contains that member.
    3. **Isolation**: every bank write goes to a slot that, on the next cycle, is held by the
       writing packet's own job and chunk; an arrival lands in a slot of its own job and chunk.
    4. **Stream rules**: no contribution flit is taken into a full hold FIFO, and a port with
       room for a whole chunk in its hold FIFO takes a first flit (``ready``); on every result
       port ``valid`` does not fall and the flit does not change until ``ready``; no result is
       ever written into a full result FIFO (nothing lost).
    5. **No read-during-write on a bank**: a bank write never hits the word the engine reads
       in the same cycle (why the banks carry Yosys's ``no_rw_check``: no bypass logic).

    6. **The judge's two steps judge as one**: the header step B judges is, whenever it is
       ready, the head of the FIFO whose turn it is (all but the data), ready exactly when that FIFO has a head
       and its port is between packets; and step B's registered view of the header's slot
       entry (valid, job, chunk, members, arrivals) is the table's entry in that cycle, its
       arrivals with the landings on their way.

    Invariants that make the proof inductive, each a true statement of the design: a port
    writing a packet holds its slot as a not-yet-arrived member of the slot's job and chunk; a
    free slot has no arrivals and no landings; arrivals and landings are disjoint subsets of
    the snapshot.

    ``spec`` is the unit's :class:`hw.spec.SwitchSpec`; the default is the size proved in CI
    (3 ports, 1 lane, 2 slots, 2-flit chunks, 2 jobs, int32).

    Non-vacuity: with ``reachability=True`` the harness states, under the same assumptions
    and in place of the properties, two cover goals for SymbiYosys's ``cover`` mode, which
    must both be reached: a slot freed (a complete reduction), so properties 1–3 are not true
    merely because nothing happens; and a bank written in a cycle the engine reads, so
    property 5 compares addresses of writes and reads that do meet (:data:`REACHABLE`).
    """

    #: The cover goals of ``reachability=True``, in the order SymbiYosys numbers them.
    REACHABLE = ("a slot freed", "a bank written while the engine reads")

    def __init__(self, spec=None, *, reachability=False):
        spec = spec or SwitchSpec(ports=3, lanes=1, slots=2, chunk_flits=2, jobs=2,
                                  dtypes=("int32",))
        self.dut = ReductionUnit(spec)
        self.reachability = reachability

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        st = dut.state
        N, S = dut.ports, dut.slots
        m.d.comb += Assume(~ResetSignal())
        for port in dut.i:
            m.d.comb += [port.valid.eq(AnySeq(1)),
                         port.payload.as_value().eq(AnySeq(len(port.payload.as_value())))]
        for port in dut.o:
            m.d.comb += port.ready.eq(AnySeq(1))
        for name in ("valid", "job", "enable", "members", "dtype", "saturate", "slot_base",
                     "slot_count", "clear"):
            sig = getattr(dut.cfg, name)
            value = sig.as_value() if hasattr(sig, "as_value") else sig
            m.d.comb += value.eq(AnySeq(len(value)))
        if self.reachability:
            # A reachability question: the assumptions above and the cover goals. The
            # properties below would only make every bounded step's query larger (they are
            # proved on their own), not change which states are reachable.
            m.d.comb += [Cover(st.slot_free.any()), Cover(st.bank_write.any() & st.bank_read)]
            return m

        started = Signal()
        m.d.sync += started.eq(1)

        def at(sigs, index, width):
            """``sigs[index]`` for a run-time index."""
            out = Signal(width)
            for i, sig in enumerate(sigs):
                with m.If(index == i):
                    m.d.comb += out.eq(sig)
            return out

        def meta_at(index):
            """The slot-table entry (job, seq, ...) held in LUT-RAM for a run-time slot: a read
            port of the harness's own on the unit's memory."""
            port = st.slot_meta.read_port(domain="comb")
            m.d.comb += port.addr.eq(index)
            return port.data

        # each slot's arrivals with the landings on their way to the table
        seen = [st.slot_arrived[s] | st.slot_landed[s] for s in range(S)]
        for s in range(S):
            # 1. release only when complete (so never with a landing on its way)
            with m.If(st.slot_free[s]):
                m.d.comb += [Assert(st.slot_valid[s]),
                             Assert(st.slot_arrived[s] == st.slot_members[s]),
                             Assert(st.slot_landed[s] == 0),
                             Assert(st.slot_members[s].any())]
            # invariants
            with m.If(~st.slot_valid[s]):
                m.d.comb += [Assert(st.slot_arrived[s] == 0), Assert(st.slot_landed[s] == 0)]
            m.d.comb += [Assert((seen[s] & ~st.slot_members[s]) == 0),
                         Assert((st.slot_arrived[s] & st.slot_landed[s]) == 0)]
            # the members are kept twice, written by the same claim: in flip-flops (for the
            # engine's completion test and pick) and in LUT-RAM (for the judge's read)
            m.d.comb += Assert(meta_at(s).members == st.slot_members[s])

        # invariants of the engine: the slot it reads and the slot it picked are complete
        def complete(slot):
            return (at(st.slot_valid, slot, 1) & (at(st.slot_arrived, slot, N) ==
                                                   at(st.slot_members, slot, N)) &
                    at(st.slot_members, slot, N).any())

        with m.If(st.busy):
            m.d.comb += [Assert(complete(st.eng_slot)),
                         Assert(st.eng_slot_members == at(st.slot_members, st.eng_slot, N)),
                         Assert(st.eng_idx != 0), Assert(st.eng_idx < dut.chunk_flits)]
        # A pick (and each group's choice in its first step) names a complete slot with its
        # members, or the slot the engine finished reading the cycle before, which the
        # engine then does not start (it skips that slot, or rests after a one-flit chunk).
        def picked(ok, slot, members):
            with m.If(ok & ~(st.finished & (slot == st.eng_slot))):
                m.d.comb += [Assert(complete(slot)),
                             Assert(members == at(st.slot_members, slot, N))]

        picked(st.pick_ok, st.pick, st.pick_members)
        G = PICK_GROUP
        for g, regs in enumerate(st.pick_groups):
            for n in (1, 2):
                slot = Signal(range(max(S, 2) + G), name=f"inv_g{g}_slot{n}")
                m.d.comb += slot.eq(g * G + getattr(regs, f"idx{n}"))
                picked(getattr(regs, f"any{n}"), slot, getattr(regs, f"mem{n}"))
            m.d.comb += Assert(~regs.any2 | (regs.any1 & (regs.idx2 != regs.idx1)))
        # ... and every result flit it issued is counted until it leaves a FIFO
        m.d.comb += Assert(st.in_flight == sum(st.stage_valid[d]
                                               for d in range(len(st.stage_valid))))
        for k in range(N):
            m.d.comb += [Assert(st.result_occupancy[k] == st.fifo_level[k] + st.in_flight),
                         Assert(st.fifo_level[k] + sum(st.stage_valid[d] & st.stage_members[d][k]
                                                       for d in range(len(st.stage_valid)))
                                <= dut.spec.result_fifo_flits)]

        for k in range(N):
            hdr = st.in_flit[k]   # the flit leaving the hold FIFO (judged, if a first flit)
            # 2. counted once
            with m.If(st.arrive[k]):
                slot = st.arrive_slot[k]
                arrived = at(seen, slot, N)
                members = at(st.slot_members, slot, N)
                m.d.comb += Assert(~arrived[k])
                if dut.chunk_flits > 1:   # a one-flit chunk arrives as it claims
                    meta = meta_at(slot)
                    m.d.comb += [Assert(st.slot_valid.bit_select(slot, 1)),
                                 Assert(members[k]),
                                 Assert(meta.job == st.cur_job[k]),
                                 Assert(meta.seq == st.cur_seq[k])]
            # 3. isolation: the slot written is the packet's own on the next cycle
            wjob = Signal.like(st.cur_job[k], name=f"wjob{k}")
            wseq = Signal.like(st.cur_seq[k], name=f"wseq{k}")
            m.d.comb += [wjob.eq(Mux(st.in_packet[k], st.cur_job[k], hdr.user.job)),
                         wseq.eq(Mux(st.in_packet[k], st.cur_seq[k], hdr.user.seq))]
            past_write = Signal(name=f"past_write{k}")
            past_slot = Signal.like(st.write_slot[k], name=f"past_wslot{k}")
            past_job = Signal.like(wjob, name=f"past_wjob{k}")
            past_seq = Signal.like(wseq, name=f"past_wseq{k}")
            m.d.sync += [past_write.eq(st.write[k]), past_slot.eq(st.write_slot[k]),
                         past_job.eq(wjob), past_seq.eq(wseq)]
            with m.If(started & past_write):
                past_meta = meta_at(past_slot)
                m.d.comb += [Assert(past_meta.job == past_job), Assert(past_meta.seq == past_seq)]
                if dut.chunk_flits > 1:
                    m.d.comb += Assert(st.slot_valid.bit_select(past_slot, 1) |
                                       ~st.in_packet[k])
            # invariant: a port mid-write holds its slot as a member yet to arrive
            with m.If(st.good[k]):
                cur = st.cur_slot[k]
                meta = meta_at(cur)
                m.d.comb += [
                    Assert(st.in_packet[k]),
                    Assert(cur < S),
                    Assert(st.slot_valid.bit_select(cur, 1)),
                    Assert(at(st.slot_members, cur, N)[k]),
                    Assert(~at(seen, cur, N)[k]),
                    Assert(meta.job == st.cur_job[k]),
                    Assert(meta.seq == st.cur_seq[k]),
                    Assert(st.cur_idx[k] <= dut.chunk_flits),
                    Assert(st.cur_idx[k] != 0),
                ]
            # 4. stream rules
            m.d.comb += Assert(~st.hold_lost[k])
            with m.If(st.hold_level[k] <= st.hold_depth - dut.chunk_flits):
                m.d.comb += Assert(dut.i[k].ready)
            out = dut.o[k]
            past_stuck = Signal(name=f"past_stuck{k}")
            past_flit = Signal.like(out.payload.as_value(), name=f"past_flit{k}")
            m.d.sync += [past_stuck.eq(out.valid & ~out.ready),
                         past_flit.eq(out.payload.as_value())]
            with m.If(started & past_stuck):
                m.d.comb += [Assert(out.valid), Assert(out.payload.as_value() == past_flit)]
        m.d.comb += Assert(st.result_lost == 0)
        # 6. the judge's step B sees the head of the turn's FIFO and the slot table of its cycle
        turn = st.turn
        m.d.comb += Assert(st.judge_ready == (st.hold_head_valid.bit_select(turn, 1) &
                                              ~st.in_packet.bit_select(turn, 1)))
        with m.If(st.judge_ready):   # all but the flit's data, which the judge never reads
            skip = len(st.judge_head.flit.data.as_value())
            m.d.comb += Assert(st.judge_head.as_value()[skip:] ==
                               at([h.as_value()[skip:] for h in st.hold_head], turn,
                                  len(st.judge_head.as_value()) - skip))
        jslot = st.judge_head.slot
        jmeta = meta_at(jslot)
        with m.If(jslot < S):
            m.d.comb += [
                Assert(st.judge_v_valid == st.slot_valid.bit_select(jslot, 1)),
                Assert(st.judge_v_turn_arrived == at(seen, jslot, N).bit_select(turn, 1)),
                Assert(st.judge_v_members == at(st.slot_members, jslot, N)),
                Assert(st.judge_v_job == jmeta.job),
                Assert(st.judge_v_seq == jmeta.seq),
            ]
        # 5. no read-during-write on a bank
        for k in range(N):
            m.d.comb += Assert(~(st.bank_write[k] & st.bank_read &
                                 (st.bank_write_addr[k] == st.bank_read_addr)))
        return m


def harness_rtlil(harness, name="top"):
    """RTLIL text of a formal harness."""
    return rtlil.convert(harness, name=name, ports=[], platform="formal")
