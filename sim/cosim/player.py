"""Co-simulation with the Verilog packet player (:mod:`sim.cosim.player_verilog`): Python off the
per-cycle path.

The player harness moves every flit in Verilog; Python runs only in the cycles after an event
the closed loop needs (a port went idle, a result or a message's last packet was delivered) or
at a cycle it asked for, where it does what only the GPU side can: the closed loop
(:class:`sim.replay.loop.ClosedLoop`, the same object the fast model and the per-cycle
:class:`sim.cosim.driver.ReplayDriver` use — so all three replays compare packet by packet), and
one descriptor write for each port given a packet (its two slots at once: the next packet is
queued while the port still plays one when the loop can already say which it will be). The
harness logs every packet it injected or delivered; after the run :meth:`Player.check`
scoreboards that log: every memory packet intact (payload flag from the Verilog check, header
constant over its flits, source, destination, length) exactly once, every reduction result's
digest equal to the digest (:func:`sim.cosim.stimulus.digest`) of the numpy golden sum
(:func:`sim.model.reduce.reduce_words`) of the contributions the players generated
(:func:`sim.cosim.stimulus.hashed_contribution_words`, the same hash the Verilog computes).
"""

import time

from hw.packet import USER_LAYOUT, DType, Kind
from sim.cosim.player_verilog import DESC_FIELDS, tell_depth
from sim.cosim.stimulus import (
    contribution_user,
    digest,
    hashed_contribution_words,
    memory_user,
    user_pid,
    wrap_seq,
)
from sim.model.reduce import reduce_words
from sim.replay.config import MAX_REPLAY_CYCLES, REPLAY_JOB, WATCHDOG_CYCLES
from sim.replay.loop import ClosedLoop
from sim.replay.result import ReplayResult

__all__ = ["Player"]

_M32 = 0xFFFFFFFF
_DTYPES = {"int32": DType.INT32, "fp32": DType.FP32, "bf16": DType.BF16}
_CONTRIB, _RESULT = Kind.REDUCE_CONTRIB.value, Kind.REDUCE_RESULT.value   # (enum reads are slow)
_USER = {name: (f.offset, (1 << f.width) - 1) for name, f in USER_LAYOUT}
_DESC = {}
_at = 0
for _name, _width in DESC_FIELDS:
    _DESC[_name] = _at
    _at += _width
_DESC["user"] = _at
_DESC["width"] = _at + USER_LAYOUT.size     # one slot's; the harness takes two
_DESC["mask"] = (1 << _DESC["width"]) - 1


def _bits(mask):
    k = 0
    while mask:
        if mask & 1:
            yield k
        mask >>= 1
        k += 1


class Player:
    """One replay of ``plan`` through the player harness: the closed loop online, the
    scoreboard on the harness's log afterwards.

    Parameters
    ----------
    plan : sim.replay.plan.Plan
    seed : int
        Seeds the contribution data and the egress stall pattern.
    stall : float
        Probability that an egress holds ``tready`` low in a cycle (0: never; the replay then
        compares with the fast model).
    """

    def __init__(self, plan, seed=1, stall=0.0):
        self.loop = ClosedLoop(plan)
        self.plan = self.loop.plan        # the loop's copy, which grows read responses
        self.cfg = cfg = plan.config
        self.N = cfg.ports
        self.seed, self.stall = seed, stall
        self.dtype = _DTYPES[cfg.dtype]
        self.members = [k for k in range(self.N) if plan.members >> k & 1]
        # Each port's two descriptor slots (sim.cosim.player_verilog): the tags last written
        # (bit j: slot j), the slot to write next, both slots' value, and whether any holds
        # a packet not yet played out.
        self.tag = [0] * self.N
        self.slot = [0] * self.N
        self.desc = [0] * self.N
        self.schedule = [[] for _ in range(self.N)]   # (cycle given, descriptor), per port
        self.busy = [False] * self.N
        # 1: the port's last look ahead found nothing certain; 2: it is free and found nothing
        # to start. Either holds until the port's messages change (a delivery or result that
        # concerns it, a message due by time, a credit usable): asking again finds the same.
        self.quiet = [0] * self.N
        #: Ports whose packet's end does not wake Python (the harness's ``hush``, bit k): the
        #: port would find nothing to start then (:meth:`_give`). Asked again whenever the
        #: port is looked at; the times a credit or a message could change it are woken for.
        self.hushed = 0
        self.woken = set()    # ports whose messages changed since they were last looked at
        self.issued = [[] for _ in range(self.N)]   # pids in the order each port started them
        self.outstanding = [{} for _ in range(self.N)]   # wrap_seq(seq) -> seq, per member
        self.deliver, self.results = {}, {}
        self.unknown = set()                       # (cycle, egress) of unknown packets seen
        self.chunk_user = {}                       # seq -> its contributions' tuser
        self.inflight = 0
        self.credits = []    # (cycle a returned slot credit becomes usable, its port)
        self.mismatches = []
        self.cycle = 0
        self.wall_s = 0.0
        #: Python's wake-ups in :meth:`play`, by what woke it: a delivery Python must see (a
        #: result or a message's last packet), a port that went idle, or the time it asked
        #: for (a credit usable, a message due, the watchdog's limit).
        self.wakeups = {"delivery": 0, "idle": 0, "time": 0}

    # -- online: the closed loop ---------------------------------------------------------

    def _user(self, pid):
        kind, seq = self.loop.columns[0][pid], self.loop.columns[1][pid]
        if kind == _CONTRIB:
            user = self.chunk_user.get(seq)
            if user is None:   # every member's contribution to a chunk carries the same
                user = self.chunk_user[seq] = contribution_user(
                    job=REPLAY_JOB, dtype=self.dtype, slot=seq % self.cfg.slots, seq=seq)
            return seq, 1, user
        return pid, 0, memory_user(pid, kind)

    def _start(self, k, cycle, ahead=False):
        """Give port ``k`` its next packet, to start at ``cycle`` or (``ahead``) when the
        packet it plays now has ended, if that one is certain already
        (:meth:`sim.replay.loop.ClosedLoop.next_packet`); or, when the port has nothing to
        start at ``cycle``, at the later cycle it will start one, if both are certain already
        (:meth:`sim.replay.loop.ClosedLoop.next_start`: a contribution waiting for a credit
        that is on its way), so Python need not wake then. Returns whether it gave one."""
        pid, at = self.loop.next_packet(k, cycle, ahead), 0
        if pid is None and not ahead:
            pid, at = self.loop.next_start(k, cycle) or (None, 0)
        if pid is None:
            self.quiet[k] = 1 if ahead else 2
            return False
        self.quiet[k] = 0
        key, contrib, user = self._user(pid)
        if contrib:
            self.outstanding[k][wrap_seq(key)] = key
        self.inflight += 1
        j = self.slot[k]
        self.slot[k] ^= 1
        self.tag[k] ^= 1 << j
        self.busy[k] = True
        self.issued[k].append(pid)
        _, _, dsts, flits, msgs = self.loop.columns
        dst = 0 if contrib else dsts[pid]
        # Python sees a memory packet's delivery online only if it ends its message: what the
        # closed loop waits for. The ones before it are in the log (see check).
        tell = not contrib and pid == self.plan.messages[msgs[pid]].packets[-1]
        value = (self.tag[k] >> j & 1 | contrib << _DESC["contrib"] | tell << _DESC["tell"]
                 | (flits[pid] - 1) << _DESC["last"] | dst << _DESC["dst"]
                 | key << _DESC["key"] | at << _DESC["at"] | user << _DESC["user"])
        self.schedule[k].append((cycle, value))
        shift = _DESC["width"] * j
        self.desc[k] = value << shift | self.desc[k] & ~(_DESC["mask"] << shift)
        return True

    def _give(self, k, cycle, desc, pending):
        """Port ``k`` has ``pending`` descriptors not played out (0, 1 or 2): start one if it
        is free, and queue the one after when it is certain. Returns whether the port's end
        of play need not wake Python (:attr:`hushed`)."""
        quiet, given = self.quiet[k], pending
        if pending == 0 and quiet != 2:
            pending = self._start(k, cycle)
            quiet = self.quiet[k]
        if pending == 1 and not quiet:
            pending += self._start(k, cycle, ahead=True)
        if pending != given:   # one write for both slots
            desc[k].value = self.desc[k]
        # Playing its last packet given, with nothing it could start now even if it were
        # free: when that packet ends there is nothing to do until something changes, and
        # each such change wakes Python by itself (a delivery; a credit or a due message, at
        # the time asked for, below).
        return pending == 1 and not self.loop.can_start(k, cycle)

    def _ended(self, d, user, cycle):
        kind = user >> _USER["kind"][0] & _USER["kind"][1]
        seq16 = user >> _USER["seq"][0] & _USER["seq"][1]
        self.inflight -= 1
        if kind == _RESULT:
            seq = self.outstanding[d].pop(seq16, None)
            if seq is None:
                self._fail(f"cycle {cycle}: egress {d}: unexpected result seq {seq16}")
                return
            self.results[(d, seq)] = cycle
            self._wake_ports(self.loop.result(d, seq, cycle))
            # The credit reaches the GPU and its next contribution the switch a link round
            # trip later: a cycle Python must wake at even if no packet ends then.
            if self.loop.round_trip:
                self.credits.append((self.loop.credit_cycle(cycle), d))
            return
        pid = user_pid(user)
        plan = self.plan
        kinds, msgs = self.loop.columns[0], self.loop.columns[4]
        if pid >= len(kinds) or kinds[pid] != kind:
            self._fail(f"cycle {cycle}: egress {d}: unknown {Kind(kind).name} packet {pid}")
            self.unknown.add((cycle, d))
            return
        packets = plan.messages[msgs[pid]].packets
        if pid != packets[-1]:
            self._fail(f"cycle {cycle}: egress {d}: packet {pid} told, not its message's last")
            return
        if pid in self.deliver:
            self._fail(f"cycle {cycle}: egress {d}: packet {pid} delivered twice")
            return
        self.deliver[pid] = cycle
        # The message's earlier packets left the same ingress for the same egress before it,
        # so they were delivered before it (check() confirms it from the log).
        for earlier in packets[:-1]:
            self.loop.delivered(earlier, cycle)
        self.inflight -= len(packets) - 1
        self._wake_ports(self.loop.delivered(pid, cycle))

    def _check_tells(self, dut):
        if int(dut.tell_lost.value):
            raise AssertionError(f"a tell queue of the harness overflowed (more than "
                                 f"{tell_depth(self.cfg.chunk_flits)} memory packets in "
                                 f"flight between two ports)")

    def _wake_ports(self, ports):
        for k in ports:
            self.quiet[k] = 0
            self.woken.add(k)

    def _fail(self, text):
        self.mismatches.append(text)

    def done(self):
        return self.loop.finished() and not any(self.busy)

    async def setup(self, dut):
        """The harness's pins before a run (stopped, this replay's seed, element type and
        egress stalls, no descriptor), then reset and the job's configuration
        (:func:`sim.cosim.pins.configure_replay`). Returns the descriptor inputs' handles."""
        from sim.cosim.pins import configure_replay

        dut.run.value = 0
        dut.flush.value = 0
        dut.seed.value = self.seed & _M32
        dut.dtype.value = self.dtype.value
        dut.stall_threshold.value = min(0xFFFF, int(round(self.stall * 65536)))
        dut.wake_at.value = _M32
        dut.hush.value = 0
        desc = [getattr(dut, f"desc{k}") for k in range(self.N)]
        for h in desc:
            h.value = 0
        await configure_replay(dut, self.cfg, self.plan.members, self.dtype)
        return desc

    async def play(self, dut, max_cycles=MAX_REPLAY_CYCLES, watchdog=WATCHDOG_CYCLES,
                   progress=None):
        """Run the replay on a player harness ``dut`` (reset and job configuration first, as
        :func:`sim.cosim.pins.configure_replay` does). Raises AssertionError on a deadlock
        (no packet ended for ``watchdog`` cycles with packets outstanding), a plan that can
        never finish, or an online scoreboard mismatch."""
        from cocotb.triggers import FallingEdge, RisingEdge

        N = self.N
        desc = await self.setup(dut)
        ev, ev_user, wake = dut.ev, dut.ev_user, dut.wake_at
        mask = (1 << N) - 1
        uw = USER_LAYOUT.size
        umask = (1 << uw) - 1
        # `wake_n` falls with the clock in the cycles after an event (or at `wake_at`) and
        # in no other: one trigger, one resumption a wake-up. (Waiting for `attn` to rise
        # and then for the falling edge took two, and, since `attn` may stay high into the
        # next cycle, a look at every cycle after an event too: a third of the wake-ups.)
        falling, waking = FallingEdge(dut.clk), FallingEdge(dut.wake_n)
        began = time.perf_counter()
        await falling
        for k in range(N):
            self.hushed |= self._give(k, 0, desc, 0) << k
        dut.hush.value = self.hushed
        dut.run.value = 1
        cycle, progress_at, last_event, woke_at = 0, 20_000, 0, _M32
        seen, both = 0, (1 << 2 * N) - 1     # the harness's `done` bits, as last looked at
        while not self.done():
            # The next cycle anything can change by time alone for a port that is idle or whose
            # end of play is hushed (a busy port's end wakes Python: it looks then).
            hushed = self.hushed
            wakes = [self.loop.wake_time(k) for k in range(N)
                     if not self.busy[k] or hushed >> k & 1]
            self.credits = [c for c in self.credits if c[0] > cycle]
            wakes = [w for w in wakes if w is not None and w > cycle]
            wakes += [c for c, d in self.credits if not self.busy[d] or hushed >> d & 1]
            limits = [max_cycles + 1]
            if any(self.busy) or self.inflight:   # the watchdog counts only with work out
                limits.append(last_event + watchdog + 1)
            target = max(cycle, min(wakes + limits) - 1)
            # Rewritten only when it must come earlier or has passed: a later one (the
            # watchdog's limit moves with every event) costs one spare wake-up, not a write
            # per wake-up.
            if target < woke_at or woke_at < cycle:
                wake.value = woke_at = target
            if not any(self.busy) and not self.inflight and not wakes:
                raise AssertionError(f"cycle {cycle}: the plan cannot go on: nothing in flight "
                                     f"and no message will become ready")
            await waking
            value = int(ev.value)
            ended_in, ended_out = value & mask, value >> N & mask
            done = value >> 2 * N
            c = value >> 4 * N & _M32
            self.wakeups["delivery" if ended_out else "idle" if ended_in else "time"] += 1
            if ended_out:
                users = int(ev_user.value)
                for d in _bits(ended_out):
                    self._ended(d, users >> uw * d & umask, c)
            if ended_in or ended_out:
                last_event = c
            cycle = c + 1
            # Look only at the ports with something new: a packet played out (its slot's
            # `done` flipped), or their messages changed (a delivery, result, credit or due
            # time). Any other port is playing two packets or has nothing certain to start.
            visit = self.woken
            for usable, k in self.credits:
                if usable <= cycle:
                    visit.add(k)
            for k in range(N):
                if self.quiet[k]:   # a message of k's due by time now
                    due = self.loop.wake_time(k)
                    if due is not None and due <= cycle:
                        visit.add(k)
            flips, seen = (done ^ seen) & both, done & both
            while flips:
                low = flips & -flips
                visit.add((low.bit_length() - 1) >> 1)
                flips ^= low
            started = self.loop.started
            for k in visit:
                self.quiet[k] = 0
                # the slots whose tag differs from the harness's `done` still hold a packet
                waiting = (self.tag[k] ^ done >> 2 * k) & 3
                pending = (waiting & 1) + (waiting >> 1)
                self.busy[k] = pending > 0
                bit = 1 << k
                if pending < 2 and self._give(k, cycle, desc, pending):
                    hushed |= bit
                else:
                    hushed &= ~bit
            visit.clear()
            if hushed != self.hushed:
                dut.hush.value = self.hushed = hushed
            if self.loop.started != started:
                last_event = cycle     # a packet started: progress, for the watchdog too
            if self.mismatches:
                raise AssertionError("; ".join(self.mismatches[:5]))
            if cycle - last_event > watchdog and (any(self.busy) or self.inflight):
                self._check_tells(dut)   # (a lost tell bit stalls the loop: say so first)
                raise AssertionError(f"watchdog: no packet ended for {watchdog} cycles at cycle "
                                     f"{cycle} with packets outstanding")
            if cycle > max_cycles:
                raise AssertionError(f"replay did not finish in {max_cycles} cycles")
            if progress and cycle >= progress_at:
                progress_at += 20_000
                progress(cycle, self.loop.started, self.loop.total)
        self._check_tells(dut)
        dut.flush.value = 1
        await RisingEdge(dut.clk)
        await falling
        dut.flush.value = 0
        self.cycle = cycle
        self.wall_s = time.perf_counter() - began

    # -- afterwards: the scoreboard ------------------------------------------------------

    def _goldens(self, chunk_flits):
        """``{seq: digest}`` of the numpy golden sum of every chunk with a result, the chunks
        of one length in one numpy pass (a call per chunk and member was most of the
        scoreboard's time)."""
        by_length = {}
        for seq in {s for _, s in self.results}:
            by_length.setdefault(chunk_flits[seq], []).append(seq)
        golden = {}
        for flits, seqs in by_length.items():
            contribs = {k: hashed_contribution_words(self.seed, seqs, k, flits, self.cfg.lanes,
                                                     self.dtype)
                        for k in self.members}
            sums, _ = reduce_words(contribs, self.members, self.dtype)
            golden.update(zip(seqs, map(digest, sums)))
        return golden

    def check(self, log_text):
        """Scoreboard the harness's log; returns the injection cycles ``{pid: cycle}`` and
        records every mismatch in :attr:`mismatches`."""
        plan = self.plan
        inject = {}
        started = [iter(p) for p in self.issued]
        chunk_flits = {int(plan.seq[p]): int(plan.flits[p]) for p in range(plan.packets)
                       if plan.seq[p] >= 0}
        golden = self._goldens(chunk_flits)
        seen, logged = set(), set()
        by_arrival = {(port, wrap_seq(s), c): s for (port, s), c in self.results.items()}
        for line in log_text.splitlines():
            f = line.split()
            if f[0] == "i":
                pid = next(started[int(f[2])], None)
                if pid is None:
                    self._fail(f"ingress {f[2]}: a packet started that Python never gave")
                    continue
                inject[pid] = int(f[1])
                continue
            cycle, d, user = int(f[1]), int(f[2]), int(f[3], 16)
            src, dest, flits, pay_ok, hdr_ok, dig = (int(f[4]), int(f[5]), int(f[6]),
                                                     f[7] == "1", f[8] == "1", int(f[9], 16))
            kind = user >> _USER["kind"][0] & _USER["kind"][1]
            seq16 = user >> _USER["seq"][0] & _USER["seq"][1]
            where = f"cycle {cycle}: egress {d}"
            if not hdr_ok:
                self._fail(f"{where}: the header changed within a packet")
            if kind == _RESULT:
                seq = by_arrival.get((d, seq16, cycle))
                if seq is None or (d, seq) in seen:
                    self._fail(f"{where}: result seq {seq16} not seen online")
                    continue
                seen.add((d, seq))
                job = user >> _USER["job"][0] & _USER["job"][1]
                if job != REPLAY_JOB or dest != d:
                    self._fail(f"{where}: result of chunk {seq} for job {job} to {dest}")
                if flits != chunk_flits[seq] or dig != golden[seq]:
                    self._fail(f"{where}: result of chunk {seq} differs from the golden sum")
                continue
            pid = user_pid(user)
            if pid >= plan.packets or int(plan.kind[pid]) != kind:
                if (cycle, d) not in self.unknown:   # (reported online if it was told)
                    self._fail(f"{where}: unknown {Kind(kind).name} packet {pid}")
                continue
            if pid in logged:
                self._fail(f"{where}: packet {pid} delivered twice")
                continue
            logged.add(pid)
            last = plan.messages[int(plan.msg[pid])].packets[-1]
            if pid != last:   # not told: its delivery is known from here only
                if pid in self.deliver:
                    self._fail(f"{where}: packet {pid} seen online but not its message's last")
                self.deliver[pid] = cycle
                if self.deliver.get(last, cycle + 1) <= cycle:
                    self._fail(f"{where}: packet {pid} delivered after its message's last")
            elif self.deliver.get(pid) != cycle:
                self._fail(f"{where}: packet {pid} not seen online at this cycle")
            want_src, want_dst = int(plan.src[pid]), int(plan.dst[pid])
            if d != want_dst or dest != want_dst or src != want_src:
                self._fail(f"{where}: packet {pid} from {want_src} to {want_dst} arrived as "
                           f"{src}->{dest}")
            if flits != int(plan.flits[pid]) or not pay_ok:
                self._fail(f"{where}: packet {pid} payload corrupted")
        for k, rest in enumerate(started):
            if next(rest, None) is not None:
                self._fail(f"ingress {k}: packets given but never started")
        lost = sum(1 for p in range(plan.packets) if plan.kind[p] != _CONTRIB
                   and p not in self.deliver)
        if lost:
            self._fail(f"{lost} memory packets never delivered")
        unlogged = len(self.deliver.keys() - logged)
        if unlogged:
            self._fail(f"{unlogged} packets seen online missing from the log")
        if len(seen) != len(self.results):
            self._fail(f"{len(self.results) - len(seen)} results missing from the log")
        return inject

    def result(self, inject, counters, errors, wall_s):
        """The :class:`sim.replay.result.ReplayResult` of this replay (``counters``: the harness's
        per-port flit and stall counts)."""
        return ReplayResult.collect(
            "rtl", self.loop, inject, self.deliver, self.results,
            egress_flits=counters["egress_flits"], ingress_flits=counters["ingress_flits"],
            stall_cycles=counters["stall_cycles"], errors=errors,
            mismatches=len(self.mismatches), wall_s=wall_s)
