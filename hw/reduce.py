"""In-switch reduction unit: adds every member's contribution to a chunk and multicasts the sum.

A contribution packet (``kind = REDUCE_CONTRIB``) names a job, a slot and a chunk sequence
number and carries one chunk: ``chunk_flits`` flits × ``lanes`` 32-bit lanes. The unit

1. writes each port's contribution flits into that port's own **bank** (``bank[k][slot][flit]``)
   at one flit per cycle — ingress never blocks, and nothing is accumulated on arrival;
2. marks the member arrived in the slot when the contribution's last flit lands;
3. when a slot's arrived bitmap equals its member set, **reads every bank in parallel** and
   reduces through a fixed adder tree in member (port) order — absent members pass the other
   operand through — so the result does not depend on the order contributions arrived in;
4. writes each result flit into the result FIFO of every member's egress (multicast), and frees
   the slot when its last flit has been read: the result is the credit to reuse the slot
   (SwitchML-style self-clocking).

Element types, chosen per job: ``INT32`` sums exactly in a widening tree and then wraps or
saturates once (saturating sets the job's sticky overflow flag); ``FP32`` and ``BF16`` (two per
lane) use IEEE round-to-nearest-even adders (:mod:`hw.fpadd`), one per tree node.

Jobs are configured at run time through the ``cfg`` port: members (a port bitmap), element
type, saturation, enable. A slot snapshots its job's members when its first contribution claims
it, so a job's device set can change between chunks without disturbing chunks in flight or other
jobs.

Bad contributions are judged on their first flit and dropped whole, without touching any bank
entry another contribution owns; each is counted once, by its first failing cause (see
:data:`ERROR_CAUSES`).

Timing: a flit is judged the cycle after it arrives. In its arrival cycle (stage 0) everything
that needs only its header and the job table is worked out and registered with it — the checks
that do not involve the slot table, the job's members, the decoded slot, which lower ports name
the same slot — so stage 1 consults the slot table without the job-table lookups in front. A
bank write is requested in stage 1 and performed from registers a cycle later; drop events
are registered before their causes are ranked. None of this changes what is decided, only when:
a chunk is complete one cycle later than its last flit's arrival would otherwise allow, and a
counter shows a drop two cycles after the judgement.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .arbiter import select_tree
from .errors import ParameterTypeError
from .fpadd import BF16, FP32, float_add
from .packet import JOB_BITS, LANE_BITS, SEQ_BITS, SLOT_BITS, DType, Kind, flit_layout
from .spec import SwitchSpec

__all__ = ["ReductionUnit", "ERROR_CAUSES", "COUNTER_BITS", "config_signature", "count_events",
]

#: Drop causes, in the order they are checked; each bad packet counts once, on the first.
ERROR_CAUSES = (
    "bad_kind",        # not a contribution
    "bad_source",      # header src is not the port it arrived on
    "unknown_job",     # job id beyond the table, or not enabled
    "slot_range",      # slot id >= slots
    "foreign_slot",    # slot outside the job's own slot range (another tenant's slots)
    "not_member",      # the source port is not in the job's (or the slot's) member set
    "wrong_dtype",     # element type differs from the job's
    "slot_conflict",   # slot held by another job or another chunk
    "duplicate",       # this member already contributed to this chunk
    "bad_length",      # not exactly chunk_flits flits
)
#: Width of each saturating error counter.
COUNTER_BITS = 16


def lowest_set(m, mask, name):
    """Index of the lowest set bit of ``mask`` (0 when none is set), in logarithmic depth.

    ``mask & -mask`` isolates the bit on the adder's carry chain; each index bit is then an OR
    over the positions that have it. (A chain of ``If``s, one per position, is as deep as the
    mask is wide: 64 levels for a 64-slot pool.)"""
    n = len(mask)
    isolated = Signal(n, name=f"{name}_onehot")
    m.d.comb += isolated.eq(mask & (~mask + 1))
    index = Signal(range(max(n, 2)), name=name)
    m.d.comb += index.eq(Cat(Cat(isolated[k] for k in range(n) if k >> b & 1).any()
                             for b in range(len(index))))
    return index


def count_events(m, counter, events, clear, name):
    """Add the number of ``events`` (1-bit values) that are high to ``counter``, saturating at
    its maximum; ``clear`` zeroes it and discards events of its own cycle and the one before.

    The events are registered first, so a counter reads them one cycle late: the checks that
    raise them (first-flit judgement, ingress classification) are long combinational paths, and
    the adder and saturation behind them need not be on the same path."""
    hits = Signal(len(events), name=f"events_{name}_q")
    m.d.sync += hits.eq(Mux(clear, 0, Cat(*events)))
    total = Signal(range(len(events) + 1), name=f"events_{name}")
    m.d.comb += total.eq(sum(hits))
    top = (1 << len(counter)) - 1
    with m.If(clear):
        m.d.sync += counter.eq(0)
    with m.Elif(total != 0):
        bumped = counter + total
        m.d.sync += counter.eq(Mux(bumped > top, Const(top, len(counter)), bumped))


def config_signature(ports):
    """The configuration port: one job-table write per cycle when ``valid``; ``clear`` resets
    every error counter and overflow flag. A job owns slots ``slot_base`` ..
    ``slot_base + slot_count - 1`` (``slot_count = 0``: the whole pool, for a single tenant);
    a contribution to any other slot is dropped as ``foreign_slot``, so one tenant cannot
    claim, or block, another's slots."""
    return wiring.Signature({
        "valid":      Out(1),
        "job":        Out(JOB_BITS),
        "enable":     Out(1),
        "members":    Out(ports),
        "dtype":      Out(DType),
        "saturate":   Out(1),
        "slot_base":  Out(SLOT_BITS),
        "slot_count": Out(SLOT_BITS),
        "clear":      Out(1),
    })


class ReductionUnit(wiring.Component):
    """The reduction unit.

    Parameters
    ----------
    spec : hw.spec.SwitchSpec
        Ports (members are port numbers), lanes, slot pool, chunk length, job-table entries,
        element types to build adders for, and the result FIFO depth per egress. (The policy
        and the ingress depth are the switch's.)

    Members
    -------
    i : In(stream.Signature(flit)).array(ports)
        Contributions; ``ready`` is always high.
    o : Out(stream.Signature(flit)).array(ports)
        Results, one stream per egress port.
    cfg : In(config_signature(ports))
        Job table writes and counter clear.
    errors : Out(data.ArrayLayout(COUNTER_BITS, len(ERROR_CAUSES)))
        Saturating drop counters, indexed like :data:`ERROR_CAUSES`.
    overflow : Out(jobs)
        Sticky per-job flag: an int32 saturating sum was clamped.
    reductions : Out(32)
        Completed chunks (wrapping).
    """

    def __init__(self, spec):
        if not isinstance(spec, SwitchSpec):
            raise ParameterTypeError(f"A reduction unit is built from a SwitchSpec, not {spec!r}")
        self._spec = spec
        ports, lanes, jobs = spec.ports, spec.lanes, spec.jobs
        layout = flit_layout(lanes)
        self._ports, self._lanes, self._slots = ports, lanes, spec.slots
        self._chunk, self._jobs, self._dtypes = spec.chunk_flits, jobs, spec.dtypes
        self._levels = spec.adder_tree_levels
        self._pipeline = spec.reduction_pipeline_depth
        self._fifo_depth = spec.result_fifo_flits
        super().__init__({
            "i": In(stream.Signature(layout)).array(ports),
            "o": Out(stream.Signature(layout)).array(ports),
            "cfg": In(config_signature(ports)),
            "errors": Out(data.ArrayLayout(COUNTER_BITS, len(ERROR_CAUSES))),
            "overflow": Out(jobs),
            "reductions": Out(32),
        })
        self.state = self._state_signals()

    def _state_signals(self):
        """The slot table and each ingress port's packet state. Not ports: the formal harness
        (:mod:`hw.formal`) states its properties over them, and tests may peek at them."""
        N, S, P = self._ports, self._slots, self._chunk
        slot_range = range(max(S, 2))
        return SimpleNamespace(
            slot_valid=Signal(S, name="slot_valid"),
            slot_job=[Signal(JOB_BITS, name=f"slot{s}_job") for s in range(S)],
            slot_seq=[Signal(SEQ_BITS, name=f"slot{s}_seq") for s in range(S)],
            slot_members=[Signal(N, name=f"slot{s}_members") for s in range(S)],
            slot_arrived=[Signal(N, name=f"slot{s}_arrived") for s in range(S)],
            slot_free=Signal(S, name="slot_free_now"),       # freed by the engine this cycle
            # per port: the flit in stage 1 (registered from the input), judged this cycle
            in_valid=Signal(N, name="in_valid"),
            in_flit=[Signal(flit_layout(self._lanes), name=f"p{k}_flit", reset_less=True)
                     for k in range(N)],
            # per port: the packet in progress and what it does this cycle
            in_packet=Signal(N, name="in_pkt"),
            good=Signal(N, name="good"),                       # being written to the banks
            cur_slot=[Signal(slot_range, name=f"p{k}_slot") for k in range(N)],
            cur_job=[Signal(JOB_BITS, name=f"p{k}_job") for k in range(N)],
            cur_seq=[Signal(SEQ_BITS, name=f"p{k}_seq") for k in range(N)],
            cur_idx=[Signal(range(P + 1), name=f"p{k}_idx") for k in range(N)],
            claim=[Signal(name=f"p{k}_claim") for k in range(N)],
            arrive=[Signal(name=f"p{k}_arrive") for k in range(N)],
            arrive_slot=[Signal(slot_range, name=f"p{k}_arrive_slot") for k in range(N)],
            write=[Signal(name=f"p{k}_write") for k in range(N)],
            write_slot=[Signal(slot_range, name=f"p{k}_write_slot") for k in range(N)],
            result_lost=Signal(N, name="result_lost"),         # a result met a full FIFO
            # per egress: its result FIFO's level plus the flits in the engine's pipeline
            result_occupancy=[Signal(range(self._fifo_depth + self._pipeline + 2),
                                     name=f"result{k}_occupancy") for k in range(N)],
        )

    ports = property(lambda self: self._ports)
    lanes = property(lambda self: self._lanes)
    slots = property(lambda self: self._slots)
    chunk_flits = property(lambda self: self._chunk)
    jobs = property(lambda self: self._jobs)
    dtypes = property(lambda self: self._dtypes)
    latency = property(lambda self: self._pipeline)
    spec = property(lambda self: self._spec)

    def elaborate(self, platform):
        m = Module()
        N, L, S, P, J = self._ports, self._lanes, self._slots, self._chunk, self._jobs
        addr_depth = max(S * P, 2)   # a one-entry memory would have a zero-width address

        # -- job table ---------------------------------------------------------------------
        job_enable = Signal(J)
        job_members = [Signal(N, name=f"job{j}_members") for j in range(J)]
        job_dtype = [Signal(2, name=f"job{j}_dtype") for j in range(J)]   # DType values
        job_sat = Signal(J)
        # A job's own slots as [lo, hi) clipped to the pool, computed when the entry is written:
        # for a slot id inside the pool, "below slot_base or at/after slot_base + slot_count"
        # is "below lo or at/after hi", two narrow comparisons in parallel instead of a 16-bit
        # subtraction followed by a 16-bit comparison on the first-flit path.
        job_whole = Signal(J)      # slot_count = 0: the whole pool
        job_lo = [Signal(range(S + 1), name=f"job{j}_slot_lo") for j in range(J)]
        job_hi = [Signal(range(S + 1), name=f"job{j}_slot_hi") for j in range(J)]
        cfg_end = Signal(SLOT_BITS + 1)
        m.d.comb += cfg_end.eq(self.cfg.slot_base + self.cfg.slot_count)
        for j in range(J):   # one comparison per entry: no run-time-indexed assignment
            with m.If(self.cfg.valid & (self.cfg.job == j)):
                m.d.sync += [
                    job_enable[j].eq(self.cfg.enable),
                    job_members[j].eq(self.cfg.members),
                    job_dtype[j].eq(self.cfg.dtype.as_value()),
                    job_sat[j].eq(self.cfg.saturate),
                    job_whole[j].eq(self.cfg.slot_count == 0),
                    job_lo[j].eq(Mux(self.cfg.slot_base < S, self.cfg.slot_base, S)),
                    job_hi[j].eq(Mux(cfg_end < S, cfg_end, S)),
                ]

        # -- slot table --------------------------------------------------------------------
        st = self.state
        slot_valid, slot_job, slot_seq = st.slot_valid, st.slot_job, st.slot_seq
        slot_members, slot_arrived = st.slot_members, st.slot_arrived
        slot_dtype = [Signal(2, name=f"slot{s}_dtype") for s in range(S)]
        slot_sat = Signal(S)

        # -- banks -------------------------------------------------------------------------
        lane_shape = data.ArrayLayout(LANE_BITS, L)
        read_addr = Signal(range(addr_depth))
        read_en = Signal()
        bank_data = []
        write_ports = []
        for k in range(N):
            m.submodules[f"bank{k}"] = bank = Memory(shape=lane_shape, depth=addr_depth, init=[])
            # The judgement drives a write request; the bank takes it a cycle later from
            # registers, so the first-flit checks end at a flip-flop instead of at the bank's
            # write enable (far away, with a long setup in LUT-RAM). The engine cannot miss the
            # delayed write: it reads a chunk no earlier than two cycles after its last arrival
            # (the arrival and the pick are both registered).
            bank_wp = bank.write_port()
            wp = SimpleNamespace(en=Signal(name=f"bank{k}_wreq"),
                                 addr=Signal(range(addr_depth), name=f"bank{k}_wreq_addr"),
                                 data=Signal(lane_shape, name=f"bank{k}_wreq_data"))
            # Address and data need no reset: nothing is written while the enable is low.
            wreq_addr = Signal.like(wp.addr, name=f"bank{k}_waddr", reset_less=True)
            wreq_data = Signal.like(wp.data, name=f"bank{k}_wdata", reset_less=True)
            m.d.sync += [bank_wp.en.eq(wp.en), wreq_addr.eq(wp.addr), wreq_data.eq(wp.data)]
            m.d.comb += [bank_wp.addr.eq(wreq_addr), bank_wp.data.eq(wreq_data)]
            write_ports.append(wp)
            rp = bank.read_port()
            m.d.comb += [rp.addr.eq(read_addr), rp.en.eq(read_en)]
            bank_data.append(rp.data)

        # -- ingress: per-port packet state and first-flit checks ---------------------------
        in_pkt, good, cur_slot, cur_idx = st.in_packet, st.good, st.cur_slot, st.cur_idx
        claim, arrive, arrive_slot = st.claim, st.arrive, st.arrive_slot
        cause_hit = [Signal(len(ERROR_CAUSES), name=f"p{k}_cause") for k in range(N)]
        slot_free_now = st.slot_free
        jbits = max(1, (J - 1).bit_length())

        # Stage 0, per port, on the flit as it arrives: everything that depends only on the
        # header and the job table — the slot id clipped to the pool and decoded, the checks
        # that do not look at the slot table, the job's members and saturation, and which lower
        # ports name the same slot. Registered, with the flit, into stage 1, where the slot
        # table is consulted; the job-table lookups are then off the judgement's path. (The job
        # table a packet sees is the one of the cycle it arrived in.)
        in_valid, in_flit = st.in_valid, st.in_flit
        hslot, hslot_hot, job_m, job_sat_k, static_bad, same_slot = [], [], [], [], [], []
        raw_slots = []
        for k, port in enumerate(self.i):
            m.d.comb += port.ready.eq(1)
            hdr = port.payload
            slot_id, job_id = hdr.user.slot, hdr.user.job
            slot = Signal(range(max(S, 2)), name=f"p{k}_hslot_in")
            m.d.comb += slot.eq(Mux(slot_id < S, slot_id, 0))
            members = select_tree(m, job_id, job_members, N, f"p{k}_jmembers")
            lo = select_tree(m, job_id, job_lo, range(S + 1), f"p{k}_jlo")
            hi = select_tree(m, job_id, job_hi, range(S + 1), f"p{k}_jhi")
            whole = job_whole.bit_select(job_id[:jbits], 1)
            checks = [
                hdr.user.kind != Kind.REDUCE_CONTRIB,
                hdr.src != k,
                ~((job_id < J) & job_enable.bit_select(job_id[:jbits], 1)),
                slot_id >= S,
                ~whole & ((slot < lo) | (slot >= hi)),   # (slot_range decides ids >= S)
                ~members[k],
                hdr.user.dtype.as_value() != select_tree(m, job_id, job_dtype, 2, f"p{k}_jdtype"),
            ]
            q_slot = Signal.like(slot, name=f"p{k}_hslot", reset_less=True)
            q_hot = Signal(S, name=f"p{k}_hslot_hot", reset_less=True)
            q_members = Signal(N, name=f"p{k}_jmembers_q", reset_less=True)
            q_sat = Signal(name=f"p{k}_jsat_q", reset_less=True)
            q_static = Signal(len(checks), name=f"p{k}_static_checks", reset_less=True)
            m.d.sync += [
                in_valid[k].eq(port.valid),
                in_flit[k].eq(hdr),
                q_slot.eq(slot),
                q_hot.eq(Const(1, S) << slot),
                q_members.eq(members),
                q_sat.eq(job_sat.bit_select(job_id[:jbits], 1)),
                q_static.eq(Cat(*checks)),
            ]
            raw_slots.append(slot)
            hslot.append(q_slot)
            hslot_hot.append(q_hot)
            job_m.append(q_members)
            job_sat_k.append(q_sat)
            static_bad.append(q_static)
        same_slot.append(None)   # port 0 has no lower port
        for k in range(1, N):
            same = Signal(k, name=f"p{k}_same_slot", reset_less=True)
            m.d.sync += same.eq(Cat(raw_slots[j] == raw_slots[k] for j in range(k)))
            same_slot.append(same)

        # Stage 1, pass 1: whether each port's first flit would claim its slot if no lower
        # port claimed it too.
        could_claim = []
        for k in range(N):
            could = Signal(name=f"p{k}_could_claim")
            m.d.comb += could.eq(in_valid[k] & ~in_pkt[k] & ~static_bad[k].any() &
                                 ~slot_valid.bit_select(hslot[k], 1))
            could_claim.append(could)

        # Pass 2: the lowest port that could claim a slot claims it; a higher port naming the
        # same slot sees it as held by that port's chunk. A flat comparison of every pair of
        # ports, not a chain through each lower port's verdict (identical claims: the lowest
        # port that could claim a slot always does).
        for k in range(N):
            valid, hdr = in_valid[k], in_flit[k]
            first = valid & ~in_pkt[k]
            slot, job_id = hslot[k], hdr.user.job
            hits = [could_claim[j] & same_slot[k][j] for j in range(k)]
            forwarded = Signal(name=f"p{k}_forwarded")
            m.d.comb += forwarded.eq(Cat(*hits).any() if hits else Const(0, 1))
            m.d.comb += claim[k].eq(could_claim[k] & ~forwarded)

            # The slot as this port sees it, including a claim by a lower port this cycle.
            v_valid = Signal(name=f"p{k}_v_valid")
            v_job = Signal(JOB_BITS, name=f"p{k}_v_job")
            v_seq = Signal(SEQ_BITS, name=f"p{k}_v_seq")
            v_members = Signal(N, name=f"p{k}_v_members")
            m.d.comb += [
                v_valid.eq(slot_valid.bit_select(slot, 1) | forwarded),
                v_job.eq(select_tree(m, slot, slot_job, JOB_BITS, f"p{k}_sjob")),
                v_seq.eq(select_tree(m, slot, slot_seq, SEQ_BITS, f"p{k}_sseq")),
                v_members.eq(select_tree(m, slot, slot_members, N, f"p{k}_smembers")),
            ]
            for j in reversed(range(k)):   # the lowest claiming port wins (assigned last)
                other = in_flit[j]
                with m.If(hits[j]):
                    m.d.comb += [v_job.eq(other.user.job), v_seq.eq(other.user.seq),
                                 v_members.eq(job_m[j])]
            members = Mux(v_valid, v_members, job_m[k])
            alone = static_bad[k]   # kind, source, job, range, foreign, member, dtype
            checks = [alone[0], alone[1], alone[2], alone[3], alone[4],
                      ~members[k],     # the member set of the slot's chunk, once it has one
                      alone[6],
                      v_valid & ((v_job != job_id) | (v_seq != hdr.user.seq)),
                v_valid & select_tree(m, slot, slot_arrived, N, f"p{k}_sarrived")[k],
                Const(0, 1),   # bad_length is found later
            ]
            bad = Signal(name=f"p{k}_bad")
            m.d.comb += bad.eq(Cat(*checks).any())
            # What the counters see is registered before the first failing cause is picked,
            # so the priority among causes is not on the judgement's path: bits 0-8 are the
            # checks on a first flit, 9 a wrong length found on a later flit, 10 a first flit
            # that is also the last of a chunk longer than one flit (too short, unless some
            # other cause drops it first).
            n_checks = len(ERROR_CAUSES) - 1
            raw = Signal(n_checks + 1 + (P > 1), name=f"p{k}_cause_raw")
            raw_q = Signal(len(raw), name=f"p{k}_cause_raw_q")
            m.d.comb += raw[:n_checks].eq(Cat(first & check for check in checks[:-1]))
            m.d.sync += raw_q.eq(Mux(self.cfg.clear, 0, raw))
            for c in range(n_checks):
                earlier = raw_q[:c].any() if c else Const(0, 1)
                m.d.comb += cause_hit[k][c].eq(raw_q[c] & ~earlier)
            short = raw_q[n_checks + 1] & ~raw_q[:n_checks].any() if P > 1 else Const(0, 1)
            m.d.comb += cause_hit[k][n_checks].eq(raw_q[n_checks] | short)

            wp = write_ports[k]
            idx = cur_idx[k]
            m.d.comb += st.write[k].eq(wp.en)
            with m.If(valid):
                with m.If(first):
                    m.d.sync += [in_pkt[k].eq(~hdr.last), good[k].eq(~bad & ~hdr.last),
                                 cur_slot[k].eq(slot), idx.eq(1),
                                 st.cur_job[k].eq(job_id), st.cur_seq[k].eq(hdr.user.seq)]
                    m.d.comb += [wp.en.eq(~bad), wp.addr.eq(slot * P), wp.data.eq(hdr.data),
                                 st.write_slot[k].eq(slot)]
                    if P == 1:
                        with m.If(~bad & hdr.last):
                            m.d.comb += [arrive[k].eq(1), arrive_slot[k].eq(slot)]
                    else:
                        m.d.comb += raw[n_checks + 1].eq(hdr.last)
                with m.Else():
                    m.d.sync += idx.eq(Mux(idx < P, idx + 1, idx))
                    with m.If(hdr.last):
                        m.d.sync += [in_pkt[k].eq(0), good[k].eq(0)]
                    # The switch ended a truncated contribution: abandon it (no write, no
                    # arrival; the switch counted it).
                    with m.If(good[k] & (hdr.user.kind != Kind.NULLIFIED)):
                        too_long = idx >= P
                        m.d.comb += [wp.en.eq(~too_long), wp.addr.eq(cur_slot[k] * P + idx),
                                     wp.data.eq(hdr.data), st.write_slot[k].eq(cur_slot[k])]
                        with m.If(too_long):
                            m.d.sync += good[k].eq(0)
                            m.d.comb += raw[n_checks].eq(1)
                        with m.Elif(hdr.last):
                            with m.If(idx == P - 1):
                                m.d.comb += [arrive[k].eq(1), arrive_slot[k].eq(cur_slot[k])]
                            with m.Else():
                                m.d.comb += raw[n_checks].eq(1)

        # -- slot table updates ------------------------------------------------------------
        claim_entry_layout = data.StructLayout({"job": JOB_BITS, "seq": SEQ_BITS, "members": N,
                                                "dtype": 2, "sat": 1})
        claim_entry = []     # what port k's claim stores in its slot
        claim_hot = []       # port k claims slot s
        for k in range(N):
            entry = Signal(claim_entry_layout, name=f"p{k}_claim_entry")
            hdr = in_flit[k]
            m.d.comb += [entry.job.eq(hdr.user.job), entry.seq.eq(hdr.user.seq),
                         entry.members.eq(job_m[k]), entry.dtype.eq(hdr.user.dtype.as_value()),
                         entry.sat.eq(job_sat_k[k])]
            claim_entry.append(entry)
            hot = Signal(S, name=f"p{k}_claim_hot")
            m.d.comb += hot.eq(Mux(claim[k], hslot_hot[k], 0))
            claim_hot.append(hot)
        for s in range(S):
            set_bits = Signal(N, name=f"slot{s}_set")
            m.d.comb += set_bits.eq(Cat(arrive[k] & (arrive_slot[k] == s) for k in range(N)))
            claimed = Signal(name=f"slot{s}_claimed")
            m.d.comb += claimed.eq(Cat(claim_hot[k][s] for k in range(N)).any())
            with m.If(slot_free_now[s]):
                m.d.sync += [slot_valid[s].eq(0), slot_arrived[s].eq(0)]
            with m.Else():
                m.d.sync += slot_arrived[s].eq(slot_arrived[s] | set_bits)
                with m.If(claimed):
                    m.d.sync += slot_valid[s].eq(1)
            # At most one port claims a slot in a cycle (the lowest that could; pass 2), so
            # the claimer's header is chosen by its index through a multiplexer tree rather
            # than by a chain of eight priority `If`s per bit (which cost about twice the
            # LUTs: 64 entries × 35 bits).
            writer = Signal(range(max(N, 2)), name=f"slot{s}_writer")
            m.d.comb += writer.eq(Cat(Cat(claim_hot[k][s] for k in range(N) if k >> b & 1).any()
                                      for b in range(len(writer))))
            entry = select_tree(m, writer, claim_entry, claim_entry_layout, f"slot{s}_entry")
            with m.If(claimed):
                m.d.sync += [slot_job[s].eq(entry.job), slot_seq[s].eq(entry.seq),
                             slot_members[s].eq(entry.members), slot_dtype[s].eq(entry.dtype),
                             slot_sat[s].eq(entry.sat)]

        # -- engine: pick a complete slot, read its flits, reduce ---------------------------
        # The pick is registered: each cycle the lowest complete slot of this cycle's table
        # is chosen for the next cycle, so the engine's issue decision starts from flip-flops
        # (one cycle more latency when the engine is idle; none between back-to-back chunks).
        # The slot the engine frees this cycle is still complete in this cycle's table, so a
        # second pick without it is made alongside and taken when the engine frees one.
        complete = Signal(S)
        m.d.comb += complete.eq(Cat(slot_valid[s] & (slot_arrived[s] == slot_members[s]) &
                                    slot_members[s].any() for s in range(S)))
        busy = Signal()
        eng_slot = Signal(range(max(S, 2)))
        eng_idx = Signal(range(max(P, 2)))
        eng_slot_members = Signal(N)     # members of the slot being read
        pick = Signal(range(max(S, 2)))  # registered: the slot to start next
        pick_ok = Signal()
        pick_members = Signal(N)
        cur = Signal(range(max(S, 2)))
        m.d.comb += cur.eq(Mux(busy, eng_slot, pick))
        others = Signal(S)
        m.d.comb += others.eq(complete & ~(Const(1, S) << cur))
        pick_all = lowest_set(m, complete, "pick_all")
        pick_others = lowest_set(m, others, "pick_others")
        members_all = select_tree(m, pick_all, slot_members, N, "pick_all_members")
        members_others = select_tree(m, pick_others, slot_members, N, "pick_others_members")

        # Credits: results in flight must fit in every member's FIFO.
        fifos = []
        for k in range(N):
            m.submodules[f"result_fifo{k}"] = q = fifo.SyncFIFOBuffered(
                width=flit_layout(L).size, depth=self._fifo_depth)
            fifos.append(q)
        in_flight = Signal(range(self._pipeline + 2))
        # occupancy[k] is kept equal to fifos[k].level + in_flight, updated from the events
        # that change either, so the issue decision compares a register with a constant
        # instead of adding two counters first (the engine's longest path).
        occupancy = st.result_occupancy
        room = Signal()
        eng_members = Signal(N)
        m.d.comb += eng_members.eq(Mux(busy, eng_slot_members, pick_members))
        m.d.comb += room.eq(Cat(~eng_members[k] | (occupancy[k] < self._fifo_depth - 1)
                                for k in range(N)).all())
        start = ~busy & pick_ok
        issue = Signal()
        m.d.comb += issue.eq((busy | start) & room)
        last_issue = Signal()
        m.d.comb += last_issue.eq(issue & Mux(busy, eng_idx == P - 1, P == 1))
        with m.If(last_issue):
            m.d.sync += [pick.eq(pick_others), pick_ok.eq(others.any()),
                         pick_members.eq(members_others)]
        with m.Else():
            m.d.sync += [pick.eq(pick_all), pick_ok.eq(complete.any()),
                         pick_members.eq(members_all)]
        with m.If(issue):
            m.d.comb += [read_en.eq(1), read_addr.eq(cur * P + Mux(busy, eng_idx, 0))]
            with m.If(last_issue):
                m.d.sync += [busy.eq(0), eng_idx.eq(0)]
                m.d.comb += slot_free_now.eq(Const(1, S) << cur)
            with m.Else():
                m.d.sync += [busy.eq(1), eng_slot.eq(cur), eng_slot_members.eq(eng_members),
                             eng_idx.eq(Mux(busy, eng_idx + 1, 1))]

        # Metadata travels beside the data through the pipeline.
        meta_layout = data.StructLayout({
            "valid": 1, "last": 1, "slot": range(max(S, 2)), "members": N, "job": JOB_BITS,
            "seq": SEQ_BITS, "dtype": DType, "sat": 1})
        stages = [Signal(meta_layout, name=f"meta{d}") for d in range(self._pipeline)]
        m.d.sync += [
            stages[0].valid.eq(issue), stages[0].last.eq(last_issue), stages[0].slot.eq(cur),
            stages[0].members.eq(eng_members),
            stages[0].job.eq(select_tree(m, cur, slot_job, JOB_BITS, "eng_job")),
            stages[0].seq.eq(select_tree(m, cur, slot_seq, SEQ_BITS, "eng_seq")),
            stages[0].dtype.as_value().eq(select_tree(m, cur, slot_dtype, 2, "eng_dtype")),
            stages[0].sat.eq(slot_sat.bit_select(cur, 1)),
        ]
        for d in range(1, self._pipeline):
            m.d.sync += stages[d].eq(stages[d - 1])
        # in_flight counts issued flits not yet in the FIFOs
        entering = issue
        leaving = stages[-1].valid
        m.d.sync += in_flight.eq(in_flight + entering - leaving)
        for k, q in enumerate(fifos):
            m.d.sync += occupancy[k].eq(occupancy[k] + entering - leaving + (q.w_en & q.w_rdy)
                                        - (q.r_en & q.r_rdy))

        # Adder trees over the bank outputs (stage 0 holds the read data), one level per stage.
        members0 = stages[0].members
        result_lanes = []
        sat_flags = []
        for lane in range(L):
            leaves = [(bank_data[k][lane], members0[k]) for k in range(N)]
            r, flag = self._reduce_lane(m, leaves, stages, lane)
            result_lanes.append(r)
            sat_flags.append(flag)

        out_meta = stages[-1]
        result = Signal(flit_layout(L))
        m.d.comb += [
            result.data.eq(Cat(*result_lanes)),
            result.last.eq(out_meta.last),
            result.src.eq(0),
            result.user.kind.eq(Kind.REDUCE_RESULT),
            result.user.dtype.eq(out_meta.dtype),
            result.user.job.eq(out_meta.job),
            result.user.slot.eq(out_meta.slot),
            result.user.seq.eq(out_meta.seq),
        ]
        for k in range(N):
            q = fifos[k]
            copy = Signal(flit_layout(L), name=f"result{k}")
            m.d.comb += [copy.eq(result), copy.dst.eq(k)]
            m.d.comb += [q.w_data.eq(copy), q.w_en.eq(out_meta.valid & out_meta.members[k]),
                         st.result_lost[k].eq(q.w_en & ~q.w_rdy)]
            out = self.o[k]
            m.d.comb += [out.payload.eq(q.r_data), out.valid.eq(q.r_rdy),
                         q.r_en.eq(out.ready)]

        # -- counters and flags ------------------------------------------------------------
        for c, cause in enumerate(ERROR_CAUSES):
            count_events(m, self.errors[c], [cause_hit[k][c] for k in range(N)],
                         self.cfg.clear, cause)
        any_sat = Signal()
        m.d.comb += any_sat.eq(out_meta.valid & Cat(*sat_flags).any())
        with m.If(self.cfg.clear):
            m.d.sync += self.overflow.eq(0)
        with m.Elif(any_sat):
            for j in range(J):
                with m.If(out_meta.job == j):
                    m.d.sync += self.overflow[j].eq(1)
        with m.If(out_meta.valid & out_meta.last):
            m.d.sync += self.reductions.eq(self.reductions + 1)
        return m

    # -- one lane's reduction tree -------------------------------------------------------------

    def _reduce_lane(self, m, leaves, stages, lane):
        """Reduce ``leaves`` ([(word, present)] in member order) through ``self._levels``
        registered levels; returns ``(word at the last stage, saturated flag)``.

        An int32 level takes one cycle; a floating-point level takes ``adder_level_stages``
        (pipelined adders), so with fp adders built the int32 root is delayed to meet the fp
        roots at the result select."""
        dtypes = self._dtypes
        k_fp = self._spec.adder_level_stages
        int_width = LANE_BITS + self._levels
        fp_keys = [(key, fmt) for key, fmt, enabled in (
            ("f32", FP32, "fp32" in dtypes), ("b0", BF16, "bf16" in dtypes),
            ("b1", BF16, "bf16" in dtypes)) if enabled]

        def delay(value, cycles, tag):
            for c in range(cycles):
                reg = Signal(len(value), name=f"{tag}_d{c}", reset_less=True)
                m.d.sync += reg.eq(value)
                value = reg
            return value

        # int32: one registered level per cycle; "p" marks a present member.
        int_root = None
        if "int32" in dtypes:
            nodes = [{"int": word.as_signed(), "p": present} for word, present in leaves]
            for level in range(self._levels):
                nxt = []
                for pair in range(0, len(nodes), 2):
                    a = nodes[pair]
                    b = nodes[pair + 1] if pair + 1 < len(nodes) else None
                    tag = f"l{lane}_v{level}_{pair // 2}"
                    node = {"int": Signal(signed(int_width), name=f"{tag}_int"),
                            "p": Signal(name=f"{tag}_ip")}
                    if b is None:
                        m.d.sync += [node["int"].eq(a["int"]), node["p"].eq(a["p"])]
                    else:
                        m.d.sync += [node["int"].eq(Mux(a["p"], a["int"], 0) +
                                                    Mux(b["p"], b["int"], 0)),
                                     node["p"].eq(a["p"] | b["p"])]
                    nxt.append(node)
                nodes = nxt
            int_root = delay(nodes[0]["int"], self._levels * (k_fp - 1),
                             f"l{lane}_int_root").as_signed()

        # fp32 / bf16: k_fp cycles per level. A node with both operands present is their sum;
        # with one, that operand passes (its NaN payload too); the choice is registered with
        # the adder's first stage and travels beside it.
        fp_root = {}
        if fp_keys:
            nodes = []
            for word, present in leaves:
                nodes.append({"f32": word, "b0": word[:16], "b1": word[16:], "p": present})
            for level in range(self._levels):
                nxt = []
                for pair in range(0, len(nodes), 2):
                    a = nodes[pair]
                    b = nodes[pair + 1] if pair + 1 < len(nodes) else None
                    tag = f"l{lane}_v{level}_{pair // 2}"
                    node = {}
                    if b is None:
                        for key, fmt in fp_keys:
                            node[key] = delay(a[key], k_fp, f"{tag}_{key}")
                        node["p"] = delay(a["p"], k_fp, f"{tag}_p")
                        nxt.append(node)
                        continue
                    both = delay(a["p"] & b["p"], k_fp - 1, f"{tag}_both")
                    node["p"] = delay(a["p"] | b["p"], k_fp, f"{tag}_p")
                    for key, fmt in fp_keys:
                        total = float_add(m, a[key], b[key], fmt, prefix=f"{tag}_{key}",
                                          stages=k_fp)
                        passed = delay(Mux(a["p"], a[key], b[key]), k_fp - 1,
                                       f"{tag}_{key}_pass")
                        reg = Signal(fmt.width, name=f"{tag}_{key}")
                        m.d.sync += reg.eq(Mux(both, total, passed))
                        node[key] = reg
                    nxt.append(node)
                nodes = nxt
            fp_root = nodes[0]
        root = dict(fp_root)
        root["int"] = int_root
        # Final stage: pick by element type; wrap or saturate int32 once.
        meta = stages[-2]
        out = Signal(LANE_BITS, name=f"lane{lane}_result")
        flag = Signal(name=f"lane{lane}_saturated")
        lo, hi = -(1 << 31), (1 << 31) - 1
        with m.Switch(meta.dtype):
            if "int32" in dtypes:
                with m.Case(DType.INT32):
                    wide = root["int"]
                    over = (wide > hi) | (wide < lo)
                    with m.If(meta.sat & over):
                        m.d.sync += [out.eq(Mux(wide < 0, Const(lo & 0xFFFFFFFF, 32),
                                                Const(hi, 32))), flag.eq(1)]
                    with m.Else():
                        m.d.sync += [out.eq(wide[:LANE_BITS]), flag.eq(0)]
            if "fp32" in dtypes:
                with m.Case(DType.FP32):
                    m.d.sync += [out.eq(root["f32"]), flag.eq(0)]
            if "bf16" in dtypes:
                with m.Case(DType.BF16):
                    m.d.sync += [out.eq(Cat(root["b0"], root["b1"])), flag.eq(0)]
            with m.Default():
                m.d.sync += [out.eq(0), flag.eq(0)]
        return out, flag

