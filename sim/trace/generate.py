"""Generating GPU traces from the iteration model (``innet trace gen``)."""

from dataclasses import replace

from sim.gpu.collectives import SWITCH, expand_collective
from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.trace.format import PHASES, SWITCH_PORT, TraceRecord

__all__ = ["generate_trace"]

MiB = 1 << 20


def generate_trace(workload, gpu, n_gpus, algo="ring", bucket_mb=25.0, chunk_bytes=64 * 1024,
                   job=0, config=None, p2p_bytes=0):
    """Simulate one iteration and describe it as trace records.

    Per GPU: a kernel record for every compute kernel and every collective kernel (with the SMs
    and HBM bytes it used), and grad records for the collective's messages: the expansion of
    :func:`sim.collectives.expand_collective`, each message cut into pieces of at most
    ``chunk_bytes``. Piece k of a message depends on piece k of the message it waited for, so a
    replay may pipeline pieces as the hardware does. Times are the model's (open-loop issue
    times); the dependencies carry the closed-loop constraints.

    With ``p2p_bytes``, every GPU g also writes that many bytes to GPU (g+1) mod n when the
    middle backward kernel ends (activation gradients crossing a pipeline-stage boundary), as
    mem records of at most ``chunk_bytes`` each, sharing the links with the gradients.

    Returns ``(metadata, records, result)``.
    """
    if n_gpus < 2:
        raise ValueError(f"a data-parallel trace needs at least 2 GPUs, not {n_gpus}")
    if chunk_bytes < 1:
        raise ValueError(f"chunk size must be positive, not {chunk_bytes}")
    config = config or IterationConfig(n_gpus=n_gpus, algo=algo,
                                       bucket_cap_bytes=int(bucket_mb * MiB))
    result = simulate_iteration(workload, gpu, config, record=True)
    gpus_of_class = [result.classes[key] for key in result.classes]
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
                                              duration_ns=min(dur_ns, 0xFFFFFFFF), phase=phase,
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
                        records.append(TraceRecord.mem(gpu=g, peer=(g + 1) % n_gpus, id=new_id(),
                                                       time_ns=boundary_ns, bytes=size,
                                                       op="write", tag=k & 0xFFFF, job=job))
    records.sort(key=lambda r: (r.time_ns, r.gpu))
    records = [replace(r, id=i) for i, r in enumerate(records)]   # ids in time order
    next_id = len(records)

    for bucket, nbytes in enumerate(result.bucket_bytes):
        begin, end = comm_windows.get(bucket, (0.0, 0.0))
        messages = expand_collective(config.algo, n_gpus, nbytes)
        steps = max(m.step for m in messages) + 1
        piece_ids = []   # per message: ids of its pieces
        for m in messages:
            if m.src == SWITCH:
                # Results are the switch's output, not a GPU's: a replay produces them.
                piece_ids.append([])
                continue
            count = max(1, -(-m.nbytes // chunk_bytes))
            issue_ns = int(round((begin + (end - begin) * m.step / steps) * 1e9))
            ids = []
            for k in range(count):
                size = min(chunk_bytes, m.nbytes - k * chunk_bytes) if m.nbytes else 0
                if size <= 0:
                    continue
                dep = None
                if m.dep >= 0:
                    dep_pieces = piece_ids[m.dep]
                    dep = dep_pieces[min(k, len(dep_pieces) - 1)] if dep_pieces else None
                rid = new_id()
                ids.append(rid)
                peer = SWITCH_PORT if m.dst == SWITCH else m.dst
                records.append(TraceRecord.grad(gpu=m.src, peer=peer, id=rid, time_ns=issue_ns,
                                                bytes=size, algo=config.algo,
                                                bucket=bucket & 0xFFFF,
                                                chunk=(m.chunk * 4096 + k) & 0xFFFF,
                                                dependency=dep, job=job))
            piece_ids.append(ids)
    meta = {"gpus": n_gpus, "model": workload.name, "batch": workload.batch, "gpu": gpu.name,
            "algo": config.algo, "bucket_cap_bytes": config.bucket_cap_bytes,
            "chunk_bytes": chunk_bytes, "iteration_s": result.iteration_s,
            "p2p_bytes": p2p_bytes,
            "generator": "innet trace gen"}
    return meta, records, result
