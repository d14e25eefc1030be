"""Golden model of the reduction unit's arithmetic (numpy; no simulator).

The RTL reduces a chunk through a binary tree over port numbers (leaf k = port k's contribution,
an absent member's leaf the addition's identity: 0, or −0 in fp32 and each bf16 half); this
function computes the same tree with
numpy's IEEE float32 additions, bf16 as float32 addition rounded once to bf16 (exact for
addition), and int32 as an exact sum wrapped or saturated once.
"""

import numpy as np

from hw.packet import DType

__all__ = ["reduce_words", "add_words", "bf16_round", "INT32_MIN", "INT32_MAX"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def bf16_round(f32_bits):
    """float32 bit patterns → bf16 bit patterns, round to nearest even; NaN → 0x7FC0."""
    bits = np.asarray(f32_bits, dtype=np.uint64)
    nan = ((bits >> 23) & 0xFF == 0xFF) & (bits & 0x7FFFFF != 0)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, 0x7FC0, rounded).astype(np.uint32)


def add_words(a, b, dtype):
    """One tree node on uint32 lane words."""
    if dtype == DType.FP32:
        with np.errstate(all="ignore"):
            total = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
        nan = np.isnan(total.view(np.float32))
        return np.where(nan, np.uint32(0x7FC00000), total)
    if dtype == DType.BF16:
        out = np.zeros_like(a)
        for shift in (0, 16):
            x = ((a >> shift) & 0xFFFF).astype(np.uint32) << 16
            y = ((b >> shift) & 0xFFFF).astype(np.uint32) << 16
            with np.errstate(all="ignore"):
                s = (x.view(np.float32) + y.view(np.float32)).view(np.uint32)
            out |= bf16_round(s) << shift
        return out
    raise ValueError(dtype)


def reduce_words(contributions, members, dtype, saturate=False):
    """Reduce one chunk.

    Parameters
    ----------
    contributions : dict port → uint32 array (any shape, the same for all)
    members : iterable of int
        Member ports; the tree's leaves are ports 0 .. highest port, in order.
    dtype : DType
    saturate : bool
        int32 only: clamp instead of wrapping.

    Returns
    -------
    (uint32 array, saturated flag)
    """
    members = sorted(members)
    n_ports = max(contributions) + 1 if contributions else 0
    n_ports = max(n_ports, max(members) + 1)
    if dtype == DType.INT32:
        total = sum(contributions[k].view(np.int32).astype(np.int64) for k in members)
        over = (total > INT32_MAX) | (total < INT32_MIN)
        if saturate:
            out = np.clip(total, INT32_MIN, INT32_MAX)
            return out.astype(np.int64).astype(np.uint32), bool(over.any())
        return (total & 0xFFFFFFFF).astype(np.uint32), False
    # The RTL pairs neighbours level by level; an odd node at the end passes through. An
    # absent member is −0 (each half in bf16): x + (−0) = x for every x but NaN, and every leaf
    # meets an adder on its way to the root (there are at least two ports), so a NaN result is
    # always the canonical NaN, even a single member's.
    shape = np.shape(contributions[members[0]])
    neg_zero = np.full(shape, 0x80000000 if dtype == DType.FP32 else 0x80008000, np.uint32)
    nodes = [contributions[k] if k in members else neg_zero for k in range(max(n_ports, 2))]
    while len(nodes) > 1:
        nodes = [nodes[i] if i + 1 == len(nodes) else add_words(nodes[i], nodes[i + 1], dtype)
                 for i in range(0, len(nodes), 2)]
    return nodes[0], False
