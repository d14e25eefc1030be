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
operands by magnitude; align the smaller one, collecting shifted-out bits into sticky; add or
subtract; normalise (right by one on carry-out, left by the leading-zero count but never below
the minimum exponent, which produces subnormals); round to nearest even; fix the exponent on a
rounding carry; saturate to infinity.

Pipelining: ``float_add(..., stages=3)`` registers the adder after ordering the operands and
after the addition and leading-zero count, so the reduction tree's adders reach the clock
the rest of the switch runs at (one level in one cycle limited an fp32 switch to about
what one adder reaches alone; docs/hw.md, Synthesis). The registers only delay values: the
result is the same bits, ``stages − 1`` cycles later.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatFormat", "FP32", "BF16", "float_add", "FloatAdder"]


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


def _leading_zeros(m, value, name):
    """Leading-zero count of ``value`` (a priority encoder; width+1 when zero)."""
    width = len(value)
    count = Signal(range(width + 1), name=name)
    m.d.comb += count.eq(width)
    for i in range(width):   # later assignments win: the highest set bit decides
        with m.If(value[i]):
            m.d.comb += count.eq(width - 1 - i)
    return count


def float_add(m, a, b, fmt, prefix="fadd", stages=1):
    """``a + b`` in format ``fmt``; returns the result signal, ``stages − 1`` cycles after
    ``a`` and ``b`` (``stages`` 1: combinational).

    ``stages`` 2 or 3 registers the adder's inner values (in the ``sync`` domain) at one or two
    of its cuts: after ordering the operands (cut A, only with 3 stages) and after the
    significand addition and the leading-zero count (cut B). Every value crosses each cut in a
    register, so the result is bit-for-bit the combinational adder's, later; the registers
    hold no reset (the caller tracks which cycles carry a real operand pair).
    """
    if stages not in (1, 2, 3):
        raise ValueError(f"An adder has 1, 2 or 3 stages, not {stages!r}")
    E, F = fmt.exp_bits, fmt.frac_bits
    W = fmt.width
    GRS = 3
    S = F + 1 + GRS          # significand with guard, round, sticky
    name = lambda n: f"{prefix}_{n}"  # noqa: E731

    def cut(value, tag, active):
        """``value`` registered when the cut is ``active``, else ``value`` itself."""
        if not active:
            return value
        reg = Signal(len(value), name=name(f"{tag}_q"), reset_less=True)
        m.d.sync += reg.eq(value)
        return reg

    def unpack(x, tag):
        sign = x[W - 1]
        exp = x[F:F + E]
        frac = x[:F]
        is_nan = (exp == fmt.exp_max) & frac.any()
        is_inf = (exp == fmt.exp_max) & ~frac.any()
        implicit = exp.any()
        eff_exp = Signal(E, name=name(f"{tag}_exp"))
        m.d.comb += eff_exp.eq(Mux(implicit, exp, 1))
        sig = Cat(frac, implicit)            # F+1 bits
        return sign, eff_exp, sig, is_nan, is_inf

    # -- stage 1: unpack, special cases, order by magnitude ---------------------------------
    sa, ea, ma, nan_a, inf_a = unpack(a, "a")
    sb, eb, mb, nan_b, inf_b = unpack(b, "b")

    # Order by magnitude: x is the larger.
    swap = Signal(name=name("swap"))
    m.d.comb += swap.eq(Cat(b[:F], b[F:F + E]) > Cat(a[:F], a[F:F + E]))
    sx, ex, mx = Signal(name=name("sx")), Signal(E, name=name("ex")), Signal(F + 1, name=name("mx"))
    sy, ey, my = Signal(name=name("sy")), Signal(E, name=name("ey")), Signal(F + 1, name=name("my"))
    m.d.comb += [
        sx.eq(Mux(swap, sb, sa)), ex.eq(Mux(swap, eb, ea)), mx.eq(Mux(swap, mb, ma)),
        sy.eq(Mux(swap, sa, sb)), ey.eq(Mux(swap, ea, eb)), my.eq(Mux(swap, ma, mb)),
    ]
    diff = Signal(E, name=name("diff"))
    m.d.comb += diff.eq(ex - ey)
    subtract = Signal(name=name("subtract"))
    m.d.comb += subtract.eq(sx ^ sy)
    # x + (−x) = +0 in round-to-nearest; (−0) + (−0) = −0.
    zero_sign = Signal(name=name("zero_sign"))
    m.d.comb += zero_sign.eq(sa & sb)
    # NaN and infinity results are known from the operands alone.
    special = Signal(name=name("special"))
    special_word = Signal(W, name=name("special_word"))
    inf_sign = Mux(inf_a, sa, sb)
    m.d.comb += special.eq(nan_a | nan_b | inf_a | inf_b)
    with m.If(nan_a | nan_b | (inf_a & inf_b & (sa ^ sb))):
        m.d.comb += special_word.eq(fmt.canonical_nan)
    with m.Else():
        m.d.comb += special_word.eq(Cat(Const(0, F), Const(fmt.exp_max, E), inf_sign))

    on_a = stages == 3
    sx, ex, mx, my, diff, subtract, zero_sign, special, special_word = (
        cut(value, tag, on_a) for value, tag in (
            (sx, "sx"), (ex, "ex"), (mx, "mx"), (my, "my"), (diff, "diff"),
            (subtract, "subtract"), (zero_sign, "zero_sign"), (special, "special"),
            (special_word, "special_word")))

    # -- stage 2: align, add, count leading zeros -------------------------------------------
    # Align y: shift right by the exponent difference, shifted-out bits into sticky.
    y_ext = Signal(S, name=name("y_ext"))
    m.d.comb += y_ext.eq(Cat(Const(0, GRS), my))
    y_aligned = Signal(S, name=name("y_aligned"))
    sticky = Signal(name=name("sticky"))
    limit = S   # any larger shift leaves only sticky
    with m.If(diff >= limit):
        m.d.comb += [y_aligned.eq(0), sticky.eq(my.any())]
    with m.Else():
        shifted = Signal(S, name=name("y_shifted"))
        m.d.comb += shifted.eq(y_ext >> diff[:max(1, (S - 1).bit_length())])
        small = diff[:max(1, (S - 1).bit_length())]   # diff < S here
        lost = Signal(S, name=name("y_lost"))   # bits shifted out
        m.d.comb += lost.eq(y_ext & ((Const(1, S + 1) << small) - 1))
        m.d.comb += [y_aligned.eq(shifted), sticky.eq(lost.any())]
    y_final = Signal(S, name=name("y_final"))
    m.d.comb += y_final.eq(y_aligned | sticky)
    x_ext = Signal(S, name=name("x_ext"))
    m.d.comb += x_ext.eq(Cat(Const(0, GRS), mx))

    raw = Signal(S + 1, name=name("raw"))     # one carry bit
    m.d.comb += raw.eq(Mux(subtract, x_ext - y_final, x_ext + y_final))
    lz = _leading_zeros(m, raw[:S], name("lz"))

    on_b = stages >= 2
    raw, lz, ex, sx, zero_sign, special, special_word = (
        cut(value, tag, on_b) for value, tag in (
            (raw, "raw"), (lz, "lz"), (ex, "ex_b"), (sx, "sx_b"), (zero_sign, "zero_sign_b"),
            (special, "special_b"), (special_word, "special_word_b")))

    # -- stage 3: normalise, round, pack ----------------------------------------------------
    norm = Signal(S, name=name("norm"))
    exp_n = Signal(E + 2, name=name("exp_n"))   # room for overflow; never negative below
    with m.If(raw[S]):   # carry out: shift right by one, keep sticky
        m.d.comb += [norm.eq(Cat(raw[1] | raw[0], raw[2:S + 1])), exp_n.eq(ex + 1)]
    with m.Else():
        # never shift the exponent below 1: what remains is a subnormal
        room = Signal(E + 1, name=name("room"))
        m.d.comb += room.eq(ex - 1)
        shift = Signal(E + 1, name=name("shift"))
        m.d.comb += shift.eq(Mux(lz > room, room, lz))
        m.d.comb += [norm.eq(raw[:S] << shift), exp_n.eq(ex - shift)]

    # Round to nearest, ties to even.
    lsb, guard, rnd, stk = norm[GRS], norm[GRS - 1], norm[GRS - 2], norm[:GRS - 2].any()
    round_up = Signal(name=name("round_up"))
    m.d.comb += round_up.eq(guard & (rnd | stk | lsb))
    rounded = Signal(F + 2, name=name("rounded"))
    m.d.comb += rounded.eq(norm[GRS:] + round_up)
    mant = Signal(F + 1, name=name("mant"))
    exp_r = Signal(E + 2, name=name("exp_r"))
    with m.If(rounded[F + 1]):   # rounding carried into a new bit
        m.d.comb += [mant.eq(rounded[1:]), exp_r.eq(exp_n + 1)]
    with m.Else():
        m.d.comb += [mant.eq(rounded[:F + 1]), exp_r.eq(exp_n)]

    result = Signal(W, name=name("result"))
    is_zero = ~mant.any()
    # Exponent field: 0 for subnormals and zero (implicit bit clear), else the exponent.
    exp_field = Signal(E, name=name("exp_field"))
    m.d.comb += exp_field.eq(Mux(mant[F], exp_r[:E], 0))
    overflow = exp_r >= fmt.exp_max
    with m.If(special):
        m.d.comb += result.eq(special_word)
    with m.Elif(is_zero):
        m.d.comb += result.eq(Cat(Const(0, W - 1), zero_sign))
    with m.Elif(overflow & mant[F]):
        m.d.comb += result.eq(Cat(Const(0, F), Const(fmt.exp_max, E), sx))
    with m.Else():
        m.d.comb += result.eq(Cat(mant[:F], exp_field, sx))
    return result


class FloatAdder(wiring.Component):
    """A registered adder: ``result`` is ``a + b`` from ``stages`` cycles before.

    Parameters
    ----------
    fmt : FloatFormat
        :data:`FP32` or :data:`BF16`.
    stages : int
        Pipeline stages, 1 to 3 (see :func:`float_add`); a new operand pair every cycle.

    Members
    -------
    a, b : In(fmt.width)
    result : Out(fmt.width)
    """

    def __init__(self, fmt, stages=1):
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"Format must be a FloatFormat, not {fmt!r}")
        if stages not in (1, 2, 3):
            raise ValueError(f"An adder has 1, 2 or 3 stages, not {stages!r}")
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
