"""The per-point metrics of docs/metrics.md, one function per row.

Each function takes plain inputs — the GPU model's :class:`sim.gpu.iteration.IterationResult`
(``gpu``), a :class:`sim.replay.result.ReplayResult` of the fast model (``replay``), the trace
records by id (``records_by_id``: record id → :class:`sim.trace.format.TraceRecord`) and the
real nanoseconds one simulated cycle stands for (``cycle_ns``, docs/metrics.md, "Time
mapping") — and returns one number. :func:`sim.experiment.point.run_point` only runs the models
and calls these.

Units: ``_ms`` and ``_ns`` are real milliseconds and nanoseconds; ``_cycles`` are simulated
switch cycles, counted from the first cycle of the replay; a fraction is a plain ratio.

Times in ns are converted to ms by dividing by 10^6 at the end (not by computing in ms from
the start), so the reported values are bit-for-bit those of the earlier inline code.
"""

from sim.trace.format import GRAD, MEM

__all__ = [
    "allreduce_ms",
    "backprop_alone_ms",
    "backprop_ms",
    "backprop_slowdown",
    "bucket_windows_cycles",
    "critical_link_delay_ns",
    "critical_ops",
    "critical_wait_alone_ns",
    "exposed_comm_ms",
    "gradient_messages",
    "gradient_window_cycles",
    "iteration_ms",
    "link_utilization",
    "p2p_delivery_cycles",
    "p2p_link_delay_ns",
    "rtl_agreement",
    "rtl_errors",
    "slot_occupancy",
    "slowdown_hbm",
    "slowdown_l2",
    "slowdown_link",
    "slowdown_sm",
    "stall_cycles",
]


# -- what the replay delivered ---------------------------------------------------------------

def gradient_messages(replay, records_by_id):
    """The replay's messages that carry a gradient (``grad``) record.

    Parameters
    ----------
    replay : ReplayResult
    records_by_id : Mapping[int, TraceRecord]
        Every record the replayed plan was built from, by record id.

    Returns
    -------
    list of sim.replay.plan.Message
        In plan order.
    """
    return [m for m in replay.plan.messages if records_by_id[m.record].rtype == GRAD]


def gradient_window_cycles(replay, records_by_id):
    """The cycles the gradient traffic occupied the switch.

    Returns
    -------
    (int, int)
        ``(first, last)``: the cycle the first packet of the earliest gradient message entered
        the switch, and the cycle the last gradient message was complete (its last packet or
        reduction result out). Both 0 when there is no gradient traffic; a message without
        packets does not count for ``first``, one never completed does not count for
        ``last``.
    """
    grads = gradient_messages(replay, records_by_id)
    first = min((int(replay.inject[m.packets[0]]) for m in grads if m.packets), default=0)
    last = max((replay.message_done.get(m.mid, 0) for m in grads), default=0)
    return first, last


def bucket_windows_cycles(replay, records_by_id):
    """Per gradient bucket, the cycles from the bucket being ready to send to its all-reduce
    being done.

    A bucket is ready at the issue cycle of its earliest message (the GPU model's start of
    the bucket's collective, docs/metrics.md). The window starts there, not when a first
    packet entered the switch: a bucket queued at its GPUs behind other traffic (the
    pipeline-stage writes) is all-reduce time too. Counted from the first packet in, adding
    2 GiB of such traffic per GPU made BERT-large's ring all-reduce 11 % *shorter* (buckets
    held back at the GPUs then ran together, filling each other's gaps; docs/metrics.md,
    "Two results that look wrong").

    Returns
    -------
    dict
        bucket → ``(ready, last)``: the earliest issue cycle of the bucket's messages, and the
        latest cycle one of them was complete. Messages without packets or never completed
        are left out (a bucket with none is absent).
    """
    windows = {}
    for m in gradient_messages(replay, records_by_id):
        if m.packets and m.mid in replay.message_done:
            bucket = records_by_id[m.record].bucket
            lo, hi = windows.get(bucket, (1 << 62, -1))
            windows[bucket] = (min(lo, m.issue), max(hi, replay.message_done[m.mid]))
    return windows


def p2p_delivery_cycles(replay, records_by_id):
    """Per sending GPU, the cycle its last point-to-point packet was delivered.

    Point-to-point traffic is the trace's ``mem`` write records (the pipeline-stage traffic
    backprop waits on, docs/metrics.md).

    Returns
    -------
    dict
        GPU → cycle its last delivered ``MEM_WRITE`` packet of a ``mem`` record left the
        switch. GPUs with no delivered packet are absent.
    """
    done = {}
    plan = replay.plan
    for pid in range(plan.packets):
        m = plan.messages[int(plan.msg[pid])]
        if m.kind.name == "MEM_WRITE" and replay.deliver[pid] >= 0 and \
                records_by_id[m.record].rtype == MEM:
            done[m.src] = max(done.get(m.src, 0), int(replay.deliver[pid]))
    return done


def p2p_link_delay_ns(with_gradients, alone, records_by_id, cycle_ns):
    """The link delay backprop sees: how much later the point-to-point traffic arrives when it
    shares the switch with the gradients.

    Parameters
    ----------
    with_gradients : ReplayResult
        The whole trace replayed (gradients and point-to-point traffic).
    alone : ReplayResult
        Only the point-to-point records replayed.
    records_by_id : Mapping[int, TraceRecord]
    cycle_ns : float
        Real ns per simulated cycle.

    Returns
    -------
    float
        ns: over the GPUs whose point-to-point traffic was delivered in ``with_gradients``, the
        largest (last delivery with gradients − last delivery alone) × ``cycle_ns``; a GPU
        missing from ``alone`` counts as no delay. Never negative; 0.0 without
        point-to-point deliveries.
    """
    shared = p2p_delivery_cycles(with_gradients, records_by_id)
    if not shared:
        return 0.0
    own = p2p_delivery_cycles(alone, records_by_id)
    delay = max((shared[g] - own.get(g, shared[g])) * cycle_ns for g in shared)
    return max(0.0, delay)


def critical_ops(replay, records_by_id):
    """The operations backprop waits on: the replay's messages of ``critical`` mem records,
    grouped by (waiting GPU, traffic class, issue time in the trace). The waiting GPU is a
    write's receiver and a read's requester; the messages of one operation (the pieces of a
    message, the shards of an all-gather) share their issue time (:mod:`sim.trace.traffic`).

    Returns
    -------
    dict
        ``(gpu, traffic, time_ns)`` → ``(issue, done)``: the earliest issue cycle of its
        messages and the cycle the last was complete (a read: its response delivered).
        Operations with a message never completed are left out.
    """
    ops, broken = {}, set()
    for m in replay.plan.messages:
        r = records_by_id.get(m.record)
        if r is None or r.rtype != MEM or not r.critical or m.response_to >= 0:
            continue
        waiter = r.gpu if r.mem_op == "read" else r.peer
        key = (waiter, r.traffic, r.time_ns)
        done = replay.message_done.get(m.mid)
        if done is None:
            broken.add(key)
            continue
        lo, hi = ops.get(key, (1 << 62, -1))
        ops[key] = (min(lo, m.issue), max(hi, done))
    return {k: v for k, v in ops.items() if k not in broken}


def _waits(ops):
    """Per waiting GPU, ``{key: cycles}`` of each operation's wait (issue to done, inclusive)."""
    out = {}
    for key, (issue, done) in ops.items():
        out.setdefault(key[0], {})[key] = done - issue + 1
    return out


def critical_link_delay_ns(with_gradients, alone, records_by_id, cycle_ns):
    """The link delay backprop sees: what sharing the switch with the gradients adds to the
    waits on the critical operations (:func:`critical_ops`), summed along each GPU's backward
    pass (it waits on them one after the other), the largest over GPUs.

    Each operation is issued at its undelayed time in both replays, so a delay is not carried
    into the next operation's issue (first order: each operation sees the contention of its
    own moment). An operation missing from either replay counts as no delay.

    Returns
    -------
    float
        ns, never negative; 0.0 without critical traffic.
    """
    shared = _waits(critical_ops(with_gradients, records_by_id))
    own = _waits(critical_ops(alone, records_by_id))
    delay = 0
    for gpu, waits in shared.items():
        base = own.get(gpu, {})
        delay = max(delay, sum(c - base.get(k, c) for k, c in waits.items()))
    return max(0.0, delay * cycle_ns)


def critical_wait_alone_ns(alone, records_by_id, cycle_ns):
    """``critical_wait_alone_ms`` × 10^6: how long backprop waits on the critical operations
    with no gradients in the switch (their own transfer time), summed per GPU, the largest
    over GPUs; ns. Not part of the GPU model's backward pass (which simulates the
    data-parallel iteration alone), so it is reported beside it, not added to it."""
    waits = _waits(critical_ops(alone, records_by_id))
    return max((sum(w.values()) for w in waits.values()), default=0) * cycle_ns


# -- rows of the per-point table -------------------------------------------------------------

def backprop_alone_ms(gpu):
    """``backprop_alone_ms``: the backward pass with no collective running, ms (GPU model)."""
    return gpu.backward_alone_s * 1e9 / 1e6


def backprop_ms(gpu, link_delay_ns):
    """``backprop_ms``: the backward pass overlapped with the all-reduce, ms — the GPU model's
    overlapped backward time plus ``link_delay_ns`` (:func:`p2p_link_delay_ns`)."""
    return (gpu.backward_s * 1e9 + link_delay_ns) / 1e6


def backprop_slowdown(gpu, link_delay_ns):
    """``backprop_slowdown``: ``backprop_ms / backprop_alone_ms − 1``, a fraction; equals
    ``slowdown_sm + slowdown_hbm + slowdown_l2 + slowdown_link`` when the GPU model's attribution is
    complete."""
    return (gpu.backward_s * 1e9 + link_delay_ns) / (gpu.backward_alone_s * 1e9) - 1


def slowdown_sm(gpu):
    """``slowdown_sm``: backward time lost to SMs held by collective kernels, a fraction of
    the backward pass alone (GPU model; 0.0 when it attributes nothing to SMs)."""
    return gpu.slowdown_attribution.get("sm", 0.0)


def slowdown_hbm(gpu):
    """``slowdown_hbm``: backward time lost to HBM bandwidth taken by collective kernels, a
    fraction of the backward pass alone (GPU model; 0.0 when it attributes nothing to HBM)."""
    return gpu.slowdown_attribution.get("hbm", 0.0)


def slowdown_l2(gpu):
    """``slowdown_l2``: backward time lost to L2 pollution, the kernels' working sets evicted by
    the collective's traffic and read from HBM again, a fraction of the backward pass alone (GPU
    model; 0.0 when it attributes nothing to L2)."""
    return gpu.slowdown_attribution.get("l2", 0.0)


def slowdown_link(gpu, link_delay_ns):
    """``slowdown_link``: ``link_delay_ns`` (:func:`p2p_link_delay_ns`) as a fraction of the
    backward pass alone."""
    return link_delay_ns / (gpu.backward_alone_s * 1e9)


def allreduce_ms(replay, records_by_id, cycle_ns):
    """``allreduce_ms``: the union over buckets of [bucket ready to send, last piece or
    result out] (:func:`bucket_windows_cycles`), ms. A cycle covered by several buckets'
    windows counts once; both ends of a window are inclusive."""
    total_ns, reach = 0.0, -1
    for lo, hi in sorted(bucket_windows_cycles(replay, records_by_id).values()):
        lo = max(lo, reach + 1)
        if hi >= lo:
            total_ns += (hi - lo + 1) * cycle_ns
        reach = max(reach, hi)
    return total_ns / 1e6


def _backward_end_ns(gpu, link_delay_ns):
    """End of the link-delayed backward pass, ns from the start of the iteration."""
    return (gpu.forward_s + gpu.backward_s) * 1e9 + link_delay_ns


def exposed_comm_ms(gpu, link_delay_ns, last_gradient_cycle, cycle_ns):
    """``exposed_comm_ms``: last gradient delivery − end of the (link-delayed) backward pass,
    ms, or 0.0 if the gradients were done first.

    Parameters
    ----------
    gpu : IterationResult
        ``forward_s`` and ``backward_s`` place the end of the backward pass.
    link_delay_ns : float
    last_gradient_cycle : int
        Cycle the last gradient message was complete (:func:`gradient_window_cycles`); the
        replay's cycle 0 is the start of the iteration.
    cycle_ns : float
    """
    return max(0.0, last_gradient_cycle * cycle_ns - _backward_end_ns(gpu, link_delay_ns)) / 1e6


def iteration_ms(gpu, link_delay_ns, last_gradient_cycle, cycle_ns):
    """``iteration_ms``: max(end of the link-delayed backward pass, last gradient delivery) +
    the optimizer step, ms. Parameters as :func:`exposed_comm_ms`; ``gpu.optimizer_s`` is the
    step."""
    end_ns = max(_backward_end_ns(gpu, link_delay_ns), last_gradient_cycle * cycle_ns)
    return (end_ns + gpu.optimizer_s * 1e9) / 1e6


def link_utilization(replay, first_cycle, last_cycle):
    """``link_utilization`` and ``link_utilization_max``: egress flits / cycles of the gradient
    window [``first_cycle``, ``last_cycle``] (:func:`gradient_window_cycles`; at least one
    cycle), per port.

    Returns
    -------
    (float, float)
        The mean over ports and the busiest port's, fractions (above 1 when the window does
        not cover all the port's traffic).
    """
    window = max(last_cycle - first_cycle + 1, 1)
    util = [f / window for f in replay.egress_flits]
    return sum(util) / len(util), max(util)


def stall_cycles(replay):
    """``stall_cycles``: sum over ingress ports of the cycles a GPU had a flit but the switch
    refused it."""
    return sum(int(s) for s in replay.stall_cycles)


def slot_occupancy(replay):
    """``slot_peak`` and ``slot_mean``: reduction chunks in flight (first contribution in →
    last result out), an upper bound on the slots held.

    Returns
    -------
    (int, float)
        Peak and time-averaged chunks; the mean rounded to 3 decimals, as
        :meth:`ReplayResult.summary` reports it.
    """
    return int(replay.slot_peak), round(replay.slot_mean, 3)


def rtl_errors(errors):
    """``rtl_errors``: packets the RTL switch dropped over its window, the sum of its drop
    counters (``errors``: counter name → count; must come to 0)."""
    return sum(errors.values())


def rtl_agreement(validation):
    """``rtl_exact_fraction``, ``rtl_mae_fraction``, ``rtl_makespan_error``: the RTL window's
    model-vs-RTL agreement, fractions.

    Parameters
    ----------
    validation : dict
        An RTL window's result: :func:`sim.replay.result.compare`'s keys (``exact``,
        ``deliveries``, ``mae_fraction``, ``makespan_error``) and more.

    Returns
    -------
    dict
        ``rtl_exact_fraction`` = deliveries at equal cycles / deliveries compared (0 when
        nothing was compared); the other two as ``compare`` reports them, ``None`` if absent.
    """
    return {"rtl_exact_fraction": (validation.get("exact", 0) /
                                   max(validation.get("deliveries", 1), 1)),
            "rtl_mae_fraction": validation.get("mae_fraction"),
            "rtl_makespan_error": validation.get("makespan_error")}
