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
def test_every_backend_replays_the_same(sim, build_dir):
    require_simulator(sim)
    cfg = ReplayConfig(ports=3, lanes=2, slots=4, chunk_flits=2, link_gbps=16.0, mtu_flits=8)
    meta, records = stress_trace(gpus=3, seed=5, messages=12, pieces=3, span_ns=3_000)
    plan = build_plan(meta, records, cfg)
    backends = [PythonModel(), CompiledModel(),
                RtlPlayer(sim, build_dir=build_dir / "player", quiet=True, optimize=False),
                RtlDriver(sim, build_dir=build_dir / "driver", quiet=True, optimize=False)]
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
