"""Formal harnesses: RTL blocks wrapped with the assumptions and properties SymbiYosys proves.

Each harness is an :class:`~amaranth.hdl.Elaboratable` whose ``Assume`` statements constrain the
inputs to what the stream rules allow and whose ``Assert`` statements are the properties.
:func:`harness_rtlil` turns one into RTLIL for ``yowasp-sby`` (driven by ``innet formal``).
"""

from amaranth.back import rtlil
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cat, Elaboratable, Module, Mux, ResetSignal, Signal

from .arbiter import LinkArbiter, Policy

__all__ = ["ArbiterProperties", "harness_rtlil"]


class ArbiterProperties(Elaboratable):
    """The link arbiter with its inputs free but for the stream rules, and these properties:

    1. ``grant`` is one-hot or zero.
    2. No grant without a request: a fresh grant (not mid-packet) goes to a requester whose
       ``valid`` is high, and the output is valid only when the granted requester's is.
    3. The grant is stable from the first presented flit until the last flit is accepted.
    4. Round-robin only: while a requester waits, at most N−1 packets of others start
       (with its inductive strengthening: that count never exceeds the circular distance the
       round-robin pointer has moved past the waiting requester).
    5. Only the granted requester sees ``ready``; a flit moves only when the output accepts it.

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
        self.policy = Policy(policy)
        self.starvation_bound = ports - 1 if starvation_bound is None else starvation_bound
        self.dut = LinkArbiter(ports, 1, self.policy)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        n = self.ports
        m.d.comb += Assume(~ResetSignal())   # registers start at their reset values

        # Every input is free in every cycle (an undriven signal would be its constant init).
        for port in dut.i:
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.last.eq(AnySeq(1))]
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


def harness_rtlil(harness, name="top"):
    """RTLIL text of a formal harness."""
    return rtlil.convert(harness, name=name, ports=[])
