"""Packet-atomic link arbiter: N flit streams in, one link out.

The arbiter forwards one requester's flits at a time. A choice, once presented on the output,
holds until the packet's last flit is accepted (so a packet's flits are contiguous on the link,
and the output obeys the stream rule that a presented payload stays until it is accepted).
The choice is made one cycle ahead: each cycle the policy chooses, from this cycle's ``valid``
bits and the policy state as it will be after this cycle, the requester to present next cycle,
and registers it (as the reduction engine's pick). The output multiplexer and the ``ready``
fan-out are driven from that register, so the choice logic is off the output paths and the
state loop is register to register. A packet ending this cycle is followed by the registered
choice in the next: back-to-back packets leave no bubble, 1 flit/cycle while requests are
continuous. The requester whose last flit leaves this cycle counts as requesting (its
``valid`` is high): if it is chosen again and has no next packet, the cycle after is idle and
the choice is made afresh; a requester that starts requesting is seen one cycle later.

Four policies choose among the requesters whose ``valid`` is high:

``rr``
    Round-robin over packets: the search starts after the last winner.
``prio``
    Strict priority from the run-time ``priority`` input (higher wins); requesters of equal
    priority share round-robin. A lower-priority packet never starts while a higher one waits.
``wrr``
    Weighted round-robin over packets: a requester keeps its turn for up to ``weight[k]``
    consecutive packets while it requests. Weight 0 disables the requester.
``drr``
    Deficit round-robin over flits: a requester's turn adds ``quantum`` to its deficit counter,
    each flit sent takes one away, and it keeps the turn while it requests and its deficit is
    positive. A requester whose deficit plus quantum is still not positive is passed over (it
    gains the quantum) unless nobody else can go, so the link never idles while anyone requests.
    With ``quantum`` at least the longest packet this is exact DRR: flit shares of saturated
    requesters differ by less than one quantum at the end of every round.

Priorities, weights and the quantum are inputs, sampled whenever a packet starts, so they can be
changed without re-synthesis.
"""

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .errors import check_int
from .packet import LANE_BITS, MAX_PORTS, flit_layout
from .spec import MIN_PORTS, Policy

__all__ = ["LinkArbiter", "PRIO_BITS", "WEIGHT_BITS", "QUANTUM_BITS", "DEFICIT_BITS"]

#: Width of a run-time priority (``prio`` policy): 8 levels, higher wins.
PRIO_BITS = 3
#: Width of a run-time weight (``wrr`` policy): packets per turn, 0 disables.
WEIGHT_BITS = 8
#: Width of the run-time quantum (``drr`` policy): flits added per turn.
QUANTUM_BITS = 16
#: Width of a signed deficit counter (``drr`` policy); saturates at its minimum.
DEFICIT_BITS = QUANTUM_BITS + 2


def index_is(index, k):
    """``index == k`` with the constant at the index's width (lint-clean comparison)."""
    if k == 0:
        return ~index.any()
    return index == Const(k, len(index))


def below(value, bound):
    """``value < bound`` for a constant ``bound``, as the bits above ``bound``'s width being 0
    and a comparison only as wide as ``bound`` (none when it is a power of two). Yosys maps a
    comparison with a constant to a carry chain the width of ``value``: a 16-bit slot id
    against the pool size was seven carry cells on the switch's critical path
    (docs/timing-closure.md, "Constants compared as bits")."""
    value = Value.cast(value)
    if bound <= 0:
        return Const(0)
    if bound >= 1 << len(value):
        return Const(1)
    width = (bound - 1).bit_length()
    high_clear = ~value[width:].any()
    if bound == 1 << width:
        return high_clear
    return high_clear & (value[:width] < bound)


def one_hot(m, index, n, name):
    """An ``n``-bit one-hot decode of ``index``."""
    decoded = Signal(n, name=name)
    m.d.comb += decoded.eq(Cat(index_is(index, k) for k in range(n)))
    return decoded


def bit_at(m, mask, index, name):
    """``mask[index]`` for a run-time ``index``, as an AND-OR (no variable shift)."""
    return (mask & one_hot(m, index, len(mask), name)).any()


def select(m, index, values, shape, name):
    """``values[index]`` for a run-time ``index`` (a multiplexer with a full ``case``;
    ``values[0]`` when ``index`` is out of range)."""
    out = Signal(shape, name=name)
    with m.Switch(index):
        for k, value in enumerate(values):
            with m.Case(k):
                m.d.comb += out.eq(value)
        with m.Default():
            m.d.comb += out.eq(values[0])
    return out


def select_tree(m, index, values, shape, name):
    """:func:`select` as a binary tree of two-way multiplexers on the index bits (the same
    values, ``values[0]`` out of range). Which maps to fewer LUT4s depends on the select
    logic around it: a 64:1 read of the slot table by a registered index is smaller as a tree,
    the arbiter's 8:1 output multiplexer (its index from the round-robin choice) is smaller
    as a ``case`` (docs/hw.md, Synthesis)."""
    out = Signal(shape, name=name)
    n = len(values)
    bits = max(1, (n - 1).bit_length())
    level = [Value.cast(v) for v in values]
    level += [level[0]] * ((1 << bits) - n)
    for b in range(bits):
        level = [Mux(index[b], level[2 * i + 1], level[2 * i]) for i in range(len(level) // 2)]
    if n < (1 << bits) or len(index) > bits:
        m.d.comb += out.eq(Mux(below(index, n), level[0], Value.cast(values[0])))
    else:
        m.d.comb += out.eq(level[0])
    return out


def first_after(m, mask, ptr, name):
    """Index of the first set bit of ``mask`` after position ``ptr`` in circular order
    (``ptr`` itself is searched last). Returns ``(found, index)``; ``index`` is 0 when nothing
    is set."""
    n = len(mask)
    above = Signal(n, name=f"{name}_above")
    index = Signal(range(max(n, 2)), name=f"{name}_index")
    # Position 0 is never above ptr; a literal 0 keeps the comparison out of the netlist.
    m.d.comb += above.eq(mask & Cat(Const(0, 1),
                                    *(ptr < Const(k, len(ptr)) for k in range(1, n))))
    # Later assignments win: the lowest set bit of `mask`, overridden by the lowest set bit
    # strictly above `ptr` when there is one.
    for k in reversed(range(n)):
        with m.If(mask[k]):
            m.d.comb += index.eq(k)
    for k in reversed(range(n)):
        with m.If(above[k]):
            m.d.comb += index.eq(k)
    return mask.any(), index


class LinkArbiter(wiring.Component):
    """Packet-atomic arbiter of ``ports`` flit streams onto one output link.

    Parameters
    ----------
    ports : int
        Number of requesters, 2 to 64.
    lanes : int
        Payload lanes per flit (see :func:`hw.packet.flit_layout`).
    policy : Policy or str
        ``"rr"``, ``"prio"``, ``"wrr"`` or ``"drr"``.

    Members
    -------
    i : In(stream.Signature(flit_layout(lanes))).array(ports)
        Requesters.
    o : Out(stream.Signature(flit_layout(lanes)))
        Output link.
    priority : In(data.ArrayLayout(PRIO_BITS, ports))
        Only with ``prio``: per-requester priority, higher wins.
    weight : In(data.ArrayLayout(WEIGHT_BITS, ports))
        Only with ``wrr``: per-requester packets per turn; 0 disables the requester.
    quantum : In(QUANTUM_BITS)
        Only with ``drr``: flits added to a requester's deficit per turn.
    last : In(ports)
        Only with ``last_input=True``: each requester's ``last``, which the arbiter's control
        then reads instead of the payload's (the payload's ``last`` is only carried). A switch
        gives it from registers beside the arbiter while the payload crosses the die
        (:class:`hw.switch.Switch`).

    Attributes
    ----------
    grant : Signal(ports)
        One-hot: the requester whose flits the output carries (held through a packet), or zero.
    choice : Signal(ports)
        One-hot: the choice register decoded, ungated: ``grant`` whenever the output is valid
        or a choice is held, otherwise any requester. From flip-flops alone, for logic whose
        result is read only while the output is valid.
    busy : Signal
        A choice is held: mid-packet, or a presented flit not yet accepted.
    pointer : Signal(range(ports))
        The requester that started the last packet; round-robin searches start after it.
    select_next : Signal(ports)
        One-hot, the requester whose flit the output will offer next cycle (the registered
        choice's next value; zero if none). A requester that keeps a copy of its bit knows
        from a register of its own whether the arbiter reads it, so its ``ready`` need not
        come from the arbiter.
    lane_choice : list of Signal(range(ports))
        The choice register's copy that selects lane ``k``'s slice of the output multiplexer
        (``cur_lane{k}``, kept; always equal to the choice register): logic that acts on one
        lane's bits reads the lane's own copy, placed beside them.

    Raises
    ------
    hw.errors.ParameterError
        On a parameter out of range (a ``TypeError`` too on one of the wrong type).
    """

    def __init__(self, ports, lanes, policy="rr", *, last_input=False):
        check_int("Port count", ports, MIN_PORTS, MAX_PORTS, parameter="ports")
        policy = Policy.parse(policy)
        layout = flit_layout(lanes)
        self._ports, self._lanes, self._policy = ports, lanes, policy

        members = {
            "i": In(stream.Signature(layout)).array(ports),
            "o": Out(stream.Signature(layout)),
        }
        if policy == Policy.PRIO:
            members["priority"] = In(data.ArrayLayout(PRIO_BITS, ports))
        if policy == Policy.WRR:
            members["weight"] = In(data.ArrayLayout(WEIGHT_BITS, ports))
        if policy == Policy.DRR:
            members["quantum"] = In(QUANTUM_BITS)
        if last_input:
            members["last"] = In(ports)
        super().__init__(members)

        self.grant = Signal(ports)
        self.choice = Signal(ports)
        self.busy = Signal()
        self.pointer = Signal(range(ports))
        self.select_next = Signal(ports)
        self.lane_choice = [Signal(range(ports), name=f"cur_lane{k}", attrs={"keep": 1})
                            for k in range(lanes)]

    @property
    def ports(self):
        return self._ports

    @property
    def lanes(self):
        return self._lanes

    @property
    def policy(self):
        return self._policy

    def elaborate(self, platform):
        m = Module()
        n = self._ports

        valid = Signal(n)
        m.d.comb += valid.eq(Cat(port.valid for port in self.i))

        ptr = self.pointer        # last winner: the round-robin search starts after it
        # The requester on the output this cycle, a register: while `busy` the held choice,
        # else the choice made in the previous cycle (`cur_ok` says there was one). The
        # output multiplexer and the ready fan-out are driven from flip-flops, not from the
        # choice logic. `keep`: it equals every copy of it below, and Yosys merged it into the
        # first (`cur_lane0`), which the placer pulls to lane 0's multiplexer, so the choice
        # logic and `valid` started in lane 0's stripe (docs/timing-closure.md, "The grant from
        # the stage's room").
        cur = Signal(range(n), attrs={"keep": 1})
        cur_ok = Signal()
        turn = Signal()           # wrr/drr: the registered choice starts a new turn
        pick = Signal(range(n))   # next cycle's choice, made this cycle
        found = Signal()
        new_turn = Signal()

        busy_next = Signal()   # a packet goes on next cycle: the choice is held
        sel_hot = one_hot(m, cur, n, "sel_hot")
        start = Signal()   # a packet's first flit is presented this cycle
        accept = Signal()
        m.d.comb += [
            self.o.valid.eq((valid & sel_hot).any() & cur_ok),
            start       .eq(~self.busy & self.o.valid),
            accept      .eq(self.o.valid & self.o.ready),
        ]
        # The output multiplexer in slices (each data lane, and the header), each selected by
        # its own copy of `cur`. One register driving every select input of a flit-wide
        # multiplexer is a net with a fan-out of hundreds of LUTs spread wherever the
        # requesters' data lies: at 8 x 8 x 64 the placer left it a net across the die, the
        # switch's critical path (docs/timing-closure.md, "The egress select replicated").
        # A copy per slice can sit by its slice. `keep` stops Yosys merging the copies back
        # into one.
        cur_copies = [*self.lane_choice, Signal(range(n), name="cur_header", attrs={"keep": 1})]
        for copy in cur_copies:
            with m.If(~busy_next):
                m.d.sync += copy.eq(pick)
            if platform == "formal":   # the copies are `cur` (hw.formal, arbiter property 6)
                m.d.comb += Assert(copy == cur)
        slices = []
        for name, copy in zip(self._mux_slices(), cur_copies):
            parts = [self._payload_slice(port.payload, name) for port in self.i]
            slices.append(select(m, copy, parts, len(parts[0]), f"o_mux_{name}"))
        m.d.comb += self.o.payload.eq(Cat(*slices))   # the slices in the flit's bit order
        # Gate ready like the grant: with no choice (e.g. every requester disabled by weight 0)
        # the default index must not swallow a flit, and a choice whose requester stopped
        # requesting is not granted.
        m.d.comb += [self.i[k].ready.eq(self.o.ready & sel_hot[k] & cur_ok &
                                        (self.busy | valid[k])) for k in range(n)]
        with m.If(self.busy | self.o.valid):
            m.d.comb += self.grant.eq(sel_hot)
        m.d.comb += self.choice.eq(sel_hot)

        if "last" in self.signature.members:   # from the requesters' own `last` registers
            o_last = (self.last & sel_hot).any()
        else:
            o_last = self.o.payload.last
        m.d.comb += busy_next.eq(Mux(self.o.valid, ~(self.o.ready & o_last), self.busy))
        m.d.sync += self.busy.eq(busy_next)
        with m.If(start):
            m.d.sync += ptr.eq(cur)

        # The policy state as it will be next cycle, from which next cycle's choice is made.
        ptr_next = Signal.like(ptr, name="ptr_next")
        m.d.comb += ptr_next.eq(Mux(start, cur, ptr))
        count_next = None
        if self._policy == Policy.WRR:
            self._count = Signal(WEIGHT_BITS)   # packets granted in the current turn
            count_next = Signal(WEIGHT_BITS)
            m.d.comb += count_next.eq(Mux(start, Mux(turn, 1, self._count + 1), self._count))
            m.d.sync += self._count.eq(count_next)
        if self._policy == Policy.DRR:
            deficit_next = self._drr_update(m, valid, ptr, cur, start, accept, turn)
            self._choose(m, valid, ptr_next, None, deficit_next, pick, found, new_turn)
        else:
            # The state after this cycle is one of two, each known from registers: no packet
            # starts (the state stays), or `cur` starts one. Choose for both and let `start`
            # pick the answer, so the choice does not wait for `start`.
            stay_state = (ptr, self._count if count_next is not None else None)
            start_state = (cur, Mux(turn, 1, self._count + 1) if count_next is not None
                           else None)
            answers = []
            for name, (p_, c_) in (("kept", stay_state), ("started", start_state)):
                a = (Signal(range(n), name=f"pick_{name}"), Signal(name=f"found_{name}"),
                     Signal(name=f"new_turn_{name}"))
                if c_ is not None:
                    count_s = Signal(WEIGHT_BITS, name=f"count_{name}")
                    m.d.comb += count_s.eq(c_)
                    c_ = count_s
                self._choose(m, valid, p_, c_, None, *a, prefix=name)
                answers.append(a)
            (pk, fk, tk), (ps, fs, ts) = answers
            m.d.comb += [pick.eq(Mux(start, ps, pk)), found.eq(Mux(start, fs, fk)),
                         new_turn.eq(Mux(start, ts, tk))]

        # Next cycle's requester: the held one while a packet continues, else the choice.
        m.d.comb += self.select_next.eq(Mux(busy_next, sel_hot,
                                            Mux(found, one_hot(m, pick, n, "pick_hot"), 0)))
        with m.If(busy_next):
            m.d.sync += cur_ok.eq(1)
        with m.Else():
            m.d.sync += [cur.eq(pick), cur_ok.eq(found), turn.eq(new_turn)]
        return m

    # -- the output multiplexer's slices ------------------------------------------------------

    def _mux_slices(self):
        """Names of the output multiplexer's slices: each data lane, then the header."""
        return [f"lane{k}" for k in range(self._lanes)] + ["header"]

    def _slice_bits(self, name):
        """The bit range of slice ``name`` in a flit (the lanes come first in its layout)."""
        if name == "header":
            return self._lanes * LANE_BITS, flit_layout(self._lanes).size
        k = int(name[len("lane"):])
        return k * LANE_BITS, (k + 1) * LANE_BITS

    def _payload_slice(self, payload, name):
        start, stop = self._slice_bits(name)
        return payload.as_value()[start:stop]

    # -- policy-specific choice ----------------------------------------------------------------

    def _choose(self, m, valid, ptr, count, deficit, pick, found, new_turn, prefix=""):
        """Next cycle's choice (``pick``, ``found``, ``new_turn``) from this cycle's ``valid``
        and the policy state as it will be next cycle (``ptr``, wrr's ``count``, drr's
        ``deficit``)."""
        n = self._ports
        if self._policy == Policy.RR:
            any_valid, index = first_after(m, valid, ptr, f"{prefix}rr")
            m.d.comb += [pick.eq(index), found.eq(any_valid), new_turn.eq(1)]

        elif self._policy == Policy.PRIO:
            # A requester is eligible when no valid requester has a strictly higher priority.
            eligible = Signal(n)
            prio = self.priority
            m.d.comb += eligible.eq(Cat(
                valid[k] & ~Cat(valid[j] & (prio[j] > prio[k]) for j in range(n)).any()
                for k in range(n)))
            any_eligible, index = first_after(m, eligible, ptr, f"{prefix}prio")
            m.d.comb += [pick.eq(index), found.eq(any_eligible), new_turn.eq(1)]

        elif self._policy == Policy.WRR:
            enabled = Signal(n)
            m.d.comb += enabled.eq(valid & Cat(self.weight[k] != 0 for k in range(n)))
            any_enabled, index = first_after(m, enabled, ptr, f"{prefix}wrr")
            stay = Signal()
            m.d.comb += [
                stay    .eq(bit_at(m, enabled, ptr, f"{prefix}ptr_hot") &
                            (count < select(m, ptr, list(self.weight), WEIGHT_BITS,
                                            f"{prefix}weight_ptr"))),
                pick    .eq(Mux(stay, ptr, index)),
                new_turn.eq(~stay),
                found   .eq(any_enabled),
            ]

        elif self._policy == Policy.DRR:
            quantum = Signal(signed(DEFICIT_BITS + 1))
            m.d.comb += quantum.eq(self.quantum)
            # Who could go on a new turn: deficit plus quantum positive.
            eligible = Signal(n)
            zero = Const(0, signed(DEFICIT_BITS + 1))
            m.d.comb += eligible.eq(valid & Cat(
                (deficit[k].as_signed() + quantum) > zero for k in range(n)))
            found_eligible, index_eligible = first_after(m, eligible, ptr, "drr_eligible")
            any_valid, index_any = first_after(m, valid, ptr, "drr_any")
            m.d.comb += found.eq(any_valid)
            deficit_ptr = select(m, ptr, deficit, signed(DEFICIT_BITS), "deficit_ptr")
            stay = Signal()
            m.d.comb += stay.eq(bit_at(m, valid, ptr, "ptr_hot") &
                                (deficit_ptr > Const(0, signed(DEFICIT_BITS))))
            with m.If(stay):
                m.d.comb += pick.eq(ptr)
            with m.Elif(found_eligible):
                m.d.comb += pick.eq(index_eligible)
            with m.Else():   # everyone requesting is in debt: go anyway, never idle the link
                m.d.comb += pick.eq(index_any)
            m.d.comb += new_turn.eq(~stay)

    def _drr_update(self, m, valid, ptr, sel, start, accept, new_turn):
        """The deficit counters' update for this cycle's start and accepted flit; returns
        their next values (the choice made this cycle reads them)."""
        n = self._ports
        self._deficit = [Signal(signed(DEFICIT_BITS), name=f"deficit{k}") for k in range(n)]
        quantum = Signal(signed(DEFICIT_BITS + 1))
        m.d.comb += quantum.eq(self.quantum)
        wide = signed(DEFICIT_BITS + 2)
        lo = Const(-(1 << (DEFICIT_BITS - 1)), wide)
        hi = Const((1 << (DEFICIT_BITS - 1)) - 1, wide)
        zero = Const(0, signed(DEFICIT_BITS))
        spent = Signal(wide)   # flits taken from the granted requester's deficit this cycle
        m.d.comb += spent.eq(accept)
        result = []
        for k in range(n):
            deficit = self._deficit[k]
            topped = Signal(signed(DEFICIT_BITS + 1), name=f"topped{k}")
            m.d.comb += topped.eq(deficit.as_signed() + quantum)
            granted = index_is(sel, k)
            # Requesters strictly between the old turn holder and the new one in circular
            # order were passed over with their turn: they bank the quantum.
            k_const = Const(k, len(ptr))
            after_ptr = (ptr < k_const) if k > 0 else Const(0, 1)
            # No index is above the top one: keep constant comparisons out of the netlist.
            before_sel = (k_const < sel) if k < (1 << len(sel)) - 1 else Const(0, 1)
            between = Signal(name=f"passed{k}")
            m.d.comb += between.eq(((ptr < sel) & after_ptr & before_sel) |
                                   ((sel <= ptr) & (after_ptr | before_sel)))
            nxt = Signal(wide, name=f"deficit{k}_next")
            m.d.comb += nxt.eq(deficit)
            with m.If(start & new_turn):
                with m.If(index_is(ptr, k) & (deficit > zero)):
                    m.d.comb += nxt.eq(0)   # the old holder leaves its turn: banks no credit
                with m.If(between & valid[k] & ~granted):
                    m.d.comb += nxt.eq(topped)
                with m.If(granted):
                    m.d.comb += nxt.eq(topped - spent)
            with m.Elif(granted):
                m.d.comb += nxt.eq(deficit - spent)
            clamped = Signal(signed(DEFICIT_BITS), name=f"deficit{k}_clamped")
            with m.If(nxt < lo):
                m.d.comb += clamped.eq(lo)
            with m.Elif(nxt > hi):
                m.d.comb += clamped.eq(hi)
            with m.Else():
                m.d.comb += clamped.eq(nxt)
            m.d.sync += deficit.eq(clamped)
            result.append(clamped)
        return result
