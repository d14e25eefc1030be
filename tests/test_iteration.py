"""The data-parallel iteration model: buckets, overlap, exposed communication, stragglers."""

import math

import pytest

from sim.gpu.collectives import allreduce_cost
from sim.gpu.contention import KERNEL_GAP_S, KernelSpec, hbm_rate, kernel_time
from sim.gpu.presets import gpu_preset
from sim.gpu.iteration import IterationConfig, make_buckets, simulate_iteration, simulate_streams
from sim.gpu.workloads import bert_large, resnet50

A100 = gpu_preset("a100")
MiB = 1 << 20


def test_ddp_buckets():
    w = bert_large(batch=2)
    buckets = make_buckets(w, IterationConfig())
    assert sum(b.nbytes for b in buckets) == w.params * 4
    for b in buckets[:1]:   # the first closes at 1 MiB, unless one tensor is larger
        assert b.nbytes <= 1 * MiB or len(b.layers) == 1
    for b in buckets[1:]:
        assert b.nbytes <= 25 * MiB or len(b.layers) == 1
    # gradient-ready order: the last layer's gradients go first
    assert buckets[0].layers[0] == max(i for i, layer in enumerate(w.layers) if layer.params)


def test_no_overlap_is_the_serial_sum():
    """Without overlap (and with no CPU issue limit), the iteration is the sum of its kernels,
    DDP's bucket kernels (copy in and divide: 4 bytes moved per bucket byte), its all-reduces
    and the final step."""
    w = resnet50(batch=32)
    config = IterationConfig(n_gpus=8, overlap=False, op_cpu_s=0.0, bucket_cpu_s=0.0)
    r = simulate_iteration(w, A100, config, record=False)
    kernels = sum(kernel_time(A100, KernelSpec(layer.name, f, b, layer.tensor_core,
                                               layer.kind == "conv")) + KERNEL_GAP_S
                  for layer in w.layers for f, b in ((layer.fwd_flops, layer.fwd_bytes),
                                                     (layer.bwd_flops, layer.bwd_bytes)))
    kernels += sum(4 * b / hbm_rate(A100) + KERNEL_GAP_S for b in r.bucket_bytes)
    comm = sum(allreduce_cost(A100, 8, b).time_s for b in r.bucket_bytes)
    assert r.backprop_slowdown == pytest.approx(0.0, abs=1e-9)
    assert r.exposed_comm_s == pytest.approx(comm, rel=1e-6)
    assert r.iteration_s == pytest.approx(kernels + comm + r.optimizer_s + KERNEL_GAP_S,
                                          rel=1e-3)


def test_overlap_hides_communication_but_slows_backprop():
    w = bert_large(batch=4)
    serial = simulate_iteration(w, A100, IterationConfig(n_gpus=8, overlap=False), record=False)
    over = simulate_iteration(w, A100, IterationConfig(n_gpus=8), record=False)
    assert over.iteration_s < serial.iteration_s
    assert over.exposed_comm_s < serial.exposed_comm_s
    assert over.backprop_slowdown > 0
    assert sum(over.slowdown_attribution.values()) == pytest.approx(over.backprop_slowdown)


def test_inswitch_beats_ring():
    w = bert_large(batch=4)
    ring = simulate_iteration(w, A100, IterationConfig(n_gpus=8, algo="ring"), record=False)
    switch = simulate_iteration(w, A100, IterationConfig(n_gpus=8, algo="inswitch"),
                                record=False)
    assert switch.backprop_slowdown < ring.backprop_slowdown
    assert switch.iteration_s < ring.iteration_s


def test_straggler_slows_everyone():
    w = resnet50(batch=32)
    base = simulate_iteration(w, A100, IterationConfig(n_gpus=8), record=False)
    slow = simulate_iteration(w, A100, IterationConfig(n_gpus=8, speed=[1.0] * 7 + [0.5]),
                              record=False)
    assert slow.iteration_s > 1.8 * base.forward_s + base.backward_s
    assert set(slow.classes) == {"0.5", "1.0"}


def test_gradient_accumulation_runs_more_micro_batches():
    w = resnet50(batch=32)
    one = simulate_iteration(w, A100, IterationConfig(n_gpus=8), record=False)
    two = simulate_iteration(w, A100, IterationConfig(n_gpus=8, grad_accum=2), record=False)
    assert two.iteration_s == pytest.approx(one.iteration_s + one.forward_s +
                                            one.backward_alone_s, rel=0.05)


def test_horovod_fusion_makes_fewer_buckets():
    w = bert_large(batch=4)
    ddp = simulate_iteration(w, A100, IterationConfig(n_gpus=8), record=False)
    hvd = simulate_iteration(w, A100, IterationConfig(n_gpus=8, bucketing="horovod"),
                             record=False)
    assert hvd.buckets < ddp.buckets


def test_synthetic_chain():
    """100 × 500 µs kernels, each followed by a 25 MiB all-reduce overlapping the next."""
    kernel = KernelSpec("k", A100.tensor_tflops * 1e12 * A100.compute_efficiency * 500e-6, 0)
    queue = [(f"k{i}", kernel, "bwd") for i in range(100)]
    launches = [(i, 25 * MiB, f"ar{i}") for i in range(100)]
    r = simulate_streams(A100, 8, queue, launches, algo="ring", record=False)
    assert r.iteration_s >= 100 * 500e-6
    assert r.allreduce_s >= 100 * allreduce_cost(A100, 8, 25 * MiB).time_s * 0.999


def test_config_validation():
    with pytest.raises(ValueError, match="speed has 2 factors for 8 GPUs"):
        simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=8, speed=[1, 1]))


def _chain(n, speeds, kernels=20):
    """The synthetic program of ``innet bench model``, shorter: ``kernels`` chained 500 µs
    kernels, each followed by a 25 MiB all-reduce overlapping the next."""
    kernel = KernelSpec("k", A100.tensor_tflops * 1e12 * A100.compute_efficiency * 500e-6, 1e6)
    queue = [(f"k{i}", kernel, "bwd") for i in range(kernels)]
    launches = [(i, 25 * MiB, f"ar{i}") for i in range(kernels)]
    return simulate_streams(A100, n, queue, launches, algo="ring", speed=speeds, record=False)


def test_engine_work_grows_as_n_log_n_with_every_gpu_different():
    """No two GPUs alike: the engine's work (compute-stream updates and heap operations, as it
    counts them) grows no faster than N log N from 64 to 512 GPUs. A stepping engine that
    visits every GPU at every event grows as N² (x64 here, against x12 for N log N)."""
    work = {}
    for n in (64, 512):
        r = _chain(n, [1.0 + 0.001 * k for k in range(n)])
        assert len(r.classes) == n
        ops = r.engine_ops
        work[n] = ops["stream_updates"] + ops["heap_ops"]
        # a bounded amount of work per event
        assert work[n] <= 8 * ops["events"]
    n_log_n = (512 * math.log2(512)) / (64 * math.log2(64))
    assert 512 / 64 / 2 <= work[512] / work[64] <= n_log_n


def test_many_classes_agree_with_one():
    """GPUs whose speeds differ by parts in 10^12 are simulated as classes of their own, each
    advanced lazily at its own events; they must finish as one class would (a GPU advanced at
    a wrong rate, or left behind, would show)."""
    one = _chain(16, None)
    many = _chain(16, [1.0 + 1e-12 * k for k in range(16)])
    assert len(many.classes) == 16
    for key in ("iteration_s", "allreduce_s", "backward_s", "exposed_comm_s"):
        assert getattr(many, key) == pytest.approx(getattr(one, key), rel=1e-9)


def test_straggler_among_distinct_speeds_sets_the_pace():
    """Every GPU at its own speed: the collectives wait for the slowest member, so the
    iteration is as slow as with every GPU at the slowest speed, give or take contention."""
    speeds = [1.0 + 0.01 * k for k in range(32)]
    mixed = _chain(32, speeds)
    slowest = _chain(32, [1.0] * 32)
    assert mixed.iteration_s == pytest.approx(slowest.iteration_s, rel=0.01)
    assert mixed.iteration_s >= 20 * 500e-6


# -- IterationConfig's ranges (tests/test_inputs.py has them from the command line) -------------

@pytest.mark.parametrize("changes, message", [
    ({"n_gpus": 0}, r"n_gpus must be an integer in \[1, 64\]"),
    ({"n_gpus": 65}, r"n_gpus must be an integer in \[1, 64\] \(one switch of 64 ports"),
    ({"algo": "mesh"}, "algo must be one of ring, tree, direct, nvls, inswitch, not 'mesh'"),
    ({"bucket_cap_bytes": 0}, r"bucket_cap_bytes must be an integer in \[1, 1125899906842624\]"),
    ({"first_bucket_bytes": 0.5}, "first_bucket_bytes must be an integer"),
    ({"fusion_bytes": 2**60}, "fusion_bytes must be an integer"),
    ({"cycle_s": math.nan}, r"cycle_s must be a finite number in \[0, 1000\]"),
    ({"cycle_s": 0}, "cycle_s must be positive, not 0"),
    ({"grad_accum": 0}, "grad_accum must be an integer"),
    ({"speed": [1.0] * 7 + [math.nan]}, r"the speed factor of GPU 7 must be a finite number in "
                                        r"\[0.001, 1000\]"),
    ({"speed": [1.0] * 7 + [math.inf]}, "the speed factor of GPU 7 must be a finite number"),
    ({"speed": [1e-300] + [1.0] * 7}, "the speed factor of GPU 0 must be a finite number"),
    ({"speed": [-0.0] + [1.0] * 7}, "the speed factor of GPU 0 must be a finite number"),
    ({"channels": 0}, "channels must be an integer"),
    ({"optimizer_bytes_per_param": math.inf}, "optimizer_bytes_per_param must be a finite"),
    ({"optimizer": "lion"}, "optimizer must be auto, sgd, adam"),
    ({"precision": "fp8"}, "precision must be one of amp, o2, fp32"),
    ({"allreduce_bytes": 3}, "allreduce_bytes must be 2 or 4"),
    ({"gradient_as_bucket_view": 1}, "gradient_as_bucket_view must be True or False"),
    ({"op_cpu_s": math.nan}, r"op_cpu_s must be a finite number in \[0, 1\]"),
    ({"bucket_cpu_s": -1.0}, "bucket_cpu_s must be a finite number"),
])
def test_config_ranges(changes, message):
    config = IterationConfig(n_gpus=8, **{k: v for k, v in changes.items() if k != "n_gpus"})
    if "n_gpus" in changes:
        config.n_gpus = changes["n_gpus"]
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_config_against_the_gpu_and_workload():
    """What depends on the GPU and the workload: channels up to the SMs, gradients and each
    layer's activations within HBM, and at most MAX_KERNELS kernels to simulate."""
    from sim.gpu.iteration import MAX_KERNELS
    from sim.gpu.workloads import transformer
    with pytest.raises(ValueError, match=r"channels must be an integer in \[1, 108\]"):
        simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=8, channels=109))
    with pytest.raises(ValueError, match="gradients, .* do not fit in the HBM of one A100"):
        simulate_iteration(transformer(hidden=20_000, layers=8, seq=8, batch=1), A100,
                           IterationConfig(n_gpus=8))
    with pytest.raises(ValueError, match="layer conv1 of resnet50 outputs .* bytes of "
                                         "activations, more than the HBM"):
        simulate_iteration(resnet50(30_000), A100, IterationConfig(n_gpus=8))
    accum = MAX_KERNELS // (2 * len(resnet50(8).layers)) + 1
    with pytest.raises(ValueError, match=f"at most {MAX_KERNELS}"):
        simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=8, grad_accum=accum))


@pytest.mark.parametrize("factor", [1e-3, 1e3])
def test_speed_factors_at_the_bounds_simulate(factor):
    """The extremes of the speed range run to the end (no deadlock, no overflow)."""
    base = simulate_iteration(resnet50(8), A100, IterationConfig(n_gpus=4), record=False)
    r = simulate_iteration(resnet50(8), A100,
                           IterationConfig(n_gpus=4, speed=[1.0, 1.0, 1.0, factor]),
                           record=False)
    assert math.isfinite(r.iteration_s)
    if factor < 1:
        assert r.iteration_s > 500 * base.iteration_s
    else:
        assert r.iteration_s == pytest.approx(base.iteration_s, rel=0.05)


def test_framework_costs_by_hand():
    """Optimizer traffic per parameter (SGD-momentum 5 x 4 bytes, Adam 7 x 4, apex O2 + 4),
    the final step's bytes (optimizer + GradScaler unscale 8 + DDP copy-back 2 x 4 per
    parameter), buckets in the all-reduce precision, DDP's bucket kernels."""
    from sim.gpu.iteration import make_buckets, optimizer_bytes, overhead_kernels
    w = bert_large(batch=2)
    assert optimizer_bytes(w, IterationConfig()) == 28.0
    assert optimizer_bytes(resnet50(8), IterationConfig()) == 20.0
    assert optimizer_bytes(w, IterationConfig(precision="o2")) == 32.0
    one = simulate_iteration(w, A100, IterationConfig(n_gpus=1), record=False)
    eight = simulate_iteration(w, A100, IterationConfig(n_gpus=8), record=False)
    rate = hbm_rate(A100)
    assert one.framework["final_step_alone_s"] == pytest.approx(w.params * (28 + 8) / rate)
    assert eight.framework["final_step_alone_s"] == pytest.approx(w.params * (28 + 8 + 8) /
                                                                 rate)
    assert one.framework["ddp_bucket_kernels_s"] == 0
    assert sum(b.nbytes for b in make_buckets(w, IterationConfig(precision="o2"))) == \
        w.params * 2
    bucket = make_buckets(w, IterationConfig())[3]
    (_, copy, _), = overhead_kernels(w, IterationConfig(), bucket)
    (_, view, _), = overhead_kernels(w, IterationConfig(gradient_as_bucket_view=True), bucket)
    assert (copy.hbm_bytes, view.hbm_bytes) == (4 * bucket.nbytes, 2 * bucket.nbytes)


def test_cpu_issue_bounds_the_iteration():
    """With a slow CPU (1 ms an operator) the GPU waits for it: the iteration lasts at least
    one operator per kernel."""
    w = resnet50(batch=2)
    r = simulate_iteration(w, A100, IterationConfig(n_gpus=1, op_cpu_s=1e-3), record=False)
    kernels = 2 * len(w.layers)
    assert r.iteration_s >= kernels * 1e-3
    fast = simulate_iteration(w, A100, IterationConfig(n_gpus=1, op_cpu_s=0.0), record=False)
    assert fast.iteration_s < kernels * 1e-3
