"""``innet bench equiv``: the switch of this tree against another revision's, in lock-step.

A change meant to move logic without changing a cycle (a decision made on the way into a FIFO,
a register computed a cycle ahead) is only that if every output agrees in every cycle. This
benchmark elaborates this tree's :class:`hw.switch.Switch` and a reference one — ``hw/`` taken
from a git revision, or from a directory — side by side in Amaranth's simulator, drives both
with the same random traffic, and compares, cycle by cycle, every ``ready`` the switch gives
its senders, every flit it presents, and every counter and flag.

The traffic is a mix meant to reach every path: contributions of two tenants (one owning half
the slot pool, one the other half with one port fewer), with wrong lengths, duplicates, unknown
jobs, out-of-range and foreign slots and element types mixed in; memory packets to every port
including the sender's own and one beyond the switch; kinds the switch drops; packets whose
sender drops ``last`` (truncations); job-table writes and counter clears while traffic flows;
and egresses that accept at a random rate of their own. The reference's ``hw/`` is imported as
a package of its own (``hw/`` imports nothing outside itself), so the two switches share
nothing but the flit format this tree defines.
"""

import importlib
import importlib.util
import io
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from amaranth.hdl import Module, Value
from amaranth.sim import Simulator

import hw
from hw.packet import DType, Header, Kind, pack_flit, unpack_flit

__all__ = ["REPO_ROOT", "ReferenceUnusable", "bench_equiv", "hw_this", "load_reference",
           "lockstep"]

#: The checkout this tree's ``hw`` and ``sim`` live in.
REPO_ROOT = Path(__file__).resolve().parents[2]

_MEMORY_KINDS = (Kind.MEM_WRITE, Kind.MEM_READ_REQ, Kind.MEM_READ_RESP)
_DROPPED_KINDS = (Kind.NULLIFIED, Kind.CONFIG, Kind.REDUCE_RESULT)


class ReferenceUnusable(Exception):
    """The reference cannot be loaded (unknown revision, no ``hw/``, a different API)."""


def _import_package(directory, name):
    """Import the package in ``directory`` under the top-level name ``name``."""
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return package


def _import_hw(directory, name):
    """An ``hw`` package from ``directory``, named ``name``, with every module the lock-step
    uses imported now (while its files exist: a revision's are in a temporary directory)."""
    package = _import_package(directory, name)
    for module in ("spec", "packet", "switch"):
        importlib.import_module(f"{name}.{module}")
    return package


def _git(*argv, repo):
    try:
        return subprocess.run(["git", "-C", str(repo), *argv], capture_output=True,
                              check=False)
    except FileNotFoundError:
        raise ReferenceUnusable("--against REV needs git, which is not installed (or give a "
                                "directory holding hw/)") from None


def load_reference(against, repo=REPO_ROOT):
    """The reference ``hw`` package and a label for it. ``against`` is a directory holding
    ``hw/`` (or being it), or a git revision of ``repo``.

    Raises
    ------
    ReferenceUnusable
        With a one-line reason when neither works."""
    if not str(against).strip():
        raise ReferenceUnusable("--against is empty: give a git revision or a directory")
    path = Path(against)
    for candidate in (path / "hw", path):
        if (candidate / "__init__.py").is_file() and (candidate / "switch.py").is_file():
            name = f"_innet_ref_hw_{abs(hash(str(candidate.resolve()))):x}"
            return _import_hw(candidate.resolve(), name), str(candidate)
    rev = _git("rev-parse", "--verify", "--quiet", f"{against}^{{commit}}", repo=repo)
    if rev.returncode != 0:
        raise ReferenceUnusable(f"--against {against!r} is neither a directory holding hw/ "
                                f"nor a git revision of {repo}")
    sha = rev.stdout.decode().strip()
    archive = _git("archive", sha, "hw", repo=repo)
    if archive.returncode != 0:
        raise ReferenceUnusable(f"revision {sha[:12]} has no hw/ directory")
    name = f"_innet_ref_hw_{sha[:12]}"
    if name in sys.modules:
        return sys.modules[name], sha[:12]
    with tempfile.TemporaryDirectory(prefix="innet-equiv-") as scratch:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(scratch, filter="data")
        package = _import_hw(Path(scratch) / "hw", name)
    return package, sha[:12]


class _Traffic:
    """Random flits for every ingress, the job-table writes, and each egress's ``ready``."""

    def __init__(self, rng, ports, lanes, slots, chunk_flits, jobs):
        self.rng, self.N, self.L, self.S, self.P = rng, ports, lanes, slots, chunk_flits
        half = max(1, slots // 2)
        # job: (members, slot_base, slot_count, enable)
        self.jobs = {0: (list(range(ports)), 0, half, True),
                     1: (list(range(max(2, ports - 1))), half, slots - half, True)}
        self.spare_job = min(2, jobs - 1)   # never configured: unknown_job (or job 1 again)
        self.chunk = {(k, j): 0 for k in range(ports) for j in self.jobs}
        # results each port has received per job: a port sends chunk q only while q is within
        # a pool's worth of the results it has (the result is the credit, as in SwitchML)
        self.results = {(k, j): 0 for k in range(ports) for j in self.jobs}
        self.queue = [[] for _ in range(ports)]
        self.egress_rate = [rng.uniform(0.3, 1.0) for _ in range(ports)]
        self.counts = {"contributions": 0, "memory_packets": 0, "dropped_kinds": 0,
                       "faulty_contributions": 0, "truncated_by_sender": 0, "job_writes": 0,
                       "clears": 0}

    def _flits(self, header, flits, truncated=False):
        """A packet's flits; a ``truncated`` one lacks ``last`` (its sender dropped it)."""
        self.counts["truncated_by_sender"] += truncated
        return [pack_flit(header, [self.rng.randrange(1 << 32) for _ in range(self.L)],
                          f == flits - 1 and not truncated) for f in range(flits)]

    def _contribution(self, k):
        """Port k's next chunk of a job it may send for (None if none), as flits. Now and then
        a faulty copy goes before it (wrong length, unknown job, slot out of range, the other
        tenant's slot, wrong element type, truncated) or a duplicate after it: extra packets,
        so the chunk itself still arrives and the reductions go on."""
        rng = self.rng
        open_jobs = [j for j, (members, _, count, enable) in self.jobs.items()
                     if k in members and self.chunk[k, j] - self.results[k, j] < count]
        if not open_jobs:
            return None
        job = rng.choice(open_jobs)
        _, base, count, _ = self.jobs[job]
        q = self.chunk[k, job]
        self.chunk[k, job] = q + 1
        header = Header(kind=Kind.REDUCE_CONTRIB, src=k, dst=k, job=job,
                        slot=base + q % max(count, 1), seq=q & 0xFFFF)
        self.counts["contributions"] += 1
        flits = self._flits(header, self.P)
        if rng.random() < 0.12:
            self.counts["faulty_contributions"] += 1
            what = rng.randrange(7)
            if what == 0:
                flits = self._flits(header, max(1, self.P + rng.choice((-1, 1)))) + flits
            elif what == 1:
                flits = self._flits(replace(header, job=self.spare_job), self.P) + flits
            elif what == 2:
                flits = self._flits(replace(header, slot=self.S + rng.randrange(4)),
                                    self.P) + flits
            elif what == 3:
                flits = self._flits(replace(header, dtype=DType.FP32), self.P) + flits
            elif what == 4:   # (for a slot out of range: with the chunk's own header, the
                # chunk would continue the truncated copy and the two be one packet too long)
                flits = self._flits(replace(header, slot=self.S), rng.randrange(1, self.P + 1),
                                    truncated=True) + flits
            elif what == 5 and (foreign := [s for s in range(self.S)
                                            if not base <= s < base + count]):
                # a slot of the other tenant's range (foreign_slot); with none, a duplicate
                flits = self._flits(replace(header, slot=rng.choice(foreign)), self.P) + flits
            else:
                flits = flits + self._flits(header, self.P)
        return flits

    def _packet(self, k):
        """Port k's next packet (or packets), as flits."""
        rng = self.rng
        r = rng.random()
        contribution = self._contribution(k) if r < 0.5 else None
        if contribution:
            return contribution
        if r < 0.88:
            self.counts["memory_packets"] += 1
            header = Header(kind=rng.choice(_MEMORY_KINDS), src=k, dst=rng.randrange(self.N + 1))
            flits = rng.randrange(1, 4)
        else:
            self.counts["dropped_kinds"] += 1
            header = Header(kind=rng.choice(_DROPPED_KINDS), src=k, dst=rng.randrange(self.N))
            flits = rng.randrange(1, 3)
        return self._flits(header, flits, truncated=rng.random() < 0.05)

    def next_flit(self, k):
        """Port k's next flit (an int), or None for an idle cycle."""
        if not self.queue[k]:
            if self.rng.random() < 0.1:
                return None
            self.queue[k] = self._packet(k)
        return self.queue[k].pop(0)

    def delivered(self, k, bits):
        """Egress k delivered the flit ``bits``: a result's last flit is a credit."""
        header, _, last = unpack_flit(self.L, bits)
        if last and header.kind == Kind.REDUCE_RESULT and (k, header.job) in self.results:
            self.results[k, header.job] += 1

    def job_write(self):
        """A job-table write now and then: ``(job, members, base, count, enable)`` or None."""
        if self.rng.random() >= 0.003:
            return None
        self.counts["job_writes"] += 1
        job = self.rng.choice(list(self.jobs))
        members, base, count, enable = self.jobs[job]
        if job == 1:   # the second tenant comes and goes, with a member set that changes
            members = sorted(self.rng.sample(range(self.N), self.rng.randrange(2, self.N + 1)))
            enable = self.rng.random() < 0.8
        self.jobs[job] = (members, base, count, enable)
        return job, members, base, count, enable


def _compare(ctx, new, ref, ports):
    """The first difference between the two switches' outputs this cycle, or None."""
    for k in range(ports):
        for what, a, b in (("i.ready", new.i[k].ready, ref.i[k].ready),
                           ("o.valid", new.o[k].valid, ref.o[k].valid)):
            va, vb = ctx.get(a), ctx.get(b)
            if va != vb:
                return {"port": k, "signal": f"{what}[{k}]", "this": va, "reference": vb}
        if ctx.get(new.o[k].valid):
            va, vb = ctx.get(new.o[k].payload.as_value()), ctx.get(ref.o[k].payload.as_value())
            if va != vb:
                return {"port": k, "signal": f"o.payload[{k}]", "this": hex(va),
                        "reference": hex(vb)}
    for name in ("drops", "reduce_errors", "overflow", "reductions"):
        sa, sb = getattr(new, name), getattr(ref, name)
        va, vb = ctx.get(Value.cast(sa)), ctx.get(Value.cast(sb))
        if va != vb:
            return {"port": None, "signal": name, "this": hex(va), "reference": hex(vb)}
    return None


#: How the egresses accept flits: each at a random rate of its own, or every one always.
EGRESS_MODES = ("random", "ready")


def lockstep(this_hw, ref_hw, *, cycles, seed, ports, lanes, slots, chunk_flits, jobs,
             policy="rr", egress="random"):
    """Run this tree's switch and the reference's side by side for ``cycles`` cycles of
    random traffic (seeded); ``egress`` is one of :data:`EGRESS_MODES` (``"ready"``: every
    egress takes a flit every cycle, as the GPUs of a replay do). Returns a dict: ``agree``,
    the first ``mismatch`` (cycle, signal, both values) if any, and what the traffic
    exercised."""
    if egress not in EGRESS_MODES:
        raise ValueError(f"egress must be one of {', '.join(EGRESS_MODES)}, not {egress!r}")
    params = {"ports": ports, "lanes": lanes, "slots": slots, "chunk_flits": chunk_flits,
              "jobs": jobs, "dtypes": ("int32",), "policy": policy}
    new = this_hw.switch.Switch(this_hw.spec.SwitchSpec(**params))
    try:
        ref = ref_hw.switch.Switch(ref_hw.spec.SwitchSpec(**params))
    except (TypeError, ValueError, AttributeError) as exc:   # an older API: one line
        raise ReferenceUnusable(f"the reference's Switch does not take these parameters: "
                                f"{type(exc).__name__}: {exc}") from None
    if len(new.i[0].payload.as_value()) != len(ref.i[0].payload.as_value()):
        raise ReferenceUnusable("the reference's flit layout differs from this tree's")
    m = Module()
    m.submodules.this = new
    m.submodules.reference = ref
    rng = random.Random(seed)
    traffic = _Traffic(rng, ports, lanes, slots, chunk_flits, jobs)
    if egress == "ready":
        traffic.egress_rate = [1.0] * ports
    out = {"agree": True, "mismatch": None, "cycles": 0, "flits_in": 0, "flits_out": 0}
    pending = [None] * ports
    knobs = {"cfg_mem_priority": 1, "cfg_result_priority": 2, "cfg_mem_weight": 2,
             "cfg_result_weight": 3, "cfg_quantum": 3}

    def both(ctx, get, value):
        # as raw bits: the two trees' enums (element type, kind) are different classes
        for sw in (new, ref):
            ctx.set(Value.cast(get(sw)), int(value))

    async def bench(ctx):
        for name, value in knobs.items():
            if hasattr(new, name):
                both(ctx, lambda sw, n=name: getattr(sw, n), value)
        writes = [(j, *traffic.jobs[j]) for j in traffic.jobs]
        for c in range(cycles):
            write = writes.pop(0) if writes else traffic.job_write()
            both(ctx, lambda sw: sw.cfg.valid, write is not None)
            if write is not None:
                job, members, base, count, enable = write
                for field, value in (("job", job), ("enable", enable),
                                     ("members", sum(1 << k for k in members)),
                                     ("dtype", DType.INT32.value), ("saturate", job == 1),
                                     ("slot_base", base), ("slot_count", count)):
                    both(ctx, lambda sw, f=field: getattr(sw.cfg, f), value)
            clear = c > 100 and rng.random() < 0.001
            traffic.counts["clears"] += clear
            both(ctx, lambda sw: sw.cfg.clear, clear)
            for k in range(ports):
                if pending[k] is None:
                    pending[k] = traffic.next_flit(k)
                both(ctx, lambda sw, k=k: sw.i[k].valid, pending[k] is not None)
                both(ctx, lambda sw, k=k: sw.i[k].payload, pending[k] or 0)
                both(ctx, lambda sw, k=k: sw.o[k].ready,
                     rng.random() < traffic.egress_rate[k])
            diff = _compare(ctx, new, ref, ports)
            if diff is not None:
                out.update(agree=False, mismatch={"cycle": c, **diff})
                return
            for k in range(ports):
                if pending[k] is not None and ctx.get(new.i[k].ready):
                    pending[k] = None
                    out["flits_in"] += 1
                if ctx.get(new.o[k].valid) and ctx.get(new.o[k].ready):
                    out["flits_out"] += 1
                    traffic.delivered(k, ctx.get(new.o[k].payload.as_value()))
            out["cycles"] = c + 1
            await ctx.tick()
        out["reductions"] = ctx.get(new.reductions)
        out["drops"] = [ctx.get(new.drops[i]) for i in range(len(new.drops))]
        out["reduce_errors"] = [ctx.get(new.reduce_errors[i])
                                for i in range(len(new.reduce_errors))]

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    out["traffic"] = traffic.counts
    return out


def bench_equiv(against, *, cycles=2000, seeds=3, seed=1, ports=4, lanes=2, slots=8,
                chunk_flits=4, jobs=4, policy="rr", egress="random", repo=REPO_ROOT,
                progress=None):
    """``innet bench equiv``: :func:`lockstep` for ``seeds`` seeds from ``seed``; stops at the
    first seed that disagrees. Returns the report dict (``agree`` over all runs)."""
    ref_hw, label = load_reference(against, repo=repo)
    report = {"against": str(against), "reference": label, "ports": ports, "lanes": lanes,
              "slots": slots, "chunk_flits": chunk_flits, "jobs": jobs, "policy": str(policy),
              "egress": egress, "cycles_per_seed": cycles, "runs": [], "agree": True}
    began = time.perf_counter()
    for s in range(seed, seed + seeds):
        run = lockstep(hw_this(), ref_hw, cycles=cycles, seed=s, ports=ports, lanes=lanes,
                       slots=slots, chunk_flits=chunk_flits, jobs=jobs, policy=policy,
                       egress=egress)
        run["seed"] = s
        report["runs"].append(run)
        if progress:
            progress(f"... equiv, seed {s}: {'agree' if run['agree'] else 'DIFFER'} over "
                     f"{run['cycles']:,} cycles ({time.perf_counter() - began:.0f} s)")
        if not run["agree"]:
            report["agree"] = False
            break
    report["wall_s"] = round(time.perf_counter() - began, 1)
    return report


def hw_this():
    """This tree's ``hw`` package, with the modules :func:`lockstep` uses imported."""
    for module in ("spec", "switch"):
        importlib.import_module(f"hw.{module}")
    return hw
