"""cocotb test module behind :func:`sim.cosim.replay.replay_rtl` with the Verilog packet
player (:mod:`sim.cosim.player`): replays a pickled plan and pickles the
:class:`sim.replay.result.ReplayResult` back.

Environment: ``INNET_PLAN`` (input pickle), ``INNET_RESULT`` (output pickle), ``INNET_LOG``
(the harness's packet log, also passed as the ``+innet_log`` plusarg), ``INNET_SEED``,
``INNET_STALL`` (probability that an egress holds ``tready`` low in a cycle; default 0),
``INNET_WATCHDOG`` (deadlock limit, cycles; default
:data:`sim.replay.config.WATCHDOG_CYCLES`),
``INNET_POSITION`` (optional: where to write the replay's position for the parent's progress
report, :func:`sim.cosim.replay.position_writer`).
"""

import os
import pickle
import time
from pathlib import Path

import cocotb

from sim.cosim.pins import read_counters
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
    inject = player.check(Path(os.environ["INNET_LOG"]).read_text())
    wall = time.perf_counter() - began   # the simulation and the scoreboard
    n = player.N
    counters = {name: _split(int(getattr(dut, name).value), n)
                for name in ("ingress_flits", "egress_flits", "stall_cycles")}
    errors = read_counters(dut)
    result = player.result(inject, counters, errors, wall)
    result.extra["simulation_s"] = player.wall_s
    Path(os.environ["INNET_RESULT"]).write_bytes(pickle.dumps(result))
    assert not player.mismatches, player.mismatches[:5]
    assert not any(errors.values()), f"the switch dropped packets: {errors}"
