"""cocotb tests of the exported arbiter on Icarus and Verilator (bench: sim/cosim/tb_arbiter.py)."""

import pytest

from hw.export import export_arbiter
from hw.spec import Policy
from sim.cosim.runner import run_cocotb

from .conftest import require_simulator


@pytest.mark.slow
@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("ports", [2, 4, 8])
@pytest.mark.parametrize("policy", list(Policy.names()))
def test_arbiter(sim, policy, ports, lanes, build_dir):
    require_simulator(sim)
    verilog, meta = export_arbiter(ports, lanes, policy)
    env = {"INNET_PORTS": ports, "INNET_LANES": lanes, "INNET_POLICY": policy,
           "INNET_SEED": 11 * ports + lanes}
    cases = run_cocotb(verilog, meta["module"], "sim.cosim.tb_arbiter", sim=sim,
                       build_dir=build_dir, env=env)
    assert {c["name"].split("/")[0] for c in cases} >= {"test_delivery", "test_saturation"}
