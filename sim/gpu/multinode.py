"""Collectives across nodes: NCCL's hierarchical ring and tree over NVLink and InfiniBand, and
in-network reduction in the InfiniBand switches (SHARP, NCCL's CollNet).

``K`` nodes of ``G`` GPUs each (``N = K·G`` ranks), ``S`` the buffer, ``f`` = 2 for all-reduce
and 1 for reduce-scatter / all-gather. Per GPU and direction, each algorithm moves:

=========  ==============================  ==================================  ===============
algorithm  NVLink (inside the node)        NIC (one per GPU; ``nics`` per node)  who reduces
=========  ==============================  ==================================  ===============
ring       (G−1)/G · f(N−1)/N · S          f(N−1)/N · S / nics                 GPUs
tree       2(G−1)/G · S  (chain up, down)  busiest node of the double binary   GPUs
                                           tree over K nodes / nics (S at K=2)
sharp      2(G−1)/G · S  (CollNet chain)   S / nics (the node's partial sum    IB switches
           or (1 + 1/G) · S with NVLS      out, the total back)
=========  ==============================  ==================================  ===============

Ring: every channel's ring visits the G GPUs of a node over NVLink and crosses the network
once per node, so of the ``f(N−1)/N · S`` bytes a rank sends, a fraction 1/G leaves the node;
with one NIC per GPU the bus bandwidth is bounded by ``nics ×`` the NIC's bandwidth. The
slowest of NVLink, the PCIe path (GPU → PCIe switch → NIC, GPUDirect RDMA) and the NIC sets
the time; they stream at once (pipelined chunks). Latencies are NCCL's (``src/graph/tuning.cc``
``baseLat`` / ``hwLat`` for NVLINK and NET, and its per-step formulas).
"""

import math

from sim.gpu.collectives import ALGORITHMS as NODE_ALGORITHMS
from sim.gpu.collectives import CollectiveCost, collective_cost, expand_collective
from sim.gpu.nodes import message_path, node_preset
from sim.gpu.presets import ModelInputError, check_count, check_real

__all__ = ["MULTINODE_ALGORITHMS", "MULTINODE_OPS", "NET_EFFICIENCY", "multinode_cost",
           "multinode_links", "node_preset", "ring_messages"]

MULTINODE_ALGORITHMS = ("ring", "tree", "sharp")
MULTINODE_OPS = ("allreduce", "reducescatter", "allgather")

#: Fraction of a NIC's payload bandwidth NCCL's network transport sustains with the Simple
#: protocol (proxy thread, chunk hand-offs, GPUDirect flushes). Fitted on ONE figure: two DGX
#: A100, 8 × HDR 200 Gb/s, ring all-reduce bus bandwidth 192 GB/s (NVIDIA/nccl#812,
#: AddyLaddy), read at nccl-tests' 8 GiB: the NIC must stream at 192.3 GB/s / 8 = 24.04 GB/s
#: of its 24.84 GB/s payload rate (the 132 µs ring latency takes the rest). Everything else
#: multi-node is predicted from it (sim/gpu/multinode_figures.py).
NET_EFFICIENCY = 0.9676

# NCCL src/graph/tuning.cc (v2.2x, NVIDIA/nccl master): microseconds, (LL, LL128, Simple).
_BASE_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4), "collnet_chain": (0, 0, 0),
            "nvls": (0, 0, 0)}
_HW_US = {
    "nvlink": {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0),
               "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 25.0)},
    "net": {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0),
            "collnet_chain": (0, 0, 30.0), "nvls": (0, 0, 18.0)},
}
_PROTO = {"LL": 0, "Simple": 2}
#: NCCL's per-step network post overhead on x86 Intel hosts (``getNetOverhead``), µs; three
#: times that for Simple. It floors the intra-node step latency of a multi-node ring.
_NET_OVERHEAD_US = 1.0
#: NCCL ``llMaxBws`` for multi-node runs on Intel hosts: 2 nodes 39.0, more 20.4 GB/s; LL moves
#: half its bytes as flags (busBw × 0.5).
_LL_MAX_GBPS = {2: 39.0, 3: 20.4}
_LL_EFFICIENCY = 0.5


def _log2i(k):
    return k.bit_length() - 1


def _nvlink_gbps(gpu, g, algo="ring"):
    """Streaming NVLink rate of one GPU inside its node (GB/s), as the single-node model
    (:func:`sim.gpu.collectives.collective_cost`) has it for a large message."""
    if g < 2:
        return math.inf
    size = min(gpu.hbm_bytes, 1 << 30)
    return collective_cost(gpu, g, size, "allreduce", algo).link_rate_gbps


def _nvls_algo(gpu):
    """The single-node in-switch algorithm of this GPU, or None where NVSwitch has no
    reduction (NVLink SHARP is NVSwitch gen3: Hopper)."""
    if gpu.arch != "hopper":
        return None
    return "nvls" if "nvls" in NODE_ALGORITHMS else "inswitch"


def _tree_node_bytes(k, size):
    """Bytes the busiest node sends in NCCL's double binary tree over ``k`` nodes."""
    sent = {}
    for m in expand_collective("tree", k, size):
        sent[m.src] = sent.get(m.src, 0) + m.nbytes
    return float(max(sent.values()))


def _check(node, nodes, gpus_per_node, size_bytes, op, algo):
    if algo not in MULTINODE_ALGORITHMS:
        raise ModelInputError(f"unknown multi-node algorithm {algo!r}; choose from "
                              f"{', '.join(MULTINODE_ALGORITHMS)}")
    if op not in MULTINODE_OPS:
        raise ModelInputError(f"multi-node collectives are {', '.join(MULTINODE_OPS)}, "
                              f"not {op!r}")
    if algo != "ring" and op != "allreduce":
        raise ModelInputError(f"{algo} across nodes is an all-reduce algorithm (NCCL runs "
                              f"{op} on rings), not {op}")
    check_count("nodes", nodes, 2, node.max_nodes,
                f"a two-level fabric of {node.fabric.radix}-port switches holds "
                f"{node.fabric.end_ports} NIC ports, {node.nics} per {node.name}")
    check_count("GPUs per node", gpus_per_node, 1, node.gpus, f"a {node.name} has {node.gpus}")
    gpu = node.gpu_preset
    check_real("size_bytes", size_bytes, 0, gpu.hbm_bytes,
               f"the buffer lives in the HBM of one {gpu.name}")
    nics = min(node.nics, gpus_per_node)
    if algo == "sharp":
        sharp = node.fabric.sharp
        if nics > sharp.streaming_trees:
            raise ModelInputError(f"sharp needs one streaming aggregation tree per NIC rail "
                                  f"({nics}); {sharp.name} holds {sharp.streaming_trees}")
        spines = node.fabric.radix // 2
        if not sharp.sat_per_port and nodes > node.fabric.leaf_down_ports and nics > spines:
            raise ModelInputError(f"sharp on {sharp.name} runs one streaming tree per switch: "
                                  f"{nics} rails need {nics} spines, the fabric has {spines}")
    return gpu, nics


def _plan(node, nodes, gpus_per_node, size, op, algo):
    """(GPU, ranks, f, {link: (bytes, GB/s)}, {protocol: latency µs}, SMs, HBM bytes, link bytes)."""
    gpu, nics = _check(node, nodes, gpus_per_node, size, op, algo)
    g, k = gpus_per_node, nodes
    n = k * g
    f = 2 if op == "allreduce" else 1
    nic_rate = node.nic_gbps * NET_EFFICIENCY
    pcie_rate = node.pcie_gbps
    base = _BASE_US
    intra = _HW_US["nvlink"]
    net = _HW_US["net"]
    if algo == "ring":
        sent = f * (n - 1) / n * size
        nvlink_bytes = (g - 1) / g * sent
        nic_bytes = sent / nics
        nvlink_rate = _nvlink_gbps(gpu, g)
        steps = f * (n - 1)
        inter_steps = f * (k - 1)
        latency = {}
        for p, i in _PROTO.items():
            overhead = _NET_OVERHEAD_US * (3 if p == "Simple" else 1)
            intra_lat = max(intra["ring"][i], overhead)
            inter_lat = net["tree" if g == 1 else "ring"][i]
            latency[p] = base["ring"][i] + (steps - inter_steps) * intra_lat + \
                inter_steps * inter_lat
        sms, hbm, link_bytes = gpu.ring_channels, 2.5 * sent, sent
    elif algo == "tree":
        nvlink_bytes = 2 * (g - 1) / g * size
        nic_bytes = _tree_node_bytes(k, size) / nics
        nvlink_rate = _nvlink_gbps(gpu, g)
        latency = {p: base["tree"][i] + 2 * ((g - 1) * intra["tree"][i] +
                                              _log2i(k) * net["tree"][i])
                   for p, i in _PROTO.items()}
        link_bytes = nvlink_bytes + nic_bytes * nics / g
        sms, hbm = gpu.ring_channels, 2.5 * link_bytes
    else:   # sharp: intra-node reduce, the node's partial sum through the IB switches, back
        nvls = _nvls_algo(gpu) if g >= 2 else None
        nic_bytes = size / nics
        ops = max(1, math.ceil(nic_bytes / node.fabric.sharp.max_message_bytes))
        if nvls:
            nvlink_bytes = (1 + 1 / g) * size
            nvlink_rate = _nvlink_gbps(gpu, g, nvls)
            lat = intra["nvls"][2] + ops * net["nvls"][2]
            sms, hbm = gpu.nvls_channels, 2.0 * size   # NCCL "NVLS" with CollNet
        else:
            nvlink_bytes = 2 * (g - 1) / g * size
            nvlink_rate = _nvlink_gbps(gpu, g)
            lat = base["collnet_chain"][2] + 2 * (g - 1) * intra["collnet_chain"][2] + \
                ops * net["collnet_chain"][2]
            sms, hbm = gpu.ring_channels, 2.5 * nvlink_bytes   # NCCL "CollNetChain"
        latency = {"Simple": lat}
        link_bytes = nvlink_bytes + nic_bytes * nics / g
    links = {"nvlink": (nvlink_bytes, nvlink_rate), "pcie": (nic_bytes, pcie_rate),
             "nic": (nic_bytes, nic_rate)}
    return gpu, n, f, links, latency, sms, hbm, link_bytes


def multinode_links(node, nodes, gpus_per_node, size_bytes, op="allreduce", algo="ring"):
    """Seconds each link of one GPU's path is busy streaming the collective, alone (Simple
    protocol): ``{"nvlink": s, "pcie": s, "nic": s}``. The largest is the bottleneck.

    Raises
    ------
    ModelInputError
        As :func:`multinode_cost`.
    """
    links = _plan(node, nodes, gpus_per_node, size_bytes, op, algo)[3]
    return {name: (nbytes / (rate * 1e9) if nbytes else 0.0)
            for name, (nbytes, rate) in links.items()}


def multinode_cost(node, nodes, gpus_per_node, size_bytes, op="allreduce", algo="ring"):
    """Cost of a collective on ``nodes`` nodes of ``gpus_per_node`` GPUs (a
    :class:`sim.gpu.nodes.NodeSpec`, e.g. ``node_preset("h100")``).

    Time = NCCL's latency for the algorithm and protocol + the busiest link's bytes over its
    rate (NVLink, PCIe and NIC stream at once). ``link_bytes`` is what one GPU sends over all
    its links and ``link_rate_gbps`` the rate it streams them at (``link_bytes`` over the
    streaming time), the contract :mod:`sim.gpu.contention` reads. For ring and tree NCCL's LL protocol is also
    tried (half the bandwidth, capped at NCCL's ``llMaxBw``) and the faster kept; CollNet runs
    Simple only. ``busbw`` uses the nccl-tests definition over all ``N = nodes · gpus_per_node``
    ranks: algbw · 2(N−1)/N for all-reduce, · (N−1)/N for reduce-scatter / all-gather.

    Raises
    ------
    ModelInputError
        (a ValueError) For an unknown algorithm or operation, ``tree``/``sharp`` on anything
        but all-reduce, ``nodes`` outside [2, what the fabric holds], ``gpus_per_node`` outside
        [1, the node's GPUs], a size outside [0, the GPU's HBM], or a SHARP tree count beyond
        the switch generation's limit.
    """
    _, n, f, links, latency, sms, hbm, link_bytes = _plan(
        node, nodes, gpus_per_node, size_bytes, op, algo)
    stream_s = max(nbytes / (rate * 1e9) for nbytes, rate in links.values() if nbytes)
    best = None
    for protocol, lat_us in latency.items():
        time = lat_us * 1e-6
        if protocol == "LL":
            ll_cap = _LL_MAX_GBPS[min(nodes, 3)] * 1e9
            bus_bytes = f * (n - 1) / n * size_bytes
            time += max(stream_s / _LL_EFFICIENCY, bus_bytes / ll_cap)
        else:
            time += stream_s
        if best is None or time < best[1]:
            best = (protocol, time, lat_us * 1e-6)
    protocol, time, latency_s = best
    algbw = size_bytes / time / 1e9 if time else 0.0
    # the rate this GPU's bytes (all links together) stream at once started, so that
    # link_bytes / link_rate is the streaming time, as sim.gpu.contention reads it
    rate = link_bytes / (time - latency_s) / 1e9 if link_bytes else 0.0
    return CollectiveCost(op=op, algo=algo, n=n, size_bytes=size_bytes, time_s=time,
                          link_bytes=link_bytes, hbm_bytes=hbm, sms=sms,
                          protocol=protocol,
                          algbw_gbps=algbw, busbw_gbps=algbw * f * (n - 1) / n,
                          latency_s=latency_s, link_rate_gbps=rate)


def ring_messages(node, nodes, gpus_per_node, size_bytes):
    """One channel's ring all-reduce over ``nodes · gpus_per_node`` ranks (node-major rank
    order, so the ring crosses the network once per node), each message with the links it
    crosses: ``[(Message, ("nvlink",)), (Message, ("pcie", "nic", "leaf", ...)), ...]``.
    ``2(N−1) · N`` messages (see :func:`sim.gpu.collectives.expand_collective`).

    Raises
    ------
    ModelInputError
        As :func:`multinode_cost`.
    """
    _check(node, nodes, gpus_per_node, size_bytes, "allreduce", "ring")
    n = nodes * gpus_per_node
    return [(m, message_path(node, nodes, gpus_per_node, m.src, m.dst))
            for m in expand_collective("ring", n, size_bytes)]
