"""Co-simulation components: replay a trace's packets through the exported RTL switch.

Usable in anyone's cocotb test bench:

* :class:`ReplayDriver` — per-port drivers (inject each port's packets as :class:`ClosedLoop`
  releases them, honouring ``tready``), per-port monitors, and the **scoreboard**: every memory
  packet must arrive intact (payload, source, destination, length) at its destination exactly
  once; every reduction result must equal the numpy golden sum (:mod:`sim.reduce_model`) of the
  contributions the driver sent. It holds no simulator handles: :meth:`drive` says what to put
  on each port, :meth:`sample` takes what the simulator shows, so the same object serves any
  simulator.
* :func:`replay_dut` — the cocotb coroutine: reset, job configuration, then the two-phase
  loop (drive just after the rising edge, sample in the read-only phase), one trigger pair per
  clock whatever the port count.

:func:`replay_rtl` runs a replay in a simulator process. By default it uses the Verilog packet
player (:mod:`sim.player`): the flits move in Verilog and Python runs only in cycles after a
packet ended, about three times faster on Verilator; ``player=False`` uses
:class:`ReplayDriver`, which every cycle drives and samples each port from Python — the
reference the player is tested against, and the one to reuse in a bench of your own.

Closed loop: the GPUs' next packets wait on what the switch delivered (ring step k+1 on the
step-k message, a contribution on its slot's previous result, a read response on its request),
through the same :class:`sim.replay.ClosedLoop` the fast model uses, so the two backends' delivery
cycles compare packet by packet."""

from hw.packet import USER_LAYOUT, DType, Kind, decode
from sim.cosim.pins import SwitchPins, configure_replay
from sim.cosim.stimulus import (contribution_user, memory_user, memory_words,
                                random_contribution_words, tdata, user_pid, wrap_seq)
from sim.model.reduce import reduce_words
from sim.replay.config import REPLAY_JOB
from sim.replay.loop import ClosedLoop
from sim.replay.result import ReplayResult

__all__ = ["ReplayDriver", "replay_dut"]


_DTYPES = {"int32": DType.INT32, "fp32": DType.FP32, "bf16": DType.BF16}


class ReplayDriver:
    """Drivers, monitors and scoreboard of a replay (simulator-independent).

    Parameters
    ----------
    plan : sim.replay.Plan
    seed : int
        Seeds the contribution data.
    stall : float
        Probability that an egress holds ``tready`` low for a cycle (0 in replays, so that the
        model and the RTL see the same sinks; the switch tests raise it).
    rng : random.Random, optional
        For ``stall``.
    """

    def __init__(self, plan, seed=1, stall=0.0, rng=None):
        cfg = plan.config
        self.plan, self.cfg = plan, cfg
        self.N, self.L = cfg.ports, cfg.lanes
        self.loop = ClosedLoop(plan)
        self.plan = plan = self.loop.plan   # the loop's copy, which grows read responses
        self.seed, self.stall, self.rng = seed, stall, rng
        self.dtype = _DTYPES[cfg.dtype]
        self.members = [k for k in range(self.N) if plan.members >> k & 1]
        self.current = [None] * self.N       # (pid, beats, position) being presented
        self.presented = [False] * self.N
        self.inject, self.deliver, self.results = {}, {}, {}
        self.ingress_flits = [0] * self.N
        self.egress_flits = [0] * self.N
        self.stall_cycles = [0] * self.N
        self.ready_out = [True] * self.N
        self.rx = [[] for _ in range(self.N)]  # beats of the packet arriving at each egress
        self.outstanding = [{} for _ in range(self.N)]   # wrap_seq(seq) -> seq, per member
        self.contrib = {}                       # seq -> {port: words}
        self.golden = {}                        # seq -> [expected words, ports left]
        self.mismatches = []
        self.cycle = 0
        self.inflight = 0                       # memory packets in, not yet out

    def in_flight(self):
        """Packets or results still inside the switch."""
        return self.inflight + sum(len(o) for o in self.outstanding) > 0 or any(
            c is not None for c in self.current)

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

    # -- stimulus ------------------------------------------------------------------------

    def _beats(self, k, pid):
        plan, L = self.plan, self.L
        kind = Kind(int(plan.kind[pid]))
        flits = int(plan.flits[pid])
        if kind == Kind.REDUCE_CONTRIB:
            seq = int(plan.seq[pid])
            words = random_contribution_words(self.seed, seq, k, flits, L, self.dtype)
            self.contrib.setdefault(seq, {})[k] = words
            self.outstanding[k][wrap_seq(seq)] = seq
            user = contribution_user(job=REPLAY_JOB, dtype=self.dtype,
                                     slot=seq % self.cfg.slots, seq=seq, kind=kind)
            rows = [tdata(words[f]) for f in range(flits)]
            dst = 0
        else:
            user = memory_user(pid, kind)
            rows = [tdata(memory_words(pid, f, L)) for f in range(flits)]
            dst = int(plan.dst[pid])
        return [(rows[f], user, dst, k, int(f == flits - 1)) for f in range(flits)]

    def drive(self):
        """Just after a rising edge: ``(port, beat or None)`` for every ingress whose
        presented flit changes (None: ``tvalid`` low), and the egress ``tready`` values."""
        changes = []
        cycle = self.cycle
        for k in range(self.N):
            cur = self.current[k]
            if cur is None:
                pid = self.loop.next_packet(k, cycle)
                if pid is None:
                    if self.presented[k]:
                        changes.append((k, None))
                        self.presented[k] = False
                    continue
                cur = self.current[k] = [pid, self._beats(k, pid), 0, cycle]
                changes.append((k, cur[1][0]))
                self.presented[k] = True
        if self.stall:
            self.ready_out = [self.rng.random() >= self.stall for _ in range(self.N)]
        return changes

    def sample(self, ingress_ready, egress):
        """In the read-only phase. ``ingress_ready[k]``: ``tready`` of every ingress that is
        presenting a flit; ``egress[d]``: the beat shown on egress d (``None`` if
        ``tvalid`` is low). Returns the ingress changes to apply at once (next flits)."""
        cycle = self.cycle
        changes = []
        for k in range(self.N):
            cur = self.current[k]
            if cur is None:
                continue
            if not ingress_ready[k]:
                self.stall_cycles[k] += 1
                continue
            pid, beats, pos, _ = cur
            if pos == 0:
                self.inject[pid] = cycle
                if self.plan.kind[pid] != Kind.REDUCE_CONTRIB.value:
                    self.inflight += 1
            self.ingress_flits[k] += 1
            pos += 1
            if pos == len(beats):
                self.current[k] = None
                changes.append((k, "end"))
            else:
                cur[2] = pos
                changes.append((k, beats[pos]))
        for d in range(self.N):
            beat = egress[d]
            if beat is None or not self.ready_out[d]:
                continue
            self.egress_flits[d] += 1
            self.rx[d].append(beat)
            if beat[4]:
                self._packet_out(d, self.rx[d], cycle)
                self.rx[d] = []
        self.cycle += 1
        return changes

    # -- scoreboard ----------------------------------------------------------------------

    def _fail(self, text):
        if len(self.mismatches) < 20:
            self.mismatches.append(f"cycle {self.cycle}: {text}")
        else:
            self.mismatches.append(None)

    def _packet_out(self, d, beats, cycle):
        plan, L = self.plan, self.L
        user = decode(USER_LAYOUT, beats[0][1])
        kind = Kind(user["kind"])
        if kind == Kind.REDUCE_RESULT:
            seq = self.outstanding[d].pop(user["seq"], None)
            if seq is None or user["job"] != REPLAY_JOB:
                self._fail(f"egress {d}: unexpected result job {user['job']} seq {user['seq']}")
                return
            if seq not in self.golden:
                contribs = self.contrib.pop(seq)
                want, _ = reduce_words(contribs, self.members, self.dtype)
                self.golden[seq] = [[tdata(row) for row in want], len(self.members)]
            entry = self.golden[seq]
            got = [b[0] for b in beats]
            if got != entry[0] or beats[0][2] != d:
                self._fail(f"egress {d}: result of chunk {seq} differs from the golden sum")
            entry[1] -= 1
            if entry[1] == 0:
                del self.golden[seq]
            self.results[(d, seq)] = cycle
            self.loop.result(d, seq, cycle)
            return
        pid = user_pid(beats[0][1])
        if pid >= plan.packets or Kind(int(plan.kind[pid])) != kind:
            self._fail(f"egress {d}: unknown {kind.name} packet {pid}")
            return
        if pid in self.deliver:
            self._fail(f"egress {d}: packet {pid} delivered twice")
            return
        want_src, want_dst = int(plan.src[pid]), int(plan.dst[pid])
        if d != want_dst or beats[0][2] != want_dst or beats[0][3] != want_src:
            self._fail(f"egress {d}: packet {pid} from {want_src} to {want_dst} arrived "
                       f"as {beats[0][3]}->{beats[0][2]}")
        if len(beats) != int(plan.flits[pid]) or any(
                b[0] != tdata(memory_words(pid, f, L)) for f, b in enumerate(beats)):
            self._fail(f"egress {d}: packet {pid} payload corrupted")
        self.deliver[pid] = cycle
        self.inflight -= 1
        self.loop.delivered(pid, cycle)

    def done(self):
        return self.loop.finished() and all(c is None for c in self.current)

    def result(self, backend, errors, wall_s):
        plan = self.plan
        lost = sum(1 for p in range(plan.packets) if plan.kind[p] != Kind.REDUCE_CONTRIB.value
                   and p not in self.deliver)
        return ReplayResult.collect(
            backend, self.loop, self.inject, self.deliver, self.results,
            egress_flits=self.egress_flits, ingress_flits=self.ingress_flits,
            stall_cycles=self.stall_cycles, errors=errors,
            mismatches=len(self.mismatches) + lost, wall_s=wall_s)


async def replay_dut(dut, driver, max_cycles=10_000_000, watchdog=100_000, progress=None):
    """Run ``driver`` against an exported switch ``dut`` (``innet export switch``) until every
    message is delivered. Raises AssertionError if nothing leaves the switch for ``watchdog``
    cycles while packets are outstanding (a deadlock), or on a scoreboard mismatch."""
    from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

    N = driver.N
    pins = SwitchPins(dut, N)
    pins.idle()
    pins.set_ready([1] * N)
    await configure_replay(dut, driver.cfg, driver.plan.members, driver.dtype)

    quiet = 0
    rising, read_only = RisingEdge(dut.clk), ReadOnly()
    pending_changes = []
    while not driver.done():
        skip = driver.idle_until()
        if skip is not None and skip > driver.cycle + 1:
            # Nothing in flight until the next issue time: let the simulator run on its own.
            await ClockCycles(dut.clk, skip - driver.cycle + 1)
            driver.cycle = skip
        else:
            await rising
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
