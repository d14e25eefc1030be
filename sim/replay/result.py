"""What a replay measured (:class:`ReplayResult`), and comparing two replays of one plan."""

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from hw.packet import Kind
from sim.replay.plan import Plan

__all__ = ["ReplayResult", "ResultCycles", "compare", "slot_occupancy"]


class ResultCycles(Mapping):
    """``(port, seq) → cycle`` the result of chunk ``seq`` left towards ``port``, held as an
    array (``cycles[port, seq]``, −1 where none): a whole iteration at flit scale 1 has tens of
    millions of results, too many for a dict. Compares equal to a dict of the same entries."""

    def __init__(self, cycles):
        self.cycles = np.asarray(cycles, dtype=np.int64)
        self._chunk_last = None

    def __getitem__(self, key):
        port, seq = key
        if not (0 <= port < self.cycles.shape[0] and 0 <= seq < self.cycles.shape[1]):
            raise KeyError(key)
        c = int(self.cycles[port, seq])
        if c < 0:
            raise KeyError(key)
        return c

    def __iter__(self):
        ports, seqs = np.nonzero(self.cycles >= 0)
        return zip(ports.tolist(), seqs.tolist())

    def __len__(self):
        return int((self.cycles >= 0).sum())

    def arrays(self):
        """``(ports, seqs, cycles)`` of every result, as arrays."""
        ports, seqs = np.nonzero(self.cycles >= 0)
        return ports, seqs, self.cycles[ports, seqs]

    def chunk_last(self):
        """Per chunk, the cycle its last result left (−1 where none), computed once: the
        result's makespan and its slot occupancy both read it (one pass over tens of
        millions of entries instead of two)."""
        if self._chunk_last is None:
            c = self.cycles
            self._chunk_last = c.max(axis=0) if c.shape[0] else np.full(c.shape[1], -1, np.int64)
        return self._chunk_last

    def last(self):
        return int(self.chunk_last().max(initial=-1))


def _result_arrays(results):
    """``(ports, seqs, cycles)`` of a results mapping (dict or :class:`ResultCycles`)."""
    if isinstance(results, ResultCycles):
        return results.arrays()
    n = len(results)
    keys = np.array(list(results), dtype=np.int64).reshape(n, 2)
    return keys[:, 0], keys[:, 1], np.fromiter(results.values(), np.int64, n)


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
    def build(cls, backend, plan, message_done, inject, deliver, results, chunk_start=None,
              **counters):
        """Build a result from per-packet arrays (``inject``, ``deliver``: cycle or -1, indexed
        by pid), ``results`` ((port, seq) → cycle) and ``message_done`` (mid → cycle);
        ``chunk_start``: each chunk's first contribution injection when the backend kept it
        (see :func:`slot_occupancy`)."""
        if not isinstance(results, ResultCycles):
            results = dict(results)
        last_result = results.last() if isinstance(results, ResultCycles) else \
            max(results.values(), default=-1)
        last = max(int(deliver.max(initial=-1)), int(last_result))
        peak, mean = slot_occupancy(plan, inject, results, chunk_start)
        return cls(backend=backend, plan=plan, cycles=last + 1, inject=inject, deliver=deliver,
                   results=results, slot_peak=peak, slot_mean=mean,
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
        mem = np.nonzero((plan.kind != Kind.REDUCE_CONTRIB.value) & (self.deliver >= 0))[0]
        lat = self.deliver[mem] - self.inject[mem]
        span = max(self.cycles, 1)
        return {
            "backend": self.backend,
            "cycles": int(self.cycles),
            "real_time_us": self.cycles * cfg.cycle_ns / 1e3,
            "flit_scale": cfg.flit_scale,
            "flit_bytes": cfg.flit_bytes,
            "flits": int(plan.flits.sum()),
            "link_latency_cycles": cfg.link_cycles,
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
    if not len(values):
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


def slot_occupancy(plan, inject, results, start=None):
    """Peak and mean number of chunks in flight (first contribution in → last result out),
    an upper bound on the slots held. ``start``: each chunk's first contribution injection
    (any value for a chunk without results), when the replay kept it as it went (the C core:
    a pass over tens of millions of packets saved); else it is found from ``inject``."""
    if not plan.chunks:
        return 0, 0.0
    if start is None:
        # Every packet at once, the others (seq -1) into a spare last entry: selecting the
        # contributions first would copy tens of millions of entries.
        start = np.full(plan.chunks + 1, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(start, plan.seq, np.asarray(inject, dtype=np.int64))
        start = start[:-1]
    end = np.full(plan.chunks, -1, dtype=np.int64)
    if isinstance(results, ResultCycles):
        if results.cycles.size:
            end = results.chunk_last()   # the last port's result, per chunk
    elif len(results):
        _, seqs, cycles = _result_arrays(results)
        np.maximum.at(end, seqs, cycles)
    done = end >= 0
    if not done.any():
        return 0, 0.0
    # Occupancy rises at each start and falls the cycle after each end (a chunk ending at t
    # and one starting at t + 1 do not overlap). Its peak is the highest running count over
    # the starts and ends in cycle order, an end before a start of the same cycle: one sort of
    # both as 2 × cycle + 1 (a start) and 2 × cycle (an end), cheaper than sorting each and
    # searching one in the other. Its time-average is the total of the chunks' lifetimes over
    # the span.
    # Every step is computed in place in one array: at flit scale 1 each temporary of it is
    # tens of MB of fresh memory, whose first touch cost more than the arithmetic.
    if done.all():
        starts, ends = start, end   # views: no copies
    else:
        starts, ends = start[done], end[done]
    n = len(starts)
    # int32 when every step fits (BERT-large in-switch: 742 M cycles): half the memory to touch
    # and to sort
    top = 2 * max(int(starts.max()), int(ends.max())) + 2
    steps = np.empty(2 * n, dtype=np.int32 if top <= np.iinfo(np.int32).max else np.int64)
    np.multiply(starts, 2, out=steps[:n])
    steps[:n] += 1
    np.multiply(ends, 2, out=steps[n:])
    steps[n:] += 2   # 2 × (end + 1)
    steps.sort(kind="stable")   # two nearly sorted runs: timsort merges them (0.14 → 0.05 s)
    steps &= 1
    steps *= 2
    steps -= 1   # +1 at a start, -1 at an end
    np.cumsum(steps, out=steps)
    peak = int(steps.max())
    # ends run to end + 1
    span = int(ends.max() + 1 - starts.min())
    mean = float((ends.sum() + n - starts.sum()) / span) if span else float(peak)
    return peak, mean
