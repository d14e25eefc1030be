"""Amaranth-simulator harness for the reduction unit, shared by its tests.

Drives contribution packets on every port (with random idle gaps: skew between ports), applies
random backpressure on every egress, collects the result packets, and returns them."""

import random

import numpy as np
from amaranth.sim import Simulator

from hw.packet import (DType, Header, Kind, Packet, flits_to_packets, packet_to_flits,
                       unpack_flit)
from hw.reduce import ERROR_CAUSES


def contribution(port, job, slot, seq, words, dtype, kind=Kind.REDUCE_CONTRIB, src=None):
    header = Header(kind=kind, src=port if src is None else src, dst=0, job=job, slot=slot,
                    seq=seq, dtype=dtype)
    return Packet(header, words)


def flatten_traffic(traffic, ports):
    """``{port: [Packet or (Packet, gate)]}`` → ``(flits, gates)``: per port the flit ints in
    order, and ``{flit index: gate}`` for packets that wait for a result ``(job, seq)``."""
    flits, gates = {}, {}
    for k in range(ports):
        flits[k], gates[k] = [], {}
        for item in traffic.get(k, []):
            packet, gate = item if isinstance(item, tuple) else (item, None)
            if gate is not None:
                gates[k][len(flits[k])] = gate
            flits[k].extend(packet_to_flits(packet))
    return flits, gates


async def configure_jobs(ctx, cfg, table):
    """Write ``{job: (members, dtype, saturate[, slot_base, slot_count])}`` through a
    reduction configuration port, one job per cycle (no slot range: the whole pool)."""
    for job, (members, dtype, sat, *slots) in table.items():
        base, count = slots or (0, 0)
        ctx.set(cfg.slot_base, base)
        ctx.set(cfg.slot_count, count)
        ctx.set(cfg.valid, 1)
        ctx.set(cfg.job, job)
        ctx.set(cfg.enable, 1)
        ctx.set(cfg.members, sum(1 << k for k in members))
        ctx.set(cfg.dtype, dtype)
        ctx.set(cfg.saturate, int(sat))
        await ctx.tick()
    ctx.set(cfg.valid, 0)


def run_unit(unit, jobs, traffic, *, seed=0, idle=0.0, stall=0.0, max_cycles=20000,
             reconfigure=None):
    """Simulate ``unit``.

    jobs: {job: (members, dtype, saturate)} written through the config port before traffic.
    traffic: {port: [Packet or (Packet, gate), ...]} presented in order on each port; a gate
        ``(job, seq)`` holds the packet until that result has arrived at the port's egress
        (closed-loop slot reuse).
    reconfigure: optional {cycle: {job: (members, dtype, saturate)}} applied mid-run.
    Returns (results per egress as lists of Packets, error counters dict, overflow, cycles).
    """
    rng = random.Random(seed)
    N, L = unit.ports, unit.lanes
    flits, gates = flatten_traffic(traffic, N)
    received = {k: set() for k in range(N)}
    outputs = {k: [] for k in range(N)}
    result = {}

    async def configure(ctx, table):
        for k in range(N):   # no traffic while the configuration port is written
            ctx.set(unit.i[k].valid, 0)
        await configure_jobs(ctx, unit.cfg, table)

    async def bench(ctx):
        await configure(ctx, jobs)
        pos = {k: 0 for k in range(N)}
        expected_flits = None
        for cycle in range(max_cycles):
            if reconfigure and cycle in reconfigure:
                await configure(ctx, reconfigure[cycle])
            for k in range(N):
                gate = gates[k].get(pos[k])
                send = pos[k] < len(flits[k]) and (idle == 0 or rng.random() >= idle) and \
                    (gate is None or gate in received[k])
                ctx.set(unit.i[k].valid, send)
                if send:
                    ctx.set(unit.i[k].payload.as_value(), flits[k][pos[k]])
                    if ctx.get(unit.i[k].ready):   # low while the port's hold FIFO is full
                        pos[k] += 1
                ready = stall == 0 or rng.random() >= stall
                ctx.set(unit.o[k].ready, ready)
                if ready and ctx.get(unit.o[k].valid):
                    bits = ctx.get(unit.o[k].payload.as_value())
                    outputs[k].append(bits)
                    header, _, last = unpack_flit(L, bits)
                    if last:
                        received[k].add((header.job, header.seq))
            await ctx.tick()
            idle_now = all(pos[k] == len(flits[k]) for k in range(N))
            if idle_now:
                if expected_flits is None:
                    expected_flits = cycle
                elif cycle - expected_flits > 200 and not any(
                        ctx.get(unit.o[k].valid) for k in range(N)):
                    break
        result["cycles"] = cycle
        result["errors"] = {c: ctx.get(unit.errors[i]) for i, c in enumerate(ERROR_CAUSES)}
        result["overflow"] = ctx.get(unit.overflow)
        result["reductions"] = ctx.get(unit.reductions)

    sim = Simulator(unit)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    packets = {k: flits_to_packets(L, outputs[k]) for k in range(N)}
    return packets, result


def random_words(rng, dtype, shape):
    if dtype == DType.INT32:
        return rng.integers(-(1 << 31), 1 << 31, size=shape, dtype=np.int64).astype(np.uint32)
    if dtype == DType.FP32:
        return rng.standard_normal(size=shape).astype(np.float32).view(np.uint32)
    halves = (rng.standard_normal(size=shape + (2,)).astype(np.float32).view(np.uint32)
              >> 16).astype(np.uint32)
    return halves[..., 0] | (halves[..., 1] << 16)
