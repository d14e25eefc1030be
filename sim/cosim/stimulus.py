"""What the co-simulation puts on the switch's ports, written once: the payload generators,
the hash helpers, the flit's ``tdata`` packing and the ``tuser`` codecs.

Payload generators, one per kind of payload (all return 32-bit lane words):

* :func:`memory_words` — memory packet ``pid``'s payload, distinct per packet, flit and lane
  (the per-cycle driver, the soak, and the Verilog packet player, which computes the same
  formula in hardware and checks every delivered flit against it);
* :func:`random_contribution_words` — a member's contribution to a chunk as numpy normal
  random gradients (the per-cycle driver and the soak);
* :func:`hashed_contribution_words` — a member's contribution as a murmur3-finaliser hash of
  (seed, chunk, member, flit, lane) (the packet player, whose Verilog reproduces it:
  :mod:`sim.cosim.player_verilog` formats the constants below into its functions);
* the hash helpers :func:`fmix32`, :func:`fp_pattern` and :func:`digest` (FNV-1a over a
  packet, what the player's egress monitor folds each packet into).

``tuser`` codecs, from :data:`hw.packet.USER_LAYOUT` (the one definition of the header):

* a memory packet's id travels in the header's ``slot`` (high half) and ``seq`` (low half)
  fields (:data:`PID_FIELDS`): :func:`memory_user` packs it, :func:`user_pid` unpacks it;
* a contribution's header carries its chunk number modulo the ``seq`` field
  (:func:`wrap_seq`): :func:`contribution_user`.
"""

import numpy as np

from hw.packet import LANE_BITS, USER_LAYOUT, DType, Kind, encode

__all__ = [
    "memory_words", "random_contribution_words", "hashed_contribution_words",
    "fmix32", "fp_pattern", "digest", "tdata",
    "PID_FIELDS", "PID_BITS", "memory_user", "user_pid", "wrap_seq", "contribution_user",
    "MEMORY_HASH", "CONTRIBUTION_HASH", "BF16_HASH_XOR", "FMIX32_MULTIPLIERS",
    "FP_EXPONENT_BASE", "FP_EXPONENT_SPAN_BITS", "INT_SPAN_BITS", "FNV_INIT", "FNV_PRIME",
]


_MASK = (1 << LANE_BITS) - 1
_M64 = (1 << 64) - 1

#: Multipliers of :func:`memory_words`: ``(pid, flit, lane)``.
MEMORY_HASH = (0x9E3779B1, 0x85EBCA6B, 0x27D4EB2F)
#: Multipliers of :func:`hashed_contribution_words` before :func:`fmix32`:
#: ``(seed, seq, port, flit, lane)``.
CONTRIBUTION_HASH = (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F, 0x165667B1)
#: bf16: the upper element of a lane is :func:`fmix32` of the lower one's hash XOR this.
BF16_HASH_XOR = 0x5BD1E995
#: murmur3's 32-bit finaliser multipliers (:func:`fmix32`).
FMIX32_MULTIPLIERS = (0x85EBCA6B, 0xC2B2AE35)
#: :func:`fp_pattern`'s biased exponent: ``FP_EXPONENT_BASE`` plus ``FP_EXPONENT_SPAN_BITS``
#: hash bits, a magnitude in [2^-6, 2^2).
FP_EXPONENT_BASE = 121
FP_EXPONENT_SPAN_BITS = 3
#: int32 contributions are uniform over ``INT_SPAN_BITS`` bits, centred on zero:
#: [-2^20, 2^20).
INT_SPAN_BITS = 21
#: FNV-1a (64-bit) of :func:`digest`.
FNV_INIT = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


# -- payload generators ------------------------------------------------------------------------

def memory_words(pid, flit, lanes):
    """The payload of memory packet ``pid``'s flit ``flit``: ``lanes`` ints, distinct per
    packet, flit and lane."""
    p, f, ln = MEMORY_HASH
    base = (pid * p + flit * f) & _MASK
    return [(base + lane * ln) & _MASK for lane in range(lanes)]


def random_contribution_words(seed, seq, port, flits, lanes, dtype):
    """Member ``port``'s contribution to chunk ``seq`` as numpy random gradients:
    ``(flits, lanes)`` uint32. int32: uniform in [-2^20, 2^20); fp32: standard normal; bf16:
    two standard normal values per lane, truncated to bf16."""
    rng = np.random.default_rng([seed, seq, port])
    if dtype == DType.INT32:
        return rng.integers(-(1 << 20), 1 << 20, size=(flits, lanes)).astype(np.uint32)
    values = rng.standard_normal((flits, lanes)).astype(np.float32)
    if dtype == DType.FP32:
        return values.view(np.uint32)
    halves = rng.standard_normal((flits, lanes, 2)).astype(np.float32).view(np.uint32) >> 16
    return (halves[..., 0] | (halves[..., 1] << 16)).astype(np.uint32)


def fmix32(x):
    """murmur3's 32-bit finaliser on a uint64 array (or int) holding 32-bit values."""
    m1, m2 = FMIX32_MULTIPLIERS
    x = x ^ (x >> 16)
    x = (x * m1) & _MASK
    x = x ^ (x >> 13)
    x = (x * m2) & _MASK
    return x ^ (x >> 16)


def fp_pattern(h):
    """An fp32 bit pattern from hash ``h``: its sign and mantissa, a biased exponent of
    :data:`FP_EXPONENT_BASE` plus :data:`FP_EXPONENT_SPAN_BITS` of its bits."""
    span = (1 << FP_EXPONENT_SPAN_BITS) - 1
    return ((h >> 31) << 31) | ((FP_EXPONENT_BASE + ((h >> 23) & span)) << 23) | (h & 0x7FFFFF)


def hashed_contribution_words(seed, seq, port, flits, lanes, dtype):
    """Member ``port``'s contribution to chunk ``seq`` as the Verilog packet player generates
    it: ``(flits, lanes)`` uint32. int32: uniform in [-2^20, 2^20); fp32: random sign and
    mantissa, magnitude in [2^-6, 2^2) (sums round); bf16: two such values per lane.

    ``seq`` may be an array of chunks: the result is then ``seq.shape + (flits, lanes)``, the
    chunks' words in one numpy pass (the scoreboard's goldens)."""
    s, q, p, f_mul, l_mul = CONTRIBUTION_HASH
    seq = np.asarray(seq, dtype=np.uint64)[..., None, None]
    base = (((seed * s + port * p) & _MASK) + seq * q) & _MASK   # uint64 wraps: mod 2^32 holds
    f = np.arange(flits, dtype=np.uint64)[:, None]
    lane = np.arange(lanes, dtype=np.uint64)[None, :]
    h = fmix32((base + f * f_mul + lane * l_mul) & _MASK)
    if dtype == DType.INT32:
        half = 1 << (INT_SPAN_BITS - 1)
        out = ((h & ((1 << INT_SPAN_BITS) - 1)) - half) & _MASK
    elif dtype == DType.FP32:
        out = fp_pattern(h)
    else:
        hi = fp_pattern(fmix32(h ^ BF16_HASH_XOR))
        out = (hi & 0xFFFF0000) | (fp_pattern(h) >> 16)
    return out.astype(np.uint32)


def digest(rows):
    """FNV-1a (64-bit) over a packet's 32-bit lane words, flit by flit, lane 0 first — what
    the player's egress monitor folds each packet into."""
    h = FNV_INIT
    for word in np.asarray(rows, dtype=np.uint32).ravel().tolist():
        h = ((h ^ word) * FNV_PRIME) & _M64
    return h


def tdata(words):
    """AXI4-Stream ``tdata`` of one flit: lane k in bits 32k..32k+31."""
    value = 0
    for lane, word in enumerate(words):
        value |= (int(word) & _MASK) << (lane * LANE_BITS)
    return value


# -- tuser codecs ------------------------------------------------------------------------------

def _user_field(name):
    field = USER_LAYOUT[name]
    return name, field.offset, field.width


#: The ``tuser`` fields that carry a memory packet's id, most significant first:
#: ``(name, offset in tuser, width in bits)``.
PID_FIELDS = (_user_field("slot"), _user_field("seq"))
#: Bits of a memory packet's id.
PID_BITS = sum(width for _, _, width in PID_FIELDS)
_PID_SPLIT = []        # (name, shift in the pid, mask, offset in tuser)
_shift = PID_BITS
for _name, _offset, _width in PID_FIELDS:
    _shift -= _width
    _PID_SPLIT.append((_name, _shift, (1 << _width) - 1, _offset))
_PID_SPLIT = tuple(_PID_SPLIT)
_SEQ_MASK = (1 << USER_LAYOUT["seq"].width) - 1


def memory_user(pid, kind=Kind.MEM_WRITE):
    """``tuser`` of memory packet ``pid`` of ``kind`` (int32, job 0, the id in
    :data:`PID_FIELDS`).

    Raises
    ------
    ValueError
        If ``pid`` does not fit in :data:`PID_BITS` bits.
    """
    if not 0 <= pid < (1 << PID_BITS):
        raise ValueError(f"Packet id {pid} does not fit in {PID_BITS} bits")
    # The fields other than the id's are the same for every packet of a kind: encoded once
    # (a replay asks for one per packet), the id's pieces shifted in as user_pid takes them out.
    user = _MEMORY_BASE.get(kind)
    if user is None:
        user = _MEMORY_BASE[kind] = encode(USER_LAYOUT,
                                           {"kind": kind, "dtype": DType.INT32, "job": 0})
    for _, shift, mask, offset in _PID_SPLIT:
        user |= (pid >> shift & mask) << offset
    return user


_MEMORY_BASE = {}     # kind -> tuser of its packets with id 0


def user_pid(user):
    """The memory packet id that ``tuser`` value ``user`` carries (inverse of
    :func:`memory_user`)."""
    pid = 0
    for _, shift, mask, offset in _PID_SPLIT:
        pid |= (user >> offset & mask) << shift
    return pid


def wrap_seq(seq):
    """Chunk ``seq`` as its header's ``seq`` field carries it (modulo the field's width)."""
    return seq & _SEQ_MASK


def contribution_user(*, job, dtype, slot, seq, kind=Kind.REDUCE_CONTRIB):
    """``tuser`` of a contribution (or, with ``kind``, any reduction packet) to chunk ``seq``
    of job ``job`` in slot ``slot`` (``seq`` wrapped by :func:`wrap_seq`)."""
    return encode(USER_LAYOUT, {"kind": kind, "dtype": dtype, "job": job, "slot": slot,
                                "seq": seq & _SEQ_MASK})
