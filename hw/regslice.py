"""An output stage whose ``ready`` is known a cycle ahead.

A sender across the die cannot afford to hear about its receiver's ``o.ready`` in the cycle it
sends: that is a path from one end of the die to the other and back. :class:`CreditSlice`
holds two flits, so it can tell a cycle early whether it will take one: ``i.ready`` (there is
a free register) depends on its registers alone, and ``room_next`` is the value ``i.ready``
will have next cycle. A sender that copies ``room_next`` into a register of its own knows from
that copy whether it may send, with no path from ``o.ready`` back to it.

A flit crossing the die needs a register on the way as well: :class:`LinkRegister` is one
flit's register in front of such a stage, moving on when the stage has room, so the wire from
the sender's multiplexer to the stage is cut in two and the room is still known a cycle ahead.

:class:`SlicedLink` is the two, once per slice of the flit, each slice with its own control:
a register that steers a flit's 300-odd bits from one place cannot reach them all in a fast
clock's cycle, a copy per slice beside its bits can. Its ``credit`` (the stage's room) and
``credit_next`` let a sender decide from the stage alone, not from whether the link register
takes a flit this cycle (which depends on the sender's own choice).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CreditSlice", "LinkRegister", "SlicedLink"]


class CreditSlice(wiring.Component):
    """A two-flit stage on a stream of ``shape`` payloads, its room known a cycle ahead.

    Flits are written into two registers in turn and leave in the order they came;
    ``o.payload`` is a choice between the two by a register, so the output is two flip-flops
    and one 2:1 multiplexer away from any input. ``i.ready`` is high while one register at
    least is free. With ``o.ready`` always high a flit moves through in one cycle, as through a
    register slice, and one flit per cycle passes; when ``o.ready`` falls the stage takes one
    more flit (the one its sender decided on before it could know) and then refuses.

    The switch builds one stage per slice of the flit (a lane's data each, and the header),
    each with its own control, so the load enables of a slice's flip-flops come from registers
    beside them (:class:`SlicedLink`).

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    room_next : Out(1)
        ``i.ready`` of the next cycle, from this cycle's registers and handshakes.
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)),
                          "room_next": Out(1)})

    def elaborate(self, platform):
        m = Module()
        shape = self.i.payload.shape()
        full = [Signal(name=f"full{j}") for j in range(2)]
        data = [Signal(shape, name=f"data{j}") for j in range(2)]
        write_sel = Signal()   # the register the next flit goes into
        read_sel = Signal()    # the register the output shows
        take = Signal()
        give = Signal()
        m.d.comb += [
            self.i.ready.eq(~(full[0] & full[1])),
            take.eq(self.i.valid & self.i.ready),
            self.o.valid.eq(Mux(read_sel, full[1], full[0])),
            self.o.payload.eq(Mux(read_sel, data[1], data[0])),
            give.eq(self.o.valid & self.o.ready),
        ]
        full_next = []
        for j in range(2):
            filled = take & (write_sel == j)
            emptied = give & (read_sel == j)
            nxt = Signal(name=f"full{j}_next")
            m.d.comb += nxt.eq(filled | (full[j] & ~emptied))
            m.d.sync += full[j].eq(nxt)
            full_next.append(nxt)
        for j in range(2):
            with m.If(take & (write_sel == j)):
                m.d.sync += data[j].eq(self.i.payload)
        with m.If(take):
            m.d.sync += write_sel.eq(~write_sel)
        with m.If(give):
            m.d.sync += read_sel.eq(~read_sel)
        m.d.comb += self.room_next.eq(~(full_next[0] & full_next[1]))
        return m


class LinkRegister(wiring.Component):
    """One flit's register on a link, in front of a stage whose room is known a cycle ahead.

    The register takes a flit while it is empty or while its own flit leaves (``o.ready``, the
    stage's ``i.ready``: the stage's registers alone), so one flit per cycle passes, a cycle
    later than without it. ``room_next`` is next cycle's ``i.ready``, from the register's own
    next state and the stage's ``room_next`` (``o_room_next``): a sender that copies it knows
    from its copy whether the register takes a flit, as from :class:`CreditSlice`'s. In front
    of a :class:`CreditSlice`, a stalled output takes two more flits than a combinational
    ``ready`` would have let through (the stage's one and this register's), then refuses.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    o_room_next : In(1)
        The stage's ``room_next``: its ``i.ready`` (this register's ``o.ready``) next cycle.
    room_next : Out(1)
        ``i.ready`` of the next cycle.
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)),
                          "o_room_next": In(1), "room_next": Out(1)})

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        full_next = Signal()
        take = Signal()
        give = Signal()
        m.d.comb += [
            self.i.ready.eq(~full | self.o.ready),
            take.eq(self.i.valid & self.i.ready),
            give.eq(full & self.o.ready),
            self.o.valid.eq(full),
            full_next.eq(take | (full & ~give)),
            self.room_next.eq(~full_next | self.o_room_next),
        ]
        m.d.sync += full.eq(full_next)
        # (loaded whenever it may take a flit: the load enable is `i.ready`, from registers,
        # not the sender's `valid`; an empty register's word is never read)
        with m.If(self.i.ready):
            m.d.sync += self.o.payload.eq(self.i.payload)
        return m


class SlicedLink(wiring.Component):
    """A :class:`LinkRegister` and a :class:`CreditSlice` behind it, once per slice of the
    payload's bits, each slice with its own control.

    Every slice sees the same handshakes (``i.valid``, ``o.ready``), so all hold the same state
    and move their bits in the same cycles: together they are one link register and one stage
    on the whole payload, cycle for cycle. What differs is where the control is: each slice's
    load enables come from its own flip-flops, which the placer puts beside its bits, not from
    one register whose enable nets reach every slice. (At 8 × 8 × 64 the clock enables of the
    switch's egress stages and link registers, one each for 314 bits, were 6,500 of the routed
    switch's endpoints too slow for 200 MHz: docs/timing-closure.md, "The slow endpoints
    named, and the egress sliced by lane".) The last slice is the master: ``i.ready``,
    ``o.valid`` and ``room_next`` are its.

    Parameters
    ----------
    widths : list of int
        The slices' widths, from the payload's low bits up.

    Members
    -------
    i : In(stream.Signature(sum(widths)))
    o : Out(stream.Signature(sum(widths)))
    room_next : Out(1)
        ``i.ready`` of the next cycle.
    credit : Out(1)
        The stage's room (its ``i.ready``), from its registers: while it is high the link
        register takes a flit whether or not it holds one, so ``i.ready`` is high too.
    credit_next : Out(1)
        ``credit`` of the next cycle, from registers and ``o.ready`` alone. Unlike
        ``room_next`` it does not read this cycle's ``i.valid``: a sender that offers flits
        only while ``credit`` is high, and copies ``credit_next`` to know when it will be,
        has no path from its own choice to that copy. Behind a stalled output it gets one
        flit fewer through than ``room_next`` allows; while the output is ready the two are
        the same.
    """

    def __init__(self, widths):
        widths = list(widths)
        if not widths or any(not isinstance(w, int) or isinstance(w, bool) or w < 1
                             for w in widths):
            raise ValueError(f"SlicedLink widths must be bit counts of at least 1, not "
                             f"{widths!r}")
        self._widths = widths
        width = sum(widths)
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width)),
                          "room_next": Out(1), "credit": Out(1),
                          "credit_next": Out(1)})

    def elaborate(self, platform):
        m = Module()
        lo = 0
        for s, width in enumerate(self._widths):
            m.submodules[f"link{s}"] = link = LinkRegister(width)
            m.submodules[f"stage{s}"] = stage = CreditSlice(width)
            hi = lo + width
            m.d.comb += [link.i.valid.eq(self.i.valid), link.i.payload.eq(self.i.payload[lo:hi]),
                         stage.i.valid.eq(link.o.valid), stage.i.payload.eq(link.o.payload),
                         link.o.ready.eq(stage.i.ready), link.o_room_next.eq(stage.room_next),
                         stage.o.ready.eq(self.o.ready), self.o.payload[lo:hi].eq(stage.o.payload)]
            lo = hi
        m.d.comb += [self.i.ready.eq(link.i.ready), self.o.valid.eq(stage.o.valid),
                     self.room_next.eq(link.room_next),
                     self.credit.eq(stage.i.ready), self.credit_next.eq(stage.room_next)]
        return m
