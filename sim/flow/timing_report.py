"""Which registers are too slow for a frequency: nextpnr's per-endpoint arrival times
(``--report FILE --detailed-timing-report``) summed by the register they clock into.

The slack histogram (``endpoints`` in ``innet synth --json``) says how many timing endpoints
a routed design has too slow for a target, not which. nextpnr's detailed report lists, for
every net that drives a timing endpoint, each endpoint's arrival time: the latest time after
the launching clock edge its value settles there, over every path into it (clock-to-out,
logic and routing; the slack histogram's slack is the period less it). Grouped by the register
(or memory) an endpoint belongs to, with its bit indices dropped and numbers as ``*`` so the
eight ports' copies of one register are one row, and by the kind of pin (:data:`PINS`: the
data a flip-flop takes, or its clock enable, or a LUT-RAM's write address...), they name the
transfers a faster clock has to pipeline, and whether each is data or the control that steers
it (docs/hw.md, Synthesis: ``slow_registers``).
"""

import re

from sim.flow.names import block_of, net_group

__all__ = ["REPORT_NAME", "PINS", "register_of", "pin_of", "endpoint_arrivals",
           "slow_registers"]

#: The report's file name in the work directory (a seed sweep's: one per seed,
#: ``timing-report-seed{N}.json``).
REPORT_NAME = "timing-report.json"

# Yosys names a mapped cell after the net it drives plus the cell type and port it was
# mapped to (`judge_gathered_TRELLIS_FF_Q_12`, `hold3.mem_TRELLIS_DPR16X4_...`): what comes
# before the first such tag is the register's name.
_CELL_TAG = re.compile(r"_(TRELLIS_[A-Z0-9]+|DP16KD|DPR16X4|LUT4|CCU2C|PFUMX|L6MUX21|"
                       r"MULT18X18D|ALU54B)(_|$)")


#: The ECP5 primitives' timing endpoints by kind, as ``pin_of`` names them (the pin's name
#: without its bit number): a flip-flop's data (``DI`` from its slice's LUT, ``M`` from
#: routing), clock enable and set/reset; a LUT-RAM's write data, write address and write
#: enable; a block RAM's address, data in, write and chip select, clock enable and reset.
PINS = {"DI": "data", "M": "data", "CE": "clock enable", "LSR": "set/reset",
        "WD": "LUT-RAM write data", "WAD": "LUT-RAM write address",
        "WRE": "LUT-RAM write enable", "ADA": "block RAM address", "ADB": "block RAM address",
        "DIA": "block RAM data", "DIB": "block RAM data", "WEA": "block RAM write",
        "WEB": "block RAM write", "CSA": "block RAM select", "CSB": "block RAM select",
        "CEA": "block RAM clock enable", "CEB": "block RAM clock enable",
        "OCEA": "block RAM clock enable", "OCEB": "block RAM clock enable",
        "RSTA": "block RAM reset", "RSTB": "block RAM reset"}


def pin_of(port):
    """A timing endpoint's kind of pin: its port's name without the bit number (``WAD3`` →
    ``WAD``)."""
    return port.rstrip("0123456789") or port


def register_of(cell):
    """The register (or memory) a timing endpoint's cell belongs to, as one row for all its
    bits and all the ports' copies: the cell's name up to its mapping tag, indices dropped and
    numbers as ``*`` (:func:`sim.flow.names.net_group`)."""
    name = cell.lstrip("\\")
    tag = _CELL_TAG.search(name)
    return net_group(name[:tag.start()] if tag else name)


def endpoint_arrivals(report):
    """``{(cell, port): latest arrival, ns}`` over every timing endpoint of a nextpnr report
    (the parsed JSON of ``--report`` with ``--detailed-timing-report``); an endpoint a net
    reaches from several launching edges keeps its latest. Empty if the report has no
    detailed timings."""
    arrivals = {}
    for net in report.get("detailed_net_timings", ()):
        for end in net.get("endpoints", ()):
            delay = end.get("delay")
            latest = max(delay) if isinstance(delay, list) else delay
            if latest is None:
                continue
            key = (end["cell"], end["port"])
            arrivals[key] = max(arrivals.get(key, latest), latest)
    return arrivals


def slow_registers(report, targets_mhz, limit=12):
    """How many endpoints are too slow for each of ``targets_mhz``, in all, by block, by kind
    of pin and by register and pin: an endpoint is too slow for a frequency when its latest
    arrival exceeds the period. Returns ``None`` for a report without detailed timings,
    else::

        {"endpoints": n, "worst_ns": t,
         "slower_than": {"200": n, ...},
         "by_block": {block: {"200": n, ...}, ...},          # blocks with a slow endpoint
         "by_pin": {pin: {"200": n, ...}, ...},              # kinds with a slow endpoint
         "by_register": [{"register", "pin", "block", "endpoints", "worst_ns",
                          "slower_than": {"200": n, ...}}, ...]}

    ``by_register`` holds the ``limit`` (register, pin) rows with the most endpoints too slow
    for the fastest target (then the latest arrival first), each with how many endpoints it
    has; ``pin`` is :func:`pin_of` (:data:`PINS` says what each is).
    """
    arrivals = endpoint_arrivals(report)
    if not arrivals:
        return None
    targets = sorted({float(mhz) for mhz in targets_mhz})
    keys = [f"{mhz:g}" for mhz in targets]
    periods = [1e3 / mhz for mhz in targets]
    fastest = keys[-1]

    def counts():
        return dict.fromkeys(keys, 0)

    total, blocks, pins, registers = counts(), {}, {}, {}
    for (cell, port), arrival in arrivals.items():
        name, pin = register_of(cell), pin_of(port)
        row = registers.setdefault((name, pin), {"register": name, "pin": pin,
                                                 "block": block_of(cell), "endpoints": 0,
                                                 "worst_ns": 0.0, "slower_than": counts()})
        row["endpoints"] += 1
        row["worst_ns"] = max(row["worst_ns"], arrival)
        for key, period in zip(keys, periods):
            if arrival > period:
                total[key] += 1
                row["slower_than"][key] += 1
                blocks.setdefault(row["block"], counts())[key] += 1
                pins.setdefault(pin, counts())[key] += 1
    ranked = sorted((row for row in registers.values() if row["slower_than"][fastest]),
                    key=lambda row: (-row["slower_than"][fastest], -row["worst_ns"],
                                     row["register"], row["pin"]))
    for row in ranked:
        row["worst_ns"] = round(row["worst_ns"], 3)
    return {"endpoints": len(arrivals),
            "worst_ns": round(max(arrivals.values()), 3),
            "slower_than": total,
            "by_block": _most_first(blocks, fastest), "by_pin": _most_first(pins, fastest),
            "by_register": ranked[:limit]}


def _most_first(groups, key):
    """``groups`` ordered by their count at ``key``, most first (then by name)."""
    return dict(sorted(groups.items(), key=lambda kv: (-kv[1][key], kv[0])))
