"""``innet bench soak``: the soak (:mod:`sim.reliability.soak`) on the exported switch, cocotb."""

import pickle

from sim.cosim.build import switch_build
from sim.cosim.runner import run_cocotb
from sim.reliability.soak import SoakConfig

__all__ = ["soak_rtl", "DEFAULT_WATCHDOG"]

#: Cycles with work outstanding and not one flit moving after which the soak fails
#: (deadlock). The longest legitimate pause is a few ingress-buffer drains under backpressure.
DEFAULT_WATCHDOG = 5_000


def soak_rtl(cycles, seed=1, sim="verilator", policy="rr", resets=0, watchdog=DEFAULT_WATCHDOG,
             log_file=None, optimize=True, **config):
    """Soak the switch for ``cycles`` cycles of traffic (then drain). ``resets`` pulses of
    reset fall at evenly spaced cycles. ``config``: :class:`sim.soak.SoakConfig` fields.
    Returns the statistics dict (``failures`` empty when the run was clean)."""
    spacing = cycles // (resets + 1)
    cfg = SoakConfig(resets=tuple(spacing * (i + 1) for i in range(resets)), **config)
    with switch_build(cfg.switch(policy), sim, optimize=optimize) as (
            verilog, module, build_dir, scratch):
        params, result = scratch / "soak.pkl", scratch / "result.pkl"
        params.write_bytes(pickle.dumps({"config": cfg, "seed": seed, "cycles": cycles,
                                         "watchdog": watchdog}))
        run_cocotb(verilog, module, "sim.cosim.tb_soak", sim=sim, build_dir=build_dir,
                   env={"INNET_SOAK": params, "INNET_RESULT": result}, log_file=log_file,
                   optimize=optimize)
        stats = pickle.loads(result.read_bytes())
    stats.update({"simulator": sim, "policy": policy, "seed": seed, "watchdog": watchdog,
                  "switch": f"{cfg.ports} ports x {cfg.lanes} lanes, {cfg.slots} slots, "
                            f"{cfg.chunk_flits}-flit chunks, {cfg.jobs} job entries"})
    return stats
