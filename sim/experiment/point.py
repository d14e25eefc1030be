"""One point of an experiment (``innet run``, ``innet sweep``): the GPU model, the fast switch
model's closed-loop replay and, optionally, an RTL window, and the metrics of docs/metrics.md.

One **point** is (workload, bucket size, algorithm, arbiter policy). For each point:

1. the GPU model simulates one data-parallel iteration (SM and HBM contention between backprop
   and the all-reduce kernels) and writes its trace, with the pipeline-stage point-to-point
   traffic (``p2p_mb`` per GPU) that backprop waits on;
2. the fast switch model replays the whole trace closed-loop; a second replay carries only
   the point-to-point traffic, so the difference is the link contention backprop sees;
3. with ``rtl = true``, the first bucket window (its gradient messages and the memory traffic
   issued meanwhile) is replayed through the RTL switch under cocotb and through the model,
   and their per-packet delivery cycles are compared."""

from dataclasses import dataclass, field, replace

from sim.experiment.config import MiB

__all__ = ["PointResult", "run_point", "rtl_config", "rtl_switch_label"]


@dataclass
class PointResult:
    workload: str
    bucket_mb: float
    algo: str
    policy: str
    metrics: dict
    timeline: dict = field(default_factory=dict)
    validation: dict = field(default_factory=dict)


def _replay_config(config, policy, gpu, flit_scale):
    from sim.replay.config import ReplayConfig
    return ReplayConfig(ports=config.gpus, lanes=config.lanes, slots=config.slots,
                        chunk_flits=config.chunk_flits, policy=policy,
                        mtu_flits=config.mtu_flits, link_gbps=gpu.link_gbps,
                        flit_scale=flit_scale, dtype="fp32")


def run_point(config, workload_name, bucket_mb, algo, policy, rtl_dir=None):
    """Run one point; returns a :class:`PointResult` (plain data, picklable for a pool)."""
    from sim.gpu.presets import gpu_preset
    from sim.gpu.iteration import IterationConfig, simulate_iteration
    from sim.replay.plan import build_plan, scale_for
    from sim.model.switch import replay_model
    from sim.trace.format import GRAD, MEM
    from sim.trace.generate import generate_trace
    from sim.gpu.workloads import build_workload

    gpu = gpu_preset(config.gpu)
    workload = build_workload(workload_name)
    n = config.gpus
    p2p_bytes = int(config.p2p_mb * MiB)
    it_config = IterationConfig(n_gpus=n, algo=algo, bucket_cap_bytes=int(bucket_mb * MiB))
    alone = simulate_iteration(workload, gpu, it_config)
    # Bytes one GPU puts on its link in the iteration set the flit scale.
    grad_bytes = sum(alone.bucket_bytes)
    link_bytes = 2 * grad_bytes + p2p_bytes
    flit_scale = scale_for(link_bytes, config.lanes, config.target_flits)
    rcfg = _replay_config(config, policy, gpu, flit_scale)
    # Trace pieces of one MTU, so no piece rounds up to a mostly empty packet.
    meta, records, result = generate_trace(workload, gpu, n, algo=algo, bucket_mb=bucket_mb,
                                           chunk_bytes=rcfg.flit_bytes * config.mtu_flits,
                                           config=it_config, p2p_bytes=p2p_bytes)
    plan = build_plan(meta, records, rcfg, path=f"{workload_name}/{algo}")
    replay = replay_model(plan)
    p2p_records = [r for r in records if r.rtype == MEM]
    cycle_ns = rcfg.cycle_ns

    def p2p_done(rep):
        """Per GPU: cycle the last p2p packet it sent was delivered."""
        done = {}
        p = rep.plan
        for pid in range(p.packets):
            m = p.messages[int(p.msg[pid])]
            if m.kind.name == "MEM_WRITE" and rep.deliver[pid] >= 0 and \
                    records_by_id[m.record].rtype == MEM:
                done[m.src] = max(done.get(m.src, 0), int(rep.deliver[pid]))
        return done

    records_by_id = {r.id: r for r in records}
    link_delay_ns = 0.0
    if p2p_records:
        alone_plan = build_plan(meta, p2p_records, rcfg)
        alone_replay = replay_model(alone_plan)
        with_traffic, without = p2p_done(replay), p2p_done(alone_replay)
        link_delay_ns = max((with_traffic[g] - without.get(g, with_traffic[g])) * cycle_ns
                            for g in with_traffic)
        link_delay_ns = max(0.0, link_delay_ns)

    # Gradient traffic as the switch delivered it.
    grad_msgs = [m for m in replay.plan.messages if records_by_id[m.record].rtype == GRAD]
    first_grad = min((int(replay.inject[m.packets[0]]) for m in grad_msgs if m.packets),
                     default=0)
    last_grad = max((replay.message_done.get(m.mid, 0) for m in grad_msgs), default=0)
    # All-reduce time: the union of the buckets' windows (first piece in, last piece out).
    windows = {}
    for m in grad_msgs:
        if m.packets and m.mid in replay.message_done:
            bucket = records_by_id[m.record].bucket
            lo, hi = windows.get(bucket, (1 << 62, -1))
            windows[bucket] = (min(lo, int(replay.inject[m.packets[0]])),
                               max(hi, replay.message_done[m.mid]))
    allreduce_ns, reach = 0.0, -1
    for lo, hi in sorted(windows.values()):
        lo = max(lo, reach + 1)
        if hi >= lo:
            allreduce_ns += (hi - lo + 1) * cycle_ns
        reach = max(reach, hi)
    bwd_end_ns = (result.forward_s + result.backward_s) * 1e9
    backward_ns = result.backward_s * 1e9 + link_delay_ns
    exposed_ns = max(0.0, last_grad * cycle_ns - (bwd_end_ns + link_delay_ns))
    iteration_ns = max(bwd_end_ns + link_delay_ns, last_grad * cycle_ns) + \
        result.optimizer_s * 1e9
    base = result.backward_alone_s * 1e9
    window = max(last_grad - first_grad + 1, 1)
    util = [f / window for f in replay.egress_flits]
    summary = replay.summary()
    metrics = {
        "backprop_alone_ms": base / 1e6,
        "backprop_ms": backward_ns / 1e6,
        "backprop_slowdown": backward_ns / base - 1,
        "slowdown_sm": result.slowdown_attribution.get("sm", 0.0),
        "slowdown_hbm": result.slowdown_attribution.get("hbm", 0.0),
        "slowdown_link": link_delay_ns / base,
        "allreduce_ms": allreduce_ns / 1e6,
        "exposed_comm_ms": exposed_ns / 1e6,
        "iteration_ms": iteration_ns / 1e6,
        "link_utilization": sum(util) / len(util),
        "link_utilization_max": max(util),
        "stall_cycles": sum(summary["stall_cycles"]),
        "slot_peak": summary["slot_occupancy"]["peak"],
        "slot_mean": summary["slot_occupancy"]["mean"],
        "packets": summary["packets"],
        "flit_scale": flit_scale,
        "cycle_ns": cycle_ns,
        "model_wall_s": replay.wall_s,
        "gpu_model_slowdown": result.backprop_slowdown,
    }
    timeline = _timeline(records, replay, grad_msgs, records_by_id, cycle_ns, n)
    validation = {}
    if config.rtl:
        validation = _validate_window(config, meta, records, rcfg, result, rtl_dir)
        metrics["rtl_errors"] = sum(validation.get("errors", {}).values())
    return PointResult(workload_name, bucket_mb, algo, policy, metrics, timeline, validation)


def _timeline(records, replay, grad_msgs, records_by_id, cycle_ns, n):
    """Per GPU: compute kernels and the spans its gradient messages were in the switch (ms)."""
    from sim.trace.format import KERNEL
    out = {g: {"compute": [], "comm": []} for g in range(n)}
    for r in records:
        if r.rtype == KERNEL and r.phase != "comm":
            out[r.gpu]["compute"].append((r.start_ns / 1e6, r.duration_ns / 1e6))
    for m in grad_msgs:
        if not m.packets:
            continue
        start = int(replay.inject[m.packets[0]])
        end = replay.message_done.get(m.mid)
        if start >= 0 and end is not None:
            out[m.src]["comm"].append((start * cycle_ns / 1e6, (end - start + 1) * cycle_ns / 1e6))
    return out


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
    from sim.replay.plan import build_plan
    from sim.replay.result import compare
    from sim.model.switch import replay_model
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
    window = [r if r.dependency is None or r.dependency in keep else r.with_dependency(None)
              for r in window]
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
