"""SM and HBM contention between a compute kernel and a collective kernel on one GPU.

Mechanism (no overlap ratio, no lookup table):

* **SMs.** A collective kernel runs one CTA per channel on its own SM. A compute kernel running
  at the same time gets the other SMs, plus the share ``1 − CTA_SM_OCCUPANCY`` of each channel's
  SM that the communication CTA leaves free for co-resident blocks. Tensor-core and FP32 peaks
  scale with the SM share.
* **HBM.** Each kernel demands the HBM bandwidth it would use at its unconstrained speed
  (bytes / time). When the demands exceed the achievable bandwidth, each gets bandwidth in
  proportion to its demand (memory controllers serve outstanding requests in arrival order, so
  a kernel's share follows its request rate).
* **Links.** A collective streams at its link rate unless HBM starves it; other traffic on the
  same links (point-to-point) takes a share of the link in proportion to its demand.

Each kernel's time is the roofline ``max(FLOPs / compute rate, HBM bytes / HBM rate)`` (plus
the link term for collectives). A slowdown is attributed to its causes by re-running the model
with one resource contended at a time and splitting the total in proportion.
"""

import math
from dataclasses import dataclass

from sim.gpu.presets import ModelInputError

__all__ = ["CTA_SM_OCCUPANCY", "KernelSpec", "kernel_time", "Overlap", "overlap",
           "KERNEL_GAP_S"]

#: Fraction of an SM a communication CTA takes from co-resident compute blocks. One constant
#: fitted so that a GPT/LLaMA-like sweep on 4×A100/H100 averages the published 18.9 % compute
#: slowdown (Lee et al. 2025); see docs/calibration.md.
CTA_SM_OCCUPANCY = 0.57

#: Gap between back-to-back kernels on one stream (launch and tail), seconds.
KERNEL_GAP_S = 2e-6


@dataclass(frozen=True)
class KernelSpec:
    """A compute kernel: FLOPs, HBM bytes, and whether it runs on tensor cores."""

    name: str
    flops: float
    hbm_bytes: float
    tensor_core: bool = True
    conv: bool = False


def compute_rate(gpu, tensor_core, sm_share=1.0, conv=False):
    """Achievable FLOP/s of a kernel with ``sm_share`` of the SMs."""
    peak = gpu.tensor_tflops if tensor_core else gpu.fp32_tflops
    efficiency = gpu.conv_efficiency if conv else gpu.compute_efficiency
    return peak * 1e12 * efficiency * sm_share


def hbm_rate(gpu):
    """Achievable HBM bytes/s."""
    return gpu.hbm_gbps * 1e9 * gpu.memory_efficiency


def kernel_time(gpu, kernel, sm_share=1.0, hbm_bps=None):
    """Roofline time of ``kernel`` (seconds), given an SM share and HBM bandwidth (bytes/s)."""
    hbm_bps = hbm_rate(gpu) if hbm_bps is None else hbm_bps
    t_compute = kernel.flops / compute_rate(gpu, kernel.tensor_core, sm_share, kernel.conv)
    t_memory = kernel.hbm_bytes / hbm_bps if kernel.hbm_bytes else 0.0
    return max(t_compute, t_memory)


def sm_share_during(gpu, comm_sms):
    """SM share left to compute while a collective holds ``comm_sms`` channels."""
    return max(0.0, 1.0 - comm_sms * CTA_SM_OCCUPANCY / gpu.sms)


def split_hbm(gpu, demands):
    """HBM bandwidth granted to kernels with these ``demands`` (bytes/s), same order.

    Without contention each kernel may use everything the others leave (so it is not limited
    below its free-running speed); with contention the capacity is split in proportion to the
    demands."""
    total_demand = sum(demands)
    capacity = hbm_rate(gpu)
    if total_demand <= capacity:
        return [capacity - (total_demand - d) for d in demands]
    return [d * capacity / total_demand for d in demands]


@dataclass(frozen=True)
class Overlap:
    """Isolated and overlapped times of a compute kernel and a collective, with attribution.

    Times in seconds; slowdowns as fractions (0.25 = 25 % slower); ``*_attribution`` maps a
    cause (``sm``, ``hbm``, ``link``) to its part of the slowdown (the parts sum to it).
    """

    compute_alone_s: float
    compute_overlapped_s: float
    comm_alone_s: float
    comm_overlapped_s: float
    compute_slowdown: float
    comm_slowdown: float
    compute_attribution: dict
    comm_attribution: dict
    sm_share: float
    compute_hbm_gbps: float   # HBM bandwidth each actually uses while overlapped
    comm_hbm_gbps: float


def _attribute(total, parts):
    """Split ``total`` over causes in proportion to their single-cause slowdowns."""
    positive = {k: max(0.0, v) for k, v in parts.items()}
    weight = sum(positive.values())
    if total <= 0 or weight == 0:
        return {k: 0.0 for k in parts}
    return {k: total * v / weight for k, v in positive.items()}


def rates_during(gpu, kernel, comm, link_share=1.0):
    """Steady-state rates while ``kernel`` and collective ``comm`` both run.

    Returns ``(compute_time_s, comm_time_s, sm_share, compute_hbm_bps, comm_hbm_bps)`` where
    the times are what each would take if the overlap lasted for all of it (comm time excludes
    its fixed latency). ``kernel`` or ``comm`` may be ``None``.
    """
    if kernel is None and comm is None:
        return 0.0, 0.0, 1.0, 0.0, 0.0
    stream_rate = comm.link_rate_gbps * 1e9 * link_share if comm is not None else 0.0
    comm_stream_s = comm.link_bytes / stream_rate if comm is not None and stream_rate else 0.0
    if comm is None:
        return kernel_time(gpu, kernel), 0.0, 1.0, None, 0.0
    share = sm_share_during(gpu, comm.sms) if kernel is not None else 1.0
    comm_demand = comm.hbm_bytes / comm_stream_s if comm_stream_s else 0.0
    if kernel is None:
        granted = split_hbm(gpu, [comm_demand])[0]
        comm_s = max(comm_stream_s, comm.hbm_bytes / granted if granted else 0.0)
        return 0.0, comm_s, 1.0, 0.0, granted
    t_free = kernel_time(gpu, kernel, share)
    kernel_demand = kernel.hbm_bytes / t_free if t_free else 0.0
    k_hbm, c_hbm = split_hbm(gpu, [kernel_demand, comm_demand])
    compute_s = kernel_time(gpu, kernel, share, k_hbm if k_hbm else None)
    comm_s = max(comm_stream_s, comm.hbm_bytes / c_hbm if c_hbm else 0.0)
    return compute_s, comm_s, share, k_hbm, c_hbm


def overlap(gpu, kernel, comm, link_share=1.0):
    """Run ``kernel`` and collective ``comm`` (a :class:`sim.gpu.collectives.CollectiveCost`) at
    the same time on one GPU, as if each lasted the other's whole duration (the steady state
    the overlap query reports).

    Raises
    ------
    ModelInputError
        (a ValueError) For a kernel that takes no time or no finite time alone (no FLOPs and
        no HBM bytes, or counts that are not finite): its slowdown is undefined.
    """
    compute_alone = kernel_time(gpu, kernel)
    if not 0 < compute_alone < math.inf:
        raise ModelInputError(f"kernel {kernel.name!r} takes {compute_alone} s alone "
                              f"({kernel.flops} FLOPs, {kernel.hbm_bytes} HBM bytes): its "
                              f"slowdown is undefined")
    comm_alone = comm.time_s
    compute_s, comm_stream_s, share, k_hbm, c_hbm = rates_during(gpu, kernel, comm, link_share)
    comm_s = comm.latency_s + comm_stream_s

    # Single-cause runs for attribution.
    sm_only = kernel_time(gpu, kernel, share) / compute_alone - 1
    hbm_only = kernel_time(gpu, kernel, 1.0, k_hbm) / compute_alone - 1 if k_hbm else 0.0
    compute_slowdown = compute_s / compute_alone - 1
    alone_stream = comm.link_bytes / (comm.link_rate_gbps * 1e9) if comm.link_bytes else 0.0
    link_only = (alone_stream / link_share - alone_stream) / comm_alone if link_share < 1 \
        else 0.0
    hbm_comm = max(0.0, (comm.hbm_bytes / c_hbm if c_hbm else 0.0) - alone_stream) / comm_alone
    comm_slowdown = comm_s / comm_alone - 1
    return Overlap(
        compute_alone_s=compute_alone, compute_overlapped_s=compute_s,
        comm_alone_s=comm_alone, comm_overlapped_s=comm_s,
        compute_slowdown=compute_slowdown, comm_slowdown=comm_slowdown,
        compute_attribution=_attribute(compute_slowdown, {"sm": sm_only, "hbm": hbm_only,
                                                          "link": 0.0}),
        comm_attribution=_attribute(comm_slowdown, {"sm": 0.0, "hbm": hbm_comm,
                                                    "link": link_only}),
        sm_share=share,
        compute_hbm_gbps=kernel.hbm_bytes / compute_s / 1e9 if compute_s else 0.0,
        comm_hbm_gbps=comm.hbm_bytes / comm_stream_s / 1e9 if comm_stream_s else 0.0)
