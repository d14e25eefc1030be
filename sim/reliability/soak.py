"""The soak: long random mixed traffic through the exported switch, with faults, checked packet
by packet (``innet bench soak``).

:class:`SoakDriver` is the traffic source and scoreboard, simulator-independent like
:class:`sim.cosim.driver.ReplayDriver`: :meth:`SoakDriver.drive` says what to put on the pins
after a rising edge, :meth:`SoakDriver.sample` takes what the switch shows. Its payloads and
headers come from :mod:`sim.cosim.stimulus`. It runs

* several concurrent **jobs** with different group sizes, element types (int32 wrapping and
  saturating, fp32, bf16) and disjoint slot ranges, each self-clocked (chunk c is issued once
  chunk c − slots has reached every member); **elastic** jobs quiesce every few chunks and
  change their member set through the configuration port;
* **memory writes** between random ports, 1 to ``mtu_flits`` flits;
* random **idle gaps** on every ingress and random **backpressure** on every egress;
* **malformed packets** of every class in :data:`FAULTS`, each expected to be dropped and
  counted under its cause while the other traffic stays exact;
* optional **resets** in the middle of traffic: everything in flight is forgotten, every
  counter must read zero afterwards, and anything from before the reset that comes out after it
  is a failure (a stale slot or packet).

The scoreboard checks every memory packet arrives once, intact, at its destination; every
reduction result equals the numpy golden (:func:`sim.model.reduce.reduce_words`) at every
member exactly once; and at the end every drop counter equals the number of faults of its
cause injected.
"""

import random
from collections import deque
from dataclasses import dataclass, field

from hw.packet import MAX_PORTS, USER_LAYOUT, DType, Kind, decode, encode
from hw.spec import SwitchSpec
from sim.cosim.pins import counter_pins
from sim.cosim.stimulus import (contribution_user, memory_user, memory_words,
                                random_contribution_words, tdata, user_pid, wrap_seq)
from sim.model.reduce import reduce_words

__all__ = ["SoakDriver", "SoakConfig", "FAULTS"]

#: Malformed packet classes the soak injects: name -> the counter that must count it.
#: (``duplicate`` and ``slot_conflict`` are sent by a member of the static job next to its
#: real contribution; another member's contribution is held back until the switch has judged
#: them, so that they always meet the slot held.)
FAULTS = {
    "bad_kind": "drop_bad_kind",            # kind code 6 or 7
    "forged_result": "drop_bad_kind",       # a GPU sending a REDUCE_RESULT
    "bad_dest": "drop_bad_dest",            # memory write beyond the switch or to its sender
    "config_packet": "drop_config_packet",  # in-band CONFIG (only the cfg port configures)
    "bad_source": "err_bad_source",         # header src is not the ingress port
    "unknown_job": "err_unknown_job",       # job not enabled
    "slot_range": "err_slot_range",         # slot beyond the pool
    "foreign_slot": "err_foreign_slot",     # another job's slot
    "not_member": "err_not_member",         # a port outside the job's group
    "wrong_dtype": "err_wrong_dtype",       # element type differs from the job's
    "short_chunk": "err_bad_length",        # one flit short (sent before the real one)
    "long_chunk": "err_bad_length",         # one flit long (sent before the real one)
    "duplicate": "err_duplicate",           # a member's second contribution to a chunk
    "slot_conflict": "err_slot_conflict",   # a later chunk aimed at a slot still gathering
    "truncated_write": "drop_truncated",    # a memory write whose sender dropped `last`
    "truncated_contribution": "drop_truncated",   # a non-member's contribution without `last`
}
_COUNTERS = counter_pins()


_STATELESS = ("bad_kind", "forged_result", "bad_dest", "config_packet", "bad_source",
              "unknown_job", "slot_range", "foreign_slot", "not_member", "wrong_dtype",
              "truncated_write", "truncated_contribution")


@dataclass
class SoakConfig:
    ports: int = 8
    lanes: int = 2
    slots: int = 16
    chunk_flits: int = 4
    jobs: int = 4                 # job table entries; jobs 1..3 run, job 0 stays disabled
    mtu_flits: int = 16
    idle: float = 0.2             # probability an ingress with work waits a cycle
    stall: float = 0.2            # probability an egress holds tready low in a cycle
    mem_rate: float = 0.02        # memory writes per port per cycle
    fault_rate: float = 0.002     # stateless malformed packets per cycle (whole switch)
    chunk_faults: float = 0.05    # per issued chunk of the static job: length/dup/conflict
    reconfig_every: int = 12      # chunks between membership changes of an elastic job
    resets: tuple = ()            # cycles at which to pulse reset
    drain: int = 20_000           # cycles at the end with no new traffic

    def __post_init__(self):
        if not 3 <= self.ports <= MAX_PORTS - 1:
            raise ValueError(f"Soak needs 3..{MAX_PORTS - 1} ports, not {self.ports}")
        if self.slots < 3 or self.chunk_flits < 2 or self.jobs < 4:
            raise ValueError("Soak needs at least 3 slots, 2-flit chunks and 4 job entries")

    def switch(self, policy="rr"):
        """The switch the soak runs on (every element type, so jobs of each can run)."""
        return SwitchSpec(ports=self.ports, lanes=self.lanes, slots=self.slots,
                          chunk_flits=self.chunk_flits, jobs=self.jobs, policy=policy)


@dataclass
class _Job:
    job: int
    dtype: DType
    saturate: bool
    base: int
    count: int
    members: list
    elastic: bool
    next_seq: int = 0
    outstanding: dict = field(default_factory=dict)   # seq -> [expected rows, ports left]
    quiesce: bool = False
    configured: bool = False
    since_reconfig: int = 0


class SoakDriver:
    """Traffic, faults and scoreboard of one soak run (see the module docstring)."""

    def __init__(self, cfg, seed):
        self.cfg, self.seed = cfg, seed
        self.rng = random.Random(seed)
        self.N, self.L, self.P = cfg.ports, cfg.lanes, cfg.chunk_flits
        N = self.N
        share = cfg.slots // 3
        rng = self.rng
        # job 1: static (the fault target; never all ports, so non-members exist), job 2 and
        # job 3: elastic. Element types differ; int32 saturates on one of them.
        everyone = list(range(N))
        static = sorted(rng.sample(everyone, rng.randint(2, N - 1)))
        self.jobs = [
            _Job(1, DType.INT32, True, 0, share, static, False),
            _Job(2, DType.FP32, False, share, share, self._group(), True),
            _Job(3, DType.BF16, False, 2 * share, cfg.slots - 2 * share, self._group(), True),
        ]
        self.queues = [deque() for _ in range(N)]
        self.current = [None] * N           # beats being presented, position
        self.presented = [False] * N
        self.ready_out = [True] * N
        self.rx = [[] for _ in range(N)]
        self.cfg_writes = deque()            # (job, enable, members, dtype, saturate, base, count)
        self.memory = {}                     # pid -> (src, dst, flits)
        self.next_pid = 0
        self.expected = dict.fromkeys(_COUNTERS, 0)
        self.injected = dict.fromkeys(FAULTS, 0)
        self._stateless_turn = 0
        self.gates = {}                      # (port, job, seq) -> {counter: value to reach}
        self.counters = dict.fromkeys(_COUNTERS, 0)   # as last read from the switch
        self.cycle = 0
        self.generating = True
        self.epoch_start = 0
        self.failures = []
        self.stats = {"memory_packets": 0, "reductions": 0, "results": 0, "flits_in": 0,
                      "flits_out": 0, "lost": 0, "duplicated": 0, "mismatches": 0,
                      "reconfigurations": 0, "resets": 0, "faults": 0}
        for job in self.jobs:
            self._configure(job)

    # -- jobs ------------------------------------------------------------------------------

    def _group(self):
        return sorted(self.rng.sample(range(self.N), self.rng.randint(2, self.N)))

    def _configure(self, job, enable=True):
        job.configured = False
        self.cfg_writes.append((job, enable))

    def config_write(self):
        """The job-table write to apply this cycle (or None): ``dict`` of ``cfg_*`` pin
        values."""
        if not self.cfg_writes:
            return None
        job, enable = self.cfg_writes.popleft()
        job.configured = True
        return {"job": job.job, "enable": int(enable),
                "members": sum(1 << k for k in job.members), "dtype": job.dtype.value,
                "saturate": int(job.saturate), "slot_base": job.base, "slot_count": job.count}

    def _issue(self, job):
        """Issue chunk ``job.next_seq`` to every member's queue if its slot is free."""
        seq = job.next_seq
        if any(s <= seq - job.count for s in job.outstanding):
            return
        slot = job.base + seq % job.count
        contribs = {k: random_contribution_words(self.seed, seq * 8 + job.job, k, self.P,
                                                 self.L, job.dtype) for k in job.members}
        want, _ = reduce_words(contribs, job.members, job.dtype, job.saturate)
        rows = [tdata(r) for r in want]
        job.outstanding[seq] = [rows, set(job.members)]
        job.next_seq += 1
        job.since_reconfig += 1
        gate = {}
        first = job.members[0]
        if not job.elastic and self.rng.random() < self.cfg.chunk_faults:
            kind = self.rng.choice(("short_chunk", "long_chunk", "duplicate", "slot_conflict"))
            self._count_fault(kind)
            if kind in ("short_chunk", "long_chunk"):
                flits = self.P - 1 if kind == "short_chunk" else self.P + 1
                words = random_contribution_words(self.seed + 1, seq, first, flits, self.L,
                                                  job.dtype)
                self.queues[first].append(self._contrib(first, job, slot, seq, words))
            else:
                counter = FAULTS[kind]
                gate[counter] = self.expected[counter]
        self.queues[first].append(self._contrib(first, job, slot, seq, contribs[first]))
        if gate:   # the fault follows the real contribution; a second member waits for it
            if "err_duplicate" in gate:
                words = random_contribution_words(self.seed + 2, seq, first, self.P, self.L,
                                                  job.dtype)
                self.queues[first].append(self._contrib(first, job, slot, seq, words))
            else:
                words = random_contribution_words(self.seed + 3, seq, first, self.P, self.L,
                                                  job.dtype)
                later = wrap_seq(seq + job.count)
                self.queues[first].append(self._contrib(first, job, slot, later, words))
            self.gates[(job.members[1], job.job, seq)] = gate
        for k in job.members[1:]:
            self.queues[k].append(self._contrib(k, job, slot, seq, contribs[k]))

    def _contrib(self, port, job, slot, seq, words, dtype=None, src=None):
        user = contribution_user(job=job.job, dtype=dtype or job.dtype, slot=slot, seq=seq)
        beats = [(tdata(words[f]), user, 0, port if src is None else src,
                  int(f == len(words) - 1)) for f in range(len(words))]
        return ("contrib", (job.job, seq), beats)

    def _count_fault(self, kind):
        self.injected[kind] += 1
        self.expected[FAULTS[kind]] += 1
        self.stats["faults"] += 1

    # -- memory and stateless faults ----------------------------------------------------------

    def _memory(self, src, truncate=False):
        """Queue a memory write at ``src``; ``truncate``: send only some of its flits and no
        ``last`` (the switch must end it with a NULLIFIED tail), then a good write."""
        rng = self.rng
        dst = rng.choice([d for d in range(self.N) if d != src])
        flits = rng.randint(2 if truncate else 1, self.cfg.mtu_flits)
        pid = self.next_pid
        self.next_pid += 1
        user = memory_user(pid, Kind.MEM_WRITE)
        beats = [(tdata(memory_words(pid, f, self.L)), user, dst, src, int(f == flits - 1))
                 for f in range(flits)]
        if truncate:
            sent = rng.randint(1, flits - 1)
            beats = [b[:4] + (0,) for b in beats[:sent]]
            self.memory[pid] = (src, dst, sent, True)
            self.queues[src].append(("fault", "truncated_write", beats))
            self._memory(src)   # something must follow: the next header ends it
            return
        self.memory[pid] = (src, dst, flits, False)
        self.queues[src].append(("mem", pid, beats))

    def _stateless_fault(self):
        rng = self.rng
        # The classes take turns, so a short run meets every one of them (drawn at random,
        # a 20,000-cycle run injects about three of each and now and then none of one).
        kind = _STATELESS[self._stateless_turn % len(_STATELESS)]
        self._stateless_turn += 1
        static = self.jobs[0]
        port = rng.randrange(self.N)
        words = [[rng.getrandbits(32) for _ in range(self.L)] for _ in range(self.P)]
        slot = static.base + rng.randrange(static.count)
        seq = rng.getrandbits(16)
        header = {"kind": Kind.REDUCE_CONTRIB, "dtype": static.dtype, "job": static.job,
                  "slot": slot, "seq": seq}
        dst, src = 0, port
        if kind == "bad_kind":
            header["kind"] = rng.choice((6, 7))
            dst = rng.randrange(self.N)
        elif kind == "forged_result":
            header["kind"] = Kind.REDUCE_RESULT
            dst = rng.randrange(self.N)
        elif kind == "bad_dest":   # beyond the switch, or the sender's own port
            header["kind"] = Kind.MEM_WRITE
            dst = rng.choice((port, rng.randrange(self.N, MAX_PORTS)))
        elif kind == "config_packet":
            header["kind"] = Kind.CONFIG
        elif kind == "bad_source":
            src = rng.choice([k for k in range(MAX_PORTS) if k != port])
        elif kind == "unknown_job":
            header["job"] = rng.choice([0] + list(range(self.cfg.jobs, 256)))
        elif kind == "slot_range":
            header["slot"] = rng.randrange(self.cfg.slots, 1 << 16)
        elif kind == "foreign_slot":
            other = rng.choice(self.jobs[1:])
            header["slot"] = other.base + rng.randrange(other.count)
        elif kind == "not_member":
            port = rng.choice([k for k in range(self.N) if k not in static.members])
            src = port
        elif kind == "wrong_dtype":
            port = src = rng.choice(static.members)
            header["dtype"] = rng.choice([d for d in (DType.FP32, DType.BF16)])
        elif kind == "truncated_write":
            self._count_fault(kind)
            self._memory(port, truncate=True)
            return
        elif kind == "truncated_contribution":
            # dropped on its first flit (not a member), then ended by the next header
            port = src = rng.choice([k for k in range(self.N) if k not in static.members])
            self.expected[FAULTS["not_member"]] += 1
        self._count_fault(kind)
        user = encode(USER_LAYOUT, header)
        beats = [(tdata(words[f]), user, dst, src, int(f == self.P - 1))
                 for f in range(self.P)]
        if kind == "truncated_contribution":
            beats = [b[:4] + (0,) for b in beats[:rng.randint(1, self.P - 1)]]
            self.queues[port].append(("fault", kind, beats))
            self._memory(port)   # the next header ends it
            return
        self.queues[port].append(("fault", kind, beats))

    # -- the cycle ---------------------------------------------------------------------------

    def _generate(self):
        rng, cfg = self.rng, self.cfg
        for job in self.jobs:
            if not job.configured:
                continue
            if job.elastic and job.since_reconfig >= cfg.reconfig_every:
                job.quiesce = True
            if job.quiesce:
                if not job.outstanding:   # every result is home: change the group
                    job.members = self._group()
                    job.quiesce, job.since_reconfig = False, 0
                    self.stats["reconfigurations"] += 1
                    self._configure(job)
                continue
            if all(len(self.queues[k]) < 4 for k in job.members):
                self._issue(job)
        for k in range(self.N):
            if len(self.queues[k]) < 8 and rng.random() < cfg.mem_rate:
                self._memory(k)
        if rng.random() < cfg.fault_rate:
            self._stateless_fault()

    def _gate_open(self, k, item):
        if item[0] != "contrib":
            return True
        gate = self.gates.get((k,) + item[1])
        if gate is None:
            return True
        if all(self.counters[c] >= v for c, v in gate.items()):
            del self.gates[(k,) + item[1]]
            return True
        return False

    def watched(self):
        """The drop counters :meth:`drive` needs this cycle (those a held-back contribution
        waits on)."""
        return {c for gate in self.gates.values() for c in gate}

    def drive(self, counters):
        """Just after a rising edge. ``counters``: the values of :meth:`watched` now. Returns
        the ingress changes (``(port, beat or None)``); :attr:`ready_out` holds the egress
        ``tready`` values."""
        self.counters.update(counters)
        if self.generating:
            self._generate()
        changes = []
        for k in range(self.N):
            if self.current[k] is not None:
                continue
            queue = self.queues[k]
            if queue and self.rng.random() >= self.cfg.idle and self._gate_open(k, queue[0]):
                item = queue.popleft()
                self.current[k] = [item, 0]
                changes.append((k, item[2][0]))
                self.presented[k] = True
            elif self.presented[k]:
                changes.append((k, None))
                self.presented[k] = False
        self.ready_out = [self.rng.random() >= self.cfg.stall for _ in range(self.N)]
        return changes

    def sample(self, ingress_ready, egress):
        """In the read-only phase; returns the ingress changes to apply at once."""
        changes = []
        for k in range(self.N):
            cur = self.current[k]
            if cur is None or not ingress_ready[k]:
                continue
            item, pos = cur
            self.stats["flits_in"] += 1
            pos += 1
            if pos == len(item[2]):
                self.current[k] = None
                self.presented[k] = False
                changes.append((k, None))
            else:
                cur[1] = pos
                changes.append((k, item[2][pos]))
        for d in range(self.N):
            beat = egress[d]
            if beat is None or not self.ready_out[d]:
                continue
            self.stats["flits_out"] += 1
            self.rx[d].append(beat)
            if beat[4]:
                self._packet_out(d, self.rx[d])
                self.rx[d] = []
        self.cycle += 1
        return changes

    # -- scoreboard --------------------------------------------------------------------------

    def _fail(self, text, stat="mismatches", count=1):
        self.stats[stat] += count
        if len(self.failures) < 20:
            self.failures.append(f"cycle {self.cycle}: {text}")

    def _packet_out(self, d, beats):
        user = decode(USER_LAYOUT, beats[0][1])
        kind = getattr(user["kind"], "value", user["kind"])   # an enum, or a bare bad code
        if kind == Kind.REDUCE_RESULT.value:
            job = next((j for j in self.jobs if j.job == user["job"]), None)
            seq = None
            if job is not None:
                seq = next((s for s in job.outstanding if wrap_seq(s) == user["seq"]), None)
            if seq is None:
                self._fail(f"egress {d}: result of job {user['job']} chunk {user['seq']} "
                           f"that is not outstanding (stale or duplicated)", "duplicated")
                return
            rows, left = job.outstanding[seq]
            if d not in left:
                self._fail(f"egress {d}: second result of job {job.job} chunk {seq}",
                           "duplicated")
                return
            if [b[0] for b in beats] != rows or user["dtype"] != job.dtype:
                self._fail(f"egress {d}: job {job.job} chunk {seq} differs from the golden")
            left.discard(d)
            self.stats["results"] += 1
            if not left:
                del job.outstanding[seq]
                self.stats["reductions"] += 1
            return
        pid = user_pid(beats[0][1])
        entry = self.memory.pop(pid, None)
        if kind != Kind.MEM_WRITE.value or entry is None:
            self._fail(f"egress {d}: kind {kind} packet {pid} not expected (stale, duplicated "
                       f"or a fault that got through)", "duplicated")
            return
        src, dst, flits, truncated = entry
        tail = decode(USER_LAYOUT, beats[-1][1])["kind"]
        if truncated:   # its flits, then the switch's NULLIFIED tail
            if tail != Kind.NULLIFIED or len(beats) != flits + 1:
                self._fail(f"egress {d}: truncated packet {pid} was not ended by a NULLIFIED "
                           f"tail after its {flits} flits")
            beats = beats[:-1]
        elif tail == Kind.NULLIFIED:
            self._fail(f"egress {d}: intact packet {pid} arrived nullified")
            return
        if d != dst or beats[0][2] != dst or beats[0][3] != src or len(beats) != flits or any(
                b[0] != tdata(memory_words(pid, f, self.L)) for f, b in enumerate(beats)):
            self._fail(f"egress {d}: memory packet {pid} ({src}->{dst}, {flits} flits) "
                       f"corrupted")
        self.stats["memory_packets"] += 1

    # -- reset and the end -------------------------------------------------------------------

    def reset(self):
        """The switch was reset: forget everything in flight, reconfigure every job. Packets
        from before the reset that come out later are failures (the scoreboard no longer
        expects them)."""
        self.queues = [deque() for _ in range(self.N)]
        self.current = [None] * self.N
        self.presented = [False] * self.N
        self.rx = [[] for _ in range(self.N)]
        self.memory.clear()
        self.gates.clear()
        self.cfg_writes.clear()
        self.expected = dict.fromkeys(_COUNTERS, 0)
        for job in self.jobs:
            job.outstanding.clear()
            job.next_seq += job.count    # fresh sequence numbers
            job.quiesce = False
            self._configure(job)
        self.stats["resets"] += 1
        self.epoch_start = self.cycle

    def busy(self):
        """Work left: queued or presented packets, outstanding chunks or memory packets."""
        return (any(self.queues) or any(c is not None for c in self.current) or
                any(j.outstanding for j in self.jobs) or bool(self.memory) or
                bool(self.cfg_writes))

    def finish(self, counters):
        """At the end: lost packets and counter mismatches."""
        lost_mem = len(self.memory)
        lost_results = sum(len(left) for j in self.jobs for _, left in j.outstanding.values())
        if lost_mem or lost_results:
            self._fail(f"{lost_mem} memory packets and {lost_results} results never arrived",
                       "lost", lost_mem + lost_results)
        for name in _COUNTERS:
            if counters[name] != self.expected[name]:
                self._fail(f"counter {name} reads {counters[name]}, "
                           f"{self.expected[name]} faults of that cause were injected")
        return self.stats

