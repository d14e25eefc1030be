"""What the co-simulation puts on the switch's ports: payload generators and the flit's
``tdata`` packing."""

import numpy as np

from hw.packet import LANE_BITS, DType

__all__ = ["memory_words", "contribution_words", "tdata"]


_MASK = (1 << LANE_BITS) - 1


def memory_words(pid, flit, lanes):
    """The payload of memory packet ``pid``: distinct per packet, flit and lane."""
    base = (pid * 0x9E3779B1 + flit * 0x85EBCA6B) & _MASK
    return [(base + lane * 0x27D4EB2F) & _MASK for lane in range(lanes)]


def contribution_words(seed, seq, port, flits, lanes, dtype):
    """Member ``port``'s contribution to chunk ``seq``: random gradients, (flits, lanes) uint32."""
    rng = np.random.default_rng([seed, seq, port])
    if dtype == DType.INT32:
        return rng.integers(-(1 << 20), 1 << 20, size=(flits, lanes)).astype(np.uint32)
    values = rng.standard_normal((flits, lanes)).astype(np.float32)
    if dtype == DType.FP32:
        return values.view(np.uint32)
    halves = rng.standard_normal((flits, lanes, 2)).astype(np.float32).view(np.uint32) >> 16
    return (halves[..., 0] | (halves[..., 1] << 16)).astype(np.uint32)


def tdata(words):
    """AXI4-Stream ``tdata`` of one flit: lane k in bits 32k..32k+31."""
    value = 0
    for lane, word in enumerate(words):
        value |= (int(word) & _MASK) << (lane * LANE_BITS)
    return value
