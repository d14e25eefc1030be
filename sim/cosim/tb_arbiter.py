"""cocotb testbench for the exported link arbiter (``innet export arbiter``).

Parameters come from the environment (set by ``test_arbiter_cocotb.py``): ``INNET_PORTS``,
``INNET_LANES``, ``INNET_POLICY``, ``INNET_SEED``.

Every cycle the bench compares the RTL against :class:`sim.model.arbiter.ArbiterModel` (which
requester is on the output, and whether it moved), and a scoreboard checks properties that do not
depend on the model: every packet delivered once, intact, contiguous, in order per requester;
strict priority never starts a lower-priority packet while a higher one waits; round-robin starts
at most N−1 other packets while a requester waits; and, under saturation, 1.00 flit/cycle with
the policy's fairness bound.
"""

import os
import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from hw.spec import EGRESS_PICK_LATENCY, Policy
from hw.packet import DType, Header, Kind, Packet
from sim.model.arbiter import ArbiterModel
from sim.cosim.axis import AxisSink, AxisSource, axis_beats
from sim.cosim.pins import start_clock

PORTS = int(os.environ.get("INNET_PORTS", "4"))
LANES = int(os.environ.get("INNET_LANES", "1"))
POLICY = Policy(os.environ.get("INNET_POLICY", "rr"))
SEED = int(os.environ.get("INNET_SEED", "1"))
MAX_FLITS = 4   # longest packet in these tests


def random_packets(rng, src, count):
    packets = []
    for seq in range(count):
        length = rng.randint(1, MAX_FLITS)
        header = Header(kind=rng.choice([Kind.MEM_WRITE, Kind.MEM_READ_RESP, Kind.REDUCE_RESULT]),
                        src=src, dst=rng.randrange(PORTS), job=rng.randrange(256),
                        slot=rng.randrange(1 << 16), seq=seq, dtype=rng.choice(list(DType)))
        flits = [[rng.getrandbits(32) for _ in range(LANES)] for _ in range(length)]
        packets.append(Packet(header, flits))
    return packets


class Bench:
    def __init__(self, dut, rng, *, idle, stall):
        self.dut, self.rng = dut, rng
        self.sources = [AxisSource(dut, f"s{k}_axis", rng, idle) for k in range(PORTS)]
        self.sink = AxisSink(dut, "m_axis", rng, stall)
        self.config = {"priority": [rng.randrange(8) for _ in range(PORTS)],
                       "weight": [rng.randint(1, 4) for _ in range(PORTS)],
                       "quantum": MAX_FLITS + rng.randrange(4)}
        self.model = ArbiterModel(PORTS, POLICY, **self.config)
        self.sent = [[] for _ in range(PORTS)]
        # property state
        self.out_busy = False
        self.prev_valid = [False] * PORTS       # requests and priorities of the previous cycle
        self.prev_priority = list(self.config["priority"])
        self.waiting_starts = [0] * PORTS   # rr: packets started by others while k waits
        self.starts = []                      # (cycle, src) of every packet start
        self.max_wait = 0

    def apply_config(self):
        dut, c = self.dut, self.config
        for k in range(PORTS):
            if POLICY == Policy.PRIO:
                getattr(dut, f"cfg_s{k}_priority").value = c["priority"][k]
            if POLICY == Policy.WRR:
                getattr(dut, f"cfg_s{k}_weight").value = c["weight"][k]
        if POLICY == Policy.DRR:
            dut.cfg_quantum.value = c["quantum"]
        self.model.priority = list(c["priority"])
        self.model.weight = list(c["weight"])
        self.model.quantum = c["quantum"]

    def send(self, k, packets):
        for packet in packets:
            self.sources[k].send(packet)
            self.sent[k].append(packet)

    async def reset(self):
        dut = self.dut
        start_clock(dut)
        dut.rst.value = 1
        for source in self.sources:
            source.tvalid.value = 0
        self.sink.tready.value = 0
        self.apply_config()
        for _ in range(2):
            await RisingEdge(dut.clk)
        dut.rst.value = 0

    async def run(self, max_cycles, *, reconfigure=0.0, stop_when_done=True):
        """Run until every packet is delivered (or ``max_cycles``); returns cycles run."""
        expected = sum(len(axis_beats(p)) for ps in self.sent for p in ps)
        for cycle in range(max_cycles):
            await RisingEdge(self.dut.clk)
            if reconfigure and self.rng.random() < reconfigure:
                key = self.rng.choice(["priority", "weight"])
                k = self.rng.randrange(PORTS)
                self.config[key][k] = self.rng.randrange(8) if key == "priority" \
                    else self.rng.randint(0, 4)
                self.apply_config()
            for source in self.sources:
                source.drive()
            self.sink.drive()
            await ReadOnly()
            self.check_cycle(cycle)
            if stop_when_done and len(self.sink.beats) == expected:
                return cycle + 1
        if stop_when_done:
            raise AssertionError(f"stalled: {len(self.sink.beats)} of {expected} flits "
                                 f"delivered after {max_cycles} cycles")
        return max_cycles

    def check_cycle(self, cycle):
        valid = [s.valid for s in self.sources]
        last = [s.last for s in self.sources]
        handshakes = [k for k, s in enumerate(self.sources) if s.sample()]
        out_valid, beat = self.sink.sample()
        ready = self.sink.ready

        # Golden model, cycle by cycle.
        sel, accepted = self.model.step(valid, last, ready)
        rtl_sel = beat[3] if out_valid else None
        assert rtl_sel == sel, f"cycle {cycle}: RTL shows requester {rtl_sel}, model {sel}"
        assert handshakes == ([sel] if accepted else []), \
            f"cycle {cycle}: input handshakes {handshakes}, model {sel} accepted={accepted}"

        # Properties independent of the model. The arbiter chose in the previous cycle, from
        # the requests and priorities then.
        seen, self.prev_valid = self.prev_valid, valid
        seen_prio, self.prev_priority = self.prev_priority, list(self.config["priority"])
        if out_valid and not self.out_busy:
            src = beat[3]
            self.starts.append((cycle, src))
            if POLICY == Policy.PRIO:
                prio = seen_prio
                higher = [k for k in range(PORTS)
                          if valid[k] and seen[k] and prio[k] > prio[src]]
                assert not higher, (f"cycle {cycle}: priority {prio[src]} packet from {src} "
                                    f"started while {higher} (higher) waited")
            for k in range(PORTS):
                if k != src and valid[k]:
                    self.waiting_starts[k] += 1
            self.waiting_starts[src] = 0
            self.max_wait = max(self.max_wait, max(self.waiting_starts))
            if POLICY == Policy.RR:
                assert self.max_wait <= PORTS - 1, \
                    f"cycle {cycle}: a requester waited {self.max_wait} packets (> N-1)"
        if out_valid:
            self.out_busy = not (ready and beat[4])

    def check_delivery(self):
        """Exactly once, intact, contiguous, in order per requester."""
        packets, current = [], []
        for beat in self.sink.beats:
            current.append(beat)
            if beat[4]:
                packets.append(current)
                current = []
        assert not current, "output ended inside a packet"
        per_src = [[] for _ in range(PORTS)]
        for flits in packets:
            per_src[flits[0][3]].append(flits)
        for k in range(PORTS):
            want = [axis_beats(p) for p in self.sent[k]]
            assert len(per_src[k]) == len(want), \
                f"requester {k}: {len(per_src[k])} packets out, {len(want)} sent"
            for index, (got, exp) in enumerate(zip(per_src[k], want)):
                assert got == exp, f"requester {k} packet {index}: corrupted or out of order"


@cocotb.test()
@cocotb.parametrize(noise=[False, True])
async def test_delivery(dut, noise):
    """Random packets on every port; with noise, random idle and backpressure and run-time
    reconfiguration of priorities/weights."""
    rng = random.Random(SEED * 1000 + int(noise))
    bench = Bench(dut, rng, idle=0.3 if noise else 0.0, stall=0.3 if noise else 0.0)
    await bench.reset()
    for k in range(PORTS):
        bench.send(k, random_packets(rng, k, 12 if noise else 16))
    await bench.run(20_000, reconfigure=0.02 if noise else 0.0)
    bench.check_delivery()


@cocotb.test()
async def test_saturation(dut):
    """Every requester always has a packet, the output is always ready: 1.00 flit/cycle and the
    policy's fairness bound."""
    rng = random.Random(SEED * 1000 + 7)
    bench = Bench(dut, rng, idle=0.0, stall=0.0)
    await bench.reset()
    cycles = 48 * PORTS
    for k in range(PORTS):
        bench.send(k, random_packets(rng, k, cycles))   # more than can drain in `cycles`
    await bench.run(cycles, stop_when_done=False)
    flits = len(bench.sink.beats)
    # The first cycle after reset makes the first choice; from the next every cycle moves one.
    assert flits == cycles - EGRESS_PICK_LATENCY, \
        f"{flits} flits in {cycles} cycles (want 1.00 flit/cycle)"

    # Per-packet accounting in output order.
    order, current = [], 0
    for beat in bench.sink.beats:
        current += 1
        if beat[4]:
            order.append((beat[3], current))
            current = 0
    packets, flit_count = [0] * PORTS, [0] * PORTS
    previous = None
    rounds = 0
    first_holder = order[0][0]
    for src, length in order:
        # Under saturation turns go round in index order; a round ends when the turn comes
        # back to the requester that held the first one. Check the bound there.
        if POLICY in (Policy.WRR, Policy.DRR) and src == first_holder and previous not in (
                None, first_holder):
            rounds += 1
            if POLICY == Policy.WRR:
                w = bench.config["weight"]
                assert all(packets[k] == rounds * w[k] for k in range(PORTS)), \
                    f"after {rounds} rounds, packets {packets} for weights {w}"
            else:
                q = bench.config["quantum"]
                assert max(flit_count) - min(flit_count) < q, \
                    f"after {rounds} rounds, flits {flit_count} differ by a quantum ({q})"
        packets[src] += 1
        flit_count[src] += length
        if POLICY == Policy.RR:
            assert max(packets) - min(packets) <= 1, f"round-robin packet shares {packets}"
        previous = src
    if POLICY in (Policy.WRR, Policy.DRR):
        assert rounds >= 3, f"only {rounds} rounds observed"
    if POLICY == Policy.PRIO:
        prio = bench.config["priority"]
        top = max(prio)
        losers = [k for k in range(PORTS) if prio[k] < top and packets[k] > 1]
        assert not losers, f"lower-priority requesters {losers} served under saturation"
