"""``hw.regslice``: the egress stage whose room is known a cycle ahead (``CreditSlice``), the
link register in front of it (``LinkRegister``), and the two once per slice of the flit
(``SlicedLink``).

The golden is a plain Python queue of at most two flits (and, for the register and the stage
together, one of one in front of it): every flit taken comes out once, in order; ``room_next``
is next cycle's ``i.ready``; with the output always ready a flit leaves the cycle after it was
taken (two cycles, through both) and one passes every cycle.
"""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from hw.regslice import CreditSlice, SlicedLink


def _run(bench_fn, width=16):
    _simulate(CreditSlice(width), bench_fn)


def _simulate(dut, bench_fn):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    async def bench(ctx):
        await bench_fn(ctx, dut)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_flits_leave_once_in_order_and_room_is_known_a_cycle_ahead(seed):
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

    _run(bench)


@pytest.mark.parametrize("bad", [[], [0], [4, -1], [1.5], [True], ["2"]])
def test_sliced_link_widths_must_be_bit_counts(bad):
    with pytest.raises(ValueError, match="widths"):
        SlicedLink(bad)


@pytest.mark.parametrize("seed,slices", [(0, [16]), (1, [16]), (2, [16]), (3, [16]),
                                         (5, [3, 5, 8]), (6, [1] * 16)])
def test_link_register_then_stage_hold_three_in_order_and_room_is_known_a_cycle_ahead(seed,
                                                                                      slices):
    """The golden: the register holds one flit, which moves into the stage's queue of two
    whenever the stage has room (``i.ready``: the stage's registers alone); the pair takes a
    flit while the register is empty or moving. ``credit`` is the stage's room, and
    ``credit_next`` its value next cycle. ``SlicedLink`` (``slices``: the widths; one
    slice is the plain pair) must be the same pair on the whole word: a slice out of step with
    the others would mix two flits' bits, which the word check catches."""
    rng = random.Random(seed)
    p_valid, p_ready = rng.uniform(0.3, 1.0), rng.uniform(0.2, 1.0)

    async def bench(ctx, dut):
        reg, stage, promised, credit_promised, sent, got = None, deque(), None, None, 0, 0
        for t in range(2000):
            valid, ready, word = rng.random() < p_valid, rng.random() < p_ready, rng.getrandbits(16)
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, word)
            ctx.set(dut.o.ready, ready)
            stage_room = len(stage) < 2
            room = ctx.get(dut.i.ready)
            assert room == (reg is None or stage_room), t
            assert ctx.get(dut.credit) == stage_room, t
            if promised is not None:
                assert room == promised, t
                assert stage_room == credit_promised, t
            assert ctx.get(dut.o.valid) == bool(stage), t
            if stage:
                assert ctx.get(dut.o.payload) == stage[0], t
                if ready:
                    stage.popleft()
                    got += 1
            if reg is not None and stage_room:
                stage.append(reg)
                reg = None
            if valid and room:
                reg = word
                sent += 1
            promised, credit_promised = ctx.get(dut.room_next), ctx.get(dut.credit_next)
            await ctx.tick()
        assert got > 500 and sent - got == len(stage) + (reg is not None)

    _simulate(SlicedLink(slices), bench)


# (the stage alone, the link register in front of it, and the two in slices: cycles a flit takes
# through, and how many flits a stalled output still takes)
_PATHS = {"stage": (lambda: CreditSlice(16), 1, 2),
          "link register and stage": (lambda: SlicedLink([16]), 2, 3),
          "sliced link": (lambda: SlicedLink([5, 11]), 2, 3)}


@pytest.mark.parametrize("path", _PATHS)
def test_with_the_output_always_ready_a_flit_passes_every_cycle(path):
    make, lag, _ = _PATHS[path]

    async def bench(ctx, dut):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        for t in range(50):
            ctx.set(dut.i.payload, t)
            assert ctx.get(dut.i.ready) and ctx.get(dut.room_next)
            assert ctx.get(dut.o.valid) == (t >= lag)
            if t >= lag:
                assert ctx.get(dut.o.payload) == t - lag
            await ctx.tick()

    _simulate(make(), bench)


@pytest.mark.parametrize("path", _PATHS)
def test_a_stalled_output_takes_what_was_decided_before_then_refuses(path):
    """The stage takes one more flit than a combinational ``ready`` would have let through,
    the link register one more again."""
    make, _, held = _PATHS[path]

    async def bench(ctx, dut):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        taken = []
        for t in range(6):
            ctx.set(dut.i.payload, 100 + t)
            if ctx.get(dut.i.ready):
                taken.append(100 + t)
            await ctx.tick()
        assert taken == [100 + j for j in range(held)]
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        out = []
        for _ in range(held + 2):
            if ctx.get(dut.o.valid):
                out.append(ctx.get(dut.o.payload))
            await ctx.tick()
        assert out == taken

    _simulate(make(), bench)
