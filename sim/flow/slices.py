"""How many of the ECP5's slices a placed design occupies, and why more than its LUT4s alone
would: a slice holds two LUT4s and two flip-flops, and a flip-flop placed in a slice of its own
(beside a block RAM it feeds, say) takes the slice's two LUT sites out of use. nextpnr reports
LUT4s and flip-flops separately; the router sees slices. Read from the netlist nextpnr writes
after placing (``--write``; docs/timing-closure.md, "Slices, not LUT4s")."""

import re

from sim.flow.names import net_group

__all__ = ["PLACED_NETLIST", "slice_use"]

#: The placed netlist nextpnr writes in the work directory (``--write``).
PLACED_NETLIST = "placed.json"

_SLICE_BEL = re.compile(r"X(\d+)/Y(\d+)/(SLICE[A-D])\.")


def _top(netlist):
    modules = netlist["modules"]
    tops = [m for m in modules.values() if m.get("attributes", {}).get("top")]
    return tops[0] if tops else next(iter(modules.values()))


def _q_names(module):
    """Net bit → the name of a net carrying it: the first plain name in sorted order (a bit can
    carry several, and names with ``$`` are Yosys's own)."""
    names = {}
    for name in sorted(module["netnames"], key=lambda n: ("$" in n, n)):
        for bit in module["netnames"][name]["bits"]:
            if isinstance(bit, int):
                names.setdefault(bit, name)
    return names


def slice_use(netlist, slices_available, groups=8):
    """Slice occupancy of a placed nextpnr-ecp5 netlist (parsed ``--write`` output):
    ``slices`` occupied (any LUT4, flip-flop or LUT-RAM cell in it) of ``slices_available``;
    of those, ``flip_flop_only`` (flip-flops and no LUT4), ``one_lut`` (one LUT4 of two);
    ``idle_lut_sites``, the LUT sites left empty in occupied slices (the slices beyond
    LUT4s / 2); and ``flip_flop_only_by_bus``, the flip-flops in slices of their own by the
    bus they drive (:func:`sim.flow.names.net_group`), the largest ``groups``."""
    module = _top(netlist)
    luts, ff_nets, occupied = {}, {}, set()
    for cell in module["cells"].values():
        match = _SLICE_BEL.match(cell.get("attributes", {}).get("NEXTPNR_BEL", ""))
        if not match:
            continue   # block RAM, multipliers, unplaced cells
        key = match.group(1, 2, 3)
        occupied.add(key)
        if cell["type"] == "TRELLIS_COMB":
            luts[key] = luts.get(key, 0) + 1
        elif cell["type"] == "TRELLIS_FF":
            ff_nets.setdefault(key, []).extend(cell["connections"].get("Q", []))
    names = _q_names(module)
    ff_only = [key for key in ff_nets if key not in luts]
    by_bus = {}
    for key in ff_only:
        for bit in ff_nets[key]:
            bus = net_group(names.get(bit, "(unnamed)"))
            by_bus[bus] = by_bus.get(bus, 0) + 1
    ranked = sorted(by_bus.items(), key=lambda kv: (-kv[1], kv[0]))[:groups]
    return {"slices": len(occupied), "slices_available": slices_available,
            "flip_flop_only": len(ff_only),
            "one_lut": sum(1 for key in occupied if luts.get(key, 0) == 1),
            "idle_lut_sites": sum(2 - min(2, luts.get(key, 0)) for key in occupied),
            "flip_flop_only_by_bus": dict(ranked)}
