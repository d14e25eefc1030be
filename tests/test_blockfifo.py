"""``hw.blockfifo.BlockFIFO``: cycle for cycle Amaranth's ``SyncFIFOBuffered`` (the FIFO it
replaces for the result FIFOs), with its storage marked for block RAM."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import fifo
from amaranth.back import rtlil
from amaranth.sim import Simulator

from hw.blockfifo import BlockFIFO


@pytest.mark.parametrize("depth", [2, 3, 5, 16, 27])
def test_matches_sync_fifo_buffered(depth):
    """Both FIFOs see the same random writes and reads (some into a full or out of an empty
    FIFO); every output — level, w_rdy, r_rdy, r_data when r_rdy — agrees every cycle."""
    m = Module()
    m.submodules.dut = dut = BlockFIFO(width=12, depth=depth)
    m.submodules.ref = ref = fifo.SyncFIFOBuffered(width=12, depth=depth)
    rng = random.Random(depth)

    async def bench(ctx):
        for t in range(600):
            p_write = 0.8 if (t // 100) % 2 else 0.3   # phases that fill and that drain it
            w_en, r_en, word = rng.random() < p_write, rng.random() < 0.55, rng.randrange(4096)
            for q in (dut, ref):
                ctx.set(q.w_en, w_en)
                ctx.set(q.r_en, r_en)
                ctx.set(q.w_data, word)
            for name in ("level", "w_rdy", "r_rdy"):
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), (t, name)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), t
            await ctx.tick()
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_storage_carries_the_yosys_attributes():
    q = BlockFIFO(width=8, depth=4)
    text = rtlil.convert(q, ports=[q.w_data, q.w_en, q.r_en, q.r_data])
    assert 'attribute \\ram_style "block"' in text and "attribute \\no_rw_check 1" in text
    with pytest.raises(ValueError, match="at least 2"):
        BlockFIFO(width=8, depth=1)
