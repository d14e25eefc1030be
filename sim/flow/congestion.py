"""Why a design does not route: router2's per-iteration heatmaps (``--router2-heatmap``) summed
by block, by bus, by wire type and by tile (``innet synth --congestion``, docs/hw.md,
Synthesis; :func:`sim.flow.watch.run_nextpnr` runs router2 under the time budget)."""

import re
from pathlib import Path

from sim.flow.names import block_of, net_group

__all__ = ["HEATMAP_PREFIX", "congestion_report", "congestion_summary", "congestion_grid",
           "wires_by_type"]


#: The prefix of router2's heatmap files in the work directory (``--router2-heatmap``): one
#: ``{prefix}_congestion_by_net_{iteration}.csv`` per routing iteration, among others.
HEATMAP_PREFIX = "heatmap"


def congestion_by_net(csv_text):
    """``{net: overused wires}`` from one of router2's ``congestion_by_net`` heatmaps (lines
    of ``net,count``)."""
    counts = {}
    for line in csv_text.splitlines():
        name, _, count = line.rpartition(",")
        if name and count.strip().isdigit():
            counts[name] = counts.get(name, 0) + int(count)
    return counts


#: The ECP5's general routing wires (span 0, 1, 2 and 6 tiles, horizontal and vertical), the
#: ones placement congests; router2's per-wire-type heatmap counts every wire type.
ROUTING_WIRES = ("H00", "H01", "H02", "H06", "V00", "V01", "V02", "V06")


def wires_by_type(csv_text):
    """``{wire type: {"wires", "used", "overused"}}`` for :data:`ROUTING_WIRES` from one of
    router2's ``congestion_by_wiretype`` heatmaps (a row per type: how many of its wires are
    bound to 0, 1, 2, ... nets). Used is bound to at least one net, overused to more."""
    found = {}
    for line in csv_text.splitlines():
        cells = [cell for cell in line.split(",") if cell]
        kind = cells[0].removeprefix("WIRE_TYPE_") if cells else ""
        if kind in ROUTING_WIRES and all(cell.isdigit() for cell in cells[1:]):
            bound = [int(cell) for cell in cells[1:]]
            found[kind] = {"wires": sum(bound), "used": sum(bound[1:]),
                           "overused": sum(bound[2:])}
    return found


def congestion_summary(workdir, log, iteration, groups=12):
    """Routing iteration ``iteration``'s congestion: the overused wires the log reports, and
    router2's per-net heatmap summed by block (:func:`block_of`, as ``luts_by_block``) and by
    :func:`net_group` (the largest ``groups``) — a wire two nets share counts for both — and
    the device's routing wires in use by type (:func:`wires_by_type`: whether the congestion
    is local or the placement wants most of the device's wiring). None if that iteration wrote
    no heatmap."""
    path = Path(workdir) / f"{HEATMAP_PREFIX}_congestion_by_net_{iteration}.csv"
    if not path.exists():
        return None
    nets = congestion_by_net(path.read_text())
    by_block, by_group = {}, {}
    for name, count in nets.items():
        block, group = block_of(name), net_group(name)
        by_block[block] = by_block.get(block, 0) + count
        by_group[group] = by_group.get(group, 0) + count
    stats = re.search(rf"iter={iteration} wires=(\d+) overused=(\d+)", log)
    kinds = Path(workdir) / f"{HEATMAP_PREFIX}_congestion_by_wiretype_{iteration}.csv"

    def largest(counts, limit=None):
        ranked = sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: (-kv[1], kv[0]))
        return dict(ranked[:limit])

    return {"iteration": iteration,
            "wires": int(stats.group(1)) if stats else None,
            "overused_wires": int(stats.group(2)) if stats else None,
            "by_block": largest(by_block), "by_net": largest(by_group, groups),
            "wires_by_type": wires_by_type(kinds.read_text()) if kinds.exists() else {}}


def congestion_grid(workdir, iteration):
    """Routing iteration ``iteration``'s congestion by tile: ``grid[x][y]`` is the sum over the
    tile's overused wires of the nets bound to each (router2's ``congestion_by_coordinate``
    heatmap: a line per column x, a value per row y). None if that iteration wrote none."""
    path = Path(workdir) / f"{HEATMAP_PREFIX}_congestion_by_coordinate_{iteration}.csv"
    if not path.exists():
        return None
    return [[int(cell) for cell in line.split(",") if cell.strip()]
            for line in path.read_text().splitlines() if line.strip()]


def congestion_report(workdir, log, budget_s, stopped):
    """``innet synth --congestion``'s report: the first routing iteration's congestion (the
    wiring the placement asks for) and the last one's (what negotiation could not resolve)."""
    done = [int(m.group(1)) for path in Path(workdir).glob(
                f"{HEATMAP_PREFIX}_congestion_by_net_*.csv")
            if (m := re.search(r"_(\d+)\.csv$", path.name))]
    last = max(done, default=0)
    return {"router": "router2", "budget_s": budget_s, "stopped": stopped, "iterations": last,
            "first": congestion_summary(workdir, log, 1) if last else None,
            "last": congestion_summary(workdir, log, last) if last else None}
