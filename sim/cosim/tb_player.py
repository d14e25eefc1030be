"""cocotb test module behind :func:`sim.cosim.replay.replay_rtl` with the Verilog packet
player (:mod:`sim.cosim.player`): replays a pickled plan and pickles the
:class:`sim.replay.result.ReplayResult` back.

Environment: ``INNET_PLAN`` (input pickle), ``INNET_RESULT`` (output pickle), ``INNET_LOG``
(the harness's packet log, also passed as the ``+innet_log`` plusarg), ``INNET_SEED``,
``INNET_STALL`` (probability that an egress holds ``tready`` low in a cycle; default 0),
``INNET_WATCHDOG`` (deadlock limit, cycles; default
:data:`sim.replay.config.WATCHDOG_CYCLES`),
``INNET_POSITION`` (optional: where to write the replay's position for the parent's progress
report, :func:`sim.cosim.replay.position_writer`), ``INNET_SCHEDULE`` (optional: a directory
to write each port's schedule in, ``sched<k>.hex``, and the replay's cycles, seed and stall
probability, ``schedule.json``).

The second test, ``scheduled``, runs a harness built with a schedule
(:func:`sim.cosim.player_verilog.render_player`) on the schedule in ``INNET_SCHEDULE``, for the
replay's cycles with its seed and stalls and no Python in the loop (one wake-up, at the end),
and writes ``<cycles> <seconds>`` to ``INNET_SCHEDULE_RESULT``.
"""

import json
import os
import pickle
import time
from pathlib import Path

import cocotb

from hw.packet import USER_LAYOUT
from sim.cosim.pins import read_counters
from sim.cosim.player_verilog import schedule_lines
from sim.cosim.player import Player
from sim.cosim.replay import position_writer, report_position
from sim.replay.config import WATCHDOG_CYCLES


def _split(value, n):
    return [value >> 32 * k & 0xFFFFFFFF for k in range(n)]


@cocotb.test()
async def play(dut):
    plan = pickle.loads(Path(os.environ["INNET_PLAN"]).read_bytes())
    player = Player(plan, seed=int(os.environ.get("INNET_SEED", "1")),
                    stall=float(os.environ.get("INNET_STALL", "0")))
    began = time.perf_counter()
    write = position_writer(os.environ.get("INNET_POSITION"))
    if write:
        cocotb.start_soon(report_position(dut, player.loop, write))
    await player.play(dut, watchdog=int(os.environ.get("INNET_WATCHDOG", WATCHDOG_CYCLES)))
    if os.environ.get("INNET_SCHEDULE"):
        out = Path(os.environ["INNET_SCHEDULE"])
        user_bits = USER_LAYOUT.size
        for k, entries in enumerate(player.schedule):
            (out / f"sched{k}.hex").write_text(schedule_lines(entries, user_bits))
        (out / "schedule.json").write_text(json.dumps(
            {"cycles": player.cycle, "seed": player.seed, "stall": player.stall}))
    inject = player.check(Path(os.environ["INNET_LOG"]).read_text())
    wall = time.perf_counter() - began   # the simulation and the scoreboard
    n = player.N
    counters = {name: _split(int(getattr(dut, name).value), n)
                for name in ("ingress_flits", "egress_flits", "stall_cycles")}
    errors = read_counters(dut)
    result = player.result(inject, counters, errors, wall)
    result.extra["simulation_s"] = player.wall_s
    result.extra["wakeups"] = player.wakeups
    Path(os.environ["INNET_RESULT"]).write_bytes(pickle.dumps(result))
    assert not player.mismatches, player.mismatches[:5]
    assert not any(errors.values()), f"the switch dropped packets: {errors}"


@cocotb.test()
async def scheduled(dut):
    """The co-simulation's traffic with no Python in the loop: the players take the schedule
    a co-simulation recorded; Python waits for the end."""
    from cocotb.triggers import FallingEdge, Timer

    plan = pickle.loads(Path(os.environ["INNET_PLAN"]).read_bytes())
    recorded = json.loads((Path(os.environ["INNET_SCHEDULE"]) / "schedule.json").read_text())
    cycles = recorded["cycles"]
    await Player(plan, seed=recorded["seed"], stall=recorded["stall"]).setup(dut)
    await FallingEdge(dut.clk)    # as the co-simulation starts: run rises at a falling edge
    began = time.perf_counter()
    dut.run.value = 1
    await Timer(10 * cycles, unit="ns")
    wall = time.perf_counter() - began
    dut.flush.value = 1
    await FallingEdge(dut.clk)
    dut.flush.value = 0
    Path(os.environ["INNET_SCHEDULE_RESULT"]).write_text(f"{cycles} {wall}\n")
