"""The exported switch as a simulator build: Verilog exported once per process, builds cached
per switch, Verilog and toolchain in the user cache, one cocotb run at a time per build."""

import fcntl
import functools
import hashlib
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from sim.files import cache_dir

__all__ = ["toolchain_fingerprint", "switch_build"]


@functools.lru_cache(maxsize=8)
def _exported_switch(spec):
    """The Verilog and sidecar of the switch :class:`hw.spec.SwitchSpec` ``spec``, exported
    once per process: exporting takes seconds, and a run replays many windows through the same
    switch. (Imported here: the simulator processes that import this module never export.)"""
    from hw.export import export_switch
    return export_switch(spec)


@functools.lru_cache(maxsize=8)
def _exported_player(spec, schedule=0):
    """The player harness (:mod:`sim.cosim.player_verilog`; with a ``schedule`` of that depth
    if given) around the exported switch, with the switch's own Verilog after it:
    ``(verilog, module)``."""
    from sim.cosim.player_verilog import render_player
    verilog, meta = _exported_switch(spec)
    harness, module = render_player(meta, schedule)
    return harness + "\n" + verilog, module


def toolchain_fingerprint(sim):
    """What a cached simulator build depends on besides the Verilog: the cocotb installation
    (its makefiles name cocotb's own files by absolute path) and the simulator's. Two virtual
    environments sharing one cache then never reuse each other's builds, which would break
    when the other environment is removed or upgraded."""
    import shutil

    import cocotb

    from sim.flow.tools import verilator_root
    tool = (verilator_root() or shutil.which("verilator")) if sim == "verilator" \
        else shutil.which("iverilog")
    return f"\ncocotb {cocotb.__version__} {Path(cocotb.__file__).parent}\n{sim} {tool}"


@contextmanager
def switch_build(spec, sim, build_dir=None, optimize=True, player=False, waves=False,
                 schedule=0):
    """Export the switch :class:`hw.spec.SwitchSpec` ``spec`` — inside the Verilog packet
    player if ``player`` (playing a schedule of depth ``schedule`` if given) — and hold its build
    directory (default: the user cache, keyed by the Verilog, the build's optimisation and
    whether it writes a waveform, ``waves`` or ``WAVES=1``: the simulator does not rebuild
    for either when the Verilog is unchanged) for one cocotb run: runs in parallel processes
    take turns. Yields ``(verilog, module, build_dir, scratch_dir)``."""
    if player:
        verilog, module = _exported_player(spec, schedule)
    else:
        verilog, meta = _exported_switch(spec)
        module = meta["module"]
    if build_dir is None:
        key = hashlib.sha256((verilog + toolchain_fingerprint(sim)).encode()).hexdigest()[:16]
        flavour = "" if optimize or sim != "verilator" else "-O0"
        if waves or os.environ.get("WAVES", "0") not in ("", "0"):
            flavour += "-waves"
        build_dir = cache_dir("rtl") / f"{sim}-{module}-{key}{flavour}"
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock, \
            tempfile.TemporaryDirectory(prefix="innet-cosim-") as scratch:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield verilog, module, build_dir, Path(scratch)
