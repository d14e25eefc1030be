"""Collectives: what each algorithm moves (link bytes, HBM bytes, SMs, steps), how long it takes
alone, the bus-bandwidth-vs-size curve, and its expansion into messages with dependencies for
traces.

Units: bytes, seconds, GB/s (10^9 bytes/s). ``n`` is the number of GPUs.

Cost model (per GPU, per direction), with ``S`` the buffer size:

=============  ===========================  ==============  ==========================
algorithm      link bytes sent              steps           HBM bytes
=============  ===========================  ==============  ==========================
ring           2(n−1)/n · S                 2(n−1)          5(n−1)/n · S  (2.5 per link byte)
tree           busiest GPU of the double    2(n−1) (NCCL)   2.5 per link byte
               binary tree (≈ 1.5–2 · S)
direct         2(n−1)/n · S                 2               5(n−1)/n · S
nvls           (n+1)/n · S, both ways       1               2 · S  (the switch reads, multicasts)
inswitch       S (and S received)           1               2 · S  (read once, write once)
=============  ===========================  ==============  ==========================

Ring HBM traffic, step by step: in reduce-scatter a GPU reads its chunk and the chunk a peer
wrote into its memory, and the peer's write lands in HBM too (3 HBM bytes per link byte); in
all-gather the received chunk is written and read again to forward it (2). NCCL's maintainer
puts the figure at 2–3 (NVIDIA/nccl #1428).

Time alone, ring/tree/direct: NCCL's own model (:mod:`sim.gpu.nccl_tuning`): for LL, LL128 and
Simple, ``latency (baseLat + steps × hwLat) + link bytes / rate`` with the channels NCCL
launches for that size, keeping the fastest. nvls and inswitch: :mod:`sim.gpu.in_switch`.
"""

import math
import numbers
from dataclasses import dataclass

from sim.gpu.in_switch import (
    KERNEL_LATENCY_S,
    NVLS_LATENCY_S,
    check_nvls,
    default_switch,
    inswitch_traffic,
    nvls_rate_gbps,
    nvls_traffic,
    switch_timing,
)
from sim.gpu.nccl_tuning import (
    BASE_LATENCY_US,
    NVLINK_LATENCY_US,
    PROTOCOL_EFFICIENCY,
    SIMPLE_EFFICIENCY,
    protocol_options,
)
from sim.gpu.nccl_pipeline import chain_time, ring_time
from sim.gpu.presets import ModelInputError, check_count, check_real

__all__ = ["ALGORITHMS", "OPS", "PROTOCOLS", "CollectiveCost", "allreduce_cost",
           "collective_cost", "collective_curve", "curve_sizes", "expand_collective", "Message",
           "piece_dependencies",
           "SIMPLE_EFFICIENCY", "NVLS_LATENCY", "bus_factor"]

ALGORITHMS = ("ring", "tree", "direct", "nvls", "inswitch")
#: the collective operations :func:`collective_cost` knows
OPS = ("allreduce", "reducescatter", "allgather", "reduce", "broadcast", "p2p")

#: protocol → (ring all-reduce latency on 8 GPUs in seconds, bandwidth efficiency): NCCL's
#: ``baseLat + 14 × hwLat`` (tuning.cc), for reference; the model computes it for any n.
PROTOCOLS = {p: ((BASE_LATENCY_US["ring"][p] + 14 * NVLINK_LATENCY_US["ring"][p]) * 1e-6,
                 PROTOCOL_EFFICIENCY[p]) for p in ("LL", "LL128", "Simple")}
#: NVLS (NVLink SHARP) latency, NCCL ``tuning.cc``.
NVLS_LATENCY = NVLS_LATENCY_S


@dataclass(frozen=True)
class CollectiveCost:
    """What one GPU spends on one collective, alone (no contention).

    Attributes
    ----------
    time_s : float
    link_bytes : float
        Bytes on the busier direction of this GPU's links, the ones that set the time (ring,
        tree, direct: sent, and as many received; nvls and inswitch: the larger of
        ``sent_bytes`` and ``received_bytes``, inswitch's padded to whole chunks).
    hbm_bytes : float
        HBM bytes this GPU's collective kernel reads and writes (including peers' writes).
    sms : int
        SMs the collective kernel occupies (one CTA per channel; fewer for small messages, as
        NCCL launches fewer channels).
    protocol : str
        NCCL's protocol (LL, LL128, Simple); ``innet`` for innet's switch.
    algbw_gbps, busbw_gbps : float
        nccl-tests definitions: algbw = S / time, busbw = algbw · 2(n−1)/n (all-reduce),
        (n−1)/n (reduce-scatter, all-gather), 1 (reduce, broadcast, p2p).
    latency_s : float
    link_rate_gbps : float
        Link bandwidth the collective streams at once started (ring and tree: its link bytes
        over the time after the first-byte latency, the per-slice waits included).
    sent_bytes, received_bytes : float
        Bytes this GPU sends and receives.
    switch : dict or None
        innet's switch (inswitch only): ports, lanes, slots, chunk, cycle, pipeline, round
        trip, window, bandwidth-delay product, line and slot-limited rates.
    """

    op: str
    algo: str
    n: int
    size_bytes: float
    time_s: float
    link_bytes: float
    hbm_bytes: float
    sms: int
    protocol: str
    algbw_gbps: float
    busbw_gbps: float
    latency_s: float
    link_rate_gbps: float
    sent_bytes: float = 0.0
    received_bytes: float = 0.0
    switch: dict = None


def bus_factor(op, n):
    """nccl-tests' busbw / algbw for ``op`` on ``n`` ranks (``doc/PERFORMANCE.md``)."""
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("reducescatter", "allgather"):
        return (n - 1) / n
    return 1.0


def _max_sent(msgs):
    sent = {}
    for m in msgs:
        if m.src != SWITCH:
            sent[m.src] = sent.get(m.src, 0) + m.nbytes
    return float(max(sent.values(), default=0))


def _traffic(op, algo, n, size):
    """(link bytes sent per GPU, HBM bytes per GPU, steps) for one collective."""
    if algo == "nvls":
        sent, _, hbm, _ = nvls_traffic(op, n, size)
        return sent, hbm, 1
    if algo == "inswitch":
        sent, _, hbm = inswitch_traffic(op, n, size)
        return sent, hbm, 1
    frac = (n - 1) / n
    if op == "allreduce":
        if algo == "ring":
            return 2 * frac * size, 5 * frac * size, 2 * (n - 1)
        if algo == "tree":
            # the busiest GPU of the double binary tree (counted from the expansion); NCCL's
            # latency for a one-node tree counts 2(n−1) steps (a chain inside the node)
            sent = _max_sent(expand_collective("tree", n, size))
            return sent, 2.5 * sent, 2 * (n - 1)
        if algo == "direct":
            return 2 * frac * size, 5 * frac * size, 2
    if op in ("reducescatter", "allgather"):
        hbm = (3 if op == "reducescatter" else 2) * frac * size
        steps = (n - 1) if algo == "ring" else 1
        return frac * size, hbm, steps
    if op in ("reduce", "broadcast"):
        # a pipelined chain/tree: every GPU sends (and receives) the whole buffer once
        steps = max(1, math.ceil(math.log2(n))) if algo != "ring" else n - 1
        return float(size), (3.0 if op == "reduce" else 2.0) * size, steps
    if op == "p2p":
        return float(size), 2.0 * size, 1
    raise ValueError(f"unknown collective {op!r} / algorithm {algo!r}")


def _check(gpu, n, size_bytes, op, algo, channels):
    if algo not in ALGORITHMS:
        raise ModelInputError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGORITHMS)}")
    if op not in OPS:
        raise ModelInputError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
    if isinstance(n, numbers.Real) and n < 2:
        raise ModelInputError(f"a collective needs at least 2 GPUs, not {n!r}")
    check_count("the GPU count", n, 2)
    if isinstance(size_bytes, numbers.Real) and size_bytes < 0:
        raise ModelInputError(f"size must be non-negative, not {size_bytes}")
    check_real("size_bytes", size_bytes, 0, gpu.hbm_bytes,
               f"the buffer lives in the HBM of one {gpu.name}")
    if channels is not None:
        check_count("channels", channels, 1, gpu.sms,
                    f"a channel is one CTA on an SM of its own; {gpu.name} has {gpu.sms} SMs")
    if algo == "nvls":
        check_nvls(gpu, op)


def _nccl_time(gpu, algo, op, n, size_bytes, steps, link_bytes, channels):
    """(protocol, time, latency, rate, channels) of a ring-family or tree collective: NCCL's
    tuner (:mod:`sim.gpu.nccl_tuning`) chooses the protocol and the channels, as NCCL does;
    the time is its device pipeline's (:mod:`sim.gpu.nccl_pipeline`). ``latency`` is the
    first byte's (``baseLat + steps × hwLat``), ``rate`` the link bytes over the rest."""
    family = "tree" if algo == "tree" else "ring"
    best = None
    for proto, lat, rate, nc, corr in protocol_options(gpu, algo, op, n, size_bytes, steps,
                                                       channels):
        estimate = lat + link_bytes / rate
        if best is None or estimate < best[0]:
            best = (estimate, proto, rate / corr, nc)
    _, proto, rate, nc = best
    step_latency = NVLINK_LATENCY_US[family][proto] * 1e-6
    base = BASE_LATENCY_US[family][proto] * 1e-6
    if family == "ring" and op in ("allreduce", "reducescatter", "allgather"):
        run = ring_time(proto, n, size_bytes, steps, nc, link_bytes, rate, step_latency)
    else:
        # tree all-reduce, reduce, broadcast, p2p: a chain of ``steps`` hops
        run = chain_time(proto, family, n, size_bytes, steps, nc, link_bytes, rate,
                         step_latency)
    latency = base + steps * step_latency
    # the rate it streams at, all waits included: latency + link bytes / rate is the time, the
    # contract sim.gpu.contention and the iteration engine read
    stream = base + run - latency
    if link_bytes > 0 and stream > 0:
        rate = link_bytes / stream
    return proto, base + run, latency, rate, nc


def collective_cost(gpu, n, size_bytes, op="allreduce", algo="ring", channels=None, *,
                    switch=None):
    """Cost of a collective on ``n`` GPUs of type ``gpu`` (a :class:`sim.gpu.GPU`).

    ``size_bytes`` is at most the GPU's HBM (the buffer lives in it), ``channels`` (one CTA on
    an SM of its own each) at most the GPU's SMs. ``n`` is any integer from 2: the engine's
    scaling benchmarks (``innet bench model``) take it to 1,024; what a user asks for is held to
    :data:`sim.gpu.presets.MAX_GPUS` by :class:`sim.gpu.iteration.IterationConfig` and by the
    command line. ``switch`` (inswitch only): innet's switch, a :class:`hw.spec.SwitchSpec`
    with at least ``n`` ports; default :func:`sim.gpu.in_switch.default_switch`.

    Raises
    ------
    ModelInputError
        (a ValueError) For an unknown algorithm or operation, n not an integer of at least 2,
        a size that is negative, not finite or larger than the GPU's HBM, a channel count
        outside [1, the GPU's SMs], ``nvls`` on a GPU without NVLink SHARP or for an operation
        NCCL does not run with it, or a switch with fewer ports than GPUs.
    """
    _check(gpu, n, size_bytes, op, algo, channels)
    link_bytes, hbm_bytes, steps = _traffic(op, algo, n, size_bytes)
    sent = received = link_bytes
    timing = None
    if algo == "nvls":
        _, received, _, link_bytes = nvls_traffic(op, n, size_bytes)
        rate = nvls_rate_gbps(gpu) * 1e9
        latency = NVLS_LATENCY_S
        time = latency + link_bytes / rate
        name, sms = "Simple", gpu.nvls_channels if channels is None else channels
    elif algo == "inswitch":
        if switch is None:
            switch = default_switch(gpu, n)
        if switch.ports < n:
            raise ModelInputError(f"switch ports must be at least the GPU count {n} (one port "
                                  f"per GPU), not {switch.ports}")
        timing = switch_timing(gpu, switch)
        _, received, _ = inswitch_traffic(op, n, size_bytes)
        # the switch reduces whole chunks: the last one is padded
        link_bytes = math.ceil(max(sent, received) / timing.chunk_bytes) * timing.chunk_bytes
        rate = timing.rate_gbps * 1e9
        latency = KERNEL_LATENCY_S + timing.round_trip_s
        time = latency + link_bytes / rate
        name, sms = "innet", gpu.nvls_channels if channels is None else channels
    else:
        name, time, latency, rate, sms = _nccl_time(gpu, algo, op, n, size_bytes, steps,
                                                    link_bytes, channels)
    algbw = size_bytes / time / 1e9 if time else 0.0
    return CollectiveCost(op, algo, n, size_bytes, time, link_bytes, hbm_bytes, sms, name,
                          algbw, algbw * bus_factor(op, n), latency, rate / 1e9, sent,
                          received, timing.as_dict() if timing else None)


def allreduce_cost(gpu, n, size_bytes, algo="ring", channels=None, *, switch=None):
    return collective_cost(gpu, n, size_bytes, "allreduce", algo, channels, switch=switch)


def curve_sizes(low=1 << 10, high=4 << 30):
    """Powers of two from ``low`` to ``high`` bytes, as nccl-tests ``-b low -e high -f 2``."""
    sizes, s = [], low
    while s <= high:
        sizes.append(s)
        s *= 2
    return sizes


def collective_curve(gpu, n, algo="ring", op="allreduce", sizes=None, *, switch=None,
                     channels=None):
    """The costs of one collective over message sizes (default :func:`curve_sizes`, held to
    the GPU's HBM): the bus-bandwidth-vs-size curve nccl-tests prints."""
    sizes = [s for s in (sizes or curve_sizes()) if s <= gpu.hbm_bytes]
    return [collective_cost(gpu, n, s, op, algo, channels, switch=switch) for s in sizes]


# -- Expansion into messages ------------------------------------------------------------------

SWITCH = -1   # peer id of the switch's reduction unit


@dataclass(frozen=True)
class Message:
    """One message of a collective: ``src`` sends ``nbytes`` to ``dst`` (a GPU, or
    :data:`SWITCH`), tagged with its chunk; it may leave only after every message of ``deps``
    (indices into the same list, each earlier) has been received by ``src``."""

    src: int
    dst: int
    nbytes: int
    chunk: int
    step: int
    deps: tuple = ()


def piece_dependencies(message, k, piece_ids):
    """The record ids piece ``k`` of ``message`` waits for, when a message is cut into pieces
    (``piece_ids[i]``: the record ids of message i's pieces, empty for a message that makes no
    record): piece k of each message it depends on, or that message's last piece when it has
    fewer, so that a replay pipelines the pieces as the hardware does."""
    return tuple(piece_ids[d][min(k, len(piece_ids[d]) - 1)] for d in message.deps
                 if piece_ids[d])


def _ring_steps(n, size, first_step, steps, msgs):
    """Ring steps ``first_step .. first_step+steps-1`` of a ring all-reduce schedule."""
    chunk = -(-size // n)
    last_recv = [-1] * n
    for step in range(first_step, first_step + steps):
        recv = [-1] * n
        for g in range(n):
            c = (g - step) % n
            msgs.append(Message(g, (g + 1) % n, min(chunk, max(0, size - c * chunk)), c,
                                step - first_step, _after(last_recv[g])))
            recv[(g + 1) % n] = len(msgs) - 1
        last_recv = recv
    return msgs


def double_trees(n):
    """NCCL-style double binary tree: two heap-ordered binary trees over the ranks, the second
    the mirror of the first (heap position p holds rank n−1−p), so that the inner nodes of one
    are leaves of the other. Each tree carries half of the buffer. Returns rank mappings."""
    return [list(range(n)), [n - 1 - p for p in range(n)]]


def _after(index):
    """The dependencies of a message that waits for message ``index`` (-1: for nothing)."""
    return () if index < 0 else (index,)


def _tree_messages(n, size, chunk, mapping, msgs, up=True, down=True):
    """Reduce up and/or broadcast down the heap-ordered tree ``mapping`` (position → rank).

    The dependencies are exact: the up-message from position p (its partial sum, to its
    parent) waits for the up-messages of p's children, all of them; the root's down-messages
    wait for the up-messages of both of its children (the root then holds the total); the
    down-message to position c waits for the down-message into c's parent. An up-message is
    therefore never sent before its whole subtree's data arrived, in any delivery order."""
    up_msg = {}
    if up:
        for p in range(n - 1, 0, -1):   # deepest positions first: children before parents
            children = tuple(up_msg[c] for c in (2 * p + 1, 2 * p + 2) if c in up_msg)
            msgs.append(Message(mapping[p], mapping[(p - 1) // 2], size, chunk, 0, children))
            up_msg[p] = len(msgs) - 1
    if down:
        got = {0: tuple(up_msg[c] for c in (1, 2) if c in up_msg)}
        for p in range(n):
            for c in (2 * p + 1, 2 * p + 2):
                if c < n:
                    msgs.append(Message(mapping[p], mapping[c], size, chunk, 1, got[p]))
                    got[c] = (len(msgs) - 1,)
    return msgs


def expand_collective(algo, n, size_bytes, op="allreduce"):
    """The messages of a collective and their dependencies, in a valid issue order.

    All-reduce — ring: the buffer is cut into n chunks; in step k (0 ≤ k < 2(n−1)) GPU g sends
    chunk (g − k) mod n to g+1, depending on what g received in step k−1 (steps < n−1 reduce,
    the rest copy). tree: NCCL's double binary tree, each tree reducing half the buffer up to
    its root and broadcasting it down. direct: reduce-scatter to chunk owners, then all-gather
    from them. inswitch and nvls: every GPU sends its buffer to the switch; the switch multicasts the
    sum (result messages depend on the last contribution).

    reducescatter / allgather: the first / last n−1 ring steps (ring), or one direct exchange
    (direct); after ring reduce-scatter GPU g owns chunk (g+1) mod n. reduce / broadcast: up /
    down a binary tree rooted at GPU 0 (tree), or a chain through the ranks (ring). p2p: GPU 0
    sends the buffer to GPU 1.
    """
    size = int(size_bytes)
    msgs = []
    if op == "p2p":
        return [Message(0, 1, size, 0, 0)]
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGORITHMS)}")
    if algo == "nvls":   # contributions up to the switch, the sum multicast down, as inswitch
        algo = "inswitch"
    if op == "allreduce":
        if algo == "ring":
            return _ring_steps(n, size, 0, 2 * (n - 1), msgs)
        if algo == "inswitch":
            for g in range(n):
                msgs.append(Message(g, SWITCH, size, 0, 0))
            last = (len(msgs) - 1,)
            for g in range(n):
                msgs.append(Message(SWITCH, g, size, 0, 1, last))
            return msgs
        if algo == "direct":
            chunk = -(-size // n)
            received = {}
            for g in range(n):
                for owner in range(n):
                    if owner != g:
                        msgs.append(Message(g, owner, chunk, owner, 0))
                        # the owner sends its chunk on once every contribution arrived
                        received[owner] = received.get(owner, ()) + (len(msgs) - 1,)
            for owner in range(n):
                for g in range(n):
                    if owner != g:
                        msgs.append(Message(owner, g, chunk, owner, 1, received[owner]))
            return msgs
        if algo == "tree":
            half = -(-size // 2)
            for index, mapping in enumerate(double_trees(n)):
                _tree_messages(n, half if index == 0 else size - half, index, mapping, msgs)
            return msgs
    if op == "reducescatter":
        if algo in ("ring", "tree"):
            return _ring_steps(n, size, 0, n - 1, msgs)
        if algo in ("direct", "inswitch"):
            chunk = -(-size // n)
            for g in range(n):
                for owner in range(n):
                    if owner != g:
                        msgs.append(Message(g, owner, chunk, (owner + 1) % n, 0))
            return msgs
    if op == "allgather":
        if algo in ("ring", "tree"):
            return _ring_steps(n, size, n - 1, n - 1, msgs)
        if algo in ("direct", "inswitch"):
            chunk = -(-size // n)
            for owner in range(n):
                for g in range(n):
                    if owner != g:
                        msgs.append(Message(owner, g, chunk, (owner + 1) % n, 0))
            return msgs
    if op in ("reduce", "broadcast"):
        if algo == "ring":   # a chain: n-1 → … → 0 to reduce, 0 → … → n-1 to broadcast
            for k in range(n - 1):
                src, dst = (n - 1 - k, n - 2 - k) if op == "reduce" else (k, k + 1)
                msgs.append(Message(src, dst, size, 0, 0 if op == "reduce" else 1,
                                    _after(len(msgs) - 1)))
            return msgs
        return _tree_messages(n, size, 0, list(range(n)), msgs, up=op == "reduce",
                              down=op == "broadcast")
    raise ValueError(f"unknown collective {op!r}")
