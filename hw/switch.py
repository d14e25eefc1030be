"""The N-port switch: ingress buffering and classification, a crossbar of per-egress link
arbiters, and the in-switch reduction unit.

Per ingress port k:

* an ingress FIFO (``ingress_depth`` flits) absorbs skew and bursts;
* the head packet is classified on its first flit and the route latched until its last flit
  (a malformed packet cannot split across two egress arbiters): memory kinds
  (``MEM_WRITE``, ``MEM_READ_REQ``, ``MEM_READ_RESP``) go to the arbiter of egress ``dst``;
  ``REDUCE_CONTRIB`` goes to port k of the reduction unit; anything else — an invalid kind,
  a destination beyond the switch or the sender's own port (a GPU does not send its own
  memory traffic over its link), a ``REDUCE_RESULT`` from a GPU, or an in-band ``CONFIG``
  packet (configuration uses the ``cfg`` port) — is consumed and counted in ``drops``;
* every flit carries its packet's header, so a flit whose header differs from its packet's
  first flit means the sender dropped ``last``: the ingress ends the packet in progress with a
  ``NULLIFIED`` tail flit to wherever it was going (the receiver discards the packet; the
  reduction unit abandons the contribution), counts it as ``truncated``, and classifies the
  flit afresh. A truncated packet cannot hold an egress arbiter or merge with the next packet.

Per egress port d, a :class:`hw.arbiter.LinkArbiter` with N requesters: requester k ≠ d is
memory traffic from ingress k, and requester d — the place of d's own ingress, which never
sends to d — is the reduction unit's results for d. N requesters, a power of two for the usual
port counts, keep each egress's output multiplexer to the FPGA's wide-mux cells (a ninth input
cost nearly five times the LUTs at 8 lanes; docs/hw.md). Each arbiter's output passes a
register on the link (:class:`hw.regslice.LinkRegister`: the multiplexer's inputs come from
across the die) and a two-flit stage (:class:`hw.regslice.CreditSlice`), so the egress ports
are driven from flip-flops (``SwitchSpec.egress_output_latency``); both are built once per lane
and once for the header, each with its own control (:class:`hw.regslice.SlicedLink`). The
arbitration policy is chosen at elaboration; priorities / weights are set per traffic class at
run time (``cfg_mem_*``, ``cfg_result_*``).

The crossbar's links are registered both ways: an arbiter reads each requester's ``valid``
and ``last`` from registers beside it, loaded a cycle ahead from what the requester's FIFO
will hold, and a requester moves its head by copies of its own of the arbiter's choice, the
egress's room and its own target, loaded a cycle ahead too; the flits the arbiter chooses stop
in the link register. No path runs from an ingress through an arbiter and back, nor from an
ingress to the egress stage. With every egress ready a flit leaves a cycle later than it would
with combinational links, at the same rate; when a GPU stalls, its egress takes two more flits
than a combinational ``ready`` would have let through (one in the link register, one in the
stage).

Why results and memory traffic cannot deadlock each other: the reduction unit never
back-pressures its inputs (a contribution is written into its own bank or dropped), so
contributions never wait on anything; results wait only for space in per-egress FIFOs, which
drain through the egress arbiters; memory packets wait only for their egress arbiter. Every
wait therefore points from an ingress towards an egress and from an egress towards the GPU
that sinks it — the wait-for graph has no cycle, so as long as every GPU eventually accepts
flits, every packet is delivered.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import PRIO_BITS, QUANTUM_BITS, WEIGHT_BITS, LinkArbiter, below
from .packet import LANE_BITS, Kind, flit_layout
from .ramfifo import RamFIFO
from .reduce import ReductionUnit, config_signature, count_events
from .regslice import SlicedLink
from .spec import Policy

__all__ = ["Switch", "ContributionSink", "DROP_CAUSES"]

#: Switch-level drop causes (the reduction unit counts its own, see hw.reduce.ERROR_CAUSES).
DROP_CAUSES = ("bad_kind", "bad_dest", "config_packet", "truncated")
_DROP_BITS = 16

# An ingress's targets, one bit each in its one-hot route: the reduction unit, the drop, then
# egress d for each d other than the ingress's own port, in order.
_REDUCE, _DROP, _EGRESS = 0, 1, 2


def _memory_kind(flit):
    """The flit is memory traffic (a kind the crossbar carries)."""
    kind = flit.user.kind
    return (kind == Kind.MEM_WRITE) | (kind == Kind.MEM_READ_REQ) | (kind == Kind.MEM_READ_RESP)


def _dest_ok(flit, port, ports):
    """The flit's destination is a port of the switch other than its ingress ``port``."""
    return below(flit.dst, ports) & (flit.dst != port)


class ContributionSink(ReductionUnit):
    """A what-if for synthesis, not a unit to build: the reduction unit's ports with nothing
    behind them. Every contribution is taken and forgotten, no result is ever offered and
    every counter stays 0, so a switch built with it (``Switch(spec, reduction=False)``,
    ``innet synth switch --without-reduction``) is its ingress FIFOs, crossbar and egress
    stages alone: place and route then says what the crossbar costs apart from the unit
    (docs/timing-closure.md)."""

    def _state_signals(self):
        return None   # no slot table (and no memory left unelaborated)

    def elaborate(self, platform):
        m = Module()
        for port in self.i:
            m.d.comb += port.ready.eq(1)
        return m


class Switch(wiring.Component):
    """An N-port switch with an in-switch reduction unit.

    Parameters
    ----------
    spec : hw.spec.SwitchSpec
        Ports, lanes, the reduction unit's parameters, the egress arbitration policy and the
        ingress FIFO depth.
    reduction : bool
        ``False`` puts a :class:`ContributionSink` where the reduction unit goes: a what-if
        for measuring the crossbar alone in synthesis (contributions vanish uncounted).

    Members
    -------
    i : In(stream.Signature(flit)).array(ports)
        From the GPUs.
    o : Out(stream.Signature(flit)).array(ports)
        To the GPUs.
    cfg : In(config_signature(ports))
        The reduction unit's job table.
    cfg_mem_priority, cfg_result_priority : In(PRIO_BITS)
        ``prio`` only: priority of memory traffic and of reduction results at every egress.
    cfg_mem_weight, cfg_result_weight : In(WEIGHT_BITS)
        ``wrr`` only: packets per turn of each class.
    cfg_quantum : In(QUANTUM_BITS)
        ``drr`` only.
    drops : Out(data.ArrayLayout(16, len(DROP_CAUSES)))
        Switch-level drop counters (saturating).
    reduce_errors, overflow, reductions
        The reduction unit's counters and flags.
    """

    def __init__(self, spec, reduction=True):
        # (either checks that spec is a SwitchSpec)
        self.reduce = ReductionUnit(spec) if reduction else ContributionSink(spec)
        self._spec = spec
        self._policy = spec.policy
        self._ports, self._lanes, jobs = spec.ports, spec.lanes, spec.jobs
        self._ingress_depth = spec.ingress_fifo_flits
        ports = spec.ports
        layout = flit_layout(spec.lanes)
        members = {
            "i": In(stream.Signature(layout)).array(ports),
            "o": Out(stream.Signature(layout)).array(ports),
            "cfg": In(config_signature(ports)),
            "drops": Out(data.ArrayLayout(_DROP_BITS, len(DROP_CAUSES))),
            "reduce_errors": Out(self.reduce.signature.members["errors"].shape),
            "overflow": Out(jobs),
            "reductions": Out(32),
        }
        if self._policy == Policy.PRIO:
            members.update({"cfg_mem_priority": In(PRIO_BITS),
                            "cfg_result_priority": In(PRIO_BITS)})
        if self._policy == Policy.WRR:
            members.update({"cfg_mem_weight": In(WEIGHT_BITS),
                            "cfg_result_weight": In(WEIGHT_BITS)})
        if self._policy == Policy.DRR:
            members["cfg_quantum"] = In(QUANTUM_BITS)
        super().__init__(members)

    ports = property(lambda self: self._ports)
    lanes = property(lambda self: self._lanes)
    policy = property(lambda self: self._policy)
    spec = property(lambda self: self._spec)

    def elaborate(self, platform):
        m = Module()
        N, L = self._ports, self._lanes
        layout = flit_layout(L)
        m.submodules.reduce = red = self.reduce
        wiring.connect(m, wiring.flipped(self.cfg), red.cfg)
        m.d.comb += [self.reduce_errors.eq(red.errors), self.overflow.eq(red.overflow),
                     self.reductions.eq(red.reductions)]

        # The crossbar's links carry registers in both directions (docs/hw.md, "The crossbar's
        # links registered"). Each egress arbiter reads its requesters' `valid` and `last`
        # from registers beside it (`req_valid`, `req_last`), which each requester loads a
        # cycle ahead from what its own FIFO will hold next cycle; each requester decides
        # whether its head moves from copies of its own (`granted_by`): the arbiter's choice
        # for it and the room of the egress's link register (and, for an ingress, whether its
        # head goes to that egress), loaded a cycle ahead too. So no path goes from an ingress
        # through an arbiter and back.
        arbiters, outs = [], []
        req_valid = [Signal(N, name=f"egress{d}_req_valid") for d in range(N)]
        req_last = [Signal(N, name=f"egress{d}_req_last", attrs={"keep": 1})
                    for d in range(N)]
        # Whether requester k offers a NULLIFIED tail (its `offers_tail`), loaded a cycle ahead
        # as `req_last` is: the egress zeroes the tail's data from these and its own choice,
        # not from the offered kind, which comes from across the die (results never are).
        req_tail = [Signal(N, name=f"egress{d}_req_tail", attrs={"keep": 1})
                    for d in range(N)]
        for d in range(N):
            m.submodules[f"egress{d}"] = arb = LinkArbiter(N, L, self._policy, last_input=True)
            arbiters.append(arb)
            for k in range(N):
                is_result = k == d
                if self._policy == Policy.PRIO:
                    m.d.comb += arb.priority[k].eq(self.cfg_result_priority if is_result
                                                   else self.cfg_mem_priority)
                if self._policy == Policy.WRR:
                    m.d.comb += arb.weight[k].eq(self.cfg_result_weight if is_result
                                                 else self.cfg_mem_weight)
                m.d.comb += [arb.i[k].valid.eq(req_valid[d][k]), arb.last[k].eq(req_last[d][k])]
            if self._policy == Policy.DRR:
                m.d.comb += arb.quantum.eq(self.cfg_quantum)
            # The egress port is driven from flip-flops: a two-flit stage whose room is known
            # a cycle ahead. In front of it, a register on the link: the arbiter's multiplexer
            # gathers flits from every ingress, across the die, and the register cuts that
            # wire from the one on to the stage (docs/hw.md, "The crossbar's flits
            # registered"). Two fields need no multiplexer: a NULLIFIED tail's data is zeroed
            # at the multiplexer's output rather than at its ingress (the ingress offers the
            # truncating flit's data; in front of the link register the zeroing shares the
            # multiplexer's LUTs, behind it it took a LUT a bit), and every flit egress d
            # carries is addressed to d (memory traffic is routed by dst, results are d's),
            # a constant given the link register. Whether the flit is a tail is read lane by
            # lane: the requesters' `req_tail` at the lane's own copy of the arbiter's choice
            # register (its `lane_choice`), the copy that selects the lane's slice of the
            # multiplexer, so each lane's zeroing starts beside its lane (one `offers_tail` for
            # the whole flit was a net to all 256 data bits, the routed switch's critical path:
            # docs/timing-closure.md, "The tail's zeroing per lane, routed"). The choice is not
            # gated by `valid` as the `grant` is: the zeroed data is read only when the link
            # register takes a flit, and then the two agree, so the select starts at
            # flip-flops, not at the arbiter's `valid` and `busy`.
            # The link register and the stage are built once per slice of the flit, a lane's
            # data each and the header (`SlicedLink`), each slice with its own control beside
            # its bits: with one control for the whole flit, the clock enables of the stage's
            # and the link register's 600-odd flip-flops were nets from one place to every
            # lane's stripe, a sixth of the routed switch's endpoints too slow for 200 MHz
            # (docs/timing-closure.md, "The slow endpoints named, and the egress sliced by
            # lane").
            flit = arb.o.payload
            lanes_out = []
            for j, lane_choice in enumerate(arb.lane_choice):
                offers_tail = Signal(name=f"egress{d}_offers_tail_lane{j}")
                m.d.comb += offers_tail.eq(req_tail[d].bit_select(lane_choice, 1))
                lanes_out.append(Mux(offers_tail, 0, flit.data[j]))
            # (The data lanes are the flit's first bits, the header the rest. The flit is one
            # assignment: field by field, a constant field would be a process that reads
            # nothing, Verilator's ALWNEVER.)
            changed = {"data": Cat(*lanes_out), "dst": Const(d, len(flit.dst))}
            data_bits = layout["data"].width
            m.submodules[f"egress{d}_link"] = link = SlicedLink(
                [LANE_BITS] * L + [layout.size - data_bits])
            outs.append(link)
            # (the arbiter sends while the stage has room, `credit`: the requesters' copies
            # of its next value say when, so they and the arbiter agree on every move)
            m.d.comb += [link.i.valid.eq(arb.o.valid & link.credit), arb.o.ready.eq(link.credit),
                         link.i.payload.eq(Cat(changed.get(name, flit[name])
                                               for name, _ in layout))]
            wiring.connect(m, link.o, wiring.flipped(self.o[d]))

        def granted(source, k, d, aimed=1):
            """Whether egress d takes requester k's flit this cycle, if it offers one: a
            register kept at the requester (``source`` names it), loaded a cycle ahead with
            the arbiter's choice for k, the promise that egress d's link register has room
            (its `credit_next`) and ``aimed``, whether the requester's next flit goes to d
            (an ingress's; a result FIFO's always does).

            The promise is the room of the stage behind the link register, not the link
            register's own next room: that one reads whether the register takes a flit this
            cycle, the arbiter's `valid` at the end of its choice, and the grant copies
            crossing the die from it were the routed switch's critical path
            (docs/timing-closure.md, "The grant from the stage's room"). The two agree while
            the egress is ready; a stalled egress takes one flit fewer."""
            copy = Signal(name=f"{source}_granted_by{d}", attrs={"keep": 1})
            m.d.sync += copy.eq(arbiters[d].select_next[k] & outs[d].credit_next & aimed)
            return copy

        # Requester d of egress d: the reduction unit's results for d.
        for d in range(N):
            res = red.o[d]
            m.d.comb += [arbiters[d].i[d].payload.eq(res.payload),
                         res.ready.eq(granted(f"result{d}", d, d))]
            m.d.sync += [req_valid[d][d].eq(red.result_valid_next[d]),
                         req_last[d][d].eq(red.result_last_next[d])]

        drop_hits = [[] for _ in DROP_CAUSES]
        for k in range(N):
            # SyncFIFOBuffered's behaviour, without its read-during-write bypass (a write
            # never meets the read of the same word: hw.ramfifo). Each word is a flit and
            # what the ingress decided about it on the way in (below): where it would go if
            # it started a packet, and whether it breaks the packet it would continue. Those
            # and the flit's `last` are the word's top bits, which the FIFO tells a cycle
            # ahead (lookahead): the egresses' request registers are loaded from them.
            targets_n = N + 1   # the reduction unit, the drop, egress d for every d != k
            ahead_bits = 1 + targets_n + 1
            # (in LUT-RAM read in L + 1 slices, each loaded by its own copy of the read enable,
            # as the result FIFOs are: the `ready` reaches a LUT beside each lane)
            storage = self._spec.ingress_fifo_storage
            m.submodules[f"ingress{k}"] = q = RamFIFO(
                width=layout.size + ahead_bits, depth=self._ingress_depth, storage=storage,
                read_slices=L + 1 if storage == "lut" else 1, lookahead=ahead_bits)
            m.d.comb += [q.w_en.eq(self.i[k].valid), self.i[k].ready.eq(q.w_rdy)]
            head = Signal(layout, name=f"ingress{k}_head")
            head_last = Signal(name=f"ingress{k}_head_last")   # (the flit's `last` again)
            head_fresh = Signal(targets_n, name=f"ingress{k}_head_fresh")
            head_breaks = Signal(name=f"ingress{k}_head_breaks")
            m.d.comb += Cat(head, head_last, head_fresh, head_breaks).eq(q.r_data)

            # A packet's target is chosen from its first flit's kind and destination. That
            # choice is made for every flit when it is written, as a one-hot word stored with
            # it, so at the head a flit's target is a register (the stored choice, or the
            # one latched from the packet's first flit) and the path from the head through
            # the targets' `ready` to the FIFO's read enable starts from flip-flops
            # (docs/hw.md, "Ingress decisions made on the way in").
            flit_in = self.i[k].payload
            is_mem_in, dest_ok_in = _memory_kind(flit_in), _dest_ok(flit_in, k, N)
            to_mem = is_mem_in & dest_ok_in
            to_reduce = flit_in.user.kind == Kind.REDUCE_CONTRIB
            fresh_in = Cat(to_reduce, ~to_mem & ~to_reduce,
                           *(to_mem & (flit_in.dst == d) for d in range(N) if d != k))

            # A truncated packet (the sender dropped `last`) shows as a flit whose header is
            # not its packet's. Flits leave the FIFO in the order they enter it, so which
            # packet a flit continues is known when it is written: the header comparison is
            # made there too, and stored as the word's top bit. At the head, the test is then
            # an AND of flip-flops rather than a 57-bit comparison in front of the crossbar
            # and the reduction unit's stage 0. The write side follows the packets as the
            # read side will: a flit that breaks one starts the next, and every flit's `last`
            # says whether its packet goes on.
            header_in = Cat(flit_in.user.as_value(), flit_in.dst, flit_in.src)
            w_in_pkt = Signal(name=f"ingress{k}_w_in_packet")
            w_header = Signal(len(header_in), name=f"ingress{k}_w_header")
            breaks = Signal(name=f"ingress{k}_breaks")
            m.d.comb += [breaks.eq(w_in_pkt & (header_in != w_header)),
                         q.w_data.eq(Cat(flit_in, flit_in.last, fresh_in, breaks))]
            with m.If(q.w_en & q.w_rdy):
                m.d.sync += w_in_pkt.eq(~flit_in.last)
                with m.If(~w_in_pkt | breaks):
                    m.d.sync += w_header.eq(header_in)

            in_pkt = Signal(name=f"ingress{k}_in_packet")
            route = Signal(targets_n, name=f"ingress{k}_route")   # held while a packet goes
            # where the head goes, Mux(in_pkt, route, head_fresh), as a register of its own
            # (loaded below from the same choice a cycle ahead)
            cur = Signal(targets_n, name=f"ingress{k}_target")
            # (the drop counters' causes, from the head's header: off the read enable's path)
            kind = head.user.kind
            is_mem, dest_ok = _memory_kind(head), _dest_ok(head, k, N)

            # A truncated packet: the head breaks the packet in progress (its header is not
            # the one kept from the packet's first flit). Offer a NULLIFIED tail instead of
            # the head; the head waits. The tail's data is zeroed at the egress (above); the
            # reduction unit never reads it. Once the tail has gone the packet is over, so
            # the same head is then classified afresh.
            held = Signal(layout, name=f"ingress{k}_held")
            cut = Signal(name=f"ingress{k}_cut")
            tail = Signal(layout, name=f"ingress{k}_tail")
            # What is offered is chosen by a register, `in_pkt & head_breaks` as it will be
            # this cycle, loaded the cycle before (docs/hw.md, "The offer chosen by
            # registers"): the payload's select is a flip-flop, not the end of the read
            # side's flow control. (With no head nothing is offered: `valid` is low.)
            tail_next = Signal(name=f"ingress{k}_offers_tail")
            m.d.comb += [
                cut.eq(q.r_rdy & tail_next),
                tail.eq(held), tail.data.eq(head.data), tail.last.eq(1),
                tail.user.kind.eq(Kind.NULLIFIED),
            ]
            offer = Mux(tail_next, tail, head)
            # The reduction unit reads a tail's kind and `last` only (a tail never starts a
            # packet, and only a packet's first flit is judged; its data is the head's
            # already), so it gets the head's header with those two changed: stage 0's
            # checks on the job table start from the FIFO's head register.
            to_unit = Signal(layout, name=f"ingress{k}_to_reduce")
            m.d.comb += [to_unit.eq(head),
                         to_unit.last.eq(Mux(tail_next, 1, head.last)),
                         to_unit.user.kind.eq(Mux(tail_next, Kind.NULLIFIED, head.user.kind))]

            # Offer the head flit to its target; it moves when the target takes it.
            moved = Signal(name=f"ingress{k}_moved")
            red_in = red.i[k]
            m.d.comb += [red_in.payload.eq(to_unit), red_in.valid.eq(q.r_rdy & cur[_REDUCE])]
            # Where the head goes next cycle (`cur`'s next value), from the packet state after
            # this cycle's move and the FIFO's next head (its top bits, a cycle ahead). Each
            # is worked out for both outcomes of the move, from registers (the FIFO's next
            # head if it is read, `r_data_if_read`, or not, `r_data_if_kept`), and the move
            # picks one at the end: it is the latest signal here (the grant registers → their
            # OR), and every register loaded from these is then one LUT behind it, where the
            # move fed the FIFO's read enable, its lookahead and the packet state in turn
            # (docs/timing-closure.md, "The move as the last choice").
            in_pkt_next = Signal(name=f"ingress{k}_in_packet_next")
            route_next = Signal(targets_n, name=f"ingress{k}_route_next")

            def outcome(name, in_packet, ahead, rdy):
                """The ingress's next state if the head moves (``name`` "moved") or stays:
                whether a packet goes on, where the head goes, whether it is offered as a
                tail, whether it is the packet's last, and for each target whether the head
                is there and goes to it (`valid`)."""
                last_a = Signal(name=f"ingress{k}_{name}_head_last_next")
                fresh_a = Signal(targets_n, name=f"ingress{k}_{name}_head_fresh_next")
                breaks_a = Signal(name=f"ingress{k}_{name}_head_breaks_next")
                target = Signal(targets_n, name=f"ingress{k}_{name}_target_next")
                m.d.comb += [Cat(last_a, fresh_a, breaks_a).eq(ahead),
                             target.eq(Mux(in_packet, route_next, fresh_a))]
                tail_a = in_packet & breaks_a
                return {"in_packet": in_packet, "target": target, "tail": tail_a,
                        "last": tail_a | last_a, "valid": target & rdy.replicate(targets_n)}

            # (a moving tail is not read: the head it cut waits, and no packet goes on)
            if_moved = outcome("moved", ~cut & ~head.last,
                               Mux(cut, q.r_data_if_kept, q.r_data_if_read),
                               Mux(cut, q.r_rdy_if_kept, q.r_rdy_if_read))
            if_kept = outcome("kept", in_pkt, q.r_data_if_kept, q.r_rdy_if_kept)

            def after_move(key, bit=None):
                """``key`` (its ``bit``, if given) of the outcome the move picks."""
                moved_, kept_ = if_moved[key], if_kept[key]
                if bit is not None:
                    moved_, kept_ = moved_[bit], kept_[bit]
                return Mux(moved, moved_, kept_)

            cur_next = after_move("target")
            targets = [red_in.ready & cur[_REDUCE], cur[_DROP]]
            egresses = [d for d in range(N) if d != k]
            # Egress d's grant register holds its choice of k already ANDed with `cur`'s bit
            # for d (loaded together a cycle ahead): the move is an OR of registers, not of
            # seven ANDs, so the read enable that crosses the die to the FIFO's read slices
            # starts fewer LUT levels from them (docs/timing-closure.md, "The grant aimed at
            # the next target").
            for bit, d in enumerate(egresses, start=_EGRESS):
                # (requester k of egress k carries the reduction results)
                m.d.comb += arbiters[d].i[k].payload.eq(offer)
                targets.append(granted(f"ingress{k}", k, d, aimed=after_move("target", bit)))
            m.d.comb += [moved.eq(q.r_rdy & Cat(*targets).any()), q.r_en.eq(moved & ~cut)]
            # The route and the header of the packet in progress are read only in a packet,
            # so between packets they follow the head, whether it moves or not: they hold
            # the first flit's when its move starts the packet, and their load enable is
            # `~in_pkt`, a register, rather than the move (which `held`'s 58-bit fan-out
            # pulled across the die, away from the route's other logic: docs/hw.md).
            m.d.comb += [in_pkt_next.eq(after_move("in_packet")),
                         route_next.eq(Mux(in_pkt, route, head_fresh))]
            m.d.sync += [in_pkt.eq(in_pkt_next), route.eq(route_next)]
            with m.If(~in_pkt):
                m.d.sync += held.eq(head)

            # What the egresses will see next cycle: the head's target and whether it ends or
            # breaks a packet.
            m.d.sync += [cur.eq(cur_next), tail_next.eq(after_move("tail"))]
            for bit, d in enumerate(egresses, start=_EGRESS):
                m.d.sync += [req_valid[d][k].eq(after_move("valid", bit)),
                             req_last[d][k].eq(after_move("last")),
                             req_tail[d][k].eq(after_move("tail"))]

            first_drop = moved & ~in_pkt & head_fresh[_DROP]
            drop_hits[0].append(first_drop & ~is_mem & (kind != Kind.CONFIG) &
                                (kind != Kind.REDUCE_CONTRIB))
            drop_hits[1].append(first_drop & is_mem & ~dest_ok)
            drop_hits[2].append(first_drop & (kind == Kind.CONFIG))
            drop_hits[3].append(moved & cut)

        for c, hits in enumerate(drop_hits):
            count_events(m, self.drops[c], hits, self.cfg.clear, DROP_CAUSES[c])
        return m
