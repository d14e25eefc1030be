"""The GPUs' side of a replay: which packet each GPU port starts next, given what the switch
has delivered (:class:`ClosedLoop`). Every backend drives the same loop, so their delivery
cycles compare packet by packet."""

import heapq

from hw.packet import Kind
from sim.replay.plan import Message

__all__ = ["ClosedLoop"]


class ClosedLoop:
    """Which packet each GPU port starts next, given what has been delivered.

    Both backends call :meth:`next_packet` when a port is free to start a packet at ``cycle``
    and report every delivery (:meth:`delivered`, :meth:`result`). A message is eligible once
    ``cycle ≥ issue`` and each of its dependencies was delivered at an earlier cycle (it
    becomes eligible a round trip after the last of them); among eligible
    messages a port takes them in (issue, id) order, skipping one whose next packet is a
    contribution still waiting for its slot's credit.

    Times are the switch's cycles. The GPUs sit one link hop (``config.link_cycles``) away:
    whatever the switch delivers reaches the GPU a hop later, and what the GPU sends in
    reply reaches the switch another hop later, so everything the switch's output enables
    (a dependant message, a read's response, a slot's credit) is usable at the switch
    :attr:`round_trip` + 1 cycles after the delivery. A trace's issue times are shifted by
    one hop when the plan is built (:func:`sim.replay.plan.build_plan`).
    """

    def __init__(self, plan):
        plan = plan.copy()
        self.plan = plan
        slots = plan.config.slots
        self.slots = slots
        #: Cycles from the switch delivering something to the GPU's answer reaching it: two
        #: link hops (the delivery going out, the reply coming back).
        self.round_trip = 2 * plan.config.link_cycles
        n = plan.config.ports
        self.future = [[] for _ in range(n)]     # heap of (issue, mid) not yet eligible by time
        self.active = [[] for _ in range(n)]     # sorted (issue, mid) eligible messages
        self.next_index = {}                     # mid -> next packet position
        self.remaining = {}                      # mid -> packets (or results) not yet delivered
        self.waiting = {}                        # dependency mid -> [mid]
        self.pending = {}                        # mid -> dependencies not yet delivered
        self.ready = {}                          # mid -> cycle its delivered ones allow
        self.done_at = {}                        # mid -> delivery cycle
        self.result_at = {}                      # (port, seq) -> cycle the result arrived
        self.chunk_msg = {}                      # (port, seq) -> message id of the contribution
        for m in plan.messages:
            self.remaining[m.mid] = len(m.packets)
            for p in m.packets:
                if plan.seq[p] >= 0:
                    self.chunk_msg[(m.src, int(plan.seq[p]))] = m.mid
            for d in m.deps:
                self.waiting.setdefault(d, []).append(m.mid)
            if m.deps:
                self.pending[m.mid] = len(m.deps)
                self.ready[m.mid] = m.issue
            else:
                heapq.heappush(self.future[m.src], (m.issue, m.mid))
        self.started = 0
        self.total = plan.packets
        #: The plan's per-packet columns as lists, extended as read responses join the plan:
        #: ``kind, seq, dst, flits, msg`` of packet ``p`` are ``columns[i][p]`` (a numpy scalar
        #: read costs more than the rest of a call, and the replays' loops are per packet).
        self.columns = ([], [], [], [], [])
        self._mirror()

    # -- queries ---------------------------------------------------------------------------

    def next_packet(self, port, cycle, ahead=False):
        """The packet ``port`` starts at ``cycle``, or None.

        ``ahead``: asked at ``cycle`` while the port is still busy, for the packet it will
        start when next free, at a later cycle not yet known (every delivery before
        ``cycle`` reported). Answered (and taken) only when that packet is certain already:
        the port's first message in order is eligible, so nothing is skipped. A message
        skipped for its credit may get it before the port is free, but whatever becomes
        eligible after ``cycle`` sorts behind the first: its issue or ready cycle is later
        than every eligible message's. Otherwise None, and nothing changes."""
        first = self._first(port, cycle, ahead)
        return None if first is None else self._take(port, *first)

    def can_start(self, port, cycle):
        """Whether :meth:`next_packet` at ``cycle`` would give ``port`` a packet (nothing is
        taken): a message eligible by then whose next packet is not a contribution still
        waiting for its slot's credit."""
        return self._first(port, cycle) is not None

    def next_start(self, port, cycle):
        """For a port free at ``cycle`` with nothing to start (:meth:`next_packet` found
        nothing): ``(packet, at)``, the packet it will start next and the first cycle it can,
        when both are certain already; the packet is then taken, as :meth:`next_packet` at
        ``at`` would take it. Otherwise None, and nothing changes.

        Every message the port has eligible then waits for its slot's credit. One whose
        result was delivered (before ``cycle``) can start a round trip after it; anything
        else — a result, a dependency or a read delivered from ``cycle`` on — makes a packet
        startable ``round_trip`` + 1 cycles after ``cycle`` at the earliest, later than every
        known credit. So the first known credit decides, unless a message is due by time
        before it (then None: the port wakes for it)."""
        act, fut = self.active[port], self.future[port]
        slots, seqs, result_at = self.slots, self.columns[1], self.result_at
        best, at = None, None
        for i, (_, mid) in enumerate(act):
            pos = self.next_index.get(mid, 0)
            got = result_at.get((port, seqs[self.plan.messages[mid].packets[pos]] - slots))
            if got is not None and (at is None or self.credit_cycle(got) < at):
                best, at = (i, mid, pos), self.credit_cycle(got)
        if best is None or fut and fut[0][0] <= at:
            return None
        return self._take(port, *best), at

    def wake_time(self, port):
        """The next cycle a message of ``port`` becomes eligible by time alone (or None)."""
        fut = self.future[port]
        return fut[0][0] if fut else None

    def credit_cycle(self, cycle):
        """The first cycle the credit of a result delivered at ``cycle`` is usable at the
        switch (it went to the GPU and came back as the next contribution)."""
        return cycle + 1 + self.round_trip

    def finished(self):
        return len(self.done_at) == len(self.plan.messages)

    # -- events ----------------------------------------------------------------------------

    def delivered(self, pid, cycle):
        """A memory packet's last flit left the switch at ``cycle``. Returns the ports whose
        eligibility may have changed."""
        plan = self.plan
        mid = self.columns[4][pid]
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
        """The result of chunk ``seq`` left the switch towards ``port`` at ``cycle``. Returns
        the ports whose eligibility may have changed: the port's credit is usable from
        :meth:`credit_cycle` on."""
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
        resp = Message(mid, request.dst, Kind.MEM_READ_RESP, request.src,
                       cycle + 1 + self.round_trip, (), request.record)
        resp.response_to = request.mid
        cfg = plan.config
        first = plan.packets
        for offset in range(0, request.response_flits, cfg.mtu_flits):
            plan.add_packet(request.dst, request.src, Kind.MEM_READ_RESP,
                            min(cfg.mtu_flits, request.response_flits - offset), mid)
        resp.packets = range(first, plan.packets)
        self._mirror()
        plan.messages.append(resp)
        self.remaining[mid] = len(resp.packets)
        self.total = plan.packets
        heapq.heappush(self.future[resp.src], (resp.issue, mid))
        return [resp.src]

    def _first(self, port, cycle, ahead=False):
        """``(i, mid, pos)`` of the message :meth:`next_packet` at ``cycle`` would take from,
        its place in the port's eligible list and the position of its next packet, or None
        (``ahead``: None as well when the first message waits for its credit)."""
        fut, act = self.future[port], self.active[port]
        while fut and fut[0][0] <= cycle:
            _insort(act, heapq.heappop(fut))
        messages, next_index, seqs = self.plan.messages, self.next_index, self.columns[1]
        for i, (_, mid) in enumerate(act):
            pos = next_index.get(mid, 0)
            s = seqs[messages[mid].packets[pos]]
            if s >= self.slots:
                got = self.result_at.get((port, s - self.slots))
                if got is None or got + self.round_trip >= cycle:
                    if ahead:
                        return None
                    continue
            return i, mid, pos
        return None

    def _take(self, port, i, mid, pos):
        """Start the packet at ``pos`` of message ``mid``, the ``i``-th of ``port``'s eligible
        list; returns its id."""
        packets = self.plan.messages[mid].packets
        self.next_index[mid] = pos + 1
        if pos + 1 == len(packets):
            del self.active[port][i]
        self.started += 1
        return int(packets[pos])

    def _mirror(self):
        plan, have = self.plan, len(self.columns[0])
        for column, array in zip(self.columns, (plan.kind, plan.seq, plan.dst, plan.flits,
                                                plan.msg)):
            column += array[have:].tolist()

    def _done(self, mid, cycle):
        self.done_at[mid] = cycle
        woken = []
        for w in self.waiting.pop(mid, []):
            self.ready[w] = max(self.ready[w], cycle + 1 + self.round_trip)
            self.pending[w] -= 1
            if self.pending[w] == 0:
                src = self.plan.messages[w].src
                heapq.heappush(self.future[src], (self.ready.pop(w), w))
                woken.append(src)
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
