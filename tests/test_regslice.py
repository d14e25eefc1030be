"""``hw.regslice.CreditSlice``: a two-flit egress stage whose room is known a cycle ahead.

The golden is a plain Python queue of at most two flits: every flit the stage takes comes out
once, in order; ``room_next`` is next cycle's ``i.ready``; with the output always ready a flit
leaves the cycle after it was taken and one passes every cycle.
"""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from hw.regslice import CreditSlice


def _run(bench_fn, width=16, write_slices=1):
    dut = CreditSlice(width, write_slices=write_slices)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    async def bench(ctx):
        await bench_fn(ctx, dut)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("seed,write_slices", [(0, 1), (1, 1), (2, 1), (3, 3), (5, 16)])
def test_flits_leave_once_in_order_and_room_is_known_a_cycle_ahead(seed, write_slices):
    """Loaded in slices (each from its own copy of the write pointer), a flit still comes out
    whole: a copy out of step would mix two flits' bits, which the word check catches."""
    rng = random.Random(seed)
    p_valid, p_ready = rng.uniform(0.3, 1.0), rng.uniform(0.2, 1.0)

    async def bench(ctx, dut):
        queue, promised, sent, got = deque(), None, 0, 0
        for t in range(2000):
            valid, ready, word = rng.random() < p_valid, rng.random() < p_ready, rng.getrandbits(16)
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, word)
            ctx.set(dut.o.ready, ready)
            room = ctx.get(dut.i.ready)
            if promised is not None:
                assert room == promised, t
            assert room == (len(queue) < 2), t
            assert ctx.get(dut.o.valid) == bool(queue), t
            if queue:
                assert ctx.get(dut.o.payload) == queue[0], t
                if ready:
                    queue.popleft()
                    got += 1
            if valid and room:
                queue.append(word)
                sent += 1
            promised = ctx.get(dut.room_next)
            await ctx.tick()
        assert got > 500 and sent - got == len(queue)

    _run(bench, write_slices=write_slices)


def test_with_the_output_always_ready_a_flit_passes_every_cycle_one_cycle_late():
    async def bench(ctx, dut):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        for t in range(50):
            ctx.set(dut.i.payload, t)
            assert ctx.get(dut.i.ready) and ctx.get(dut.room_next)
            if t:
                assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == t - 1
            await ctx.tick()

    _run(bench)


def test_a_stalled_output_takes_one_more_flit_then_refuses():
    async def bench(ctx, dut):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        taken = []
        for t in range(5):
            ctx.set(dut.i.payload, 100 + t)
            if ctx.get(dut.i.ready):
                taken.append(100 + t)
            await ctx.tick()
        assert taken == [100, 101]
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        out = []
        for _ in range(3):
            if ctx.get(dut.o.valid):
                out.append(ctx.get(dut.o.payload))
            await ctx.tick()
        assert out == [100, 101]

    _run(bench)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_write_slices_must_be_a_count(bad):
    with pytest.raises(ValueError, match="write_slices"):
        CreditSlice(16, write_slices=bad)
