"""``sim.flow.floorplan``: the banks' block RAMs fixed to sites by lane (column stripe) and
port (row), checked on a netlist named as Yosys names the reduction unit's banks, and on the
reduction unit's own mapped netlist (every bank block RAM found, none missed)."""

import json
import re
import subprocess
import sys

import pytest

from sim.flow.floorplan import EBR_COLUMNS, EBR_ROWS, FloorplanError, pin_banks


def _netlist(ports, lanes, per_bank=1, extra=()):
    cells = {}
    for k in range(ports):
        for lane in range(lanes):
            for j in range(per_bank):
                cells[f"switch.reduce.bank{k}_lane{lane}.0.{j}"] = {"type": "DP16KD"}
    for name, kind in extra:
        cells[name] = {"type": kind}
    return {"modules": {"top": {"cells": cells}}}


def _site(cell):
    x, y, bel = cell["attributes"]["BEL"].split("/")
    return int(x[1:]), int(y[1:]), bel


def test_lanes_take_column_stripes_and_ports_take_rows():
    netlist = _netlist(8, 8, extra=[("switch.ingress0.fifo.0.0", "DP16KD"),
                                    ("switch.reduce.bank1_word_FF", "TRELLIS_FF")])
    placed = pin_banks(netlist, "top", 8, 8)
    cells = netlist["modules"]["top"]["cells"]
    assert placed["block_rams"] == 64
    # only the banks' block RAMs are pinned
    assert "attributes" not in cells["switch.ingress0.fifo.0.0"]
    assert "attributes" not in cells["switch.reduce.bank1_word_FF"]
    sites = [_site(cells[name]) for name in placed["sites"]]
    assert len(set(sites)) == 64                               # one block RAM a site
    for name in placed["sites"]:
        k, lane = map(int, re.search(r"bank(\d+)_lane(\d+)", name).groups())
        x, y, bel = _site(cells[name])
        assert (x, bel) in EBR_COLUMNS
        # lane l's sites lie left of lane l + 1's, whatever the port
        column = EBR_COLUMNS.index((x, bel))
        assert lane * 52 // 8 <= column < (lane + 1) * 52 // 8
        assert y == EBR_ROWS[k // 2]                           # two ports a row


def test_a_deeper_bank_takes_adjacent_sites_and_too_many_is_an_error():
    netlist = _netlist(4, 4, per_bank=3)
    placed = pin_banks(netlist, "top", 4, 4)
    assert placed["block_rams"] == 48
    assert len(set(placed["sites"].values())) == 48
    with pytest.raises(FloorplanError, match="port 0 lane 0 has 4 block RAMs"):
        pin_banks(_netlist(8, 8, per_bank=4), "top", 8, 8)
    with pytest.raises(FloorplanError, match="outside 4 ports x 8 lanes"):
        pin_banks(_netlist(8, 8), "top", 4, 8)


@pytest.mark.slow
def test_the_reduction_units_banks_are_found_by_name(tmp_path):
    """Every block RAM of the reduction unit as Yosys maps it is a bank lane's, and each is
    pinned (a memory per port and lane in hw.reduce; its name reaches the netlist)."""
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "reduce", "--ports", "2",
                           "--lanes", "8", "--slots", "16", "--floorplan", "--no-pnr",
                           "--keep", str(tmp_path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["floorplan"] == {"block_rams": 16}
    assert result["yosys_cells"]["DP16KD"] == 16
    netlist = json.loads((tmp_path / f"{result['top']}.json").read_text())
    cells = netlist["modules"][result["top"]]["cells"]
    sites = [cell["attributes"]["BEL"] for cell in cells.values() if cell["type"] == "DP16KD"]
    assert len(sites) == len(set(sites)) == 16
