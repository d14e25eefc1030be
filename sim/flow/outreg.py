"""Fold the registers behind the block RAMs into the block RAMs' own output registers.

Yosys 0.69 maps every ECP5 block RAM (``DP16KD``) with ``REGMODE NOREG`` and leaves a register
that takes the RAM's word every cycle (the reduction unit's bank read register,
``bank{k}_word``) in the fabric: a flip-flop per bit, in a slice with no LUT beside it, fed
by an output that comes 5.61 ns after the clock. The DP16KD has that register inside
(``REGMODE OUTREG``, 0.97 ns from the clock in nextpnr's timing). A vendor flow folds it in;
this pass does it on Yosys's JSON netlist before nextpnr reads it, when ``innet synth
--bram-outreg`` asks (docs/timing-closure.md, "The bank read register inside the block RAM").

A block RAM is folded only when nothing changes a cycle: it is in the pseudo-dual-port 36-bit
mode Yosys maps wide memories to (write on port A, read on port B, both clocks the same net,
not inverted, output resets tied low), and every data output that anything reads feeds
exactly one flip-flop and nothing else, each flip-flop a register on the RAM's clock with no
clock enable and no global reset, either plain or cleared by a synchronous reset (``LSR``,
not inverted, over the clock enable) that all of the RAM's flip-flops share. Then both ports'
output registers are enabled every cycle (``OCEA`` = ``OCEB`` = 1), a shared reset drives the
read port's ``RSTB`` in the synchronous reset mode (which clears the output register at the
clock edge: the reset Yosys maps a read port's to in this mode), each output drives what its
flip-flop drove, and the flip-flops are removed. A flip-flop that a reset sets, not clears,
has no counterpart in the RAM and stays (the reduction unit's sign bits of −0 in fp builds).
"""

from collections import defaultdict

__all__ = ["fold_output_registers"]

#: The DP16KD's data outputs.
_OUTPUTS = [f"DO{side}{bit}" for side in "AB" for bit in range(18)]


def _const(bits, value):
    return bits == [value]


def _read_register(cell, clock):
    """Whether ``cell`` is a TRELLIS_FF that loads its input every cycle on ``clock``, unless
    a synchronous reset clears it: ``(True, reset)`` with the reset's net bit (None for
    none), or ``(False, None)``."""
    if cell["type"] != "TRELLIS_FF":
        return False, None
    params, conn = cell["parameters"], cell["connections"]
    enable_always = (str(params.get("CEMUX", "CE")).strip() == "1" or
                     _const(conn.get("CE", ["1"]), "1"))
    plain = (enable_always and conn.get("CLK") == clock and
             str(params.get("CLKMUX", "CLK")).strip() == "CLK" and
             str(params.get("GSR", "DISABLED")).strip() == "DISABLED")
    if not plain:
        return False, None
    if (str(params.get("LSRMUX", "LSR")).strip() == "0" or
            _const(conn.get("LSR", ["0"]), "0")):
        return True, None
    lsr = conn.get("LSR", [])
    clears = (str(params.get("LSRMUX", "LSR")).strip() == "LSR" and
              str(params.get("SRMODE", "LSR_OVER_CE")).strip() == "LSR_OVER_CE" and
              str(params.get("REGSET", "RESET")).strip() == "RESET" and
              len(lsr) == 1 and isinstance(lsr[0], int))
    return (True, lsr[0]) if clears else (False, None)


def _foldable(ram):
    """The RAM's clock net if it is in the mode the pass handles, else None."""
    params, conn = ram["parameters"], ram["connections"]

    def width(name):
        value = str(params.get(name, "18")).strip()
        return int(value, 2) if set(value) <= {"0", "1"} and len(value) > 2 else int(value)

    if width("DATA_WIDTH_A") != 36 or width("DATA_WIDTH_B") != 36:
        return None
    if any(str(params.get(f"REGMODE_{s}", "NOREG")).strip() != "NOREG" for s in "AB"):
        return None
    if (str(params.get("CLKAMUX", "CLKA")).strip() != "CLKA" or
            str(params.get("CLKBMUX", "CLKB")).strip() != "CLKB"):
        return None
    if conn.get("CLKA") != conn.get("CLKB") or not all(
            _const(conn.get(f"RST{s}", ["0"]), "0") for s in "AB"):
        return None
    return conn["CLKB"]


def fold_output_registers(netlist, top):
    """Fold, in place, the flip-flops behind ``top``'s DP16KD into their output registers
    (see the module's docstring). Returns ``{"block_rams", "flip_flops"}``: how many block
    RAMs now use ``OUTREG`` and how many flip-flops were removed."""
    module = netlist["modules"][top]
    cells = module["cells"]
    loads = defaultdict(list)          # net bit -> [(cell, port)] reading it
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell.get("port_directions", {}).get(port) != "output":
                for bit in bits:
                    if isinstance(bit, int):
                        loads[bit].append((name, port))
    outputs = {bit for port in module.get("ports", {}).values()
               if port["direction"] != "input" for bit in port["bits"] if isinstance(bit, int)}
    folded_rams = folded_ffs = 0
    for name in sorted(n for n, c in cells.items() if c["type"] == "DP16KD"):
        ram = cells[name]
        clock = _foldable(ram)
        if clock is None:
            continue
        plan = {}                      # output port -> the flip-flop behind it
        resets = set()                 # the flip-flops' synchronous resets (None: none)
        for port in _OUTPUTS:
            bits = ram["connections"].get(port, [])
            if not bits or not isinstance(bits[0], int) or bits[0] not in loads:
                continue               # not read by anything
            readers = loads[bits[0]]
            if bits[0] in outputs or len(readers) != 1 or readers[0][1] != "DI":
                plan = None
                break
            foldable, reset = _read_register(cells[readers[0][0]], clock)
            resets.add(reset)
            if not foldable or len(resets) > 1:
                plan = None
                break
            plan[port] = readers[0][0]
        if not plan:
            continue
        for port, ff in plan.items():
            ram["connections"][port] = cells[ff]["connections"]["Q"]
            del cells[ff]
        ram["parameters"]["REGMODE_A"] = ram["parameters"]["REGMODE_B"] = "OUTREG"
        ram["connections"]["OCEA"] = ram["connections"]["OCEB"] = ["1"]
        reset = resets.pop()
        if reset is not None:
            ram["connections"]["RSTB"] = [reset]
            ram["parameters"]["RESETMODE"] = ram["parameters"]["ASYNC_RESET_RELEASE"] = "SYNC"
        folded_rams += 1
        folded_ffs += len(plan)
    return {"block_rams": folded_rams, "flip_flops": folded_ffs}
