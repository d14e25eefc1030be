"""One all-reduce through the switch, ring against in-switch, and the slot pool's
bandwidth-delay product (``innet allreduce``; docs/replay.md).

An in-switch reduction holds a slot from its chunk's first contribution flit until the result
is back at the GPUs and the next contribution for that slot has crossed the link again: the
result is the credit (docs/hw.md, "Self-clocking slots"). With ``S`` slots of ``C`` bytes and
that round trip ``R`` the reduction moves at most ``S·C/R`` — whatever the line rate. A ring
all-reduce holds no switch state but takes ``2(N−1)`` dependent steps, each a link round trip.
:func:`allreduce_trace` writes one all-reduce of either kind as trace records (the GPU model's
own message expansion, :func:`sim.gpu.collectives.expand_collective`), :func:`measure` replays
it on any backend, and :func:`slot_bound` is the closed form the measurement is held to.
"""

import math
from dataclasses import replace

from sim.gpu.collectives import SWITCH, expand_collective, piece_dependencies
from sim.replay.plan import build_plan
from sim.trace.format import SWITCH_PORT, TraceRecord

__all__ = ["allreduce_trace", "measure", "slot_bound", "sweep", "SIZES", "ALGORITHMS"]

#: The algorithms an all-reduce sweep compares.
ALGORITHMS = ("ring", "inswitch")
#: Default message sizes, bytes: 4 KiB to 16 MiB in steps of 4.
SIZES = tuple(4096 * 4 ** k for k in range(7))


def allreduce_trace(algo, gpus, nbytes, piece_bytes):
    """``(meta, records)``: one all-reduce of ``nbytes`` per GPU over ``gpus`` GPUs, every
    message cut into pieces of at most ``piece_bytes`` (a ring step's piece k waits for piece
    k of the previous step, as :mod:`sim.trace.generate` writes them). Everything is issued at
    time 0; dependencies order the rest."""
    records, piece_ids = [], []
    for m in expand_collective(algo, gpus, nbytes):
        if m.src == SWITCH:   # results are the switch's output: the replay makes them
            piece_ids.append([])
            continue
        ids = []
        for k in range(max(1, -(-m.nbytes // piece_bytes))):
            size = min(piece_bytes, m.nbytes - k * piece_bytes)
            rid = len(records)
            ids.append(rid)
            peer = SWITCH_PORT if m.dst == SWITCH else m.dst
            records.append(TraceRecord.grad(gpu=m.src, peer=peer, id=rid, time_ns=0,
                                            bytes=size, algo=algo, bucket=0,
                                            chunk=(m.chunk * 4096 + k) & 0xFFFF,
                                            ).with_dependencies(
                                                piece_dependencies(m, k, piece_ids)))
        piece_ids.append(ids)
    return {"gpus": gpus, "generator": "sim.replay.allreduce", "algo": algo,
            "bytes": nbytes}, records


def slot_bound(config):
    """The closed form an in-switch all-reduce is held to, from the switch specification
    and the link hop alone (no replay).

    Returns a dict: ``switch_cycles`` — an unloaded chunk's first contribution flit in to its
    last result flit out (ingress latency, the chunk's P flits in, the judge's wait for the
    member judged last, the hold FIFO/arrival/pick registers, the reduction pipeline, the
    result FIFO, the egress arbiter and register, the P flits out); ``round_trip_cycles``
    R — a slot's whole cycle: that, plus the credit's way back (one cycle, then two link hops);
    ``bound_gbps`` — S·C/R in GB/s; ``line_gbps``; ``limit_gbps`` — the smaller.
    """
    spec = config.switch
    P = config.chunk_flits
    # The last contribution flit is at the reduction unit ingress_latency + P − 1 cycles after
    # the first entered; the member judged last waits judge_wait_cycles (ports − 1) for the
    # one judge's turn (every member's header arrives in the same cycle); the engine may start
    # the chunk engine_pick_latency cycles after its last flit would have entered without
    # that wait (the hold FIFO, the registered arrival, the pick) and its result's first
    # flit reaches the egress result_latency cycles after that (the reduction pipeline, then
    # the result FIFO's write and registered read) and leaves the switch egress_latency
    # cycles after that (the arbiter's registered choice, the link register, the egress
    # stage); its last flit leaves P − 1 cycles later.
    # All are the switch specification's, the ones the fast model and the RTL run on
    # (tests/test_cosim.py, test_model_reduction_latency).
    switch = (spec.ingress_latency + P - 1 + spec.judge_wait_cycles + spec.engine_pick_latency
              + spec.result_latency + spec.egress_latency + P - 1)
    R = switch + 1 + 2 * config.link_cycles
    bound = config.slots * config.chunk_bytes / (R * config.cycle_ns)
    return {"switch_cycles": switch, "round_trip_cycles": R,
            "round_trip_ns": R * config.cycle_ns, "slot_bytes": config.slots * config.chunk_bytes,
            "bound_gbps": bound, "line_gbps": config.link_gbps,
            "limit_gbps": min(bound, config.link_gbps)}


def measure(config, algo, nbytes, gpus=None, backend=None, piece_bytes=None):
    """Replay one all-reduce of ``nbytes`` per GPU on ``config``'s switch.

    ``backend``: a :class:`sim.replay.backend.ReplayBackend` (default the fast model's C core,
    else its Python reference). ``piece_bytes``: trace message pieces (default one MTU). The
    time is the GPUs': from the first flit leaving a GPU to the last byte of the result
    arriving at a GPU (the switch's span plus a link hop at each end).

    Returns a dict with ``time_us``, ``algbw_gbps`` (nbytes / time), ``cycles`` (the GPUs'
    span in switch cycles), ``packets``, ``flits`` and the replay itself under ``"replay"``.
    """
    from sim.model.switch import replay_model

    gpus = gpus or config.ports
    piece = piece_bytes or config.flit_bytes * config.mtu_flits
    meta, records = allreduce_trace(algo, gpus, nbytes, piece)
    plan = build_plan(meta, records, config, path=f"{algo} all-reduce of {nbytes} B")
    result = backend.run(plan) if backend is not None else replay_model(plan)
    L = config.link_cycles
    start = min(m.issue for m in plan.messages) - L
    cycles = result.cycles + L - start
    time_ns = cycles * config.cycle_ns
    return {"algo": algo, "bytes": nbytes, "gpus": gpus, "cycles": int(cycles),
            "time_us": time_ns / 1e3, "algbw_gbps": nbytes / time_ns,
            "packets": int(plan.packets), "flits": int(plan.flits.sum()),
            "wall_s": result.wall_s, "replay": result}


def sweep(config, slots=(64,), chunk_flits=(8,), sizes=SIZES, algorithms=ALGORITHMS,
          progress=None):
    """All-reduce time and bandwidth over ``slots × chunk_flits × sizes`` (in-switch) and
    ``sizes`` (ring, which holds no slots), on ``config``'s switch otherwise.

    Returns ``{"rows": [...], "bounds": [...], "crossover": [...]}``: a row per replay
    (``algo``, ``slots``, ``chunk_bytes``, ``bytes``, ``time_us``, ``algbw_gbps``,
    ``bound_gbps`` for in-switch rows), the closed form per (slots, chunk), and per in-switch
    curve the message sizes it beats ring at (:func:`findings`)."""
    rows, bounds = [], []
    if "ring" in algorithms:
        for nbytes in sizes:
            if progress:
                progress(f"ring, {nbytes:,} B")
            r = measure(config, "ring", nbytes)
            r.pop("replay")
            rows.append(r | {"slots": None, "chunk_bytes": None})
    if "inswitch" in algorithms:
        for s in slots:
            for p in chunk_flits:
                cfg = replace(config, slots=s, chunk_flits=p)
                bound = slot_bound(cfg)
                bounds.append({"slots": s, "chunk_bytes": cfg.chunk_bytes, **bound})
                for nbytes in sizes:
                    if progress:
                        progress(f"in-switch, {s} slots of {cfg.chunk_bytes} B, {nbytes:,} B")
                    r = measure(cfg, "inswitch", nbytes)
                    r.pop("replay")
                    rows.append(r | {"slots": s, "chunk_bytes": cfg.chunk_bytes,
                                     "bound_gbps": bound["limit_gbps"]})
    return {"rows": rows, "bounds": bounds, "findings": findings(rows)}


def findings(rows):
    """Per in-switch curve (slots, chunk bytes): the sizes where it is faster than ring, its
    best bandwidth, and a sentence saying which sizes benefit."""
    ring = {r["bytes"]: r for r in rows if r["algo"] == "ring"}
    curves = {}
    for r in rows:
        if r["algo"] == "inswitch":
            curves.setdefault((r["slots"], r["chunk_bytes"]), []).append(r)
    out = []
    for (s, c), pts in curves.items():
        wins = [p["bytes"] for p in pts if p["bytes"] in ring
                and p["time_us"] < ring[p["bytes"]]["time_us"]]
        speedups = {p["bytes"]: ring[p["bytes"]]["time_us"] / p["time_us"]
                    for p in pts if p["bytes"] in ring}
        best = max(p["algbw_gbps"] for p in pts)
        out.append({"slots": s, "chunk_bytes": c, "faster_than_ring_bytes": wins,
                    "speedup_over_ring": speedups, "best_algbw_gbps": best,
                    "bound_gbps": pts[0].get("bound_gbps")})
    return out


def _size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:g} {unit}" if v == math.floor(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def sentence(result):
    """The sweep's answer in words: which sizes the in-switch all-reduce wins and why."""
    ring = [r for r in result["rows"] if r["algo"] == "ring"]
    lead = ""
    if ring:
        small, big = min(ring, key=lambda r: r["bytes"]), max(ring, key=lambda r: r["bytes"])
        ins = [r for r in result["rows"] if r["algo"] == "inswitch"
               and r["bytes"] == small["bytes"]]
        lead = (f"Small all-reduces are latency-bound: ring takes {small['time_us']:.1f} us "
                f"for {_size(small['bytes'])} (2(N-1) dependent steps, each a link round "
                f"trip) where in-switch takes "
                f"{min(r['time_us'] for r in ins):.2f} us (one round trip), so in-switch "
                f"wins every small size. Large ones are bandwidth-bound: ring reaches "
                f"{big['algbw_gbps']:.0f} GB/s at {_size(big['bytes'])} (line rate over "
                f"2(N-1)/N), in-switch at most min(line rate, S*C/R), so a slot pool whose "
                f"S*C/R is below ring's bandwidth stops paying off once the message fills "
                f"the pool. " if ins else "")
    parts = []
    for f in result["findings"]:
        wins = sorted(f["faster_than_ring_bytes"])
        sizes = sorted(f["speedup_over_ring"])
        if not wins:
            where = "never faster than ring"
        elif wins == sizes:
            where = "faster than ring at every size"
        elif wins == sizes[:len(wins)]:
            where = f"faster than ring up to {_size(wins[-1])}"
        else:
            where = f"faster than ring at {', '.join(_size(w) for w in wins)}"
        parts.append(f"{f['slots']} slots x {_size(f['chunk_bytes'])} "
                     f"(S*C/R {f['bound_gbps']:.0f} GB/s): {where}, best "
                     f"{f['best_algbw_gbps']:.0f} GB/s")
    return lead + "; ".join(parts) + "."
