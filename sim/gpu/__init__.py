"""The GPU model: presets (``presets``), workloads from architecture definitions
(``workloads``), collectives (``collectives``), SM/HBM contention between a kernel and a
collective (``contention``), the data-parallel iteration (``iteration``) and the comparison with
published figures (``calibration``). Imports neither ``hw`` nor cocotb."""
