"""``innet bench soak | numerics | fuzz | equiv``: the reliability benchmarks (docs/hw.md,
Reliability) and the lock-step comparison of the switch against another revision's."""

import functools

from hw.packet import MAX_PORTS
from hw.spec import MAX_CHUNK_FLITS, MAX_JOBS, MAX_SLOTS, MIN_PORTS, Policy
from sim.cli.output import emit as _emit
from sim.cli.output import progress_lines

__all__ = ["register_bench"]


def _cmd_bench_soak(args):
    from sim.bench.soak import soak_rtl

    say = progress_lines(args, prefix="")
    log = None if args.verbose and not args.json else _log_path(args, "soak")
    if say:
        say(f"... soak: {args.cycles:,} cycles, seed {args.seed}, {args.ports} ports, "
            f"{args.resets} reset(s), {args.sim}" +
            (f"; progress every 100,000 cycles in {log}" if log else ""))
    stats = soak_rtl(args.cycles, seed=args.seed, sim=args.sim, policy=args.policy,
                     resets=args.resets, watchdog=args.watchdog, ports=args.ports,
                     log_file=log)
    ok = not stats["failures"]
    s = stats
    lines = [f"soak ({s['simulator']}, {s['switch']}, {s['policy']}, seed {s['seed']}): "
             f"{'PASS' if ok else 'FAIL'}",
             f"  cycles {s['cycles']:,} in {s['wall_s']:.1f} s ({s['cycles_per_s']:,.0f} "
             f"cycles/s); resets {s['resets']}; reconfigurations {s['reconfigurations']}",
             f"  memory packets {s['memory_packets']:,}, reductions {s['reductions']:,} "
             f"({s['results']:,} results), faults injected {s['faults']:,}",
             f"  mismatches {s['mismatches']}, lost {s['lost']}, duplicated "
             f"{s['duplicated']}; longest pause with work outstanding {s['longest_quiet']} "
             f"cycles (watchdog {s['watchdog']:,})"]
    lines += [f"  ! {f}" for f in s["failures"]]
    _emit(args, stats, lines)
    return 0 if ok else 1


def _cmd_bench_numerics(args):
    from sim.bench.numerics import permutations_rtl

    stats = permutations_rtl(args.permutations, ports=args.ports, seed=args.seed, sim=args.sim,
                             log_file=_log_path(args, "numerics"))
    ok = stats["mismatches"] == 0 and not any(stats["errors"].values())
    s = stats
    lines = [f"numerics ({s['simulator']}, {s['switch']}): {'PASS' if ok else 'FAIL'}",
             f"  {s['permutations']:,} reductions (fp32, bf16, int32 in turn), "
             f"{s['distinct_orders']:,} distinct arrival orders, {s['results_checked']:,} "
             f"results: {s['mismatches']} differ from the numpy golden",
             f"  a naive adder in arrival order gives {s['naive_distinct']['fp32']} different "
             f"fp32 and {s['naive_distinct']['bf16']} different bf16 sums over 200 orders of "
             f"the same values"]
    _emit(args, stats, lines)
    return 0 if ok else 1


def _cmd_bench_fuzz(args, *, main):
    """``main``: the command line's entry point, which the fuzzer drives in-process (passed in
    by :func:`register_bench`, so neither this module nor the fuzzer imports it)."""
    import time

    from sim.reliability.fuzz import TARGETS, Violation, fuzz

    import importlib.util
    if importlib.util.find_spec("hypothesis") is None:
        from sim.cli.output import UsageError
        raise UsageError("bench fuzz needs hypothesis (pip install -e '.[dev]')")
    began = time.perf_counter()
    report, failure = {}, None
    try:
        # The fuzzer drives this command line's entry point; it does not import the CLI.
        fuzz(args.cases, seed=args.seed, targets=args.target or TARGETS, report=report,
             main=main)
    except Violation as exc:
        failure = str(exc)
    wall = time.perf_counter() - began
    total = sum(r["cases"] for r in report.values())
    payload = {"cases": total, "targets": report, "wall_s": wall, "violation": failure}
    lines = [f"fuzz: {'FAIL' if failure else 'PASS'}: {total:,} cases in {wall:.1f} s"]
    for name, r in report.items():
        lines.append(f"  {name:<7} {r['cases']:>6,} cases, {r['rejected']:>6,} rejected with "
                     f"one line and exit 2, the rest accepted")
    if failure:
        lines.append(f"  ! {failure}")
    _emit(args, payload, lines)
    return 1 if failure else 0


def _cmd_bench_equiv(args):
    from sim.bench.equiv import ReferenceUnusable, bench_equiv
    from sim.cli.output import UsageError

    try:
        r = bench_equiv(args.against, cycles=args.cycles, seeds=args.seeds, seed=args.seed,
                        ports=args.ports, lanes=args.lanes, slots=args.slots,
                        chunk_flits=args.chunk_flits, jobs=args.jobs, policy=args.policy,
                        egress=args.egress, progress=progress_lines(args, prefix=""))
    except ReferenceUnusable as exc:
        raise UsageError(str(exc)) from None
    runs = r["runs"]
    lines = [f"equiv: this tree's switch against {r['reference']} ({r['against']}): "
             f"{'AGREE' if r['agree'] else 'DIFFER'}",
             f"  {r['ports']} ports x {r['lanes']} lanes, {r['slots']} slots, "
             f"{r['chunk_flits']}-flit chunks, {r['jobs']} job entries, {r['policy']}, "
             f"egresses {'always ready' if r['egress'] == 'ready' else 'at random rates'}; "
             f"{len(runs)} seed(s) x {r['cycles_per_seed']:,} cycles in {r['wall_s']:.1f} s"]
    for run in runs:
        t = run["traffic"]
        lines.append(f"  seed {run['seed']}: {run['cycles']:,} cycles equal; flits in "
                     f"{run['flits_in']:,}, out {run['flits_out']:,}; contributions "
                     f"{t['contributions']:,} ({t['faulty_contributions']} with a faulty copy), "
                     f"memory packets {t['memory_packets']:,}, dropped kinds "
                     f"{t['dropped_kinds']}, truncated {t['truncated_by_sender']}, job writes "
                     f"{t['job_writes']}, clears {t['clears']}")
        if run["mismatch"]:
            d = run["mismatch"]
            lines.append(f"  ! first difference: cycle {d['cycle']}, {d['signal']}: this tree "
                         f"{d['this']}, reference {d['reference']}")
    _emit(args, r, lines)
    return 0 if r["agree"] else 1


def _log_path(args, name):
    import tempfile
    from pathlib import Path
    return Path(tempfile.gettempdir()) / f"innet-{name}-{args.sim}.log"


def register_bench(bench_sub, parser_class, positive, entry):
    ports = positive("--ports", 3, 63)
    soak = bench_sub.add_parser("soak", help="random mixed traffic, faults and resets through "
                                "the RTL switch, checked packet by packet")
    soak.add_argument("--cycles", type=positive("--cycles", 1000), default=1_000_000)
    soak.add_argument("--seed", type=positive("--seed", 0), default=1)
    soak.add_argument("--ports", type=ports, default=8)
    soak.add_argument("--resets", type=positive("--resets", 0, 1000), default=1,
                      help="resets in the middle of traffic (default 1)")
    soak.add_argument("--policy", choices=Policy.names(), default="rr")
    soak.add_argument("--watchdog", type=positive("--watchdog", 100), default=5000,
                      help="cycles with work outstanding and nothing moving that fail the "
                           "run (default 5000)")
    soak.add_argument("--sim", choices=["verilator", "icarus"], default="verilator")
    soak.add_argument("--verbose", action="store_true", help="show the simulator's output")
    soak.add_argument("--json", action="store_true")
    soak.set_defaults(func=_cmd_bench_soak)

    num = bench_sub.add_parser("numerics", help="bit-identical fp32/bf16 results over random "
                               "arrival orders (RTL switch)")
    num.add_argument("--permutations", type=positive("--permutations"), default=1000)
    num.add_argument("--ports", type=ports, default=8)
    num.add_argument("--seed", type=positive("--seed", 0), default=1)
    num.add_argument("--sim", choices=["verilator", "icarus"], default="verilator")
    num.add_argument("--json", action="store_true")
    num.set_defaults(func=_cmd_bench_numerics)

    eq = bench_sub.add_parser("equiv", help="this tree's switch against another revision's, "
                              "in lock-step: every ready, flit and counter, every cycle")
    eq.add_argument("--against", required=True, metavar="REV|DIR",
                    help="a git revision of this checkout (HEAD, a commit, a tag) or a "
                         "directory holding an hw/ package")
    eq.add_argument("--cycles", type=positive("--cycles", 10, 10_000_000), default=2000,
                    help="cycles per seed (default 2000)")
    eq.add_argument("--seeds", type=positive("--seeds", 1, 1000), default=3,
                    help="runs, one seed each (default 3)")
    eq.add_argument("--seed", type=positive("--seed", 0), default=1, help="first seed")
    eq.add_argument("--ports", type=positive("--ports", MIN_PORTS, MAX_PORTS), default=4)
    eq.add_argument("--lanes", type=positive("--lanes", 1, 64), default=2)
    eq.add_argument("--slots", type=positive("--slots", 2, MAX_SLOTS), default=8,
                    help="slot pool (two tenants, half each; default 8)")
    eq.add_argument("--chunk-flits", type=positive("--chunk-flits", 1, MAX_CHUNK_FLITS),
                    default=4)
    eq.add_argument("--jobs", type=positive("--jobs", 2, MAX_JOBS), default=4,
                    help="job-table entries (at least 2: two tenants; default 4)")
    eq.add_argument("--policy", choices=Policy.names(), default="rr")
    eq.add_argument("--egress", choices=["random", "ready"], default="random",
                    help="egresses that take flits at a random rate each (default), or every "
                         "cycle (as a replay's GPUs do)")
    eq.add_argument("--json", action="store_true")
    eq.set_defaults(func=_cmd_bench_equiv)

    fz = bench_sub.add_parser("fuzz", help="hypothesis fuzzing of the trace reader, the "
                              "configuration loader and the command line")
    fz.add_argument("--cases", type=positive("--cases", 3), default=10_000)
    fz.add_argument("--seed", type=positive("--seed", 0), default=1)
    fz.add_argument("--target", action="append", choices=["trace", "config", "cli"],
                    help="one target (repeatable; default all three)")
    fz.add_argument("--json", action="store_true")
    fz.set_defaults(func=functools.partial(_cmd_bench_fuzz, main=entry))
