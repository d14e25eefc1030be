"""Pipeline model parallelism × data parallelism (NTU 2018): stage-boundary messages sharing
the links with each stage's gradient all-reduce.

The workload's layers are cut into ``stages`` contiguous stages of about equal compute; the
pipeline is replicated ``replicas`` times (GPU ``k · stages + s`` runs stage ``s`` of replica
``k``), each replica taking the workload's batch as ``micro_batches`` micro-batches. Stage
``s`` sends the activations of its last layer to stage ``s + 1`` after each forward and
receives their gradients back after each backward of ``s + 1``; after its last backward of a
step it all-reduces its gradients with the same stage of the other replicas (``ring``,
``tree``, ``inswitch``, ``nvls``). The schedules (``gpipe``, ``1f1b``, ``async``: forward of one
micro-batch and backward of another in flight on every stage, no flush, as the study runs it)
are :mod:`sim.scenarios.schedule`'s, message-driven: an operation starts when its input
arrived.

Times: each layer's kernels are the GPU model's (:func:`sim.gpu.contention.kernel_time`,
a micro-batch taking ``1/m`` of the batch's time); messages and all-reduces the collectives'
(:func:`sim.gpu.collectives.collective_cost`). The schedule's messages and all-reduces are
then replayed through the switch, alone and together, and the schedule is run again with the
switch's times: the difference is what sharing the links costs, stage by stage.

innet's replay carries one in-switch reduction job, and the fast model's reduction unit one
member set, so the stage groups cannot all reduce in the switch in one replay. Each stage
group's in-switch all-reduce is replayed with all the boundary traffic but without the other
groups' reductions — their ports are disjoint in the crossbar, so they meet only in the
reduction unit — which is the switch with a reduction unit per group ("distinct switches");
the schedule is also run with the groups' reductions one after another through one unit
("one reduction unit"), which bounds what sharing the unit costs.
"""

from sim.gpu.collectives import collective_cost
from sim.gpu.contention import KernelSpec, kernel_time
from sim.scenarios.common import Section, TraceBuilder, figure, table
from sim.scenarios.config import Param
from sim.scenarios.schedule import SCHEDULES, gpipe_bubble, simulate

__all__ = ["PARAMS", "TITLE", "STUDY", "run", "split_stages", "stage_times"]

TITLE = "Pipeline model parallelism × data parallelism: the bubble and the shared links"
STUDY = ("Chen, Yang, Cheng (National Taiwan University), *Efficient and Robust Parallel DNN "
         "Training through Model Parallelism on Multi-GPU Platform*, arXiv 1809.02839 (2018): "
         "forward of one mini-batch and backward of another run concurrently on every stage, "
         "up to 8.91x faster than data parallelism on 4 GPUs")

PARAMS = {
    "stages": Param(int, 4, "pipeline stages per replica", 2, 32),
    "replicas": Param(int, 2, "pipeline replicas (data-parallel degree)", 1, 32),
    "micro_batches": Param(int, 2, "micro-batches per step per replica (the replayed case)",
                           1, 256),
    "steps": Param(int, 4, "consecutive steps the async schedule runs", 1, 64),
    "schedules": Param(list, SCHEDULES, "pipeline schedules", item=str, choices=SCHEDULES),
    "bubble_sweep": Param(list, (1, 2, 4, 8, 16, 32), "micro-batch counts of the bubble table",
                          1, 1024, item=int),
}


def validate(config):
    n = config.stages * config.replicas
    if n > 64:
        return ("pipeline", "replicas", f"stages x replicas must be at most 64 switch ports, "
                f"not {n}")
    from sim.gpu.workloads import build_workload
    layers = len(build_workload(config.workload, batch=config.batch or None).layers)
    if config.stages > layers:
        return ("pipeline", "stages", f"must be at most the workload's {layers} layers")
    batch = config.batch or build_workload(config.workload).batch
    if config.micro_batches > batch:
        return ("pipeline", "micro_batches", f"must be at most the batch ({batch})")
    return None


def _layer_s(gpu, layer):
    fwd = kernel_time(gpu, KernelSpec(layer.name, layer.fwd_flops, layer.fwd_bytes,
                                      layer.tensor_core, layer.kind == "conv"))
    bwd = kernel_time(gpu, KernelSpec(layer.name, layer.bwd_flops, layer.bwd_bytes,
                                      layer.tensor_core, layer.kind == "conv"))
    return fwd, bwd


def split_stages(workload, gpu, p):
    """Cut the layers into ``p`` contiguous stages minimising the longest stage's forward +
    backward time (the linear-partition dynamic programme). Returns the stages' ``(first,
    end)`` layer ranges."""
    times = [sum(_layer_s(gpu, layer)) for layer in workload.layers]
    n = len(times)
    pre = [0.0]
    for t in times:
        pre.append(pre[-1] + t)
    # best[k][i]: the longest stage when the first i layers make k stages; cut[k][i]: where
    # the last of those stages starts
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        for i in range(k, n - (p - k) + 1):
            for j in range(k - 1, i):
                v = max(best[k - 1][j], pre[i] - pre[j])
                if v < best[k][i]:
                    best[k][i], cut[k][i] = v, j
    bounds, i = [n], n
    for k in range(p, 0, -1):
        i = cut[k][i]
        bounds.append(i)
    bounds.reverse()
    return [(bounds[k], bounds[k + 1]) for k in range(p)]


def stage_times(workload, gpu, ranges, m):
    """Per stage: one micro-batch's forward and backward (s), the boundary activations of one
    micro-batch (bytes; its last layer's output), and its gradient bytes."""
    out = []
    for a, b in ranges:
        layers = workload.layers[a:b]
        fb = [_layer_s(gpu, layer) for layer in layers]
        out.append({"layers": (a, b), "fwd_s": sum(f for f, _ in fb) / m,
                    "bwd_s": sum(b_ for _, b_ in fb) / m,
                    "act_bytes": max(1, layers[-1].activation_bytes // m),
                    "grad_bytes": sum(layer.params for layer in layers) * workload.grad_bytes})
    return out


class _Pipe:
    """The scenario's pipeline: stages, their times and the GPU model's message and
    all-reduce times."""

    def __init__(self, ctx):
        c = ctx.config
        self.ctx, self.gpu, self.p, self.r = ctx, ctx.gpu, c.stages, c.replicas
        self.ranges = split_stages(ctx.workload, ctx.gpu, self.p)
        self.st = stage_times(ctx.workload, ctx.gpu, self.ranges, c.micro_batches)
        self.fwd = [s["fwd_s"] for s in self.st]
        self.bwd = [s["bwd_s"] for s in self.st]
        #: The stage with the most gradients: its first all-reduce is bucket 0, the window
        #: the RTL replays.
        self.big = max(range(self.p), key=lambda s: self.st[s]["grad_bytes"])

    def send_model(self, direction, s, i):
        return collective_cost(self.gpu, 2, self.st[s if direction == "fwd" else s - 1]
                               ["act_bytes"], "p2p", "ring").time_s

    def reduce_model(self, algo):
        if self.r < 2:
            return None
        times = [collective_cost(self.gpu, self.r, st["grad_bytes"], "allreduce", algo).time_s
                 for st in self.st]
        return lambda s, k: times[s]

    def run(self, schedule, algo, send=None, reduce=None, shared_reducer=False):
        c = self.ctx.config
        return simulate(self.fwd, self.bwd, c.micro_batches, schedule,
                        c.steps if schedule == "async" else 1, send or self.send_model,
                        reduce if reduce is not None else self.reduce_model(algo),
                        shared_reducer)


def _trace(pipe, timeline, rcfg, algo, messages=True, groups=()):
    """The boundary messages of ``timeline`` (``messages``) and the all-reduces of stage
    ``groups``: returns the builder and the record ids of each message and reduction."""
    p, r = pipe.p, pipe.r
    b = TraceBuilder(p * r, pipe.ctx.piece_bytes(rcfg))
    ids = {}
    if messages:
        for (direction, s, i), (issue, _) in sorted(timeline.messages.items(),
                                                   key=lambda kv: (kv[1][0], kv[0])):
            nbytes = pipe.st[s if direction == "fwd" else s - 1]["act_bytes"]
            peer = s + 1 if direction == "fwd" else s - 1
            for k in range(r):
                first = len(b.records)
                b.write(k * p + s, k * p + peer, nbytes, issue * 1e9, traffic="pp",
                        critical=direction == "bwd")
                ids.setdefault(("msg", direction, s, i), []).extend(
                    range(first, len(b.records)))
    for (s, k), (start, _) in sorted(timeline.reduces.items(), key=lambda kv: kv[1][0]):
        if s not in groups:
            continue
        first = len(b.records)
        b.collective(algo, "allreduce", [j * p + s for j in range(r)],
                     pipe.st[s]["grad_bytes"], start * 1e9, bucket=k * p + (s - pipe.big) % p)
        ids[("reduce", s, k)] = list(range(first, len(b.records)))
    return b, ids


def _switch_times(reps):
    """Per message and reduction, its time in the switch (s): the longest over the replays it
    is in (a message meets at most the reductions of its two ports' groups)."""
    out = {}
    for rep, ids in reps:
        for key, rids in ids.items():
            out[key] = max(out.get(key, 0.0), rep.span_ns(rids) / 1e9)
    return out


def _as_callables(times):
    def send(direction, s, i):
        return times.get(("msg", direction, s, i), 0.0)

    def reduce(s, k):
        return times.get(("reduce", s, k), 0.0)
    return send, reduce


def _switch_case(ctx, pipe, schedule, timeline, rcfg, algo, policy, cache):
    """Replay the schedule's traffic alone and together for one algorithm and policy; run the
    schedule again with the switch's times. Returns a dict of the results."""
    from dataclasses import replace
    rcfg = replace(rcfg, policy=policy)
    p = pipe.p
    tag = f"pipeline_{schedule}_{algo}_{policy}"
    stages = range(p)
    key = (schedule, policy)
    if key not in cache:   # the boundary messages alone do not depend on the algorithm
        b, ids = _trace(pipe, timeline, rcfg, algo)
        cache[key] = (ctx.replay(f"pipeline_{schedule}_pp_{policy}", b, rcfg), ids)
    alone = [cache[key]]
    shared = []
    per_group = algo in ("inswitch", "nvls")
    for groups in ([(s,) for s in stages] if per_group else [tuple(stages)]):
        suffix = f"_g{groups[0]}" if per_group else ""
        b, ids = _trace(pipe, timeline, rcfg, algo, messages=False, groups=groups)
        alone.append((ctx.replay(f"{tag}_reduce{suffix}", b, rcfg), ids))
        b, ids = _trace(pipe, timeline, rcfg, algo, groups=groups)
        shared.append((ctx.replay(f"{tag}_shared{suffix}", b, rcfg), ids))
    t_alone, t_shared = _switch_times(alone), _switch_times(shared)
    out = {}
    for name, times in (("alone", t_alone), ("shared", t_shared)):
        send, reduce = _as_callables(times)
        out[name] = pipe.run(schedule, algo, send, reduce if pipe.r > 1 else None)
        if per_group:
            out[name + "_one_unit"] = pipe.run(schedule, algo, send,
                                               reduce if pipe.r > 1 else None, True)
    out["replays"] = shared
    msgs = [k for k in t_alone if k[0] == "msg"]
    out["message_delay_s"] = sum(t_shared[k] - t_alone[k] for k in msgs)
    out["message_slowdown"] = max((t_shared[k] / t_alone[k] - 1 for k in msgs if t_alone[k]),
                                  default=0.0)
    out["reduce_slowdown"] = max((t_shared[k] / t_alone[k] - 1 for k in t_alone
                                  if k[0] == "reduce" and t_alone[k]), default=0.0)
    out["reduce_alone_s"] = {key[1]: v for key, v in t_alone.items()   # step 0's
                             if key[0] == "reduce" and key[2] == 0}
    return out


def run(ctx):
    c, gpu = ctx.config, ctx.gpu
    pipe = _Pipe(ctx)
    p, r, m = pipe.p, pipe.r, c.micro_batches
    lines = [f"{ctx.workload.name}, batch {ctx.workload.batch} per replica as {m} micro-batches, "
             f"on {p} stages × {r} replicas = {p * r} {gpu.name} (GPU k·{p} + s runs stage s "
             f"of replica k). Stages cut for equal compute:", ""]
    lines += table(["stage", "layers", "F per µbatch (ms)", "B per µbatch (ms)",
                    "boundary act. per µbatch (MB)", "gradients (MB)"],
                   [[s, f"{st['layers'][0]}–{st['layers'][1] - 1}", f"{st['fwd_s'] * 1e3:.3f}",
                     f"{st['bwd_s'] * 1e3:.3f}",
                     f"{st['act_bytes'] / 1e6:.2f}" if s < p - 1 else "—",
                     f"{st['grad_bytes'] / 1e6:.1f}"] for s, st in enumerate(pipe.st)])
    # -- the bubble, compute only ----------------------------------------------------------
    sweep = {}
    for sch in c.schedules:
        for mb in c.bubble_sweep:
            st = stage_times(ctx.workload, gpu, pipe.ranges, mb)
            t = simulate([x["fwd_s"] for x in st], [x["bwd_s"] for x in st], mb, sch,
                         c.steps if sch == "async" else 1)
            sweep[(sch, mb)] = t.bubble
    lines += ["", "**Pipeline bubble** (compute only, no messages: share of the stages' time "
              "idle while the pipeline computes; the golden for equal stages is GPipe's "
              f"(p − 1)/(m + p − 1); async fills once over {c.steps} steps):", ""]
    lines += table(["micro-batches m", "(p−1)/(m+p−1)"] + list(c.schedules),
                   [[mb, f"{100 * gpipe_bubble(p, mb):.1f} %"]
                    + [f"{100 * sweep[(sch, mb)]:.1f} %" for sch in c.schedules]
                    for mb in c.bubble_sweep])
    # -- step times: GPU model, then the switch ----------------------------------------------
    model_rows, data, cache = [], {}, {}
    for sch in c.schedules:
        bytes_port = sum(st["act_bytes"] for st in pipe.st) * m * 2 * (c.steps if sch ==
                                                                        "async" else 1)
        bytes_port += 2 * max(st["grad_bytes"] for st in pipe.st) * (c.steps if sch ==
                                                                     "async" else 1)
        rcfg = ctx.replay_config(max(p * r, 2), bytes_port)
        for algo in c.algorithms:
            t = pipe.run(sch, algo)
            model_rows.append([sch, algo, f"{t.step_s * 1e3:.2f}",
                               f"{100 * t.bubble:.1f} %", t.critical_stage,
                               f"{(t.stage_end[t.critical_stage] - t.compute_end) * 1e3:.2f}"])
            for policy in c.policies:
                ctx.progress(f"pipeline {sch} {algo} {policy}")
                case = _switch_case(ctx, pipe, sch, t, rcfg, algo, policy, cache)
                data[(sch, algo, policy)] = case
    lines += ["", f"**Step time, GPU model** (NCCL's collective times; the step ends when the "
              f"last stage's all-reduce does; async: per step over {c.steps} steps):", ""]
    lines += table(["schedule", "all-reduce", "step (ms)", "bubble", "critical stage",
                    "its all-reduce past the last backward (ms)"], model_rows)
    rows, points = [], []
    for (sch, algo, policy), case in data.items():
        a, s = case["alone"], case["shared"]
        crit = s.critical_stage
        slow = s.stage_end[crit] / a.stage_end[crit] - 1
        point = {"schedule": sch, "algo": algo, "policy": policy,
                 "step_alone_ms": a.step_s * 1e3, "step_shared_ms": s.step_s * 1e3,
                 "critical_stage": crit, "critical_slowdown": slow,
                 "step_slowdown": s.step_s / a.step_s - 1, "bubble": s.bubble,
                 "reduce_alone_ms": {st: v * 1e3 for st, v in case["reduce_alone_s"].items()},
                 "message_delay_ms": case["message_delay_s"] * 1e3,
                 "message_slowdown_max": case["message_slowdown"],
                 "reduce_slowdown_max": case["reduce_slowdown"]}
        one = ""
        if "shared_one_unit" in case:
            u = case["shared_one_unit"]
            point["step_one_unit_ms"] = u.step_s * 1e3
            one = f"{u.step_s * 1e3:.2f}"
        points.append(point)
        rows.append([sch, algo, policy, f"{a.step_s * 1e3:.2f}", f"{s.step_s * 1e3:.2f}",
                     f"{100 * point['step_slowdown']:+.1f} %", crit, f"{100 * slow:+.1f} %",
                     one or "—", f"{case['message_delay_s'] * 1e3:.3f}",
                     f"{100 * case['message_slowdown']:+.0f} %",
                     f"{100 * case['reduce_slowdown']:+.0f} %"])
    lines += ["", "**Through the switch.** The schedule's boundary messages and all-reduces "
              "replayed through the fast switch model — the messages alone, the all-reduces "
              "alone, then together — and the schedule run again with each message's and "
              "all-reduce's time in the switch (line rate, no NCCL protocol overhead). "
              "*Critical stage*: the stage that finishes last with the links shared; its "
              "slowdown is its finishing time shared against alone. In-switch: each stage "
              "group reduces on a reduction unit of its own (the replay carries one in-switch "
              "job); *one unit*: the groups' reductions one after another through one unit. "
              "The last three columns: what sharing did to the messages (their added time "
              "in the switch, summed; the largest relative slowdown of one) and to the "
              "all-reduces (the largest relative slowdown of one), whether or not the "
              "schedule's slack absorbed it.", ""]
    lines += table(["schedule", "all-reduce", "policy", "step alone (ms)", "step shared (ms)",
                    "step", "critical stage", "its slowdown", "one unit (ms)",
                    "boundary messages' added time (ms)", "slowest message",
                    "slowest all-reduce"], rows)
    dp_lines, dp = _against_dp(ctx, pipe, data)
    lines += dp_lines
    headline = _headline(c, data, p, m)
    if headline:
        lines += ["", headline]
    # -- RTL: the largest stage group's in-switch all-reduce among the boundary messages ----
    rtl = next((case["replays"][pipe.big][0] for (sch, algo, _), case in data.items()
                if algo in ("inswitch", "nvls")), None)
    if rtl is None and data:
        rtl = next(iter(data.values()))["replays"][0][0]
    if rtl is not None:
        ctx.rtl_window(rtl)
    figs = [("pipeline_schedule.png", _gantt(pipe, c))]
    fig, ax = figure(6.4, 3.6)
    ms = list(c.bubble_sweep)
    ax.plot(ms, [100 * gpipe_bubble(p, mb) for mb in ms], "k:", label="(p−1)/(m+p−1)")
    for sch in c.schedules:
        ax.plot(ms, [100 * sweep[(sch, mb)] for mb in ms], marker="o", label=sch)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches per step")
    ax.set_ylabel("bubble, %")
    ax.set_title(f"{p}-stage pipeline, {ctx.workload.name}")
    ax.legend(fontsize=8)
    figs.append(("pipeline_bubble.png", fig))
    metrics = {"headline": headline, "stages": pipe.st, "replicas": r, "micro_batches": m,
               "bubble": {f"{sch}@{mb}": v for (sch, mb), v in sweep.items()},
               "points": points, "against_dp": dp}
    return [Section("Pipeline × data parallelism", lines, metrics, figs)]


def _against_dp(ctx, pipe, data):
    """The study's comparison: the same global batch per step, data-parallel on all the GPUs
    (:func:`sim.gpu.iteration.simulate_iteration`, DDP buckets overlapped with backprop)
    against the pipeline (its step through the switch, links shared)."""
    from sim.gpu.iteration import IterationConfig, simulate_iteration
    from sim.gpu.workloads import build_workload
    c, n = ctx.config, pipe.p * pipe.r
    global_batch = pipe.r * ctx.workload.batch
    if global_batch % n:
        return [], {}
    wl = build_workload(c.workload, batch=global_batch // n)
    rows, out = [], {}
    for algo in c.algorithms:
        dp_s = simulate_iteration(wl, ctx.gpu, IterationConfig(n_gpus=n, algo=algo),
                                  record=False).iteration_s
        for sch in c.schedules:
            case = data.get((sch, algo, c.policies[0]))
            if case is None:
                continue
            pp_s = pipe.run(sch, algo).step_s
            out[f"{sch}/{algo}"] = {"dp_ms": dp_s * 1e3, "pp_ms": pp_s * 1e3,
                                    "pp_speedup": dp_s / pp_s}
            rows.append([sch, algo, f"{dp_s * 1e3:.2f}", f"{pp_s * 1e3:.2f}",
                         f"{dp_s / pp_s:.2f}x"])
    lines = ["", f"**Against data parallelism** (the study's comparison): the same "
             f"{global_batch} samples per step, data-parallel on {n} GPUs ({global_batch // n} "
             f"each, the GPU model's DDP iteration) against the pipeline (the GPU model's "
             f"step, as above):", ""]
    return lines + table(["schedule", "all-reduce", "DP step (ms)", "PP × DP step (ms)",
                          "PP × DP speed-up"], rows), out


def _headline(c, data, p, m):
    sch = "async" if "async" in c.schedules else c.schedules[0]
    parts = []
    for algo in c.algorithms:
        case = data.get((sch, algo, c.policies[0]))
        if case:
            a, s = case["alone"], case["shared"]
            crit = s.critical_stage
            parts.append(f"{algo} {s.step_s * 1e3:.2f} ms (critical stage {crit} "
                         f"{100 * (s.stage_end[crit] / a.stage_end[crit] - 1):+.1f} %)")
    if not parts:
        return ""
    return (f"{sch}, {p} stages, {m} micro-batches, {c.policies[0]}: step with shared links "
            + "; ".join(parts))


def _gantt(pipe, c):
    """The first schedule's stages over time, GPU model, first algorithm."""
    sch = c.schedules[0]
    t = pipe.run(sch, c.algorithms[0])
    fig, ax = figure(7.2, 0.6 + 0.5 * pipe.p)
    colours = {"F": "tab:blue", "B": "tab:orange"}
    for (s, phase, i), (a, b) in t.ops.items():
        ax.barh(s, (b - a) * 1e3, left=a * 1e3, color=colours[phase], edgecolor="white")
        ax.text((a + b) / 2 * 1e3, s, f"{phase}{i}", ha="center", va="center", fontsize=6)
    for (s, _), (a, b) in t.reduces.items():
        ax.barh(s + 0.3, (b - a) * 1e3, left=a * 1e3, height=0.2, color="tab:green")
    ax.invert_yaxis()
    ax.set_yticks(range(pipe.p))
    ax.set_ylabel("stage")
    ax.set_xlabel("ms (green: the stage's all-reduce, " + c.algorithms[0] + ")")
    ax.set_title(f"{sch}, {c.micro_batches} micro-batches")
    return fig
