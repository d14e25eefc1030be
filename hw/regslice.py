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
"""

from amaranth.hdl import Assert, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CreditSlice", "LinkRegister"]


class CreditSlice(wiring.Component):
    """A two-flit stage on a stream of ``shape`` payloads, its room known a cycle ahead.

    Flits are written into two registers in turn and leave in the order they came;
    ``o.payload`` is a choice between the two by a register, so the output is two flip-flops
    and one 2:1 multiplexer away from any input. ``i.ready`` is high while one register at
    least is free. With ``o.ready`` always high a flit moves through in one cycle, as through a
    register slice, and one flit per cycle passes; when ``o.ready`` falls the stage takes one
    more flit (the one its sender decided on before it could know) and then refuses.

    The two data registers are loaded in ``write_slices`` slices of the payload's bits, each
    slice's load enable from its own copy of the write pointer. The enables drive hundreds of
    flip-flops and the placer puts each by its loads; from a copy they share no LUT with the
    occupancy logic, which stays by the sender. (Sharing one, the routed 4 × 8 × 16 switch's
    critical path went from the egress arbiter's choice to an enable LUT placed across the die
    and back to ``room_next``: docs/hw.md, "Egress output stage".)

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    room_next : Out(1)
        ``i.ready`` of the next cycle, from this cycle's registers and handshakes.
    """

    def __init__(self, shape, *, write_slices=1):
        if (not isinstance(write_slices, int) or isinstance(write_slices, bool) or
                write_slices < 1):
            raise ValueError(f"CreditSlice write_slices must be a count of at least 1, not "
                             f"{write_slices!r}")
        self._write_slices = write_slices
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
        # The data registers' load enables, a slice at a time, from copies of `write_sel`
        # (`keep`: Yosys would merge them back into one).
        payload = Value.cast(self.i.payload)
        width = len(payload)
        n = min(self._write_slices, width)
        bounds = [width * s // n for s in range(n + 1)]
        for s in range(n):
            lo, hi = bounds[s], bounds[s + 1]
            copy = Signal(name=f"write_sel_{s}", attrs={"keep": 1})
            with m.If(take):
                m.d.sync += copy.eq(~copy)
            if platform == "formal":
                m.d.comb += Assert(copy == write_sel)
            for j in range(2):
                with m.If(take & (copy == j)):
                    m.d.sync += Value.cast(data[j])[lo:hi].eq(payload[lo:hi])
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
