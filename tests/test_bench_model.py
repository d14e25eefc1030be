"""``innet bench model`` runs and reports what it measured."""

from sim.bench.model import bench_model


def test_bench_model_reports_every_row():
    result = bench_model(hetero_max=8)
    assert result["resnet50_8gpu"]["buckets"] == 5
    assert [row["gpus"] for row in result["synthetic"]] == [8, 64, 256]
    assert [row["records"] for row in result["synthetic"]] == [8 * 200, 64 * 200, 256 * 200]
    # more GPUs in the ring: more latency steps, never a faster iteration
    times = [row["iteration_s"] for row in result["synthetic"]]
    assert times == sorted(times)
