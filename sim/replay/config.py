"""The switch a replay runs on and how trace time maps to its cycles (:class:`ReplayConfig`)."""

from dataclasses import dataclass

from hw.packet import LANE_BITS

__all__ = ["ReplayConfig", "REPLAY_JOB"]


#: The reduction job every in-switch contribution of a replay belongs to.
REPLAY_JOB = 1


@dataclass(frozen=True)
class ReplayConfig:
    """The switch and the time mapping of a replay.

    Attributes
    ----------
    ports, lanes, slots, chunk_flits, policy
        The switch (as ``innet export switch``); ``ports`` ≥ the trace's GPUs.
    mtu_flits : int
        Longest memory packet, flits; longer messages are cut.
    link_gbps : float
        One port's bandwidth, GB/s (bytes per ns): sets the cycle time.
    flit_scale : int
        Real flits one simulated flit stands for.
    dtype : str
        Element type of in-switch contributions (``fp32``, ``int32``, ``bf16``).
    mem_priority, result_priority : int
        ``prio`` policy: priority of memory traffic and of reduction results.
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

    def __post_init__(self):
        checks = [("ports", self.ports, 2, 64), ("lanes", self.lanes, 1, 64),
                  ("slots", self.slots, 1, 65536), ("chunk_flits", self.chunk_flits, 1, 4096),
                  ("mtu_flits", self.mtu_flits, 1, 1 << 20),
                  ("flit_scale", self.flit_scale, 1, 1 << 30)]
        for name, value, lo, hi in checks:
            if not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, not {value!r}")
        if self.policy not in ("rr", "prio", "wrr", "drr"):
            raise ValueError(f"policy must be rr, prio, wrr or drr, not {self.policy!r}")
        if self.dtype not in ("int32", "fp32", "bf16"):
            raise ValueError(f"dtype must be int32, fp32 or bf16, not {self.dtype!r}")
        if not self.link_gbps > 0:
            raise ValueError(f"link_gbps must be positive, not {self.link_gbps!r}")

    @property
    def ingress_depth(self):
        """Ingress FIFO depth, flits (as hw.switch.Switch builds it)."""
        return max(16, 2 * self.chunk_flits)

    @property
    def quantum(self):
        """``drr`` quantum, flits: one chunk per turn."""
        return self.chunk_flits

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

    def as_dict(self):
        return dict(self.__dict__)
