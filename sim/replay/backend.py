"""The one interface every replay backend implements: ``run(plan) -> ReplayResult``.

A backend takes a :class:`sim.replay.plan.Plan` (the switch, the time mapping and every
packet), drives the GPUs' :class:`sim.replay.loop.ClosedLoop` against its switch, and returns a
:class:`sim.replay.result.ReplayResult`. Four implement it:

=====================================  ========================================================
:class:`sim.model.switch.PythonModel`   the fast model, Python reference
:class:`sim.model.switch.CompiledModel` the fast model's C core (same results, ~30× faster)
:class:`sim.cosim.replay.RtlPlayer`     the exported RTL under cocotb, flits moved by the
                                        Verilog packet player
:class:`sim.cosim.replay.RtlDriver`     the exported RTL under cocotb, every port driven and
                                        sampled from Python each cycle
=====================================  ========================================================

Their results compare delivery for delivery (:func:`sim.replay.result.compare`).
"""

import abc

__all__ = ["ReplayBackend"]


class ReplayBackend(abc.ABC):
    """A switch a plan can be replayed through.

    Members
    -------
    name : str
        What reports call the backend (``"model"``, ``"rtl-verilator"``).
    """

    name = "backend"

    @abc.abstractmethod
    def run(self, plan):
        """Replay ``plan`` closed-loop; returns a :class:`sim.replay.result.ReplayResult`."""

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"
