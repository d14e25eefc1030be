"""The model against published measurements (sources in ../shared/CALIBRATION.md)."""

import pytest

from sim.gpu.calibration import calibration_rows, overlap_sweep

ROWS = {row["quantity"]: row for row in calibration_rows()}


@pytest.mark.parametrize("quantity", sorted(ROWS))
def test_within_published_tolerance(quantity):
    row = ROWS[quantity]
    assert row["within"], (f"{quantity}: model {row['model']:.4g} outside {row['tolerance']} "
                           f"(published {row['published']}, {row['source']})")


def test_ring_busbw_within_5_percent():
    """nccl-tests issues #149/#228 (8×A100, 200–235 GB/s) and #212/#309 (8×H100, 360–370)."""
    a100 = ROWS["8×A100 ring all-reduce busbw, 1 GiB"]["model"]
    h100 = ROWS["8×H100 ring all-reduce busbw, 1 GiB (NVLS off)"]["model"]
    assert abs(a100 / 217.5 - 1) <= 0.05
    assert abs(h100 / 365.0 - 1) <= 0.05


def test_overlap_sweep_average_and_worst():
    """Lee et al. 2025 (arXiv 2507.03114): 18.9 % average, 40 % worst compute slowdown."""
    sweep = overlap_sweep()
    average = sum(r["slowdown"] for r in sweep) / len(sweep)
    assert abs(average - 0.189) <= 0.05
    assert max(r["slowdown"] for r in sweep) <= 0.40


def test_calibration_doc_is_current():
    from pathlib import Path

    from sim.gpu.calibration import calibration_markdown
    doc = Path(__file__).resolve().parent.parent / "docs" / "calibration.md"
    assert doc.read_text() == calibration_markdown(list(ROWS.values())), \
        "regenerate with: innet model calibrate --write docs/calibration.md"
