"""The model against published figures (../shared/CALIBRATION.md), one row per figure.

``innet model calibrate --write docs/calibration.md`` regenerates the doc from these rows, and
``tests/test_calibration.py`` asserts every row is within its tolerance.
"""

from sim.gpu.collectives import allreduce_cost
from sim.gpu.contention import KernelSpec, overlap
from sim.gpu.presets import gpu_preset
from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.gpu.workloads import resnet50, transformer

__all__ = ["calibration_rows", "calibration_markdown", "overlap_sweep"]


def _row(quantity, model, published, low, high, source, command, unit=""):
    """``published`` is a number or a band ``"a–b"`` (the error is against its middle)."""
    within = low <= model <= high
    if isinstance(published, str):
        a, b = (float(x) for x in published.split("–"))
        mid = (a + b) / 2
    else:
        mid = published
    error = (model - mid) / mid * 100 if mid else 0.0
    return {"quantity": quantity, "model": model, "published": published, "unit": unit,
            "tolerance": f"[{low:.4g}, {high:.4g}]", "error": f"{error:+.1f} %",
            "within": within, "source": source, "command": command}


def overlap_sweep():
    """GPT/LLaMA-like sweep: the backward kernels of one transformer layer, each overlapped with
    a ring all-reduce on 4 GPUs (the published measurement used 4×A100/H100). Returns rows of
    (config, compute slowdown while overlapped, as a fraction)."""
    rows = []
    for gpu_name in ("a100", "h100"):
        gpu = gpu_preset(gpu_name)
        comm = allreduce_cost(gpu, 4, 256 << 20, "ring")
        for hidden in (2048, 4096, 5120):
            for seq in (1024, 2048):
                for batch in (1, 2, 4):
                    w = transformer(hidden=hidden, layers=1, seq=seq, batch=batch, vocab=32000,
                                    positions=seq, heads=hidden // 128)
                    alone = overlapped = 0.0
                    for layer in w.layers:
                        if layer.name in ("embeddings", "lm_head"):
                            continue
                        k = KernelSpec(layer.name, layer.bwd_flops, layer.bwd_bytes,
                                       layer.tensor_core)
                        o = overlap(gpu, k, comm)
                        alone += o.compute_alone_s
                        overlapped += o.compute_overlapped_s
                    rows.append({"gpu": gpu_name, "hidden": hidden, "seq": seq, "batch": batch,
                                 "slowdown": overlapped / alone - 1})
    return rows


def _serial_vs_overlap():
    """Iteration time without overlap vs with it, GPT-like model on 4 GPUs (ring)."""
    ratios = []
    for gpu_name in ("a100", "h100"):
        gpu = gpu_preset(gpu_name)
        for hidden, layers in ((2048, 24), (4096, 16)):
            w = transformer(hidden=hidden, layers=layers, seq=2048, batch=2, vocab=32000,
                            positions=2048, heads=hidden // 128)
            times = [simulate_iteration(w, gpu, IterationConfig(n_gpus=4, overlap=flag),
                                        record=False).iteration_s for flag in (True, False)]
            ratios.append(times[1] / times[0] - 1)
    return ratios


def calibration_rows():
    rows = []
    a100, h100, v100 = gpu_preset("a100"), gpu_preset("h100"), gpu_preset("v100")
    big = 1 << 30
    rows.append(_row("8×A100 ring all-reduce busbw, 1 GiB",
                     allreduce_cost(a100, 8, big).busbw_gbps,
                     "200–235", 217.5 * 0.95, 217.5 * 1.05, "nccl-tests issues #149, #228",
                     "innet model collective --gpu a100 --gpus 8 --algo ring --size 1GiB",
                     "GB/s"))
    rows.append(_row("8×H100 ring all-reduce busbw, 1 GiB (NVLS off)",
                     allreduce_cost(h100, 8, big).busbw_gbps, "360–370", 365 * 0.95, 365 * 1.05,
                     "nccl-tests issues #212, #309",
                     "innet model collective --gpu h100 --gpus 8 --algo ring --size 1GiB",
                     "GB/s"))
    ring = allreduce_cost(a100, 8, big)
    rows.append(_row("ring all-reduce HBM bytes per NVLink byte sent",
                     ring.hbm_bytes / ring.link_bytes, "2–3", 2.0, 3.0, "NVIDIA/nccl #1428",
                     "innet model collective --gpu a100 --algo ring --json (hbm/link bytes)"))
    for gpu, name, published in ((a100, "A100", 104.0), (v100, "V100", 213.0)):
        t = simulate_iteration(resnet50(256), gpu, IterationConfig(n_gpus=1),
                               record=False).iteration_s * 1e3
        rows.append(_row(f"ResNet-50 iteration, one {name}, batch 256, mixed precision", t,
                         published, published * 0.9, published * 1.1,
                         "NVIDIA DeepLearningExamples",
                         f"innet model iteration --model resnet50 --gpu {name.lower()} "
                         f"--gpus 1 --batch 256", "ms"))
    sweep = overlap_sweep()
    average = sum(r["slowdown"] for r in sweep) / len(sweep) * 100
    worst = max(r["slowdown"] for r in sweep) * 100
    rows.append(_row("compute slowdown under overlap, GPT/LLaMA-like sweep, average", average,
                     18.9, 18.9 - 5, 18.9 + 5, "Lee et al. 2025, arXiv 2507.03114",
                     "python -c 'from sim.gpu.calibration import overlap_sweep; ...'", "%"))
    rows.append(_row("compute slowdown under overlap, worst case in the sweep", worst,
                     40.0, 0.0, 40.0, "Lee et al. 2025 (worst 40.0 %)",
                     "python -c 'from sim.gpu.calibration import overlap_sweep; ...'", "%"))
    serial = _serial_vs_overlap()
    rows.append(_row("serial (no overlap) vs overlapped iteration, GPT-like, average",
                     sum(serial) / len(serial) * 100, 10.2, 0.0, 26.6,
                     "Lee et al. 2025 (average 10.2 %, worst 26.6 %)",
                     "innet model iteration ... --no-overlap vs default", "%"))
    return rows


def calibration_markdown(rows):
    lines = [
        "# Calibration: model vs published figures",
        "",
        "Regenerate with `innet model calibrate --write docs/calibration.md`; "
        "`pytest tests/test_calibration.py` asserts every row is inside its tolerance.",
        "Sources are listed in `../shared/CALIBRATION.md`. Bandwidths in GB/s = 10^9 bytes/s.",
        "",
        "| quantity | model | published | tolerance | error vs mid | within | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['quantity']} | {r['model']:.4g} {r['unit']} | {r['published']} "
                     f"{r['unit']} | {r['tolerance']} | {r['error']} | "
                     f"{'yes' if r['within'] else '**no**'} | {r['source']} |")
    lines += ["", "Commands behind the rows:", ""]
    lines += [f"- {r['quantity']}: `{r['command']}`" for r in rows]
    lines += ["", _FITTED, ""]
    return "\n".join(lines)


_FITTED = """## What was fitted, and to what

Three constants were fitted; everything else is a datasheet figure or NCCL's own model:

- `SIMPLE_EFFICIENCY = 0.95` (`sim/gpu/collectives.py`): fraction of NCCL's effective NVLink
  bandwidth (20.0 GB/s per link on A100, 20.6 on H100, from NCCL `src/graph/topo.h`) that a
  large ring all-reduce reaches. One value for both GPUs; both busbw rows land within 5 %.
- `conv_efficiency = 0.38` (`sim/gpu/presets.py`): fraction of dense tensor peak a convolution
  reaches. One value puts ResNet-50 within 2 % of the published A100 and V100 iteration times.
- `CTA_SM_OCCUPANCY` (`sim/gpu/contention.py`): the share of an SM a communication CTA takes from
  co-resident compute blocks, fitted so the GPT/LLaMA-like sweep averages the published 18.9 %.
  The worst case and the serial-vs-overlapped rows are then predictions, not fits.

Not calibrated (no published figure here): the in-switch reduction's own efficiency. innet's
in-switch collective streams at the same protocol efficiency as ring; real NVLS measurements
are lower than this idealisation (NVSwitch's reduction throughput limits them)."""
