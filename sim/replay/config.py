"""The switch a replay runs on and how trace time maps to its cycles (:class:`ReplayConfig`)."""

from dataclasses import dataclass, fields

from hw.arbiter import PRIO_BITS, QUANTUM_BITS, WEIGHT_BITS
from hw.errors import ParameterError, check_int
from hw.packet import LANE_BITS
from hw.spec import SwitchSpec, element_type

__all__ = ["ReplayConfig", "REPLAY_JOB", "MAX_REPLAY_CYCLES", "WATCHDOG_CYCLES"]


#: The reduction job every in-switch contribution of a replay belongs to.
REPLAY_JOB = 1
#: A replay that has not finished after this many cycles is stopped as an error. Deadlocks are
#: caught long before by the backends' watchdogs; this only bounds the RTL's 32-bit cycle
#: counters (a trace at flit scale 1 can run for tens of millions of cycles).
MAX_REPLAY_CYCLES = 1 << 31
#: An RTL replay with packets outstanding stops as a deadlock when no packet has ended (the
#: player) or no flit has left the switch (the per-cycle driver) for this many cycles.
WATCHDOG_CYCLES = 100_000
#: Longest link hop a replay accepts, ns (1 ms: a thousand times NVLink's).
MAX_LINK_LATENCY_NS = 1e6
#: Job-table entries of the switch a replay runs on: job 0 (unused) and :data:`REPLAY_JOB`.
REPLAY_JOBS = REPLAY_JOB + 1


@dataclass(frozen=True)
class ReplayConfig:
    """The switch and the time mapping of a replay.

    Attributes
    ----------
    ports, lanes, slots, chunk_flits, policy
        The switch (as ``innet export switch``; validated and completed as :attr:`switch`);
        ``ports`` ≥ the trace's GPUs.
    mtu_flits : int
        Longest memory packet, flits; longer messages are cut.
    link_gbps : float
        One port's bandwidth, GB/s (bytes per ns): sets the cycle time.
    flit_scale : int
        Real flits one simulated flit stands for.
    dtype : str
        Element type of in-switch contributions (``fp32``, ``int32``, ``bf16``).
    mem_priority, result_priority : int
        ``prio`` policy: priority of memory traffic and of reduction results at every egress,
        0..7 (the RTL's ``PRIO_BITS``); higher wins, equal is round-robin.
    mem_weight, result_weight : int
        ``wrr`` policy: packets per turn of each ingress port's memory traffic and of the
        reduction results at every egress, 1..255 (the RTL's ``WEIGHT_BITS``; its weight 0,
        which disables a requester, would starve that traffic, so a replay refuses it).
        With ``result_weight`` w and ``mem_weight`` 1, the results of an egress may send w
        packets for each packet of every ingress's memory traffic.
    quantum_flits : int or None
        ``drr`` policy: flits a requester's deficit gains per turn, 1..65535 (the RTL's
        ``QUANTUM_BITS``); None is one chunk (``chunk_flits``). The RTL has one quantum for
        every requester, so ``drr`` shares each egress's flits equally among the requesters
        that want it; the quantum sets how long a turn lasts (at least the longest packet
        gives exact DRR, hw/arbiter.py).
    link_latency_ns : float
        One-way latency of a GPU↔switch link hop, real ns (the GPU model's
        ``sim.gpu.presets.GPU.link_latency_s``, 350 ns for NVLink, × 1e9); 0 puts the GPUs
        at the switch's pins. Rounded to whole cycles (:attr:`link_cycles`). Everything the
        switch delivers enables the GPUs' next packet a round trip (two hops) later, so a
        slot's credit returns ``2 × link_cycles`` + 1 cycles after its result left: with
        ``slots`` chunks of ``chunk_bytes`` an in-switch reduction moves at most
        ``slots × chunk_bytes`` per round trip (docs/replay.md).
    """

    ports: int = 8
    lanes: int = 8
    slots: int = 64
    chunk_flits: int = 8
    policy: str = "rr"
    mtu_flits: int = 64
    link_gbps: float = 300.0
    flit_scale: int = 1
    dtype: str = "fp32"
    mem_priority: int = 1
    result_priority: int = 0
    link_latency_ns: float = 0.0
    mem_weight: int = 1
    result_weight: int = 1
    quantum_flits: int | None = None

    def __post_init__(self):
        try:
            check_int("MTU", self.mtu_flits, 1, 1 << 20, parameter="mtu_flits")
            check_int("Flit scale", self.flit_scale, 1, 1 << 30, parameter="flit_scale")
            element_type(self.dtype)
            for name, label, low, bits in (
                    ("mem_priority", "Memory traffic's priority", 0, PRIO_BITS),
                    ("result_priority", "Reduction results' priority", 0, PRIO_BITS),
                    ("mem_weight", "Memory traffic's weight", 1, WEIGHT_BITS),
                    ("result_weight", "Reduction results' weight", 1, WEIGHT_BITS)):
                check_int(label, getattr(self, name), low, (1 << bits) - 1, parameter=name)
            if self.quantum_flits is not None:
                check_int("DRR quantum", self.quantum_flits, 1, (1 << QUANTUM_BITS) - 1,
                          parameter="quantum_flits")
            spec = SwitchSpec(ports=self.ports, lanes=self.lanes, slots=self.slots,
                              chunk_flits=self.chunk_flits, jobs=REPLAY_JOBS,
                              dtypes=(self.dtype,), policy=self.policy)
        except ParameterError as exc:
            raise type(exc)(f"{exc.parameter}: {exc}", exc.parameter) from None
        if not self.link_gbps > 0:
            raise ParameterError(f"link_gbps: must be positive, not {self.link_gbps!r}",
                                 "link_gbps")
        if not 0 <= self.link_latency_ns <= MAX_LINK_LATENCY_NS:
            raise ParameterError(f"link_latency_ns: must be 0..{MAX_LINK_LATENCY_NS:g} ns, not "
                                 f"{self.link_latency_ns!r}", "link_latency_ns")
        object.__setattr__(self, "policy", spec.policy)
        object.__setattr__(self, "_switch", spec)

    @property
    def switch(self):
        """The switch this replay runs on (:class:`hw.spec.SwitchSpec`): every depth and
        latency the backends use comes from it. Its job table holds job 0 and
        :data:`REPLAY_JOB`; its one element type is ``dtype``."""
        return self._switch

    @property
    def quantum(self):
        """``drr`` quantum, flits: :attr:`quantum_flits`, or one chunk when it is None."""
        return self.chunk_flits if self.quantum_flits is None else self.quantum_flits

    @property
    def flit_bytes(self):
        """Real bytes one simulated flit carries."""
        return self.lanes * LANE_BITS // 8 * self.flit_scale

    @property
    def chunk_bytes(self):
        return self.flit_bytes * self.chunk_flits

    @property
    def cycle_ns(self):
        """Real nanoseconds one simulated cycle stands for."""
        return self.flit_bytes / self.link_gbps

    @property
    def link_cycles(self):
        """One link hop, cycles: :attr:`link_latency_ns` / :attr:`cycle_ns`, rounded."""
        return round(self.link_latency_ns / self.cycle_ns)

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}
