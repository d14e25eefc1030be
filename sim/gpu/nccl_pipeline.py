"""How long a ring or tree collective really takes on one NVLink domain: NCCL's device-side
pipeline, chunk by chunk, as opposed to its tuner's estimate (:mod:`sim.gpu.nccl_tuning`),
which NCCL only uses to choose a protocol.

Every constant is NCCL's, read from the source (NCCL 2.2x; ``src/include/device.h``,
``collectives.h``, ``init.cc``, ``enqueue.cc`` ``calcCollChunking``, ``src/device/all_reduce.h``
``runRing``, ``prims_simple.h``). Nothing here is fitted. Units: seconds, bytes.

The mechanism (per channel; channels run side by side, each one CTA with its own share of the
buffer and ``1 / channels`` of the link):

- **Ring** (``ncclPatternRingTwice`` for all-reduce, ``ncclPatternRing`` for reduce-scatter and
  all-gather): the channel's share is cut into loops of ``n × chunk`` bytes; in a loop every
  rank sends one chunk per step, ``steps`` = 2(n−1) (n−1) steps. The last loop is partial: its
  chunk shrinks to ``share left / n`` (``runRing``). A Simple chunk is sent in up to
  ``SLICES_PER_CHUNK`` slices (``ProtoSimple<CHUNKSTEPS/SLICESTEPS, SLICESTEPS>``), each at
  least ``slice size / 32`` (``prims_simple.h``); every slice waits for its FIFO slot's flag,
  copies, fences and posts its own flag (``waitPeer`` … ``postPeer``), so each slice pays one
  per-step latency. LL and LL128 carry their flags inside the data: one step per chunk, one
  latency per step. All ranks start at once, so the ring is full from its first step: a loop
  costs ``steps × (slices × latency + chunk / rate)``, and loops follow one another.
- **Tree, reduce, broadcast** (a chain through the ranks inside one node: ``depth`` hops):
  the share is cut into chunks that stream down the chain, so the pipeline fills: the first
  chunk crosses the other ``depth − 1`` hops (``latency + chunk / rate`` each) besides the
  busiest GPU's ``chunks × (latency + its bytes per chunk / rate)``.

The per-step latency is NCCL's ``hwLat[NVLINK]`` for the algorithm and protocol, which NCCL's
tuner charges once per step of a message; here it is charged per slice of every loop, where the
device code waits. On top comes NCCL's ``baseLat`` (launch and set-up), once.
"""

import math

__all__ = ["NCCL_STEPS", "SLICES_PER_CHUNK", "chunk_bytes", "ring_time", "chain_time"]

#: FIFO slots per connection (``NCCL_STEPS``, device.h).
NCCL_STEPS = 8
#: Buffer per connection and protocol (``DEFAULT_BUFFSIZE`` 4 MiB for Simple; LL:
#: ``NCCL_LL_LINES_PER_THREAD × NCCL_LL_MAX_NTHREADS × NCCL_STEPS × 16``; LL128:
#: ``NCCL_LL128_ELEMS_PER_THREAD × NCCL_LL128_MAX_NTHREADS × NCCL_STEPS × 8``).
BUFFER_BYTES = {"Simple": 1 << 22, "LL": 8 * 512 * NCCL_STEPS * 16,
                "LL128": 120 * 640 * NCCL_STEPS * 8}
#: Ring Simple: a chunk is ``ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2`` FIFO steps, a slice
#: ``ALLREDUCE_SLICESTEPS = NCCL_STEPS/4`` (collectives.h); other protocols and the tree: 1.
CHUNK_STEPS = NCCL_STEPS // 2
SLICE_STEPS = NCCL_STEPS // 4
SLICES_PER_CHUNK = CHUNK_STEPS // SLICE_STEPS
#: Element alignment of a partial chunk and of a slice (16 bytes, ``alignUp(..., 16/sizeof(T))``).
ALIGN = 16


def chunk_bytes(protocol, algo, n, share_bytes):
    """Data bytes of one chunk (``calcCollChunking``): a FIFO step, times CHUNK_STEPS for ring
    Simple; LL carries 8 data bytes in 16, LL128 120 in 128. The one-node tree's Simple and
    LL128 chunks halve while the channel's share holds too few of them."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    if protocol == "Simple" and algo == "tree":
        # enqueue.cc (2.8–2.19, "Optimize chunkSize / nSteps"): halve while the share holds
        # too few chunks for the tree's depth (n − 1 in one node), so the pipeline can fill
        chunk, depth = step, n - 1
        for per_depth, floor in ((8, 131072), (4, 65536), (1, 32768)):
            while share_bytes // chunk < depth * per_depth and chunk > floor:
                chunk //= 2
        return chunk
    if protocol == "Simple":
        return step * (CHUNK_STEPS if algo == "ring" else 1)
    if protocol == "LL":
        return step // 2
    chunk = step // 128 * 120
    if algo == "tree":
        nsteps = 1 + 0.1 * n   # 1 + log2(nodes) + 0.1 × ranks per node, one node
        while share_bytes // chunk < nsteps * 64 / n and chunk > 131072:
            chunk //= 2
        while share_bytes // chunk < nsteps * 16 / n and chunk > 32768:
            chunk //= 2
    return chunk


def _slices(protocol, chunk):
    """Slices a ring chunk of ``chunk`` bytes is sent in (``prims_simple.h``: slice =
    max(chunk / SLICES_PER_CHUNK, slice size / 32), aligned)."""
    if protocol != "Simple" or chunk <= 0:
        return 1
    full_slice = BUFFER_BYTES["Simple"] // NCCL_STEPS * SLICE_STEPS
    slice_ = max(math.ceil(chunk / (ALIGN * SLICES_PER_CHUNK)) * ALIGN, full_slice // 32)
    return max(1, min(SLICES_PER_CHUNK, math.ceil(chunk / slice_)))


def ring_time(protocol, n, size_bytes, steps, channels, link_bytes, rate_bps, step_latency_s):
    """Seconds for a ring collective's device pipeline (without NCCL's base latency).

    ``steps``: ring steps per loop (2(n−1) for all-reduce); ``link_bytes``: bytes the GPU sends
    in all (sets the bytes per chunk-step: ``link_bytes / size`` of a chunk per step and per
    loop-chunk); ``rate_bps``: bytes/s of all channels together."""
    if size_bytes <= 0:
        return steps * step_latency_s
    share = size_bytes / channels
    rate_ch = rate_bps / channels
    # bytes on the wire per chunk byte per step: link bytes = steps × Σ chunks (per channel)
    wire = link_bytes / (steps * size_bytes / n) if steps else 0.0
    chunk = chunk_bytes(protocol, "ring", n, share)
    loop = n * chunk
    time, done = 0.0, 0.0
    while done < share:
        left = share - done
        c = chunk if left >= loop else math.ceil(left / n / ALIGN) * ALIGN
        time += steps * (_slices(protocol, c) * step_latency_s + c * wire / rate_ch)
        done += loop
    return time


def chain_time(protocol, algo, n, size_bytes, depth, channels, link_bytes, rate_bps,
               step_latency_s):
    """Seconds for a pipelined chain (tree, reduce, broadcast): ``depth`` hops; the first chunk
    must cross them all before the pipeline runs full (without NCCL's base latency)."""
    if size_bytes <= 0:
        return depth * step_latency_s
    share = size_bytes / channels
    rate_ch = rate_bps / channels
    chunk = min(chunk_bytes(protocol, algo, n, share), share)
    chunks = max(1, math.ceil(share / chunk))
    # steady state: the busiest GPU sends its link bytes chunk by chunk; fill: the first chunk
    # crosses the other depth − 1 hops, one chunk on one link each
    busiest = link_bytes / channels / chunks / rate_ch
    return chunks * (step_latency_s + busiest) + (depth - 1) * (step_latency_s + chunk / rate_ch)
