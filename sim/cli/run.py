"""``innet replay``, ``innet run``, ``innet sweep`` and ``innet bench cosim``.

Registered into the main parser by :func:`register`.
"""

import json
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

from hw.errors import ParameterError
from hw.spec import ELEMENT_TYPES, Policy
from sim.cli.output import UsageError, real_number
from sim.cli.output import emit as _emit

__all__ = ["register"]


# -- replay ---------------------------------------------------------------------------------

def _cmd_replay(args):
    from sim.replay.config import ReplayConfig
    from sim.replay.plan import PlanError, build_plan
    from sim.trace.format import read_trace

    path = Path(args.trace)
    if not path.is_file():
        raise UsageError(f"{path}: no such trace file")
    meta, records = read_trace(path)
    records = list(records)
    link = args.link_gbps
    if link is None:
        from sim.gpu.presets import PRESETS
        preset = PRESETS.get(str(meta.get("gpu", "")).lower())
        link = preset.link_gbps if preset else 300.0
    try:
        cfg = ReplayConfig(ports=args.ports or max(2, int(meta["gpus"])), lanes=args.lanes,
                           slots=args.slots, chunk_flits=args.chunk_flits, policy=args.policy,
                           mtu_flits=args.mtu_flits, link_gbps=link,
                           flit_scale=args.flit_scale, dtype=args.dtype)
        plan = build_plan(meta, records, cfg, path=str(path))
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    except ParameterError as exc:
        raise UsageError(f"switch parameters: {exc}") from None
    if args.backend == "model":
        from sim.model.switch import replay_model
        from sim.model.switch_core import CoreUnavailable
        try:
            result = replay_model(plan, core=args.model_core)
        except CoreUnavailable as exc:   # --model-core c without a working C compiler
            print(f"innet: error: fast model C core: {exc}", file=sys.stderr)
            return 1
    else:
        from sim.cosim.replay import replay_rtl
        from sim.cosim.runner import available_simulators
        if args.sim not in available_simulators():
            raise UsageError(f"--sim {args.sim}: simulator not installed")
        result = replay_rtl(plan, args.sim, waves=args.waves, quiet=not args.verbose)
    summary = result.summary()
    summary.update({"trace": str(path), "switch": cfg.as_dict(), "cycle_ns": cfg.cycle_ns})
    if args.backend == "model":
        summary["model_core"] = result.extra["core"]
    if args.waves and args.backend == "rtl":
        summary["waves_dir"] = result.extra["build_dir"]
    lat = summary["latency_cycles"]
    where = (f"model switch ({result.extra['core']} core)" if args.backend == "model"
             else f"{result.backend} switch")
    lines = [f"replay of {path} on the {where} ({cfg.ports} ports, "
             f"{cfg.lanes} lanes, {cfg.slots} slots, {cfg.policy}; 1 cycle = "
             f"{cfg.cycle_ns:.3f} ns real, flit scale {cfg.flit_scale}):",
             f"  {summary['cycles']} cycles ({summary['real_time_us']:.1f} us), "
             f"{summary['packets']} packets, {summary['results_delivered']} results, "
             f"wall {summary['wall_s']:.2f} s",
             f"  memory packet latency, cycles: mean {lat.get('mean', 0)}, p99 "
             f"{lat.get('p99', 0)}, max {lat.get('max', 0)}",
             "  egress utilization: " + " ".join(f"{u:.3f}" for u in
                                                 summary["egress_utilization"]),
             "  ingress stall cycles: " + " ".join(str(s) for s in summary["stall_cycles"]),
             f"  slot occupancy: peak {summary['slot_occupancy']['peak']} of {cfg.slots}, mean "
             f"{summary['slot_occupancy']['mean']}",
             "  errors: " + (", ".join(f"{k}={v}" for k, v in summary["errors"].items() if v)
                             or "none" if summary["errors"] else "n/a (model)")]
    if args.waves and args.backend == "rtl":
        lines.append(f"  waveform in {result.extra['build_dir']}")
    _emit(args, summary, lines)
    return 1 if summary["mismatches"] else 0


# -- run / sweep ----------------------------------------------------------------------------

def _load(path):
    from sim.experiment.config import load_config
    if path is None:
        return load_config()
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{p}: no such configuration file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read: {exc}") from None
    return load_config(text, str(p))


def _run(args, config, jobs, dask=None):
    from dataclasses import replace

    from sim.cosim.runner import available_simulators
    from sim.experiment.report import summary_table, write_results
    from sim.experiment.run import execute, progress_printer

    if args.no_rtl:
        config = replace(config, rtl=False)
    if config.rtl and config.sim not in available_simulators():
        raise UsageError(f"{config.source}: [experiment] sim: {config.sim} is not installed "
                         f"(or pass --no-rtl)")
    name = args.name or f"{config.name}-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir = Path(args.output) / name
    if not Path(args.output).exists():
        Path(args.output).mkdir(parents=True)
    command = "innet " + " ".join(shlex.quote(a) for a in sys.argv[1:]) \
        if sys.argv and sys.argv[0].endswith("innet") else f"innet {args.command}"
    began = time.perf_counter()
    results = execute(config, jobs=jobs, dask=dask,
                      progress=progress_printer(not args.quiet and not args.json))
    wall = time.perf_counter() - began
    if not args.quiet and not args.json:
        sys.stderr.write("\n")
    files = write_results(config, results, out_dir, wall, command)
    payload = json.loads((out_dir / "results.json").read_text())
    payload["output_dir"] = str(out_dir)
    _emit(args, payload, [summary_table(results), "",
                          f"{len(results)} points in {wall:.1f} s; wrote "
                          + ", ".join(str(f) for f in files)])
    return 0


def _cmd_run(args):
    return _run(args, _load(args.config), args.jobs)


def _cmd_sweep(args):
    from sim.experiment.run import cpu_count
    return _run(args, _load(args.config), args.jobs or cpu_count(), dask=args.dask)


def _cmd_print_config(args):
    """``--print-config``: the effective configuration (the file over the defaults, with
    ``--no-rtl`` applied) as TOML on stdout; nothing runs."""
    from dataclasses import replace

    from sim.experiment.config import to_toml
    config = _load(args.config)
    if args.no_rtl:
        config = replace(config, rtl=False)
    sys.stdout.write(to_toml(config))
    return 0


def _or_print_config(command):
    """``command``, or :func:`_cmd_print_config` when ``--print-config`` is given."""
    def dispatch(args):
        return _cmd_print_config(args) if args.print_config else command(args)
    return dispatch


# -- bench cosim ----------------------------------------------------------------------------

def _cmd_bench_cosim(args):
    from sim.bench.cosim import bench_cosim
    payload = bench_cosim(sim=args.sim, quick=args.quick, run_main=not args.skip_run,
                          progress=None if args.json else
                          (lambda text: print(text, file=sys.stderr)))
    r = payload
    lines = [f"co-simulation ({args.sim}, {r['switch']}):",
             f"  replay at full load: {r['cosim_cycles_per_s']:.0f} cycles/s; bare cocotb clock "
             f"{r['bare_cycles_per_s']:.0f} cycles/s; ratio {r['cosim_ratio']:.2f} "
             f"(target >= 0.5); the Verilog packet player moves the flits",
             f"  per-cycle Python driver, same trace: "
             f"{r['per_cycle_driver']['cycles_per_s']:.0f} cycles/s, ratio "
             f"{r['per_cycle_driver']['ratio']:.2f}; deliveries "
             f"{r['per_cycle_driver']['agreement_with_player']['exact']}/"
             f"{r['per_cycle_driver']['agreement_with_player']['deliveries']} equal to the "
             f"player's",
             f"  same trace: RTL {r['rtl_wall_s']:.2f} s, model {r['model_wall_s']:.3f} s: "
             f"model {r['model_speedup']:.0f}x faster (target >= 100; "
             f"{r['model_speedup_over_per_cycle_driver']:.0f}x over the per-cycle driver); "
             f"deliveries "
             f"{r['agreement']['exact']}/{r['agreement']['deliveries']} cycle-exact, MAE "
             f"{r['agreement']['mae_fraction']:.3%}, makespan error "
             f"{r['agreement']['makespan_error']:.3%}",
             f"  Python model (the C core's reference): {r['python_model']['wall_s']:.3f} s, "
             f"{r['python_model']['speedup_over_rtl']:.0f}x over the RTL; the C core is "
             f"{r['python_model']['core_speedup']:.0f}x faster, deliveries "
             f"{r['python_model']['agreement_with_core']['exact']}/"
             f"{r['python_model']['agreement_with_core']['deliveries']} identical"]
    for big in r.get("model_large", []):
        lines.append(f"  model alone, {big['packets']} packets: {big['wall_s']:.2f} s "
                     f"({big['packets_per_s']:.0f} packets/s)")
    if "run_wall_s" in r:
        lines.append(f"  innet run (default experiment): {r['run_wall_s']:.1f} s "
                     f"(target <= 60 s on 2 cores)")
    _emit(args, payload, lines)
    return 0


def register(sub, parser_class, positive):
    rep = sub.add_parser("replay", help="replay a GPU trace through the switch (RTL or model)")
    rep.add_argument("trace", help="trace file (.itr or .txt)")
    rep.add_argument("--backend", choices=["rtl", "model"], default="model")
    rep.add_argument("--sim", choices=["verilator", "icarus"], default="verilator")
    rep.add_argument("--waves", action="store_true", help="write a waveform (RTL backend)")
    rep.add_argument("--model-core", choices=["auto", "c", "python"], default="auto",
                     help="model backend: compiled core (c), the Python reference, or c when "
                          "a C compiler is available (default)")
    rep.add_argument("--ports", type=positive("--ports"), default=None,
                     help="switch ports (default: the trace's GPUs)")
    rep.add_argument("--lanes", type=positive("--lanes"), default=8)
    rep.add_argument("--slots", type=positive("--slots"), default=64)
    rep.add_argument("--chunk-flits", type=positive("--chunk-flits"), default=8)
    rep.add_argument("--policy", choices=Policy.names(), default="rr")
    rep.add_argument("--mtu-flits", type=positive("--mtu-flits"), default=64)
    rep.add_argument("--dtype", choices=ELEMENT_TYPES, default="fp32")
    rep.add_argument("--link-gbps", type=real_number("--link-gbps", 0, exclusive=True),
                     default=None,
                     help="port bandwidth, GB/s (default: the trace GPU's NVLink)")
    rep.add_argument("--flit-scale", type=positive("--flit-scale"), default=1,
                     help="real flits per simulated flit (default 1)")
    rep.add_argument("--verbose", action="store_true", help="show the simulator's output")
    rep.add_argument("--json", action="store_true")
    rep.set_defaults(func=_cmd_replay)

    for name, helptext in (("run", "the main job: contention report (default experiment "
                                   "without CONFIG)"),
                           ("sweep", "run a configuration's cross product on a process pool "
                                     "or a Dask cluster")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("config", nargs="?" if name == "run" else None,
                       help="configuration file (TOML)")
        p.add_argument("-o", "--output", default="results", help="results root directory")
        p.add_argument("--name", help="run name (default: <experiment>-<timestamp>)")
        p.add_argument("--jobs", type=positive("--jobs", 1, 256),
                       default=1 if name == "run" else None,
                       help="worker processes")
        p.add_argument("--no-rtl", action="store_true", help="skip the RTL windows")
        p.add_argument("--quiet", action="store_true", help="no progress")
        p.add_argument("--json", action="store_true")
        p.add_argument("--print-config", action="store_true",
                       help="print the effective configuration as TOML and exit")
        if name == "sweep":
            p.add_argument("--dask", metavar="tcp://HOST:PORT",
                           help="run on this Dask distributed scheduler")
        p.set_defaults(func=_or_print_config(_cmd_run if name == "run" else _cmd_sweep))


def register_bench(bench_sub, parser_class):
    b = bench_sub.add_parser("cosim", help="co-simulation speed, model vs RTL, innet run time")
    b.add_argument("--sim", choices=["verilator", "icarus"], default="verilator")
    b.add_argument("--quick", action="store_true", help="smaller runs (for tests)")
    b.add_argument("--skip-run", action="store_true", help="do not time innet run")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_cmd_bench_cosim)
