"""Trace replay through a switch: the switch and time mapping (``config``), the packet plan
cut from a trace (``plan``), the GPUs' closed loop every backend drives (``loop``), what a
replay measured and comparing two replays (``result``), and the backend interface
(``backend``): ``run(plan) -> ReplayResult``, implemented by the fast model's C core and
Python reference, the RTL packet player and the per-cycle RTL driver; ``pages``: the memory
whole-iteration arrays are allocated in."""
