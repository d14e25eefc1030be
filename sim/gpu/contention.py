"""Interference between a compute kernel and a collective kernel on one GPU: SM occupancy, HBM
bandwidth and L2 capacity, each a mechanism with its published basis (no overlap ratio, no
lookup table).

* **SMs, as partial occupancy.** A collective runs one CTA per channel (``CollectiveCost.sms``).
  A CTA holds threads, registers and shared memory of its SM; a compute kernel keeps on that SM
  only the blocks that still fit beside it (:func:`retained_blocks`). NCCL's CTA, from NCCL's
  source (``src/include/device.h``, ``src/enqueue.cc``, ``makefiles/common.mk``): 512 threads
  for Simple plus one sync warp on ring (544), 640 for tree, LL128 and NVLS, 512 for LL;
  ``-maxrregcount=96`` registers per thread; dynamic shared memory ``ncclShmemDynamicSize`` =
  20 warps × (unroll·32+1)·16 bytes (unroll 8 on sm80/sm90: 82,240 B; 4 on sm70: 41,280 B).
  A compute kernel's block comes from the kernels frameworks launch (:data:`BLOCKS`). The SM
  limits are the CUDA C Programming Guide's per-compute-capability table (:data:`SM_LIMITS`).
  No constant is fitted: a cuBLAS tensor-core GEMM does not fit beside an NCCL CTA on A100 or
  H100 (shared memory) nor on V100 (registers), so it loses the channel SMs whole; an
  elementwise kernel keeps the blocks that fit.
* **HBM bandwidth.** Each kernel demands the bandwidth it would use at its unconstrained speed.
  The collective's demand is its HBM bytes per link byte (``hbm_bytes / link_bytes``: 2.5 for a
  ring or tree that reduces on the GPU, NVIDIA/nccl #1428; 2 for an in-switch reduction that
  only reads and writes once) times its link rate (``link_rate_gbps``, set by its protocol).
  When the demands exceed the achievable bandwidth each gets a share in proportion to its
  demand (memory controllers serve requests in arrival order).
* **L2 capacity.** The collective's traffic passes through L2 (NVLink writes from peers land in
  the receiver's L2; its own reads and writes are cached). Under LRU, a stream's share of the
  cache follows its share of the insertions, so the kernel keeps ``L2 · its rate / (its rate +
  the collective's rate)`` of the cache. The part of its working set (:func:`working_set`) that
  no longer fits is fetched again: ``L2_REFETCH`` × its HBM bytes × the evicted fraction, the
  one constant fitted here (see :data:`L2_REFETCH`). A kernel whose working set fits in what is
  left, or does not fit in L2 even alone, loses nothing to L2.
* **Clock/power.** Not modelled: no published figure separates a clock drop from the causes
  above for a kernel next to NCCL (Lee et al. 2025 report power draw, not clock throttling, at
  the default power cap).
* **Links.** A collective streams at its link rate unless HBM starves it; other traffic on the
  same links (point-to-point) takes a share of the link in proportion to its demand.

Each kernel's time is the roofline ``max(FLOPs / compute rate, HBM bytes / HBM rate)`` (plus
the link term for collectives). A slowdown is attributed to its causes by re-running the model
with one mechanism at a time and splitting the total in proportion.
"""

import math
from dataclasses import dataclass

from sim.gpu.presets import ModelInputError

__all__ = ["KernelSpec", "kernel_time", "Overlap", "overlap", "KERNEL_GAP_S", "SM_LIMITS",
           "BLOCKS", "L2_REFETCH", "comm_cta", "retained_blocks", "sm_share_during",
           "working_set", "rates_during", "Rates", "gemm_kernel"]

#: Gap between back-to-back kernels on one stream (launch and tail), seconds.
KERNEL_GAP_S = 2e-6

#: Per-SM limits, CUDA C Programming Guide, "Technical Specifications per Compute Capability":
#: (max threads, max resident blocks, 32-bit registers, shared memory bytes usable by blocks,
#: shared memory the system reserves per block).
SM_LIMITS = {
    "volta": (2048, 32, 65536, 96 * 1024, 0),        # compute capability 7.0
    "ampere": (2048, 32, 65536, 164 * 1024, 1024),   # 8.0
    "hopper": (2048, 32, 65536, 228 * 1024, 1024),   # 9.0
}

#: A compute kernel's block: (threads, registers per thread, shared memory bytes) per arch.
#: ``gemm``: cuBLAS tensor-core GEMM/conv kernels as profilers name them, 256 threads with a
#: 256x128 tile: ``volta_h884gemm_256x128_ldg8`` (k-slice 32, 2 stages: 48 KiB),
#: ``ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3`` (k 64, 3 stages: 144 KiB),
#: ``sm90_xmma_gemm_..._256x128x64`` (4 stages: 192 KiB); registers as CUTLASS's 256-thread
#: tensor-core kernels use (launch bounds of 1 block/SM, about 200 per thread).
#: ``elementwise``: PyTorch's vectorised elementwise/normalisation kernels, 128 threads per block
#: (``num_threads() = C10_WARP_SIZE * 4`` in ATen ``Loops.cuh``), about 32 registers, no shared
#: memory.
BLOCKS = {
    "gemm": {"volta": (256, 200, 48 * 1024), "ampere": (256, 200, 144 * 1024),
             "hopper": (256, 200, 192 * 1024)},
    "elementwise": {arch: (128, 32, 0) for arch in SM_LIMITS},
}

#: NCCL CTA: registers per thread (``-maxrregcount=96``, NCCL ``makefiles/common.mk``).
NCCL_REGISTERS = 96
#: NCCL CTA dynamic shared memory by arch: ``ncclShmemDynamicSize`` (NCCL ``device.h``), 20
#: warps x (ncclCollUnroll x 32 + 1) x 16 bytes, unroll 4 before sm80 and 8 from it.
NCCL_SHMEM = {"volta": 20 * (4 * 32 + 1) * 16, "ampere": 20 * (8 * 32 + 1) * 16,
              "hopper": 20 * (8 * 32 + 1) * 16}

#: Times each evicted byte of a kernel's working set is read from HBM again (a GEMM re-reads
#: an operand panel once per tile that shares it; evicted, each of those reads goes to HBM).
#: The one constant of the L2 mechanism, fitted on one figure: the worst case (40.0 %) of Lee
#: et al. 2025's sweep (arXiv 2507.03114) as innet runs it (:data:`sim.gpu.validation.SWEEP`);
#: the sweep's average and its serial-vs-overlapped figures are then predictions. The
#: published worst case is over A100, H100, MI250 and MI210 (which platform is not stated):
#: fitting it on innet's A100/H100 sweep assumes it came from an NVIDIA part.
L2_REFETCH = 4.21


@dataclass(frozen=True)
class KernelSpec:
    """A compute kernel: FLOPs, HBM bytes, whether it runs on tensor cores.

    ``block`` names its block shape in :data:`BLOCKS` (default: ``gemm`` on tensor cores,
    ``elementwise`` otherwise); ``working_set`` is the bytes it re-reads from L2 (default
    :func:`working_set`); ``blocks`` is its grid size, when known (then it runs in whole
    waves: see :func:`sm_share_during`)."""

    name: str
    flops: float
    hbm_bytes: float
    tensor_core: bool = True
    conv: bool = False
    block: str = None
    working_set: float = None
    blocks: int = None


def compute_rate(gpu, tensor_core, sm_share=1.0, conv=False):
    """Achievable FLOP/s of a kernel with ``sm_share`` of the SMs. ``conv_efficiency`` is the
    fraction of *tensor* peak a convolution reaches (fitted on an AMP run); a convolution on
    the FP32 pipes (``precision="fp32"``) gets ``compute_efficiency`` like any other FP32
    kernel, since nothing was fitted on one (the FP32 ResNet-50 row is a prediction)."""
    peak = gpu.tensor_tflops if tensor_core else gpu.fp32_tflops
    efficiency = gpu.conv_efficiency if conv and tensor_core else gpu.compute_efficiency
    return peak * 1e12 * efficiency * sm_share


def hbm_rate(gpu):
    """Achievable HBM bytes/s."""
    return gpu.hbm_gbps * 1e9 * gpu.memory_efficiency


def kernel_time(gpu, kernel, sm_share=1.0, hbm_bps=None, extra_bytes=0.0):
    """Roofline time of ``kernel`` (seconds), given an SM share, HBM bandwidth (bytes/s) and
    HBM bytes it moves beyond its own (re-fetches after L2 eviction)."""
    hbm_bps = hbm_rate(gpu) if hbm_bps is None else hbm_bps
    t_compute = kernel.flops / compute_rate(gpu, kernel.tensor_core, sm_share, kernel.conv)
    nbytes = kernel.hbm_bytes + extra_bytes
    t_memory = nbytes / hbm_bps if nbytes else 0.0
    return max(t_compute, t_memory)


# -- SMs: partial occupancy --------------------------------------------------------------------

def comm_cta(gpu, comm):
    """(threads, registers, shared memory bytes) one CTA of collective ``comm`` holds, from
    NCCL's thread rule (``enqueue.cc``): Simple ring 512 + a sync warp, tree and NVLS (any
    protocol NCCL runs at its maximum) 640, LL 512, LL128 640."""
    if comm.protocol == "LL":
        threads = 512
    elif comm.protocol == "Simple" and comm.algo != "tree":
        threads = 512 + 32
    else:
        threads = 640
    return threads, threads * NCCL_REGISTERS, NCCL_SHMEM[gpu.arch]


def _blocks_that_fit(limits, block, taken=(0, 0, 0, 0)):
    """Blocks of shape ``block`` resident on one SM beside what ``taken`` holds (threads,
    blocks, registers, shared memory)."""
    max_threads, max_blocks, registers, shmem, reserved = limits
    threads, regs_per_thread, smem = block
    t_threads, t_blocks, t_regs, t_shmem = taken
    fits = [(max_threads - t_threads) // threads, max_blocks - t_blocks,
            (registers - t_regs) // (threads * regs_per_thread)]
    fits.append((shmem - t_shmem) // (smem + reserved) if smem + reserved else max_blocks)
    return max(0, min(fits))


def kernel_block(gpu, kernel):
    """The block shape of ``kernel`` on ``gpu``'s architecture."""
    name = kernel.block or ("gemm" if kernel.tensor_core else "elementwise")
    return BLOCKS[name][gpu.arch]


def retained_blocks(gpu, kernel, comm):
    """Fraction of its blocks ``kernel`` keeps on an SM that also holds a CTA of ``comm``."""
    limits = SM_LIMITS[gpu.arch]
    block = kernel_block(gpu, kernel)
    alone = _blocks_that_fit(limits, block)
    threads, regs, smem = comm_cta(gpu, comm)
    beside = _blocks_that_fit(limits, block, (threads, 1, regs, smem + limits[4]))
    return beside / alone if alone else 0.0


def sm_share_during(gpu, comm, kernel):
    """Share of the GPU's SM throughput ``kernel`` keeps while ``comm`` holds ``comm.sms``
    SMs: all of the other SMs, and on each channel's SM the blocks that still fit.

    A kernel whose grid (``kernel.blocks``) is known runs in whole waves of the block slots
    it has: its time goes as the number of waves, ``ceil(blocks / slots)``, so a GEMM of
    exactly one wave alone needs two beside a collective (the tail effect: NVIDIA developer
    forum thread 337991, an H100 GEMM of 132 blocks next to a 24-block ncclAllGather).
    Without a grid, the many-wave limit: throughput in proportion to the slots."""
    if comm is None or kernel is None:
        return 1.0
    retained = retained_blocks(gpu, kernel, comm)
    if kernel.blocks:
        per_sm = _blocks_that_fit(SM_LIMITS[gpu.arch], kernel_block(gpu, kernel))
        slots_alone = gpu.sms * per_sm
        slots = (gpu.sms - comm.sms) * per_sm + comm.sms * round(retained * per_sm)
        if slots <= 0:
            return 0.0
        return math.ceil(kernel.blocks / slots_alone) / math.ceil(kernel.blocks / slots)
    lost = comm.sms * (1.0 - retained)
    return max(0.0, 1.0 - lost / gpu.sms)


def gemm_kernel(gpu, m, n, k, name=None, element_bytes=2):
    """A tensor-core GEMM ``C[m,n] = A[m,k] · B[k,n]`` as cuBLAS runs it: 2mnk FLOPs, its
    operands read and result written once, a grid of 256x128 tiles (:data:`BLOCKS`)."""
    blocks = math.ceil(m / 256) * math.ceil(n / 128)
    return KernelSpec(name or f"gemm {m}x{n}x{k}", 2.0 * m * n * k,
                      float(element_bytes * (m * k + k * n + m * n)), True, blocks=blocks)


# -- HBM bandwidth -------------------------------------------------------------------------------

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


# -- L2 capacity -------------------------------------------------------------------------------

def working_set(kernel):
    """Bytes ``kernel`` re-reads through L2, unless given: a tensor-core GEMM/conv its HBM
    bytes (its tiles re-read the operand panels from L2: the roofline's compulsory traffic
    assumes they stay there); an elementwise kernel nothing (each byte is touched once)."""
    if kernel.working_set is not None:
        return kernel.working_set
    return kernel.hbm_bytes if kernel.tensor_core else 0.0


def l2_extra_bytes(gpu, kernel, kernel_bps, comm_bps):
    """HBM bytes ``kernel`` fetches again because a collective streaming ``comm_bps`` through
    L2 evicts part of its working set (it streams ``kernel_bps`` itself)."""
    ws = min(working_set(kernel), gpu.l2_bytes)
    if ws <= 0 or comm_bps <= 0 or kernel.hbm_bytes <= 0:
        return 0.0
    keeps = gpu.l2_bytes * kernel_bps / (kernel_bps + comm_bps) if kernel_bps > 0 else 0.0
    evicted = max(0.0, ws - keeps) / ws
    return L2_REFETCH * kernel.hbm_bytes * evicted


# -- Both together -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Rates:
    """Steady state while a kernel and a collective both run (times as if the overlap lasted
    all of each; the collective's excludes its fixed latency).

    ``sm_s``, ``hbm_s`` and ``l2_s`` are the kernel's time with one mechanism only, for
    attribution."""

    compute_s: float
    comm_s: float
    sm_share: float
    compute_hbm_bps: float
    comm_hbm_bps: float
    sm_s: float = 0.0
    hbm_s: float = 0.0
    l2_s: float = 0.0
    extra_bytes: float = 0.0


def rates_during(gpu, kernel, comm, link_share=1.0):
    """Steady-state :class:`Rates` while ``kernel`` and collective ``comm`` both run; either
    may be ``None``."""
    if comm is None:
        t = kernel_time(gpu, kernel) if kernel is not None else 0.0
        return Rates(t, 0.0, 1.0, None, 0.0, t, t, t)
    stream_rate = comm.link_rate_gbps * 1e9 * link_share
    comm_stream_s = comm.link_bytes / stream_rate if stream_rate else 0.0
    comm_demand = comm.hbm_bytes / comm_stream_s if comm_stream_s else 0.0
    if kernel is None:
        granted = split_hbm(gpu, [comm_demand])[0]
        comm_s = max(comm_stream_s, comm.hbm_bytes / granted if granted else 0.0)
        return Rates(0.0, comm_s, 1.0, 0.0, granted)
    share = sm_share_during(gpu, comm, kernel)
    t_free = kernel_time(gpu, kernel, share)
    kernel_demand = kernel.hbm_bytes / t_free if t_free else 0.0
    extra = l2_extra_bytes(gpu, kernel, kernel_demand, comm_demand)
    # the re-fetches are demand too
    kernel_demand = (kernel.hbm_bytes + extra) / t_free if t_free else 0.0
    k_hbm, c_hbm = split_hbm(gpu, [kernel_demand, comm_demand])
    compute_s = kernel_time(gpu, kernel, share, k_hbm if k_hbm else None, extra)
    comm_s = max(comm_stream_s, comm.hbm_bytes / c_hbm if c_hbm else 0.0)
    # single-mechanism times, for attribution
    alone_demand = kernel.hbm_bytes / kernel_time(gpu, kernel) if kernel.hbm_bytes else 0.0
    k_only = split_hbm(gpu, [alone_demand, comm_demand])[0]
    hbm_s = kernel_time(gpu, kernel, 1.0, k_only if k_only else None)
    l2_s = kernel_time(gpu, kernel, 1.0, None,
                       l2_extra_bytes(gpu, kernel, alone_demand, comm_demand))
    return Rates(compute_s, comm_s, share, k_hbm, c_hbm, kernel_time(gpu, kernel, share),
                 hbm_s, l2_s, extra)


@dataclass(frozen=True)
class Overlap:
    """Isolated and overlapped times of a compute kernel and a collective, with attribution.

    Times in seconds; slowdowns as fractions (0.25 = 25 % slower); ``*_attribution`` maps a
    cause (``sm``, ``hbm``, ``l2``, ``link``) to its part of the slowdown (the parts sum to it).
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
    l2_extra_bytes: float = 0.0


def attribute(total, parts):
    """Split ``total`` over causes in proportion to their single-cause slowdowns (evenly when
    none alone slows anything)."""
    positive = {k: max(0.0, v) for k, v in parts.items()}
    weight = sum(positive.values())
    if total <= 0:
        return {k: 0.0 for k in parts}
    if weight == 0:
        return {k: total / len(parts) for k in parts}
    return {k: total * v / weight for k, v in positive.items()}


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
    r = rates_during(gpu, kernel, comm, link_share)
    comm_s = comm.latency_s + r.comm_s
    compute_slowdown = r.compute_s / compute_alone - 1
    alone_stream = comm.link_bytes / (comm.link_rate_gbps * 1e9) if comm.link_bytes else 0.0
    link_only = (alone_stream / link_share - alone_stream) / comm_alone if link_share < 1 \
        else 0.0
    hbm_comm = max(0.0, (comm.hbm_bytes / r.comm_hbm_bps if r.comm_hbm_bps else 0.0) -
                   alone_stream) / comm_alone
    comm_slowdown = comm_s / comm_alone - 1
    stream_s = r.comm_s
    parts = {"sm": r.sm_s / compute_alone - 1, "hbm": r.hbm_s / compute_alone - 1,
             "l2": r.l2_s / compute_alone - 1, "link": 0.0}
    return Overlap(
        compute_alone_s=compute_alone, compute_overlapped_s=r.compute_s,
        comm_alone_s=comm_alone, comm_overlapped_s=comm_s,
        compute_slowdown=compute_slowdown, comm_slowdown=comm_slowdown,
        compute_attribution=attribute(compute_slowdown, parts),
        comm_attribution=attribute(comm_slowdown, {"sm": 0.0, "hbm": hbm_comm, "l2": 0.0,
                                                   "link": link_only}),
        sm_share=r.sm_share,
        compute_hbm_gbps=(kernel.hbm_bytes + r.extra_bytes) / r.compute_s / 1e9
        if r.compute_s else 0.0,
        comm_hbm_gbps=comm.hbm_bytes / stream_s / 1e9 if stream_s else 0.0,
        l2_extra_bytes=r.extra_bytes)
