"""``innet allreduce`` (ring against in-switch over slots × chunk × message size, the slot pool's
bandwidth-delay product) and ``innet bench replay`` (whole iterations at flit scale 1).

``innet sweep`` runs an experiment's cross product of (workload, bucket, algorithm, policy),
each point a GPU-model iteration; this sweep's axes are the switch's (slots, chunk size) and
one all-reduce's size, each point one replay, so it is a command of its own.
"""

from pathlib import Path

from hw.errors import ParameterError
from sim.cli.output import UsageError, progress_lines, real_number
from sim.cli.output import emit as _emit

__all__ = ["register", "register_bench"]


def _size_list(text):
    import argparse
    try:
        values = [int(v, 0) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") \
            from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"values must be at least 1, not {text!r}")
    return tuple(values)


def _latency(text):
    import argparse

    from sim.replay.config import MAX_LINK_LATENCY_NS
    value = real_number("--link-latency-ns", 0)(text)
    if value > MAX_LINK_LATENCY_NS:
        raise argparse.ArgumentTypeError(f"--link-latency-ns must be at most "
                                         f"{MAX_LINK_LATENCY_NS:g}, not {value:g}")
    return value


def _cmd_allreduce(args):
    from sim.gpu.presets import gpu_preset
    from sim.replay.allreduce import sentence, sweep
    from sim.replay.config import ReplayConfig

    gpu = gpu_preset(args.gpu)
    latency = gpu.link_latency_s * 1e9 if args.link_latency_ns is None else args.link_latency_ns
    try:
        cfg = ReplayConfig(ports=args.gpus, lanes=args.lanes, slots=max(args.slots),
                           chunk_flits=max(args.chunk_flits), mtu_flits=args.mtu_flits,
                           link_gbps=gpu.link_gbps, link_latency_ns=latency)
        for s in args.slots:
            for p in args.chunk_flits:
                ReplayConfig(ports=args.gpus, lanes=args.lanes, slots=s, chunk_flits=p)
    except ParameterError as exc:
        raise UsageError(f"switch parameters: {exc}") from None
    out = Path(args.output) if args.output else None
    if out is not None and out.suffix != ".png":
        raise UsageError(f"-o {out}: the plot is a .png")
    result = sweep(cfg, slots=args.slots, chunk_flits=args.chunk_flits, sizes=args.sizes,
                   progress=progress_lines(args))
    result["switch"] = {k: v for k, v in cfg.as_dict().items() if k not in ("slots",
                                                                           "chunk_flits")}
    result["flit_scale"] = cfg.flit_scale
    result["link_latency_cycles"] = cfg.link_cycles
    result["cycle_ns"] = cfg.cycle_ns
    result["answer"] = sentence(result)
    if args.rtl:
        result["rtl"] = rtl_points(args.sim)
    if out is not None:
        plot(result, out)
        result["plot"] = str(out)
    lines = [f"one all-reduce on {args.gpus} GPUs through the switch ({cfg.lanes} lanes, "
             f"{cfg.flit_bytes} B flits, flit scale {cfg.flit_scale}, line {cfg.link_gbps:g} "
             f"GB/s, link hop {latency:g} ns = {cfg.link_cycles} cycles):",
             f"  {'algorithm':<26} " + " ".join(f"{_short(n):>9}" for n in args.sizes)
             + "   (time, us)"]
    curves = {}
    for r in result["rows"]:
        key = "ring" if r["algo"] == "ring" else \
            f"in-switch {r['slots']}x{r['chunk_bytes']} B"
        curves.setdefault(key, {})[r["bytes"]] = r
    for key, pts in curves.items():
        lines.append(f"  {key:<26} " + " ".join(f"{pts[n]['time_us']:>9.2f}" for n in args.sizes))
    lines.append(f"  {'':<26} " + " ".join(f"{_short(n):>9}" for n in args.sizes)
                 + "   (bandwidth, GB/s)")
    for key, pts in curves.items():
        lines.append(f"  {key:<26} " + " ".join(f"{pts[n]['algbw_gbps']:>9.1f}"
                                               for n in args.sizes))
    lines.append("  closed form S*C/R (R = switch + 1 + 2 link hops):")
    for b in result["bounds"]:
        lines.append(f"    {b['slots']} slots x {b['chunk_bytes']} B = {b['slot_bytes']:,} B "
                     f"per {b['round_trip_cycles']} cycles ({b['round_trip_ns']:.0f} ns): "
                     f"{b['bound_gbps']:.1f} GB/s (line {b['line_gbps']:g})")
    lines.append("  " + result["answer"])
    if args.rtl:
        r = result["rtl"]
        lines.append(f"  RTL ({args.sim}, {r['switch']}): " + "; ".join(
            f"{p['algo']} {p['bytes']} B: {p['rtl_cycles']} cycles RTL, {p['model_cycles']} "
            f"model, {p['exact']}/{p['deliveries']} deliveries equal" for p in r["points"]))
    if out is not None:
        lines.append(f"  plot: {out}")
    _emit(args, result, lines)
    return 0


def _short(n):
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def rtl_config():
    """The small switch of the RTL points: 4 ports, 2 lanes, 4 slots of 4 flits, a 40-cycle
    link hop (slots × chunk = 64 B per round trip: the bound is well under line rate)."""
    from sim.replay.config import ReplayConfig
    return ReplayConfig(ports=4, lanes=2, slots=4, chunk_flits=4, mtu_flits=16, link_gbps=8.0,
                        link_latency_ns=40.0)


def rtl_points(sim="verilator", sizes=(256, 1024, 4096)):
    """The all-reduce curve's small points on the RTL switch and the model, compared."""
    from sim.cosim.replay import RtlPlayer
    from sim.replay.allreduce import measure
    from sim.replay.result import compare

    cfg = rtl_config()
    points = []
    for algo in ("ring", "inswitch"):
        for n in sizes:
            rtl = measure(cfg, algo, n, backend=RtlPlayer(sim, quiet=True))
            model = measure(cfg, algo, n)
            agree = compare(rtl["replay"], model["replay"])
            points.append({"algo": algo, "bytes": n, "rtl_cycles": rtl["cycles"],
                           "model_cycles": model["cycles"], "rtl_algbw_gbps": rtl["algbw_gbps"],
                           "model_algbw_gbps": model["algbw_gbps"],
                           "deliveries": agree["deliveries"], "exact": agree["exact"],
                           "mismatches": rtl["replay"].mismatches})
    return {"switch": f"{cfg.ports} ports, {cfg.lanes} lanes, {cfg.slots} slots x "
                      f"{cfg.chunk_flits} flits, link hop {cfg.link_cycles} cycles",
            "points": points}


def plot(result, path):
    """All-reduce time and bandwidth against message size: ring, and in-switch per (slots,
    chunk), with each in-switch curve's S·C/R bound dotted."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    curves = {}
    for r in result["rows"]:
        key = ("ring", None, None) if r["algo"] == "ring" else \
            ("inswitch", r["slots"], r["chunk_bytes"])
        curves.setdefault(key, []).append(r)
    chunks = sorted({k[2] for k in curves if k[2]})
    styles = ["-", "--", "-.", ":"]
    for key, pts in curves.items():
        pts.sort(key=lambda r: r["bytes"])
        x = [p["bytes"] for p in pts]
        if key[0] == "ring":
            kw = {"color": "black", "lw": 2.2, "label": "ring"}
        else:
            kw = {"ls": styles[chunks.index(key[2]) % 4], "marker": "o", "ms": 3,
                  "label": f"in-switch, {key[1]} slots × {key[2]} B"}
        line, = a.plot(x, [p["time_us"] for p in pts], **kw)
        b.plot(x, [p["algbw_gbps"] for p in pts], **(kw | {"color": line.get_color()}))
        if key[0] == "inswitch":
            b.axhline(pts[0]["bound_gbps"], color=line.get_color(), ls=":", lw=0.8)
    line_gbps = result["switch"]["link_gbps"]
    b.axhline(line_gbps, color="grey", lw=0.8)
    b.text(min(r["bytes"] for r in result["rows"]), line_gbps * 1.03, "line rate", fontsize=8)
    for ax, label in ((a, "all-reduce time (µs)"), (b, "algorithm bandwidth (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message (bucket) size per GPU (bytes)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    a.set_yscale("log")
    b.set_yscale("log")
    b.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"One all-reduce, {result['rows'][0]['gpus']} GPUs, flit scale "
                 f"{result['flit_scale']}, link hop {result['switch']['link_latency_ns']:g} ns "
                 f"(dotted: S·C/R)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cmd_bench_replay(args):
    from sim.bench.replay import bench_replay

    payload = bench_replay(workloads=args.workload or ("bert_large", "resnet50", "gpt2_xl"),
                           algo=args.algo, flit_scale=args.flit_scale,
                           progress=progress_lines(args))
    first = payload["rows"][0]
    lines = [f"fast model (C core), whole iterations, 8 GPUs, flit scale {args.flit_scale} "
             f"({first['flit_bytes']} B flits, {first['chunk_bytes']} B chunks, link hop "
             f"{first['link_latency_cycles']} cycles):"]
    for r in payload["rows"]:
        lines.append(f"  {r['workload']:<11} {r['algo']:<8} {r['flits']:>13,} flits "
                     f"({r['flits_per_gpu']:,} per GPU), {r['packets']:>11,} packets: "
                     f"{r['seconds']:6.2f} s (plan {r['plan_s']:.2f} + replay "
                     f"{r['replay_s']:.2f}), CPU {r['cpu_s']:.2f} s (plan {r['plan_cpu_s']:.2f} "
                     f"+ replay {r['replay_cpu_s']:.2f}), {r['flits_per_s'] / 1e6:,.0f} M flits/s; "
                     f"x{r['seconds_ratio']:.2f} time for x{r['flits_ratio']:.2f} flits")
    for algo, ok in payload.get("within_target", {}).items():
        lines.append(f"  BERT-large {algo} within the {payload['target_s']:g} CPU s target: "
                     f"{'yes' if ok else 'NO'}")
    _emit(args, payload, lines)
    return 0


def register(sub, parser_class, positive):
    from sim.replay.allreduce import SIZES
    p = sub.add_parser("allreduce", help="one all-reduce through the switch: ring against "
                       "in-switch over slots x chunk size x message size (the slot pool's "
                       "bandwidth-delay product)")
    p.add_argument("--gpus", type=positive("--gpus", 2, 63), default=8)
    p.add_argument("--gpu", choices=["v100", "a100", "h100"], default="a100",
                   help="line rate and link hop of this GPU (default a100)")
    p.add_argument("--lanes", type=positive("--lanes", 1, 64), default=8)
    p.add_argument("--slots", type=_size_list, default=(16, 64, 256, 1024),
                   help="slot counts, comma-separated (default 16,64,256,1024)")
    p.add_argument("--chunk-flits", type=_size_list, default=(8, 32),
                   help="chunk lengths in flits, comma-separated (default 8,32)")
    p.add_argument("--sizes", type=_size_list, default=SIZES,
                   help="message sizes per GPU, bytes, comma-separated (default 4 KiB to "
                        "16 MiB in steps of 4)")
    p.add_argument("--mtu-flits", type=positive("--mtu-flits", 1, 1 << 20), default=64)
    p.add_argument("--link-latency-ns", type=_latency, default=None, help="one-way GPU<->switch hop, ns (default: the GPU's, "
                                      "350 ns)")
    p.add_argument("-o", "--output", help="write the plot here (.png)")
    p.add_argument("--rtl", action="store_true",
                   help="also replay small points on the RTL switch and compare with the model")
    p.add_argument("--sim", choices=["verilator", "icarus"], default="verilator")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_allreduce)


def register_bench(bench_sub, parser_class, positive):
    from sim.bench.replay import ALGOS, WORKLOADS
    b = bench_sub.add_parser("replay", help="fast model (C core) on whole iterations at flit "
                             "scale 1: BERT-large, ResNet-50, GPT-2 XL")
    b.add_argument("--workload", action="append", choices=WORKLOADS,
                   help="one workload (repeatable; default all three)")
    b.add_argument("--algo", choices=list(ALGOS), default="ring",
                   help="ring, tree, inswitch, or both (ring, then inswitch) in turn "
                        "(default ring)")
    b.add_argument("--flit-scale", type=positive("--flit-scale", 1, 1 << 20), default=1)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_cmd_bench_replay)
