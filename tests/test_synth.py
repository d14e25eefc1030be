"""``innet synth``: the open ECP5 flow runs and reports area and Fmax (small blocks only: see
docs/hw.md for the YoWASP ABC failure on larger ones)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_synth_small_arbiter():
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "arbiter", "--ports", "4",
                           "--lanes", "1", "--json"], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["luts"] > 0 and result["ffs"] > 0 and result["fmax_mhz"] > 50


def test_synth_bad_arguments():
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "synth", "switch", "--freq", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--freq must be positive" in proc.stderr
