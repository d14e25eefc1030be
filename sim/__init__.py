"""innet's simulation side, one package per step of a packet's path:

``gpu`` (the GPU model: presets, workloads, collectives, contention, the iteration) writes a
``trace``; ``replay`` turns the trace into a plan of switch packets and runs the GPUs' closed
loop against a backend — the fast switch ``model`` or the RTL switch under ``cosim``;
``experiment`` runs points and writes the report. Beside the path: ``reliability`` (soak,
numerics, fuzzing), ``bench`` (every ``innet bench``), ``flow`` (synthesis, formal, external
tools) and ``cli`` (the ``innet`` command, the only place that turns errors into exit codes).
See docs/architecture.md."""
