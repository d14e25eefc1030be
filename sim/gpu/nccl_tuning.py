"""NCCL's own cost model for ring and tree on one NVLink domain: per-protocol latencies and
bandwidths, and how many channels it launches for a message of a given size.

Every constant here is NCCL's (``src/graph/tuning.cc``, ``src/enqueue.cc``,
``src/include/comm.h`` and ``device.h``, NCCL 2.2x), read from the source, not fitted. Units: seconds, bytes, GB/s (10^9 bytes/s).

What it gives (:func:`protocol_options`): for each protocol NCCL would consider (LL, LL128,
Simple), the latency (``baseLat + steps × hwLat``, NCCL's formula), the channels it launches and
the link rate they reach. The caller estimates ``latency + link bytes / rate`` for each and
keeps the fastest, as NCCL's tuner does; that chooses the protocol. The time it really takes is
the device pipeline's (:mod:`sim.gpu.nccl_pipeline`). Small messages get fewer channels (NCCL drops channels while
``bytes < channels × threads × threshold``), and fewer channels move fewer bytes per second:
that, with the per-step latencies, gives the bus-bandwidth-vs-size curve its knee.
"""

import math

__all__ = [
    "BASE_LATENCY_US",
    "LL_MAX_GBPS",
    "NVLINK_LATENCY_US",
    "PROTOCOL_NAMES",
    "SIMPLE_EFFICIENCY",
    "channels_for",
    "protocol_options",
]

#: Fraction of the effective link bandwidth the Simple protocol carries as data: all of it.
#: Simple sends no flags in its data; what it loses is a flag wait, fence and post per slice,
#: which the device pipeline (:mod:`sim.gpu.nccl_pipeline`) charges as NCCL's per-step
#: latency. NCCL's tuner has no Simple factor either. (Before the pipeline was modelled this
#: was 0.95, fitted to 8×A100 ring busbw at 1 GiB; that row is now a prediction.)
SIMPLE_EFFICIENCY = 1.0

PROTOCOL_NAMES = ("LL", "LL128", "Simple")

#: ``baseLatencies`` (µs) by algorithm and protocol, NCCL tuning.cc.
BASE_LATENCY_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
}
#: ``hwLatencies[NCCL_HW_NVLINK]`` (µs per step) by algorithm and protocol, NCCL tuning.cc.
NVLINK_LATENCY_US = {
    "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
}
#: ``llMaxBws`` for one node (GB/s of bus bandwidth), by architecture.
LL_MAX_GBPS = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0}
#: ``perChMaxRingLL128Bws`` / ``perChMaxTreeLL128Bws`` / ``perChMaxTreeBws``, one node (GB/s
#: per channel).
RING_LL128_PER_CHANNEL_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7}
TREE_LL128_PER_CHANNEL_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7}
TREE_PER_CHANNEL_GBPS = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7}
#: Fraction of the link each protocol carries as data: LL sends 8-byte lines of 4 data bytes and
#: a flag (NCCL: ``busBw × 0.5``); LL128 120 of every 128 bytes (``× 0.92``); Simple, fitted.
PROTOCOL_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": SIMPLE_EFFICIENCY}
#: NCCL's tree refinements (one node): ``busBw × 0.92`` for every tree all-reduce, then LL
#: ``× 1/3.8`` and LL128 ``× 7/9``.
TREE_FACTOR = {"LL": 0.92 / 3.8, "LL128": 0.92 * 7 / 9, "Simple": 0.92}
#: ``treeCorrectionFactor`` (NCCL tuning.cc): tree all-reduce bandwidth factor by protocol for
#: sizes 64 B × 2^k, k = 0..23 (medium sizes stick less well to the model, NCCL's comment).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9,
              .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8,
               .9, .9, .9),
}
#: Threads per channel (``NCCL_LL_MAX_NTHREADS``, ``NCCL_LL128_MAX_NTHREADS``,
#: ``NCCL_SIMPLE_MAX_NTHREADS``) and bytes per thread before NCCL adds a channel
#: (``NCCL_*_THREAD_THRESHOLD``; ring LL's is multiplied by the rank count).
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}


def channels_for(size_bytes, full_channels, protocol, algo, n):
    """Channels NCCL launches for ``size_bytes`` (``enqueue.cc``, ring/tree channel tuning): one
    fewer while ``size < channels × threads × threshold``, down to one."""
    threshold = THREAD_THRESHOLD[protocol] * (n if algo == "ring" and protocol == "LL" else 1)
    per_channel = MAX_THREADS[protocol] * threshold
    if size_bytes >= full_channels * per_channel:
        return full_channels
    return max(1, min(full_channels, math.floor(size_bytes / per_channel) + 1))


def protocol_options(gpu, algo, op, n, size_bytes, steps, channels=None):
    """``[(protocol, latency_s, rate_Bps, channels, correction)]`` for a ring-family (``ring``,
    ``direct``) or ``tree`` collective of ``size_bytes`` with ``steps`` sequential link steps.

    ``channels`` given: exactly that many (a user's override, as ``NCCL_MIN/MAX_NCHANNELS``);
    else the GPU's ring channels, reduced for small messages as NCCL does. A channel's share of
    the link is ``1 / full channels``, so fewer channels stream proportionally slower.
    ``correction``: the factor of NCCL's ``treeCorrectionFactor`` already in the rate (tree
    all-reduce; 1 otherwise), a tuner-only fix for mid sizes that the real time
    (:mod:`sim.gpu.nccl_pipeline`) divides back out.
    """
    family = "tree" if algo == "tree" else "ring"
    full = channels if channels is not None else gpu.ring_channels
    link = gpu.link_effective_gbps
    options = []
    for proto in PROTOCOL_NAMES:
        nc = full if channels is not None else channels_for(size_bytes, full, proto, family, n)
        share = nc / full
        if family == "ring":
            gbps = link * PROTOCOL_EFFICIENCY[proto] * share
            if proto == "LL":
                gbps = min(gbps, LL_MAX_GBPS[gpu.arch])
            elif proto == "LL128":
                gbps = min(gbps, nc * RING_LL128_PER_CHANNEL_GBPS[gpu.arch])
        else:
            # NCCL scales the tree's graph bandwidth, which is what Simple streams at
            gbps = link * SIMPLE_EFFICIENCY * TREE_FACTOR[proto] * share
            if proto == "Simple":
                gbps = min(gbps, nc * TREE_PER_CHANNEL_GBPS[gpu.arch])
            elif proto == "LL":
                gbps = min(gbps, LL_MAX_GBPS[gpu.arch])
            else:
                gbps = min(gbps, nc * TREE_LL128_PER_CHANNEL_GBPS[gpu.arch])
        correction = 1.0
        if family == "tree" and op == "allreduce" and size_bytes >= 64:
            k = int(math.log2(size_bytes // 64))
            if k < len(TREE_CORRECTION[proto]):
                correction = TREE_CORRECTION[proto][k]
        gbps *= correction
        latency_us = BASE_LATENCY_US[family][proto] + steps * NVLINK_LATENCY_US[family][proto]
        options.append((proto, latency_us * 1e-6, gbps * 1e9, nc, correction))
    return options
