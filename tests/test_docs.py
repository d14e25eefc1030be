"""Docs that quote generated output stay equal to it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_packet_format_doc_matches_layout():
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "export", "layout", "--lanes", "1"],
                          capture_output=True, text=True, check=True)
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    doc = (ROOT / "docs" / "packet-format.md").read_text()
    assert "\n".join(table) in doc, "regenerate the table with: innet export layout --lanes 1"
