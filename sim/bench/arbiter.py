"""Benchmark of the link arbiter under saturation (``innet bench arbiter``).

Every requester always has a packet waiting (lengths drawn from 1..``max_flits``), the output is
always ready. The RTL runs in the Amaranth simulator; the figures are measured, per policy:

* ``flits_per_cycle``: flits accepted on the output / cycles run from the first one (the target
  is 1.00; the arbiter makes its first choice in the cycle after reset, ``first_flit_cycle``);
* per-requester packets and flits;
* fairness: Jain's index of packet shares (rr) or flit shares (drr); for wrr the largest gap
  between a requester's packet share and its weight share; for prio the share of the
  highest-priority requester(s).
"""

import random
import time

from amaranth.sim import Simulator

from hw.arbiter import LinkArbiter
from hw.spec import Policy

__all__ = ["bench_arbiter", "jain"]


def jain(values):
    """Jain's fairness index: 1.0 when all equal, 1/n when one takes everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return (total * total) / (len(values) * squares) if squares else 1.0


def _run_policy(ports, lanes, policy, cycles, max_flits, seed):
    rng = random.Random(seed)
    dut = LinkArbiter(ports, lanes, policy)
    weight = [k % 4 + 1 for k in range(ports)]
    priority = [k % 8 for k in range(ports)]
    quantum = max_flits
    lengths = [rng.randint(1, max_flits) for _ in range(ports)]   # current packet length
    sent = [0] * ports        # flits of the current packet already sent
    packets = [0] * ports
    flits = [0] * ports
    stats = {"flits": 0, "first": 0}

    async def bench(ctx):
        if policy == Policy.PRIO:
            for k in range(ports):
                ctx.set(dut.priority[k], priority[k])
        if policy == Policy.WRR:
            for k in range(ports):
                ctx.set(dut.weight[k], weight[k])
        if policy == Policy.DRR:
            ctx.set(dut.quantum, quantum)
        for k in range(ports):
            ctx.set(dut.i[k].valid, 1)
            ctx.set(dut.i[k].payload.src, k)
            ctx.set(dut.i[k].payload.last, lengths[k] == 1)
        ctx.set(dut.o.ready, 1)
        for cycle in range(cycles):
            # Sample before the edge: the flit on the output is accepted at this edge; the
            # requester presents its next flit after it.
            moved = ctx.get(dut.o.valid)
            k = ctx.get(dut.o.payload.src)
            await ctx.tick()
            if moved:
                if stats["flits"] == 0:
                    stats["first"] = cycle
                stats["flits"] += 1
                flits[k] += 1
                sent[k] += 1
                if sent[k] == lengths[k]:
                    packets[k] += 1
                    sent[k] = 0
                    lengths[k] = rng.randint(1, max_flits)
                ctx.set(dut.i[k].payload.last, sent[k] == lengths[k] - 1)

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    began = time.perf_counter()
    sim.run()
    seconds = time.perf_counter() - began

    result = {
        "policy": policy.value,
        "cycles": cycles,
        "flits": stats["flits"],
        "first_flit_cycle": stats["first"],
        "flits_per_cycle": stats["flits"] / (cycles - stats["first"]),
        "packets_per_port": packets,
        "flits_per_port": flits,
        "sim_cycles_per_s": round(cycles / seconds),
    }
    if policy == Policy.RR:
        result["fairness"] = {"metric": "jain_index_packets", "value": jain(packets)}
    elif policy == Policy.DRR:
        result["fairness"] = {"metric": "jain_index_flits", "value": jain(flits),
                              "quantum": quantum}
    elif policy == Policy.WRR:
        total_p, total_w = sum(packets), sum(weight)
        gap = max(abs(packets[k] / total_p - weight[k] / total_w) for k in range(ports))
        result["fairness"] = {"metric": "max_share_gap_vs_weights", "value": gap,
                              "weights": weight}
    else:
        top = max(priority)
        share = sum(flits[k] for k in range(ports) if priority[k] == top) / stats["flits"]
        result["fairness"] = {"metric": "top_priority_flit_share", "value": share,
                              "priorities": priority}
    return result


def bench_arbiter(ports=8, lanes=1, cycles=4000, max_flits=8, seed=1, policies=None,
                  progress=None):
    """Run the saturation benchmark for each policy; returns a JSON-serialisable dict."""
    policies = [Policy(p) for p in (policies or [p.value for p in Policy])]
    results = []
    for policy in policies:
        if progress:
            progress(f"arbiter {policy.value}: {cycles} cycles, {ports} ports")
        results.append(_run_policy(ports, lanes, policy, cycles, max_flits, seed))
    return {"benchmark": "arbiter", "ports": ports, "lanes": lanes, "cycles": cycles,
            "max_flits": max_flits, "seed": seed, "simulator": "amaranth",
            "results": results}
