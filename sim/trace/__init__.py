"""GPU traces: the one definition of the format (``format``), generating traces from the
GPU model (``generate``) and synthetic stress traffic (``synthetic``). Imports neither ``hw``
nor cocotb."""
