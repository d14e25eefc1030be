"""Generating GPU traces from the iteration model (``innet trace gen``)."""

from dataclasses import replace

from sim.gpu.collectives import SWITCH, expand_collective, piece_dependencies
from sim.gpu.iteration import IterationConfig, optimizer_bytes, simulate_iteration
from sim.gpu.multinode_messages import IB_SWITCH, multinode_messages
from sim.gpu.nodes import message_path
from sim.gpu.presets import MAX_BYTES, ModelInputError, check_count, check_real
from sim.trace.format import IB_SWITCH_PORT, PHASES, SWITCH_PORT, TraceRecord, route_of
from sim.trace.traffic import TRAFFIC_KINDS, contending_traffic, count_traffic

__all__ = ["MAX_FIELD", "collective_records", "generate_trace"]

MiB = 1 << 20
#: Largest value of a record's 32-bit fields: a piece's bytes, a kernel's duration in ns, an id.
MAX_FIELD = 0xFFFFFFFF


def generate_trace(workload, gpu, n_gpus, algo="ring", bucket_mb=25.0, chunk_bytes=64 * 1024,
                   job=0, config=None, p2p_bytes=0, max_records=None, traffic=()):
    """Simulate one iteration and describe it as trace records.

    Per GPU: a kernel record for every compute kernel and every collective kernel (with the SMs
    and HBM bytes it used), and grad records for the collective's messages: the expansion of
    :func:`sim.gpu.collectives.expand_collective`, each message cut into pieces of at most
    ``chunk_bytes``. Piece k of a message depends on piece k of the message it waited for, so a
    replay may pipeline pieces as the hardware does. Times are the model's (open-loop issue
    times); the dependencies carry the closed-loop constraints.

    With ``p2p_bytes``, every GPU g also writes that many bytes to GPU (g+1) mod n when the
    middle backward kernel ends (activation gradients crossing a pipeline-stage boundary), as
    mem records of at most ``chunk_bytes`` each, sharing the links with the gradients; they are
    critical (backprop waits on them).

    ``traffic`` names kinds of contending traffic (:data:`sim.trace.traffic.TRAFFIC_KINDS`:
    ``pp``, ``tp``, ``fsdp``, ``offload``) laid over the iteration as mem records, sized from
    the workload (:mod:`sim.trace.traffic`).

    The iteration is the one ``config`` (an :class:`IterationConfig`) describes, whose
    ``n_gpus`` must be ``n_gpus``; without one, the default configuration with ``algo`` and
    buckets of ``bucket_mb`` MiB (``algo`` and ``bucket_mb`` are not used with a ``config``).

    Across nodes (``config.nodes`` > 1; ``n_gpus`` is then per node), the trace holds the
    ``nodes × n_gpus`` ranks, numbered node by node, and the collective's messages are those of
    :func:`sim.gpu.multinode_messages.multinode_messages` (ring, tree or sharp, with the links
    each crosses), timed by the same iteration as ``innet model iteration --nodes``. Every mem
    and grad record carries its route (docs/trace-format.md, version 3).

    The metadata records the whole configuration, units in the key names: ``gpus``, ``gpu``,
    ``model``, ``batch`` (samples per GPU), ``algo``, ``bucketing``, ``first_bucket_bytes``,
    ``bucket_cap_bytes``, ``fusion_bytes`` and ``fusion_cycle_s`` (Horovod), ``overlap``,
    ``grad_accum_microbatches``, ``precision`` (``amp``, ``o2`` or ``fp32``),
    ``straggler_speed_factors`` (GPU → factor; the GPUs not
    named run at 1.0), ``channels_sms`` (asked for; null: NCCL's default) and
    ``collective_sms`` (what the collectives used), ``optimizer_bytes_per_param``,
    ``chunk_bytes``, ``p2p_bytes``, ``traffic`` (only when given), ``job``; and the result,
    ``iteration_s``, and the ``generator``. Across nodes also ``nodes``, ``gpus_per_node``,
    ``node_preset`` (its name), ``nodes_per_leaf`` (the fabric's leaf down-ports) and
    ``nic_gbits``.

    Returns ``(metadata, records, result)``.

    Raises
    ------
    ModelInputError
        (a ValueError) For fewer than 2 GPUs, a configuration for another GPU count,
        ``chunk_bytes`` outside [1, 2^50] or a piece larger than a record's bytes field
        (:data:`MAX_FIELD`), ``p2p_bytes`` outside [0, 2^50], ``job`` outside [0, 65535], a
        kernel that lasts
        longer than a record's duration field holds (:data:`MAX_FIELD` ns, 4.29 s), or more
        than ``max_records`` records (when given), counted before any record is made; and
        whatever :meth:`IterationConfig.validate_for` raises.
    """
    if n_gpus < 2 and (config is None or config.nodes < 2):
        raise ModelInputError(f"a data-parallel trace needs at least 2 GPUs, not {n_gpus}")
    check_count("chunk_bytes", chunk_bytes, 1, MAX_BYTES, "at most 2^50")
    check_count("p2p_bytes", p2p_bytes, 0, MAX_BYTES, "at most 2^50")
    check_count("job", job, 0, 0xFFFF, "a trace record's job field is 16 bits")
    traffic = tuple(traffic)
    for kind in traffic:
        if kind not in TRAFFIC_KINDS:
            raise ModelInputError(f"traffic: {kind!r} is not one of {', '.join(TRAFFIC_KINDS)}")
    if config is None:
        check_real("bucket_mb", bucket_mb, 1 / MiB, MAX_BYTES / MiB, "MiB, at least one byte")
        config = IterationConfig(n_gpus=n_gpus, algo=algo,
                                 bucket_cap_bytes=int(bucket_mb * MiB))
    elif config.n_gpus != n_gpus:
        raise ModelInputError(f"the configuration is for {config.n_gpus} GPUs, the trace for "
                              f"{n_gpus}")
    result = simulate_iteration(workload, gpu, config, record=True)
    gpus_of_class = [result.classes[key] for key in result.classes]
    per_node, ranks = n_gpus, config.ranks
    node = config.node_for(gpu) if config.nodes > 1 else None

    def messages(nbytes):
        """The bucket's messages with the links each crosses."""
        if node is not None:
            return multinode_messages(node, config.nodes, per_node, config.algo, nbytes)
        return [(m, ("nvlink",)) for m in expand_collective(config.algo, per_node, nbytes)]

    def route(src, dst):
        if node is None:
            return "nvlink"
        return route_of(message_path(node, config.nodes, per_node, src, dst))

    n_gpus = ranks   # from here on: every GPU of the trace
    if max_records is not None:
        count = _count_records(result, gpus_of_class, messages, n_gpus, chunk_bytes, p2p_bytes)
        count += count_traffic(traffic, workload, result, gpus_of_class, n_gpus, chunk_bytes)
        if count > max_records:
            raise ModelInputError(
                f"the trace would hold {count} records, more than {max_records}: use larger "
                f"pieces (now {chunk_bytes} bytes) or fewer point-to-point bytes")
    longest = max(result.timeline, key=lambda e: e[4] - e[3], default=None)
    if longest is not None and round((longest[4] - longest[3]) * 1e9) > MAX_FIELD:
        raise ModelInputError(
            f"kernel {longest[2]} lasts {longest[4] - longest[3]:.3f} s, longer than a trace "
            f"record holds ({MAX_FIELD} ns, 4.29 s)")
    if p2p_bytes > 0:
        _check_piece(min(chunk_bytes, p2p_bytes))
    records = []
    next_id = 0

    def new_id():
        nonlocal next_id
        next_id += 1
        return next_id - 1

    comm_windows = {}
    for entry in result.timeline:
        ci, stream, name, start, end, tag, hbm = entry
        start_ns, dur_ns = int(round(start * 1e9)), max(1, int(round((end - start) * 1e9)))
        if stream == "compute":
            phase = tag if tag in PHASES else "other"
            sms = gpu.sms
        else:
            phase = "comm"
            sms = result.comm_sms[tag]
            comm_windows[tag] = (start, end)
        for g in gpus_of_class[ci]:
            records.append(TraceRecord.kernel(gpu=g, id=new_id(), start_ns=start_ns,
                                              duration_ns=dur_ns, phase=phase,
                                              sms=min(sms, 0xFFFF),
                                              hbm_kib=min(int(hbm // 1024), 0xFFFFFFFF),
                                              job=job))
    if p2p_bytes > 0:
        bwd = [e for e in result.timeline if e[1] == "compute" and e[5] == "bwd"]
        if bwd:
            per_class = {}
            for e in bwd:
                per_class.setdefault(e[0], []).append(e)
            for ci, entries in per_class.items():
                boundary_ns = int(round(entries[len(entries) // 2][4] * 1e9))
                for g in gpus_of_class[ci]:
                    for k in range(-(-p2p_bytes // chunk_bytes)):
                        size = min(chunk_bytes, p2p_bytes - k * chunk_bytes)
                        peer = (g + 1) % n_gpus
                        records.append(TraceRecord.mem(gpu=g, peer=peer, id=new_id(),
                                                       time_ns=boundary_ns, bytes=size,
                                                       op="write", tag=k & 0xFFFF, job=job,
                                                       critical=True, route=route(g, peer)))
    if traffic:
        _check_piece(chunk_bytes)
        more = contending_traffic(traffic, workload, result, gpus_of_class, n_gpus,
                                  chunk_bytes, job=job)
        if node is not None:   # the route is in op's high bits (format.py, version 3)
            more = [TraceRecord.mem(gpu=r.gpu, peer=r.peer, id=r.id, time_ns=r.time_ns,
                                    bytes=r.bytes, op=r.mem_op, tag=r.tag, job=r.job,
                                    traffic=r.traffic, critical=r.critical,
                                    route=route(r.gpu, r.peer)) for r in more]
        records += more
    records.sort(key=lambda r: (r.time_ns, r.gpu))
    records = [replace(r, id=i) for i, r in enumerate(records)]   # ids in time order
    next_id = len(records)

    for bucket, nbytes in enumerate(result.bucket_bytes):
        begin, end = comm_windows.get(bucket, (0.0, 0.0))
        more = collective_records(messages(nbytes), chunk_bytes, begin, end, next_id,
                                  config.algo, bucket, job)
        records += more
        next_id += len(more)
    meta = {"gpus": n_gpus, "model": workload.name, "batch": workload.batch, "gpu": gpu.name,
            "algo": config.algo, "bucket_cap_bytes": config.bucket_cap_bytes,
            "chunk_bytes": chunk_bytes, "iteration_s": result.iteration_s,
            "p2p_bytes": p2p_bytes,
            "generator": "innet trace gen",
            # the rest of the iteration's configuration
            "bucketing": config.bucketing, "first_bucket_bytes": config.first_bucket_bytes,
            "fusion_bytes": config.fusion_bytes, "fusion_cycle_s": config.cycle_s,
            "overlap": config.overlap, "grad_accum_microbatches": config.grad_accum,
            "precision": config.precision,
            "straggler_speed_factors": {str(g): factor for g, factor
                                        in enumerate(config.speed or []) if factor != 1.0},
            "channels_sms": config.channels,
            "collective_sms": result.comm_sms[0] if result.comm_sms else None,
            "optimizer_bytes_per_param": optimizer_bytes(workload, config),
            "job": job}
    if traffic:
        meta["traffic"] = list(traffic)
    if node is not None:
        meta.update({"nodes": config.nodes, "gpus_per_node": per_node,
                     "node_preset": node.name, "nodes_per_leaf": node.fabric.leaf_down_ports,
                     "nic_gbits": node.nic_gbits})
    return meta, records, result


def collective_records(messages, chunk_bytes, begin_s, end_s, first_id, algo, bucket=0, job=0):
    """The grad records of one collective: each of ``messages`` (``(Message, links)`` pairs,
    as :func:`sim.gpu.collectives.expand_collective` or
    :func:`sim.gpu.multinode_messages.multinode_messages` give them, with the links each
    crosses) cut into pieces of at most ``chunk_bytes``, ids from ``first_id`` on.

    Piece k of a message depends on piece k of each message it waited for (its last piece
    when that one has fewer; :func:`sim.gpu.collectives.piece_dependencies`), so a replay
    pipelines the pieces as the hardware does: ring step s+1's first piece may leave once
    step s's first piece arrived. A message of step s is
    issued at ``begin_s + (end_s − begin_s) × s / steps`` (seconds; the open-loop time the GPU
    model's kernel reaches that step); ``begin_s = end_s`` issues them all at once, so that
    only the dependencies pace them. Results from the switch (``src`` the switch) make no
    record: a replay produces them."""
    steps = max((m.step for m, _ in messages), default=0) + 1
    records, piece_ids, next_id = [], [], first_id
    for m, links in messages:
        if m.src == SWITCH:
            piece_ids.append([])
            continue
        count = max(1, -(-m.nbytes // chunk_bytes))
        _check_piece(min(chunk_bytes, m.nbytes))   # the first piece is the largest
        issue_ns = int(round((begin_s + (end_s - begin_s) * m.step / steps) * 1e9))
        peer = {SWITCH: SWITCH_PORT, IB_SWITCH: IB_SWITCH_PORT}.get(m.dst, m.dst)
        route = route_of(links)
        ids = []
        for k in range(count):
            size = min(chunk_bytes, m.nbytes - k * chunk_bytes) if m.nbytes else 0
            if size <= 0:
                continue
            ids.append(next_id)
            records.append(TraceRecord.grad(gpu=m.src, peer=peer, id=next_id, time_ns=issue_ns,
                                            bytes=size, algo=algo, bucket=bucket & 0xFFFF,
                                            chunk=(m.chunk * 4096 + k) & 0xFFFF,
                                            job=job, route=route,
                                            dependencies=piece_dependencies(m, k, piece_ids)))
            next_id += 1
        piece_ids.append(ids)
    return records


def _check_piece(nbytes):
    """Refuse a message piece larger than a record's 32-bit bytes field."""
    if nbytes > MAX_FIELD:
        raise ModelInputError(f"a message piece of {nbytes} bytes does not fit in a trace "
                              f"record's bytes field (at most {MAX_FIELD}): use smaller pieces")


def _count_records(result, gpus_of_class, messages, n_gpus, chunk_bytes, p2p_bytes):
    """How many records :func:`generate_trace` makes of ``result``, without making them
    (``messages(nbytes)``: a bucket's messages with their links)."""
    count = sum(len(gpus_of_class[e[0]]) for e in result.timeline)
    if p2p_bytes > 0 and any(e[1] == "compute" and e[5] == "bwd" for e in result.timeline):
        count += n_gpus * -(-p2p_bytes // chunk_bytes)
    for nbytes in result.bucket_bytes:
        count += sum(-(-m.nbytes // chunk_bytes) for m, _ in messages(nbytes)
                     if m.src != SWITCH)
    return count
