"""Benchmarks of the GPU model (``innet bench model``): wall time, measured in this run.

* ResNet-50, 8 GPUs, one iteration, every bucket (target ≤ 1 s);
* the synthetic data-parallel program — per GPU 100 chained 500 µs compute kernels, each
  followed by a 25 MiB all-reduce overlapping the next — at 8, 64 and 256 GPUs (target ≤ 10 s
  at 256, growth no faster than N log N), timing the simulation and the emission of every
  GPU's kernel and collective records;
* the same program with every GPU at a different speed (no two GPUs alike, so nothing can be
  shared between them), at 8, 16, 32, ... up to ``hetero_max`` (default 1,024) GPUs (target
  ≤ 10 s at 1,024, growth no faster than N log N), to show how the engine scales without
  symmetry.

Growth is judged honestly: the ratio of the times at the first row of at least 64 GPUs (smaller
runs are dominated by fixed costs, which would flatter any engine) and at the last, against the
ratio of N log N between them.
"""

import math
import time

from sim.gpu.contention import KernelSpec
from sim.gpu.presets import gpu_preset
from sim.gpu.iteration import IterationConfig, simulate_iteration, simulate_streams
from sim.trace.format import TraceRecord
from sim.gpu.workloads import resnet50

__all__ = ["bench_model"]


def _synthetic(gpu, n, speeds=None):
    kernel = KernelSpec("k", gpu.tensor_tflops * 1e12 * gpu.compute_efficiency * 500e-6, 0.0)
    queue = [(f"k{i}", kernel, "bwd") for i in range(100)]
    launches = [(i, 25 << 20, f"allreduce{i}") for i in range(100)]
    began = time.perf_counter()
    result = simulate_streams(gpu, n, queue, launches, algo="ring", speed=speeds, record=True)
    simulated = time.perf_counter() - began
    records = 0
    gpus_of = list(result.classes.values())
    for entry in result.timeline:   # every GPU's records, as a trace writer would emit them
        ci, _stream, _name, start, end, _tag, hbm = entry
        for g in gpus_of[ci]:
            TraceRecord.kernel(gpu=g, id=records, start_ns=int(start * 1e9),
                               duration_ns=max(1, int((end - start) * 1e9)))
            records += 1
    return {"gpus": n, "model_s": simulated, "total_s": time.perf_counter() - began,
            "records": records, "iteration_s": result.iteration_s,
            "exposed_comm_s": result.exposed_comm_s}


#: Default largest GPU count of the all-different-speeds sweep.
HETERO_MAX = 1024

#: Growth is measured from the first row with at least this many GPUs (or the first row).
GROWTH_FROM_GPUS = 64


def bench_model(progress=None, hetero_max=HETERO_MAX):
    gpu = gpu_preset("a100")
    out = {"benchmark": "model"}
    if progress:
        progress("ResNet-50, 8 GPUs, one iteration")
    began = time.perf_counter()
    r = simulate_iteration(resnet50(), gpu, IterationConfig(n_gpus=8), record=True)
    out["resnet50_8gpu"] = {"wall_s": time.perf_counter() - began, "target_s": 1.0,
                            "iteration_s": r.iteration_s, "buckets": r.buckets}
    sym = []
    for n in (8, 64, 256):
        if progress:
            progress(f"synthetic program, {n} identical GPUs")
        sym.append(_synthetic(gpu, n))
    out["synthetic"] = sym
    het = []
    n = 8
    while n <= hetero_max:
        if progress:
            progress(f"synthetic program, {n} GPUs all at different speeds")
        het.append(_synthetic(gpu, n, [1.0 + 0.001 * k for k in range(n)]))
        n *= 2
    out["synthetic_heterogeneous"] = het

    def growth(rows):
        a = next((row for row in rows if row["gpus"] >= GROWTH_FROM_GPUS), rows[0])
        if a is rows[-1]:
            a = rows[0]
        b = rows[-1]
        ratio = b["total_s"] / a["total_s"] if a["total_s"] else float("inf")
        nlogn = (b["gpus"] * math.log2(b["gpus"])) / (a["gpus"] * math.log2(a["gpus"]))
        return {"from": a["gpus"], "to": b["gpus"], "time_ratio": ratio, "n_log_n_ratio": nlogn,
                "within_n_log_n": ratio <= nlogn}
    out["synthetic_growth"] = growth(sym)
    out["heterogeneous_growth"] = growth(het)
    out["synthetic_256_within_target"] = sym[-1]["total_s"] <= 10.0
    if het[-1]["gpus"] >= 1024:
        out["heterogeneous_1024_within_target"] = het[-1]["total_s"] <= 10.0
    return out
