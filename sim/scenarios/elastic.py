"""Elastic device sets, large batches on few GPUs, and load balance.

A data-parallel job A runs on an 8-port switch whose device set changes while it runs
(``phases``, default 4 → 8 → 6 GPUs); another job B (the same workload, ring all-reduce) holds
the GPUs A does not, so B leaves when A grows to 8 and comes back on 2 GPUs when A shrinks.

Changing A's device set costs

* with NCCL (``ring``, ``tree``, ``nvls``): a new communicator (``ncclCommInitRank``;
  ``comm_init_s``, a published measurement, below) and re-bucketing: PyTorch DDP's constructor
  builds the buckets again and broadcasts the model from rank 0 (``_sync_module_states``),
  which is also how GPUs that join get the model;
* with innet's switch (``inswitch``): one job-table write between chunks — the reduction unit
  snapshots a chunk's members when the chunk is claimed (hw/reduce.py), so the write changes
  the group of every later chunk without a drain — and, when GPUs join, the model's broadcast
  through the switch (the root sends once, the switch multicasts).

``comm_init_s`` default 0.75 s: ``ncclCommInitRank`` on 8 A100 ranks, "Init timings ... total
0.75" in the log of NVIDIA/nccl-tests#311 (NCCL 2.23). Published spread: 0.37 s for 2 ranks in
the NCCL documentation's ``NCCL_DEBUG_SUBSYS=PROFILE`` example, 5–6 s per init on 8 GPUs in
NVIDIA/nccl#534 (the maintainer: "a lot more than it should"), 55 s on DGX B200 when kernels
load lazily (NVIDIA/nccl#1646).

Also: a large batch on few GPUs by gradient accumulation (``grad_accum`` micro-batches per
all-reduce), and a straggler (one GPU at ``straggler`` speed) with the slowdown it causes the
others, from :func:`sim.gpu.iteration.simulate_iteration`.
"""

from dataclasses import replace

from sim.gpu.collectives import collective_cost
from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.scenarios.common import MiB, Section, figure, table
from sim.scenarios.config import Param

__all__ = ["PARAMS", "TITLE", "STUDY", "run", "change_s", "PORTS"]

TITLE = "Elastic device sets, large batches on few GPUs, and stragglers"
STUDY = ("KAIST 2019 thesis, *automatic parallelization for distributed deep learning*: the "
         "device set expands up to 6x faster and shrinks almost instantly; a large batch on "
         "one GPU; near-uniform load balance; up to 2.97x scalability")

#: The switch's ports: job A's largest device set, B on the rest.
PORTS = 8

PARAMS = {
    "phases": Param(list, (4, 8, 6), "job A's device sets in order, GPUs", 2, PORTS, item=int,
                     unique=False),
    "other_job": Param(bool, True, "job B (ring) on the GPUs A does not hold"),
    "comm_init_s": Param(float, 0.75, "ncclCommInitRank, seconds (NVIDIA/nccl-tests#311)",
                         0.0, 600.0),
    "iterations": Param(int, 20, "iterations per phase on the throughput timeline", 1, 10_000),
    "grad_accum": Param(int, 4, "micro-batches per all-reduce for the large-batch case", 1,
                        1024),
    "straggler": Param(float, 0.8, "speed factor of the straggling GPU (1.0 nominal)", 0.1,
                       1.0),
    "bucket_mb": Param(float, 25.0, "DDP bucket cap, MiB", 0.001, 4096.0),
    "rtl_chunks": Param(int, 24, "chunks of job A's all-reduce per phase in the RTL run", 1,
                        4096),
}


def validate(config):
    if len(config.phases) < 2:
        return ("elastic", "phases", "needs at least two device sets (a change)")
    if any(a == b for a, b in zip(config.phases, config.phases[1:])):
        return ("elastic", "phases", "two consecutive device sets are equal (no change)")
    return None


def change_s(gpu, algo, old, new, nbytes, comm_init_s, cycle_ns):
    """Seconds to change job A's device set from ``old`` to ``new`` GPUs, as
    ``(total, parts)``; ``parts`` names each cost."""
    if algo == "inswitch":
        parts = {"job-table write": cycle_ns * 1e-9}
        if new > old:   # the joiners need the model: the switch multicasts the root's copy
            parts["model broadcast (switch multicast)"] = collective_cost(
                gpu, new, nbytes, "broadcast", "inswitch").time_s
    else:
        parts = {"ncclCommInitRank": comm_init_s,
                 "DDP re-bucketing: model broadcast from rank 0": collective_cost(
                     gpu, new, nbytes, "broadcast", "tree").time_s}
    return sum(parts.values()), parts


def _iteration(ctx, n, algo, **extra):
    config = IterationConfig(n_gpus=n, algo=algo,
                             bucket_cap_bytes=int(ctx.config.bucket_mb * MiB), **extra)
    return config, simulate_iteration(ctx.workload, ctx.gpu, config, record=True)


def _phase_trace(ctx, n, algo):
    """Job A on GPUs 0..n-1 and, with ``other_job``, B (ring) on n..7: one iteration each,
    replayed with B and alone; returns A's all-reduce time in the switch (ns) both ways."""
    from sim.scenarios.common import TraceBuilder
    from sim.trace.generate import generate_trace
    c = ctx.config
    trace_algo = "inswitch" if algo == "nvls" else algo
    config, result = _iteration(ctx, n, trace_algo)
    rcfg = ctx.replay_config(PORTS, 2 * sum(result.bucket_bytes))
    piece = ctx.piece_bytes(rcfg)
    _, a_records, _ = generate_trace(ctx.workload, ctx.gpu, n, config=config, chunk_bytes=piece)
    out = {}
    for with_b in ((False, True) if c.other_job and PORTS - n >= 2 else (False,)):
        b = TraceBuilder(PORTS, piece)
        b.records = list(a_records)
        if with_b:
            m = PORTS - n
            _, b_records, _ = generate_trace(ctx.workload, ctx.gpu, m, algo="ring",
                                             bucket_mb=c.bucket_mb, chunk_bytes=piece, job=1)
            base = len(b.records)
            for r in b_records:   # B's GPUs are ports n..7; ids after A's
                moved = replace(r, gpu=r.gpu + n, id=r.id + base,
                                peer=r.peer + n if r.rtype != 1 else r.peer)
                b.records.append(moved.with_dependencies(d + base for d in r.dependencies)
                                 if r.rtype != 1 else moved)
        name = f"elastic_{algo}_a{n}" + ("_with_b" if with_b else "")
        rep = ctx.replay(name, b, rcfg, {"jobs": {"A": list(range(n)),
                                                 "B": list(range(n, PORTS)) if with_b else []}})
        a_ids = [r.id for r in a_records if r.rtype == 3]
        out[with_b] = rep.span_ns(a_ids)
        out.setdefault("replays", []).append(rep)
    return result, out


def _rtl_phases(ctx, sizes):
    """Job A's in-switch all-reduce of ``rtl_chunks`` chunks per phase, the phases one after
    the other through one RTL switch with a job-table write between them; each phase against
    the fast model's cold replay of the same plan. Job B is not in the RTL run, so its switch
    is the smallest that holds A's largest device set (the scenario's radix rule, a power of
    two), with the scenario's first arbitration policy."""
    from sim.cosim.replay import replay_rtl_phases
    from sim.model.switch import replay_model
    from sim.replay.plan import build_plan
    from sim.replay.result import compare
    from sim.scenarios.common import TraceBuilder
    # flit scale 1: the real switch
    rcfg = ctx.replay_config(max(sizes), 1, policy=ctx.config.policies[0])
    plans = []
    for n in sizes:
        b = TraceBuilder(rcfg.ports, rcfg.chunk_bytes)
        b.collective("inswitch", "allreduce", list(range(n)), ctx.config.rtl_chunks
                     * rcfg.chunk_bytes, 0, bucket=0)
        plans.append(build_plan({"gpus": rcfg.ports}, b.records, rcfg,
                                path=f"elastic rtl {n}"))
    ctx.progress(f"RTL: job A's device set {' -> '.join(map(str, sizes))} on one "
                 f"{rcfg.ports}-port switch ({ctx.config.sim})")
    out = replay_rtl_phases(plans, ctx.config.sim)
    windows = []
    for n, plan, (rtl, write_cycles) in zip(sizes, plans, out):
        model = replay_model(plan, judge_phase=rtl.extra["judge_phase"])
        agreement = compare(rtl, model)
        windows.append({"trace": f"elastic phase {n} GPUs", "window": "whole phase",
                        "rtl_switch": f"{rcfg.ports}-port {rcfg.policy} build",
                        "packets": plan.packets,
                        "rtl_cycles": rtl.cycles, "model_cycles": model.cycles,
                        "job_table_write_cycles": write_cycles, "errors": rtl.errors,
                        "mismatches": rtl.mismatches, "members": n, **agreement})
    return windows, rcfg


def run(ctx):
    c, gpu, wl = ctx.config, ctx.gpu, ctx.workload
    nbytes = wl.params * 4
    sections = []
    rtl_cycle_ns = ctx.replay_config(PORTS, 1).cycle_ns   # one cycle of the real switch
    windows = []
    if c.rtl and any(a in ("inswitch",) for a in c.algorithms):
        windows, rtl_rcfg = _rtl_phases(ctx, c.phases)
        rtl_cycle_ns = rtl_rcfg.cycle_ns
        ctx.windows.extend(windows)
    # -- phases and changes ----------------------------------------------------------------
    rows, change_rows, data = [], [], {}
    timeline = {}
    for algo in c.algorithms:
        per = []
        for n in c.phases:
            ctx.progress(f"elastic {algo}: job A on {n} GPUs")
            result, switch_ns = _phase_trace(ctx, n, algo if algo != "nvls" else "nvls")
            rate = n * wl.batch / result.iteration_s
            per.append((n, result.iteration_s, rate))
            alone, with_b = switch_ns[False], switch_ns.get(True)
            rows.append([algo, n, f"{result.iteration_s * 1e3:.2f}", f"{rate:,.0f}",
                         f"{alone / 1e6:.3f}",
                         "—" if with_b is None else f"{with_b / 1e6:.3f}",
                         "—" if with_b is None else f"{100 * (with_b / alone - 1):+.1f} %"])
            data.setdefault(algo, {})[n] = {"iteration_ms": result.iteration_s * 1e3,
                                            "samples_per_s": rate,
                                            "allreduce_switch_ms": alone / 1e6,
                                            "allreduce_switch_with_b_ms":
                                                None if with_b is None else with_b / 1e6}
        points, t = [], 0.0
        for i, (n, it_s, rate) in enumerate(per):
            if i:
                old = per[i - 1]
                total, parts = change_s(gpu, "inswitch" if algo == "inswitch" else "nccl",
                                        old[0], n, nbytes, c.comm_init_s, rtl_cycle_ns)
                during = n * wl.batch / (it_s + total)
                change_rows.append([algo, f"{old[0]} → {n}", _seconds(total),
                                    "; ".join(f"{k} {_seconds(v)}" for k, v in parts.items()),
                                    f"{old[2]:,.0f}", f"{during:,.0f}", f"{rate:,.0f}"])
                data[algo][f"change_{old[0]}_{n}_s"] = total
                points.append((t, 0.0))
                t += total
                points.append((t, 0.0))
            points.append((t, rate))
            t += c.iterations * it_s
            points.append((t, rate))
        timeline[algo] = points
    lines = [f"Job A: {wl.name}, batch {wl.batch} per GPU, DDP buckets of {c.bucket_mb:g} MiB; "
             f"the GPU model's iteration per device set, and A's all-reduce replayed through the "
             f"{PORTS}-port switch (fast model) alone and with job B's ring all-reduce on the "
             f"other GPUs (B's traffic crosses the same switch but not A's ports, so it can "
             f"only meet A inside the switch).", ""]
    lines += table(["algorithm", "A's GPUs", "iteration (ms)", "A samples/s",
                    "A all-reduce, switch (ms)", "with B (ms)", "B's effect"], rows)
    lines += ["", "**Changing the device set** (from the scheduler's decision to the first "
              "iteration on the new set; throughput during = one iteration plus the change):",
              ""]
    lines += table(["algorithm", "change", "time", "what it costs", "samples/s before",
                    "during", "after"], change_rows)
    speedups = []   # (algorithm, old, new, NCCL seconds, in-switch seconds)
    if "inswitch" in data:
        for algo in c.algorithms:
            if algo == "inswitch":
                continue
            for old, new in zip(c.phases, c.phases[1:]):
                key = f"change_{old}_{new}_s"
                speedups.append((algo, old, new, data[algo][key], data["inswitch"][key]))
    if speedups:
        parts = []
        for algo, old, new, nccl, switch in speedups:
            ratio = (f"{nccl / switch:,.0f}x faster, the model's broadcast to the joiners"
                     if new > old else "one job-table write: instant")
            parts.append(f"{old} → {new} with {algo}: {_seconds(nccl)} against "
                         f"{_seconds(switch)} in-switch ({ratio})")
        lines += ["", "Against the study (expands up to 6x faster, shrinks almost instantly): "
                  + "; ".join(parts) + ". innet's ratio is far larger than the study's because "
                  "the switch needs no communicator at all: what is left when GPUs join is "
                  "moving the model to them; the study's system still re-created NCCL's."]
    fig, ax = figure(7.2, 3.6)
    for algo, points in timeline.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], label=algo)
    ax.set_xlabel("time, s")
    ax.set_ylabel("job A, samples/s")
    ax.set_title(f"Job A's device set {' → '.join(map(str, c.phases))} ({wl.name})")
    ax.legend(fontsize=8)
    headline = ""
    if speedups:
        headline = "; ".join(f"{old}->{new} GPUs: {algo} {_seconds(nccl)}, inswitch "
                             f"{_seconds(switch)}" for algo, old, new, nccl, switch
                             in speedups if algo == speedups[0][0])
    sections.append(Section("Elastic device sets", lines,
                            {"headline": headline, "phases": data,
                             "rtl_phases": windows}, [("elastic_throughput.png", fig)]))
    if windows:
        sections[-1].lines += ["", f"**In the RTL** (one {rtl_rcfg.ports}-port switch, "
                               f"{rtl_rcfg.policy} arbitration, no reset; job A's in-switch "
                               "all-reduce of " f"{c.rtl_chunks} chunks per phase, the job table "
                               "written between phases, each phase checked against the numpy "
                               "sum of its members and against the fast model's cold replay):",
                               ""]
        sections[-1].lines += table(
            ["A's GPUs", "job-table write (cycles)", "RTL cycles", "model cycles (cold)",
             "exact deliveries", "drops"],
            [[w["members"], w["job_table_write_cycles"], w["rtl_cycles"], w["model_cycles"],
              f"{w.get('exact', 0)}/{w.get('deliveries', 0)}", sum(w["errors"].values())]
             for w in windows])
        sections[-1].lines += ["", f"A phase whose deliveries equal the cold replay's lost "
                               f"nothing to the change: the change cost the write's cycle only "
                               f"(a cycle is one flit time on a port: {rtl_cycle_ns:.3f} ns for "
                               f"this switch's {c.lanes * 4}-byte flits at {gpu.link_gbps:g} "
                               f"GB/s)."]
    sections.append(_large_batch_and_stragglers(ctx))
    return sections


def _large_batch_and_stragglers(ctx):
    c, wl = ctx.config, ctx.workload
    algo = "inswitch" if "inswitch" in c.algorithms else c.algorithms[0]
    algo = "inswitch" if algo == "nvls" else algo
    n_small, n_big = min(c.phases), max(c.phases)
    rows = []
    base = {}
    for n, accum in ((1, 1), (1, c.grad_accum), (n_small, 1), (n_small, c.grad_accum),
                     (n_big, 1)):
        if n == 1:
            it = ctx.step_alone_s(grad_accum=accum)
        else:
            it = _iteration(ctx, n, algo, grad_accum=accum)[1].iteration_s
        samples = n * wl.batch * accum
        base[(n, accum)] = samples / it
        rows.append([n, accum, samples, f"{it * 1e3:.2f}", f"{samples / it:,.0f}"])
    lines = [f"Large batches on few GPUs ({algo}): gradient accumulation runs "
             f"`grad_accum` micro-batches per all-reduce (DDP `no_sync`), so a global batch "
             f"needs fewer GPUs at the cost of time.", ""]
    lines += table(["GPUs", "micro-batches", "global batch", "iteration (ms)", "samples/s"],
                   rows)
    _, nominal = _iteration(ctx, n_big, algo)
    speed = [c.straggler] + [1.0] * (n_big - 1)
    _, slow = _iteration(ctx, n_big, algo, speed=speed)
    own = 1 / c.straggler - 1
    everyone = slow.iteration_s / nominal.iteration_s - 1
    lines += ["", f"**Straggler**: GPU 0 at speed {c.straggler:g} ({100 * own:.0f} % slower "
              f"compute) on {n_big} GPUs ({algo}): the iteration of every GPU is "
              f"{100 * everyone:.1f} % longer ({nominal.iteration_s * 1e3:.2f} → "
              f"{slow.iteration_s * 1e3:.2f} ms): the all-reduce waits for the slowest, so "
              f"the other {n_big - 1} GPUs idle for the difference; throughput "
              f"{n_big * wl.batch / nominal.iteration_s:,.0f} → "
              f"{n_big * wl.batch / slow.iteration_s:,.0f} samples/s."]
    scaling = base[(n_big, 1)] / base[(1, 1)]
    lines += ["", f"Scalability 1 → {n_big} GPUs: {scaling:.2f}x (the study: up to 2.97x on "
              f"its cluster)."]
    return Section("Large batches and stragglers", lines,
                   {"headline": f"straggler at {c.straggler:g}: everyone {100 * everyone:.1f} % "
                                f"slower; scalability 1->{n_big}: {scaling:.2f}x",
                    "samples_per_s": {f"{n}x{a}": v for (n, a), v in base.items()},
                    "straggler_slowdown": everyone, "straggler_own": own,
                    "scalability": scaling})


def _seconds(s):
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.2f} µs"
    return f"{s * 1e9:.3f} ns"
