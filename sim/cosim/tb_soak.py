"""cocotb test module behind :func:`sim.bench_soak.soak_rtl`: runs a :class:`sim.soak.SoakDriver`
against the exported switch and pickles its statistics back.

Environment: ``INNET_SOAK`` (input pickle: config, seed, cycles, watchdog), ``INNET_RESULT``
(output pickle).
"""

import os
import pickle
import time
from pathlib import Path

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from sim.cosim.pins import (SwitchPins, arbiter_defaults, counter_pins, read_counters,
                             start_clock)
from sim.reliability.soak import SoakDriver

_PROGRESS_EVERY = 100_000


@cocotb.test()
async def soak(dut):
    params = pickle.loads(Path(os.environ["INNET_SOAK"]).read_bytes())
    cfg, cycles, watchdog = params["config"], params["cycles"], params["watchdog"]
    driver = SoakDriver(cfg, params["seed"])
    N = cfg.ports
    start_clock(dut)
    pins = SwitchPins(dut, N)
    counters = {name: getattr(dut, name) for name in counter_pins()}
    rising, read_only = RisingEdge(dut.clk), ReadOnly()
    arbiter_defaults(dut)

    async def pulse_reset():
        pins.idle()
        dut.cfg_valid.value = 0
        dut.rst.value = 1
        for _ in range(3):
            await rising
        dut.rst.value = 0

    await pulse_reset()
    resets = sorted(cfg.resets, reverse=True)
    began = time.perf_counter()
    pending, quiet, cfg_on, peak_quiet = [], 0, False, 0
    while True:
        await rising
        if driver.cycle >= cycles:
            driver.generating = False
        if resets and driver.cycle >= resets[-1]:
            resets.pop()
            await pulse_reset()
            driver.reset()
            pending, cfg_on = [], False
            await read_only
            stale = {n: int(h.value) for n, h in counters.items() if int(h.value)}
            if stale:
                driver.failures.append(f"cycle {driver.cycle}: counters not cleared by "
                                       f"reset: {stale}")
            continue
        write = driver.config_write()
        if write:
            dut.cfg_valid.value = 1
            for name, value in write.items():
                getattr(dut, f"cfg_{name}").value = value
            cfg_on = True
        elif cfg_on:
            dut.cfg_valid.value = 0
            cfg_on = False
        pins.apply(pending)
        watched = {c: int(counters[c].value) for c in driver.watched()}
        pins.apply(driver.drive(watched))
        pins.set_ready(driver.ready_out)
        await read_only
        ready = pins.accepted()
        egress = pins.egress()
        pending = driver.sample(ready, egress)
        moved = any(ready) or any(e is not None and r for e, r in zip(egress, driver.ready_out))
        quiet = 0 if moved or not driver.busy() else quiet + 1
        peak_quiet = max(peak_quiet, quiet)
        if quiet > watchdog:
            driver.failures.append(f"cycle {driver.cycle}: watchdog: nothing moved for "
                                   f"{watchdog} cycles with work outstanding (deadlock)")
            break
        if driver.failures:
            break
        if not driver.generating and not driver.busy():
            break
        if driver.cycle > cycles + cfg.drain:
            driver.failures.append(f"cycle {driver.cycle}: traffic did not drain in "
                                   f"{cfg.drain} cycles")
            break
        if driver.cycle % _PROGRESS_EVERY == 0:
            rate = driver.cycle / (time.perf_counter() - began)
            dut._log.info(f"soak: cycle {driver.cycle:,} of {cycles:,} ({rate:,.0f} cycles/s), "
                          f"{driver.stats['reductions']:,} reductions, "
                          f"{driver.stats['memory_packets']:,} memory packets")
    wall = time.perf_counter() - began
    await rising
    final = read_counters(dut)
    stats = driver.finish(final)
    stats.update({"cycles": driver.cycle, "wall_s": wall, "cycles_per_s": driver.cycle / wall,
                  "counters": final, "faults_injected": dict(driver.injected),
                  "longest_quiet": peak_quiet, "failures": list(driver.failures)})
    Path(os.environ["INNET_RESULT"]).write_bytes(pickle.dumps(stats))
