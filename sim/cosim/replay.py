"""Replaying a plan through the exported RTL switch in a simulator process: the two RTL replay
backends (:class:`RtlPlayer`, :class:`RtlDriver`; :mod:`sim.replay.backend`), the function
behind both (:func:`replay_rtl`), and the bare clock rate the co-simulation's speed is
measured against."""

import pickle
import time

from sim.cosim.build import switch_build
from sim.cosim.runner import run_cocotb
from sim.replay.backend import ReplayBackend

__all__ = ["RtlPlayer", "RtlDriver", "replay_rtl", "bare_clock_rate"]


class RtlPlayer(ReplayBackend):
    """The exported RTL switch under cocotb, its flits moved by the Verilog packet player
    (:mod:`sim.cosim.player`): Python runs per packet event. ``options`` are
    :func:`replay_rtl`'s (``build_dir``, ``waves``, ``seed``, ``quiet``, ``optimize``)."""

    def __init__(self, sim="verilator", **options):
        self.sim, self.options = sim, options
        self.name = f"rtl-{sim}"

    def run(self, plan):
        return replay_rtl(plan, self.sim, player=True, **self.options)


class RtlDriver(RtlPlayer):
    """The exported RTL switch under cocotb, every port driven and sampled from Python each
    cycle (:mod:`sim.cosim.driver`): the reference the player is checked against. Also takes
    ``stall`` (random egress backpressure)."""

    def run(self, plan):
        return replay_rtl(plan, self.sim, player=False, **self.options)


def replay_rtl(plan, sim="verilator", build_dir=None, waves=False, seed=1, stall=0.0,
               quiet=False, optimize=True, player=True):
    """Replay ``plan`` through the exported RTL switch under cocotb; returns a
    :class:`ReplayResult` (backend ``rtl-<sim>``). The build is cached in ``build_dir``
    (default: the user cache), keyed by the switch parameters. ``stall`` puts random
    backpressure on every egress (the replay then no longer compares with the model).
    ``quiet`` sends the simulator's output to ``replay.log`` in the build directory;
    ``optimize=False`` builds quickly for short replays (see
    :func:`sim.cosim.runner.run_cocotb`). ``player`` (default) moves the flits in the Verilog
    packet player (:mod:`sim.cosim.player`); ``player=False`` drives and samples every port
    from Python each cycle (:mod:`sim.cosim.driver`, the reference the player is checked
    against)."""
    began = time.perf_counter()
    with switch_build(plan.config.switch, sim, build_dir, optimize, player) as (
            verilog, module, build_dir, scratch):
        plan_file, result_file = scratch / "plan.pkl", scratch / "result.pkl"
        log = scratch / "player.log"
        plan_file.write_bytes(pickle.dumps(plan))
        bench = "sim.cosim.tb_player" if player else "sim.cosim.tb_replay"
        run_cocotb(verilog, module, bench, sim=sim, build_dir=build_dir, waves=waves,
                   env={"INNET_PLAN": plan_file, "INNET_RESULT": result_file,
                        "INNET_SEED": seed, "INNET_STALL": stall, "INNET_LOG": log},
                   plusargs=[f"+innet_log={log}"] if player else (),
                   log_file=build_dir / "replay.log" if quiet else None, optimize=optimize)
        result = pickle.loads(result_file.read_bytes())
    result.backend = f"rtl-{sim}"
    result.extra.update(build_dir=str(build_dir), total_wall_s=time.perf_counter() - began,
                        driver="player" if player else "python")
    return result


def bare_clock_rate(config, sim="verilator", cycles=200_000, build_dir=None, player=False):
    """Cycles per second of the same switch (inside the packet player if ``player``) under
    cocotb with only the clock running and one Python wake-up per cycle (the bare cocotb
    clock-toggle rate ``innet bench cosim`` compares against)."""
    with switch_build(config.switch, sim, build_dir, player=player) as (
            verilog, module, build_dir, scratch):
        out = scratch / "bare.txt"
        run_cocotb(verilog, module, "sim.cosim.tb_replay", sim=sim, build_dir=build_dir,
                   env={"INNET_BARE_CYCLES": cycles, "INNET_BARE_RESULT": out},
                   testcase="bare_clock", log_file=build_dir / "bare.log")
        n, wall = out.read_text().split()
    return int(n) / float(wall)
