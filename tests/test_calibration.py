"""The model against published measurements: every row inside its band, except the known
misses listed here with their reason (a change that moves a row in or out fails).

The table takes about 20 s to compute (the scaling rows simulate 34 iterations), so it is
computed by the first test that needs it in each pytest-xdist worker, not at collection (where
every worker paid for it before running anything)."""

import functools

import pytest

from sim.gpu.calibration import calibration_markdown
from sim.gpu.collective_figures import KNOWN_MISSES as COLLECTIVE_MISSES
from sim.gpu.multinode_figures import KNOWN_MISSES as MULTINODE_MISSES
from sim.gpu.validation import finish, overlap_sweep, row, validation_rows


@functools.cache
def table():
    """quantity → finished row, for every provider's rows."""
    return {r["quantity"]: r for r in validation_rows()}


#: quantity → why innet misses it (see docs/calibration.md, "Why rows miss")
KNOWN_MISSES = {
    "compute slowdown under overlap, sweep average (4 GPUs)":
        "21.9 % vs 18.9 ± 2: the published average spans A100, H100, MI250 and MI210; "
        "innet's A100/H100 configurations are assumed",
    "serial vs overlapped iteration, sweep average (4 GPUs)":
        "13.2 % vs 10.2: four platforms published, two modelled, configurations assumed",
    "serial vs overlapped iteration, sweep worst case (4 GPUs)":
        "23.0 % vs 26.6: four platforms published, two modelled, configurations assumed",
    **{f"ResNet-50 {p}, 8×{g} scaling efficiency, batch {b}":
       "21.03 tables: input from the PyTorch DataLoader (CPU JPEG decode in 8-16 workers a "
       "GPU), which innet does not model; the same README with DALI scaled 96.8-97.8 %"
       for p, g, b in (("AMP", "A100", 256), ("AMP", "V100", 256), ("FP32", "V100", 112),
                       ("AMP", "V100 32GB", 256), ("FP32", "V100 32GB", 112))},
    **{f"ResNet-50 {p}, 8×{g} scaling efficiency, batch {b}, DALI":
       "2.3-3.2 % lost at 8 GPUs, as in BERT pre-training on the same DGX-1 where nothing "
       "is communicated per micro-batch: a per-GPU slowdown innet does not model"
       for p, g, b in (("AMP", "A100 40GB", 256), ("AMP", "V100", 256), ("FP32", "V100", 128),
                       ("AMP", "V100 32GB", 256))},
    "BERT-large SQuAD FP32, 8×V100 scaling efficiency, batch 8, seq 384":
        "82 ms an iteration lost at 8 GPUs, three times the whole all-reduce; DGX-1 "
        "cube-mesh not modelled",
    "BERT-large pre-training AMP, 8×V100 weak scaling, batch 64, seq 128, 64 accumulated":
        "2.6 % lost per micro-batch with one all-reduce per 64: not communication",
    "BERT-large pre-training AMP, 8×V100 weak scaling, batch 8, seq 512, 256 accumulated":
        "2.4 % lost per micro-batch with one all-reduce per 256: not communication",
    **{f"ResNet-50 training, one V100 {m}, batch 256, AMP":
       "conv_efficiency, fitted on the A100 80GB, is one fraction of tensor peak for both "
       "architectures; V100 reaches more of its (lower) peak"
       for m in ("16GB", "32GB")},
    **COLLECTIVE_MISSES,  # with their reasons, in sim/gpu/collective_figures.py
    **MULTINODE_MISSES,   # and sim/gpu/multinode_figures.py
}


def test_every_row_within_its_band_or_a_known_miss():
    """Each row is checked; the failure lists every row that moved, one line each."""
    moved = []
    for quantity, r in sorted(table().items()):
        if quantity in KNOWN_MISSES and r["within"]:
            moved.append(f"{quantity} now within {r['tolerance']}: drop it from the misses")
        elif quantity not in KNOWN_MISSES and not r["within"]:
            moved.append(f"{quantity}: model {r['model']:.4g} outside {r['tolerance']} "
                         f"(published {r['published']}, {r['source']})")
    assert not moved, "\n".join(moved)


def test_known_misses_are_rows():
    assert set(KNOWN_MISSES) <= set(table())


def test_schema_and_at_most_half_fitted():
    keys = {"quantity", "model", "published", "low", "high", "unit", "source", "command",
            "role"}
    rows = table()
    for r in rows.values():
        assert keys <= set(r)
        assert r["role"] in ("fitted", "predicted")
        assert r["low"] <= r["high"]
        assert (r["role"] == "fitted") == ("fits" in r)
    fitted = [r for r in rows.values() if r["role"] == "fitted"]
    assert len(fitted) <= len(rows) / 2
    # one figure per fitted constant
    assert len({r["fits"] for r in fitted}) == len(fitted)


def test_finish_by_hand():
    r = finish(row("q", 11.0, "8–12", 8.0, 12.0, "s", "c"))
    assert r["within"] and r["error"] == "+10.0 %"
    assert not finish(row("q", 12.5, 10.0, 9.0, 12.0, "s", "c"))["within"]


def test_providers_are_pluggable():
    extra = lambda: [row("extra", 1.0, 1.0, 0.5, 1.5, "s", "c")]   # noqa: E731
    rows = validation_rows([extra])
    assert [r["quantity"] for r in rows] == ["extra"] and rows[0]["within"]


def test_overlap_sweep_average_and_worst():
    """Lee et al. 2025 (arXiv 2507.03114): 40.0 % worst compute slowdown (fitted) within ±2
    points; the 18.9 % average is a prediction, asserted (or listed as missed) by its row."""
    sweep = overlap_sweep()
    assert abs(max(r["slowdown"] for r in sweep) - 0.40) <= 0.02
    for r in sweep:   # the attribution sums to the slowdown
        assert sum(r["attribution"].values()) == pytest.approx(r["slowdown"], abs=1e-9)


def test_calibration_doc_is_current():
    from pathlib import Path
    doc = Path(__file__).resolve().parent.parent / "docs" / "calibration.md"
    assert doc.read_text() == calibration_markdown(list(table().values())), \
        "regenerate with: innet model calibrate --write docs/calibration.md"
