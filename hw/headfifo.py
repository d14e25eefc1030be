"""A first-word-fall-through FIFO whose head word is a register.

Same interface and cycle behaviour as Amaranth 0.5's ``fifo.SyncFIFO`` (a word written in
cycle t is readable in cycle t + 1; ``level``, ``w_rdy`` and ``r_rdy`` as there), so every
latency a model or a proof relies on is unchanged. The difference is where ``r_data`` comes
from: ``SyncFIFO`` reads its memory asynchronously at the read pointer, so a reader's logic
hangs behind the pointer register, the LUT-RAM read and its wiring; here the head word sits
in its own register, refilled each cycle from the inner FIFO's head (``depth - 1`` words,
LUT-RAM) or, when that is empty, straight from the word being written.

``r_next``/``r_rdy_next`` are the head word and its valid bit of the next cycle (the
register's inputs), for a reader that registers its choice among several FIFOs a cycle ahead
(the reduction unit's judge).
"""

from amaranth.asserts import Initial
from amaranth.hdl import Assert, Assume, Elaboratable, Module, Mux, Signal
from amaranth.lib import fifo

__all__ = ["HeadFIFO"]


class HeadFIFO(Elaboratable, fifo.FIFOInterface):
    """``SyncFIFO(width=…, depth=…)`` with its head word in a register (``depth`` ≥ 2)."""

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"HeadFIFO depth must be at least 2, not {depth}")
        super().__init__(width=width, depth=depth)
        self.level = Signal(range(depth + 1))
        self.r_next = Signal(width)
        self.r_rdy_next = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = fifo.SyncFIFO(width=self.width, depth=self.depth - 1)
        do_write = self.w_rdy & self.w_en
        do_read = self.r_rdy & self.r_en
        m.d.comb += [self.level.eq(inner.level + self.r_rdy),
                     self.w_level.eq(self.level), self.r_level.eq(self.level),
                     self.w_rdy.eq(self.level != self.depth)]

        # The head is refilled when it is empty or read: from the inner FIFO's head if it has
        # one, else from the word written now (which then skips the inner FIFO).
        refill = ~self.r_rdy | do_read
        to_head = refill & ~inner.r_rdy & do_write
        m.d.comb += [inner.w_data.eq(self.w_data), inner.w_en.eq(do_write & ~to_head),
                     inner.r_en.eq(refill & inner.r_rdy),
                     self.r_next.eq(Mux(refill, Mux(inner.r_rdy, inner.r_data, self.w_data),
                                        self.r_data)),
                     self.r_rdy_next.eq(~refill | inner.r_rdy | do_write)]
        m.d.sync += [self.r_data.eq(self.r_next), self.r_rdy.eq(self.r_rdy_next)]

        if platform == "formal":
            # An empty head means an empty FIFO (the inner FIFO's own invariants come from
            # Amaranth): assumed in the initial state of an induction, asserted after.
            invariant = self.r_rdy | (inner.level == 0)
            with m.If(Initial()):
                m.d.comb += Assume(invariant)
            with m.Else():
                m.d.comb += Assert(invariant)
        return m
