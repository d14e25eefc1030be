"""The two in-switch reductions, kept apart: NVLink SHARP as NCCL runs it (``nvls``) and innet's
own switch (``inswitch``), timed from its specification (:class:`hw.spec.SwitchSpec`).

Units: bytes, seconds, GB/s (10^9 bytes/s). ``n`` is the number of GPUs, ``S`` the buffer.

``nvls`` — NVSwitch gen3 (H100 HGX), NCCL's NVLS algorithm (one node). Reduce-scatter through
the switch: for its 1/n slice a GPU issues ``multimem.ld_reduce``; the switch reads the slice
from every GPU's memory (each GPU sends S in all, one slice per owner) and returns the sum
(S/n in). All-gather through the switch: the owner writes its reduced slice with
``multimem.st`` (S/n out) and the switch multicasts it to every GPU (S in). NCCL pipelines the
two on different channels, so an all-reduce moves S(n+1)/n each way per GPU. HBM: the switch
reads S from each GPU and multicasts S into it (2S); no reduction kernel. Rate: the link at
:data:`NVLS_EFFICIENCY` (fitted), capped by the switch's reduction rate per port
(:func:`nvswitch_reduce_gbps`). Latency: NCCL's NVLS latency (``hwLat`` NVLink NVLS Simple
25 µs, ``baseLat`` 0). Channels: ``gpu.nvls_channels`` (NCCL: 16, whatever the size).

``inswitch`` — innet's switch, the hypothetical architecture this project evaluates, on any
GPU. A GPU streams its buffer to its switch port in chunks of ``chunk_flits`` flits of
``lanes × 4`` bytes; each chunk claims a slot, and the slot is freed when the engine reads its
last flit; the result arriving back at the GPU is the credit to reuse it (docs/hw.md,
"Self-clocking slots", as in SwitchML). So at most ``slots × chunk bytes`` are in flight, and a
slot is busy for one round trip R = GPU→switch hop + the switch's pipeline + the chunk's result
+ switch→GPU hop. The rate is ``min(line rate, slots × chunk bytes / R)``.

The switch's cycle is one flit per port at the GPU's effective link rate (as the replay's time
mapping, ``ReplayConfig.cycle_ns = flit bytes / link rate``): the RTL sustains 1.00
flit/cycle/port in and out (``innet bench reduce``, docs/hw.md), so a port carries the GPU's
whole effective link. The pipeline, first contribution flit in to first result flit out, is
``(chunk_flits − 1) + judge_wait_cycles + engine_pick_latency + result_latency +
egress_latency`` cycles of the specification: the reduction unit's 22, 25, 30, 39 at 2, 4, 8,
16 ports with 8-flit chunks for a unit built for int32 alone (the member judged last waits
``ports − 1`` cycles for the one judge's turn), six cycles more per adder-tree level with fp
adders (pipelined, seven stages a level: 28 at 2 ports, 48 at 8), the RTL's measured latencies
(``innet bench reduce``), and three more for the egress (the arbiter's registered choice, the
link register and the egress stage). Below the judge's line rate (``chunk_flits`` not a
multiple of ``ports``) a port carries ``judge_flits_per_cycle`` of its link.
GPU side: the send/receive kernels occupy ``gpu.nvls_channels`` SMs, the same loads and stores to
the switch as NVLS's (NCCL's 16 channels are what NVSwitch traffic needs to reach line rate);
HBM: the gradient is read once to send it, the sum written once (2S), no reduction kernel.
"""

from functools import lru_cache

from hw.errors import ParameterError
from hw.spec import MAX_SLOTS, SwitchSpec
from sim.gpu.presets import ModelInputError

__all__ = [
    "KERNEL_LATENCY_S",
    "NVLS_EFFICIENCY",
    "NVLS_LATENCY_S",
    "NVLS_OPS",
    "RTL_LINE_RATE",
    "SwitchTiming",
    "check_nvls",
    "default_switch",
    "inswitch_traffic",
    "make_switch",
    "nvls_rate_gbps",
    "nvls_traffic",
    "nvswitch_reduce_gbps",
    "switch_timing",
]

#: NCCL's NVLS latency on NVLink (tuning.cc ``hwLatencies[NVLINK][NVLS][Simple]``; base 0).
NVLS_LATENCY_S = 25e-6
#: Fraction of the GPU's effective NVLink bandwidth NVLS traffic reaches. Fitted ONCE, to the
#: peak 8×H100 NVLS all-reduce busbw, 476–480 GB/s (nccl-tests #212, NCCL maintainer: "peak
#: busBw of ~480GB/s"; nccl-tests #290: 476 GB/s "in the expected range"): 480 / (370.8 ×
#: 2(n−1)/(n+1)) = 0.832. NCCL's own tuner assumes 0.85 (``nvlsEfficiency`` for Hopper),
#: 2 % away. The H800 (8 NVLinks) busbw is then a prediction (collective_figures.py): the loss
#: scales with the link, so it sits on the multimem traffic, not in the switch's adders.
NVLS_EFFICIENCY = 0.832
#: Collectives NCCL runs with NVLS on one node (tuning.cc: NVLS for all-reduce, reduce-scatter,
#: all-gather; never reduce or broadcast).
NVLS_OPS = ("allreduce", "reducescatter", "allgather")
#: innet's switch reduces at 1.00 flit/cycle/port, measured (``innet bench reduce``, docs/hw.md
#: "Sustained 1.00 flit/cycle/port in and out", 2–16 ports, ≥ 4 slots).
RTL_LINE_RATE = 1.00
#: GPU-side start of an in-switch collective: NCCL's base latency of a Simple kernel
#: (tuning.cc ``baseLatencies`` ring Simple, 8.4 µs): launching the send/receive kernel.
KERNEL_LATENCY_S = 8.4e-6
#: Lanes and chunk length of innet's switch at its target size (docs/hw.md: 8 lanes, 8-flit
#: chunks); bytes per 32-bit lane.
DEFAULT_LANES = 8
DEFAULT_CHUNK_FLITS = 8
LANE_BYTES = 4


def check_nvls(gpu, op):
    """Raise :class:`ModelInputError` unless ``gpu``'s NVSwitch does NVLink SHARP and NCCL runs
    ``op`` with it."""
    if not gpu.nvlink_sharp:
        raise ModelInputError(f"algorithm 'nvls' needs NVLink SHARP (NVSwitch gen3, H100/H800 "
                              f"HGX); {gpu.name} has none: use ring, tree, direct or inswitch")
    if op not in NVLS_OPS:
        raise ModelInputError(f"algorithm 'nvls' runs {', '.join(NVLS_OPS)} only (NCCL), "
                              f"not {op}")


def nvls_traffic(op, n, size):
    """(link bytes sent per GPU, link bytes received, HBM bytes per GPU, link bytes that set the
    time: the larger direction) for NVLS."""
    slice_ = size / n
    if op == "allreduce":
        sent, received, hbm = size + slice_, slice_ + size, 2.0 * size
    elif op == "reducescatter":
        sent, received, hbm = float(size), slice_, size + slice_
    else:   # allgather: the slice out once, everything in by multicast
        sent, received, hbm = slice_, float(size), slice_ + size
    return sent, received, hbm, max(sent, received)


def nvswitch_reduce_gbps(gpu):
    """The switch side's limit per GPU, GB/s: NVSwitch gen3 reduces and multicasts at its ports'
    raw rate (25 GB/s per NVLink4 port per direction, all of the GPU's links). With
    :data:`NVLS_EFFICIENCY` on the effective rate it does not bind on H100/H800; it is the bound
    a faster link would meet."""
    return gpu.link_gbps


def nvls_rate_gbps(gpu):
    """GB/s one GPU's NVLS traffic streams at, per direction: the link at NVLS's efficiency, at
    most what the switch side reduces."""
    return min(gpu.link_effective_gbps * NVLS_EFFICIENCY, nvswitch_reduce_gbps(gpu))


# -- innet's switch ------------------------------------------------------------------------------

def make_switch(ports, slots=None, chunk_flits=None, lanes=None):
    """A :class:`SwitchSpec` from the collective's options; a bad value is a
    :class:`ModelInputError` naming it."""
    try:
        return SwitchSpec(ports=ports, lanes=lanes or DEFAULT_LANES, slots=slots,
                          chunk_flits=chunk_flits or DEFAULT_CHUNK_FLITS)
    except (ParameterError, TypeError) as exc:
        raise ModelInputError(f"switch: {exc}") from None


class SwitchTiming:
    """What innet's switch means for one GPU: cycle, pipeline, round trip, in-flight window.

    Attributes
    ----------
    spec : SwitchSpec
    flit_bytes, chunk_bytes : int
    cycle_s : float
        One flit at the GPU's effective link rate.
    pipeline_cycles : int
        First contribution flit in to first result flit out.
    round_trip_s : float
        A slot's round trip: hop + pipeline + the rest of the result chunk + hop.
    window_bytes : int
        ``slots × chunk bytes``: what may be in flight.
    line_gbps, rate_gbps : float
        The port's line rate, and what the slot pool allows (the smaller of the two).
    bdp_bytes : float
        Line rate × round trip: the window needed to stream at line rate.
    """

    def __init__(self, gpu, spec):
        self.spec = spec
        self.flit_bytes = spec.lanes * LANE_BYTES
        self.chunk_bytes = self.flit_bytes * spec.chunk_flits
        self.line_gbps = gpu.link_effective_gbps * RTL_LINE_RATE
        self.cycle_s = self.flit_bytes / (self.line_gbps * 1e9)
        self.pipeline_cycles = (spec.chunk_flits - 1) + spec.judge_wait_cycles + \
            spec.engine_pick_latency + spec.result_latency + spec.egress_latency
        self.round_trip_s = 2 * gpu.link_latency_s + \
            (self.pipeline_cycles + spec.chunk_flits) * self.cycle_s
        self.window_bytes = spec.slots * self.chunk_bytes
        self.bdp_bytes = self.line_gbps * 1e9 * self.round_trip_s
        # below the judge's line rate (chunk_flits not a multiple of ports) a port takes
        # chunks only in its turns
        self.rate_gbps = min(self.line_gbps * spec.judge_flits_per_cycle,
                             self.window_bytes / self.round_trip_s / 1e9)

    @property
    def slot_limited(self):
        return self.window_bytes < self.bdp_bytes

    def as_dict(self):
        return {"ports": self.spec.ports, "lanes": self.spec.lanes, "slots": self.spec.slots,
                "chunk_flits": self.spec.chunk_flits, "chunk_bytes": self.chunk_bytes,
                "cycle_ns": self.cycle_s * 1e9, "pipeline_cycles": self.pipeline_cycles,
                "round_trip_ns": self.round_trip_s * 1e9, "window_bytes": self.window_bytes,
                "bdp_bytes": self.bdp_bytes, "line_GBps": self.line_gbps,
                "rate_GBps": self.rate_gbps, "slot_limited": self.slot_limited}


def switch_timing(gpu, spec):
    return SwitchTiming(gpu, spec)


@lru_cache(maxsize=256)   # the iteration model asks once per bucket, with the same answer
def default_switch(gpu, n):
    """innet's switch at its target lanes (8), a power-of-two radix of at least ``n`` ports
    (as NVSwitch's), chunks of 8 flits or of the radix if larger (the reduction unit's
    time-multiplexed judge keeps line rate when a chunk is a multiple of the ports:
    ``hw.spec.SwitchSpec.line_rate``), with the smallest power-of-two slot pool that covers the
    GPU–switch round trip at line rate (as a designer sizes it for the link; ``--slots`` shows
    a smaller pool)."""
    radix = max(2, 1 << (max(n, 2) - 1).bit_length())
    chunk = max(DEFAULT_CHUNK_FLITS, radix)
    probe = SwitchTiming(gpu, make_switch(radix, 1, chunk, DEFAULT_LANES))
    need = probe.bdp_bytes / probe.chunk_bytes
    slots = 1
    while slots < need and slots < MAX_SLOTS:
        slots *= 2
    # a larger pool lengthens nothing (the pipeline does not depend on slots), so re-checking
    # the round trip is not needed
    return make_switch(radix, slots, chunk, DEFAULT_LANES)


def inswitch_traffic(op, n, size):
    """(link bytes sent per GPU, received, HBM bytes per GPU) for innet's switch: the buffer goes
    up once and the result comes down once, by multicast."""
    slice_ = size / n
    if op == "allreduce":
        return float(size), float(size), 2.0 * size
    if op == "reducescatter":
        return float(size), slice_, size + slice_
    if op == "allgather":
        return slice_, float(size), slice_ + size
    if op == "reduce":   # every GPU contributes; the root receives the sum
        return float(size), float(size), 2.0 * size
    if op == "broadcast":   # the root sends once; the switch multicasts
        return float(size), float(size), 2.0 * size
    return float(size), float(size), 2.0 * size   # p2p: through the switch, unchanged
