"""One point of an experiment (``innet run``, ``innet sweep``): the GPU model, the fast switch
model's closed-loop replay and, optionally, an RTL window, and the metrics of docs/metrics.md.

One **point** is (workload, bucket size, algorithm, arbiter policy, traffic). For each point:

1. the GPU model simulates one data-parallel iteration (SM and HBM contention between backprop
   and the all-reduce kernels) and writes its trace, with the traffic that shares the links:
   for ``dp`` the pipeline-stage point-to-point write (``p2p_mb`` per GPU) that backprop waits
   on, for ``pp``, ``tp``, ``fsdp``, ``offload`` that kind of traffic (:mod:`sim.trace.traffic`),
   its critical messages marked;
2. the fast switch model replays the whole trace closed-loop; a second replay carries only
   the memory traffic, so the difference in the critical waits is the link contention
   backprop sees (:func:`sim.experiment.metrics.critical_link_delay_ns`);
3. with ``rtl = true``, the first bucket window (its gradient messages and the memory traffic
   issued meanwhile) is replayed through the RTL switch under cocotb and through the model,
   and their per-packet delivery cycles are compared.

The metrics themselves are the functions of :mod:`sim.experiment.metrics`; this module only
runs the models and hands their results to them."""

from dataclasses import dataclass, field, replace

from sim.experiment import metrics
from sim.experiment.config import MiB

__all__ = ["PointResult", "run_point", "rtl_config", "rtl_switch_label", "real_switch",
           "validate_window"]


@dataclass
class PointResult:
    workload: str
    bucket_mb: float
    algo: str
    policy: str
    metrics: dict
    timeline: dict = field(default_factory=dict)
    validation: dict = field(default_factory=dict)
    traffic: str = "dp"

    @property
    def key(self):
        """The point's place in :func:`sim.experiment.config.points`."""
        return (self.workload, self.bucket_mb, self.algo, self.policy, self.traffic)


def _replay_config(config, policy, gpu, flit_scale):
    """The replay's switch: the experiment's [switch] (its wrr weights and drr quantum, 0
    for one chunk, included) with ``flit_scale`` real flits per simulated one, the GPUs one
    NVLink hop (the GPU model's ``link_latency_s``) away."""
    from sim.replay.config import ReplayConfig
    return ReplayConfig(ports=config.gpus, lanes=config.lanes, slots=config.slots,
                        chunk_flits=config.chunk_flits, policy=policy,
                        mtu_flits=config.mtu_flits, link_gbps=gpu.link_gbps,
                        flit_scale=flit_scale, dtype="fp32",
                        link_latency_ns=gpu.link_latency_s * 1e9,
                        mem_weight=config.mem_weight, result_weight=config.result_weight,
                        quantum_flits=config.quantum_flits or None)


def real_switch(config):
    """The experiment's [switch] at its real size (flit scale 1: ``4 × lanes``-byte flits,
    ``slots`` chunks of ``chunk_flits`` flits), one port per GPU: the switch the GPU model
    times the ``inswitch`` collectives on (:func:`sim.gpu.in_switch.switch_timing`), so that
    the GPU model and the replay describe one switch. The replay's is the same one with its
    flits scaled (:func:`_replay_config`), which multiplies its slot memory by the flit
    scale: the slot pool's limit (slots × chunk per round trip) shows at flit scale 1 only."""
    from sim.gpu.in_switch import make_switch
    return make_switch(config.gpus, config.slots, config.chunk_flits, config.lanes)


def run_point(config, workload_name, bucket_mb, algo, policy, traffic="dp", rtl_dir=None):
    """Run one point; returns a :class:`PointResult` (plain data, picklable for a pool)."""
    from sim.gpu.iteration import IterationConfig, simulate_iteration
    from sim.gpu.presets import gpu_preset
    from sim.gpu.workloads import build_workload
    from sim.model.switch import replay_model
    from sim.replay.plan import build_plan, scale_for
    from sim.trace.format import MEM
    from sim.trace.generate import generate_trace

    gpu = gpu_preset(config.gpu)
    workload = build_workload(workload_name)
    n = config.gpus
    p2p_bytes = int(config.p2p_mb * MiB) if traffic == "dp" else 0
    kinds = () if traffic == "dp" else (traffic,)
    it_config = IterationConfig(n_gpus=n, algo=algo, bucket_cap_bytes=int(bucket_mb * MiB),
                                switch=real_switch(config))
    alone = simulate_iteration(workload, gpu, it_config)
    # The gradient bytes one GPU puts on its link in the iteration set the flit scale; the
    # point-to-point traffic does not, so a sweep over p2p_mb keeps one time resolution
    # (docs/metrics.md, "Time mapping").
    flit_scale = scale_for(2 * sum(alone.bucket_bytes), config.lanes, config.target_flits)
    rcfg = _replay_config(config, policy, gpu, flit_scale)
    # Trace pieces of one MTU, so no piece rounds up to a mostly empty packet.
    meta, records, result = generate_trace(workload, gpu, n, algo=algo, bucket_mb=bucket_mb,
                                           chunk_bytes=rcfg.flit_bytes * config.mtu_flits,
                                           config=it_config, p2p_bytes=p2p_bytes,
                                           traffic=kinds)
    plan = build_plan(meta, records, rcfg, path=f"{workload_name}/{algo}")
    replay = replay_model(plan)
    records_by_id = {r.id: r for r in records}
    cycle_ns = rcfg.cycle_ns
    # Link delay: the memory traffic replayed with the gradients and alone.
    link_delay_ns = wait_alone_ns = 0.0
    critical = None
    mem_records = [r for r in records if r.rtype == MEM]
    if mem_records:
        alone_replay = replay_model(build_plan(meta, mem_records, rcfg))
        link_delay_ns = metrics.critical_link_delay_ns(replay, alone_replay, records_by_id,
                                                       cycle_ns)
        wait_alone_ns = metrics.critical_wait_alone_ns(alone_replay, records_by_id, cycle_ns)
        critical = (metrics.critical_ops(replay, records_by_id),
                    metrics.critical_ops(alone_replay, records_by_id))

    first_grad, last_grad = metrics.gradient_window_cycles(replay, records_by_id)
    util_mean, util_max = metrics.link_utilization(replay, first_grad, last_grad)
    slot_peak, slot_mean = metrics.slot_occupancy(replay)
    values = {
        "backprop_alone_ms": metrics.backprop_alone_ms(result),
        "backprop_ms": metrics.backprop_ms(result, link_delay_ns),
        "backprop_slowdown": metrics.backprop_slowdown(result, link_delay_ns),
        "slowdown_sm": metrics.slowdown_sm(result),
        "slowdown_hbm": metrics.slowdown_hbm(result),
        "slowdown_l2": metrics.slowdown_l2(result),
        "slowdown_link": metrics.slowdown_link(result, link_delay_ns),
        "allreduce_ms": metrics.allreduce_ms(replay, records_by_id, cycle_ns),
        "exposed_comm_ms": metrics.exposed_comm_ms(result, link_delay_ns, last_grad, cycle_ns),
        "iteration_ms": metrics.iteration_ms(result, link_delay_ns, last_grad, cycle_ns),
        "critical_wait_alone_ms": wait_alone_ns / 1e6,
        "link_utilization": util_mean,
        "link_utilization_max": util_max,
        "stall_cycles": metrics.stall_cycles(replay),
        "slot_peak": slot_peak,
        "slot_mean": slot_mean,
        "packets": int(replay.plan.packets),
        "flit_scale": flit_scale,
        "cycle_ns": cycle_ns,
        "model_wall_s": replay.wall_s,
        "gpu_model_slowdown": result.backprop_slowdown,
    }
    from sim.experiment.timeline import point_events
    timeline = point_events(result, gpu, workload, replay,
                            metrics.bucket_windows_cycles(replay, records_by_id), cycle_ns,
                            critical)
    bucket, window = full_window_records(records, result, replay, records_by_id, rcfg,
                                         bucket_mb, n)
    if window:
        values.update(_full_window(config, gpu, meta, window, bucket, rcfg, result, algo))
    validation = {}
    if config.rtl:
        validation = _validate_window(config, meta, records, rcfg, result, rtl_dir)
        values["rtl_errors"] = metrics.rtl_errors(validation.get("errors", {}))
    if config.rtl_windows and window:
        full = _validate_full_window(config, meta, window, bucket, rcfg, rtl_dir)
        if full:
            validation = {**validation, "full_window": full} if validation else \
                {"full_window": full}
            values["rtl_errors"] = values.get("rtl_errors", 0) + \
                metrics.rtl_errors(full.get("errors", {}))
    return PointResult(workload_name, bucket_mb, algo, policy, values, timeline, validation,
                       traffic)


def rtl_config(rcfg, policies):
    """The switch configuration a point's RTL window replays on. Round-robin is the ``prio``
    arbiter with every priority equal (hw/arbiter.py), so when the run also has ``prio`` points
    its ``rr`` windows replay on the ``prio`` build with equal priorities: one Verilator build
    serves both policies. The model still replays ``rr``; the window's comparison checks the
    two agree delivery for delivery."""
    if rcfg.policy == "rr" and "prio" in policies:
        return replace(rcfg, policy="prio", mem_priority=0, result_priority=0)
    return rcfg


def rtl_switch_label(rtl_cfg, rcfg):
    if rtl_cfg.policy == rcfg.policy:
        return f"{rcfg.policy} build"
    return f"{rtl_cfg.policy} build, equal priorities (= {rcfg.policy})"


def _validate_window(config, meta, records, rcfg, result, rtl_dir):
    """Replay the first bucket window through the RTL and the model; compare."""
    from sim.cosim.replay import replay_rtl
    from sim.model.switch import replay_model
    from sim.replay.plan import build_plan
    from sim.replay.result import compare
    from sim.trace.format import GRAD, MEM

    grads = [r for r in records if r.rtype == GRAD and r.bucket == 0]
    if not grads:
        return {}
    begin = min(r.time_ns for r in grads)
    end = max(r.time_ns for r in grads)
    keep = {r.id for r in grads}
    mem = [r for r in records if r.rtype == MEM and begin <= r.time_ns <= end]
    window = sorted(grads + mem, key=lambda r: r.id)
    keep |= {r.id for r in mem}
    # Dependencies outside the window are already satisfied.
    window = [_within(r, keep) for r in window]
    shift = begin
    window = [replace(r, time_ns=r.time_ns - shift) for r in window]
    plan = build_plan(meta, window, rcfg)
    rtl_cfg = rtl_config(rcfg, config.policies)
    # A bucket window is a few thousand cycles: a quick (-O0) build beats a fast model.
    rtl_plan = plan if rtl_cfg == rcfg else build_plan(meta, window, rtl_cfg)
    rtl = replay_rtl(rtl_plan, config.sim, build_dir=rtl_dir, quiet=True, optimize=False)
    model = replay_model(plan)
    agreement = compare(rtl, model)
    return {"window": "bucket 0", "rtl_policy": rtl_cfg.policy,
            "rtl_switch": rtl_switch_label(rtl_cfg, rcfg),
            "packets": plan.packets, "rtl_cycles": rtl.cycles,
            "model_cycles": model.cycles, "rtl_wall_s": rtl.wall_s,
            "model_wall_s": model.wall_s, "errors": rtl.errors,
            "mismatches": rtl.mismatches, **agreement}


def _within(rec, keep):
    """``rec`` waiting only for the records of ``keep``: those outside the window are already
    satisfied."""
    deps = rec.dependencies
    return rec if all(d in keep for d in deps) else rec.with_dependencies(
        d for d in deps if d in keep)


def _full_bucket(result, bucket_mb):
    """A full bucket: the first of the size closest to ``bucket_mb`` MiB (DDP's first bucket
    is smaller, and a bucket holding one large tensor, an embedding, is larger)."""
    sizes = list(result.bucket_bytes)
    if not sizes:
        return None
    cap = bucket_mb * MiB
    return min(range(len(sizes)), key=lambda b: (abs(sizes[b] - cap), b))


def full_window_records(records, result, replay, records_by_id, rcfg, bucket_mb, gpus):
    """The records of a point's first full bucket window, for a replay at flit scale 1: that
    bucket's all-reduce and every memory message issued from its first gradient issue to the
    end of its all-reduce in the point's (flit-scaled) replay, times shifted to start at 0,
    memory dependencies outside the window dropped (already satisfied). Returns
    ``(bucket, records)`` or ``(None, [])``. ``gpus``: the GPUs of the one-node all-reduce.

    The bucket's gradient messages are made again (:func:`sim.trace.generate.
    collective_records`), not taken from the trace, for two reasons. Their pieces: the trace's
    are one MTU of the flit-scaled switch (tens of megabytes, a whole ring step in one piece),
    which at flit scale 1 would make every ring step and tree level store-and-forward; here
    they are one MTU of the real switch, so they pipeline as NCCL's chunks do. Their issue
    times: the trace spreads a ring's 2(n−1) steps over the iteration's collective kernel,
    slowed by backprop's SM and HBM contention (BERT-large's 20 MiB ring: 351.8 µs against
    207.0 µs alone), and the replay waits for each step's time, so it would only echo that
    kernel. Here they all leave at 0 and only their dependencies pace them, as the in-switch
    contributions (one step) always did: the window times the switch's all-reduce alone, the
    one the GPU model's ``window_gpu_model_us`` times."""
    from sim.gpu.collectives import expand_collective
    from sim.trace.format import GRAD, MEM
    from sim.trace.generate import collective_records

    bucket = _full_bucket(result, bucket_mb)
    grads = [r for r in records if r.rtype == GRAD and r.bucket == bucket]
    if not grads:
        return None, []
    begin = min(r.time_ns for r in grads)
    end = max(r.time_ns for r in grads)
    window = metrics.bucket_windows_cycles(replay, records_by_id).get(bucket)
    if window:
        end = max(end, window[1] * rcfg.cycle_ns)
    mem = [r for r in records if r.rtype == MEM and begin <= r.time_ns <= end]
    keep = {r.id for r in mem}
    mem = [replace(_within(r, keep), time_ns=r.time_ns - begin) for r in mem]
    messages = expand_collective(grads[0].algo, gpus, result.bucket_bytes[bucket])
    piece = replace(rcfg, flit_scale=1).flit_bytes * rcfg.mtu_flits
    if grads[0].to_switch:
        # the replay groups contributions by (bucket, chunk field), which holds a piece's
        # index in 16 bits: whole MTUs enough for at most 65,536 pieces per contribution
        largest = max(m.nbytes for m in messages)
        piece *= max(1, -(-largest // (65536 * piece)))
    first_id = max(r.id for r in records) + 1
    chosen = collective_records([(m, ("nvlink",)) for m in messages], piece, 0.0, 0.0,
                                first_id, grads[0].algo, bucket, grads[0].job)
    return bucket, sorted(mem, key=lambda r: r.id) + chosen


def _full_window(config, gpu, meta, window, bucket, rcfg, result, algo):
    """The first full bucket window replayed by the fast model at flit scale 1 (the switch's
    real flits, chunks and slot memory, the 350 ns hop in whole cycles), where the slot pool's
    bandwidth-delay product shows; and the GPU model's time for one all-reduce of that
    bucket on the same switch. Metrics ``window_*`` (docs/metrics.md)."""
    from sim.gpu.collectives import collective_cost
    from sim.model.switch import replay_model
    from sim.replay.plan import build_plan

    real = replace(rcfg, flit_scale=1)
    plan = build_plan(meta, window, real)
    model = replay_model(plan)
    by_id = {r.id: r for r in window}
    size = result.bucket_bytes[bucket]
    gpu_model = collective_cost(gpu, config.gpus, size, "allreduce", algo,
                                switch=real_switch(config) if algo == "inswitch" else None)
    return {"window_bucket": bucket, "window_bucket_mb": size / MiB,
            "window_packets": int(plan.packets), "window_cycles": int(model.cycles),
            "window_us": model.cycles * real.cycle_ns / 1e3,
            "window_allreduce_us": 1e3 * metrics.allreduce_ms(model, by_id, real.cycle_ns),
            "window_gpu_model_us": gpu_model.time_s * 1e6,
            "window_model_wall_s": model.wall_s}


def _validate_full_window(config, meta, window, bucket, rcfg, rtl_dir):
    """``rtl_windows``: the first full bucket window at flit scale 1 through the RTL switch
    and the fast model, compared delivery for delivery."""
    from sim.cosim.replay import replay_rtl
    from sim.model.switch import replay_model
    from sim.replay.plan import build_plan
    from sim.replay.result import compare

    real = replace(rcfg, flit_scale=1)
    plan = build_plan(meta, window, real)
    rtl_cfg = rtl_config(real, config.policies)
    rtl_plan = plan if rtl_cfg == real else build_plan(meta, window, rtl_cfg)
    # An optimised build: it takes minutes longer to build than the quick one the scaled
    # window uses, but a full window runs millions of cycles, where it is several times faster.
    rtl = replay_rtl(rtl_plan, config.sim, build_dir=rtl_dir, quiet=True, optimize=True)
    model = replay_model(plan)
    agreement = compare(rtl, model)
    return {"window": f"bucket {bucket}", "flit_scale": 1, "rtl_policy": rtl_cfg.policy,
            "rtl_switch": rtl_switch_label(rtl_cfg, real), "packets": plan.packets,
            "rtl_cycles": rtl.cycles, "model_cycles": model.cycles,
            "real_us": rtl.cycles * real.cycle_ns / 1e3, "rtl_wall_s": rtl.wall_s,
            "model_wall_s": model.wall_s, "errors": rtl.errors, "mismatches": rtl.mismatches,
            **agreement}


#: The RTL window of a point, for other runs that replay traces of their own (the scenarios of
#: sim/scenarios): ``config`` needs ``policies`` and ``sim``.
validate_window = _validate_window
