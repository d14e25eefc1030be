"""Contributions that make floating-point reduction order-sensitive, for the permutation
benchmark (``innet bench numerics``): magnitudes spread over the whole exponent range (so
that rounding depends on which values meet first), cancellation between large values of
opposite sign, subnormals, signed zeros, exact rounding ties, and — in a few lanes only, so the
rest stay informative — infinities and NaN."""

import numpy as np

from hw.packet import DType

from sim.model.reduce import bf16_round

__all__ = ["edge_contributions"]


def _f32_values(rng, shape):
    kind = rng.integers(0, 100, size=shape)
    mantissa = rng.uniform(1.0, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    exponent = rng.integers(-6, 7, size=shape)   # close magnitudes: rounding depends on order
    values = (mantissa * np.exp2(exponent)).astype(np.float32)
    values = np.where(kind < 8, np.float32(1.5e-39) * rng.integers(-5, 6, size=shape), values)
    values = np.where((kind >= 8) & (kind < 12), np.float32(-0.0), values)
    values = np.where((kind >= 12) & (kind < 20), np.float32(1.0) + np.float32(2.0 ** -24),
                      values)   # 1 + half an ulp: a tie when added to 1
    values = np.where((kind >= 20) & (kind < 23),
                      np.float32(3.0e38) * rng.choice([-1.0, 1.0], size=shape), values)
    return values.astype(np.float32)


def edge_contributions(dtype, ports, flits, lanes, seed):
    """``{port: uint32 array (flits, lanes)}`` of hard cases for ``dtype``."""
    rng = np.random.default_rng([seed, dtype.value])
    shape = (ports, flits, lanes)
    if dtype == DType.INT32:
        words = rng.integers(-(1 << 31), 1 << 31, size=shape, dtype=np.int64)
        out = (words & 0xFFFFFFFF).astype(np.uint32)
    elif dtype == DType.FP32:
        values = _f32_values(rng, shape)
        values[0, 0, 0], values[1, 0, 0] = np.inf, -np.inf   # Inf + -Inf = NaN
        values[-1, -1, -1] = np.nan                          # NaN from a contribution
        out = values.view(np.uint32)
    elif dtype == DType.BF16:
        halves = [bf16_round(_f32_values(rng, shape).view(np.uint32)) for _ in range(2)]
        out = (halves[0] | (halves[1] << 16)).astype(np.uint32)
    else:
        raise ValueError(f"unknown element type {dtype!r}")
    return {k: out[k] for k in range(ports)}
