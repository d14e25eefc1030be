"""The experiment's switch at real size: the GPU model's in-switch collective on the
experiment's [switch] (``real_switch``), the full bucket window each point replays at flit
scale 1 (``window_*`` metrics, docs/metrics.md), and the ``--rtl-windows`` option. Goldens are
hand-derived: the slot pool's rate S·C/R (sim/gpu/in_switch.py's module text) and packet and
cycle counts of a 2-GPU window."""

import math

import pytest

from sim.cli.main import main
from sim.experiment.config import MiB, load_config
from sim.experiment.point import real_switch, run_point
from sim.gpu.in_switch import KERNEL_LATENCY_S, switch_timing
from sim.gpu.iteration import IterationConfig
from sim.gpu.presets import gpu_preset

#: Two GPUs, a 2-lane switch (8 B flits) with 4 slots of 4-flit (32 B) chunks, 16-flit
#: (128 B) packets, no pipeline-stage traffic: the window holds the bucket's gradients only.
TINY_SWITCH = """
[experiment]
name = "window"
workloads = ["resnet50"]
gpus = 2
algorithms = ["ring", "inswitch"]
bucket_mb = [1]
policies = ["rr"]
p2p_mb = 0
traffic = ["dp"]
rtl = false
[switch]
lanes = 2
slots = 4
chunk_flits = 4
mtu_flits = 16
"""


def _config(slots=4):
    return load_config(TINY_SWITCH.replace("slots = 4", f"slots = {slots}"), "w.toml")


def _round_trip_s(gpu, spec):
    """Hand-derived slot round trip: two GPU<->switch hops, then the chunk in, the judge's wait,
    the engine's pick and the result pipeline, the egress (the arbiter's registered choice, the
    link register and the egress stage), and the result chunk out, one flit per cycle at the
    GPU's effective link rate."""
    flit = spec.lanes * 4
    cycle = flit / (gpu.link_effective_gbps * 1e9)
    pipeline = (spec.chunk_flits - 1) + spec.judge_wait_cycles + spec.engine_pick_latency + \
        spec.result_latency + spec.egress_latency
    return 2 * gpu.link_latency_s + (pipeline + spec.chunk_flits) * cycle


@pytest.mark.parametrize("slots", [4, 64, 256])
def test_gpu_model_times_inswitch_on_the_experiments_switch(slots):
    """The iteration's in-switch all-reduce runs on the experiment's switch at real size: time
    = kernel launch + round trip + bytes (whole chunks) / min(line, S·C/R)."""
    gpu = gpu_preset("a100")
    spec = real_switch(_config(slots))
    assert (spec.ports, spec.lanes, spec.slots, spec.chunk_flits) == (2, 2, slots, 4)
    cost = IterationConfig(n_gpus=2, algo="inswitch", switch=spec).comm_cost(gpu)
    chunk = spec.lanes * 4 * spec.chunk_flits
    r = _round_trip_s(gpu, spec)
    rate = min(gpu.link_effective_gbps * 1e9, slots * chunk / r)
    for size in (1 << 20, 25 * MiB + 5):
        expected = KERNEL_LATENCY_S + r + math.ceil(size / chunk) * chunk / rate
        assert cost(size, "allreduce").time_s == pytest.approx(expected, rel=1e-12)
    assert switch_timing(gpu, spec).rate_gbps * 1e9 == pytest.approx(rate, rel=1e-12)


def test_more_slots_shorten_a_slot_limited_all_reduce():
    """Slot-limited (S·C < line × R), the streaming time scales as 1/S: 4 → 64 slots is 16×."""
    gpu = gpu_preset("a100")
    size = 64 * MiB
    times = {}
    for slots in (4, 64):
        spec = real_switch(_config(slots))
        assert switch_timing(gpu, spec).slot_limited
        cost = IterationConfig(n_gpus=2, algo="inswitch", switch=spec).comm_cost(gpu)
        times[slots] = cost(size, "allreduce").time_s - KERNEL_LATENCY_S - \
            _round_trip_s(gpu, spec)
    assert times[4] / times[64] == pytest.approx(16, rel=1e-12)


@pytest.fixture(scope="module")
def windows():
    config = _config()
    return config, {a: run_point(config, "resnet50", 1, a, "rr").metrics
                    for a in ("ring", "inswitch")}


def test_inswitch_window_is_slot_round_trips(windows):
    """At flit scale 1 the in-switch window sends every GPU's bucket in 32 B chunks, one packet
    each; 4 slots turn over once per round trip, so the window lasts K/S round trips of
    (2 hops + pipeline + chunk) cycles, and less than one round trip more."""
    config, m = windows
    w = m["inswitch"]
    assert w["window_bucket_mb"] == 1.0
    gpu = gpu_preset("a100")
    flit = config.lanes * 4
    chunks = (1 * MiB) // (flit * config.chunk_flits)
    assert w["window_packets"] == config.gpus * chunks
    spec = real_switch(config)
    cycle_ns = flit / gpu.link_gbps            # the replay's cycle: a flit at the link rate
    hop = math.ceil(gpu.link_latency_s * 1e9 / cycle_ns)
    r_cycles = 2 * hop + (spec.chunk_flits - 1) + spec.judge_wait_cycles + \
        spec.engine_pick_latency + spec.result_latency + spec.egress_latency + spec.chunk_flits
    turns = chunks // config.slots
    assert turns * r_cycles <= w["window_cycles"] < (turns + 1) * r_cycles
    assert w["window_us"] == pytest.approx(w["window_cycles"] * cycle_ns / 1e3, rel=1e-12)
    assert w["window_allreduce_us"] <= w["window_us"]


def test_ring_window_counts_its_steps(windows):
    """Ring on 2 GPUs: 2(n−1) = 2 steps of B/n per GPU in 128 B packets; each GPU sends B at
    one flit per cycle at best, after one hop."""
    config, m = windows
    w = m["ring"]
    flit = config.lanes * 4
    n, size = config.gpus, 1 * MiB
    per_step = math.ceil(size / n / (flit * config.mtu_flits))
    assert w["window_packets"] == n * 2 * (n - 1) * per_step
    gpu = gpu_preset("a100")
    hop = gpu.link_latency_s * 1e9 / (flit / gpu.link_gbps)
    assert w["window_cycles"] >= 2 * (n - 1) * size / n / flit + hop


def test_print_config_applies_rtl_windows(capsys):
    assert main(["run", "--print-config", "--rtl-windows"]) == 0
    config = load_config(capsys.readouterr().out)
    assert config.rtl_windows is True and config.rtl is False


@pytest.mark.parametrize("args, message", [
    (["--no-rtl", "--rtl-windows"], "--no-rtl and --rtl-windows contradict"),
    (["--print-config", "--no-rtl", "--rtl-windows"], "--no-rtl and --rtl-windows contradict"),
    (["--resume", "somewhere", "--rtl-windows"], "drop --rtl-windows"),
])
def test_rtl_windows_flag_errors_are_one_line(tmp_path, capsys, args, message):
    assert main(["run", *args, "-o" if "--resume" not in args else "--quiet",
                 *([str(tmp_path / "out")] if "--resume" not in args else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_rtl_windows_key_is_a_bool(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment]\nrtl_windows = 'yes'\n")
    assert main(["run", str(bad), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "[experiment] rtl_windows: expected bool" in err
    assert load_config("[experiment]\nrtl_windows = true\n", "x.toml").rtl_windows is True


def test_ring_window_is_released_by_its_dependencies(windows):
    """The window's ring is the all-reduce alone, paced only by its dependencies, in pieces of
    one real MTU that pipeline step to step: every GPU streams its 2(n−1)/n·B link bytes at one
    flit per cycle, plus at most one round trip (two hops) and a packet of fill. (The trace's
    own pieces, one flit-scaled MTU each, made every step store-and-forward, and its issue
    times paced the steps by the contended iteration's kernel.)"""
    config, m = windows
    w = m["ring"]
    gpu = gpu_preset("a100")
    flit = config.lanes * 4
    n, size = config.gpus, 1 * MiB
    cycle_ns = flit / gpu.link_gbps
    hop = round(gpu.link_latency_s * 1e9 / cycle_ns)
    stream = 2 * (n - 1) * size / n / flit
    allreduce_cycles = w["window_allreduce_us"] * 1e3 / cycle_ns
    assert stream <= allreduce_cycles + 1 <= stream + 2 * hop + config.mtu_flits


def test_one_ring_all_reduce_replays_at_the_gpu_models_time_less_nccls_costs():
    """One 20 MiB ring all-reduce on 8 A100s alone through the fast switch model at flit scale
    1 (256 B chunks, 2 KiB packets, the 350 ns hop), built as the experiment's window builds
    it. The switch model has no NCCL in it: its GPUs stream the link bytes at the raw 300 GB/s
    and pay no per-step latency. The GPU model (NCCL's pipeline, LL128 at this size) pays
    NCCL's base latency (14.0 µs) and 2(n−1) per-step latencies (1.9 µs, tuning.cc) and
    streams at 12 links × 20 GB/s × 0.92 (LL128's 120 of 128 bytes). So the two differ by
    exactly those, to within the replay's pipeline fill: one round trip and a packet."""
    from sim.gpu.collectives import collective_cost, expand_collective
    from sim.model.switch import replay_model
    from sim.replay.config import ReplayConfig
    from sim.replay.plan import build_plan
    from sim.trace.generate import collective_records
    from sim.experiment import metrics

    gpu, n, size = gpu_preset("a100"), 8, 20 * MiB
    cfg = ReplayConfig(ports=n, lanes=8, slots=256, chunk_flits=8, policy="rr", mtu_flits=64,
                       link_gbps=gpu.link_gbps, flit_scale=1, dtype="fp32",
                       link_latency_ns=gpu.link_latency_s * 1e9)
    messages = [(msg, ("nvlink",)) for msg in expand_collective("ring", n, size)]
    records = collective_records(messages, cfg.flit_bytes * cfg.mtu_flits, 0.0, 0.0, 0, "ring")
    replay = replay_model(build_plan({"gpus": n}, records, cfg))
    replay_s = metrics.allreduce_ms(replay, {r.id: r for r in records}, cfg.cycle_ns) / 1e3
    link_bytes = 2 * (n - 1) * size / n
    fill_s = 2 * gpu.link_latency_s + cfg.flit_bytes * cfg.mtu_flits / (gpu.link_gbps * 1e9)
    assert replay_s == pytest.approx(link_bytes / (gpu.link_gbps * 1e9), abs=fill_s)
    cost = collective_cost(gpu, n, size, "allreduce", "ring")
    assert cost.protocol == "LL128"
    nccl_latency_s = (14.0 + 2 * (n - 1) * 1.9) * 1e-6
    nccl_rate = 12 * 20e9 * 0.92
    gap = nccl_latency_s + link_bytes * (1 / nccl_rate - 1 / (gpu.link_gbps * 1e9))
    assert cost.time_s - replay_s == pytest.approx(gap, abs=fill_s)
