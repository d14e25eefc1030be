"""Benchmark of the fast model on whole iterations at flit scale 1 (``innet bench replay``).

Each workload's trace is what ``innet trace gen --model M --gpus 8 --algo A`` writes (the same
function, :func:`sim.trace.generate.generate_trace`, called in-process); it is replayed on an
8-port switch of the real packet sizes — 8 lanes × 4 B = 32 B flits, 8-flit (256 B) chunks,
64-flit (2 KiB) memory packets, the GPU's NVLink bandwidth and its 350 ns link hop — through
the C core. Timed apart: building the plan (Python and numpy) and the replay (the C core and
the arrays around it), each in wall-clock seconds and in this process's CPU seconds (user +
system: the page faults of first-touched memory are system time). Target: BERT-large, 8 GPUs,
plan + replay in ≤ 10 s of one core (DESIGN.md), for each algorithm, judged on the CPU seconds:
on a machine shared with other jobs the wall-clock seconds also count the time spent waiting
for a core.
"""

import time

from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import build_workload
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.trace.generate import generate_trace

__all__ = ["bench_replay", "WORKLOADS", "ALGOS", "TARGET_S"]

#: Workloads timed, in order; the first carries the target.
WORKLOADS = ("bert_large", "resnet50", "gpt2_xl")
#: ``--algo`` choices: one algorithm, or both in turn.
ALGOS = {"ring": ("ring",), "tree": ("tree",), "inswitch": ("inswitch",),
         "both": ("ring", "inswitch")}
#: Plan + replay of the first workload's iteration, seconds.
TARGET_S = 10.0


def replay_config(gpu, gpus=8, flit_scale=1):
    """The switch of the benchmark: the specification's real sizes at ``flit_scale``."""
    return ReplayConfig(ports=gpus, lanes=8, slots=64, chunk_flits=8, mtu_flits=64,
                        link_gbps=gpu.link_gbps, flit_scale=flit_scale,
                        link_latency_ns=gpu.link_latency_s * 1e9)


def bench_one(name, algo="ring", gpus=8, gpu="a100", flit_scale=1):
    """Generate, plan and replay one iteration; returns its row."""
    from sim.model.switch import CompiledModel

    preset = gpu_preset(gpu)
    cfg = replay_config(preset, gpus, flit_scale)
    began = time.perf_counter()
    meta, records, _ = generate_trace(build_workload(name), preset, gpus, algo=algo)
    traced, traced_cpu = time.perf_counter(), time.process_time()
    plan = build_plan(meta, records, cfg, path=name)
    planned, planned_cpu = time.perf_counter(), time.process_time()
    result = CompiledModel().run(plan)
    done, done_cpu = time.perf_counter(), time.process_time()
    flits = int(plan.flits.sum())
    seconds = done - traced
    return {"workload": name, "algo": algo, "gpus": gpus, "flit_scale": flit_scale,
            "flit_bytes": cfg.flit_bytes, "chunk_bytes": cfg.chunk_bytes,
            "link_latency_cycles": cfg.link_cycles, "records": len(records),
            "packets": int(plan.packets), "flits": flits, "flits_per_gpu": flits // gpus,
            "cycles": int(result.cycles), "simulated_ms": result.cycles * cfg.cycle_ns / 1e6,
            "trace_s": traced - began, "plan_s": planned - traced, "replay_s": done - planned,
            "seconds": seconds, "flits_per_s": flits / seconds,
            "plan_cpu_s": planned_cpu - traced_cpu, "replay_cpu_s": done_cpu - planned_cpu,
            "cpu_s": done_cpu - traced_cpu,
            "packets_per_s": plan.packets / seconds}


def bench_replay(workloads=WORKLOADS, algo="ring", flit_scale=1, progress=None):
    """Time each workload's iteration under ``algo`` (a key of :data:`ALGOS`: ``"both"`` times
    ring, then in-switch); ratios are to the first row of the same algorithm, in the same run.
    At flit scale 1 with BERT-large first, ``within_target`` says per algorithm whether its
    iteration took at most :data:`TARGET_S` CPU seconds (``bert_large_within_target``: every one
    did)."""
    rows, within = [], {}
    for each in ALGOS[algo]:
        first = None
        for name in workloads:
            if progress:
                progress(f"{name}, 8 GPUs, {each}, flit scale {flit_scale}")
            r = bench_one(name, each, flit_scale=flit_scale)
            first = first or r
            r["seconds_ratio"] = r["seconds"] / first["seconds"]
            r["flits_ratio"] = r["flits"] / first["flits"]
            rows.append(r)
        if first["workload"] == "bert_large" and flit_scale == 1:
            within[each] = first["cpu_s"] <= TARGET_S
    out = {"benchmark": "replay", "algo": algo, "flit_scale": flit_scale, "rows": rows,
           "target_s": TARGET_S}
    if within:
        out["within_target"] = within
        out["bert_large_within_target"] = all(within.values())
    return out
