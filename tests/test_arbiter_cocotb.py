"""cocotb tests of the exported arbiter on Icarus and Verilator (bench: sim/cosim/tb_arbiter.py)."""

import pytest

from hw.export import export_arbiter
from hw.spec import Policy
from sim.cosim.runner import run_cocotb

from .conftest import require_simulator, spread_over_simulators


def _cases():
    """Every policy x ports x lanes, the lane counts alternating in order so that spreading
    the cases over the simulators puts each policy, port count and lane count on both."""
    for p, policy in enumerate(Policy.names()):
        for q, ports in enumerate((2, 4, 8)):
            for lanes in ((1, 4) if (p + q) % 2 == 0 else (4, 1)):
                yield policy, ports, lanes


@pytest.mark.slow
@pytest.mark.parametrize(*spread_over_simulators("policy, ports, lanes", list(_cases())))
def test_arbiter(sim, policy, ports, lanes, build_dir):
    require_simulator(sim)
    verilog, meta = export_arbiter(ports, lanes, policy)
    env = {"INNET_PORTS": ports, "INNET_LANES": lanes, "INNET_POLICY": policy,
           "INNET_SEED": 11 * ports + lanes}
    # A quick (-O0) build: the bench runs a few thousand cycles.
    cases = run_cocotb(verilog, meta["module"], "sim.cosim.tb_arbiter", sim=sim,
                       build_dir=build_dir, env=env, optimize=False)
    assert {c["name"].split("/")[0] for c in cases} >= {"test_delivery", "test_saturation"}
    if sim == "verilator":
        # The VPI symbol table holds the top module's ports, which the bench drives, and not
        # the internal signals cocotb's --public-flat-rw would keep (sim.cosim.runner).
        table = "".join(path.read_text() for path in build_dir.glob("Vtop__Syms*.cpp"))
        assert 'varInsert("s0_axis_tvalid"' in table and 'varInsert("cur_lane0"' not in table
