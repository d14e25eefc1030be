"""Trace replay through a switch: the packet plan and the closed loop both backends share.

A GPU trace (:mod:`sim.trace`) is turned into a **plan**: per GPU port, messages (a memory
write, a memory read, a gradient message to a peer, or a gradient contribution to the switch)
cut into switch packets, each with the cycle it is issued at and the message it depends on.
:class:`ClosedLoop` then decides, cycle by cycle, which packet each GPU starts next, exactly as
a GPU would: a message waits for its issue cycle and for the message it depends on to have been
delivered (ring step k+1 waits for step k), a contribution to slot ``seq mod S`` waits until the
result of chunk ``seq - S`` came back (the result is the credit, SwitchML-style), and a read
request's response is sent by the peer once the request arrived.

The RTL backend (:mod:`sim.cosim`, cocotb) and the fast model (:mod:`sim.switch_model`) drive
the same :class:`ClosedLoop`, so their per-packet delivery cycles are directly comparable.

Time: one switch cycle moves one flit (``4 × lanes`` bytes) per port. The replay maps trace
nanoseconds to cycles so that a port's line rate equals the GPU's link bandwidth, with one
simulated flit standing for ``flit_scale`` real flits (``flit_scale = 1`` is the real switch;
larger values shrink a long iteration into a tractable number of flits, keeping every
bandwidth ratio; see docs/metrics.md).
"""

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from hw.packet import LANE_BITS, Kind
from .trace import GRAD, MEM, MEM_OPS, NO_DEP, SWITCH_PORT

__all__ = ["ReplayConfig", "Plan", "build_plan", "ClosedLoop", "ReplayResult", "PlanError",
           "MEM_KINDS", "REPLAY_JOB", "compare", "scale_for", "slot_occupancy"]

MEM_KINDS = (Kind.MEM_WRITE, Kind.MEM_READ_REQ, Kind.MEM_READ_RESP)
#: The reduction job every in-switch contribution of a replay belongs to.
REPLAY_JOB = 1


class PlanError(ValueError):
    """The trace cannot be replayed on this switch (one line: what and where)."""


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


@dataclass
class Message:
    """One trace message: the packets a GPU sends for one record."""

    mid: int
    src: int
    kind: Kind
    dst: int                  # egress port; -1 for contributions
    issue: int                # cycle
    dep: int                  # message id it waits for, or -1
    record: int               # trace record id
    packets: list = field(default_factory=list)   # packet ids
    response_flits: int = 0   # read requests: size of the response
    response_to: int = -1     # read responses: the request's message id


@dataclass
class Plan:
    """Packets and messages of a replay. Packet arrays are indexed by packet id."""

    config: ReplayConfig
    gpus: int
    messages: list
    src: np.ndarray
    dst: np.ndarray           # egress port, -1 for contributions
    kind: np.ndarray
    flits: np.ndarray
    msg: np.ndarray
    seq: np.ndarray           # contributions: chunk sequence number; else -1
    members: int              # in-switch job member bitmap (0 if none)
    chunks: int               # in-switch chunks in the job
    meta: dict

    @property
    def packets(self):
        return len(self.src)

    def copy(self):
        """A copy a replay may extend (read responses are added as they are sent)."""
        messages = [Message(**{**m.__dict__, "packets": list(m.packets)}) for m in self.messages]
        return Plan(self.config, self.gpus, messages, self.src.copy(), self.dst.copy(),
                    self.kind.copy(), self.flits.copy(), self.msg.copy(), self.seq.copy(),
                    self.members, self.chunks, dict(self.meta))

    def packet_key(self, pid):
        """A name for packet ``pid`` that does not depend on timing: (trace record, packet
        kind, index within its message)."""
        m = self.messages[int(self.msg[pid])]
        return (m.record, int(self.kind[pid]), m.packets.index(pid))

    def add_packet(self, src, dst, kind, flits, msg, seq=-1):
        """Append a packet (read responses are created while the replay runs)."""
        self.src = np.append(self.src, src)
        self.dst = np.append(self.dst, dst)
        self.kind = np.append(self.kind, Kind(kind).value)
        self.flits = np.append(self.flits, flits)
        self.msg = np.append(self.msg, msg)
        self.seq = np.append(self.seq, seq)
        return len(self.src) - 1


def build_plan(meta, records, config, path="trace"):
    """Cut the trace's ``mem`` and ``grad`` records into switch packets.

    Kernel records are not switch traffic and are skipped. Raises :class:`PlanError` when the
    trace does not fit the switch (more GPUs than ports, in-switch pieces not sent by every
    member).
    """
    gpus = int(meta["gpus"])
    if gpus > config.ports:
        raise PlanError(f"{path}: the trace has {gpus} GPUs but the switch has "
                        f"{config.ports} ports")
    cycle_ns = config.cycle_ns
    fb = config.flit_bytes
    messages, by_record = [], {}
    src, dst, kind, flits, msg, seq = [], [], [], [], [], []
    contrib = []   # (message, record) of in-switch pieces, numbered after the loop

    def packet(s, d, k, n, m, q=-1):
        src.append(s), dst.append(d), kind.append(Kind(k).value), flits.append(n), msg.append(m)
        seq.append(q)
        return len(src) - 1

    for r in records:
        if r.rtype not in (MEM, GRAD):
            continue
        dep = -1
        if r.b != NO_DEP:
            if r.b not in by_record:
                raise PlanError(f"{path}: record {r.id}: dependency {r.b} is not a message")
            dep = by_record[r.b]
        if r.peer == r.gpu:
            # The switch drops a packet to its sender's own port (hw/switch.py).
            raise PlanError(f"{path}: record {r.id}: GPU {r.gpu} sends to itself")
        issue = int(r.time_ns / cycle_ns)
        n_flits = max(1, -(-r.a // fb))
        mid = len(messages)
        if r.rtype == GRAD and r.peer == SWITCH_PORT:
            m = Message(mid, r.gpu, Kind.REDUCE_CONTRIB, -1, issue, dep, r.id)
            contrib.append((m, r))
        elif r.rtype == MEM and MEM_OPS[r.op] == "read":
            m = Message(mid, r.gpu, Kind.MEM_READ_REQ, r.peer, issue, dep, r.id,
                        response_flits=n_flits)
            m.packets.append(packet(r.gpu, r.peer, Kind.MEM_READ_REQ, 1, mid))
        else:
            m = Message(mid, r.gpu, Kind.MEM_WRITE, r.peer, issue, dep, r.id)
            for offset in range(0, n_flits, config.mtu_flits):
                m.packets.append(packet(r.gpu, r.peer, Kind.MEM_WRITE,
                                        min(config.mtu_flits, n_flits - offset), mid))
        messages.append(m)
        by_record[r.id] = mid

    # In-switch pieces: every member sends the same pieces (bucket, piece) in the same order;
    # chunk c of the job is contribution seq c on every member.
    members, chunks = 0, 0
    if contrib:
        keys = {}
        for m, r in contrib:
            keys.setdefault((r.slot, r.aux), []).append((m, r))
            members |= 1 << r.gpu
        order = sorted(keys, key=lambda k: (min(r.time_ns for _, r in keys[k]), k))
        for key in order:
            group = keys[key]
            senders = sum(1 << r.gpu for _, r in group)
            if senders != members or len(group) != bin(members).count("1"):
                _, r = group[0]
                raise PlanError(f"{path}: record {r.id}: in-switch piece bucket={key[0]} "
                                f"chunk={key[1]} is not sent exactly once by every member")
            size = max(r.a for _, r in group)
            n_chunks = max(1, -(-size // config.chunk_bytes))
            for m, r in group:
                for c in range(n_chunks):
                    m.packets.append(packet(r.gpu, -1, Kind.REDUCE_CONTRIB, config.chunk_flits,
                                            m.mid, chunks + c))
            chunks += n_chunks
        if bin(members).count("1") < 2:
            raise PlanError(f"{path}: in-switch reduction needs at least 2 members")
    as_array = lambda v: np.array(v, dtype=np.int64)   # noqa: E731
    return Plan(config, gpus, messages, as_array(src), as_array(dst), as_array(kind),
                as_array(flits), as_array(msg), as_array(seq), members, chunks, dict(meta))


class ClosedLoop:
    """Which packet each GPU port starts next, given what has been delivered.

    Both backends call :meth:`next_packet` when a port is free to start a packet at ``cycle``
    and report every delivery (:meth:`delivered`, :meth:`result`). A message is eligible once
    ``cycle ≥ issue`` and its dependency was delivered at an earlier cycle; among eligible
    messages a port takes them in (issue, id) order, skipping one whose next packet is a
    contribution still waiting for its slot's credit.
    """

    def __init__(self, plan):
        plan = plan.copy()
        self.plan = plan
        slots = plan.config.slots
        self.slots = slots
        n = plan.config.ports
        self.future = [[] for _ in range(n)]     # heap of (issue, mid) not yet eligible by time
        self.active = [[] for _ in range(n)]     # sorted (issue, mid) eligible messages
        self.next_index = {}                     # mid -> next packet position
        self.remaining = {}                      # mid -> packets (or results) not yet delivered
        self.waiting = {}                        # dep mid -> [mid]
        self.done_at = {}                        # mid -> delivery cycle
        self.result_at = {}                      # (port, seq) -> cycle the result arrived
        self.chunk_msg = {}                      # (port, seq) -> message id of the contribution
        for m in plan.messages:
            self.remaining[m.mid] = len(m.packets)
            for p in m.packets:
                if plan.seq[p] >= 0:
                    self.chunk_msg[(m.src, int(plan.seq[p]))] = m.mid
            if m.dep >= 0:
                self.waiting.setdefault(m.dep, []).append(m.mid)
            else:
                heapq.heappush(self.future[m.src], (m.issue, m.mid))
        self.started = 0
        self.total = plan.packets

    # -- queries ---------------------------------------------------------------------------

    def next_packet(self, port, cycle):
        """The packet ``port`` starts at ``cycle``, or None."""
        fut, act = self.future[port], self.active[port]
        while fut and fut[0][0] <= cycle:
            entry = heapq.heappop(fut)
            _insort(act, entry)
        plan = self.plan
        for i, (_, mid) in enumerate(act):
            m = plan.messages[mid]
            pos = self.next_index.get(mid, 0)
            p = m.packets[pos]
            s = plan.seq[p]
            if s >= self.slots:
                got = self.result_at.get((port, int(s) - self.slots))
                if got is None or got >= cycle:
                    continue
            pos += 1
            self.next_index[mid] = pos
            if pos == len(m.packets):
                del act[i]
            self.started += 1
            return int(p)
        return None

    def wake_time(self, port):
        """The next cycle a message of ``port`` becomes eligible by time alone (or None)."""
        fut = self.future[port]
        return fut[0][0] if fut else None

    def finished(self):
        return len(self.done_at) == len(self.plan.messages)

    # -- events ----------------------------------------------------------------------------

    def delivered(self, pid, cycle):
        """A memory packet's last flit left the switch at ``cycle``. Returns the ports whose
        eligibility may have changed."""
        plan = self.plan
        mid = int(plan.msg[pid])
        self.remaining[mid] -= 1
        if self.remaining[mid] == 0:
            m = plan.messages[mid]
            if m.kind == Kind.MEM_READ_REQ and m.response_flits:
                return self._respond(m, cycle)
            if m.kind == Kind.MEM_READ_RESP:
                # The response completes the read: the request message is done.
                return self._done(m.response_to, cycle) + self._done(mid, cycle)
            return self._done(mid, cycle)
        return []

    def result(self, port, seq, cycle):
        """The result of chunk ``seq`` arrived at ``port`` at ``cycle``."""
        self.result_at[(port, seq)] = cycle
        mid = self.chunk_msg[(port, seq)]
        self.remaining[mid] -= 1
        woken = [port]   # a credit came back
        if self.remaining[mid] == 0:
            woken += self._done(mid, cycle)
        return woken

    def _respond(self, request, cycle):
        plan = self.plan
        mid = len(plan.messages)
        resp = Message(mid, request.dst, Kind.MEM_READ_RESP, request.src, cycle + 1, -1,
                       request.record)
        resp.response_to = request.mid
        cfg = plan.config
        for offset in range(0, request.response_flits, cfg.mtu_flits):
            resp.packets.append(plan.add_packet(request.dst, request.src, Kind.MEM_READ_RESP,
                                                min(cfg.mtu_flits,
                                                    request.response_flits - offset), mid))
        plan.messages.append(resp)
        self.remaining[mid] = len(resp.packets)
        self.total = plan.packets
        heapq.heappush(self.future[resp.src], (resp.issue, mid))
        return [resp.src]

    def _done(self, mid, cycle):
        self.done_at[mid] = cycle
        woken = []
        for w in self.waiting.pop(mid, []):
            m = self.plan.messages[w]
            heapq.heappush(self.future[m.src], (max(m.issue, cycle + 1), w))
            woken.append(m.src)
        return woken


def _insort(items, entry):
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < entry:
            lo = mid + 1
        else:
            hi = mid
    items.insert(lo, entry)


@dataclass
class ReplayResult:
    """What a replay measured. Cycles count from the first cycle of the replay.

    ``inject[p]``: cycle packet p's first flit entered the switch; ``deliver[p]``: cycle its
    last flit left (memory packets); ``results[(port, seq)]``: cycle the last flit of chunk
    ``seq``'s result left towards ``port``. ``egress_flits[d]``, ``ingress_flits[k]``: flits
    moved; ``stall_cycles[k]``: cycles port k had a flit to send but the switch refused it.
    ``errors``: drop counters by cause (the RTL's; the model drops nothing).
    """

    backend: str
    plan: Plan
    cycles: int
    inject: np.ndarray
    deliver: np.ndarray
    results: dict
    egress_flits: list
    ingress_flits: list
    stall_cycles: list
    slot_peak: int
    slot_mean: float
    message_done: dict
    errors: dict = field(default_factory=dict)
    mismatches: int = 0
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)   # how it ran: driver, build, timings

    @classmethod
    def collect(cls, backend, loop, inject, deliver, results, **counters):
        """Build a result from a backend's per-packet dicts (``inject``, ``deliver``: pid →
        cycle; ``results``: (port, seq) → cycle) and its ``loop``; ``counters`` are the
        remaining fields (flit counts, stalls, errors, mismatches, wall_s)."""
        plan = loop.plan
        arrays = []
        for cycles in (inject, deliver):
            a = np.full(plan.packets, -1, dtype=np.int64)
            if cycles:
                a[list(cycles)] = list(cycles.values())
            arrays.append(a)
        return cls.build(backend, plan, loop.done_at, *arrays, results, **counters)

    @classmethod
    def build(cls, backend, plan, message_done, inject, deliver, results, **counters):
        """Build a result from per-packet arrays (``inject``, ``deliver``: cycle or -1, indexed
        by pid), ``results`` ((port, seq) → cycle) and ``message_done`` (mid → cycle)."""
        last = max([int(deliver.max(initial=-1))] + list(results.values()))
        peak, mean = slot_occupancy(plan, inject, results)
        return cls(backend=backend, plan=plan, cycles=last + 1, inject=inject, deliver=deliver,
                   results=dict(results), slot_peak=peak, slot_mean=mean,
                   message_done=dict(message_done), **counters)

    def delivery_cycles(self):
        """Every delivery as ``{key: cycle}``: ``("p", pid)`` for memory packets and
        ``("r", port, seq)`` for reduction results; the keys both backends share."""
        out = {("p",) + self.plan.packet_key(p): int(c)
               for p, c in enumerate(self.deliver) if c >= 0}
        out.update({("r", port, seq): c for (port, seq), c in self.results.items()})
        return out

    def summary(self):
        plan = self.plan
        cfg = plan.config
        mem = [p for p in range(plan.packets) if plan.kind[p] != Kind.REDUCE_CONTRIB.value
               and self.deliver[p] >= 0]
        lat = [int(self.deliver[p] - self.inject[p]) for p in mem]
        span = max(self.cycles, 1)
        return {
            "backend": self.backend,
            "cycles": int(self.cycles),
            "real_time_us": self.cycles * cfg.cycle_ns / 1e3,
            "packets": int(plan.packets),
            "memory_packets": len(mem),
            "reduction_chunks": int(plan.chunks),
            "results_delivered": len(self.results),
            "latency_cycles": _stats(lat),
            "egress_utilization": [round(f / span, 4) for f in self.egress_flits],
            "ingress_utilization": [round(f / span, 4) for f in self.ingress_flits],
            "stall_cycles": [int(s) for s in self.stall_cycles],
            "slot_occupancy": {"peak": int(self.slot_peak), "mean": round(self.slot_mean, 3),
                               "slots": cfg.slots},
            "errors": dict(self.errors),
            "mismatches": int(self.mismatches),
            "wall_s": round(self.wall_s, 3),
        }


def _stats(values):
    if not values:
        return {"count": 0}
    a = np.asarray(values, dtype=np.float64)
    return {"count": int(a.size), "mean": round(float(a.mean()), 3), "min": int(a.min()),
            "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": int(a.max())}


def compare(reference, other):
    """Per-delivery agreement of two replays of the same plan (``reference`` = RTL).

    Returns the mean absolute delivery-cycle error as a fraction of the mean delivery cycle,
    the same error over latency (delivery − injection of the reference), and the makespan
    error.
    """
    a, b = reference.delivery_cycles(), other.delivery_cycles()
    missing = set(a) ^ set(b)
    keys = sorted(set(a) & set(b))
    if not keys:
        return {"deliveries": 0, "missing": len(missing)}
    ra = np.array([a[k] for k in keys], dtype=np.float64)
    rb = np.array([b[k] for k in keys], dtype=np.float64)
    diff = np.abs(ra - rb)
    return {
        "deliveries": len(keys),
        "missing": len(missing),
        "exact": int((diff == 0).sum()),
        "mae_cycles": round(float(diff.mean()), 3),
        "max_error_cycles": int(diff.max()),
        "mae_fraction": float(diff.mean() / max(ra.mean(), 1.0)),
        "makespan_error": abs(reference.cycles - other.cycles) / max(reference.cycles, 1),
    }


def slot_occupancy(plan, inject, results):
    """Peak and mean number of chunks in flight (first contribution in → last result out),
    an upper bound on the slots held."""
    if not plan.chunks:
        return 0, 0.0
    start = np.full(plan.chunks, np.iinfo(np.int64).max, dtype=np.int64)
    end = np.full(plan.chunks, -1, dtype=np.int64)
    contrib = np.nonzero(plan.seq >= 0)[0]
    np.minimum.at(start, plan.seq[contrib], inject[contrib])
    if results:
        seqs = np.fromiter((seq for _, seq in results), dtype=np.int64, count=len(results))
        np.maximum.at(end, seqs, np.fromiter(results.values(), np.int64, len(results)))
    done = end >= 0
    if not done.any():
        return 0, 0.0
    events = np.concatenate([np.stack([start[done], np.ones(done.sum(), np.int64)], 1),
                             np.stack([end[done] + 1, -np.ones(done.sum(), np.int64)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]
    level = np.cumsum(events[:, 1])
    times = events[:, 0]
    span = times[-1] - times[0]
    mean = float((level[:-1] * np.diff(times)).sum() / span) if span else float(level.max())
    return int(level.max()), mean


def scale_for(total_bytes, lanes, target_flits):
    """The smallest flit scale that brings ``total_bytes`` per port under ``target_flits``."""
    return max(1, math.ceil(total_bytes / (lanes * 4 * target_flits)))
