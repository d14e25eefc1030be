"""``innet bench cosim``: co-simulation speed against the same traffic with no Python in the
loop (and against the bare cocotb clock), the fast model against the RTL on the same trace, the
model alone on a large trace, and ``innet run``'s wall time. Every ratio is measured in the same
run on the same machine. The model is timed with its compiled core (the default) and with the
Python model it was written from.

The co-simulation is timed with both drivers: the Verilog packet player (:mod:`sim.cosim.player`,
what ``innet run`` and ``innet replay`` use) and the per-cycle Python driver
(:class:`sim.cosim.driver.ReplayDriver`). The headline ratio divides the player's speed by the
speed of the same switch running the same traffic with no Python in the loop: the harness
replays the descriptors the co-simulation gave, each from the cycle it was given
(:func:`sim.cosim.replay.scheduled_rate`), and its log must equal the co-simulation's. The bare
cocotb clock (one Python wake-up a cycle, the switch in reset; the earlier reference) is timed on
the switch alone and on the player harness, and the faster of the two is reported too."""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sim.cosim.replay import bare_clock_rate, replay_rtl, scheduled_rate
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.replay.result import compare
from sim.model.switch import replay_model
from sim.trace.synthetic import stress_trace

__all__ = ["bench_cosim"]


def bench_cosim(sim="verilator", quick=False, run_main=True, progress=None,
                link_latency_ns=0.0):
    """The co-simulation benchmark's payload (``innet bench cosim``). ``link_latency_ns``
    puts the GPUs that far from the switch (:class:`sim.replay.config.ReplayConfig`): a
    delivery then changes nothing at a GPU for a round trip."""
    say = progress or (lambda text: None)
    ports = 4 if quick else 8
    # The default run's switch (2 lanes x 16 slots): an 8-lane x 64-slot build takes Verilator
    # over 15 minutes on two cores; the ratio measures the Python around the RTL, not its size.
    # --quick takes the 4-port switch the co-simulation tests replay (8 slots, prio), so its
    # builds are theirs, from the shared build cache.
    cfg = ReplayConfig(ports=ports, lanes=2, slots=8 if quick else 16, chunk_flits=4,
                       policy="prio" if quick else "rr", flit_scale=1, link_gbps=32.0,
                       mtu_flits=32, link_latency_ns=link_latency_ns)
    # Full load: every port always has a packet to send (short issue span, many messages).
    meta, records = stress_trace(gpus=ports, seed=7, messages=30 if quick else 120,
                                 pieces=4 if quick else 12, max_bytes=4096, piece_bytes=4096,
                                 span_ns=2_000, reads=False)
    plan = build_plan(meta, records, cfg)
    # --quick (a check that everything agrees, for the tests) builds at -O0: a third of the
    # build time; its speeds and ratios are then of quick builds, not the headline's.
    optimize = not quick
    say(f"cosim: RTL replay of {plan.packets} packets on {ports} ports ({sim}, packet player)")
    with tempfile.TemporaryDirectory(prefix="innet-schedule-") as recorded:
        rtl = replay_rtl(plan, sim, quiet=True, optimize=optimize, schedule_dir=recorded)
        say("cosim: the same traffic with no Python in the loop (the recorded schedule)")
        # About a second a run, so a burst of load on a shared machine halves one: the best
        # of three (the fastest reference: the ratio errs low), every log equal.
        logged = (Path(recorded) / "player.log").read_text()
        no_python_runs, same_log = [], True
        for _ in range(1 if quick else 3):
            rate, log = scheduled_rate(plan, recorded, sim, optimize=optimize)
            no_python_runs.append(rate)
            same_log &= log == logged
        no_python = max(no_python_runs)
    say("cosim: RTL replay, per-cycle Python driver")
    per_cycle = replay_rtl(plan, sim, quiet=True, player=False, optimize=optimize)
    say("cosim: bare clock (switch alone, then the player harness)")
    cycles = 20_000 if quick else 200_000
    bare_switch = bare_clock_rate(cfg, sim, cycles=cycles, optimize=optimize)
    bare_player = bare_clock_rate(cfg, sim, cycles=cycles, player=True, optimize=optimize)
    bare = max(bare_switch, bare_player)
    # The fast model timed around the call (building its inputs and its result included),
    # best of three; the compiled core is built (or found in the cache) before timing.
    model_wall, python_wall = [], []
    replay_model(plan, core="c")
    for _ in range(3):
        began = time.perf_counter()
        model = replay_model(plan, core="c")
        model_wall.append(time.perf_counter() - began)
    began = time.perf_counter()
    python = replay_model(plan, core="python")
    python_wall.append(time.perf_counter() - began)
    cores_agree = compare(python, model)
    agreement = compare(rtl, model)
    drivers_agree = compare(rtl, per_cycle)
    cosim_rate = rtl.cycles / rtl.wall_s
    large = []
    for scale in ([4] if quick else [8, 32]):
        m2, r2 = stress_trace(gpus=ports, seed=8, messages=30 * scale, pieces=3 * scale,
                              span_ns=2_000 * scale, reads=False)
        big = build_plan(m2, r2, cfg)
        began = time.perf_counter()
        replay_model(big, core="c")
        wall = time.perf_counter() - began
        large.append({"packets": big.packets, "wall_s": wall,
                      "packets_per_s": big.packets / wall})
    payload = {
        "benchmark": "cosim", "simulator": sim, "optimized_build": optimize,
        "switch": f"{ports} ports x {cfg.lanes} lanes, {cfg.slots} slots, "
                  f"{cfg.chunk_flits}-flit chunks, {cfg.policy}",
        "link_latency_ns": link_latency_ns, "link_cycles": cfg.link_cycles,
        "packets": plan.packets, "rtl_cycles": rtl.cycles,
        "egress_utilization_mean": sum(rtl.summary()["egress_utilization"]) / ports,
        "cosim_cycles_per_s": cosim_rate, "no_python_cycles_per_s": no_python,
        "no_python_runs_cycles_per_s": no_python_runs,
        "no_python_log_equal": same_log, "cosim_ratio": cosim_rate / no_python,
        "bare_cycles_per_s": bare,
        "bare_switch_cycles_per_s": bare_switch, "bare_player_cycles_per_s": bare_player,
        "cosim_ratio_bare_clock": cosim_rate / bare,
        "cosim_simulation_s": rtl.extra.get("simulation_s"),
        "cosim_wakeups": rtl.extra.get("wakeups"),
        "per_cycle_driver": {"wall_s": per_cycle.wall_s,
                             "cycles_per_s": per_cycle.cycles / per_cycle.wall_s,
                             "ratio": per_cycle.cycles / per_cycle.wall_s / no_python,
                             "agreement_with_player": drivers_agree},
        "rtl_wall_s": rtl.wall_s, "model_wall_s": min(model_wall),
        "model_speedup": rtl.wall_s / min(model_wall),
        "model_speedup_over_per_cycle_driver": per_cycle.wall_s / min(model_wall),
        "python_model": {"wall_s": python_wall[0],
                         "speedup_over_rtl": rtl.wall_s / python_wall[0],
                         "core_speedup": python_wall[0] / min(model_wall),
                         "agreement_with_core": cores_agree},
        "agreement": agreement, "model_large": large,
    }
    if run_main:
        say("cosim: timing `innet run` (default experiment)")
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--quiet", "--json",
                               "-o", "build/bench-run"], capture_output=True, text=True)
        payload["run_wall_s"] = time.perf_counter() - began
        payload["run_status"] = done.returncode
    return payload
