"""The fp32/bf16 adders against numpy: edge cases and hypothesis-generated values."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.fpadd import BF16, FP32, MAX_STAGES, FloatAdder, TreeNode, float_add


def f32_bits(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def golden_fp32(a_bits, b_bits):
    a = np.array(a_bits, dtype=np.uint32).view(np.float32)
    b = np.array(b_bits, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        return int((a + b).view(np.uint32))


def bf16_to_f32(bits):
    return np.array(bits << 16, dtype=np.uint32).view(np.float32)


def f32_to_bf16_rne(bits):
    """Round a float32 bit pattern to bf16, nearest-even (NaN stays NaN)."""
    bits = int(bits)
    if (bits >> 23) & 0xFF == 0xFF and bits & 0x7FFFFF:
        return 0x7FC0
    lsb = (bits >> 16) & 1
    return ((bits + 0x7FFF + lsb) >> 16) & 0xFFFF


def golden_bf16(a_bits, b_bits):
    with np.errstate(all="ignore"):
        total = bf16_to_f32(a_bits) + bf16_to_f32(b_bits)
    return f32_to_bf16_rne(int(total.view(np.uint32)))


def is_nan(bits, fmt):
    exp = (bits >> fmt.frac_bits) & fmt.exp_max
    return exp == fmt.exp_max and bits & ((1 << fmt.frac_bits) - 1) != 0


def check(fmt, pairs, stages=1):
    """``float_add`` with ``stages`` stages on every pair (one pair a cycle when pipelined)
    against numpy; NaN results must be the canonical NaN."""
    a, b = Signal(fmt.width), Signal(fmt.width)
    m = Module()
    result = float_add(m, a, b, fmt, stages=stages)
    golden = golden_fp32 if fmt is FP32 else golden_bf16
    failures = []
    got_all = []

    async def bench(ctx):
        if stages == 1:
            for x, y in pairs:
                ctx.set(a, x)
                ctx.set(b, y)
                got_all.append(ctx.get(result))
            return
        # A new pair every cycle; its sum appears stages − 1 cycles later.
        for t in range(len(pairs) + stages - 1):
            if t < len(pairs):
                ctx.set(a, pairs[t][0])
                ctx.set(b, pairs[t][1])
            if t >= stages - 1:
                got_all.append(ctx.get(result))
            await ctx.tick()
    sim = Simulator(m)
    if stages > 1:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for (x, y), got in zip(pairs, got_all, strict=True):
        want = golden(x, y)
        if is_nan(want, fmt):
            if got != fmt.canonical_nan:
                failures.append((hex(x), hex(y), hex(got), "NaN"))
        elif got != want:
            failures.append((hex(x), hex(y), hex(got), hex(want)))
    assert not failures, f"{len(failures)} mismatches, first {failures[:5]}"


def special_values(fmt):
    F = fmt.frac_bits
    top = fmt.exp_max
    values = [0, 1, 2, 3, (1 << F) - 1, 1 << F, (1 << F) + 1,       # zero, subnormals, min normal
              (top - 1) << F | ((1 << F) - 1),                      # max finite
              top << F,                                             # +inf
              fmt.canonical_nan, top << F | 1,                      # NaNs
              (fmt.exp_max >> 1) << F,                              # 1.0
              ((fmt.exp_max >> 1) << F) | 1,                        # 1 + ulp
              ((fmt.exp_max >> 1) - F - 1) << F,                    # 2^-(F+1): half-ulp of 1.0
              ((fmt.exp_max >> 1) - F - 1) << F | 1,
              ((fmt.exp_max >> 1) + 1) << F | (1 << (F - 1))]       # 3.0
    signed = values + [v | (1 << (fmt.width - 1)) for v in values]
    return signed


@pytest.mark.parametrize("stages", range(1, MAX_STAGES + 1))
@pytest.mark.parametrize("fmt", [FP32, BF16], ids=["fp32", "bf16"])
def test_special_value_grid(fmt, stages):
    """Every pair of: ±0, subnormals, the smallest normal, the largest finite value, ±Inf,
    NaNs, 1.0 and neighbours whose sums are rounding ties; combinational and pipelined (the
    pipelined adder takes a new pair every cycle, so a value crossing a cut in the wrong
    cycle would mix two pairs)."""
    values = special_values(fmt)
    check(fmt, [(x, y) for x in values for y in values], stages)


def test_fp32_directed():
    cases = [
        (1.0, 2.0 ** -24),                 # tie below 1.0 + half ulp: rounds to even (1.0)
        (1.0 + 2.0 ** -23, 2.0 ** -24),    # tie, rounds up to even
        (3.4028235e38, 3.4028235e38),      # overflow to +inf
        (-3.4028235e38, -1e38),            # overflow to -inf
        (1.0, -1.0),                       # exact cancellation: +0
        (1e-45, -1e-45), (1e-45, 1e-45),   # subnormal arithmetic
        (1.1754942e-38, 1e-45),            # largest subnormal + smallest: the smallest normal
        (16777216.0, 1.0),                 # 2^24 + 1: tie to even
        (16777218.0, 1.0),
    ]
    check(FP32, [(f32_bits(x), f32_bits(y)) for x, y in cases])


fp32_bits = st.integers(0, 2**32 - 1)
fp32_close = st.tuples(st.integers(0, 2**32 - 1), st.integers(-40, 40)).map(
    lambda t: (t[0], (t[0] + t[1] * 0x800000) % 2**32))   # nearby exponents: cancellation


# The random tests check many pairs per example: building the simulator costs about 0.35 s,
# a pair about 2.5 ms, so 24 examples of 200 pairs check the same 4,800 pairs as 240 of 20 in
# a quarter of the time (`innet bench numerics` adds its 1,000 arrival orders through the
# RTL switch).
@settings(max_examples=24, deadline=None)
@given(st.lists(st.tuples(fp32_bits, fp32_bits), min_size=200, max_size=200))
def test_fp32_random(pairs):
    check(FP32, pairs)


@settings(max_examples=20, deadline=None)
@given(st.lists(fp32_close, min_size=200, max_size=200), st.booleans())
def test_fp32_random_near_cancellation(pairs, negate):
    check(FP32, [(a, b ^ (0x80000000 if negate else 0)) for a, b in pairs])


@pytest.mark.parametrize("stages", [3, MAX_STAGES])
@settings(max_examples=30, deadline=None)
@given(pairs=st.lists(st.tuples(fp32_bits, fp32_bits) | fp32_close, min_size=40, max_size=40))
def test_fp32_pipelined_random(stages, pairs):
    check(FP32, pairs, stages=stages)


def subnormal_and_small(fmt):
    """A subnormal and a normal number with a small exponent, either order, any signs: the
    pairs where the effective exponent (1 for a subnormal) differs from the field (0)."""
    F, sign = fmt.frac_bits, 1 << (fmt.width - 1)
    sub = st.integers(0, (1 << F) - 1)
    small = st.builds(lambda e, f: e << F | f, st.integers(1, F + 8), st.integers(0, (1 << F) - 1))

    def signed(value):
        return st.builds(lambda v, negative: v | (sign if negative else 0), value, st.booleans())
    return st.tuples(signed(sub), signed(small)).flatmap(lambda p: st.sampled_from([p, p[::-1]]))


@pytest.mark.parametrize("fmt", [FP32, BF16], ids=["fp32", "bf16"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_subnormal_with_normal(fmt, data):
    check(fmt, data.draw(st.lists(subnormal_and_small(fmt), min_size=40, max_size=40)))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF)),
                min_size=250, max_size=250))
def test_bf16_random(pairs):
    check(BF16, pairs)


def test_registered_adder():
    dut = FloatAdder(FP32)

    async def bench(ctx):
        ctx.set(dut.a, f32_bits(1.5))
        ctx.set(dut.b, f32_bits(2.25))
        await ctx.tick()
        assert ctx.get(dut.result) == f32_bits(3.75)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    with pytest.raises(TypeError, match="Format must be a FloatFormat"):
        FloatAdder("fp32")


def test_registered_adder_pipelined():
    """Three stages: a + b three cycles later, a new pair every cycle."""
    dut = FloatAdder(FP32, stages=3)
    sums = [(1.5, 2.25), (-1.0, 1.0), (3.0, 4.0), (1e-45, 1e-45)]

    async def bench(ctx):
        seen = []
        for t in range(len(sums) + 3):
            if t < len(sums):
                ctx.set(dut.a, f32_bits(sums[t][0]))
                ctx.set(dut.b, f32_bits(sums[t][1]))
            await ctx.tick()
            if t >= 2:
                seen.append(ctx.get(dut.result))
        assert seen[:len(sums)] == [golden_fp32(f32_bits(x), f32_bits(y)) for x, y in sums]
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for stages in (0, MAX_STAGES + 1):
        with pytest.raises(ValueError, match=f"1 to {MAX_STAGES} stages"):
            FloatAdder(FP32, stages=stages)


@pytest.mark.parametrize("fmt", [FP32, BF16], ids=["fp32", "bf16"])
def test_tree_node(fmt):
    """The tree node ``innet synth fpadd`` measures: the sum of a new pair every cycle,
    ``stages + 1`` cycles after the inputs (operand register, then the pipelined adder and the
    level register). An absent member reaches the tree as −0, so every special value plus −0,
    either side, must come back as itself, bit for bit, NaN aside (the canonical NaN)."""
    dut = TreeNode(fmt)
    rng = np.random.default_rng(7)
    golden = golden_fp32 if fmt is FP32 else golden_bf16
    values = [int(v) for v in special_values(fmt)]
    neg_zero = 1 << (fmt.width - 1)
    cases = [(int(rng.choice(values)), int(rng.choice(values))) for _ in range(24)]
    cases += [(x, neg_zero) for x in values] + [(neg_zero, x) for x in values]
    delay = dut.stages + 1
    seen = []

    async def bench(ctx):
        for t in range(len(cases) + delay):
            if t < len(cases):
                ctx.set(dut.a, cases[t][0])
                ctx.set(dut.b, cases[t][1])
            await ctx.tick()
            if t >= delay - 1:
                seen.append(ctx.get(dut.result))
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for (x, y), got in zip(cases, seen):
        want = golden(x, y)
        assert got == (fmt.canonical_nan if is_nan(want, fmt) else want), (x, y)
        if neg_zero in (x, y):
            other = y if x == neg_zero else x
            assert got == (fmt.canonical_nan if is_nan(other, fmt) else other), (x, y)
