"""IEEE 754 binary floating-point addition for the reduction unit (fp32 and bf16).

Round to nearest, ties to even; subnormal inputs and outputs; ±0 (x + (−x) = +0, −0 + −0 = −0);
±Inf; overflow to ±Inf; NaN in → NaN out. NaN results are the canonical quiet NaN (sign 0,
exponent all ones, fraction MSB set): numpy propagates an input's payload instead, so tests
compare NaN-ness, not NaN bits.

The reduction unit adds contributions in a fixed order (a tree in member order), so every
result is the same whatever order the packets arrived in: each node of that tree is one of these
adders, and each adder is exactly one correctly rounded IEEE addition (what numpy's ``float32``
``+`` computes). bf16 is the same algorithm with a 7-bit fraction; its golden is float32 addition
rounded once to bf16, which is exact because 24 ≥ 2·8 + 2 (double rounding is innocuous).

Algorithm (one guard, one round and one sticky bit, the classic single-path adder): order the
operands by magnitude (exponent and fraction compared as one integer on one carry chain; the
exponent difference from two short chains beside it); align the smaller one by a logarithmic
right shift whose steps OR the bits they shift out into sticky; add or subtract on one carry
chain (the carry in below the LSB); normalise by one left shift by the leading-zero count of
the sum with its carry bit (a carry out is a shift of 0), stopped at the minimum exponent by a
marker bit in the counted word, which produces subnormals; round to nearest even by one
increment of the packed exponent and fraction (the implicit bit added into the exponent), so a
rounding carry moves into the exponent and out of the largest finite exponent gives infinity;
the round-up decision comes from the sum's low bits beside the count, not after the shift.
NaN, infinity (in, or by a carry out at the largest exponent) and exact zero replace the word
before that increment.

Pipelining: ``float_add(..., stages=7)`` registers the adder at all six cuts (:data:`CUTS`:
after the comparison, the swap with the aligning shift's large steps, the small steps, the
addition, the leading-zero count and the normalising shift), so each stage is a few LUT levels
or one carry chain and the reduction tree's adders reach 150 MHz on the ECP5 (docs/hw.md,
Synthesis). Fewer stages register fewer of the cuts (:data:`STAGE_CUTS`). The registers only
delay values: the result is the same bits, ``stages − 1`` cycles later.
"""

from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatFormat", "FP32", "BF16", "float_add", "FloatAdder", "TreeNode", "tree_node",
           "delay_by", "CUTS", "STAGE_CUTS", "MAX_STAGES"]


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE 754 binary format: ``exp_bits`` exponent bits, ``frac_bits`` fraction bits."""

    name: str
    exp_bits: int
    frac_bits: int

    @property
    def width(self):
        return 1 + self.exp_bits + self.frac_bits

    @property
    def exp_max(self):
        return (1 << self.exp_bits) - 1

    @property
    def canonical_nan(self):
        return (self.exp_max << self.frac_bits) | (1 << (self.frac_bits - 1))


FP32 = FloatFormat("fp32", 8, 23)
BF16 = FloatFormat("bf16", 8, 7)


#: The adder's pipeline cuts, in datapath order (see :func:`float_add`).
CUTS = ("compare", "swap", "align", "add", "count", "normalise")
#: Which cuts ``stages`` 1 to 7 register: each added stage splits the deepest remaining span.
STAGE_CUTS = {1: (), 2: ("count",), 3: ("compare", "count"),
              4: ("compare", "add", "normalise"), 5: ("compare", "align", "count", "normalise"),
              6: ("compare", "align", "add", "count", "normalise"), 7: CUTS}
MAX_STAGES = max(STAGE_CUTS)


def _check_stages(stages):
    if stages not in STAGE_CUTS:
        raise ValueError(f"An adder has 1 to {MAX_STAGES} stages, not {stages!r}")


def _pair_zeros(value):
    """The first level of a leading-zero count of ``value`` (even width), per bit pair from the
    bottom: ``(zeros, counts)``, whether the pair is all zeros and its leading-zero count
    (its low bit when the pair is zero)."""
    pairs = range(0, len(value), 2)
    return (Cat(~(value[i] | value[i + 1]) for i in pairs), Cat(~value[i + 1] for i in pairs))


def _leading_zeros(zeros, counts):
    """``(zero, count)`` of the value whose bit pairs gave ``zeros, counts``
    (:func:`_pair_zeros`, a power of two of them): whether it is all zeros, and its
    leading-zero count (low bits of it when zero), by a tree of halves — logarithmic depth and
    size linear in the width, where a priority encoder is a chain as long as the value."""
    blocks = [(zeros[i], counts[i]) for i in range(len(zeros))]
    while len(blocks) > 1:
        blocks = [(hi_zero & lo_zero, Cat(Mux(hi_zero, lo_count, hi_count), hi_zero))
                  for (lo_zero, lo_count), (hi_zero, hi_count)
                  in zip(blocks[::2], blocks[1::2])]
    return blocks[0]


def float_add(m, a, b, fmt, prefix="fadd", stages=1):
    """``a + b`` in format ``fmt``; returns the result signal, ``stages − 1`` cycles after
    ``a`` and ``b`` (``stages`` 1: combinational, up to :data:`MAX_STAGES`).

    The datapath has six cuts (:data:`CUTS`): after the magnitude comparison (``compare``),
    after swapping the operands and the aligning shift's large steps (``swap``), after its
    small steps (``align``), after the significand addition and the leading-zero count's first
    level (``add``), after the rest of the count (``count``) and after the normalising shift
    (``normalise``); ``stages`` registers ``stages − 1`` of them (:data:`STAGE_CUTS`) in the
    ``sync`` domain. Every value crosses each cut in a register, so the result is bit-for-bit
    the combinational adder's, later; the registers hold no reset (the caller tracks which
    cycles carry a real operand pair).
    """
    _check_stages(stages)
    active = STAGE_CUTS[stages]
    E, F = fmt.exp_bits, fmt.frac_bits
    W = fmt.width
    GRS = 3
    S = F + 1 + GRS          # significand with guard, round, sticky
    N = S + 1                # with the carry bit of the addition
    SH = (S - 1).bit_length()   # aligning shift amount bits: 2**SH - 1 >= S shifts all out
    name = lambda n: f"{prefix}_{n}"  # noqa: E731

    def sig(width, tag):
        return Signal(width, name=name(tag))

    def cut(point, **values):
        """The values registered at cut ``point`` when it is active, else the values."""
        if point not in active:
            return SimpleNamespace(**values)
        regs = {}
        for tag, value in values.items():
            reg = Signal(len(value), name=name(f"{tag}_{point}_q"), reset_less=True)
            m.d.sync += reg.eq(value)
            regs[tag] = reg
        return SimpleNamespace(**regs)

    # -- compare: special operands, which is larger, the exponent difference ----------------
    def unpack(x):
        exp, frac = x[F:F + E], x[:F]
        top = exp == fmt.exp_max
        # effective exponent (a subnormal's is 1), implicit bit
        return (x[W - 1], exp, Mux(exp.any(), exp, 1), exp.any(), top & frac.any(),
                top & ~frac.any())

    sa, ea_raw, ea, ha, nan_a, inf_a = unpack(a)
    sb, eb_raw, eb, hb, nan_b, inf_b = unpack(b)
    # Exponent and fraction compare as one unsigned integer: the magnitude order.
    swap = sig(1, "swap")
    m.d.comb += swap.eq(b[:W - 1] > a[:W - 1])
    # The larger exponent and the difference come from two short carry chains beside the
    # comparison (not after it), on the exponent fields as they are: the effective exponent of
    # a subnormal (1, not 0) makes the difference one less when exactly one operand is
    # subnormal, and one less than a − b is ~(b − a). Equal exponents give either.
    a_minus_b, b_minus_a = ea_raw - eb_raw, eb_raw - ea_raw
    b_larger = sig(1, "b_larger")
    m.d.comb += b_larger.eq(a_minus_b[E])     # the borrow
    one_subnormal = ha ^ hb
    diff_full = sig(E, "diff_full")
    m.d.comb += diff_full.eq(Mux(b_larger, Mux(one_subnormal, ~a_minus_b[:E], b_minus_a[:E]),
                                 Mux(one_subnormal, ~b_minus_a[:E], a_minus_b[:E])))
    # A difference of 2**SH or more shifts y by 2**SH - 1 (every bit into sticky): the shift
    # steps take ``far`` beside each difference bit.
    diff, far = sig(SH, "diff"), sig(1, "far")
    m.d.comb += [diff.eq(diff_full[:SH]), far.eq(diff_full[SH:].any())]
    ex = sig(E, "ex")
    m.d.comb += ex.eq(Mux(b_larger, eb, ea))
    # x + (−x) = +0 in round-to-nearest; (−0) + (−0) = −0.
    zero_sign = sig(1, "zero_sign")
    m.d.comb += zero_sign.eq(sa & sb)
    special = sig(1, "special")     # NaN or infinity in: the result is known from the operands
    m.d.comb += special.eq(nan_a | nan_b | inf_a | inf_b)
    special_nan = sig(1, "special_nan")
    m.d.comb += special_nan.eq(nan_a | nan_b | (inf_a & inf_b & (sa ^ sb)))
    inf_sign = sig(1, "inf_sign")
    m.d.comb += inf_sign.eq(Mux(inf_a, sa, sb))
    v = cut("compare", a=Cat(a[:F], ha, sa), b=Cat(b[:F], hb, sb), swap=swap, ex=ex,
            diff=diff, far=far,
            flags=Cat(zero_sign, special, special_nan, inf_sign))

    # -- swap: x is the larger operand, y the smaller; the aligning shift's large steps -------
    mx, my = sig(F + 1, "mx"), sig(F + 1, "my")
    sx = sig(1, "sx")
    m.d.comb += [mx.eq(Mux(v.swap, v.b[:F + 1], v.a[:F + 1])),
                 my.eq(Mux(v.swap, v.a[:F + 1], v.b[:F + 1])),
                 sx.eq(Mux(v.swap, v.b[F + 1], v.a[F + 1]))]
    subtract = sig(1, "subtract")   # the signs differ, whichever is larger
    m.d.comb += subtract.eq(v.a[F + 1] ^ v.b[F + 1])
    diff = sig(SH, "diff_clamped")
    m.d.comb += diff.eq(v.diff | v.far.replicate(SH))

    # A logarithmic right shift of y by the exponent difference, largest step first; each step
    # ORs the bits it shifts out into sticky (small OR trees, not a mask as wide as the value).
    def shift_steps(y, sticky, diff, steps):
        for k in steps:
            step = 1 << k
            sticky = sticky | (diff[k] & y[:min(step, S)].any())
            y = Mux(diff[k], y >> step, y)[:S]
        return y, sticky
    large = range(SH - 1, SH // 2, -1)
    y, sticky = shift_steps(Cat(Const(0, GRS), my), Const(0, 1), diff, large)
    v = cut("swap", mx=mx, y=y, sticky=sticky, diff=diff, ex=v.ex, subtract=subtract,
            flags=Cat(sx, v.flags))

    # -- align: the small steps; the subtrahend's one's complement ---------------------------
    y, sticky = shift_steps(v.y, v.sticky, v.diff, range(SH // 2, -1, -1))
    y_final = sig(N, "y_final")
    # Subtraction adds the one's complement (of the carry bit too) plus a carry in, below.
    m.d.comb += y_final.eq(Cat(y[0] | sticky, y[1:], Const(0, 1)) ^ v.subtract.replicate(N))
    v = cut("align", mx=v.mx, y_final=y_final, ex=v.ex, subtract=v.subtract, flags=v.flags)

    # -- add: one carry chain, the carry in below the LSB ------------------------------------
    total = sig(N + 1, "total")
    m.d.comb += total.eq(Cat(Const(1, 1), Const(0, GRS), v.mx) + Cat(v.subtract, v.y_final))
    raw = sig(N, "raw")     # x ± y, never negative (x is the larger magnitude), one carry bit
    m.d.comb += raw.eq(total[1:])
    # The normalising left shift is the leading-zero count, the carry bit included (a carry
    # out is a shift of 0), but at most ex: what remains then is a subnormal. A marker bit at
    # ex (beside the leading-zero count, not a comparison after it) stops the count there.
    # The count's first level (per bit pair) fits beside the marker in this stage.
    marked = sig(N + N % 2, "marked")     # to whole pairs, a zero below
    m.d.comb += marked.eq(Cat(Const(0, N % 2), raw | (Const(1 << (N - 1), N) >> v.ex)))
    pair_zeros, pair_counts = _pair_zeros(marked)
    v = cut("add", raw=raw, pair_zeros=pair_zeros, pair_counts=pair_counts, ex=v.ex,
            flags=v.flags)

    # -- count: the shift; rounding and the results that replace it --------------------------
    sx, zero_sign, special, special_nan, inf_sign = v.flags
    pad = (1 << (len(v.pair_zeros) - 1).bit_length()) - len(v.pair_zeros)  # zero pairs below
    _, shift = _leading_zeros(Cat(Const((1 << pad) - 1, pad), v.pair_zeros),
                              Cat(Const((1 << pad) - 1, pad), v.pair_counts))
    zero = sig(1, "zero")
    m.d.comb += zero.eq(~v.raw.any())
    # The exponent overflows only on a carry out at the largest finite exponent.
    overflow = sig(1, "overflow")
    m.d.comb += overflow.eq(v.raw[N - 1] & (v.ex == fmt.exp_max - 1))
    # Round to nearest even, from the sum itself: after a shift s the LSB, guard, round and
    # sticky are raw bits 4−s, 3−s, 2−s and below. A shift of 3 or more follows a cancellation
    # of operands at most one exponent apart, which leaves raw's two low bits (round, sticky)
    # zero, so the guard is zero too; clamping at ex = 1 or 2 likewise leaves nothing to round.
    def rounds(lsb, guard, rnd, stk):
        return guard & (rnd | stk | lsb)
    r = v.raw
    round_up = sig(1, "round_up")
    m.d.comb += round_up.eq(~special & ~overflow & Mux(
        r[N - 1], rounds(r[GRS + 1], r[GRS], r[GRS - 1], r[:GRS - 1].any()), Mux(
            r[N - 2], rounds(r[GRS], r[GRS - 1], r[GRS - 2], r[0]),
            r[N - 3] & rounds(r[GRS - 1], r[GRS - 2], r[0], 0))))
    v = cut("count", raw=v.raw, shift=shift, ex=v.ex, zero=zero, overflow=overflow,
            round_up=round_up, flags=v.flags)

    # -- normalise: shift; the word to round, or the result that replaces it -----------------
    sx, zero_sign, special, special_nan, inf_sign = v.flags
    norm = sig(N, "norm")   # the implicit bit at the top, then the fraction, guard, round, sticky
    m.d.comb += norm.eq(v.raw << v.shift)
    # NaN, infinity (in, or by overflow) and exact zero replace the rounded word outright.
    fixed = special | v.overflow | v.zero
    fixed_exp = special | v.overflow
    # The exponent field is ex − shift plus the implicit bit (0 for a subnormal); the implicit
    # bit is added by the rounding increment, where a carry out of the fraction also lands.
    word = sig(W, "word")
    implicit = sig(1, "implicit")
    m.d.comb += [
        word.eq(Mux(fixed,
                    Cat(Const(0, F - 1), special & special_nan, fixed_exp.replicate(E),
                        Mux(special, inf_sign & ~special_nan, Mux(v.overflow, sx, zero_sign))),
                    Cat(norm[GRS + 1:N - 1], (v.ex - v.shift)[:E], sx))),
        implicit.eq(norm[N - 1] & ~fixed),
    ]
    v = cut("normalise", word=word, implicit=implicit, round_up=v.round_up)

    # -- round: one increment of exponent and fraction together; out of the largest finite
    # exponent it gives infinity with a zero fraction --------------------------------------
    result = sig(W, "result")
    m.d.comb += result.eq(Cat((v.word[:W - 1] + Cat(v.round_up, Const(0, F - 1), v.implicit))
                              [:W - 1], v.word[W - 1]))
    return result


class FloatAdder(wiring.Component):
    """A registered adder: ``result`` is ``a + b`` from ``stages`` cycles before.

    Parameters
    ----------
    fmt : FloatFormat
        :data:`FP32` or :data:`BF16`.
    stages : int
        Pipeline stages, 1 to 7 (see :func:`float_add`); a new operand pair every cycle.

    Members
    -------
    a, b : In(fmt.width)
    result : Out(fmt.width)
    """

    def __init__(self, fmt, stages=1):
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"Format must be a FloatFormat, not {fmt!r}")
        _check_stages(stages)
        self._fmt, self._stages = fmt, stages
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "result": Out(fmt.width)})

    @property
    def fmt(self):
        return self._fmt

    @property
    def stages(self):
        return self._stages

    def elaborate(self, platform):
        m = Module()
        total = float_add(m, self.a, self.b, self._fmt, stages=self._stages)
        m.d.sync += self.result.eq(total)
        return m


def delay_by(m, value, cycles, tag):
    """``value`` through ``cycles`` registers (no reset) named ``{tag}_d0`` …"""
    for c in range(cycles):
        reg = Signal(len(value), name=f"{tag}_d{c}", reset_less=True)
        m.d.sync += reg.eq(value)
        value = reg
    return value


def tree_node(m, a, b, fmt, stages, prefix="node"):
    """One node of the reduction unit's adder tree: ``a + b`` in the level register ``stages``
    cycles after the operands. An absent member reaches the tree as −0, the addition's
    identity (x + (−0) = x exactly for every x but NaN, whose sum is the canonical NaN), so
    a node needs no pass-through. Returns the level register."""
    level = Signal(fmt.width, name=prefix)
    m.d.sync += level.eq(float_add(m, a, b, fmt, prefix=prefix, stages=stages))
    return level


class TreeNode(wiring.Component):
    """A tree node (:func:`tree_node`) between registered operands, as it sits in the reduction
    unit (bank read data or the level below in, the level register out): what ``innet synth
    fpadd`` places and routes to give the adders' own Fmax.

    Members
    -------
    a, b : In(fmt.width)
    result : Out(fmt.width)
    """

    def __init__(self, fmt, stages=MAX_STAGES):
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"Format must be a FloatFormat, not {fmt!r}")
        _check_stages(stages)
        self._fmt, self._stages = fmt, stages
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "result": Out(fmt.width)})

    fmt = property(lambda self: self._fmt)
    stages = property(lambda self: self._stages)

    def elaborate(self, platform):
        m = Module()
        a, b = Signal(len(self.a), name="a_q"), Signal(len(self.b), name="b_q")
        m.d.sync += [a.eq(self.a), b.eq(self.b)]
        m.d.comb += self.result.eq(tree_node(m, a, b, self._fmt, self._stages))
        return m
