"""cocotb test module behind :func:`sim.cosim.replay.replay_rtl_phases`: replays pickled plans
one after the other through one exported switch without a reset, writing the job table
(:func:`sim.cosim.pins.write_job`) between them, so the reduction job's device set changes
between chunks while the switch runs (an elastic job growing or shrinking).

Environment: ``INNET_PLANS`` (input pickle: a list of plans on one switch), ``INNET_RESULT``
(output pickle: per plan, its :class:`sim.replay.result.ReplayResult` and the cycles the
job-table write before it took), ``INNET_SEED``.
"""

import os
import pickle
import random
import time
from pathlib import Path

import cocotb
from cocotb.utils import get_sim_time

from sim.cosim.driver import ReplayDriver, replay_dut
from sim.cosim.pins import read_counters, write_job


@cocotb.test()
async def phases(dut):
    plans = pickle.loads(Path(os.environ["INNET_PLANS"]).read_bytes())
    seed = int(os.environ.get("INNET_SEED", "1"))
    from sim.model.switch import JUDGE_PHASE

    out = []
    period_ns = 10   # the clock configure_replay starts
    start_ns = None
    for index, plan in enumerate(plans):
        driver = ReplayDriver(plan, seed=seed + index, rng=random.Random(seed))
        write_cycles = 0
        if index:
            before = get_sim_time("ns")
            await write_job(dut, plan.members, driver.dtype)
            write_cycles = round((get_sim_time("ns") - before) / period_ns)
        began = time.perf_counter()
        await replay_dut(dut, driver, configure=index == 0)
        errors = read_counters(dut)
        result = driver.result("rtl", errors, time.perf_counter() - began)
        # The reduction unit's judge turn runs on from the first phase: the turn this phase's
        # cycle 0 meets, for the fast model (sim.model.switch.replay_model's judge_phase).
        start_ns = driver.cycle0_ns if start_ns is None else start_ns
        shift = round((driver.cycle0_ns - start_ns) / period_ns)
        result.extra["judge_phase"] = (JUDGE_PHASE + shift) % plan.config.ports
        out.append((result, write_cycles))
        assert not driver.mismatches, driver.mismatches[:5]
        assert not any(errors.values()), f"the switch dropped packets: {errors}"
    Path(os.environ["INNET_RESULT"]).write_bytes(pickle.dumps(out))
