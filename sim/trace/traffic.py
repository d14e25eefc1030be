"""Traffic that shares the links with the gradient all-reduce: pipeline-stage boundaries,
tensor-parallel all-reduce, FSDP parameter all-gather and host-memory offload, as ``mem``
records of the trace (docs/trace-format.md, "Contending traffic").

Each kind is laid over the GPU model's data-parallel iteration (:mod:`sim.gpu.iteration`): its
messages are issued at the times of the iteration's kernels, sized from the workload's layers,
and the gradient all-reduce stays the model's (over every GPU). The messages backprop waits on
are marked ``critical``; backprop waits on each from its issue to its delivery (nothing is
prefetched), so what the gradients add to their delivery adds to the backward pass
(:func:`sim.experiment.metrics.critical_link_delay_ns`).

Sizes (``act(l)``: layer ``l``'s output activations, batch × sequence × hidden × bytes for a
transformer, the workload's ``activation_bytes``; ``params(l) × bytes``: its parameters):

``pp``
    Two pipeline stages, GPU g's stage boundary with GPU (g + N/2) mod N; the batch runs as two
    micro-batches (GPipe / 1F1B). Forward: the boundary layer's activations of each
    micro-batch, ``act(boundary) / 2``, at the end of the middle and the last forward kernel
    (not critical: no gradient is in flight in the forward pass). Backward: each micro-batch's
    activation gradients, ``act(boundary) / 2``, at the start of the backward pass and at its
    middle kernel (critical), and with the second, 1F1B's forward activations of the next
    micro-batch (not critical). The boundary layer is the middle layer.
``tp``
    Megatron tensor parallelism of degree 2 (GPU pairs g, g xor 1): the backward pass
    all-reduces the input gradient of every column-parallel GEMM, taken to be every other
    ``linear``/``conv`` layer in forward order from the first; a 2-way ring all-reduce sends
    ``act(l - 1)`` bytes (two halves) to the partner at the middle of the layer's backward
    kernel, when its data gradient is done and Megatron starts the all-reduce to overlap the
    weight gradient (critical: the next layer's backward needs the sum).
``fsdp``
    ZeRO-3 / FSDP over every GPU: before each layer's forward and backward kernel, every GPU
    sends its shard, ``params(l) × bytes / N``, to each other GPU (all-gather; critical before
    backward kernels). The gradient reduce-scatter is the model's all-reduce, whose first
    half it is (the all-reduce moves twice the reduce-scatter's bytes: an upper bound).
``offload``
    Activation checkpoints offloaded to host memory: the input of every column-parallel GEMM
    (as ``tp``), ``act(l - 1)``, written at the end of its forward kernel and read back at the
    start of its backward kernel (critical). The switch has no host port, so GPU
    (g + 1) mod N's memory stands in for the host's (NVLink-attached memory, as Grace Hopper's).
"""

from sim.trace.format import TraceRecord

__all__ = ["TRAFFIC_KINDS", "contending_traffic", "count_traffic"]

#: The kinds of contending traffic, in report order (``dp`` adds none of its own).
TRAFFIC_KINDS = ("pp", "tp", "fsdp", "offload")


def _column_gemms(workload):
    """Indices of the column-parallel GEMMs: every other linear/conv layer from the first
    (a layer with an input, so index ≥ 1)."""
    gemms = [i for i, layer in enumerate(workload.layers) if layer.kind in ("linear", "conv")]
    return [i for i in gemms[::2] if i > 0]


def _messages(kind, workload, n_gpus, kernels):
    """The kind's messages of one GPU class: ``(time_s, peer_offset_or_fn, bytes, op, critical)``
    with ``peer(g)`` the destination, from the class's compute ``kernels`` (name → (start,
    end))."""
    layers = workload.layers
    out = []

    def at(name, edge):
        span = kernels.get(name)
        return None if span is None else span[edge]

    if kind == "pp":
        half = n_gpus // 2
        peer = lambda g: (g + half) % n_gpus   # noqa: E731
        boundary = layers[len(layers) // 2]
        size = max(1, boundary.activation_bytes // 2)
        fwd = [k for k in kernels if k.startswith("fwd:")]
        bwd = [k for k in kernels if k.startswith("bwd:")]
        if fwd:
            out.append((at(fwd[len(fwd) // 2], 1), peer, size, "write", False))
            out.append((at(fwd[-1], 1), peer, size, "write", False))
        if bwd:
            out.append((at(bwd[0], 0), peer, size, "write", True))
            out.append((at(bwd[len(bwd) // 2], 1), peer, size, "write", True))
            out.append((at(bwd[len(bwd) // 2], 1), peer, size, "write", False))
    elif kind == "tp":
        peer = lambda g: g ^ 1 if (g ^ 1) < n_gpus else g - 1   # noqa: E731
        for i in _column_gemms(workload):
            span = kernels.get(f"bwd:{layers[i].name}")
            if span is not None:   # after the data-gradient half of the kernel
                out.append(((span[0] + span[1]) / 2, peer, layers[i - 1].activation_bytes,
                            "write", True))
    elif kind == "fsdp":
        for i, layer in enumerate(layers):
            shard = layer.params * workload.dtype_bytes // n_gpus
            if shard <= 0:
                continue
            for phase, critical in (("fwd", False), ("bwd", True)):
                t = at(f"{phase}:{layer.name}", 0)
                if t is None:
                    continue
                for offset in range(1, n_gpus):
                    out.append((t, lambda g, o=offset: (g + o) % n_gpus, shard, "write",
                                critical))
    elif kind == "offload":
        peer = lambda g: (g + 1) % n_gpus   # noqa: E731
        for i in _column_gemms(workload):
            size = layers[i - 1].activation_bytes
            t = at(f"fwd:{layers[i].name}", 1)
            if t is not None:
                out.append((t, peer, size, "write", False))
            t = at(f"bwd:{layers[i].name}", 0)
            if t is not None:
                out.append((t, peer, size, "read", True))
    else:
        raise ValueError(f"traffic must be one of {', '.join(TRAFFIC_KINDS)}, not {kind!r}")
    return [m for m in out if m[0] is not None and m[2] > 0]


def _class_kernels(timeline, ci):
    return {e[2]: (e[3], e[4]) for e in timeline if e[0] == ci and e[1] == "compute"}


def contending_traffic(kinds, workload, result, gpus_of_class, n_gpus, chunk_bytes, job=0):
    """The ``mem`` records of the traffic ``kinds`` (names of :data:`TRAFFIC_KINDS`) for the
    iteration ``result`` (recorded with its timeline); ids are left 0 for the caller to number.
    A message is cut into records of at most ``chunk_bytes``; a read is one record (its
    response is the switch's). Records of one message share their issue time, which is how
    :mod:`sim.experiment.metrics` groups them into the operation backprop waits on."""
    records = []
    for kind in kinds:
        for ci, gpus in enumerate(gpus_of_class):
            kernels = _class_kernels(result.timeline, ci)
            for time_s, peer, nbytes, op, critical in _messages(kind, workload, n_gpus,
                                                                kernels):
                time_ns = int(round(time_s * 1e9))
                for g in gpus:
                    p = peer(g)
                    if p == g:
                        continue
                    pieces = 1 if op == "read" else -(-nbytes // chunk_bytes)
                    for k in range(pieces):
                        size = nbytes if op == "read" else min(chunk_bytes,
                                                               nbytes - k * chunk_bytes)
                        records.append(TraceRecord.mem(gpu=g, peer=p, id=0, time_ns=time_ns,
                                                       bytes=size, op=op, tag=k & 0xFFFF,
                                                       job=job, traffic=kind,
                                                       critical=critical))
    return records


def count_traffic(kinds, workload, result, gpus_of_class, n_gpus, chunk_bytes):
    """How many records :func:`contending_traffic` makes, without making them."""
    count = 0
    for kind in kinds:
        for ci, gpus in enumerate(gpus_of_class):
            for _, _, nbytes, op, _ in _messages(kind, workload, n_gpus,
                                                 _class_kernels(result.timeline, ci)):
                count += len(gpus) * (1 if op == "read" else -(-nbytes // chunk_bytes))
    return count
