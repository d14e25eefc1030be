"""The per-cycle co-simulation: replay a trace's packets through the exported RTL switch,
driving and sampling every port from Python each cycle.

The verification roles of cocotb's ``matrix_multiplier`` example, each small and
simulator-independent (none holds a simulator handle; :func:`replay_dut` binds them to the
pins), connected by plain callbacks:

* :class:`IngressDriver` — what each ingress presents: the packets the closed loop releases,
  flit by flit, honouring ``tready``. It tells the scoreboard each contribution it generates
  and each packet that enters the switch.
* :class:`EgressMonitor` — what each egress shows, assembled into packets (and each egress's
  ``tready``, optionally with random stalls); each whole packet goes to a callback.
* :class:`ReplayScoreboard` — every memory packet must arrive intact (payload, source,
  destination, length) at its destination exactly once; every reduction result must equal the
  numpy golden sum (the reference model, :func:`sim.model.reduce.reduce_words`) of the
  contributions the driver sent.
* :class:`ReplayDriver` — the three wired together with the closed loop: every packet the
  scoreboard recognises is reported to :class:`sim.replay.loop.ClosedLoop`, whose next packets
  wait on it (ring step k+1 on the step-k message, a contribution on its slot's previous
  result, a read response on its request) — the same loop the fast model uses, so the two
  backends' delivery cycles compare packet by packet. :meth:`ReplayDriver.drive` says what to
  put on each port after a rising edge, :meth:`ReplayDriver.sample` takes what the simulator
  shows in the read-only phase.
* :func:`replay_dut` — the cocotb coroutine: reset, job configuration, then the two-phase
  loop, one trigger pair per clock whatever the port count.

:func:`sim.cosim.replay.replay_rtl` runs a replay in a simulator process. By default it uses
the Verilog packet player (:mod:`sim.cosim.player`): the flits move in Verilog and Python runs
only in cycles after a packet ended, about three times faster on Verilator; ``player=False``
uses :class:`ReplayDriver` — the reference the player is tested against, and the one to reuse
in a bench of your own.

A beat is ``(tdata, tuser, tdest, tid, tlast)``, as :class:`sim.cosim.pins.SwitchPins` puts
it on and reads it from the pins.
"""

from hw.packet import USER_LAYOUT, DType, Kind, decode
from sim.cosim.pins import SwitchPins, configure_replay
from sim.cosim.stimulus import (
    contribution_user,
    memory_user,
    memory_words,
    random_contribution_words,
    tdata,
    user_pid,
    wrap_seq,
)
from sim.model.reduce import reduce_words
from sim.replay.config import MAX_REPLAY_CYCLES, REPLAY_JOB, WATCHDOG_CYCLES
from sim.replay.loop import ClosedLoop
from sim.replay.result import ReplayResult

__all__ = ["IngressDriver", "EgressMonitor", "ReplayScoreboard", "ReplayDriver", "replay_dut"]


_DTYPES = {"int32": DType.INT32, "fp32": DType.FP32, "bf16": DType.BF16}
_CONTRIB = Kind.REDUCE_CONTRIB.value


class IngressDriver:
    """What each ingress presents: the packets ``loop`` releases, flit by flit, each flit held
    until the switch takes it.

    Parameters
    ----------
    loop : sim.replay.loop.ClosedLoop
        Which packet each port starts next.
    seed : int
        Seeds the contribution data (:func:`sim.cosim.stimulus.random_contribution_words`).
    dtype : hw.packet.DType
        The contributions' element type.
    on_contribution : callable
        ``on_contribution(port, seq, words)`` when a contribution to chunk ``seq`` is generated,
        before its first flit is presented.
    on_inject : callable
        ``on_inject(pid)`` when a packet's first flit is taken.

    Members
    -------
    inject : dict
        ``{pid: cycle}`` its first flit was taken.
    ingress_flits, stall_cycles : list of int
        Per port: flits taken; cycles a presented flit was not taken.
    """

    def __init__(self, loop, *, seed, dtype, on_contribution, on_inject):
        self.loop = loop
        self.plan = loop.plan
        cfg = self.plan.config
        self.N, self.L, self.slots = cfg.ports, cfg.lanes, cfg.slots
        self.seed, self.dtype = seed, dtype
        self.on_contribution, self.on_inject = on_contribution, on_inject
        self.current = [None] * self.N       # [pid, beats, position] being presented
        self.presented = [False] * self.N
        self.packets = 0                     # ports with a packet in self.current
        self.inject = {}
        self.ingress_flits = [0] * self.N
        self.stall_cycles = [0] * self.N

    def busy(self):
        """A port is presenting a packet."""
        return self.packets > 0

    def _beats(self, k, pid):
        plan, L = self.plan, self.L
        kind = Kind(int(plan.kind[pid]))
        flits = int(plan.flits[pid])
        if kind == Kind.REDUCE_CONTRIB:
            seq = int(plan.seq[pid])
            words = random_contribution_words(self.seed, seq, k, flits, L, self.dtype)
            self.on_contribution(k, seq, words)
            user = contribution_user(job=REPLAY_JOB, dtype=self.dtype, slot=seq % self.slots,
                                     seq=seq, kind=kind)
            rows = [tdata(words[f]) for f in range(flits)]
            dst = 0
        else:
            user = memory_user(pid, kind)
            rows = [tdata(memory_words(pid, f, L)) for f in range(flits)]
            dst = int(plan.dst[pid])
        return [(rows[f], user, dst, k, int(f == flits - 1)) for f in range(flits)]

    def present(self, cycle):
        """Just after the rising edge of ``cycle``: ``(port, beat or None)`` for every ingress
        whose presented flit changes (None: ``tvalid`` low)."""
        changes = []
        for k in range(self.N):
            if self.current[k] is not None:
                continue
            pid = self.loop.next_packet(k, cycle)
            if pid is None:
                if self.presented[k]:
                    changes.append((k, None))
                    self.presented[k] = False
                continue
            beats = self._beats(k, pid)
            self.current[k] = [pid, beats, 0]
            self.packets += 1
            changes.append((k, beats[0]))
            self.presented[k] = True
        return changes

    def accepted(self, ready, cycle):
        """In the read-only phase of ``cycle``: ``ready[k]``, the switch took the flit ingress
        ``k`` presents. Returns the changes to apply at once (``(port, next beat)``, or
        ``(port, "end")`` after a packet's last flit)."""
        changes = []
        for k in range(self.N):
            cur = self.current[k]
            if cur is None:
                continue
            if not ready[k]:
                self.stall_cycles[k] += 1
                continue
            pid, beats, pos = cur
            if pos == 0:
                self.inject[pid] = cycle
                self.on_inject(pid)
            self.ingress_flits[k] += 1
            pos += 1
            if pos == len(beats):
                self.current[k] = None
                self.packets -= 1
                changes.append((k, "end"))
            else:
                cur[2] = pos
                changes.append((k, beats[pos]))
        return changes


class EgressMonitor:
    """What each egress shows, assembled into packets.

    Parameters
    ----------
    ports : int
    on_packet : callable
        ``on_packet(port, beats, cycle)`` with each whole packet, in the cycle its last beat
        was taken.
    stall : float
        Probability that an egress holds ``tready`` low for a cycle (0 in replays, so that the
        model and the RTL see the same sinks; the switch tests raise it).
    rng : random.Random, optional
        Draws the stalls; required if ``stall``.

    Members
    -------
    ready_out : list of bool
        Each egress's ``tready`` this cycle.
    egress_flits : list of int
        Per port: flits taken.
    """

    def __init__(self, ports, on_packet, *, stall=0.0, rng=None):
        if stall and rng is None:
            raise ValueError("Egress stalls need a random generator (rng)")
        self.N = ports
        self.on_packet = on_packet
        self.stall, self.rng = stall, rng
        self.ready_out = [True] * ports
        self.egress_flits = [0] * ports
        self.rx = [[] for _ in range(ports)]   # beats of the packet arriving at each egress

    def draw_ready(self):
        """Just after a rising edge: this cycle's ``tready`` of every egress."""
        if self.stall:
            self.ready_out = [self.rng.random() >= self.stall for _ in range(self.N)]
        return self.ready_out

    def sample(self, egress, cycle):
        """In the read-only phase of ``cycle``: ``egress[d]``, the beat egress d shows
        (``None`` if ``tvalid`` is low)."""
        ready = self.ready_out
        for d in range(self.N):
            beat = egress[d]
            if beat is None or not ready[d]:
                continue
            self.egress_flits[d] += 1
            self.rx[d].append(beat)
            if beat[4]:
                beats, self.rx[d] = self.rx[d], []
                self.on_packet(d, beats, cycle)


class ReplayScoreboard:
    """Checks every packet leaving the switch against what was sent.

    Every memory packet must arrive intact (payload, source, destination, length) at its
    destination exactly once; every reduction result must equal the numpy golden sum
    (:func:`sim.model.reduce.reduce_words`) of the contributions sent, at every member.

    Parameters
    ----------
    plan : sim.replay.plan.Plan
        The closed loop's plan (it grows read responses as requests are delivered).
    members : list of int
        The reduction group.
    dtype : hw.packet.DType

    Members
    -------
    deliver : dict
        ``{pid: cycle}`` each memory packet arrived.
    results : dict
        ``{(port, seq): cycle}`` each result arrived.
    contrib : dict
        ``{seq: {port: words}}`` contributions sent whose result has not yet arrived.
    mismatches : list
        The first 20 failures as text, then one None per further failure.
    """

    def __init__(self, plan, *, members, dtype):
        self.plan = plan
        self.N, self.L = plan.config.ports, plan.config.lanes
        self.members, self.dtype = members, dtype
        self.deliver, self.results = {}, {}
        self.outstanding = [{} for _ in range(self.N)]   # wrap_seq(seq) -> seq, per member
        self.due = 0                            # entries in self.outstanding
        self.contrib = {}                       # seq -> {port: words}
        self.golden = {}                        # seq -> [expected tdata rows, ports left]
        self.mismatches = []
        self.inflight = 0                       # memory packets in, not yet out

    # -- what was sent ---------------------------------------------------------------------

    def expect_contribution(self, port, seq, words):
        """Member ``port`` sends ``words`` to chunk ``seq``: its result is due at ``port``."""
        self.contrib.setdefault(seq, {})[port] = words
        outstanding, key = self.outstanding[port], wrap_seq(seq)
        self.due += key not in outstanding
        outstanding[key] = seq

    def injected(self, pid):
        """Packet ``pid`` entered the switch."""
        if self.plan.kind[pid] != _CONTRIB:
            self.inflight += 1

    def pending(self):
        """Memory packets or results still due."""
        return self.inflight + self.due > 0

    # -- what arrived ----------------------------------------------------------------------

    def _fail(self, cycle, text):
        if len(self.mismatches) < 20:
            self.mismatches.append(f"cycle {cycle}: {text}")
        else:
            self.mismatches.append(None)

    def check(self, d, beats, cycle):
        """Packet ``beats`` arrived at egress ``d`` in ``cycle``. Returns what it is —
        ``("result", seq)`` or ``("memory", pid)``, recorded as arrived even if corrupted — or
        None for a packet nobody sent (a failure)."""
        plan, L = self.plan, self.L
        user_bits = beats[0][1]
        user = decode(USER_LAYOUT, user_bits)
        kind = Kind(user["kind"])
        if kind == Kind.REDUCE_RESULT:
            seq = self.outstanding[d].pop(user["seq"], None)
            self.due -= seq is not None
            if seq is None or user["job"] != REPLAY_JOB:
                self._fail(cycle, f"egress {d}: unexpected result job {user['job']} "
                                  f"seq {user['seq']}")
                return None
            if seq not in self.golden:
                contribs = self.contrib.pop(seq)
                want, _ = reduce_words(contribs, self.members, self.dtype)
                self.golden[seq] = [[tdata(row) for row in want], len(self.members)]
            entry = self.golden[seq]
            got = [b[0] for b in beats]
            if got != entry[0] or beats[0][2] != d:
                self._fail(cycle, f"egress {d}: result of chunk {seq} differs from the golden "
                                  f"sum")
            entry[1] -= 1
            if entry[1] == 0:
                del self.golden[seq]
            self.results[(d, seq)] = cycle
            return "result", seq
        pid = user_pid(user_bits)
        if pid >= plan.packets or Kind(int(plan.kind[pid])) != kind:
            self._fail(cycle, f"egress {d}: unknown {kind.name} packet {pid}")
            return None
        if pid in self.deliver:
            self._fail(cycle, f"egress {d}: packet {pid} delivered twice")
            return None
        want_src, want_dst = int(plan.src[pid]), int(plan.dst[pid])
        if d != want_dst or beats[0][2] != want_dst or beats[0][3] != want_src:
            self._fail(cycle, f"egress {d}: packet {pid} from {want_src} to {want_dst} "
                              f"arrived as {beats[0][3]}->{beats[0][2]}")
        if len(beats) != int(plan.flits[pid]) or any(
                b[0] != tdata(memory_words(pid, f, L)) for f, b in enumerate(beats)):
            self._fail(cycle, f"egress {d}: packet {pid} payload corrupted")
        self.deliver[pid] = cycle
        self.inflight -= 1
        return "memory", pid

    def lost(self):
        """Memory packets of the plan that never arrived."""
        plan = self.plan
        return sum(1 for p in range(plan.packets) if plan.kind[p] != _CONTRIB
                   and p not in self.deliver)


class ReplayDriver:
    """A per-cycle replay of ``plan``: :class:`IngressDriver`, :class:`EgressMonitor` and
    :class:`ReplayScoreboard` around one :class:`sim.replay.loop.ClosedLoop`
    (simulator-independent).

    Parameters
    ----------
    plan : sim.replay.plan.Plan
    seed : int
        Seeds the contribution data.
    stall : float
        Probability that an egress holds ``tready`` low for a cycle (0 in replays, so that the
        model and the RTL see the same sinks; the switch tests raise it).
    rng : random.Random, optional
        For ``stall``.

    Members
    -------
    ingress : IngressDriver
    egress : EgressMonitor
    scoreboard : ReplayScoreboard
    loop : sim.replay.loop.ClosedLoop
    cycle : int
        The cycle :meth:`drive` and :meth:`sample` are in.
    period_ns, cycle0_ns : int, float or None
        The clock period; the simulation time of the clock edge before cycle 0's (set by
        :func:`replay_dut`).
    """

    def __init__(self, plan, seed=1, stall=0.0, rng=None):
        cfg = plan.config
        self.cfg = cfg
        self.N, self.L = cfg.ports, cfg.lanes
        self.loop = ClosedLoop(plan)
        self.plan = plan = self.loop.plan   # the loop's copy, which grows read responses
        self.seed, self.stall = seed, stall
        self.dtype = _DTYPES[cfg.dtype]
        self.members = [k for k in range(self.N) if plan.members >> k & 1]
        self.scoreboard = ReplayScoreboard(plan, members=self.members, dtype=self.dtype)
        self.ingress = IngressDriver(self.loop, seed=seed, dtype=self.dtype,
                                     on_contribution=self.scoreboard.expect_contribution,
                                     on_inject=self.scoreboard.injected)
        self.egress = EgressMonitor(self.N, self._arrived, stall=stall, rng=rng)
        self.cycle = 0
        self.period_ns = 10       # the clock configure_replay starts
        self.cycle0_ns = None     # set by replay_dut

    def _arrived(self, d, beats, cycle):
        what = self.scoreboard.check(d, beats, cycle)
        if what is None:
            return
        kind, key = what
        if kind == "result":
            self.loop.result(d, key, cycle)
        else:
            self.loop.delivered(key, cycle)

    # -- the roles' state, under the names the benches read --------------------------------

    @property
    def ready_out(self):
        return self.egress.ready_out

    @property
    def mismatches(self):
        return self.scoreboard.mismatches

    @property
    def contrib(self):
        return self.scoreboard.contrib

    @property
    def results(self):
        return self.scoreboard.results

    @property
    def deliver(self):
        return self.scoreboard.deliver

    @property
    def inject(self):
        return self.ingress.inject

    # -- the cycle -------------------------------------------------------------------------

    def in_flight(self):
        """Packets or results still inside the switch."""
        return self.scoreboard.pending() or self.ingress.busy()

    def idle_until(self):
        """With nothing in flight, the first cycle a port has something to send (None: now,
        or never)."""
        if self.in_flight():
            return None
        wakes = [self.loop.wake_time(k) for k in range(self.N)]
        wakes = [w for w in wakes if w is not None]
        if not wakes or any(self.loop.active[k] for k in range(self.N)):
            return None
        return min(wakes)

    def drive(self):
        """Just after a rising edge: ``(port, beat or None)`` for every ingress whose
        presented flit changes (None: ``tvalid`` low); :attr:`ready_out` holds the egress
        ``tready`` values."""
        changes = self.ingress.present(self.cycle)
        if self.stall:
            self.egress.draw_ready()
        return changes

    def sample(self, ingress_ready, egress):
        """In the read-only phase. ``ingress_ready[k]``: ``tready`` of every ingress that is
        presenting a flit; ``egress[d]``: the beat shown on egress d (``None`` if
        ``tvalid`` is low). Returns the ingress changes to apply at once (next flits)."""
        cycle = self.cycle
        changes = self.ingress.accepted(ingress_ready, cycle)
        self.egress.sample(egress, cycle)
        self.cycle = cycle + 1
        return changes

    def done(self):
        return self.loop.finished() and not self.ingress.busy()

    def result(self, backend, errors, wall_s):
        ingress, egress = self.ingress, self.egress
        return ReplayResult.collect(
            backend, self.loop, ingress.inject, self.scoreboard.deliver,
            self.scoreboard.results, egress_flits=egress.egress_flits,
            ingress_flits=ingress.ingress_flits, stall_cycles=ingress.stall_cycles,
            errors=errors, mismatches=len(self.mismatches) + self.scoreboard.lost(),
            wall_s=wall_s)


async def replay_dut(dut, driver, max_cycles=MAX_REPLAY_CYCLES, watchdog=WATCHDOG_CYCLES,
                     progress=None, configure=True):
    """Run ``driver`` against an exported switch ``dut`` (``innet export switch``) until every
    message is delivered. Raises AssertionError if nothing leaves the switch for ``watchdog``
    cycles while packets are outstanding (a deadlock), or on a scoreboard mismatch.
    ``configure=False``: the switch is running and configured already (the clock started,
    the job written, as between the phases of :mod:`sim.cosim.tb_elastic`).

    Cycle 0 is sampled at the clock edge after the configuration write's, as the Verilog
    player's is (the reduction unit's judge turn counts from reset, so the fast model's
    :data:`sim.model.switch.JUDGE_PHASE` holds for both drivers). ``driver.cycle0_ns`` is set
    to the simulation time of the edge before cycle 0's (a later phase's judge phase follows
    from it)."""
    from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
    from cocotb.utils import get_sim_time

    N = driver.N
    pins = SwitchPins(dut, N)
    pins.idle()
    pins.set_ready([1] * N)
    if configure:
        await configure_replay(dut, driver.cfg, driver.plan.members, driver.dtype)

    quiet = 0
    rising, read_only = RisingEdge(dut.clk), ReadOnly()
    pending_changes = []
    at_edge = configure   # configure_replay returned just after its write's clock edge
    first = True
    while not driver.done():
        skip = driver.idle_until()
        if skip is not None and skip > driver.cycle + 1:
            # Nothing in flight until the next issue time: let the simulator run on its own.
            await ClockCycles(dut.clk, skip - driver.cycle + 1 - at_edge)
            driver.cycle = skip
        elif not at_edge:
            await rising
        at_edge = False
        if first:
            driver.cycle0_ns = get_sim_time("ns") - driver.cycle * driver.period_ns
            first = False
        pins.apply(pending_changes)
        pins.apply(driver.drive())
        if driver.stall:
            pins.set_ready(driver.ready_out)
        await read_only
        ready = pins.accepted()
        egress = pins.egress()
        pending_changes = driver.sample(ready, egress)
        moved = any(e is not None for e in egress) or any(ready)
        waiting = any(w is not None and w > driver.cycle
                      for w in map(driver.loop.wake_time, range(N)))
        quiet = 0 if moved or waiting or not driver.in_flight() else quiet + 1
        if quiet > watchdog:
            raise AssertionError(f"watchdog: no flit left the switch for {watchdog} cycles "
                                 f"at cycle {driver.cycle} with packets outstanding")
        if driver.cycle > max_cycles:
            raise AssertionError(f"replay did not finish in {max_cycles} cycles")
        if progress and driver.cycle % 20000 == 0:
            progress(driver.cycle, driver.loop.started, driver.loop.total)
        if driver.mismatches:
            raise AssertionError("; ".join(m for m in driver.mismatches if m))
    await rising
