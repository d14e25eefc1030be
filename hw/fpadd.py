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
operands by magnitude (exponent and fraction compared as one integer); align the smaller one by
a logarithmic right shift whose steps OR the bits they shift out into sticky; add or subtract on
one carry chain (the carry in below the LSB); count leading zeros by a tree, the carry bit
included, so one left shift normalises both ways (a carry out is a shift of 0), but never below
the minimum exponent, which produces subnormals; round to nearest even by one increment of the
packed exponent and fraction, so a rounding carry moves into the exponent and out of the largest
finite exponent gives infinity. NaN, infinity (in, or by a carry out at the largest exponent)
and exact zero replace the word before that increment.

Pipelining: ``float_add(..., stages=6)`` registers the adder at all five cuts (after the
ordering, the aligning shift, the addition, the leading-zero count and the normalising shift),
so each stage is a few LUT levels or one carry chain and the reduction tree's adders reach the
clock the rest of the switch runs at (docs/hw.md, Synthesis). Fewer stages register fewer of
the cuts (:data:`STAGE_CUTS`). The registers only delay values: the result is the same bits,
``stages − 1`` cycles later.
"""

from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatFormat", "FP32", "BF16", "float_add", "FloatAdder", "CUTS", "STAGE_CUTS",
           "MAX_STAGES"]


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
CUTS = ("order", "align", "add", "count", "normalise")
#: Which cuts ``stages`` 1 to 6 register: each added stage splits the deepest remaining span.
STAGE_CUTS = {1: (), 2: ("count",), 3: ("order", "count"), 4: ("order", "add", "normalise"),
              5: ("order", "align", "count", "normalise"), 6: CUTS}
MAX_STAGES = max(STAGE_CUTS)


def _check_stages(stages):
    if stages not in STAGE_CUTS:
        raise ValueError(f"An adder has 1 to {MAX_STAGES} stages, not {stages!r}")


def _leading_zeros(value):
    """``(zero, count)``: whether ``value`` is all zeros, and its leading-zero count (the low
    bits of it when zero), by a tree of halves — logarithmic depth and size linear in the width,
    where a priority encoder is a chain as long as the value. ``len(value)`` is a power of two."""
    width = len(value)
    if width == 1:
        return ~value[0], Const(0, 0)
    half = width // 2
    lo_zero, lo_count = _leading_zeros(value[:half])
    hi_zero, hi_count = _leading_zeros(value[half:])
    count = Cat(Mux(hi_zero, lo_count, hi_count), hi_zero) if len(lo_count) else hi_zero
    return hi_zero & lo_zero, count


def float_add(m, a, b, fmt, prefix="fadd", stages=1):
    """``a + b`` in format ``fmt``; returns the result signal, ``stages − 1`` cycles after
    ``a`` and ``b`` (``stages`` 1: combinational, up to 6).

    The datapath has five cuts (:data:`CUTS`): after ordering the operands by magnitude
    (``order``), after the aligning shift (``align``), after the significand addition
    (``add``), after the leading-zero count (``count``) and after the normalising shift
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

    # -- order: special operands, magnitude comparison, exponent differences ----------------
    def unpack(x):
        exp, frac = x[F:F + E], x[:F]
        top = exp == fmt.exp_max
        return x[W - 1], exp, top & frac.any(), top & ~frac.any()

    sa, ea_raw, nan_a, inf_a = unpack(a)
    sb, eb_raw, nan_b, inf_b = unpack(b)
    # Exponent and fraction compare as one unsigned integer: the magnitude order.
    swap = sig(1, "swap")
    m.d.comb += swap.eq(b[:W - 1] > a[:W - 1])
    ea, eb = sig(E, "ea"), sig(E, "eb")     # effective exponents: subnormals count as 1
    m.d.comb += [ea.eq(Mux(ea_raw.any(), ea_raw, 1)), eb.eq(Mux(eb_raw.any(), eb_raw, 1))]
    # Both differences (one of them is the larger minus the smaller), clamped to the aligning
    # shifter's range: a shift of 2**SH - 1 already moves every bit into sticky.
    def clamped(diff, tag):
        out = sig(SH, tag)
        m.d.comb += out.eq(Mux(diff[SH:E].any(), (1 << SH) - 1, diff[:SH]))
        return out
    d_ab = clamped((ea - eb)[:E], "d_ab")
    d_ba = clamped((eb - ea)[:E], "d_ba")
    special = sig(1, "special")     # NaN or infinity in: the result is known from the operands
    m.d.comb += special.eq(nan_a | nan_b | inf_a | inf_b)
    special_nan = sig(1, "special_nan")
    m.d.comb += special_nan.eq(nan_a | nan_b | (inf_a & inf_b & (sa ^ sb)))
    inf_sign = sig(1, "inf_sign")
    m.d.comb += inf_sign.eq(Mux(inf_a, sa, sb))
    v = cut("order", a=a, b=b, ea=ea, eb=eb, d_ab=d_ab, d_ba=d_ba, swap=swap, special=special,
            special_nan=special_nan, inf_sign=inf_sign)

    # -- align: x is the larger operand; shift y right by the exponent difference -----------
    def significand(word):   # the implicit bit is set unless the exponent field is 0
        return Cat(word[:F], word[F:F + E].any())
    ma, mb = significand(v.a), significand(v.b)
    mx, my = sig(F + 1, "mx"), sig(F + 1, "my")
    ex, sx, sy = sig(E, "ex"), sig(1, "sx"), sig(1, "sy")
    diff = sig(SH, "diff")
    m.d.comb += [
        mx.eq(Mux(v.swap, mb, ma)), my.eq(Mux(v.swap, ma, mb)), ex.eq(Mux(v.swap, v.eb, v.ea)),
        sx.eq(Mux(v.swap, v.b[W - 1], v.a[W - 1])), sy.eq(Mux(v.swap, v.a[W - 1], v.b[W - 1])),
        diff.eq(Mux(v.swap, v.d_ba, v.d_ab)),
    ]
    subtract = sig(1, "subtract")
    m.d.comb += subtract.eq(sx ^ sy)
    # x + (−x) = +0 in round-to-nearest; (−0) + (−0) = −0.
    zero_sign = sig(1, "zero_sign")
    m.d.comb += zero_sign.eq(v.a[W - 1] & v.b[W - 1])
    # A logarithmic right shift, largest step first; each step ORs the bits it shifts out into
    # sticky (a few small OR trees instead of a mask as wide as the value).
    y = Cat(Const(0, GRS), my)
    sticky = Const(0, 1)
    for k in reversed(range(SH)):
        step = 1 << k
        lost = y[:min(step, S)].any()
        sticky = sticky | (diff[k] & lost)
        y = Mux(diff[k], y >> step, y)[:S]
    y_final = sig(N, "y_final")
    # Subtraction adds the one's complement (of the carry bit too) plus a carry in, below.
    m.d.comb += y_final.eq(Cat(y[0] | sticky, y[1:], Const(0, 1)) ^ subtract.replicate(N))
    v = cut("align", mx=mx, y_final=y_final, ex=ex, sx=sx, subtract=subtract,
            zero_sign=zero_sign, special=v.special, special_nan=v.special_nan,
            inf_sign=v.inf_sign)

    # -- add: one carry chain; the carry in rides below the LSB -----------------------------
    total = sig(N + 1, "total")
    m.d.comb += total.eq(Cat(Const(1, 1), Const(0, GRS), v.mx) + Cat(v.subtract, v.y_final))
    raw = sig(N, "raw")     # x ± y, never negative (x is the larger magnitude), one carry bit
    m.d.comb += raw.eq(total[1:])
    ex_inc = sig(E + 1, "ex_inc")
    m.d.comb += ex_inc.eq(v.ex + 1)
    v = cut("add", raw=raw, ex=v.ex, ex_inc=ex_inc, sx=v.sx, zero_sign=v.zero_sign,
            special=v.special, special_nan=v.special_nan, inf_sign=v.inf_sign)

    # -- count: leading zeros of the sum with its carry bit; the normalising shift ----------
    pad = (1 << (N - 1).bit_length()) - N      # zeros below, to a power of two
    zero, lz = _leading_zeros(Cat(Const(0, pad), v.raw))
    # Shift left by the leading zeros (the carry-out case is a shift of 0) but not below the
    # minimum exponent: what remains is a subnormal. The result's exponent is ex + 1 − shift.
    clamp = sig(1, "clamp")
    m.d.comb += clamp.eq(lz > v.ex)
    shift = sig(len(lz), "shift")
    m.d.comb += shift.eq(Mux(clamp, v.ex, lz))
    # Exponent field before rounding: 0 for a subnormal (clamped), else ex + 1 − lz.
    exp_field = sig(E, "exp_field")
    m.d.comb += exp_field.eq(Mux(clamp, 0, v.ex_inc - lz))
    # The exponent overflows only on a carry out at the largest finite exponent.
    overflow = sig(1, "overflow")
    m.d.comb += overflow.eq(v.raw[N - 1] & (v.ex == fmt.exp_max - 1))
    v = cut("count", raw=v.raw, shift=shift, exp_field=exp_field, zero=zero, overflow=overflow,
            sx=v.sx, zero_sign=v.zero_sign, special=v.special, special_nan=v.special_nan,
            inf_sign=v.inf_sign)

    # -- normalise: shift, then the word to round (or the special result, unrounded) --------
    norm = sig(N, "norm")   # the significand's MSB at the top; then guard, round, two sticky
    m.d.comb += norm.eq(v.raw << v.shift)
    lsb, guard, rnd, stk = norm[GRS + 1], norm[GRS], norm[GRS - 1], norm[:GRS - 1].any()
    # NaN, infinity (in, or by overflow) and exact zero replace the rounded word outright.
    fixed = v.special | v.overflow | v.zero
    round_up = sig(1, "round_up")
    m.d.comb += round_up.eq(guard & (rnd | stk | lsb) & ~fixed)
    word = sig(W, "word")   # sign, exponent field, fraction: rounding carries into the exponent
    fixed_exp = (v.special | v.overflow).replicate(E)
    with m.If(fixed):
        m.d.comb += word.eq(Cat(Const(0, F - 1), v.special & v.special_nan, fixed_exp,
                                Mux(v.special, v.inf_sign & ~v.special_nan,
                                    Mux(v.overflow, v.sx, v.zero_sign))))
    with m.Else():
        m.d.comb += word.eq(Cat(norm[GRS + 1:N - 1], v.exp_field, v.sx))
    v = cut("normalise", word=word, round_up=round_up)

    # -- round to nearest even: a carry out of the fraction increments the exponent, and out
    # of the largest finite exponent gives infinity with a zero fraction -------------------
    result = sig(W, "result")
    m.d.comb += result.eq(Cat((v.word[:W - 1] + v.round_up)[:W - 1], v.word[W - 1]))
    return result


class FloatAdder(wiring.Component):
    """A registered adder: ``result`` is ``a + b`` from ``stages`` cycles before.

    Parameters
    ----------
    fmt : FloatFormat
        :data:`FP32` or :data:`BF16`.
    stages : int
        Pipeline stages, 1 to 6 (see :func:`float_add`); a new operand pair every cycle.

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
