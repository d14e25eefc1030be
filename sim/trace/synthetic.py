"""Synthetic switch traffic as trace records: the stress traces of the cross-validation tests
and of ``innet bench cosim``.

:func:`stress_trace` mixes, on every GPU, memory writes and reads to random peers (random sizes
and issue times, some waiting on a message the GPU received — ring-like chains) with in-switch
reduction pieces from every GPU, so egress arbiters see memory traffic and multicast results
at once, ingress FIFOs fill, and contributions wait for slot credits.
"""

import random
from dataclasses import replace

from sim.trace.format import SWITCH_PORT, TraceRecord

__all__ = ["stress_trace"]


def stress_trace(gpus=4, messages=40, pieces=6, max_bytes=4096, piece_bytes=2048,
                 span_ns=20_000, reads=True, seed=1):
    """``(metadata, records)`` of a random mixed trace (times in ns, sizes in bytes)."""
    rng = random.Random(seed)
    records = []
    received = {g: [] for g in range(gpus)}   # record ids each GPU has received
    for _ in range(messages * gpus):
        g = rng.randrange(gpus)
        peer = rng.choice([p for p in range(gpus) if p != g])
        op = "read" if reads and rng.random() < 0.15 else "write"
        dep = None
        if received[g] and rng.random() < 0.3:
            dep = rng.choice(received[g])
        rid = len(records)
        records.append(TraceRecord.mem(gpu=g, peer=peer, id=rid, time_ns=rng.randrange(span_ns),
                                       bytes=rng.randrange(1, max_bytes), op=op, dependency=dep))
        received[peer].append(rid)
    for piece in range(pieces):
        t0 = rng.randrange(span_ns)
        for g in range(gpus):
            records.append(TraceRecord.grad(gpu=g, peer=SWITCH_PORT, id=len(records),
                                            time_ns=t0 + rng.randrange(200), bytes=piece_bytes,
                                            algo="inswitch", bucket=piece, chunk=0))
    # Dependencies must name earlier records: order by time, keep each dependency before its
    # dependant by issuing the dependant no earlier than what it waits for.
    order = sorted(records, key=lambda r: (r.time_ns, r.id))
    position = {r.id: i for i, r in enumerate(order)}
    fixed = []
    for r in order:
        if r.dependency is not None and position[r.dependency] > position[r.id]:
            r = r.with_dependency(None)
        fixed.append(r)
    renumber = {r.id: i for i, r in enumerate(fixed)}
    out = [replace(r, id=renumber[r.id]).with_dependency(
               None if r.dependency is None else renumber[r.dependency]) for r in fixed]
    meta = {"gpus": gpus, "generator": "sim.trace.synthetic.stress_trace", "seed": seed}
    return meta, out
