"""Replaying a plan through the exported RTL switch in a simulator process: the two RTL replay
backends (:class:`RtlPlayer`, :class:`RtlDriver`; :mod:`sim.replay.backend`), the function
behind both (:func:`replay_rtl`), and the bare clock rate the co-simulation's speed is
measured against."""

import logging
import math
import os
import pickle
import threading
import time
from pathlib import Path

from sim.cosim.build import switch_build
from sim.cosim.runner import run_cocotb
from sim.replay.backend import ReplayBackend
from sim.replay.config import WATCHDOG_CYCLES

__all__ = ["RtlPlayer", "RtlDriver", "replay_rtl", "replay_rtl_phases", "bare_clock_rate",
           "position_writer", "report_position"]

_log = logging.getLogger("innet.cosim")
#: Seconds between progress reports of a running RTL replay.
REPORT_EVERY_S = 10.0
#: A replay expected to take longer than this is worth a warning with a coarser flit scale.
LONG_REPLAY_S = 180.0


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
               quiet=False, optimize=True, player=True, expected_cycles=None,
               watchdog=WATCHDOG_CYCLES, schedule_dir=None):
    """Replay ``plan`` through the exported RTL switch under cocotb; returns a
    :class:`ReplayResult` (backend ``rtl-<sim>``). The build is cached in ``build_dir``
    (default: the user cache), keyed by the switch parameters. ``stall`` puts random
    backpressure on every egress (the replay then no longer compares with the model).
    ``quiet`` sends the simulator's output to ``replay.log`` in the build directory;
    ``optimize=False`` builds quickly for short replays (see
    :func:`sim.cosim.runner.run_cocotb`). ``player`` (default) moves the flits in the Verilog
    packet player (:mod:`sim.cosim.player`); ``player=False`` drives and samples every port
    from Python each cycle (:mod:`sim.cosim.driver`, the reference the player is checked
    against). While the simulation runs, its position (cycles, and of ``expected_cycles`` when
    given, e.g. by the cycle-exact fast model, with an ETA) is logged on the ``innet.cosim``
    logger every :data:`REPORT_EVERY_S` seconds, with a warning and a coarser flit scale to try
    when the replay looks like taking more than :data:`LONG_REPLAY_S`. ``watchdog``: cycles
    with packets outstanding and none ending (the player) or no flit leaving (the driver)
    after which the replay stops as a deadlock. ``schedule_dir`` (the player only): where to
    write the schedule the players were given and the harness's log, for
    :func:`scheduled_rate`."""
    began = time.perf_counter()
    with switch_build(plan.config.switch, sim, build_dir, optimize, player, waves) as (
            verilog, module, build_dir, scratch):
        plan_file, result_file = scratch / "plan.pkl", scratch / "result.pkl"
        log = Path(schedule_dir or scratch) / "player.log"
        plan_file.write_bytes(pickle.dumps(plan))
        bench = "sim.cosim.tb_player" if player else "sim.cosim.tb_replay"
        env = {"INNET_PLAN": plan_file, "INNET_RESULT": result_file, "INNET_SEED": seed,
               "INNET_STALL": stall, "INNET_LOG": log, "INNET_WATCHDOG": watchdog}
        if schedule_dir:
            env["INNET_SCHEDULE"] = schedule_dir
        watcher = None
        if _log.isEnabledFor(logging.INFO):
            env["INNET_POSITION"] = scratch / "position.txt"
            watcher = _PositionWatcher(env["INNET_POSITION"], expected_cycles,
                                       plan.config.flit_scale)
        try:
            run_cocotb(verilog, module, bench, sim=sim, build_dir=build_dir, waves=waves,
                       env=env, plusargs=[f"+innet_log={log}"] if player else (),
                       testcase="play" if player else None,
                       log_file=build_dir / "replay.log" if quiet else None,
                       optimize=optimize)
        finally:
            if watcher:
                watcher.stop()
        result = pickle.loads(result_file.read_bytes())
    result.backend = f"rtl-{sim}"
    result.extra.update(build_dir=str(build_dir), total_wall_s=time.perf_counter() - began,
                        driver="player" if player else "python")
    return result


def replay_rtl_phases(plans, sim="verilator", build_dir=None, seed=1):
    """Replay ``plans`` (one switch configuration, each its own job members) one after the
    other through one exported RTL switch without a reset, the job table written between
    them (:mod:`sim.cosim.tb_elastic`, the per-cycle driver). Returns a list of
    ``(ReplayResult, job-table write cycles before it)``."""
    config = plans[0].config
    if any(p.config != config for p in plans):
        raise ValueError("the phases of one RTL run share one switch configuration")
    with switch_build(config.switch, sim, build_dir, False, False) as (
            verilog, module, build_dir, scratch):
        plans_file, result_file = scratch / "plans.pkl", scratch / "result.pkl"
        plans_file.write_bytes(pickle.dumps(plans))
        run_cocotb(verilog, module, "sim.cosim.tb_elastic", sim=sim, build_dir=build_dir,
                   env={"INNET_PLANS": plans_file, "INNET_RESULT": result_file,
                        "INNET_SEED": seed},
                   log_file=build_dir / "elastic.log", optimize=False)
        out = pickle.loads(result_file.read_bytes())
    for result, _ in out:
        result.backend = f"rtl-{sim}"
    return out


def position_writer(path):
    """The progress callback a replay bench passes to its driver: ``(cycle, started, total)``
    written to ``path`` (replaced whole, so a reader never sees half a line). None without a
    path."""
    if not path:
        return None

    def write(cycle, started, total):
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{cycle} {started} {total} {time.time()}\n")
        os.replace(tmp, path)
    return write


async def report_position(dut, loop, write, every=100_000):
    """A cocotb coroutine for a replay bench: every ``every`` clock cycles, ``write(cycle,
    started, total)`` with the packets ``loop`` (the replay's ClosedLoop) has started. Its own
    trigger, so the position advances even while no packet event wakes the bench's Python."""
    from cocotb.triggers import ClockCycles

    cycle = 0
    while True:
        await ClockCycles(dut.clk, every)
        cycle += every
        write(cycle, loop.started, loop.total)


class _PositionWatcher:
    """Reads a running replay's position file in a thread and logs progress: cycles done of
    those expected, packets started, an ETA, and once, a warning when the replay looks like
    taking more than :data:`LONG_REPLAY_S` with a flit scale that would take about a minute."""

    def __init__(self, path, expected_cycles, flit_scale):
        self.path, self.expected, self.flit_scale = path, expected_cycles, flit_scale
        self.warned = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def stop(self):
        self.done.set()
        self.thread.join()

    def _watch(self):
        first, last = None, None
        while not self.done.wait(REPORT_EVERY_S):
            try:
                cycle, started, total, stamp = self.path.read_text().split()
            except (OSError, ValueError):
                continue   # the simulator is still building or has not written yet
            if stamp == last:
                continue   # no new position since the last report
            last = stamp
            cycle, started, total, stamp = int(cycle), int(started), int(total), float(stamp)
            first = first or (cycle, stamp)
            rate = (cycle - first[0]) / (stamp - first[1]) if stamp > first[1] else 0.0
            text = f"RTL replay: cycle {cycle:,}"
            if self.expected:
                text += f" of {self.expected:,} ({100 * cycle / self.expected:.0f} %)"
            text += f", {started:,} of {total:,} packets started"
            if rate > 0 and self.expected:
                eta = max(self.expected - cycle, 0) / rate
                text += f", {rate:,.0f} cycles/s, about {eta:.0f} s to go"
            _log.info(text)
            # Cycles shrink in proportion to the flit scale: suggest one that takes a minute.
            whole = self.expected / rate if rate > 0 and self.expected else 0.0
            if whole > LONG_REPLAY_S and not self.warned:
                self.warned = True
                scale = self.flit_scale * math.ceil(whole / 60)
                _log.warning(f"this RTL replay takes about {whole:.0f} s at this rate; "
                             f"--flit-scale {scale} would take about a minute")


def bare_clock_rate(config, sim="verilator", cycles=200_000, build_dir=None, player=False,
                    optimize=True):
    """Cycles per second of the same switch (inside the packet player if ``player``) under
    cocotb with only the clock running and one Python wake-up per cycle (the bare cocotb
    clock-toggle rate ``innet bench cosim`` compares against). ``optimize`` as
    :func:`replay_rtl`'s: compare builds of one kind."""
    with switch_build(config.switch, sim, build_dir, optimize, player) as (
            verilog, module, build_dir, scratch):
        out = scratch / "bare.txt"
        run_cocotb(verilog, module, "sim.cosim.tb_replay", sim=sim, build_dir=build_dir,
                   env={"INNET_BARE_CYCLES": cycles, "INNET_BARE_RESULT": out},
                   testcase="bare_clock", log_file=build_dir / "bare.log", optimize=optimize)
        n, wall = out.read_text().split()
    return int(n) / float(wall)


def scheduled_rate(plan, schedule_dir, sim="verilator", build_dir=None, optimize=True):
    """Cycles per second of the co-simulation's own traffic with no Python in the loop: the
    harness built with a schedule (:func:`sim.cosim.player_verilog.render_player`) replays
    what :func:`replay_rtl` with ``schedule_dir`` recorded there, for as many cycles, with
    the same seed and egress stalls, Python waiting for the end. Returns ``(cycles_per_s,
    log_text)``; the log must equal the co-simulation's, packet for packet and cycle for
    cycle."""
    schedule_dir = Path(schedule_dir)
    n = plan.config.ports
    files = [schedule_dir / f"sched{k}.hex" for k in range(n)]
    longest = max(len(f.read_text().splitlines()) for f in files)
    depth = 1 << max(1, (longest - 1).bit_length())
    with switch_build(plan.config.switch, sim, build_dir, optimize, True,
                      schedule=depth) as (verilog, module, build_dir, scratch):
        plan_file, out, log = scratch / "plan.pkl", scratch / "scheduled.txt", scratch / "log"
        plan_file.write_bytes(pickle.dumps(plan))
        run_cocotb(verilog, module, "sim.cosim.tb_player", sim=sim, build_dir=build_dir,
                   env={"INNET_PLAN": plan_file, "INNET_SCHEDULE": schedule_dir,
                        "INNET_SCHEDULE_RESULT": out},
                   plusargs=[f"+innet_log={log}"] + [f"+innet_sched{k}={f}"
                                                    for k, f in enumerate(files)],
                   testcase="scheduled", log_file=build_dir / "scheduled.log",
                   optimize=optimize)
        ran, wall = out.read_text().split()
        return int(ran) / float(wall), log.read_text()
