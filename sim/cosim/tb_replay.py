"""cocotb test module behind :func:`sim.cosim.replay.replay_rtl` with ``player=False``: replays
a pickled plan through the exported switch with the per-cycle
:class:`sim.cosim.driver.ReplayDriver` and pickles the :class:`sim.replay.result.ReplayResult`
back.

Environment: ``INNET_PLAN`` (input pickle), ``INNET_RESULT`` (output pickle), ``INNET_SEED``,
``INNET_STALL`` (probability that an egress holds ``tready`` low in a cycle; default 0),
``INNET_WATCHDOG`` (deadlock limit, cycles; default
:data:`sim.replay.config.WATCHDOG_CYCLES`),
``INNET_POSITION`` (optional: see :func:`sim.cosim.replay.position_writer`).
"""

import os
import pickle
import random
import time
from pathlib import Path

import cocotb

from sim.cosim.driver import ReplayDriver, replay_dut
from sim.cosim.pins import read_counters, start_clock
from sim.cosim.replay import position_writer, report_position
from sim.replay.config import WATCHDOG_CYCLES


@cocotb.test()
async def replay(dut):
    if not os.environ.get("INNET_PLAN"):
        return   # a bare-clock benchmark run
    plan = pickle.loads(Path(os.environ["INNET_PLAN"]).read_bytes())
    seed = int(os.environ.get("INNET_SEED", "1"))
    stall = float(os.environ.get("INNET_STALL", "0"))
    driver = ReplayDriver(plan, seed=seed, stall=stall, rng=random.Random(seed))
    began = time.perf_counter()
    write = position_writer(os.environ.get("INNET_POSITION"))
    if write:
        cocotb.start_soon(report_position(dut, driver.loop, write))
    await replay_dut(dut, driver,
                     watchdog=int(os.environ.get("INNET_WATCHDOG", WATCHDOG_CYCLES)))
    wall = time.perf_counter() - began
    errors = read_counters(dut)
    result = driver.result("rtl", errors, wall)
    Path(os.environ["INNET_RESULT"]).write_bytes(pickle.dumps(result))
    assert not driver.mismatches, driver.mismatches[:5]
    assert not any(errors.values()), f"the switch dropped packets: {errors}"


@cocotb.test()
async def bare_clock(dut):
    """The reference of ``innet bench cosim``: the same design with only the clock toggling
    and one Python wake-up per cycle, for INNET_BARE_CYCLES cycles."""
    from cocotb.triggers import RisingEdge

    cycles = int(os.environ.get("INNET_BARE_CYCLES", "0"))
    start_clock(dut)
    dut.rst.value = 1
    began = time.perf_counter()
    edge = RisingEdge(dut.clk)
    for _ in range(cycles):
        await edge
    wall = time.perf_counter() - began
    out = os.environ.get("INNET_BARE_RESULT")
    if out:
        Path(out).write_text(f"{cycles} {wall}\n")
