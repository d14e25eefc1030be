"""cocotb test module behind :func:`sim.bench_numerics.permutations_rtl`: the same contributions
reduced again and again through the exported switch, arriving in a different member order
each time; every result must be bit-identical to the numpy golden.

Environment: ``INNET_NUMERICS`` (input pickle: ports, lanes, chunk_flits, permutations,
seed), ``INNET_RESULT`` (output pickle).
"""

import math
import os
import pickle
import random
import time
from pathlib import Path

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from hw.packet import DType
from sim.cosim.pins import SwitchPins, arbiter_defaults, read_counters, start_clock
from sim.cosim.stimulus import contribution_user, tdata
from sim.reliability.numerics import edge_contributions
from sim.model.reduce import add_words, reduce_words

_JOBS = {DType.FP32: 1, DType.BF16: 2, DType.INT32: 3}


@cocotb.test()
async def permutations(dut):
    p = pickle.loads(Path(os.environ["INNET_NUMERICS"]).read_bytes())
    N, L, P, count = p["ports"], p["lanes"], p["chunk_flits"], p["permutations"]
    rng = random.Random(p["seed"])
    start_clock(dut)
    pins = SwitchPins(dut, N)
    rising, read_only = RisingEdge(dut.clk), ReadOnly()
    arbiter_defaults(dut)
    pins.idle()
    pins.set_ready([1] * N)
    dut.rst.value = 1
    for _ in range(3):
        await rising
    dut.rst.value = 0
    members = list(range(N))
    for dtype, job in _JOBS.items():
        await rising
        dut.cfg_valid.value = 1
        for name, value in (("job", job), ("enable", 1), ("members", (1 << N) - 1),
                            ("dtype", dtype.value), ("saturate", 0), ("slot_base", 0),
                            ("slot_count", 0)):
            getattr(dut, f"cfg_{name}").value = value
    await rising
    dut.cfg_valid.value = 0

    data = {d: edge_contributions(d, N, P, L, p["seed"]) for d in _JOBS}
    golden = {d: [tdata(row) for row in reduce_words(data[d], members, d)[0]] for d in _JOBS}
    first = {}
    mismatches, orders = 0, set()
    began = time.perf_counter()
    dtypes = list(_JOBS)
    distinct_limit = math.factorial(N)
    for index in range(count):
        dtype = dtypes[index % len(dtypes)]
        order = members[:]
        rng.shuffle(order)
        while tuple(order) in orders and len(orders) < distinct_limit:   # distinct orders
            rng.shuffle(order)
        orders.add(tuple(order))
        user = contribution_user(job=_JOBS[dtype], dtype=dtype, slot=index % 8, seq=index)
        # Port order[r] starts once order[r-1] has sent its whole contribution (plus jitter),
        # so the switch sees the contributions complete in exactly this order.
        queue = []
        for k in order:
            queue += [None] * rng.randint(0, 3)
            queue += [(k, (tdata(data[dtype][k][f]), user, 0, k, int(f == P - 1)))
                      for f in range(P)]
        results = {}
        rx = [[] for _ in range(N)]
        shown = None   # (port, beat) on the pins, not yet accepted
        taken = None   # the port whose beat was accepted last cycle (tvalid still high)
        while len(results) < N:
            await rising
            if shown is None and queue:
                item = queue.pop(0)
                if item is not None:
                    pins.apply([item])
                    shown = item
            if taken is not None and (shown is None or shown[0] != taken):
                pins.apply([(taken, None)])
            taken = None
            await read_only
            for d, beat in enumerate(pins.egress()):
                if beat is not None:
                    rx[d].append(beat)
                    if beat[4]:
                        results[d] = [b[0] for b in rx[d]]
                        rx[d] = []
            if shown is not None and pins.accepted()[shown[0]]:
                taken, shown = shown[0], None
        await rising
        if taken is not None:
            pins.apply([(taken, None)])
        for d, words in results.items():
            if words != golden[dtype] or words != first.setdefault(dtype, words):
                mismatches += 1
    wall = time.perf_counter() - began
    errors = read_counters(dut)
    Path(os.environ["INNET_RESULT"]).write_bytes(pickle.dumps({
        "permutations": count, "distinct_orders": len(orders), "mismatches": mismatches,
        "results_checked": count * N, "wall_s": wall, "errors": errors,
        "naive_distinct": {d.name.lower(): _naive_distinct(data[d], d, rng, 200)
                           for d in (DType.FP32, DType.BF16)}}))


def _naive_distinct(contribs, dtype, rng, trials):
    """How many different sums a naive adder accumulating in arrival order gives over
    ``trials`` random orders: evidence that the order matters for these values."""
    ports = list(contribs)
    seen = set()
    for _ in range(trials):
        rng.shuffle(ports)
        acc = contribs[ports[0]]
        for k in ports[1:]:
            acc = add_words(acc, contribs[k], dtype)
        seen.add(acc.tobytes())
    return len(seen)
