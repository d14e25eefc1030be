"""``innet bench numerics``: bit-identical reductions over random arrival permutations, on the
exported switch under cocotb (:mod:`sim.cosim.tb_numerics`)."""

import pickle

from hw.spec import SwitchSpec
from sim.cosim.build import switch_build
from sim.cosim.runner import run_cocotb

__all__ = ["permutations_rtl"]


def permutations_rtl(permutations=1000, ports=8, lanes=2, chunk_flits=4, seed=1,
                     sim="verilator", optimize=True, log_file=None):
    """Reduce the same edge-case contributions ``permutations`` times (fp32, bf16, int32 in
    turn), each time in a random member order; returns the statistics (``mismatches`` must be
    0)."""
    switch = SwitchSpec(ports=ports, lanes=lanes, slots=16, chunk_flits=chunk_flits, jobs=4)
    with switch_build(switch, sim, optimize=optimize) as (verilog, module, build_dir, scratch):
        params, result = scratch / "numerics.pkl", scratch / "result.pkl"
        params.write_bytes(pickle.dumps({"ports": ports, "lanes": lanes,
                                         "chunk_flits": chunk_flits,
                                         "permutations": permutations, "seed": seed}))
        run_cocotb(verilog, module, "sim.cosim.tb_numerics", sim=sim, build_dir=build_dir,
                   env={"INNET_NUMERICS": params, "INNET_RESULT": result}, log_file=log_file,
                   optimize=optimize)
        stats = pickle.loads(result.read_bytes())
    stats.update({"simulator": sim, "seed": seed,
                  "switch": f"{ports} ports x {lanes} lanes, {chunk_flits}-flit chunks"})
    return stats
