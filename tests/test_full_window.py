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
    """Hand-derived slot round trip: two GPU<->switch hops, then the chunk in, the engine's
    pick and the result pipeline, and the result chunk out, one flit per cycle at the GPU's
    effective link rate."""
    flit = spec.lanes * 4
    cycle = flit / (gpu.link_effective_gbps * 1e9)
    pipeline = (spec.chunk_flits - 1) + spec.engine_pick_latency + spec.result_latency
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
    r_cycles = 2 * hop + (spec.chunk_flits - 1) + spec.engine_pick_latency + \
        spec.result_latency + spec.chunk_flits
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
