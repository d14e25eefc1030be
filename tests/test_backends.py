"""The replay backends behind one interface (sim.replay.backend): the fast model's Python
reference and C core, the RTL switch with the Verilog packet player and with the per-cycle
Python driver. On one plan all four deliver every packet and result at the same cycle."""

import pytest

from sim.cosim.replay import RtlDriver, RtlPlayer
from sim.model.switch import CompiledModel, PythonModel
from sim.replay.backend import ReplayBackend
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.trace.synthetic import stress_trace

from .conftest import require_simulator


def test_backend_is_abstract():
    with pytest.raises(TypeError):
        ReplayBackend()


@pytest.mark.slow
def test_every_backend_replays_the_same(sim, replay_build_dir):
    """On the 4-port prio switch that the co-simulation tests and `innet bench cosim --quick`
    replay, so both RTL builds come from the shared build cache."""
    require_simulator(sim)
    cfg = ReplayConfig(ports=4, lanes=2, slots=8, chunk_flits=4, policy="prio",
                       link_gbps=16.0, mtu_flits=8)
    meta, records = stress_trace(gpus=4, seed=5, messages=12, pieces=3, span_ns=3_000)
    plan = build_plan(meta, records, cfg)
    place = replay_build_dir   # None (the shared cache), or the test's own with WAVES=1
    backends = [PythonModel(), CompiledModel(),
                RtlPlayer(sim, build_dir=place and place / "player", quiet=True, optimize=False),
                RtlDriver(sim, build_dir=place and place / "driver", quiet=True, optimize=False)]
    results = {}
    for backend in backends:
        assert isinstance(backend, ReplayBackend)
        result = backend.run(plan)
        assert result.backend == backend.name
        assert result.mismatches == 0
        results[type(backend).__name__] = result.delivery_cycles()
    reference = results.pop("PythonModel")
    assert len(reference) > 20
    for name, deliveries in results.items():
        assert deliveries == reference, name
