"""Building and running exported RTL under cocotb (Verilator or Icarus) from Python.

One entry point, :func:`run_cocotb`, used by the tests, the benchmarks and the replay tools. It
finds the simulators itself (:mod:`sim.flow.tools`), always passes ``timescale=("1ns", "1ps")``
(Amaranth writes no ``timescale``), builds in the directory it is given (so parallel runs never
share a build), and turns a failing cocotb test into a Python exception.
"""

import hashlib
import logging
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from sim.flow.tools import apply_tool_env, have_icarus, have_verilator

__all__ = ["SIMULATORS", "available_simulators", "run_cocotb", "CocotbFailure"]

SIMULATORS = ("verilator", "icarus")
_ROOT = Path(__file__).resolve().parents[2]
_log = logging.getLogger("innet.cosim")


class CocotbFailure(AssertionError):
    """A cocotb test failed, or the simulator did not run it."""


def available_simulators():
    """The simulators this machine can run, in :data:`SIMULATORS` order."""
    found = {"verilator": have_verilator(), "icarus": have_icarus()}
    return [sim for sim in SIMULATORS if found[sim]]


def _results(xml_path):
    tree = ET.parse(xml_path)
    cases = []
    for case in tree.iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        cases.append({
            "name": case.get("name"),
            "passed": failure is None,
            "message": None if failure is None else (failure.get("message") or failure.text),
        })
    return cases


def _build_key(verilog_text, optimize):
    # ("top-ports": a build that kept every signal public, before, is not this one)
    return hashlib.sha256(f"{optimize}\ntop-ports\n{verilog_text}".encode()).hexdigest()


def _top_ports_public(build_dir, toplevel):
    """A Verilator control file that makes the top module's signals public, read and write:
    what cocotb's VPI needs of a design whose benches touch only its ports."""
    path = build_dir / f"{toplevel}_public.vlt"
    text = f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n'
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def run_cocotb(verilog_text, toplevel, test_module, *, sim, build_dir, env=None, waves=False,
               testcase=None, test_paths=(), log_file=None, optimize=True, plusargs=()):
    """Build ``verilog_text`` (module ``toplevel``) with ``sim`` and run the cocotb tests in
    ``test_module``.

    Parameters
    ----------
    verilog_text : str
        The Verilog source.
    toplevel : str
        Its top module name.
    test_module : str
        Importable name of the module holding the ``@cocotb.test`` functions.
    sim : str
        ``"verilator"`` or ``"icarus"``.
    build_dir : path
        Directory for this build (created; one per parameter set).
    env : dict, optional
        Extra environment for the test process (test parameters).
    waves : bool
        Write ``dump.vcd`` (Verilator) / ``<toplevel>.fst`` (Icarus) in ``build_dir``. The
        ``WAVES=1`` environment variable also turns this on.
    testcase : str, optional
        Run only this test.
    test_paths : sequence of path
        Directories to put on the test process's ``PYTHONPATH`` (the one holding
        ``test_module``).
    log_file : path, optional
        Send the build's and the simulation's output there instead of to stdout.
    optimize : bool
        Verilator only: compile the model with the kit's optimisation (``-Os``). ``False``
        compiles at ``-O0``: the build takes less than half as long and the model runs slower,
        the right trade for short simulations.
    plusargs : sequence of str
        Simulator plusargs (``+name=value``) for the test run.

    Returns
    -------
    list of dict
        One ``{"name", "passed", "message"}`` per test.

    Raises
    ------
    CocotbFailure
        If any test failed or no result was written.
    """
    from cocotb_tools.runner import get_runner

    if sim not in SIMULATORS:
        raise ValueError(f"Simulator must be one of {', '.join(SIMULATORS)}, not {sim!r}")
    apply_tool_env()
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / f"{toplevel}.v"
    if not source.exists() or source.read_text() != verilog_text:
        source.write_text(verilog_text)
    waves = waves or os.environ.get("WAVES", "0") not in ("", "0")

    runner = get_runner(sim)
    # Say so when this build compiles (tens of seconds) rather than reuses an earlier one.
    marker = build_dir / ".innet-built"
    fresh = not marker.exists() or marker.read_text() != _build_key(verilog_text, optimize)
    if fresh:
        _log.info(f"building the {sim} model of {toplevel} in {build_dir} (first use of this "
                  f"design{'' if optimize or sim != 'verilator' else ', quick -O0 build'}; "
                  f"later runs reuse it)")
    began = time.perf_counter()
    build_args = []
    if sim == "verilator":
        # The exported files carry their own lint waivers; anything else is fatal, as users see.
        build_args = ["-Wall"] + ([] if optimize else ["-CFLAGS", "-O0"])
        # cocotb's runner passes --public-flat-rw, which keeps every signal for VPI (at 8
        # ports 31 MB of C++ where the design needs 6.6 MB, twice the build time). The
        # benches touch only the top module's ports: turn it off again (the later option
        # wins) and make those public by a control file. A waveform still has every signal.
        build_args += ["--no-public-flat-rw", str(_top_ports_public(build_dir, toplevel))]
    runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=build_dir,
                 timescale=("1ns", "1ps"), waves=waves, build_args=build_args, always=False,
                 log_file=log_file)
    if fresh:
        marker.write_text(_build_key(verilog_text, optimize))
        _log.info(f"built {toplevel} in {time.perf_counter() - began:.0f} s")
    # cocotb's runner sets the test process's PYTHONPATH from this process's sys.path.
    for path in [str(_ROOT)] + [str(Path(p).resolve()) for p in test_paths]:
        if path not in sys.path:
            sys.path.append(path)
    test_env = {k: str(v) for k, v in (env or {}).items()}
    results_xml = build_dir / "results.xml"
    results_xml.unlink(missing_ok=True)
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, build_dir=build_dir,
                    test_dir=build_dir, extra_env=test_env, waves=waves, testcase=testcase,
                    results_xml=str(results_xml), log_file=log_file,
                    plusargs=list(plusargs))
    except SystemExit as exc:   # cocotb's runner exits when tests fail under pytest
        if not results_xml.exists():
            raise CocotbFailure(f"{sim}: simulation of {toplevel} failed (exit {exc.code}); "
                                f"see the log above") from None
    if not results_xml.exists():
        raise CocotbFailure(f"{sim}: no results from {toplevel}")
    cases = _results(results_xml)
    failed = [c for c in cases if not c["passed"]]
    if not cases:
        raise CocotbFailure(f"{sim}: {toplevel} ran no test")
    if failed:
        details = "; ".join(f"{c['name']}: {c['message']}" for c in failed)
        raise CocotbFailure(f"{sim}: {len(failed)} of {len(cases)} test(s) failed: {details}")
    return cases
