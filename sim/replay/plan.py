"""Trace replay through a switch: the packet plan and the closed loop both backends share.

A GPU trace (:mod:`sim.trace`) is turned into a **plan**: per GPU port, messages (a memory
write, a memory read, a gradient message to a peer, or a gradient contribution to the switch)
cut into switch packets, each with the cycle it is issued at and the messages it depends on.
:class:`ClosedLoop` then decides, cycle by cycle, which packet each GPU starts next, exactly as
a GPU would: a message waits for its issue cycle and for every message it depends on to have
been delivered (ring step k+1 waits for step k, a tree's parent for all of its children), a
contribution to slot ``seq mod S`` waits until the result of chunk ``seq - S`` came back (the
result is the credit, SwitchML-style), and a read request's response is sent by the peer
once the request arrived.

The RTL backend (:mod:`sim.cosim`, cocotb) and the fast model (:mod:`sim.model.switch`) drive
the same :class:`ClosedLoop`, so their per-packet delivery cycles are directly comparable.

Time: one switch cycle moves one flit (``4 × lanes`` bytes) per port. The replay maps trace
nanoseconds to cycles so that a port's line rate equals the GPU's link bandwidth, with one
simulated flit standing for ``flit_scale`` real flits (``flit_scale = 1`` is the real switch;
larger values shrink a long iteration into a tractable number of flits, keeping every
bandwidth ratio; see docs/metrics.md)."""

import math
from dataclasses import dataclass

import numpy as np

from hw.packet import Kind
from sim.errors import InputError
from sim.replay.config import ReplayConfig
from sim.replay.pages import paused_gc, small_pages
from sim.trace.format import GRAD, MEM

__all__ = ["Plan", "Message", "build_plan", "PlanError", "MEM_KINDS", "PACKET_DTYPE",
           "SMALL_DTYPE", "scale_for"]


MEM_KINDS = (Kind.MEM_WRITE, Kind.MEM_READ_REQ, Kind.MEM_READ_RESP)
#: The packet arrays' type. Every value fits (ports, kinds, flits up to the MTU, message ids,
#: chunk numbers: :func:`build_plan` checks the last two), and a whole iteration at flit scale 1
#: is tens of millions of packets: at int64 its six arrays were 2 GB of fresh memory, whose
#: first touch cost more than building them.
PACKET_DTYPE = np.int32
#: The type of the packet arrays of ports and kinds, ``src``, ``dst`` and ``kind``: a port
#: (below :data:`hw.packet.MAX_PORTS`, 64; -1 for none) and a kind (3 bits) fit a byte, and at
#: flit scale 1 each array at ``PACKET_DTYPE`` was another 126 MB of fresh memory.
SMALL_DTYPE = np.int8


class PlanError(InputError, ValueError):
    """The trace cannot be replayed on this switch (one line: what and where)."""


@dataclass
class Message:
    """One trace message: the packets a GPU sends for one record."""

    mid: int
    src: int
    kind: Kind
    dst: int                  # egress port; -1 for contributions
    issue: int                # cycle
    deps: tuple               # message ids it waits for (empty: none)
    record: int               # trace record id
    packets: range = range(0)  # packet ids: a message's packets are consecutive
    response_flits: int = 0   # read requests: size of the response
    response_to: int = -1     # read responses: the request's message id


@dataclass
class Plan:
    """Packets and messages of a replay. Packet arrays are indexed by packet id."""

    config: ReplayConfig
    gpus: int
    messages: list
    src: np.ndarray           # the packet arrays: PACKET_DTYPE when build_plan made them,
    dst: np.ndarray           # egress port, -1 for contributions
    kind: np.ndarray          # but src, dst and kind, SMALL_DTYPE
    flits: np.ndarray
    msg: np.ndarray
    seq: np.ndarray           # contributions: chunk sequence number; else -1
    members: int              # in-switch job member bitmap (0 if none)
    chunks: int               # in-switch chunks in the job
    meta: dict

    @property
    def packets(self):
        return len(self.src)

    def copy(self):
        """A copy a replay may extend (read responses are added as they are sent)."""
        messages = [Message(**m.__dict__) for m in self.messages]
        return Plan(self.config, self.gpus, messages, self.src.copy(), self.dst.copy(),
                    self.kind.copy(), self.flits.copy(), self.msg.copy(), self.seq.copy(),
                    self.members, self.chunks, dict(self.meta))

    def packet_key(self, pid):
        """A name for packet ``pid`` that does not depend on timing: (trace record, packet
        kind, index within its message)."""
        m = self.messages[int(self.msg[pid])]
        return (m.record, int(self.kind[pid]), m.packets.index(pid))

    def add_packet(self, src, dst, kind, flits, msg, seq=-1):
        """Append a packet (read responses are created while the replay runs)."""
        def grown(a, value):
            return np.append(a, np.array([value], dtype=a.dtype))   # keeps the array's type

        self.src = grown(self.src, src)
        self.dst = grown(self.dst, dst)
        self.kind = grown(self.kind, Kind(kind).value)
        self.flits = grown(self.flits, flits)
        self.msg = grown(self.msg, msg)
        self.seq = grown(self.seq, seq)
        return len(self.src) - 1


def build_plan(meta, records, config, path="trace"):
    """Cut the trace's ``mem`` and ``grad`` records into switch packets.

    Kernel records are not switch traffic and are skipped. Raises :class:`PlanError` when the
    trace does not fit the switch (more GPUs than ports, in-switch pieces not sent by every
    member).

    Python runs once per record; the packets (tens of millions for a whole iteration at flit
    scale 1) are made with numpy from per-message counts: a message's packets are consecutive
    packet ids (:attr:`Message.packets` is a ``range``), memory messages first in record order,
    then the contributions chunk by chunk.
    """
    with small_pages(), paused_gc():
        return _build_plan(meta, records, config, path)


def _build_plan(meta, records, config, path):
    gpus = int(meta["gpus"])
    if gpus > config.ports:
        raise PlanError(f"{path}: the trace has {gpus} GPUs but the switch has "
                        f"{config.ports} ports")
    cycle_ns = config.cycle_ns
    arrive = config.link_cycles   # a GPU's first flit reaches the switch one hop later
    fb, mtu = config.flit_bytes, config.mtu_flits
    messages, by_record = [], {}
    m_flits = []   # per message: flits of its data (memory writes), else 0
    contrib = []   # in-switch pieces, grouped into chunks after the loop
    for r in records:
        if r.rtype not in (MEM, GRAD):
            continue
        try:
            deps = tuple([by_record[d] for d in r.dependencies])
        except KeyError as missing:
            raise PlanError(f"{path}: record {r.id}: dependency {missing.args[0]} is not a "
                            "message") from None
        if r.peer == r.gpu:
            # The switch drops a packet to its sender's own port (hw/switch.py).
            raise PlanError(f"{path}: record {r.id}: GPU {r.gpu} sends to itself")
        issue = int(r.time_ns / cycle_ns) + arrive
        size = r.bytes
        n_flits = max(1, -(-size // fb))
        mid = len(messages)
        if r.rtype == GRAD and r.to_switch:
            m = Message(mid, r.gpu, Kind.REDUCE_CONTRIB, -1, issue, deps, r.id)
            contrib.append((mid, r.bucket, r.chunk, r.gpu, r.time_ns, size, r.id))
            m_flits.append(0)
        elif r.rtype == MEM and r.mem_op == "read":
            m = Message(mid, r.gpu, Kind.MEM_READ_REQ, r.peer, issue, deps, r.id,
                        response_flits=n_flits)
            m_flits.append(1)
        else:
            m = Message(mid, r.gpu, Kind.MEM_WRITE, r.peer, issue, deps, r.id)
            m_flits.append(n_flits)
        messages.append(m)
        by_record[r.id] = mid

    # In-switch pieces: every member sends the same pieces (bucket, piece) in the same order;
    # chunk c of the job is contribution seq c on every member.
    members, chunks = 0, 0
    c_mids, c_count, c_base = [], [], []   # contribution messages in packet order
    if contrib:
        # each piece's (mid, bucket, chunk, gpu, time_ns, bytes, record id), read once above
        keys = {}
        for piece in contrib:
            keys.setdefault(piece[1:3], []).append(piece)
            members |= 1 << piece[3]
        order = sorted(keys, key=lambda k: (min(p[4] for p in keys[k]), k))
        n_members = bin(members).count("1")
        for key in order:
            group = keys[key]
            senders = sum(1 << p[3] for p in group)
            if senders != members or len(group) != n_members:
                raise PlanError(f"{path}: record {group[0][6]}: in-switch piece "
                                f"bucket={key[0]} chunk={key[1]} is not sent exactly once by "
                                "every member")
            size = max(p[5] for p in group)
            n_chunks = max(1, -(-size // config.chunk_bytes))
            c_mids.extend(p[0] for p in group)
            c_count.extend([n_chunks] * len(group))
            c_base.extend([chunks] * len(group))
            chunks += n_chunks
        if n_members < 2:
            raise PlanError(f"{path}: in-switch reduction needs at least 2 members")

    i64, pk_type = np.int64, PACKET_DTYPE
    n_msg = len(messages)
    if max(n_msg, chunks) > np.iinfo(pk_type).max:
        raise PlanError(f"{path}: {n_msg} messages and {chunks} in-switch chunks: at most "
                        f"{np.iinfo(pk_type).max} of each")
    m_src = np.fromiter((m.src for m in messages), i64, n_msg)
    m_dst = np.fromiter((m.dst for m in messages), i64, n_msg)
    m_kind = np.fromiter((m.kind.value for m in messages), i64, n_msg)
    m_flits = np.asarray(m_flits, dtype=i64)
    c_mids = np.asarray(c_mids, dtype=i64)
    c_count = np.asarray(c_count, dtype=i64)
    # Memory messages (cut at the MTU) take the first packet ids, in message order; then the
    # contributions, chunk by chunk. Every array is written by repeating per-message values
    # (a whole iteration at flit scale 1 is tens of millions of packets).
    mem_mids = np.nonzero(m_flits)[0]
    mem_count = -(-m_flits[mem_mids] // mtu)
    count = np.zeros(n_msg, dtype=i64)
    count[mem_mids] = mem_count
    count[c_mids] = c_count
    first = np.zeros(n_msg, dtype=i64)
    ends = np.cumsum(np.concatenate([mem_count, c_count]))
    first[mem_mids] = ends[:len(mem_mids)] - mem_count
    first[c_mids] = ends[len(mem_mids):] - c_count
    n_mem = int(mem_count.sum())
    n_con = int(c_count.sum())
    # Each array is allocated once and filled in place: at this size first-touching memory
    # costs more than the arithmetic, so no temporaries of a packet array's length.
    n = n_mem + n_con
    mem, con = slice(0, n_mem), slice(n_mem, n)
    src = np.empty(n, dtype=SMALL_DTYPE)
    _repeat_into(src[mem], m_src[mem_mids], mem_count)
    _repeat_into(src[con], m_src[c_mids], c_count)
    dst = np.empty(n, dtype=SMALL_DTYPE)
    _repeat_into(dst[mem], m_dst[mem_mids], mem_count)
    dst[con] = -1
    kind = np.empty(n, dtype=SMALL_DTYPE)
    _repeat_into(kind[mem], m_kind[mem_mids], mem_count)
    kind[con] = Kind.REDUCE_CONTRIB.value
    # memory packets: every one a full MTU but the last of its message
    flits = np.empty(n, dtype=pk_type)
    flits[mem] = mtu
    flits[first[mem_mids] + mem_count - 1] = m_flits[mem_mids] - (mem_count - 1) * mtu
    flits[con] = config.chunk_flits
    # contributions: chunk seq c_base + k is packet k of its message
    seq = np.empty(n, dtype=pk_type)
    seq[mem] = -1
    _ramp_into(seq[con], np.asarray(c_base, dtype=i64), c_count)
    msg = np.empty(n, dtype=pk_type)
    _repeat_into(msg[mem], mem_mids, mem_count)
    _repeat_into(msg[con], c_mids, c_count)
    for m, f, n in zip(messages, first.tolist(), count.tolist()):
        m.packets = range(f, f + n)
    return Plan(config, gpus, messages, src, dst, kind, flits, msg, seq, members, chunks,
                dict(meta))


def _repeat_into(out, values, counts):
    """``out[:] = np.repeat(values, counts)`` without a temporary of ``out``'s length: the
    changes between consecutive values at each run's start, summed in place."""
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    if not len(values):
        return
    out[:] = 0
    out[np.cumsum(counts) - counts] = np.diff(values, prepend=0)
    np.cumsum(out, out=out, dtype=out.dtype)   # each partial sum is a value: no overflow


def _ramp_into(out, firsts, counts):
    """``out[:] = concatenate([arange(f, f + c) for f, c in zip(firsts, counts)])`` in place,
    as :func:`_repeat_into`: every step is +1 but at a run's start, which jumps to its
    first value."""
    keep = counts > 0
    firsts, counts = firsts[keep], counts[keep]
    if not len(firsts):
        return
    out[:] = 1
    jump = firsts.copy()
    jump[1:] -= firsts[:-1] + counts[:-1] - 1
    out[np.cumsum(counts) - counts] = jump
    np.cumsum(out, out=out, dtype=out.dtype)


def scale_for(total_bytes, lanes, target_flits):
    """The smallest flit scale that brings ``total_bytes`` per port under ``target_flits``."""
    return max(1, math.ceil(total_bytes / (lanes * 4 * target_flits)))
