"""Amaranth-simulator tests of the link arbiter against the plain-Python reference model."""

import random

import pytest
from amaranth.sim import Simulator

from hw.arbiter import LinkArbiter
from hw.spec import Policy
from sim.model.arbiter import ArbiterModel


def run_against_model(policy, ports, seed, cycles=500, idle=0.2, stall=0.3):
    """Random requests (packets of 1..4 flits, idle gaps), random output backpressure and
    run-time changes of priority/weight/quantum; the RTL must match the model every cycle."""
    rng = random.Random(seed)
    dut = LinkArbiter(ports, 1, policy)
    config = {"priority": [rng.randrange(8) for _ in range(ports)],
              "weight": [rng.randrange(0, 4) for _ in range(ports)],
              "quantum": rng.randrange(1, 6)}
    model = ArbiterModel(ports, policy, **config)
    lengths = [[rng.randint(1, 4) for _ in range(40)] for _ in range(ports)]
    position = [[0, 0] for _ in range(ports)]   # packet index, flit index
    mismatches = []
    delivered = []

    def apply(ctx):
        if policy == "prio":
            for k in range(ports):
                ctx.set(dut.priority[k], config["priority"][k])
        if policy == "wrr":
            for k in range(ports):
                ctx.set(dut.weight[k], config["weight"][k])
        if policy == "drr":
            ctx.set(dut.quantum, config["quantum"])
        model.priority, model.weight = list(config["priority"]), list(config["weight"])
        model.quantum = config["quantum"]

    async def bench(ctx):
        apply(ctx)
        valid = [False] * ports
        for cycle in range(cycles):
            if rng.random() < 0.02:
                key = rng.choice(["priority", "weight", "quantum"])
                if key == "quantum":
                    config[key] = rng.randrange(1, 6)
                else:
                    config[key][rng.randrange(ports)] = rng.randrange(0, 8 if key ==
                                                                      "priority" else 4)
                apply(ctx)
            last = []
            for k in range(ports):
                p, f = position[k]
                if not valid[k]:
                    valid[k] = p < len(lengths[k]) and rng.random() >= idle
                last.append(p < len(lengths[k]) and f == lengths[k][p] - 1)
                ctx.set(dut.i[k].valid, valid[k])
                ctx.set(dut.i[k].payload.last, last[k])
                ctx.set(dut.i[k].payload.src, k)
                ctx.set(dut.i[k].payload.data[0], (p << 8) | f)
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, ready)
            sel, accepted = model.step(valid, last, ready)
            out_valid = ctx.get(dut.o.valid)
            rtl_sel = ctx.get(dut.o.payload.src) if out_valid else None
            readies = [ctx.get(dut.i[k].ready) for k in range(ports)]
            moved = [k for k in range(ports) if valid[k] and readies[k]]
            if rtl_sel != sel or moved != ([sel] if accepted else []):
                mismatches.append((cycle, rtl_sel, sel, moved, accepted))
            if out_valid and ready:
                delivered.append((rtl_sel, ctx.get(dut.o.payload.data[0])))
            await ctx.tick()
            for k in moved:
                position[k][1] += 1
                if last[k]:
                    position[k] = [position[k][0] + 1, 0]
                valid[k] = False

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return mismatches, delivered


@pytest.mark.parametrize("ports", [2, 3, 4, 8])
@pytest.mark.parametrize("policy", [p.value for p in Policy])
def test_rtl_matches_model(policy, ports):
    for seed in range(3):
        mismatches, delivered = run_against_model(policy, ports, seed)
        assert not mismatches, f"seed {seed}: first mismatches {mismatches[:3]}"
        # Per requester, flits leave in order (packet, flit) with no gaps.
        for k in range(ports):
            tags = [tag for src, tag in delivered if src == k]
            assert tags == sorted(tags)
        assert delivered, "nothing moved"


def test_model_policies_directed():
    """Directed cases for the model itself (it is the golden reference)."""
    # The choice is registered: nothing is presented in the first cycle after reset.
    prio = ArbiterModel(4, "prio", priority=[0, 7, 0, 0])
    assert [prio.step([True] * 4, [True] * 4, True)[0] for _ in range(4)] == [None, 1, 1, 1]
    # RR from reset searches after port 0: port 1 first, then 2, 3, 0.
    rr = ArbiterModel(4, "rr")
    assert [rr.step([True] * 4, [True] * 4, True)[0] for _ in range(5)] == [None, 1, 2, 3, 0]
    # A lone requester's one-flit packets leave back to back (it counts as requesting in the
    # cycle its last flit leaves).
    lone = ArbiterModel(4, "rr")
    assert [lone.step([False, True, False, False], [True] * 4, True)[0]
            for _ in range(4)] == [None, 1, 1, 1]
    # A requester that starts requesting is seen a cycle later; one chosen again as its last
    # flit leaves that then stops requesting costs one idle cycle.
    prio = ArbiterModel(4, "prio", priority=[0, 7, 0, 0])
    steps = [([False, True, False, False], None), ([False, True, True, False], 1),
             ([False, False, True, False], None), ([False, False, True, False], 2)]
    assert [prio.step(v, [True] * 4, True)[0] for v, _ in steps] == [s for _, s in steps]


@pytest.mark.parametrize("args, error, message", [
    ((1, 1, "rr"), ValueError, "Port count must be between 2 and 64, not 1"),
    ((65, 1, "rr"), ValueError, "Port count must be between 2 and 64, not 65"),
    (("4", 1, "rr"), TypeError, "Port count must be an integer, not '4'"),
    ((4, 0, "rr"), ValueError, "Lane count must be at least 1, not 0"),
    ((4, 1, "fifo"), ValueError, "Policy must be one of rr, prio, wrr, drr, not 'fifo'"),
])
def test_parameter_validation(args, error, message):
    with pytest.raises(error, match=message):
        LinkArbiter(*args)


def test_signature_members_follow_policy():
    assert "priority" in LinkArbiter(4, 1, "prio").signature.members
    assert "weight" in LinkArbiter(4, 1, "wrr").signature.members
    assert "quantum" in LinkArbiter(4, 1, "drr").signature.members
    assert set(LinkArbiter(4, 1, "rr").signature.members) == {"i", "o"}


@pytest.mark.parametrize("width", [1, 3, 5])
def test_below_is_less_than_for_every_value_and_bound(width):
    """``below`` (the comparison with a constant written as bit tests) against Python's ``<``,
    every value of the width, every bound from 0 to beyond the width's range."""
    from amaranth.hdl import Module, Signal

    from hw.arbiter import below

    m = Module()
    value = Signal(width)
    bounds = range(0, (1 << width) + 3)
    outs = [Signal(name=f"below_{b}") for b in bounds]
    m.d.comb += [out.eq(below(value, b)) for out, b in zip(outs, bounds)]
    wrong = []

    async def bench(ctx):
        for v in range(1 << width):
            ctx.set(value, v)
            wrong.extend((v, b) for out, b in zip(outs, bounds) if ctx.get(out) != (v < b))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert wrong == []
