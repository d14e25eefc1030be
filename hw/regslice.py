"""A stream register slice: the output of a stream taken from flip-flops.

``o.valid`` and ``o.payload`` are registers loaded whenever the slice is empty or its flit is
being accepted; ``i.ready`` is ``o.ready`` or the slice empty. So a flit moves through in one
cycle, one flit per cycle passes however ``o.ready`` toggles (no bubble after back-pressure),
and a presented flit stays until accepted. The ``ready`` path stays combinational (a skid
buffer would cut it too, at a 2:1 multiplexer per payload bit: docs/hw.md, Switch top).
"""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice"]



class RegisterSlice(wiring.Component):
    """A one-flit register stage on a stream of ``shape`` payloads.

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m
