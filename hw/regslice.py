"""An output stage whose ``ready`` is known a cycle ahead.

A sender across the die cannot afford to hear about its receiver's ``o.ready`` in the cycle it
sends: that is a path from one end of the die to the other and back. :class:`CreditSlice`
holds two flits, so it can tell a cycle early whether it will take one: ``i.ready`` (there is
a free register) depends on its registers alone, and ``room_next`` is the value ``i.ready``
will have next cycle. A sender that copies ``room_next`` into a register of its own knows from
that copy whether it may send, with no path from ``o.ready`` back to it.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CreditSlice"]


class CreditSlice(wiring.Component):
    """A two-flit stage on a stream of ``shape`` payloads, its room known a cycle ahead.

    Flits are written into two registers in turn and leave in the order they came;
    ``o.payload`` is a choice between the two by a register, so the output is two flip-flops
    and one 2:1 multiplexer away from any input. ``i.ready`` is high while one register at
    least is free. With ``o.ready`` always high a flit moves through in one cycle, as through a
    register slice, and one flit per cycle passes; when ``o.ready`` falls the stage takes one
    more flit (the one its sender decided on before it could know) and then refuses.

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
            with m.If(filled):
                m.d.sync += data[j].eq(self.i.payload)
            full_next.append(nxt)
        with m.If(take):
            m.d.sync += write_sel.eq(~write_sel)
        with m.If(give):
            m.d.sync += read_sel.eq(~read_sel)
        m.d.comb += self.room_next.eq(~(full_next[0] & full_next[1]))
        return m
