"""``hw.headfifo.HeadFIFO``: cycle for cycle Amaranth's ``SyncFIFO`` (the FIFO it replaces for
the reduction unit's hold FIFOs), with its head word in a register."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import fifo
from amaranth.sim import Simulator

from hw.headfifo import HeadFIFO


@pytest.mark.parametrize("depth", [2, 3, 5, 16, 17])
def test_matches_sync_fifo(depth):
    """Both FIFOs see the same random writes and reads (some into a full or out of an empty
    FIFO); every output — level, w_rdy, r_rdy, r_data when r_rdy — agrees every cycle, and
    ``r_next``/``r_rdy_next`` are the next cycle's head."""
    m = Module()
    m.submodules.dut = dut = HeadFIFO(width=12, depth=depth)
    m.submodules.ref = ref = fifo.SyncFIFO(width=12, depth=depth)
    rng = random.Random(depth)

    async def bench(ctx):
        promised = None
        for t in range(800):
            p_write = 0.85 if (t // 100) % 2 else 0.3   # phases that fill and that drain it
            w_en, r_en, word = rng.random() < p_write, rng.random() < 0.55, rng.randrange(4096)
            for q in (dut, ref):
                ctx.set(q.w_en, w_en)
                ctx.set(q.r_en, r_en)
                ctx.set(q.w_data, word)
            for name in ("level", "w_rdy", "r_rdy"):
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), (t, name)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), t
            if promised is not None:
                assert promised[0] == ctx.get(ref.r_rdy), t
                if promised[0]:
                    assert promised[1] == ctx.get(ref.r_data), t
            promised = (ctx.get(dut.r_rdy_next), ctx.get(dut.r_next))
            await ctx.tick()
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_depth_is_checked():
    with pytest.raises(ValueError, match="at least 2"):
        HeadFIFO(width=8, depth=1)
