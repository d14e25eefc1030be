"""A floorplan for the reduction unit's banks: each block RAM fixed to a site of the ECP5-85,
lanes by column and ports by row.

Every flit's data moves lane by lane: lane l of an ingress goes to lane l of its hold FIFO, of
its bank, of the adder tree, of the result FIFO and of every egress. Only the headers and the
control cross lanes. The banks are the one part of that way whose sites are few and fixed
(four rows of 52 block RAMs on the ECP5-85); nextpnr's placers, left to themselves, put a
lane's eight banks only loosely together, over one to three rows and overlapping the next
lane's, so the lanes' wires cross. This pass fixes each bank's block RAM to a
site (nextpnr's ``BEL`` attribute on the cell, its one placement constraint this flow can
reach: the YoWASP nextpnr-ecp5 has no Python, so no regions) in a grid: lane l in the l-th of
``lanes`` vertical stripes of the block-RAM columns, port k in row ``k × 4 // ports``. The
rest of each lane's logic is then pulled toward its stripe by its nets alone
(docs/timing-closure.md, "The banks placed by lane and port").

It works on Yosys's JSON netlist between Yosys and nextpnr, as :mod:`sim.flow.outreg` does;
no cycle changes (the netlist is the same, only where its block RAMs sit).
"""

import re

__all__ = ["EBR_COLUMNS", "EBR_ROWS", "pin_banks", "FloorplanError"]

#: The ECP5-85's block-RAM sites (``DP16KD``) in each row: ``(x, bel)``, thirteen groups of
#: four, as nextpnr names them in the placed netlists it writes (``X4/Y22/EBR0``); the
#: group after x = 58 starts at 69, past the die's middle column.
EBR_COLUMNS = [(x0 + 2 * i, f"EBR{i}")
               for x0 in (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114)
               for i in range(4)]
#: The rows of block RAMs, bottom to top of nextpnr's grid (y).
EBR_ROWS = [22, 46, 70, 82]

#: A bank's block RAM as Yosys names it: ``…reduce.bank3_lane5…`` (hw.reduce: a memory per
#: port and lane).
_BANK = re.compile(r"(?:^|\.)bank(\d+)_lane(\d+)(?:\.|$)")


class FloorplanError(ValueError):
    """The banks do not fit the grid (more block RAMs per port and lane than a stripe's
    share of a row has sites)."""


def pin_banks(netlist, top, ports, lanes):
    """Fix each bank block RAM of ``top`` in Yosys's JSON ``netlist`` (changed in place) to a
    site: lane l's in the l-th of ``lanes`` stripes of :data:`EBR_COLUMNS`, port k's in row
    :data:`EBR_ROWS` ``[k × len(rows) // ports]``, the ports that share a row side by side
    in the stripe, a port's several block RAMs of one lane (a deeper bank) next to each
    other. Returns ``{"block_rams": n, "sites": {cell: site}}``.

    Raises
    ------
    FloorplanError
        If a port's block RAMs of one lane do not fit its share of a stripe's row, or a bank
        block RAM names a port or lane outside ``ports`` × ``lanes``.
    """
    cells = netlist["modules"][top]["cells"]
    banks = {}
    for name in sorted(cells):
        cell = cells[name]
        found = _BANK.search(name) if cell["type"] == "DP16KD" else None
        if found:
            k, lane = int(found[1]), int(found[2])
            if k >= ports or lane >= lanes:
                raise FloorplanError(f"block RAM {name!r} is port {k} lane {lane}, outside "
                                     f"{ports} ports x {lanes} lanes")
            banks.setdefault((k, lane), []).append(name)
    rows = len(EBR_ROWS)
    per_row = -(-ports // rows)                       # ports sharing a row
    stripe = len(EBR_COLUMNS) // lanes                # sites per lane in each row
    share = stripe // per_row                         # sites per port and lane
    sites = {}
    for (k, lane), names in banks.items():
        if len(names) > share:
            raise FloorplanError(
                f"port {k} lane {lane} has {len(names)} block RAMs; its share of a row is "
                f"{share} site(s) ({len(EBR_COLUMNS)} per row, {lanes} lanes, {per_row} "
                f"ports a row)")
        row = EBR_ROWS[k * rows // ports]
        first = lane * len(EBR_COLUMNS) // lanes + (k % per_row) * share
        for j, name in enumerate(names):
            x, bel = EBR_COLUMNS[first + j]
            site = f"X{x}/Y{row}/{bel}"
            cells[name].setdefault("attributes", {})["BEL"] = site
            sites[name] = site
    return {"block_rams": len(sites), "sites": sites}
