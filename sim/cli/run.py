"""``innet replay``, ``innet run``, ``innet sweep`` and ``innet bench cosim``.

Registered into the main parser by :func:`register`.
"""

import json
import logging
import os
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

from hw.errors import ParameterError
from hw.spec import ELEMENT_TYPES, Policy
from sim.cli.output import UsageError, progress_lines, real_number
from sim.cli.output import emit as _emit
from sim.errors import InputError

__all__ = ["register"]


# -- replay ---------------------------------------------------------------------------------

def _write_timeline(args, trace, records, result, cfg):
    """The replay's Chrome trace-event timeline (``--timeline``; by default
    ``<trace>.timeline.json`` beside the trace), written whole or not at all."""
    import json

    from sim.errors import OutputPathError
    from sim.experiment.timeline import chrome_trace, trace_events
    from sim.files import atomic_writes
    out = Path(args.timeline) if args.timeline else trace.with_name(trace.stem + ".timeline.json")
    doc = chrome_trace([(trace.name, trace_events(records, result, cfg.cycle_ns))])
    try:
        with atomic_writes([out]) as (temp,):
            temp.write_text(json.dumps(doc))
    except OSError as exc:
        raise OutputPathError(f"--timeline {out}: cannot write: {exc.strerror}") from None
    return out


def _cmd_replay(args):
    from sim.replay.config import ReplayConfig
    from sim.replay.plan import PlanError, build_plan
    from sim.trace.format import read_trace

    path = Path(args.trace)
    if not path.is_file():
        raise UsageError(f"{path}: no such trace file")
    meta, records = read_trace(path)
    # innet's switch is one node's NVSwitch: of a multi-node trace, replay one node
    # (sim/trace/nodes.py); what leaves the node is left out and said so.
    from sim.trace.nodes import NodeSliceError, node_slice
    try:
        meta, records, left_out = node_slice(meta, records, args.node or 0)
    except NodeSliceError as exc:
        raise UsageError(str(exc)) from None
    from sim.gpu.presets import PRESETS
    # The trace names its GPU by preset key or by the preset's full name (innet trace gen).
    gpu_name = str(meta.get("gpu", ""))
    preset = PRESETS.get(gpu_name.lower()) or next(
        (p for p in PRESETS.values() if p.name == gpu_name), None)
    link = args.link_gbps
    if link is None:
        link = preset.link_gbps if preset else 300.0
    hop_ns = args.link_latency_ns
    if hop_ns is None:
        hop_ns = preset.link_latency_s * 1e9 if preset else 0.0
    try:
        cfg = ReplayConfig(ports=args.ports or max(2, int(meta["gpus"])), lanes=args.lanes,
                           slots=args.slots, chunk_flits=args.chunk_flits, policy=args.policy,
                           mtu_flits=args.mtu_flits, link_gbps=link,
                           flit_scale=args.flit_scale, dtype=args.dtype,
                           link_latency_ns=hop_ns, mem_priority=args.mem_priority,
                           result_priority=args.result_priority, mem_weight=args.mem_weight,
                           result_weight=args.result_weight, quantum_flits=args.quantum_flits)
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
        expected = None
        if logging.getLogger("innet").isEnabledFor(logging.INFO):
            # The fast model is cycle-exact against the RTL and takes seconds: its cycle count
            # is what the RTL replay's progress counts towards.
            from sim.model.switch import replay_model
            expected = replay_model(plan).cycles
            print(f"... the fast model expects {expected:,} cycles; replaying them through the "
                  f"RTL ({args.sim})", file=sys.stderr, flush=True)
        result = replay_rtl(plan, args.sim, waves=args.waves, quiet=not args.verbose,
                            expected_cycles=expected)
    summary = result.summary()
    summary.update({"trace": str(path), "switch": cfg.as_dict(), "cycle_ns": cfg.cycle_ns})
    nodes = meta.get("nodes_of_trace", 1)
    if nodes > 1:
        summary["node"] = {"node": args.node or 0, "nodes": nodes, "left_out": left_out}
    summary["timeline"] = str(_write_timeline(args, path, records, result, cfg))
    if args.backend == "model":
        summary["model_core"] = result.extra["core"]
    if args.waves and args.backend == "rtl":
        summary["waves_dir"] = result.extra["build_dir"]
    lat = summary["latency_cycles"]
    where = (f"model switch ({result.extra['core']} core)" if args.backend == "model"
             else f"{result.backend} switch")
    lines = [f"replay of {path} on the {where} ({cfg.ports} ports, "
             f"{cfg.lanes} lanes, {cfg.slots} slots, {cfg.policy}; 1 cycle = "
             f"{cfg.cycle_ns:.3f} ns real, flit scale {cfg.flit_scale}, link hop "
             f"{cfg.link_latency_ns:g} ns = {cfg.link_cycles} cycles):",
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
    if nodes > 1:
        routes = ", ".join(f"{route} {nbytes}" for route, nbytes
                           in left_out["leaving_by_route"].items()) or "none"
        lines.insert(1, f"  node {args.node or 0} of {nodes} ({meta['gpus']} GPUs, its NVLink "
                        f"messages); left out: {left_out['leaving_bytes']} bytes leaving the "
                        f"node ({routes}) and {left_out['other_nodes_bytes']} bytes of the "
                        f"other nodes")
    if args.waves and args.backend == "rtl":
        lines.append(f"  waveform in {result.extra['build_dir']}")
    lines.append(f"  timeline (Chrome trace events, Perfetto UI): {summary['timeline']}")
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
    """Run the points of a new run (``config``) or of the run ``args.resume`` (``config``
    None), each written into the run directory as it finishes; then the report.

    Everything that can be checked is checked before the first point: a bad output folder or
    run name costs nothing and writes nothing. Interrupted (Ctrl-C) or failed, the finished
    points stay in the run directory and a line says how to resume."""
    from dataclasses import replace

    from sim.cosim.runner import available_simulators
    from sim.experiment.report import write_results
    from sim.experiment.run import RunJournal, execute, progress_printer
    from sim.experiment.tables import summary_table

    if args.resume:
        journal = RunJournal.open(args.resume)
        config, command, out_dir = journal.config, journal.command, journal.path
        done = journal.finished()
        if (out_dir / "results.json").exists():
            raise UsageError(f"{out_dir}: the run is complete (results.json); nothing to "
                             f"resume")
        if (config.rtl or config.rtl_windows) and config.sim not in available_simulators():
            raise UsageError(f"{out_dir}: the run's RTL windows need {config.sim}, which is "
                             f"not installed")
    else:
        if args.no_rtl:
            config = replace(config, rtl=False, rtl_windows=False)
        if args.rtl_windows:
            config = replace(config, rtl_windows=True)
        if (config.rtl or config.rtl_windows) and config.sim not in available_simulators():
            raise UsageError(f"{config.source}: [experiment] sim: {config.sim} is not "
                             f"installed (or pass --no-rtl)")
        out_dir = _new_run_dir(args, config)
        command = "innet " + " ".join(shlex.quote(a) for a in sys.argv[1:]) \
            if sys.argv and sys.argv[0].endswith("innet") else f"innet {args.command}"
        made_root = not out_dir.parent.exists()
        try:
            out_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"-o {out_dir.parent}: cannot create: {exc.strerror}") from None
        try:
            journal = RunJournal.create(out_dir, config, command)
        except BaseException:
            _remove_empty(out_dir.parent, made_root)
            raise
        done = {}
    began = time.perf_counter()
    try:
        results = execute(config, jobs=jobs, dask=dask, done=done, on_result=journal.record,
                          progress=progress_printer(not args.quiet))
        wall = journal.wall_s + time.perf_counter() - began
        if not args.quiet:
            sys.stderr.write("\n")
        files = write_results(config, results, out_dir, wall, command)
    except BaseException as exc:
        _stopped(args, journal, exc, time.perf_counter() - began,
                 remove=None if args.resume else made_root)
        raise
    payload = json.loads((out_dir / "results.json").read_text())
    payload["output_dir"] = str(out_dir)
    _emit(args, payload, [summary_table(results), "",
                          f"{len(results)} points in {wall:.1f} s; wrote "
                          + ", ".join(str(f) for f in files)])
    return 0


def _check_name(name, what):
    """A run name is one folder name inside the results folder: not empty, ``.`` or ``..``, no
    path separator (so no absolute path), at most 255 bytes."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise UsageError(f"{what} {name!r}: a run name is one folder inside the results folder "
                         f"(not empty, '.' or '..'; no '/' or '\\')")
    try:
        size = len(os.fsencode(name))
    except UnicodeEncodeError:
        raise UsageError(f"{what} {name!r}: not a file name") from None
    if size > 255:
        raise UsageError(f"{what}: a run name has at most 255 bytes, not {size}")


def _new_run_dir(args, config):
    """The directory of a new run, checked (nothing is written): ``-o`` is a folder or can be
    made one, the name stays inside it, and no run of that name exists. An explicit
    ``--name`` that exists is refused; the default ``<experiment>-<timestamp>`` takes the first
    free suffix ``-2``, ``-3``... (two runs started within a second)."""
    root = Path(args.output or "results")
    if root.exists() and not root.is_dir():
        raise UsageError(f"-o {root}: not a directory (-o names the folder runs are written in)")
    ancestor = root
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"-o {root}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"-o {root}: {ancestor} is not writable")
    if args.name is not None:
        _check_name(args.name, "--name")
        out_dir = root / args.name
        if out_dir.exists() or out_dir.is_symlink():
            raise UsageError(f"{out_dir}: exists; choose another --name (a run is never "
                             f"overwritten; an unfinished one continues with "
                             f"innet {args.command} --resume {shlex.quote(str(out_dir))})")
        return out_dir
    _check_name(config.name, f"{config.source}: [experiment] name")
    base = f"{config.name}-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir, suffix = root / base, 1
    while out_dir.exists() or out_dir.is_symlink():
        suffix += 1
        out_dir = root / f"{base}-{suffix}"
    return out_dir


def _remove_empty(directory, made):
    """Remove ``directory`` if this run ``made`` it and it is empty."""
    if made:
        try:
            directory.rmdir()
        except OSError:
            pass


def _stopped(args, journal, exc, seconds, remove):
    """A run stopped before its report (``exc``): keep what finished and say how to resume;
    a new run (``remove`` not None: whether it made the results folder) that finished no
    point leaves nothing behind. A KeyboardInterrupt is raised again with that one line."""
    from sim.experiment.config import points

    kept = len(journal.finished())
    if kept == 0 and remove is not None:
        journal.remove()
        _remove_empty(journal.path.parent, remove)
        what = "no point had finished; nothing kept"
    else:
        try:
            journal.add_wall(seconds)
        except (OSError, InputError):   # a full disk: the points are kept all the same
            pass
        what = (f"{kept} of {len(points(journal.config))} points kept in {journal.path}; "
                f"resume with: innet {args.command} --resume {shlex.quote(str(journal.path))}")
    if isinstance(exc, KeyboardInterrupt):
        raise type(exc)(what) from None   # Ctrl-C or SIGTERM (sim.cli.main.Terminated)
    if kept:
        print(f"innet: {what}", file=sys.stderr)


def _check_rtl_flags(args):
    """``--no-rtl`` skips every RTL window, ``--rtl-windows`` asks for more of them: not both."""
    if getattr(args, "no_rtl", False) and getattr(args, "rtl_windows", False):
        raise UsageError("--no-rtl and --rtl-windows contradict each other: --no-rtl skips "
                         "every RTL window, --rtl-windows adds the full bucket windows; drop one")


def _config(args):
    """The configuration of a new run; None with ``--resume`` (the run directory has it)."""
    _check_rtl_flags(args)
    if args.resume:
        given = [option for option, value in (("CONFIG", args.config), ("--name", args.name),
                                              ("-o", args.output), ("--no-rtl", args.no_rtl),
                                              ("--rtl-windows", args.rtl_windows))
                 if value]
        if given:
            raise UsageError(f"--resume continues a run with its own configuration, name and "
                             f"folder: drop {', '.join(given)}")
        return None
    if args.config is None and args.command == "sweep":
        raise UsageError("sweep needs a CONFIG file (or --resume DIR)")
    return _load(args.config)


def _cmd_run(args):
    _check_rtl_flags(args)
    scenario = _scenario(args)
    if scenario is not None:
        return _run_scenario(args, scenario)
    return _run(args, _config(args), args.jobs)


def _scenario(args):
    """The scenario ``args.config`` holds (a file with a ``[scenario]`` table), else None."""
    from sim.scenarios.config import is_scenario, load_scenario
    if args.config is None or args.resume or not Path(args.config).is_file():
        return None
    try:
        text = Path(args.config).read_text()
    except (OSError, UnicodeDecodeError):
        return None   # _load reports it
    return load_scenario(text, args.config) if is_scenario(text) else None


def _check_scenario_flags(args):
    """A scenario replays one window through the RTL (``rtl``) and has no full bucket windows."""
    if getattr(args, "rtl_windows", False):
        raise UsageError(f"--rtl-windows: {args.config} is a scenario file, which replays one "
                         f"window through the RTL ([scenario] rtl); drop --rtl-windows")


def _run_scenario(args, config):
    """``innet run SCENARIO.toml``: one scenario (docs/scenarios.md) into a new run directory
    (written whole or not at all; a scenario runs in seconds, so there is no --resume)."""
    import shutil
    from dataclasses import replace

    from sim.cosim.runner import available_simulators
    from sim.scenarios.run import run_scenario

    _check_scenario_flags(args)
    if args.no_rtl:
        config = replace(config, rtl=False)
    if config.rtl and config.sim not in available_simulators():
        raise UsageError(f"{config.source}: [scenario] sim: {config.sim} is not installed "
                         f"(or pass --no-rtl)")
    out_dir = _new_run_dir(args, config)
    command = "innet " + " ".join(shlex.quote(a) for a in sys.argv[1:]) \
        if sys.argv and sys.argv[0].endswith("innet") else f"innet run {args.config}"
    made_root = not out_dir.parent.exists()
    try:
        out_dir.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"-o {out_dir.parent}: cannot create: {exc.strerror}") from None
    show = progress_lines(args)
    try:
        payload, files = run_scenario(config, out_dir, command, progress=show)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        _remove_empty(out_dir.parent, made_root)
        raise
    payload["output_dir"] = str(out_dir)
    lines = [payload["title"]]
    for title, values in payload["sections"].items():
        headline = values.get("headline")
        if headline:
            lines.append(f"  {title}: {headline}")
    lines.append(f"wrote {out_dir}/report.md ({payload['wall_s']:.1f} s)")
    _emit(args, payload, lines)
    return 0


def _cmd_sweep(args):
    from sim.experiment.run import cpu_count
    if _scenario(args) is not None:
        raise UsageError(f"{args.config}: a scenario file runs in seconds with `innet run "
                         f"{args.config}`; sweep runs experiment files")
    return _run(args, _config(args), args.jobs or cpu_count(), dask=args.dask)


def _cmd_print_config(args):
    """``--print-config``: the effective configuration (the file over the defaults, with
    ``--no-rtl`` applied) as TOML on stdout; nothing runs."""
    from dataclasses import replace

    from sim.experiment.config import to_toml
    from sim.scenarios.config import scenario_to_toml
    _check_rtl_flags(args)
    scenario = _scenario(args)
    if scenario is not None:
        _check_scenario_flags(args)
        if args.no_rtl:
            scenario = replace(scenario, rtl=False)
        sys.stdout.write(scenario_to_toml(scenario))
        return 0
    config = _load(args.config)
    if args.no_rtl:
        config = replace(config, rtl=False, rtl_windows=False)
    if args.rtl_windows:
        config = replace(config, rtl_windows=True)
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
                          progress=progress_lines(args, prefix=""),
                          link_latency_ns=args.link_latency_ns)
    r = payload
    build = "" if r["optimized_build"] else ", quick -O0 builds"
    lines = [f"co-simulation ({args.sim}, {r['switch']}{build}):",
             f"  replay at full load: {r['cosim_cycles_per_s']:.0f} cycles/s; the same "
             f"traffic with no Python in the loop {r['no_python_cycles_per_s']:.0f} cycles/s "
             f"(log {'equal' if r['no_python_log_equal'] else 'DIFFERENT'}); ratio "
             f"{r['cosim_ratio']:.2f} (target >= 0.5); the Verilog packet player moves the "
             f"flits",
             f"  Python's wake-ups: {sum(r['cosim_wakeups'].values())} ("
             + ", ".join(f"{n} {why}" for why, n in r["cosim_wakeups"].items())
             + f"); links {r['link_latency_ns']:g} ns ({r['link_cycles']} cycles) a hop",
             f"  bare cocotb clock (a Python wake-up a cycle, the switch in reset): "
             f"{r['bare_cycles_per_s']:.0f} cycles/s; ratio {r['cosim_ratio_bare_clock']:.2f}",
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
    rep.add_argument("--mem-priority", type=int, default=1,
                     help="prio: memory traffic's priority, 0..7 (default 1)")
    rep.add_argument("--result-priority", type=int, default=0,
                     help="prio: reduction results' priority, 0..7 (default 0)")
    rep.add_argument("--mem-weight", type=int, default=1,
                     help="wrr: memory packets per turn of each ingress, 1..255 (default 1)")
    rep.add_argument("--result-weight", type=int, default=1,
                     help="wrr: reduction-result packets per turn, 1..255 (default 1)")
    rep.add_argument("--quantum-flits", type=int, default=None,
                     help="drr: flits per turn, 1..65535 (default: one chunk)")
    rep.add_argument("--mtu-flits", type=positive("--mtu-flits"), default=64)
    rep.add_argument("--dtype", choices=ELEMENT_TYPES, default="fp32")
    rep.add_argument("--link-gbps", type=real_number("--link-gbps", 0, exclusive=True),
                     default=None,
                     help="port bandwidth, GB/s (default: the trace GPU's NVLink)")
    rep.add_argument("--flit-scale", type=positive("--flit-scale"), default=1,
                     help="real flits per simulated flit (default 1)")
    rep.add_argument("--timeline", metavar="FILE",
                     help="Chrome trace-event timeline to write (default: "
                          "<trace>.timeline.json beside the trace)")
    rep.add_argument("--link-latency-ns", type=real_number("--link-latency-ns", 0),
                     default=None, help="one-way GPU<->switch hop, ns (default: the trace "
                                        "GPU's, 350 ns for an A100; 0 if the GPU is unknown)")
    rep.add_argument("--node", type=int, default=None,
                     help="of a multi-node trace, the node whose NVSwitch the switch is "
                          "(default 0): its GPUs' messages inside the node are replayed, what "
                          "leaves the node is left out and counted")
    rep.add_argument("--verbose", action="store_true", help="show the simulator's output")
    rep.add_argument("--json", action="store_true")
    rep.set_defaults(func=_cmd_replay)

    for name, helptext in (("run", "the main job: contention report (default experiment "
                                   "without CONFIG)"),
                           ("sweep", "run a configuration's cross product on a process pool "
                                     "or a Dask cluster")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("config", nargs="?",
                       help="configuration file (TOML)" + (" (required unless --resume)"
                                                           if name == "sweep" else ""))
        p.add_argument("-o", "--output",
                       help="results root directory (default: results)")
        p.add_argument("--name", help="run name: one folder in the results directory, never "
                                      "overwritten (default: <experiment>-<timestamp>, "
                                      "suffixed -2, -3... if taken)")
        p.add_argument("--resume", metavar="DIR",
                       help="finish the interrupted run in DIR: run only its missing points, "
                            "with its stored configuration, then write the report")
        p.add_argument("--jobs", type=positive("--jobs", 1, 256),
                       default=1 if name == "run" else None,
                       help="worker processes")
        p.add_argument("--no-rtl", action="store_true", help="skip the RTL windows")
        p.add_argument("--rtl-windows", action="store_true",
                       help="also replay each point's first full bucket window at flit scale 1 "
                            "through the RTL switch (minutes per point; docs/metrics.md)")
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
    b.add_argument("--quick", action="store_true",
                   help="smaller runs on quick (-O0) builds: agreement, not speed (for tests)")
    b.add_argument("--skip-run", action="store_true", help="do not time innet run")
    b.add_argument("--link-latency-ns", type=float, default=0.0, metavar="NS",
                   help="one-way GPU-switch link latency of the replayed trace (default 0; "
                        "innet run's NVLink: 350)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_cmd_bench_cosim)
