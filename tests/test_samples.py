"""The sample traces in traces/ load, validate, and are what the generator makes today."""

import subprocess
import sys
from pathlib import Path

import pytest

from sim.trace.format import VERSION, read_trace, trace_summary

TRACES = Path(__file__).resolve().parent.parent / "traces"


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.itr")) + sorted(TRACES.glob("*.txt")),
                         ids=lambda p: p.name)
def test_sample_validates(path):
    meta, records = read_trace(path)
    assert sum(1 for _ in records) > 0 and meta["gpus"] == 4
    # every sample is in the current version but the one kept as version 1 wrote it
    assert trace_summary(path)["version"] == (1 if path.stem.endswith("_v1") else VERSION)


def test_version_1_sample_reads_as_its_regeneration():
    """The ring sample as version 1 wrote it (no checksums) and as version 3 writes it hold the
    same metadata (but the format version, and the configuration keys trace gen has recorded
    since) and the same records."""
    old_meta, old = read_trace(TRACES / "resnet50_a100x4_ring_v1.itr")
    new_meta, new = read_trace(TRACES / "resnet50_a100x4_ring.itr")
    assert old_meta.pop("format_version") == 1 and new_meta.pop("format_version") == VERSION
    added = {key: new_meta.pop(key) for key in set(new_meta) - set(old_meta)}
    assert added == {"bucketing": "ddp", "first_bucket_bytes": 1 << 20,
                     "fusion_bytes": 64 * 10**6, "fusion_cycle_s": 5e-3, "overlap": True,
                     "grad_accum_microbatches": 1, "precision": "amp",
                     "straggler_speed_factors": {},
                     "channels_sms": None, "collective_sms": 24,
                     "optimizer_bytes_per_param": 20.0, "job": 0, "seq_tokens": None,
                     "hidden_features": None, "layers": None}
    # The version-1 file was written before the iteration counted what frameworks pay (issue
    # 17: DDP's bucket kernels, the unscale pass, the optimizer's traffic, CPU issue): the
    # iteration is longer and each GPU has one more kernel per bucket (5 buckets, 4 GPUs).
    assert old_meta.pop("iteration_s") < new_meta.pop("iteration_s")
    assert old_meta == new_meta
    assert len(list(new)) - len(list(old)) == 4 * 5


def test_samples_are_current(tmp_path):
    out = tmp_path / "x.itr"
    subprocess.run([sys.executable, "-m", "sim.cli", "trace", "gen", "--model", "resnet50",
                    "--batch", "8", "--gpu", "a100", "--gpus", "4", "--algo", "ring",
                    "--bucket-mb", "25", "--chunk-kb", "256", "-o", str(out)], check=True,
                   capture_output=True)
    assert out.read_bytes() == (TRACES / "resnet50_a100x4_ring.itr").read_bytes(), \
        "regenerate with traces/regenerate.sh"
