"""cocotb tests of the exported reduction unit on Icarus and Verilator (bench:
sim/cosim/tb_reduce.py)."""

import pytest

from hw.export import export_reduce
from hw.spec import SwitchSpec
from sim.cosim.runner import run_cocotb

from .conftest import require_simulator, spread_over_simulators


@pytest.mark.slow
@pytest.mark.parametrize(*spread_over_simulators("ports, lanes, slots, chunk",
                                                  [(4, 2, 6, 2), (3, 1, 3, 3)]))
def test_reduce(sim, ports, lanes, slots, chunk, build_dir):
    require_simulator(sim)
    verilog, meta = export_reduce(SwitchSpec(ports=ports, lanes=lanes, slots=slots,
                                             chunk_flits=chunk, jobs=4))
    env = {"INNET_PORTS": ports, "INNET_LANES": lanes, "INNET_SLOTS": slots,
           "INNET_CHUNK": chunk, "INNET_SEED": ports * 10 + lanes}
    # A quick (-O0) build: a third of the optimised one's time for a bench of seconds.
    cases = run_cocotb(verilog, meta["module"], "sim.cosim.tb_reduce", sim=sim,
                       build_dir=build_dir, env=env, optimize=False)
    assert len(cases) == 2
