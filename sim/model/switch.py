"""Fast cycle-approximate model of the switch (:mod:`hw.switch`), at packet granularity.

An event-driven model of the same microarchitecture, validated against the RTL on the same
traces (``tests/test_cosim.py``, ``innet bench cosim``):

* **Ingress** k: a FIFO of ``ingress_depth`` flits; a flit written at cycle t is at the head at
  t + ``INGRESS_LATENCY``. The source writes one flit per cycle while the FIFO has room, so a
  packet whose head waits for a busy egress fills the FIFO and then stalls its source (the
  stall cycles are counted).
* **Egress** d: a packet-atomic arbiter (:class:`sim.arbiter_model.ArbiterModel`, the RTL's
  golden model) over N requesters: memory traffic from every other ingress, and the reduction
  results in the place of d's own ingress (as hw/switch.py); a granted packet leaves at one
  flit per cycle, and the next packet can start the cycle after its last flit (zero bubble).
* **Reduction unit**: contributions never wait (the unit's ready is always high); a chunk is
  complete when its last member's last flit is in, and the engine may start it
  ``ENGINE_PICK_LATENCY`` cycles later (judgement stage, arrival, pick: one register each);
  one engine reads complete chunks one flit per cycle, lowest slot first, and each result
  flit reaches the egress arbiters ``2 + pipeline`` cycles after the engine read it
  (pipeline = bank read, adder-tree levels, result select), queued per egress like the RTL's
  result FIFOs.

Egress ready is always high (GPUs sink at line rate). Times are integers (cycles); each event
costs O(ports), not O(flits), so a packet of 64 flits costs the same as a packet of one.
"""

import functools
import heapq
import time
import warnings
from collections import deque


from hw.reduce import default_fifo_depth, pipeline_depth
from sim.model.arbiter import ArbiterModel
from sim.replay.loop import ClosedLoop
from sim.replay.result import ReplayResult

__all__ = ["FastSwitch", "ENGINE_PICK_LATENCY", "INGRESS_LATENCY", "replay_model"]

#: Cycles from a flit entering an ingress FIFO to it being at the FIFO's head.
INGRESS_LATENCY = 2
#: Cycles from a chunk's last contribution flit at the reduction unit to the first cycle the
#: engine may start it: the flit is registered into the judgement stage, the arrival is
#: registered, then the pick (hw/reduce.py).
ENGINE_PICK_LATENCY = 3

# Event kinds, in the order they are handled within one cycle.
_SOURCE, _EGRESS = 0, 1


class _Packet:
    __slots__ = ("pid", "flits", "dst", "j0", "start", "a0", "a_last", "grant", "visible",
                 "seq", "result", "reads", "issues")

    def __init__(self, pid, flits, dst, seq=-1, result=False):
        self.pid, self.flits, self.dst, self.seq, self.result = pid, flits, dst, seq, result
        self.j0 = self.start = self.a0 = self.a_last = self.grant = self.visible = None


class FastSwitch:
    """The fast model. :meth:`run` replays a plan through it closed-loop."""

    def __init__(self, config):
        self.config = config
        N = config.ports
        self.N = N
        self.depth = config.ingress_depth
        self.result_lag = 2 + pipeline_depth(N)
        self.result_depth = default_fifo_depth(N)
        # Egress d's requester k is ingress k's memory traffic, except requester d: the
        # reduction results for d (d's own ingress never sends to d).
        self.arbiters = [
            ArbiterModel(N, config.policy, quantum=config.quantum,
                         priority=[config.result_priority if k == d else config.mem_priority
                                   for k in range(N)])
            for d in range(N)]

    def run(self, plan, max_cycles=None, progress=None):
        cfg, N, D = self.config, self.N, self.depth
        began = time.perf_counter()
        loop = ClosedLoop(plan)
        plan = loop.plan   # the loop's copy, which grows read responses
        events = []
        order = 0

        def at(t, kind, arg):
            nonlocal order
            order += 1
            heapq.heappush(events, (t, kind, order, arg))

        inject, deliver, results = {}, {}, {}
        fifo = [deque() for _ in range(N)]        # packets not yet granted, head first
        hist = [deque() for _ in range(N)]        # granted packets whose reads may matter
        written = [0] * N                         # flits ever started into ingress k
        prev_last_read = [-1] * N                 # last read of the latest granted packet
        src_busy = [False] * N                    # a packet is being written
        src_free = [0] * N                        # first cycle the source may start another
        src_tries = [set() for _ in range(N)]     # cycles of pending try events
        pending = [None] * N                      # packet whose writes wait for FIFO room
        stall = [0] * N
        in_flits = [0] * N
        out_flits = [0] * N
        egress_free = [0] * N
        egress_armed = [None] * N
        heads = [[None] * N for _ in range(N)]   # per egress, per requester: visible head
        result_q = [deque() for _ in range(N)]   # per egress: result packets queued
        result_last_read = [-1] * N
        arrivals = {}                            # seq -> members still to arrive
        arrived_at = {}                          # seq -> last member's last read
        members = bin(plan.members).count("1")
        engine = []                              # heap of (ready, slot, seq)
        engine_free = 0
        engine_armed = [None]
        engine_blocked = [False]                 # waiting for a result FIFO read time
        now = [0]                                # the cycle being handled
        eng_cur = {"packets": None}              # result packets of the chunk being issued
        streaming = [None] * N                   # result packet each egress is sending
        result_members = [d for d in range(N) if plan.members >> d & 1]
        result_count = [0] * N                   # result flits ever issued towards egress d
        result_hist = [deque() for _ in range(N)]

        def read_time(k, j):
            """Cycle flit j of ingress k is read; None while unknown."""
            if j < 0:
                return -1
            for pk in fifo[k]:
                if pk.j0 <= j < pk.j0 + pk.flits:
                    return None
            for pk in hist[k]:
                if pk.j0 <= j < pk.j0 + pk.flits:
                    return pk.grant + (j - pk.j0)
            return -1   # read before anything still remembered

        def try_source(k, t):
            if t in src_tries[k]:
                return
            src_tries[k].add(t)
            at(t, _SOURCE, k)

        def arm_egress(d, t):
            if streaming[d] is not None:
                return   # re-armed when the result packet it is sending ends
            t = max(t, egress_free[d])
            if egress_armed[d] is None or egress_armed[d] > t:
                egress_armed[d] = t
                at(t, _EGRESS, d)

        def resolve_writes(k):
            """Fill in the write times of ingress k's newest packet once the reads they wait
            for are known; free the source when its last flit is in."""
            pk = pending[k]
            if pk is None:
                return
            if pk.a0 is None:
                r = read_time(k, pk.j0 - D)
                if r is None:
                    return
                pk.a0 = max(pk.start, r + 1)
                inject[pk.pid] = pk.a0
                update_visible(k)
                if pending[k] is not pk:
                    return   # a contribution at the head: update_visible finished it already
            r = read_time(k, pk.j0 + pk.flits - 1 - D)
            if r is None:
                return
            pk.a_last = max(pk.a0 + pk.flits - 1, r + 1)
            stall[k] += pk.a_last - (pk.start + pk.flits - 1)
            pending[k] = None
            src_free[k] = pk.a_last + 1
            src_busy[k] = False
            try_source(k, pk.a_last + 1)

        def update_visible(k):
            """Set the head-visibility time of ingress k's head packet if it can be known."""
            if not fifo[k]:
                return
            pk = fifo[k][0]
            if pk.visible is not None or pk.a0 is None:
                return
            pk.visible = max(pk.a0 + INGRESS_LATENCY, prev_last_read[k] + 1)
            if pk.dst < 0:
                # Contribution: the reduction unit takes it at once.
                grant_contribution(k, pk)
            else:
                heads[pk.dst][k] = pk
                arm_egress(pk.dst, pk.visible)

        def leave_fifo(k, pk):
            """Packet pk's reads are known: retire it and expose the next one."""
            prev_last_read[k] = pk.grant + pk.flits - 1
            hist[k].append(fifo[k].popleft())
            update_visible(k)
            resolve_writes(k)

        def grant_contribution(k, pk):
            pk.grant = pk.visible
            in_flits[k] += pk.flits
            last = pk.grant + pk.flits - 1
            seq = pk.seq
            left = arrivals.get(seq, members) - 1
            arrived_at[seq] = max(arrived_at.get(seq, -1), last)
            if left == 0:
                arrivals.pop(seq, None)
                ready = arrived_at.pop(seq) + ENGINE_PICK_LATENCY
                heapq.heappush(engine, (ready, seq % cfg.slots, seq))
                arm_engine()
            else:
                arrivals[seq] = left
            leave_fifo(k, pk)

        def arm_engine():
            if engine:
                arm_engine_at(max(min(e[0] for e in engine), engine_free))

        def result_read(d, n):
            """Cycle result flit n (counted per egress) is read at egress d; None while not
            known yet (its packet not granted, or its flit not issued)."""
            if n < 0:
                return -1
            for rp in result_hist[d]:
                if rp.j0 <= n < rp.j0 + rp.flits:
                    i = n - rp.j0
                    return rp.reads[i] if i < len(rp.reads) else None
            return -1

        def room_time(i):
            """Earliest cycle the engine may issue flit i of the current chunk: the RTL checks
            ``level + in flight < depth - 1`` on every member's result FIFO, i.e. that flit
            n - (depth - 1) of that egress has been read. None while unknown."""
            need = -1
            for rp in eng_cur["packets"]:
                r = result_read(rp.dst, rp.j0 + i - (self.result_depth - 1))
                if r is None:
                    return None
                need = max(need, r + 1)
            return need

        def run_engine(t):
            """Issue chunks' flits: the lowest complete slot first, one flit per cycle while
            every member's result FIFO has room."""
            engine_armed[0] = None
            engine_blocked[0] = False
            P = cfg.chunk_flits
            if eng_cur["packets"] is None:
                if t < engine_free:
                    arm_engine()
                    return
                ready = [e for e in engine if e[0] <= t]
                if not ready:
                    arm_engine()
                    return
                choice = min(ready, key=lambda e: e[1])
                # Room for the first flit decides the start (the RTL re-picks every cycle).
                eng_cur["packets"] = [_Packet(-1, P, d, choice[2], result=True)
                                      for d in result_members]
                for rp in eng_cur["packets"]:
                    rp.j0 = result_count[rp.dst]
                need = room_time(0)
                if need is None or need > t:
                    eng_cur["packets"] = None
                    if need is None:
                        engine_blocked[0] = True
                    else:
                        arm_engine_at(need)
                    return
                engine.remove(choice)
                heapq.heapify(engine)
                for rp in eng_cur["packets"]:
                    rp.reads, rp.issues = [], [t]
                    result_count[rp.dst] += P
                    result_q[rp.dst].append(rp)
                    result_hist[rp.dst].append(rp)
                    while len(result_hist[rp.dst]) > 4 + self.result_depth // P:
                        result_hist[rp.dst].popleft()
                    rp.a0 = t + self.result_lag
                    if len(result_q[rp.dst]) == 1:
                        expose_result(rp.dst)
            continue_engine()

        def continue_engine():
            nonlocal engine_free
            packets = eng_cur["packets"]
            P = cfg.chunk_flits
            issues = packets[0].issues
            while len(issues) < P:
                need = room_time(len(issues))
                if need is None:
                    engine_blocked[0] = True
                    return
                when = max(issues[-1] + 1, need)
                for rp in packets:
                    if rp is not packets[0]:
                        rp.issues.append(when)
                issues.append(when)
                for rp in packets:
                    if streaming[rp.dst] is rp:
                        stream_result(rp.dst)
            engine_free = issues[-1] + 1
            eng_cur["packets"] = None
            arm_engine()

        def stream_result(d):
            """Extend the read times of the result packet egress d is sending, as far as its
            flits have been issued; finish it when all are read."""
            rp = streaming[d]
            while len(rp.reads) < len(rp.issues):
                i = len(rp.reads)
                avail = rp.issues[i] + self.result_lag
                rp.reads.append(max(avail, rp.grant + i if i == 0 else rp.reads[-1] + 1))
            if engine_blocked[0]:
                arm_engine_at(now[0])   # a read time it waited for may be known now
                engine_blocked[0] = False
            if len(rp.reads) < rp.flits:
                return
            streaming[d] = None
            last = rp.reads[-1]
            egress_free[d] = last + 1
            out_flits[d] += rp.flits
            result_q[d].popleft()
            result_last_read[d] = last
            results[(d, rp.seq)] = last
            for k in loop.result(d, rp.seq, last):
                try_source(k, last + 1)
            if result_q[d]:
                expose_result(d)
            arm_egress(d, last + 1)

        def expose_result(d):
            rp = result_q[d][0]
            rp.visible = max(rp.a0, result_last_read[d] + 1)
            heads[d][d] = rp
            arm_egress(d, rp.visible)

        def arm_engine_at(t):
            if engine_armed[0] is None or engine_armed[0] > t:
                engine_armed[0] = t
                at(t, _EGRESS, -1)

        def egress(d, t):
            egress_armed[d] = None
            if streaming[d] is not None:
                return
            if t < egress_free[d]:
                arm_egress(d, egress_free[d])
                return
            cand = heads[d]
            valid = [p is not None and p.visible <= t for p in cand]
            if not any(valid):
                nxt = [p.visible for p in cand if p is not None]
                if nxt:
                    arm_egress(d, min(nxt))
                return
            arb = self.arbiters[d]
            sel, _ = arb.step(valid, [cand[i].flits == 1 if valid[i] else False
                                      for i in range(N)], True)
            pk = cand[sel]
            cand[sel] = None
            if pk.flits > 1:
                arb.busy = False
                if arb.policy.value == "drr":
                    arb._set_deficit(sel, arb.deficit[sel] - (pk.flits - 1))
            pk.grant = t
            if pk.result:
                # Held until its last flit is read; the engine may still be issuing it.
                egress_free[d] = 1 << 62
                streaming[d] = pk
                stream_result(d)
                return
            last = t + pk.flits - 1
            egress_free[d] = last + 1
            out_flits[d] += pk.flits
            in_flits[sel] += pk.flits
            deliver[pk.pid] = last
            for w in loop.delivered(pk.pid, last):
                wake(w)
            leave_fifo(sel, pk)
            arm_egress(d, last + 1)

        def wake(k):
            t = loop.wake_time(k)
            if t is not None:
                try_source(k, max(t, src_free[k]))

        def source(k, t):
            src_tries[k].discard(t)
            if src_busy[k] or t < src_free[k]:
                return
            pid = loop.next_packet(k, t)
            if pid is None:
                wake(k)
                return
            flits = int(plan.flits[pid])
            dst = int(plan.dst[pid])
            pk = _Packet(pid, flits, dst, int(plan.seq[pid]))
            pk.j0 = written[k]
            pk.start = t
            h = hist[k]
            while h and h[0].j0 + h[0].flits <= pk.j0 - D:
                h.popleft()
            written[k] += flits
            fifo[k].append(pk)
            src_busy[k] = True
            pending[k] = pk
            resolve_writes(k)
            if len(fifo[k]) == 1:
                update_visible(k)

        for k in range(N):
            try_source(k, 0)
        handled = 0
        while events:
            t, kind, _, arg = heapq.heappop(events)
            now[0] = t
            if max_cycles is not None and t > max_cycles:
                break
            if kind == _SOURCE:
                source(arg, t)
            elif arg < 0:
                run_engine(t)
            else:
                egress(arg, t)
            handled += 1
            if progress and handled % 200000 == 0:
                progress(t, loop.started, loop.total)
        return ReplayResult.collect(
            "model", loop, inject, deliver, results, egress_flits=out_flits,
            ingress_flits=in_flits, stall_cycles=stall, wall_s=time.perf_counter() - began,
            extra={"core": "python"})


def replay_model(plan, progress=None, core="auto"):
    """Replay ``plan`` through the fast model.

    ``core``: ``"c"`` runs the compiled core (:mod:`sim.switch_core`, identical results, about
    30 times faster), ``"python"`` this module's model, ``"auto"`` the compiled core when this
    machine can build it and this module otherwise (with a warning saying why).
    ``progress(cycle, started, total)`` is called on long Python replays.
    """
    if core not in ("auto", "c", "python"):
        raise ValueError(f"core must be auto, c or python, not {core!r}")
    model = FastSwitch(plan.config)
    if core != "python":
        from sim.model.switch_core import CoreUnavailable, run_core
        try:
            return run_core(model, plan, INGRESS_LATENCY, ENGINE_PICK_LATENCY)
        except CoreUnavailable as e:
            if core == "c":
                raise
            _warn_once(str(e))
    return model.run(plan, progress=progress)


@functools.lru_cache(maxsize=None)
def _warn_once(why):
    warnings.warn(f"fast model: C core unavailable ({why}); using the Python model",
                  RuntimeWarning, stacklevel=3)
