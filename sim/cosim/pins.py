"""The exported switch's pins under cocotb: AXI4-Stream ports, drop counters, arbitration
settings, reset and job configuration."""

from hw.reduce import ERROR_CAUSES
from hw.spec import Policy
from hw.switch import DROP_CAUSES
from sim.replay.config import REPLAY_JOB

__all__ = ["SwitchPins", "counter_pins", "read_counters", "arbiter_defaults", "configure_replay",
           "start_clock", "write_job"]


def start_clock(dut):
    """Toggle ``dut.clk`` (10 ns period) from cocotb's C++ clock. cocotb 2.1 picks its Python
    clock unless told otherwise: two Python wake-ups a cycle, each edge queued for a ReadWrite
    callback. Every bench writes its pins on edges it awaited, never on the clock's own, so
    the order of writes is unchanged (every co-simulation test agrees with its golden on
    Icarus and Verilator either way); the bare clock and the replays run faster."""
    from cocotb.clock import Clock

    Clock(dut.clk, 10, unit="ns", impl="gpi").start()


def counter_pins():
    """The exported switch's drop-counter pins: ``drop_<cause>`` (switch level) then
    ``err_<cause>`` (reduction unit)."""
    return [f"drop_{c}" for c in DROP_CAUSES] + [f"err_{c}" for c in ERROR_CAUSES]


def read_counters(dut):
    """``{pin: value}`` of every drop counter of an exported switch under cocotb."""
    return {name: int(getattr(dut, name).value) for name in counter_pins()}


class SwitchPins:
    """The exported switch's AXI4-Stream pins as cocotb handles, bound once. A beat is
    ``(tdata, tuser, tdest, tid, tlast)``."""

    FIELDS = ("data", "user", "dest", "id", "last")

    def __init__(self, dut, ports):
        self.N = ports
        self.s_valid = [getattr(dut, f"s{k}_axis_tvalid") for k in range(ports)]
        self.s_ready = [getattr(dut, f"s{k}_axis_tready") for k in range(ports)]
        self.s_fields = [[getattr(dut, f"s{k}_axis_t{f}") for f in self.FIELDS]
                         for k in range(ports)]
        self.m_valid = [getattr(dut, f"m{k}_axis_tvalid") for k in range(ports)]
        self.m_ready = [getattr(dut, f"m{k}_axis_tready") for k in range(ports)]
        self.m_fields = [[getattr(dut, f"m{k}_axis_t{f}") for f in self.FIELDS]
                         for k in range(ports)]
        self.presenting = [False] * ports

    def idle(self):
        """Nothing presented on any ingress."""
        for k in range(self.N):
            self.s_valid[k].value = 0
            self.presenting[k] = False

    def apply(self, changes):
        """``(port, beat)`` presents a beat; ``(port, None)`` or ``(port, "end")`` drops
        ``tvalid``."""
        for k, beat in changes:
            if beat is None or beat == "end":
                self.s_valid[k].value = 0
                self.presenting[k] = False
                continue
            for handle, value in zip(self.s_fields[k], beat):
                handle.value = value
            self.s_valid[k].value = 1
            self.presenting[k] = True

    def set_ready(self, ready):
        for d in range(self.N):
            self.m_ready[d].value = int(ready[d])

    def accepted(self):
        """Per ingress: a presented beat was taken this cycle (read-only phase)."""
        return [self.presenting[k] and bool(self.s_ready[k].value) for k in range(self.N)]

    def egress(self):
        """Per egress: the beat shown, or None (read-only phase)."""
        return [tuple(int(h.value) for h in self.m_fields[d]) if self.m_valid[d].value
                else None for d in range(self.N)]


def arbiter_defaults(dut, quantum=16):
    """Drive whichever run-time arbitration pins the exported switch has (its policy decides)
    to plain defaults: memory above results under ``prio``, equal weights, ``quantum``; no
    configuration write, no counter clear."""
    for name, value in (("cfg_mem_priority", 1), ("cfg_result_priority", 0),
                        ("cfg_mem_weight", 1), ("cfg_result_weight", 1),
                        ("cfg_quantum", quantum)):
        if hasattr(dut, name):
            getattr(dut, name).value = value
    dut.cfg_valid.value = 0
    dut.cfg_clear.value = 0


async def configure_replay(dut, cfg, members, dtype):
    """Start the clock, reset the switch (or a harness around it: the pins have the same
    names) with the arbitration settings of :class:`sim.replay.config.ReplayConfig` ``cfg``, then
    configure the replay's job (``members`` bitmap, element type ``dtype``) over the whole
    slot pool. Returns after the configuration write's clock edge."""
    from cocotb.triggers import RisingEdge

    start_clock(dut)
    dut.rst.value = 1
    dut.cfg_valid.value = 0
    dut.cfg_clear.value = 0
    if cfg.policy == Policy.PRIO:
        dut.cfg_mem_priority.value = cfg.mem_priority
        dut.cfg_result_priority.value = cfg.result_priority
    elif cfg.policy == Policy.WRR:
        dut.cfg_mem_weight.value = cfg.mem_weight
        dut.cfg_result_weight.value = cfg.result_weight
    elif cfg.policy == Policy.DRR:
        dut.cfg_quantum.value = cfg.quantum
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    if members:
        await write_job(dut, members, dtype)


async def write_job(dut, members, dtype):
    """One job-table write (one clock cycle on the ``cfg_*`` pins): the replay's job with the
    ``members`` bitmap and element type ``dtype`` over the whole slot pool. Between chunks it
    changes the job's device set; chunks already claimed keep the members they were claimed
    with (hw/reduce.py). Returns after the write's clock edge."""
    from cocotb.triggers import RisingEdge

    dut.cfg_valid.value = 1
    dut.cfg_job.value = REPLAY_JOB
    dut.cfg_enable.value = 1
    dut.cfg_members.value = members
    dut.cfg_dtype.value = dtype.value
    dut.cfg_saturate.value = 0
    dut.cfg_slot_base.value = 0
    dut.cfg_slot_count.value = 0      # one tenant: the whole slot pool
    await RisingEdge(dut.clk)
    dut.cfg_valid.value = 0
