"""innet against published measurements: every figure it is compared with, as a row.

A row is a dict: ``quantity``, ``model`` (float), ``published`` (a number, or a band string
``"a–b"``), ``low``/``high`` (the tolerance: the published band or stated spread, or the
declared tolerance for a single published value, :data:`SINGLE_VALUE_POINTS`), ``unit``,
``source``, ``command`` (what reproduces the model value), ``role`` (``fitted`` or
``predicted``) and, for a fitted row, ``fits`` (the constant fitted on it); optionally a
``note``. :func:`finish`
adds ``error`` and ``within``.

Rows come from provider functions (:data:`PROVIDERS`); another module adds its own with
:func:`validation_rows` ``(providers=...)``. ``innet model validate`` prints them;
``innet model calibrate --write docs/calibration.md`` writes them as Markdown.
"""

from sim.gpu.collective_figures import collective_rows
from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.gpu.multinode_figures import multinode_rows
from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import bert_large, resnet50, transformer

__all__ = ["row", "finish", "validation_rows", "PROVIDERS", "overlap_sweep",
           "serial_vs_overlap", "scaling", "SWEEP", "SINGLE_VALUE_POINTS"]

#: Tolerance, in points of a percentage, for a published single value with no stated spread
#: (NVIDIA's tables: "averaged over a few training iterations"). Declared before comparing,
#: the same for every such row.
SINGLE_VALUE_POINTS = 2.0


def row(quantity, model, published, low, high, source, command, unit="", role="predicted",
        fits=None):
    """A row in the schema above (``error`` and ``within`` added by :func:`finish`)."""
    r = {"quantity": quantity, "model": float(model), "published": published, "low": low,
         "high": high, "unit": unit, "source": source, "command": command, "role": role}
    if fits is not None:
        r["fits"] = fits
    return r


def finish(r):
    """``r`` with ``tolerance``, ``error`` (against the published value, or a band's middle)
    and ``within``."""
    published = r["published"]
    if isinstance(published, str) and "–" in published:
        a, b = (float(x) for x in published.split("–"))
        mid = (a + b) / 2
    elif isinstance(published, str):   # an approximate figure, "~380"
        mid = float(published.lstrip("~"))
    else:
        mid = published
    error = (r["model"] - mid) / mid * 100 if mid else 0.0
    return {**r, "tolerance": f"[{r['low']:.4g}, {r['high']:.4g}]", "error": f"{error:+.1f} %",
            "within": r["low"] <= r["model"] <= r["high"]}


# -- the published overlap sweep (Lee et al. 2025) ----------------------------------------------

#: The configurations innet runs for Lee et al. 2025 (arXiv 2507.03114). What the source says
#: (its abstract, arxiv.org/html/2507.03114v1; the library holds no more of it): average
#: compute slowdown 18.9 %, worst 40.0 %; serial 10.2 % slower than overlapped on average,
#: worst 26.6 %; "GPT and LLaMA models, across 4 A100s, H100s, MI250, and MI210", a study of
#: "numeric precision, specialized cores, and power capping". So the published average and
#: worst case are taken over four platforms, two of them AMD GPUs innet does not model, and
#: over precisions and power caps; which platform gives the worst case is not stated. The
#: model sizes, batches and sequence lengths are not published in what the library holds;
#: these are ASSUMED: data-parallel training on 4 GPUs of one NVSwitch node (ring
#: all-reduce, DDP buckets, AMP, no power cap), a GPT-like model (hidden 2048, 24 layers) and
#: a LLaMA-7B-like shape (hidden 4096, 32 layers, only where its gradients fit), sequence
#: 1024 and 2048, micro-batch 1, 2 and 4, on A100 and H100. The compute slowdown is the
#: backward pass's (the only compute the all-reduces overlap). The rows compare innet's
#: NVIDIA-only, AMP-only average with the four-platform one: a like-for-like comparison
#: needs the paper's per-platform figures.
SWEEP = {"gpus": ("a100", "h100"), "models": ((2048, 24), (4096, 32)), "seqs": (1024, 2048),
         "batches": (1, 2, 4), "n_gpus": 4}


def _sweep_configs():
    for gpu_name in SWEEP["gpus"]:
        gpu = gpu_preset(gpu_name)
        for hidden, layers in SWEEP["models"]:
            for seq in SWEEP["seqs"]:
                for batch in SWEEP["batches"]:
                    w = transformer(hidden=hidden, layers=layers, seq=seq, batch=batch,
                                    vocab=32000, positions=seq, heads=hidden // 128)
                    # weights, FP32 gradients and Adam state: 16 bytes a parameter
                    if 16 * w.params > gpu.hbm_bytes:
                        continue
                    yield gpu_name, gpu, hidden, layers, seq, batch, w


_SWEEP_CACHE = {}


def _sweep():
    """Per configuration: backward slowdown under overlap and serial vs overlapped."""
    from sim.gpu import contention
    key = contention.L2_REFETCH
    if key not in _SWEEP_CACHE:
        rows = []
        for gpu_name, gpu, hidden, layers, seq, batch, w in _sweep_configs():
            over = simulate_iteration(w, gpu, IterationConfig(n_gpus=SWEEP["n_gpus"]),
                                      record=False)
            serial = simulate_iteration(w, gpu, IterationConfig(n_gpus=SWEEP["n_gpus"],
                                                                overlap=False), record=False)
            rows.append({"gpu": gpu_name, "hidden": hidden, "layers": layers, "seq": seq,
                         "batch": batch, "slowdown": over.backprop_slowdown,
                         "attribution": over.slowdown_attribution,
                         "serial": serial.iteration_s / over.iteration_s - 1})
        _SWEEP_CACHE.clear()
        _SWEEP_CACHE[key] = rows
    return _SWEEP_CACHE[key]


def overlap_sweep():
    """Rows of the sweep: configuration, ``slowdown`` (backward, fraction), its
    ``attribution`` and ``serial`` (serial over overlapped iteration time, minus one)."""
    return [dict(r) for r in _sweep()]


def serial_vs_overlap():
    """Serial over overlapped iteration time minus one, per sweep configuration."""
    return [r["serial"] for r in _sweep()]


def _overlap_rows():
    sweep = _sweep()
    slow = [r["slowdown"] * 100 for r in sweep]
    serial = [r["serial"] * 100 for r in sweep]
    src = ("Lee et al. 2025, arXiv 2507.03114 (abstract: over A100, H100, MI250 and "
           "MI210, GPT and LLaMA; innet runs A100 and H100 only)")
    cmd = "python -c 'from sim.gpu.validation import overlap_sweep; print(overlap_sweep())'"
    p = SINGLE_VALUE_POINTS
    return [
        row("compute slowdown under overlap, sweep average (4 GPUs)", sum(slow) / len(slow),
            18.9, 18.9 - p, 18.9 + p, src, cmd, "%"),
        row("compute slowdown under overlap, sweep worst case (4 GPUs)", max(slow), 40.0,
            40.0 - p, 40.0 + p, src, cmd, "%", role="fitted", fits="L2_REFETCH"),
        row("serial vs overlapped iteration, sweep average (4 GPUs)",
            sum(serial) / len(serial), 10.2, 10.2 - p, 10.2 + p, src, cmd, "%"),
        row("serial vs overlapped iteration, sweep worst case (4 GPUs)", max(serial), 26.6,
            26.6 - p, 26.6 + p, src, cmd, "%"),
    ]


def _tail_effect_rows():
    """A GEMM of exactly one wave next to an all-gather: the NVIDIA developer forum thread
    "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of Tail
    Effect" (forums.developer.nvidia.com/t/337991): H100 (132 SMs), a 132-block GEMM at
    ~80 % MFU alone, ~47 % beside a 24-block ncclAllGather, "execution time nearly doubles".
    Band: 80/47 − 1 = 70 % to 100 % ("nearly doubles"). The GEMM's shape is not given; any
    one-wave shape (132 tiles of 256x128) gives the same prediction."""
    from sim.gpu.collectives import collective_cost
    from sim.gpu.contention import gemm_kernel, overlap
    h100 = gpu_preset("h100")
    gemm = gemm_kernel(h100, 256 * 12, 128 * 11, 8192)
    gather = collective_cost(h100, 8, 256 << 20, "allgather", "ring", channels=24)
    slowdown = overlap(h100, gemm, gather).compute_slowdown * 100
    return [row("one-wave GEMM beside a 24-block all-gather, H100, slowdown", slowdown,
                "70–100", 80 / 47 * 100 - 100, 100.0,
                "NVIDIA developer forum thread 337991 (MFU ~80 % alone, ~47 % overlapped)",
                "python -c 'from sim.gpu.validation import _tail_effect_rows; "
                "print(_tail_effect_rows())'", "%")]


# -- collectives and single-GPU times (kept from the calibration) ------------------------------

def _single_gpu_rows():
    """ResNet-50 on one GPU, each figure against the preset of the part it was measured on:
    the A100 figure on an A100 80GB (``a100-80``, the row ``conv_efficiency`` is fitted on),
    the V100 figures on DGX-1 V100s of 16GB and 32GB (the ``v100`` preset; the two parts have
    the same SMs, clocks and HBM bandwidth). The FP32 figure is a prediction of the FP32
    path (no tensor cores, 4-byte activations)."""
    rows = []
    src = ("NVIDIA DeepLearningExamples PyTorch ResNet-50 v1.5 README, pytorch-21.03 "
           "(DGX A100 80GB / DGX-1 16GB / DGX-1 32GB tables; batches from its configs.yml); "
           "±10 % tolerance as before")
    for name, label, batch, published, config, role in (
            ("a100-80", "A100 80GB, batch 256, AMP", 256, 2470, {}, "fitted"),
            ("v100", "V100 16GB, batch 256, AMP", 256, 1200, {}, "predicted"),
            ("v100", "V100 32GB, batch 256, AMP", 256, 1156, {}, "predicted"),
            ("v100", "V100 16GB, batch 112, FP32", 112, 367, {"precision": "fp32"},
             "predicted")):
        gpu = gpu_preset(name)
        t = simulate_iteration(resnet50(batch), gpu, IterationConfig(n_gpus=1, **config),
                               record=False).iteration_s
        rows.append(row(f"ResNet-50 training, one {label}", batch / t,
                        published, published * 0.9, published * 1.1, src,
                        f"innet model iteration --model resnet50 --gpu {name} --gpus 1 "
                        f"--batch {batch}" + (" --precision fp32" if config else ""), "img/s",
                        role=role, fits="conv_efficiency" if role == "fitted" else None))
    return rows


# -- multi-GPU scaling (NVIDIA DeepLearningExamples) ------------------------------------------

def scaling(workload, gpu_name, n=8, **config):
    """(scaling efficiency in %, DDP overhead in %): one GPU's iteration time over ``n`` GPUs'
    (the same per-GPU batch: weak scaling), and its inverse minus one."""
    gpu = gpu_preset(gpu_name)
    one = simulate_iteration(workload, gpu, IterationConfig(n_gpus=1, **config),
                             record=False).iteration_s
    many = simulate_iteration(workload, gpu, IterationConfig(n_gpus=n, **config),
                              record=False).iteration_s
    return one / many * 100, (many / one - 1) * 100


#: The ResNet-50 README's 21.03 tables (commit 7bdfc81d) were measured with `launch.py --mode
#: benchmark_training`, whose configs.yml sets ``data_backend: pytorch`` (the PyTorch
#: DataLoader decoding JPEGs on the CPU, 8 workers a GPU on DGX-1, 16 on DGX A100) and the
#: DGX-1 FP32 batch to 112; its 20.06 tables (commit 46ff3707) with ``main.py``, whose default
#: backend is DALI (``dali-cpu``), at the README's batches (256; FP32 on DGX-1 128).
_RN50_2103 = ("DeepLearningExamples ResNet-50 v1.5 README, pytorch-21.03 (7bdfc81d; PyTorch "
              "DataLoader), ")
_RN50_2006 = ("DeepLearningExamples ResNet-50 v1.5 README, pytorch-20.06 (46ff3707; DALI "
              "dali-cpu), ")

#: (quantity, workload, GPU preset, config, published 8-GPU speedup, source, command options)
_SCALING = (
    ("ResNet-50 AMP, 8×A100 scaling efficiency, batch 256", lambda: resnet50(256),
     "a100-80", {}, 6.72, _RN50_2103 + "DGX A100 80GB: 2470 → 16621 img/s",
     "--model resnet50 --gpu a100-80 --batch 256"),
    ("ResNet-50 AMP, 8×V100 scaling efficiency, batch 256", lambda: resnet50(256),
     "v100", {}, 6.93, _RN50_2103 + "DGX-1 16GB: 1200 → 8322 img/s",
     "--model resnet50 --gpu v100 --batch 256"),
    ("ResNet-50 FP32, 8×V100 scaling efficiency, batch 112", lambda: resnet50(112),
     "v100", {"precision": "fp32"}, 7.76, _RN50_2103 + "DGX-1 16GB: 367 → 2855 img/s",
     "--model resnet50 --gpu v100 --batch 112 --precision fp32"),
    # the same recipe on a DGX-1 of V100 32GB (the v100 preset's part): separate measurements
    ("ResNet-50 AMP, 8×V100 32GB scaling efficiency, batch 256", lambda: resnet50(256),
     "v100", {}, 6.96, _RN50_2103 + "DGX-1 32GB: 1156 → 8056 img/s",
     "--model resnet50 --gpu v100 --batch 256"),
    ("ResNet-50 FP32, 8×V100 32GB scaling efficiency, batch 112", lambda: resnet50(112),
     "v100", {"precision": "fp32"}, 7.75, _RN50_2103 + "DGX-1 32GB: 356 → 2766 img/s",
     "--model resnet50 --gpu v100 --batch 112 --precision fp32"),
    # DALI: the input pipeline off the training processes' CPU path. The TF32 columns have no
    # row: innet has no TF32 precision (its FP32 runs on the FP32 pipes).
    ("ResNet-50 AMP, 8×A100 40GB scaling efficiency, batch 256, DALI", lambda: resnet50(256),
     "a100", {}, 7.74, _RN50_2006 + "DGX A100 40GB: 1240.81 → 9604.92 img/s",
     "--model resnet50 --gpu a100 --batch 256"),
    ("ResNet-50 AMP, 8×V100 scaling efficiency, batch 256, DALI", lambda: resnet50(256),
     "v100", {}, 7.75, _RN50_2006 + "DGX-1 16GB: 856.52 → 6635.90 img/s",
     "--model resnet50 --gpu v100 --batch 256"),
    ("ResNet-50 FP32, 8×V100 scaling efficiency, batch 128, DALI", lambda: resnet50(128),
     "v100", {"precision": "fp32"}, 7.77, _RN50_2006 + "DGX-1 16GB: 373.21 → 2899.62 img/s",
     "--model resnet50 --gpu v100 --batch 128 --precision fp32"),
    ("ResNet-50 AMP, 8×V100 32GB scaling efficiency, batch 256, DALI", lambda: resnet50(256),
     "v100", {}, 7.78, _RN50_2006 + "DGX-1 32GB: 816.00 → 6347.26 img/s",
     "--model resnet50 --gpu v100 --batch 256"),
    ("ResNet-50 FP32, 8×V100 32GB scaling efficiency, batch 128, DALI", lambda: resnet50(128),
     "v100", {"precision": "fp32"}, 7.82, _RN50_2006 + "DGX-1 32GB: 359.76 → 2813.23 img/s",
     "--model resnet50 --gpu v100 --batch 128 --precision fp32"),
    ("BERT-large SQuAD AMP, 8×A100 scaling efficiency, batch 32, seq 384",
     lambda: bert_large(32, 384), "a100-80", {}, 7.66, "DeepLearningExamples BERT README, "
     "fine-tuning DGX A100: 110.5 → 846.7 seq/s", "--model bert_large --gpu a100-80 "
     "--batch 32 --seq 384"),
    ("BERT-large SQuAD AMP, 8×V100 scaling efficiency, batch 16, seq 384",
     lambda: bert_large(16, 384), "v100", {}, 7.34, "DeepLearningExamples BERT README, "
     "fine-tuning DGX-1 32G: 52 → 382 seq/s", "--model bert_large --gpu v100 --batch 16 "
     "--seq 384"),
    ("BERT-large SQuAD FP32, 8×V100 scaling efficiency, batch 8, seq 384",
     lambda: bert_large(8, 384), "v100", {"precision": "fp32"}, 7.12,
     "DeepLearningExamples BERT README, fine-tuning DGX-1 32G: 12 → 85.5 seq/s",
     "--model bert_large --gpu v100 --batch 8 --seq 384 --precision fp32"),
    # pre-training: gradient accumulation, one all-reduce per accumulated batch (LAMB there;
    # innet's Adam moves the same bytes a parameter)
    ("BERT-large pre-training AMP, 8×A100 weak scaling, batch 256, seq 128, 32 accumulated",
     lambda: bert_large(256, 128), "a100-80", {"grad_accum": 32}, 7.91,
     "DeepLearningExamples BERT README, pre-training DGX A100: 580 → 4591 seq/s",
     "--model bert_large --gpu a100-80 --batch 256 --seq 128 --grad-accum 32"),
    ("BERT-large pre-training AMP, 8×A100 weak scaling, batch 32, seq 512, 128 accumulated",
     lambda: bert_large(32, 512), "a100-80", {"grad_accum": 128}, 7.89,
     "DeepLearningExamples BERT README, pre-training DGX A100: 210 → 1657 seq/s",
     "--model bert_large --gpu a100-80 --batch 32 --seq 512 --grad-accum 128"),
    ("BERT-large pre-training AMP, 8×V100 weak scaling, batch 64, seq 128, 64 accumulated",
     lambda: bert_large(64, 128), "v100", {"grad_accum": 64}, 7.79,
     "DeepLearningExamples BERT README, pre-training DGX-1 32G: 224 → 1746 seq/s",
     "--model bert_large --gpu v100 --batch 64 --seq 128 --grad-accum 64"),
    ("BERT-large pre-training AMP, 8×V100 weak scaling, batch 8, seq 512, 256 accumulated",
     lambda: bert_large(8, 512), "v100", {"grad_accum": 256}, 7.81,
     "DeepLearningExamples BERT README, pre-training DGX-1 32G: 75 → 586 seq/s",
     "--model bert_large --gpu v100 --batch 8 --seq 512 --grad-accum 256"),
)


def _scaling_rows():
    """One row per published figure: the scaling efficiency (8-GPU speedup / 8). The DDP
    overhead vs one GPU is the same measurement (100 / efficiency − 1), so it is not a row of
    its own; docs/calibration.md lists it beside each."""
    rows = []
    p = SINGLE_VALUE_POINTS
    for quantity, build, gpu_name, config, speedup, source, options in _SCALING:
        efficiency, overhead = scaling(build(), gpu_name, **config)
        published = round(speedup / 8 * 100, 2)
        r = row(quantity, efficiency, published, published - p, published + p, source,
                f"innet model iteration {options} --gpus 1 vs --gpus 8", "%")
        r["note"] = (f"DDP overhead vs one GPU: model {overhead:.1f} %, published "
                     f"{(8 / speedup - 1) * 100:.1f} %")
        rows.append(r)
    return rows


#: The providers of rows, in table order: the collectives' (:mod:`sim.gpu.collective_figures`),
#: this module's, then the multi-node collectives' (:mod:`sim.gpu.multinode_figures`).
PROVIDERS = [collective_rows, _single_gpu_rows, _overlap_rows, _tail_effect_rows,
             _scaling_rows, multinode_rows]


def validation_rows(providers=None):
    """Every row of every provider, finished (with ``error`` and ``within``)."""
    return [finish(r) for provider in (PROVIDERS if providers is None else providers)
            for r in provider()]
