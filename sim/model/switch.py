"""Fast cycle-approximate model of the switch (:mod:`hw.switch`), at packet granularity.

An event-driven model of the same microarchitecture, validated against the RTL on the same
traces (``tests/test_cosim.py``, ``innet bench cosim``):

* **Ingress** k: a FIFO of ``ingress_fifo_flits`` flits; a flit written at cycle t is at the
  head at t + ``ingress_latency``. The source writes one flit per cycle while the FIFO has room, so a
  packet whose head waits for a busy egress fills the FIFO and then stalls its source (the
  stall cycles are counted).
* **Egress** d: a packet-atomic arbiter (:class:`sim.model.arbiter.ArbiterModel`, the RTL's
  golden model) over N requesters: memory traffic from every other ingress, and the reduction
  results in the place of d's own ingress (as hw/switch.py); a granted packet leaves at one
  flit per cycle, and the next packet can start the cycle after its last flit (zero bubble).
  The arbiter registers its choice: it presents at t the choice made at t −
  ``egress_pick_latency`` among the requesters valid then (the one whose last flit left then
  counting as valid), and each flit leaves the switch ``egress_output_latency`` cycles after
  it leaves the arbiter (the egress stage).
* **Reduction unit**: a contribution at its ingress FIFO's head is taken at one flit per cycle
  once the unit's hold FIFO for the port has room for a whole chunk (:meth:`_SwitchRun.
  hold_bound`); its header is judged when it heads the hold FIFO, in the port's turn of the
  one judge (cycle mod ports, :data:`JUDGE_PHASE`), and its flits leave the hold FIFO one a
  cycle from then. A chunk is complete when its last member's last flit has left, and the
  engine may start it ``engine_pick_latency`` − 1 cycles later (arrival, pick);
  one engine reads complete chunks one flit per cycle, lowest slot first, and each result
  flit reaches the egress arbiters ``result_latency`` cycles after the engine read it (result
  FIFO + pipeline = bank read, adder-tree levels, result select), queued per egress like the
  RTL's result FIFOs.

Every depth and latency named here is a property of the switch specification
(:class:`hw.spec.SwitchSpec`, the plan's ``config.switch``), the RTL's one source of them.

Egress ready is always high (GPUs sink at line rate). Times are integers (cycles); each event
costs O(ports), not O(flits), so a packet of 64 flits costs the same as a packet of one.
"""

import functools
import heapq
import time
import warnings
from collections import deque

from hw.spec import Policy
from sim.model.arbiter import ArbiterModel
from sim.replay.backend import ReplayBackend
from sim.replay.loop import ClosedLoop
from sim.replay.result import ReplayResult

__all__ = ["FastSwitch", "PythonModel", "CompiledModel", "replay_model"]

#: The reduction unit's judge serves port ``(t + JUDGE_PHASE) mod ports`` at model cycle t:
#: its turn counter starts at 0 when reset is released, and the replay drivers
#: (:func:`sim.cosim.pins.configure_replay`) start the model's cycle 0 that many cycles later.
JUDGE_PHASE = 1

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

    def __init__(self, config, judge_phase=None):
        self.config = config
        N = config.ports
        self.N = N
        spec = config.switch   # every depth and latency comes from the switch specification
        self.depth = spec.ingress_fifo_flits
        self.result_lag = spec.result_latency
        self.result_depth = spec.result_fifo_flits
        self.judge_phase = JUDGE_PHASE if judge_phase is None else judge_phase
        # Egress d's requester k is ingress k's memory traffic, except requester d: the
        # reduction results for d (d's own ingress never sends to d).
        self.arbiters = [
            ArbiterModel(N, config.policy, quantum=config.quantum,
                         priority=[config.result_priority if k == d else config.mem_priority
                                   for k in range(N)],
                         weight=[config.result_weight if k == d else config.mem_weight
                                 for k in range(N)])
            for d in range(N)]

    def run(self, plan, max_cycles=None, progress=None):
        """Replay ``plan`` closed-loop (:class:`sim.replay.loop.ClosedLoop`): the events of a
        :class:`_SwitchRun`, in (cycle, kind, order) order, up to ``max_cycles`` if given.
        ``progress(cycle, started, total)`` is called every 200,000 events."""
        began = time.perf_counter()
        loop = ClosedLoop(plan)
        s = _SwitchRun(self, loop)
        for k in range(self.N):
            s.try_source(k, 0)
        events, source, run_engine, egress = s.events, s.source, s.run_engine, s.egress
        while events:
            t, kind, _, arg = heapq.heappop(events)
            s.now = t
            if max_cycles is not None and t > max_cycles:
                break
            if kind == _SOURCE:
                source(arg, t)
            elif arg < 0:
                run_engine(t)
            else:
                egress(arg, t)
            s.handled += 1
            if progress and s.handled % 200000 == 0:
                progress(t, loop.started, loop.total)
        return ReplayResult.collect(
            "model", loop, s.inject, s.deliver, s.results, egress_flits=s.out_flits,
            ingress_flits=s.in_flits, stall_cycles=s.stall, wall_s=time.perf_counter() - began,
            extra={"core": "python", "events": s.handled})


class _SwitchRun:
    """The state of one :meth:`FastSwitch.run`, and the handlers of its events.

    ``switch_core.c`` is this class in C: its ``SwitchRun`` struct has these fields (grouped
    and named alike) and its functions are these methods, of the same names and in the same
    order, statement for statement. Where the data structures differ the C header says how.

    Attributes
    ----------
    N, D, P, S : int
        Ports, ingress FIFO depth (flits), chunk length (flits), reduction slots.
    result_lag, result_depth : int
        Cycles from the engine reading a flit to it reaching the egress arbiters; depth of
        each egress's result FIFO (flits).
    ingress_latency, pick_latency : int
        The switch specification's ``ingress_latency`` and ``engine_pick_latency`` (cycles).
    pick_lag, out_lag : int
        Its ``egress_pick_latency`` (an egress arbiter presents at t what it chose at
        t - pick_lag) and ``egress_output_latency`` (a flit the arbiter sends at t leaves the
        switch at t + out_lag).
    hold_depth, judge_phase : int
        Depth of the reduction unit's hold FIFOs (``judge_hold_flits``); the judge serves
        port ``(t + judge_phase) mod N`` at cycle t (:data:`JUDGE_PHASE`).
    hold_taken, hold_free, hold_hist : list
        Per port, the reduction unit's hold FIFO: contribution flits ever taken; first
        cycle its next header can be judged; the packets whose pops a later header's
        admission may wait for, as (first flit, flits, first pop).
    mem_ports, nmembers, hist_limit : list of int, int, int
        Ports of the reduction's members and their number; result packets remembered per
        egress for :meth:`result_read`.
    arbiters : list of ArbiterModel
        Per egress (the C core's ``arb_*`` arrays, ``policy``, ``priority``, ``weight``).
    loop, plan : ClosedLoop, Plan
        The GPUs' side (the C core's ``loop_*`` functions) and its growing copy of the plan.
    inject, deliver, results : dict
        pid → first write cycle, pid → last read cycle, (egress, seq) → last read cycle.
    out_flits, in_flits, stall : list of int
        Per egress flits sent; per ingress flits received and source stall cycles.
    fifo, hist : list of deque of _Packet
        Per ingress, packets not yet granted (head first), and granted ones whose read times
        later writes may wait for (the C core's ``ing[k]`` split at ``hist_head``, ``fifo_head``).
    written, prev_last_read, src_busy, src_free, pending, src_tries : list
        Per ingress: flits ever started; last read of the latest granted packet; a packet is
        being written; first cycle the source may start another; the packet whose writes wait
        for FIFO room (or None); cycles of pending source events.
    egress_free, egress_armed, egress_last, streaming, result_last_read : list
        Per egress: first cycle it may start a packet; cycle of its live event (or None;
        events of d at other cycles are superseded and dropped, see :meth:`arm_egress`);
        cycle its latest packet's last flit left the arbiter (or None);
        the result packet it is sending (or None); last read of its latest result packet.
    heads : list of list of _Packet
        Per egress, per requester: the visible head (the C core's ``head_mem``; ``heads[d][d]``
        is ``head_res[d]``, the reduction results).
    result_q, result_hist, result_count : list
        Per egress: result packets not yet sent, result packets remembered, result flits ever
        issued towards it (the C core's ``res[d]`` from ``rq_head``, from ``rh_head``, its
        length × P).
    arrivals, arrived_at : dict
        seq → members still to arrive, seq → last read of the latest arrived member.
    engine : list of (int, int, int)
        Complete chunks as (ready cycle, slot, seq).
    engine_free, engine_armed, engine_blocked : int, int or None, bool
        First cycle the engine may start a chunk; cycle of its live event; it waits for a
        result FIFO read time not known yet.
    eng_active, eng_r : bool, list of _Packet
        A chunk is being issued; its result packets, one per member (the C core's
        ``eng_nissues`` and ``eng_last_issue`` are their ``issues``' length and last entry).
    events, order, now, handled : list, int, int, int
        Heap of (cycle, kind, order, port or -1 for the engine); events ever scheduled; the
        cycle being handled; events popped (superseded ones included: ``extra["events"]``).
    """

    __slots__ = (
        "N", "D", "P", "S", "result_lag", "result_depth", "ingress_latency", "pick_latency",
        "pick_lag", "out_lag", "restart", "hold_depth", "hold_read", "judge_phase", "hold_taken",
        "hold_free", "hold_hist", "mem_ports", "nmembers", "hist_limit", "arbiters", "all_last",
        "loop", "plan",
        "inject", "deliver", "results", "out_flits", "in_flits", "stall",
        "fifo", "hist", "written", "prev_last_read", "src_busy", "src_free", "pending",
        "src_tries",
        "egress_free", "egress_armed", "egress_last", "heads", "streaming", "result_last_read",
        "result_q",
        "result_hist", "result_count",
        "arrivals", "arrived_at", "engine", "engine_free", "engine_armed", "engine_blocked",
        "eng_active", "eng_r",
        "events", "order", "now", "handled")

    def __init__(self, model, loop):
        N, plan = model.N, loop.plan   # the loop's copy, which grows read responses
        cfg = model.config
        # configuration
        self.N, self.D, self.P, self.S = N, model.depth, cfg.chunk_flits, cfg.slots
        self.result_lag, self.result_depth = model.result_lag, model.result_depth
        self.ingress_latency = cfg.switch.ingress_latency
        self.pick_latency = cfg.switch.engine_pick_latency
        self.pick_lag = cfg.switch.egress_pick_latency
        self.out_lag = cfg.switch.egress_output_latency
        self.restart = cfg.switch.engine_restart_cycles
        self.hold_depth = cfg.switch.judge_hold_flits
        self.hold_read = cfg.switch.hold_read_latency
        self.judge_phase = model.judge_phase
        # the reduction unit's hold FIFOs: flits ever taken, first cycle the judge may see the
        # next header, and the pops of the packets still in them as (first flit, flits, cycle
        # of the first pop)
        self.hold_taken, self.hold_free = [0] * N, [0] * N
        self.hold_hist = [deque() for _ in range(N)]
        self.mem_ports = [d for d in range(N) if plan.members >> d & 1]
        self.nmembers = bin(plan.members).count("1")
        self.hist_limit = 4 + self.result_depth // self.P
        self.arbiters = model.arbiters
        # closed loop
        self.loop, self.plan = loop, plan
        # outputs
        self.inject, self.deliver, self.results = {}, {}, {}
        self.out_flits, self.in_flits, self.stall = [0] * N, [0] * N, [0] * N
        # ingress state
        self.fifo = [deque() for _ in range(N)]
        self.hist = [deque() for _ in range(N)]
        self.written = [0] * N
        self.prev_last_read = [-1] * N
        self.src_busy = [False] * N
        self.src_free = [0] * N
        self.pending = [None] * N
        self.src_tries = [set() for _ in range(N)]
        # egress state
        self.egress_free = [0] * N
        self.egress_armed = [None] * N
        self.egress_last = [None] * N
        self.heads = [[None] * N for _ in range(N)]
        self.streaming = [None] * N
        self.result_last_read = [-1] * N
        self.result_q = [deque() for _ in range(N)]
        self.result_hist = [deque() for _ in range(N)]
        self.result_count = [0] * N
        # reduction unit
        self.arrivals, self.arrived_at = {}, {}
        self.engine = []
        self.engine_free, self.engine_armed, self.engine_blocked = 0, None, False
        self.eng_active, self.eng_r = False, None
        # events
        self.events, self.order, self.now, self.handled = [], 0, 0, 0

    # -- the model -------------------------------------------------------------------------

    def at(self, t, kind, arg):
        self.order += 1
        heapq.heappush(self.events, (t, kind, self.order, arg))

    def try_source(self, k, t):
        tries = self.src_tries[k]
        if t in tries:
            return
        tries.add(t)
        self.at(t, _SOURCE, k)

    def arm_egress(self, d, t):
        """Make sure egress d is handled at ``t`` (or earlier). An egress has one live event,
        at ``egress_armed[d]``; arming earlier leaves the later event in the heap, and
        :meth:`egress` drops it when it pops (the engine's ``engine_armed`` likewise). Were a
        superseded event handled, it would re-arm in turn, and the events per egress would
        grow with every re-arm (673 million events for the 480,160 packets of a 32-GPU
        GPT-2 XL ring point, against 1.2 million now)."""
        if self.streaming[d] is not None:
            return   # re-armed when the result packet it is sending ends
        t = max(t, self.egress_free[d])
        armed = self.egress_armed
        if armed[d] is None or armed[d] > t:
            armed[d] = t
            self.at(t, _EGRESS, d)

    def arm_engine_at(self, t):
        if self.engine_armed is None or self.engine_armed > t:
            self.engine_armed = t
            self.at(t, _EGRESS, -1)

    def arm_engine(self):
        if self.engine:
            self.arm_engine_at(max(min(e[0] for e in self.engine), self.engine_free))

    def read_time(self, k, j):
        """Cycle flit j of ingress k is read; None while unknown."""
        if j < 0:
            return -1
        for pk in self.fifo[k]:
            if pk.j0 <= j < pk.j0 + pk.flits:
                return None
        for pk in self.hist[k]:
            if pk.j0 <= j < pk.j0 + pk.flits:
                return pk.grant + (j - pk.j0)
        return -1   # read before anything still remembered

    def resolve_writes(self, k):
        """Fill in the write times of ingress k's newest packet once the reads they wait
        for are known; free the source when its last flit is in."""
        pending = self.pending
        pk = pending[k]
        if pk is None:
            return
        D = self.D
        if pk.a0 is None:
            r = self.read_time(k, pk.j0 - D)
            if r is None:
                return
            pk.a0 = max(pk.start, r + 1)
            self.inject[pk.pid] = pk.a0
            self.update_visible(k)
            if pending[k] is not pk:
                return   # a contribution at the head: update_visible finished it already
        r = self.read_time(k, pk.j0 + pk.flits - 1 - D)
        if r is None:
            return
        pk.a_last = max(pk.a0 + pk.flits - 1, r + 1)
        self.stall[k] += pk.a_last - (pk.start + pk.flits - 1)
        pending[k] = None
        self.src_free[k] = pk.a_last + 1
        self.src_busy[k] = False
        self.try_source(k, pk.a_last + 1)

    def leave_fifo(self, k, pk):
        """Packet pk's reads are known: retire it and expose the next one."""
        self.prev_last_read[k] = pk.grant + pk.flits - 1
        self.hist[k].append(self.fifo[k].popleft())
        self.update_visible(k)
        self.resolve_writes(k)

    def hold_bound(self, k):
        """First cycle the reduction unit's port k takes a header: its hold FIFO must hold at
        most ``hold_depth - P`` flits (room for a whole chunk behind them), i.e. flit
        ``taken - (hold_depth - P) - 1`` must have left it the cycle before."""
        x = self.hold_taken[k] - (self.hold_depth - self.P) - 1
        if x < 0:
            return -1
        hist = self.hold_hist[k]
        while hist and hist[0][0] + hist[0][1] <= x:
            hist.popleft()
        j0, _, first_pop = hist[0]
        return first_pop + (x - j0) + 1

    def grant_contribution(self, k, pk):
        """The reduction unit takes contribution pk from ingress k at one flit a cycle from
        when its hold FIFO has room; the judge sees the header once it heads the FIFO, in
        port k's turn, and the flits leave the FIFO one a cycle from then."""
        pk.grant = max(pk.visible, self.hold_bound(k))
        self.in_flits[k] += pk.flits
        head = max(pk.grant + self.hold_read, self.hold_free[k])
        judged = head + (k - head - self.judge_phase) % self.N
        self.hold_hist[k].append((self.hold_taken[k], pk.flits, judged))
        self.hold_taken[k] += pk.flits
        self.hold_free[k] = judged + pk.flits
        # the cycle the last flit would have reached the unit had the judge not kept it
        # waiting (engine_pick_latency counts from there)
        last = judged + pk.flits - 2
        seq = pk.seq
        arrivals, arrived_at = self.arrivals, self.arrived_at
        left = arrivals.get(seq, self.nmembers) - 1
        arrived_at[seq] = max(arrived_at.get(seq, -1), last)
        if left == 0:
            arrivals.pop(seq, None)
            ready = arrived_at.pop(seq) + self.pick_latency
            heapq.heappush(self.engine, (ready, seq % self.S, seq))
            self.arm_engine()
        else:
            arrivals[seq] = left
        self.leave_fifo(k, pk)

    def update_visible(self, k):
        """Set the head-visibility time of ingress k's head packet if it can be known."""
        fifo = self.fifo[k]
        if not fifo:
            return
        pk = fifo[0]
        if pk.visible is not None or pk.a0 is None:
            return
        pk.visible = max(pk.a0 + self.ingress_latency, self.prev_last_read[k] + 1)
        if pk.dst < 0:
            # Contribution: the reduction unit takes it at once.
            self.grant_contribution(k, pk)
        else:
            self.heads[pk.dst][k] = pk
            self.arm_egress(pk.dst, pk.visible + self.pick_lag)

    def result_read(self, d, n):
        """Cycle result flit n (counted per egress) is read at egress d; None while not
        known yet (its packet not granted, or its flit not issued)."""
        if n < 0:
            return -1
        for rp in self.result_hist[d]:
            if rp.j0 <= n < rp.j0 + rp.flits:
                i = n - rp.j0
                return rp.reads[i] if i < len(rp.reads) else None
        return -1

    def room_time(self, i, tentative):
        """Earliest cycle the engine may issue flit i of the current chunk: the RTL checks
        ``level + in flight < depth - 1`` on every member's result FIFO, i.e. that flit
        n - (depth - 1) of that egress has been read. None while unknown. ``tentative``: the
        chunk's result packets are not made yet; each would start at its egress's count."""
        need = -1
        for m, d in enumerate(self.mem_ports):
            j0 = self.result_count[d] if tentative else self.eng_r[m].j0
            r = self.result_read(d, j0 + i - (self.result_depth - 1))
            if r is None:
                return None
            need = max(need, r + 1)
        return need

    def expose_result(self, d):
        rp = self.result_q[d][0]
        rp.visible = max(rp.a0, self.result_last_read[d] + 1)
        self.heads[d][d] = rp
        self.arm_egress(d, rp.visible + self.pick_lag)

    def stream_result(self, d):
        """Extend the read times of the result packet egress d is sending, as far as its
        flits have been issued; finish it when all are read."""
        rp = self.streaming[d]
        reads, issues, lag = rp.reads, rp.issues, self.result_lag
        while len(reads) < len(issues):
            i = len(reads)
            avail = issues[i] + lag
            reads.append(max(avail, rp.grant + i if i == 0 else reads[-1] + 1))
        if self.engine_blocked:
            self.arm_engine_at(self.now)   # a read time it waited for may be known now
            self.engine_blocked = False
        if len(reads) < rp.flits:
            return
        self.streaming[d] = None
        last = reads[-1]
        self.egress_free[d] = last + 1
        self.egress_last[d] = last
        self.out_flits[d] += rp.flits
        self.result_q[d].popleft()
        self.result_last_read[d] = last
        out = last + self.out_lag   # the egress stage
        self.results[(d, rp.seq)] = out
        for k in self.loop.result(d, rp.seq, out):
            self.try_source(k, self.loop.credit_cycle(out))
        # Its next start first: the next result's arm, later, then makes no event to drop.
        self.arm_egress(d, last + 1)
        if self.result_q[d]:
            self.expose_result(d)

    def continue_engine(self):
        """Issue the current chunk's flits, one a cycle while every member's result FIFO has
        room; finish the chunk when all are issued."""
        packets, P = self.eng_r, self.P
        issues = packets[0].issues
        while len(issues) < P:
            need = self.room_time(len(issues), False)
            if need is None:
                self.engine_blocked = True
                return
            when = max(issues[-1] + 1, need)
            for rp in packets:
                if rp is not packets[0]:
                    rp.issues.append(when)
            issues.append(when)
            for rp in packets:
                if self.streaming[rp.dst] is rp:
                    self.stream_result(rp.dst)
        self.engine_free = issues[-1] + self.restart
        self.eng_active, self.eng_r = False, None
        self.arm_engine()

    def run_engine(self, t):
        """Issue chunks' flits: the lowest complete slot first, one flit per cycle while
        every member's result FIFO has room."""
        if t != self.engine_armed:
            return   # superseded by an earlier arm_engine_at
        self.engine_armed = None
        self.engine_blocked = False
        if not self.eng_active:
            if t < self.engine_free:
                self.arm_engine()
                return
            engine = self.engine
            ready = [e for e in engine if e[0] <= t]
            if not ready:
                self.arm_engine()
                return
            choice = min(ready, key=_slot)
            # Room for the first flit decides the start (the RTL re-picks every cycle).
            need = self.room_time(0, True)
            if need is None or need > t:
                if need is None:
                    self.engine_blocked = True
                else:
                    self.arm_engine_at(need)
                return
            engine.remove(choice)
            heapq.heapify(engine)
            P, seq = self.P, choice[2]
            self.eng_active, self.eng_r = True, []
            for d in self.mem_ports:
                rp = _Packet(-1, P, d, seq, result=True)
                rp.j0 = self.result_count[d]
                rp.reads, rp.issues = [], [t]
                rp.a0 = t + self.result_lag
                self.eng_r.append(rp)
                self.result_count[d] += P
                self.result_q[d].append(rp)
                hist = self.result_hist[d]
                hist.append(rp)
                while len(hist) > self.hist_limit:
                    hist.popleft()
                if len(self.result_q[d]) == 1:
                    self.expose_result(d)
        self.continue_engine()

    def wake(self, k):
        t = self.loop.wake_time(k)
        if t is not None:
            self.try_source(k, max(t, self.src_free[k]))

    def egress(self, d, t):
        if t != self.egress_armed[d]:
            return   # superseded by an earlier arm_egress (see arm_egress)
        self.egress_armed[d] = None
        if self.streaming[d] is not None:
            return
        if t < self.egress_free[d]:
            self.arm_egress(d, self.egress_free[d])
            return
        # The arbiter presents at t what it chose at t - pick_lag (its registered choice,
        # requester d: the reduction results), from the requesters valid then; the one whose
        # last flit left then counts as requesting.
        cand, lag = self.heads[d], self.pick_lag
        seen = t - lag
        valid = [p is not None and p.visible <= seen for p in cand]
        arb = self.arbiters[d]
        if self.egress_last[d] == seen:
            valid[arb.ptr] = True
        if not any(valid):
            nxt = [p.visible for p in cand if p is not None]
            if nxt:
                self.arm_egress(d, min(nxt) + lag)
            return
        sel, new_turn = arb.choose(valid)
        if sel is None:
            return   # only when every valid requester has weight 0
        pk = cand[sel]
        if pk is None or pk.visible > t:
            # chosen as its last flit left, with no next packet here now: an idle cycle,
            # and the choice is made afresh from this cycle's requests
            self.arm_egress(d, t + 1)
            return
        # Packet-atomic with the output ready: one start per packet, with the requests of
        # this cycle (the arbiter sees each packet as one flit; DRR is charged for the rest
        # here).
        arb.start([p is not None and p.visible <= t for p in cand], sel, new_turn, True)
        cand[sel] = None
        if arb.policy == Policy.DRR and pk.flits > 1:
            arb._set_deficit(sel, arb.deficit[sel] - (pk.flits - 1))
        pk.grant = t
        if pk.result:
            # Held until its last flit is read; the engine may still be issuing it.
            self.egress_free[d] = 1 << 62
            self.streaming[d] = pk
            self.stream_result(d)
            return
        last = t + pk.flits - 1
        self.egress_free[d] = last + 1
        self.egress_last[d] = last
        self.out_flits[d] += pk.flits
        self.in_flits[sel] += pk.flits
        out = last + self.out_lag   # the egress stage
        self.deliver[pk.pid] = out
        for w in self.loop.delivered(pk.pid, out):
            self.wake(w)
        self.leave_fifo(sel, pk)
        self.arm_egress(d, last + 1)

    def source(self, k, t):
        self.src_tries[k].discard(t)
        if self.src_busy[k] or t < self.src_free[k]:
            return
        pid = self.loop.next_packet(k, t)
        if pid is None:
            self.wake(k)
            return
        plan = self.plan
        pk = _Packet(pid, int(plan.flits[pid]), int(plan.dst[pid]), int(plan.seq[pid]))
        pk.j0 = self.written[k]
        pk.start = t
        h, edge = self.hist[k], pk.j0 - self.D
        while h and h[0].j0 + h[0].flits <= edge:
            h.popleft()
        self.written[k] += pk.flits
        fifo = self.fifo[k]
        fifo.append(pk)
        self.src_busy[k] = True
        self.pending[k] = pk
        self.resolve_writes(k)
        if len(fifo) == 1:
            self.update_visible(k)


def _slot(entry):
    return entry[1]


class PythonModel(ReplayBackend):
    """The fast model's Python reference as a replay backend (:mod:`sim.replay.backend`).

    Parameters
    ----------
    progress : callable, optional
        ``progress(cycle, started, total)``, called on long replays.
    """

    name = "model"

    def __init__(self, progress=None, judge_phase=None):
        self.progress, self.judge_phase = progress, judge_phase

    def run(self, plan):
        return FastSwitch(plan.config, self.judge_phase).run(plan, progress=self.progress)


class CompiledModel(ReplayBackend):
    """The fast model's compiled C core (:mod:`sim.model.switch_core`) as a replay backend:
    the same results as :class:`PythonModel`, about 30 times faster.

    Raises
    ------
    sim.model.switch_core.CoreUnavailable
        From :meth:`run`, when the core cannot be built or loaded here.
    """

    name = "model"

    def __init__(self, judge_phase=None):
        self.judge_phase = judge_phase

    def run(self, plan):
        from sim.model.switch_core import run_core
        return run_core(FastSwitch(plan.config, self.judge_phase), plan)


def replay_model(plan, progress=None, core="auto", judge_phase=None):
    """Replay ``plan`` through the fast model.

    ``core``: ``"c"`` runs the compiled core (:class:`CompiledModel`), ``"python"`` the
    Python reference (:class:`PythonModel`), ``"auto"`` the compiled core when this machine can
    build it and the Python reference otherwise (with a warning saying why).
    ``progress(cycle, started, total)`` is called on long Python replays. ``judge_phase``:
    the judge's turn at cycle 0 when it is not :data:`JUDGE_PHASE` (an RTL run continued
    without a reset, :mod:`sim.cosim.tb_elastic`).
    """
    if core not in ("auto", "c", "python"):
        raise ValueError(f"core must be auto, c or python, not {core!r}")
    if core != "python":
        from sim.model.switch_core import CoreUnavailable
        try:
            return CompiledModel(judge_phase).run(plan)
        except CoreUnavailable as e:
            if core == "c":
                raise
            _warn_once(str(e))
    return PythonModel(progress, judge_phase).run(plan)


@functools.lru_cache(maxsize=None)
def _warn_once(why):
    warnings.warn(f"fast model: C core unavailable ({why}); using the Python model",
                  RuntimeWarning, stacklevel=3)
