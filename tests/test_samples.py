"""The sample traces in traces/ load, validate, and are what the generator makes today."""

import subprocess
import sys
from pathlib import Path

import pytest

from sim.trace.format import read_trace

TRACES = Path(__file__).resolve().parent.parent / "traces"


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.itr")) + sorted(TRACES.glob("*.txt")),
                         ids=lambda p: p.name)
def test_sample_validates(path):
    meta, records = read_trace(path)
    assert sum(1 for _ in records) > 0 and meta["gpus"] == 4


def test_samples_are_current(tmp_path):
    out = tmp_path / "x.itr"
    subprocess.run([sys.executable, "-m", "sim.cli", "trace", "gen", "--model", "resnet50",
                    "--batch", "8", "--gpu", "a100", "--gpus", "4", "--algo", "ring",
                    "--bucket-mb", "25", "--chunk-kb", "256", "-o", str(out)], check=True,
                   capture_output=True)
    assert out.read_bytes() == (TRACES / "resnet50_a100x4_ring.itr").read_bytes(), \
        "regenerate with traces/regenerate.sh"
