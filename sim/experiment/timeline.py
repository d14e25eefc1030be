"""A point's timeline as Chrome trace events (the Trace Event Format: ``timeline.json`` opens in
Perfetto UI and chrome://tracing; docs/metrics.md, "Timeline").

Per GPU a process with two threads: the compute stream (every kernel of the GPU model, a
kernel slowed by a collective running beside it marked with its slowdown and cause) and the
communication stream (every collective, with its bucket's bytes and its window in the
switch); with contending traffic, each wait of the GPU on critical messages as an async event
(what the gradients added to it in its args). The switch is a process of its own with a counter track per egress port: the
fraction of cycles it sent a flit, per time bin. Times are µs from the start of the iteration.
"""

__all__ = ["point_events", "trace_events", "chrome_trace", "COMPUTE_TID", "COMM_TID", "SWITCH_BINS"]

COMPUTE_TID, COMM_TID = 0, 1
#: Time bins of a switch port's utilization counter over the replay.
SWITCH_BINS = 200


def _alone_s(gpu, workload):
    """Each compute kernel's time with nothing beside it, s (the GPU model's roofline)."""
    from sim.gpu.contention import KernelSpec, kernel_time
    out = {}
    for layer in workload.layers:
        conv = layer.kind == "conv"
        out[f"fwd:{layer.name}"] = kernel_time(gpu, KernelSpec(layer.name, layer.fwd_flops,
                                                               layer.fwd_bytes,
                                                               layer.tensor_core, conv))
        out[f"bwd:{layer.name}"] = kernel_time(gpu, KernelSpec(layer.name, layer.bwd_flops,
                                                               layer.bwd_bytes,
                                                               layer.tensor_core, conv))
    return out


def point_events(result, gpu, workload, replay, bucket_windows, cycle_ns, critical=None):
    """The trace events of one point, without process names (:func:`chrome_trace` adds them).

    Parameters
    ----------
    result : IterationResult
        Simulated with ``record=True`` (its ``timeline`` and ``classes``).
    gpu, workload
        The preset and the workload the iteration ran.
    replay : ReplayResult
        The fast model's replay of the point's trace.
    bucket_windows : dict
        Bucket → (ready, done) cycles (:func:`sim.experiment.metrics.bucket_windows_cycles`).
    cycle_ns : float
    critical : (dict, dict), optional
        The critical operations (:func:`sim.experiment.metrics.critical_ops`) of the replay
        with the gradients and of the one without: each becomes an async event (``ph`` ``b``
        and ``e``, category ``critical``, on the GPU that waits) from its issue to its
        delivery, with its wait alone and the delay the gradients added in ``args``.

    Returns
    -------
    dict
        ``{"gpus": {gpu: [event, ...]}, "switch": [event, ...]}``; events as the Trace Event
        Format's, without ``pid``.
    """
    alone = _alone_s(gpu, workload)
    per_class = {}
    for ci, stream, name, start, end, tag, hbm in result.timeline:
        per_class.setdefault(ci, []).append((stream, name, start, end, tag, hbm))
    comm_spans = {ci: [(s, e, n) for st, n, s, e, _, _ in ev if st == "comm"]
                  for ci, ev in per_class.items()}
    gpus = {}
    for ci, members in enumerate(result.classes.values()):
        events = []
        for stream, name, start, end, tag, hbm in per_class.get(ci, []):
            ev = {"ph": "X", "name": name, "ts": start * 1e6, "dur": (end - start) * 1e6,
                  "tid": COMPUTE_TID if stream == "compute" else COMM_TID}
            if stream == "compute":
                args = {"phase": tag, "hbm_bytes": hbm}
                base = alone.get(name)
                beside = [n for s, e, n in comm_spans.get(ci, []) if s < end and e > start]
                if base and beside and end - start > base * (1 + 1e-9):
                    args.update(slowdown=(end - start) / base - 1, alone_us=base * 1e6,
                                cause="SM and HBM shared with " + ", ".join(beside))
                ev["args"] = args
            else:
                args = {"bucket": tag, "bytes": result.bucket_bytes[tag]
                        if tag < len(result.bucket_bytes) else None, "hbm_bytes": hbm}
                if tag in bucket_windows:
                    lo, hi = bucket_windows[tag]
                    args.update(switch_ready_us=lo * cycle_ns / 1e3,
                                switch_done_us=hi * cycle_ns / 1e3)
                ev["args"] = args
            events.append(ev)
        for g in members:
            gpus[int(g)] = list(events)
    if critical:
        shared, alone_ops = critical
        for n, (key, (issue, done)) in enumerate(sorted(shared.items())):
            waiter, traffic, _ = key
            wait = done - issue + 1
            base = alone_ops.get(key)
            args = {"traffic": traffic, "wait_us": wait * cycle_ns / 1e3}
            if base is not None:
                alone_wait = base[1] - base[0] + 1
                args.update(alone_wait_us=alone_wait * cycle_ns / 1e3,
                            delay_us=(wait - alone_wait) * cycle_ns / 1e3)
            common = {"cat": "critical", "id": n, "name": f"{traffic} wait",
                      "tid": COMPUTE_TID}
            gpus.setdefault(int(waiter), []).extend([
                dict(common, ph="b", ts=issue * cycle_ns / 1e3, args=args),
                dict(common, ph="e", ts=(done + 1) * cycle_ns / 1e3)])
    return {"gpus": gpus, "switch": _port_counters(replay, cycle_ns)}


def _port_counters(replay, cycle_ns):
    """Per egress port, a counter of the fraction of each time bin's cycles it sent a flit."""
    plan = replay.plan
    cycles = max(int(replay.cycles), 1)
    width = max(1, -(-cycles // SWITCH_BINS))
    bins = -(-cycles // width)
    ports = plan.config.ports
    busy = [[0] * bins for _ in range(ports)]
    for pid in range(plan.packets):
        d, t = int(plan.dst[pid]), int(replay.deliver[pid])
        if d >= 0 and t >= 0:
            busy[d][min(t // width, bins - 1)] += int(plan.flits[pid])
    for (port, _seq), t in replay.results.items():
        busy[port][min(int(t) // width, bins - 1)] += plan.config.chunk_flits
    events = []
    for d in range(ports):
        for b in range(bins):
            events.append({"ph": "C", "name": f"port {d} egress utilization",
                           "ts": b * width * cycle_ns / 1e3,
                           "args": {"utilization": min(1.0, busy[d][b] / width)}})
    return events


def chrome_trace(points):
    """The Trace Event Format document of ``points`` (a list of ``(label, events)``, events as
    :func:`point_events` returns): a process per GPU and one for the switch per point, named
    ``<label> GPU g`` and ``<label> switch``."""
    out = []
    pid = 0
    for label, events in points:
        for g in sorted(events["gpus"], key=int):
            pid += 1
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"{label} GPU {g}"}})
            for tid, name in ((COMPUTE_TID, "compute stream"), (COMM_TID, "communication stream")):
                out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": name}})
            out += [dict(ev, pid=pid) for ev in events["gpus"][g]]
        pid += 1
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": f"{label} switch"}})
        out += [dict(ev, pid=pid, tid=0) for ev in events["switch"]]
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def trace_events(records, replay, cycle_ns):
    """The events of a replayed trace (``innet replay``): per GPU its kernel records, compute
    kernels on the compute stream and collective kernels (phase ``comm``) on the
    communication stream (a trace names no kernel, so each is named by its phase), and the
    switch's per-port utilization counters (:func:`point_events`'s layout)."""
    from sim.trace.format import KERNEL
    gpus = {g: [] for g in range(int(replay.plan.gpus))}
    for r in records:
        if r.rtype != KERNEL:
            continue
        comm = r.phase == "comm"
        gpus.setdefault(r.gpu, []).append({
            "ph": "X", "name": "collective" if comm else r.phase, "ts": r.start_ns / 1e3,
            "dur": r.duration_ns / 1e3, "tid": COMM_TID if comm else COMPUTE_TID,
            "args": {"phase": r.phase, "sms": r.sms, "hbm_kib": r.hbm_kib}})
    return {"gpus": gpus, "switch": _port_counters(replay, cycle_ns)}
