"""The validation table as Markdown (docs/calibration.md), and the names older code imports.

The rows live in :mod:`sim.gpu.validation`; ``innet model calibrate --write
docs/calibration.md`` regenerates the doc, ``innet model validate`` prints the rows, and
``tests/test_calibration.py`` asserts every row.
"""

from sim.gpu.validation import overlap_sweep, validation_rows

__all__ = ["calibration_rows", "calibration_markdown", "overlap_sweep"]


def calibration_rows():
    """Every validation row (see :func:`sim.gpu.validation.validation_rows`)."""
    return validation_rows()


def calibration_markdown(rows):
    fitted = sum(r["role"] == "fitted" for r in rows)
    missed = [r for r in rows if not r["within"]]
    lines = [
        "# Validation: model vs published figures",
        "",
        "Regenerate with `innet model calibrate --write docs/calibration.md`; "
        "`innet model validate [--json]` prints the same rows; "
        "`pytest tests/test_calibration.py` asserts every row (inside its band, or a listed "
        "known miss).",
        "Bandwidths in GB/s = 10^9 bytes/s. Tolerance: the published band, or for a single "
        "published value with no stated spread ±2 points (declared before comparing).",
        "",
        f"{len(rows)} rows: {fitted} fitted, {len(rows) - fitted} predicted; "
        f"{len(rows) - len(missed)} within, {len(missed)} missed.",
        "",
        "| quantity | model | published | tolerance | error | role | within | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        role = r["role"] + (f" (`{r['fits']}`)" if r.get("fits") else "")
        lines.append(f"| {r['quantity']} | {r['model']:.4g} {r['unit']} | {r['published']} "
                     f"{r['unit']} | {r['tolerance']} | {r['error']} | {role} | "
                     f"{'yes' if r['within'] else '**missed**'} | {r['source']} |")
    lines += ["", "Commands behind the rows:", ""]
    lines += [f"- {r['quantity']}: `{r['command']}`" + (f"; {r['note']}" if r.get("note")
                                                         else "") for r in rows]
    lines += ["", _NOTES, ""]
    return "\n".join(lines)


_NOTES = """## What was fitted, and to what

One constant per mechanism at most, each on one figure (the rows marked fitted):

- `NVLS_EFFICIENCY` (`sim/gpu/in_switch.py`): fitted on the 8×H100 NVLS peak row.
- No collective constant for ring or tree: NCCL's tuner (`sim/gpu/nccl_tuning.py`) picks the
  protocol and channels, and the time is NCCL's device pipeline (`sim/gpu/nccl_pipeline.py`):
  chunks, slices and loops as `enqueue.cc` and `prims_simple.h` cut them, one `hwLat` per
  slice of every loop. `SIMPLE_EFFICIENCY` is 1.0 (Simple sends no flags in its data); it was
  0.95, fitted on the 8×A100 1 GiB row, before the pipeline modelled what it stood for.
- `conv_efficiency` (`sim/gpu/presets.py`): fraction of tensor peak a convolution reaches;
  fitted on ResNet-50 on one A100. The V100 row is a prediction.
- `L2_REFETCH = 4.21` (`sim/gpu/contention.py`): HBM re-reads of each evicted byte of a
  kernel's working set; fitted on the worst case (40.0 %) of Lee et al. 2025's sweep. The SM
  mechanism has no fitted constant (NCCL's CTA from NCCL's source against the CUDA per-SM
  limits), nor does the HBM mechanism (proportional share of the achievable bandwidth).

## The overlap sweep's configurations (assumed)

Lee et al. 2025 (arXiv 2507.03114) state "GPT and LLaMA models, across 4 A100s, H100s" and
the four figures; the library holds only the abstract, so innet's configurations are assumed
(`sim/gpu/validation.py` `SWEEP`): data-parallel training on 4 GPUs of one node, ring
all-reduce of DDP buckets under AMP, a GPT-like (hidden 2048, 24 layers) and a LLaMA-7B-like
(hidden 4096, 32 layers, on H100 only: it does not fit an A100 40GB with Adam) model,
sequence 1024 and 2048, micro-batch 1, 2, 4, on A100 and H100; the compute slowdown is the
backward pass's.

## Why rows miss

- ResNet-50 scaling (AMP on 8×A100 and 8×V100, FP32 on 8×V100): innet predicts 99 %+,
  NVIDIA measures 84–87 % (AMP) and 97 % (FP32).
  innet models compute, the all-reduce, DDP's copies, the optimizer and CPU issue; NVIDIA's
  8-GPU runs also feed 16,621 img/s through DALI's JPEG decode and augmentation (GPU and
  CPU), which competes with training and is not modelled. The all-reduce itself (100 MB on
  NVLink, about 1 ms) cannot cost 16 %.
- BERT-large SQuAD FP32 on 8×V100 (97.4 % vs 89.0 %) and BERT-large pre-training on 8×V100
  (99.9 % vs 97.4–97.6 %): a DGX-1's V100s are joined by a hybrid cube-mesh, not an NVSwitch;
  innet's collectives assume every GPU reaches every other at full NVLink bandwidth, and it
  models no run-to-run skew between GPUs, which every all-reduce waits for.
- ResNet-50 on one A100 80GB (2807 img/s vs 2470): `conv_efficiency` was fitted on the 40GB
  preset, though NVIDIA measured an 80GB part; with the 80GB part's HBM bandwidth the
  memory-bound layers run faster than measured. Refitting it on the 80GB preset is for the
  preset's owner (`sim/gpu/presets.py`).
- The serial-vs-overlapped rows: innet's serial iteration is 13.2 % slower on average (10.2
  published) and 23.0 % at worst (26.6): the sweep's configurations are assumed.
- 8×H100 ring busbw: 356.8 GB/s against a published 360–370 (NCCL's per-link figure for
  Hopper, 20.6 GB/s, and its per-slice latency).
- 8×A100 ring all-reduce at 16 MiB and the half-peak size: NCCL's tuner picks LL128 at
  4–32 MiB, whose flags travel in the data, so its pipeline is what the tuner estimates
  (174 us at 16 MiB); the table measured 245 us, near the Simple pipeline's 226 us. Which
  protocol that run used is not published (`KNOWN_MISSES`, `sim/gpu/collective_figures.py`).

The DDP overhead vs one GPU is the same measurement as a scaling row (100 / efficiency − 1):
it is listed beside each scaling row's command above, not counted as a row of its own."""
