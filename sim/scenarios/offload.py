"""Asynchronous message-driven training with CPU offload (Myelin / AxoNN): tensor (intra-layer)
× pipeline (inter-layer) parallelism whose operations start when their input message arrives,
with the optimizer state or the stashed activations offloaded to host memory over PCIe.

Layout: ``stages`` pipeline stages of ``tensor`` GPUs each (GPU ``s · tensor + j`` is tensor
rank ``j`` of stage ``s``), the workload's layers cut as the ``pipeline`` scenario cuts them.
Each GPU computes ``1/tensor`` of its stage's layers (Megatron's split) and all-reduces the
output of every row-parallel GEMM (``attn_out``, ``ffn_out``) with its tensor group, forward
and backward, on the critical path. The pipeline runs 1F1B driven by message arrival
(:mod:`sim.scenarios.schedule`), flushed at the end of the step, the optimizer after each
stage's last backward; for comparison, the same 1F1B in lock-step (global rounds).

Offload (``offload``):

``optimizer``
    the fp32 master weights and Adam's two moments (12 bytes per parameter) live in host
    memory; after the last backward the optimizer streams them in, updates, and streams them
    back, bucket by bucket (24 bytes per parameter over PCIe, and as many through HBM): the
    optimizer takes the longer of its HBM-bound kernel and the PCIe transfer. The GPU keeps
    fp16 weights and gradients (4 bytes per parameter of 16): innet's reading of AxoNN's
    "CPU memory as a scratch space ... reduce GPU memory consumption by four times".
``activations``
    the activations a stage stashes for its in-flight micro-batches go to host memory after
    each forward and come back before the backward; the read is issued when the operation
    before the backward starts, so a backward waits for whatever of the read its
    predecessor's time does not hide.

Memory per GPU: 16 bytes per parameter of its shard (fp16 weights and gradients, fp32
master, Adam's moments) and the stash of 1F1B (stage ``s`` holds ``stages - s`` micro-batches'
activations). The offloaded bytes are the memory saved.

The links: PCIe is a link of its own (``gpu.pcie_gbps``), so offload does not share NVLink
with the tensor all-reduces; it shares HBM (its DMA bytes). On a host attached over NVLink
(Grace Hopper's), it would share the links: the scenario replays stage 0's tensor all-reduces
of a backward through the switch alone and with the activations read back from a host
standing at another GPU's port (GPU ``g + tensor``'s memory, as ``traffic = ["offload"]``),
and reports the all-reduces' slowdown.
"""

from sim.gpu.collectives import collective_cost
from sim.gpu.contention import hbm_rate
from sim.gpu.iteration import OPTIMIZER_BYTES
from sim.scenarios.common import Section, TraceBuilder, figure, table
from sim.scenarios.config import Param
from sim.scenarios.pipeline import split_stages, stage_times
from sim.scenarios.schedule import simulate

__all__ = ["PARAMS", "TITLE", "STUDY", "run", "memory_per_gpu", "STATE_BYTES", "OFFLOADED"]

TITLE = "Asynchronous message-driven tensor × pipeline training with CPU offload"
STUDY = ("Singh, Bhatele, *AxoNN: an asynchronous, message-driven parallel framework for "
         "extreme-scale deep learning* (first titled Myelin), IPDPS 2022, arXiv 2110.13005: "
         "CPU memory as offload scratch cuts GPU memory 4x; 49.4–54.78 % of peak per V100 on "
         "48–384 GPUs")

#: Bytes per parameter of mixed-precision Adam training on the GPU, and what offloading the
#: optimizer moves to host memory (fp32 master weights and the two moments).
STATE_BYTES, OFFLOADED = 16, 12
ROW_PARALLEL = (".attn_out", ".ffn_out")

PARAMS = {
    "tensor": Param(int, 2, "tensor-parallel GPUs per stage", 1, 8),
    "stages": Param(int, 4, "pipeline stages", 2, 32),
    "micro_batches": Param(int, 4, "micro-batches per step", 1, 256),
    "offload": Param(list, ("none", "optimizer", "activations"), "what lives in host memory",
                     item=str, choices=("none", "optimizer", "activations")),
}


def validate(config):
    n = config.tensor * config.stages
    if n > 64:
        return ("offload", "stages", f"tensor x stages must be at most 64 ports, not {n}")
    from sim.gpu.workloads import build_workload
    wl = build_workload(config.workload, batch=config.batch or None)
    if not any(layer.name.endswith(ROW_PARALLEL) for layer in wl.layers):
        return ("scenario", "workload", "needs a transformer (bert_large, gpt2_xl): tensor "
                "parallelism splits its attention and FFN GEMMs")
    if config.stages > len(wl.layers):
        return ("offload", "stages", f"must be at most the workload's {len(wl.layers)} layers")
    if config.micro_batches > wl.batch:
        return ("offload", "micro_batches", f"must be at most the batch ({wl.batch})")
    return None


def memory_per_gpu(params, stash_bytes, offload):
    """``(on the GPU, offloaded)`` bytes of one GPU holding ``params`` parameters and
    ``stash_bytes`` per stashed micro-batch times the in-flight count (a list: per
    micro-batch in flight)."""
    state = STATE_BYTES * params
    stash = sum(stash_bytes)
    if offload == "optimizer":
        return state - OFFLOADED * params + stash, OFFLOADED * params
    if offload == "activations":   # all but the micro-batch being computed
        kept = max(stash_bytes) if stash_bytes else 0
        return state + kept, stash - kept
    return state + stash, 0


def run(ctx):
    c, gpu, wl = ctx.config, ctx.gpu, ctx.workload
    t, p, m = c.tensor, c.stages, c.micro_batches
    ranges = split_stages(wl, gpu, p)
    st = stage_times(wl, gpu, ranges, m)
    pcie = gpu.pcie_gbps * 1e9
    rows, mem_rows, data = [], [], {}
    stage_info = []
    for s, (a, b) in enumerate(ranges):
        layers = wl.layers[a:b]
        tp_sizes = [layer.activation_bytes / m for layer in layers
                    if layer.name.endswith(ROW_PARALLEL)]
        params = sum(layer.params for layer in layers) / t
        act = sum(layer.activation_bytes for layer in layers) / m / t
        stage_info.append({"tp_sizes": tp_sizes, "params": params, "act_bytes": act,
                           "in_flight": min(p - s, m)})
    for algo in c.algorithms:
        tp = [sum(collective_cost(gpu, t, size, "allreduce", algo).time_s
                  for size in info["tp_sizes"]) if t > 1 else 0.0 for info in stage_info]
        for mode in c.offload:
            fwd = [st[s]["fwd_s"] / t + tp[s] for s in range(p)]
            bwd = [st[s]["bwd_s"] / t + tp[s] for s in range(p)]
            pcie_bytes = 0.0
            if mode == "activations":
                for s in range(p):
                    read = stage_info[s]["act_bytes"] / pcie
                    bwd[s] += max(0.0, read - fwd[s])   # what the preceding forward hides
                pcie_bytes = max(2 * m * i["act_bytes"] for i in stage_info)
            opt = []
            for s in range(p):
                n = stage_info[s]["params"]
                kernel = n * OPTIMIZER_BYTES["adam"] / hbm_rate(gpu)
                opt.append(max(kernel, 2 * OFFLOADED * n / pcie) if mode == "optimizer"
                           else kernel)
            if mode == "optimizer":
                pcie_bytes = max(2 * OFFLOADED * i["params"] for i in stage_info)
            hbm_bytes = pcie_bytes   # DMA lands in (and leaves) HBM
            sends = {s: collective_cost(gpu, 2, st[s]["act_bytes"] / t, "p2p", "ring").time_s
                     for s in range(p - 1)}
            args = {"send_s": lambda d, s, i, sends=sends: sends[s if d == "fwd" else s - 1],
                    "reduce_s": lambda s, k, opt=opt: opt[s]}
            timeline = simulate(fwd, bwd, m, "1f1b", **args)
            lockstep = simulate(fwd, bwd, m, "1f1b", lockstep=True, **args)
            mem = [memory_per_gpu(i["params"], [i["act_bytes"]] * i["in_flight"], mode)
                   for i in stage_info]
            flops = (wl.fwd_flops + wl.bwd_flops) / (p * t)
            peak = flops / timeline.step_s / (gpu.tensor_tflops * 1e12)
            data[(algo, mode)] = {
                "step_ms": timeline.step_s * 1e3, "bubble": timeline.bubble,
                "lockstep_ms": lockstep.step_s * 1e3,
                "gpu_bytes": max(g for g, _ in mem), "offloaded_bytes": max(o for _, o in mem),
                "per_stage": [{"gpu_bytes": g, "offloaded_bytes": o} for g, o in mem],
                "pcie_bytes": pcie_bytes, "hbm_bytes": hbm_bytes,
                "pcie_busy": pcie_bytes / pcie / timeline.step_s,
                "hbm_share": hbm_bytes / timeline.step_s / hbm_rate(gpu),
                "peak_fraction": peak, "tp_ms_per_op": [x * 1e3 for x in tp]}
    for (algo, mode), d in data.items():
        base = data[(algo, c.offload[0])]
        d["slowdown"] = d["step_ms"] / base["step_ms"] - 1
        d["memory_ratio"] = base["gpu_bytes"] / d["gpu_bytes"]
        d["state_ratio"] = STATE_BYTES / (STATE_BYTES - (OFFLOADED if mode == "optimizer"
                                                         else 0))
        rows.append([algo, mode, f"{d['step_ms']:.2f}", f"{d['lockstep_ms']:.2f}",
                     f"{100 * d['slowdown']:+.1f} %",
                     f"{100 * d['peak_fraction']:.1f} %", f"{d['pcie_bytes'] / 1e9:.2f}",
                     f"{100 * d['pcie_busy']:.0f} %", f"{100 * d['hbm_share']:.1f} %"])
    first = c.algorithms[0]
    for mode in c.offload:
        d = data[(first, mode)]
        state = STATE_BYTES - (OFFLOADED if mode == "optimizer" else 0)
        mem_rows.append([mode, f"{d['gpu_bytes'] / 2**30:.2f}",
                         f"{d['offloaded_bytes'] / 2**30:.2f}",
                         f"{d['memory_ratio']:.2f}x", f"{STATE_BYTES} → {state} B/param: "
                         f"{d['state_ratio']:.2f}x"])
    lines = [f"{wl.name}, batch {wl.batch} as {m} micro-batches, on {p} stages × {t} tensor "
             f"ranks = {p * t} {gpu.name}; 1F1B driven by message arrival, flushed per step; "
             f"PCIe {gpu.pcie_gbps:g} GB/s per direction to host memory.", "",
             "**GPU memory** (the busiest GPU: stage 0, which stashes the most micro-batches; "
             "16 bytes per parameter of its shard plus its stash; the saving is the bytes "
             f"offloaded; compared with `{c.offload[0]}`):", ""]
    lines += table(["offload", "on the GPU (GiB)", "in host memory (GiB)", "GPU memory cut",
                    "model state cut"], mem_rows)
    lines += ["", "**Time and traffic** (GPU model; per step; PCIe and HBM bytes of the busiest "
              "GPU; PCIe busy: its transfer time over the step; HBM share: the DMA's bytes over "
              "the step against achievable HBM bandwidth; peak: the model's FLOPs per GPU "
              "over the step against the tensor peak; lock-step: the same 1F1B in global rounds, "
              "a stage starting only when every stage ended its previous operation):", ""]
    lines += table(["tensor all-reduce", "offload", "step (ms)", "lock-step (ms)", "slowdown",
                    "of peak",
                    "PCIe (GB)", "PCIe busy", "HBM share"], rows)
    shared = _nvlink_host(ctx, stage_info, st, data)
    lines += shared[0]
    best = data.get((first, "optimizer"))
    headline = ""
    if best:
        headline = (f"optimizer offload: model state {best['state_ratio']:.0f}x less, GPU "
                    f"memory {best['memory_ratio']:.2f}x less with the stash "
                    f"({best['offloaded_bytes'] / 2**30:.2f} GiB to host), step "
                    f"{100 * best['slowdown']:+.1f} %, {100 * best['peak_fraction']:.1f} % of "
                    f"peak (study: 4x less memory, 49.4-54.78 % of peak per V100)")
        lines += ["", f"**Against the study**: {headline}. AxoNN's 4x is the model state "
                  "(16 → 4 bytes per parameter, innet's reading); its 49.4–54.78 % of peak is "
                  "12–100 B-parameter transformers on 48–384 V100s with data parallelism on "
                  "top, where innet runs one 8-GPU switch: compare the trend, not the "
                  "number."]
    fig, ax = figure(6.4, 3.6)
    modes = list(c.offload)
    ax.bar(modes, [data[(first, md)]["gpu_bytes"] / 2**30 for md in modes], label="on the GPU")
    ax.bar(modes, [data[(first, md)]["offloaded_bytes"] / 2**30 for md in modes],
           bottom=[data[(first, md)]["gpu_bytes"] / 2**30 for md in modes],
           label="in host memory")
    ax.set_ylabel("GiB, busiest GPU")
    ax.set_title(f"{wl.name}: {p} stages × {t} tensor ranks")
    ax.legend(fontsize=8)
    metrics = {"headline": headline, "points": [{"algo": a, "offload": md, **d}
                                                for (a, md), d in data.items()],
               "nvlink_host": shared[1]}
    return [Section("Offload", lines, metrics, [("offload_memory.png", fig)])]


def _nvlink_host(ctx, stage_info, st, data):
    """Stage 0's tensor all-reduces of one backward through the switch, alone and with the
    activations read back from a host at GPU ``g + tensor``'s port (Grace Hopper's host over
    NVLink, not PCIe). Returns report lines and metrics."""
    c = ctx.config
    t = c.tensor
    info = stage_info[0]
    if t < 2 or not info["tp_sizes"]:
        return [], {}
    n = t * c.stages
    rows, out = [], {}
    for algo in c.algorithms:
        for with_offload in (False, True):
            total = sum(info["tp_sizes"]) + (info["act_bytes"] if with_offload else 0)
            rcfg = ctx.replay_config(n, 2 * total)
            b = TraceBuilder(n, ctx.piece_bytes(rcfg))
            ranks = list(range(t))
            ids = []
            after = None
            for k, size in enumerate(info["tp_sizes"]):   # one after another, as backprop
                first = len(b.records)
                last = b.collective(algo, "allreduce", ranks, int(size), 0, bucket=k,
                                    after=after)
                ids += range(first, len(b.records))
                after = {g: b.received.get(g, last.get(g)) for g in ranks}
            if with_offload:
                for g in ranks:   # the stash comes back: host memory -> GPU (a read)
                    b.write(g, g + t, int(info["act_bytes"]), 0, traffic="offload",
                            critical=True, op="read")
            name = f"offload_tp_{algo}" + ("_with_host_reads" if with_offload else "")
            rep = ctx.replay(name, b, rcfg)
            out.setdefault(algo, {})["with" if with_offload else "alone"] = \
                rep.span_ns(ids) / 1e6
        a, w = out[algo]["alone"], out[algo]["with"]
        out[algo]["slowdown"] = w / a - 1
        rows.append([algo, f"{a:.3f}", f"{w:.3f}", f"{100 * (w / a - 1):+.1f} %"])
    rtl = [r for name, r in ctx.replays.items() if name.endswith("_with_host_reads")]
    if rtl:   # prefer the in-switch all-reduces among the host reads
        ctx.rtl_window(next((r for r in rtl if "inswitch" in r.name), rtl[0]))
    lines = ["", "**Host memory over NVLink instead of PCIe** (Grace Hopper's): stage 0's "
             f"tensor all-reduces of one backward ({len(info['tp_sizes'])}, one after another) "
             "through the switch alone, and with the stashed activations read back at the "
             "same time from host memory standing at GPU g + tensor's port (the whole "
             "stash at once: the worst case):", ""]
    lines += table(["tensor all-reduce", "alone (ms)", "with host reads (ms)", "slowdown"],
                   rows)
    return lines, out
