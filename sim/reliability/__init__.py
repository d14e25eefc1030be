"""Reliability checks: the soak of the exported switch with faults (``soak``), edge-case
floating-point contributions (``numerics``) and property-based fuzzing of the tools' inputs
(``fuzz``)."""
