"""``innet model ...`` and ``innet trace ...``: the GPU model and its traces from the command line.

Registered into the main parser by :func:`register`.
"""

import math
import re
from fractions import Fraction
from pathlib import Path

from sim.cli.output import UsageError, emit as _print, real_number
from sim.gpu.presets import MAX_BYTES, ModelInputError, shown

__all__ = ["register", "parse_size"]

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}
MiB = 1 << 20

#: Most records ``innet trace gen`` makes: 320 MB as a binary trace, and about 3 GB of memory
#: and a few minutes to generate (a record takes some 270 bytes and 12 us in Python).
MAX_TRACE_RECORDS = 10_000_000


def parse_size(text, what="size"):
    """``"1GiB"`` → 1073741824; ``"25MB"`` → 25000000; ``"1e3MiB"`` → 1048576000; plain
    numbers are bytes. The value, computed exactly, must be a whole number of bytes in
    [1, 2^50].

    Raises
    ------
    UsageError
        For anything else, naming ``what`` (``size``, or the option).
    """
    text = str(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*", text)
    if not match or match.group(3).upper() not in _UNITS:
        raise UsageError(f"{what} {_echo(text)} is not a number of bytes with an optional "
                         f"unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    # The exponent is clamped before the exact arithmetic: 1e999999999 would otherwise build
    # a billion-digit integer just to be refused as too large (or too small).
    exponent = max(-99, min(99, int(match.group(2) or 0)))
    value = Fraction(match.group(1)) * Fraction(10) ** exponent * _UNITS[match.group(3).upper()]
    if value <= 0:
        raise UsageError(f"{what} {_echo(text)} must be positive")
    if value > MAX_BYTES:
        raise UsageError(f"{what} {_echo(text)} is more than {MAX_BYTES} bytes (2^50, "
                         f"1024 TiB), the largest size the model takes")
    if value.denominator != 1:
        raise UsageError(f"{what} {_echo(text)} is {float(value):.12g} bytes, not a whole number "
                         f"of bytes")
    return int(value)


def _echo(text, limit=40):
    """``text`` quoted for an error message, cut short when it is long."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _bytes_option(flag, value, unit, unit_name):
    """A number of ``unit_name`` (``unit`` bytes each; finite, from :func:`real_number`) as
    whole bytes, truncated as DDP truncates ``bucket_cap_mb``; a positive value must come to at
    least one byte, and none to more than 2^50.

    Raises
    ------
    UsageError
    """
    if value > MAX_BYTES / unit:
        raise UsageError(f"{flag} must be at most {MAX_BYTES / unit:g} {unit_name} (2^50 bytes), "
                         f"not {value:g}")
    nbytes = int(value * unit)
    if value > 0 and nbytes < 1:
        raise UsageError(f"{flag} {value:g} is less than one byte (1 byte = {1 / unit:.3g} "
                         f"{unit_name})")
    return nbytes


def _gpu(name):
    from sim.gpu.presets import gpu_preset
    try:
        return gpu_preset(name)
    except ValueError as exc:
        raise UsageError(f"--gpu: {exc}") from None


def _workload(name, batch, args=None):
    from sim.gpu.workloads import build_workload
    extra = {}
    if args is not None and name == "transformer":
        for key in ("hidden", "layers", "seq"):
            if getattr(args, key, None) is not None:
                extra[key] = getattr(args, key)
    elif args is not None and any(getattr(args, k, None) is not None
                                  for k in ("hidden", "layers")):
        raise UsageError("--hidden/--layers apply to --model transformer only")
    elif args is not None and getattr(args, "seq", None) is not None:
        extra["seq"] = args.seq
    try:
        return build_workload(name, batch=batch, **extra)
    except ModelInputError:
        raise   # names the option's parameter itself
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--model: {exc}") from None


def _check_gpus(n):
    """``--gpus``: one switch holds at most MAX_GPUS (the iteration model checks it too; the
    command line says it first, naming the option, before making a list per GPU)."""
    from sim.gpu.presets import MAX_GPUS
    if n > MAX_GPUS:
        raise UsageError(f"--gpus must be at most {MAX_GPUS} (one switch of {MAX_GPUS} ports as "
                         f"an NVSwitch gen3, each GPU on a port of its own), not {shown(n)}")


def _check_algo(algo):
    from sim.gpu.collectives import ALGORITHMS
    if algo not in ALGORITHMS:
        raise UsageError(f"--algo must be one of {', '.join(ALGORITHMS)}, not {algo!r}")


# -- model collective / curve ------------------------------------------------------------

#: Options that describe innet's switch; they apply to ``--algo inswitch`` only.
_SWITCH_OPTIONS = (("--slots", "slots"), ("--chunk-flits", "chunk_flits"), ("--lanes", "lanes"),
                   ("--ports", "ports"))


def _switch(args):
    """innet's switch from ``--slots/--chunk-flits/--lanes/--ports`` (None: the model's default
    switch for the GPU), refusing them for any other algorithm."""
    given = [flag for flag, key in _SWITCH_OPTIONS if getattr(args, key, None) is not None]
    if not given:
        return None
    if args.algo != "inswitch":
        raise UsageError(f"{', '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to "
                         f"--algo inswitch only (innet's switch), not {args.algo}")
    from sim.gpu.in_switch import default_switch, make_switch
    from sim.gpu.presets import MAX_GPUS
    base = default_switch(_gpu(args.gpu), min(args.gpus, MAX_GPUS))
    return make_switch(args.ports if args.ports is not None else base.ports,
                       args.slots if args.slots is not None else base.slots,
                       args.chunk_flits if args.chunk_flits is not None else base.chunk_flits,
                       args.lanes if args.lanes is not None else base.lanes)


def _cost_payload(cost):
    payload = {"size_bytes": cost.size_bytes, "time_us": cost.time_s * 1e6,
               "algbw_GBps": cost.algbw_gbps, "busbw_GBps": cost.busbw_gbps,
               "protocol": cost.protocol, "sms": cost.sms}
    return payload


def _cmd_collective(args):
    from sim.gpu.collectives import collective_cost
    if args.nodes > 1 or args.algo == "sharp":   # across nodes: sim/cli/multinode.py
        from sim.cli import multinode
        multinode.check_nodes(args)
        return multinode.collective(args, parse_size(args.size, "--size"))
    gpu = _gpu(args.gpu)
    _check_algo(args.algo)
    _check_gpus(args.gpus)
    size = parse_size(args.size, "--size")
    cost = collective_cost(gpu, args.gpus, size, args.op, args.algo, args.channels,
                           switch=_switch(args))
    payload = {"gpu": gpu.name, "gpus": args.gpus, "op": args.op, "algo": args.algo,
               **_cost_payload(cost), "link_bytes_per_gpu": cost.link_bytes,
               "link_bytes_sent_per_gpu": cost.sent_bytes,
               "link_bytes_received_per_gpu": cost.received_bytes,
               "hbm_bytes_per_gpu": cost.hbm_bytes, "latency_us": cost.latency_s * 1e6,
               "link_rate_GBps": cost.link_rate_gbps, "units": "GB/s = 1e9 bytes/s"}
    lines = [
        f"{args.op} {args.algo} on {args.gpus} x {gpu.name}, {size} bytes:",
        f"  time {cost.time_s * 1e6:.1f} us ({cost.protocol}), algbw {cost.algbw_gbps:.1f} GB/s, "
        f"busbw {cost.busbw_gbps:.1f} GB/s (GB = 1e9 bytes)",
        f"  SMs {cost.sms}, per GPU: link {cost.sent_bytes / 1e6:.1f} MB sent, "
        f"{cost.received_bytes / 1e6:.1f} MB received, HBM {cost.hbm_bytes / 1e6:.1f} MB"]
    if cost.switch:
        sw = cost.switch
        payload["switch"] = sw
        lines.append(
            f"  switch: {sw['ports']} ports, {sw['slots']} slots x {sw['chunk_bytes']} B chunks "
            f"({sw['chunk_flits']} flits x {sw['lanes']} lanes); round trip "
            f"{sw['round_trip_ns']:.0f} ns, window {sw['window_bytes']} B vs bandwidth-delay "
            f"{sw['bdp_bytes']:.0f} B: {sw['rate_GBps']:.1f} of {sw['line_GBps']:.1f} GB/s"
            f"{' (slot-limited)' if sw['slot_limited'] else ''}")
    _print(args, payload, lines)


def _cmd_curve(args):
    from sim.gpu.collectives import collective_curve, curve_sizes
    gpu = _gpu(args.gpu)
    _check_algo(args.algo)
    _check_gpus(args.gpus)
    low = parse_size(args.min_size, "--min-size")
    high = parse_size(args.max_size, "--max-size")
    if low > high:
        raise UsageError(f"--min-size ({low} bytes) must be at most --max-size ({high} bytes)")
    if high > gpu.hbm_bytes:
        raise UsageError(f"--max-size must be at most the HBM of one {gpu.name}, "
                         f"{gpu.hbm_bytes} bytes, not {high}")
    out = Path(args.plot) if args.plot else None
    if out is not None and out.suffix.lower() != ".png":
        raise UsageError(f"--plot {_echo(args.plot)}: expected a .png file")
    if out is not None and str(out.parent) and not out.parent.is_dir():
        raise UsageError(f"--plot: directory {out.parent} does not exist")
    costs = collective_curve(gpu, args.gpus, args.algo, args.op, curve_sizes(low, high),
                             switch=_switch(args), channels=args.channels)
    rows = [_cost_payload(c) for c in costs]
    peak = max(r["busbw_GBps"] for r in rows)
    half = next(r["size_bytes"] for r in rows if r["busbw_GBps"] >= peak / 2)
    payload = {"gpu": gpu.name, "gpus": args.gpus, "op": args.op, "algo": args.algo,
               "rows": rows, "peak_busbw_GBps": peak, "half_peak_size_bytes": half,
               "units": "GB/s = 1e9 bytes/s"}
    if out is not None:
        _plot_curve(out, rows, f"{args.op} {args.algo}, {args.gpus} x {gpu.name}")
        payload["plot"] = str(out)
    lines = [f"{args.op} {args.algo} on {args.gpus} x {gpu.name} (GB = 1e9 bytes):",
             f"{'size':>12} {'time_us':>10} {'algbw_GBps':>11} {'busbw_GBps':>11}  protocol"]
    lines += [f"{r['size_bytes']:>12} {r['time_us']:>10.1f} {r['algbw_GBps']:>11.2f} "
              f"{r['busbw_GBps']:>11.2f}  {r['protocol']}" for r in rows]
    lines.append(f"peak busbw {peak:.1f} GB/s; half of it from {half} bytes")
    if out is not None:
        lines.append(f"wrote {out}")
    _print(args, payload, lines)


def _plot_curve(out, rows, title):
    """Bus bandwidth vs size on a log-2 axis, written atomically to ``out``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.files import atomic_writes
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["size_bytes"] for r in rows], [r["busbw_GBps"] for r in rows], marker="o",
            markersize=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    try:
        with atomic_writes([out]) as (tmp,):
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)


# -- model overlap -------------------------------------------------------------------------

def _parse_compute(text, gpu):
    """``gemm:M,N,K`` (FP16 operands and result, which must fit in the GPU's HBM) or
    ``stream:BYTES`` as a :class:`KernelSpec`."""
    from sim.gpu.contention import KernelSpec
    kind, _, rest = text.partition(":")
    if kind == "gemm":
        match = re.fullmatch(r"([0-9]+),([0-9]+),([0-9]+)", rest)
        if not match:
            raise UsageError(f"--compute {_echo(text)}: expected gemm:M,N,K")
        m, n, k = (int(x) for x in match.groups())
        if min(m, n, k) <= 0:
            raise UsageError(f"--compute {_echo(text)}: dimensions must be positive")
        matrix_bytes = 2 * (m * k + k * n + m * n)
        if matrix_bytes > gpu.hbm_bytes:
            raise UsageError(f"--compute {_echo(text)}: the three matrices take "
                             f"{shown(matrix_bytes)} bytes (2 an element), more than the HBM "
                             f"of one {gpu.name}, {gpu.hbm_bytes} bytes")
        return KernelSpec(f"gemm {m}x{n}x{k}", 2.0 * m * n * k, float(matrix_bytes))
    if kind == "stream":
        nbytes = parse_size(rest, f"--compute {_echo(text)}: size")
        return KernelSpec(f"stream {rest}", 0.0, float(nbytes), False)
    raise UsageError(f"--compute {_echo(text)}: expected gemm:M,N,K or stream:BYTES")


#: The collectives ``innet model overlap --comm OP:SIZE`` runs beside the compute kernel.
_OVERLAP_OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


def _cmd_overlap(args):
    from sim.gpu.collectives import collective_cost
    from sim.gpu.contention import overlap
    from sim.cli import multinode
    gpu = _gpu(args.gpu)
    across = args.nodes > 1 or args.algo == "sharp"   # across nodes: sim/cli/multinode.py
    if across:
        multinode.check_nodes(args)
    else:
        _check_algo(args.algo)
        _check_gpus(args.gpus)
    kernel = _parse_compute(args.compute, gpu)
    op, _, size_text = args.comm.partition(":")
    if op not in _OVERLAP_OPS or not size_text:
        raise UsageError(f"--comm {_echo(args.comm)}: expected OP:SIZE with OP one of "
                         f"{', '.join(_OVERLAP_OPS)}")
    size = parse_size(size_text, f"--comm {_echo(args.comm)}: size")
    comm = multinode.collective_cost(args, size, op) if across else \
        collective_cost(gpu, args.gpus, size, op, args.algo, switch=_switch(args))
    o = overlap(gpu, kernel, comm)
    payload = {"gpu": gpu.name, "gpus": args.gpus, "nodes": args.nodes, "algo": args.algo,
               "compute": kernel.name,
               "comm": args.comm, **{k: v for k, v in o.__dict__.items()}}
    _print(args, payload, [
        f"{kernel.name} with {args.comm} ({args.algo}, {args.gpus} x {gpu.name}"
        f"{f' x {args.nodes} nodes' if args.nodes > 1 else ''}):",
        f"  compute {o.compute_alone_s * 1e3:.3f} ms alone, {o.compute_overlapped_s * 1e3:.3f} "
        f"ms overlapped: {o.compute_slowdown * 100:+.1f} % "
        f"(SM {o.compute_attribution['sm'] * 100:.1f}, HBM "
        f"{o.compute_attribution['hbm'] * 100:.1f}, L2 "
        f"{o.compute_attribution.get('l2', 0.0) * 100:.1f})",
        f"  {op} {o.comm_alone_s * 1e3:.3f} ms alone, {o.comm_overlapped_s * 1e3:.3f} ms "
        f"overlapped: {o.comm_slowdown * 100:+.1f} % (HBM {o.comm_attribution['hbm'] * 100:.1f},"
        f" link {o.comm_attribution['link'] * 100:.1f})",
        f"  SM share left to compute {o.sm_share:.3f}; HBM to compute "
        f"{o.compute_hbm_gbps:.0f} GB/s, to the {op} {o.comm_hbm_gbps:.0f} GB/s"])


# -- model iteration -----------------------------------------------------------------------

def _straggler_speeds(args):
    """The per-GPU speed factors of the ``--straggler GPU:FACTOR`` options (GPUs numbered node
    by node across ``--nodes``), or None."""
    from sim.gpu.iteration import MAX_SPEED, MIN_SPEED
    if not args.straggler:
        return None
    ranks = args.gpus * getattr(args, "nodes", 1)   # --gpus is per node with --nodes
    speed = [1.0] * ranks
    given = set()
    for item in args.straggler:
        match = re.fullmatch(r"([0-9]+):([0-9A-Za-z.+-]+)", item)
        try:
            if not match:
                raise ValueError(item)
            g, factor = int(match.group(1)), float(match.group(2))
        except ValueError:
            raise UsageError(f"--straggler {item!r}: expected GPU:FACTOR") from None
        if not 0 <= g < ranks:
            raise UsageError(f"--straggler {item!r}: GPU must be in [0, {ranks - 1}], "
                             f"not {shown(g)}")
        if not (math.isfinite(factor) and MIN_SPEED <= factor <= MAX_SPEED):
            raise UsageError(f"--straggler {item!r}: the factor must be a finite number in "
                             f"[{MIN_SPEED:g}, {MAX_SPEED:g}] (a GPU at most {MAX_SPEED:g} "
                             f"times slower or faster than nominal), not {match.group(2)}")
        if g in given:
            raise UsageError(f"--straggler {item!r}: GPU {g} has a factor already "
                             f"({speed[g]:g})")
        given.add(g)
        speed[g] = factor
    return speed


def _iteration_config(args, node=None):
    """The :class:`IterationConfig` of the options ``innet model iteration`` and ``innet trace
    gen`` share (what the model validates it checks itself); ``node`` (a
    :class:`sim.gpu.nodes.NodeSpec`) for ``--nodes`` > 1."""
    from sim.gpu.iteration import IterationConfig
    _check_gpus(args.gpus)
    if args.bucketing != "ddp":
        given = [flag for flag, value in (("--bucket-mb", args.bucket_mb),
                                          ("--first-bucket-mb", args.first_bucket_mb))
                 if value is not None]
        if given:
            raise UsageError(f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} "
                             f"to --bucketing ddp only (Horovod fuses gradients up to "
                             f"{IterationConfig.fusion_bytes} bytes)")
    sizes = {}
    if args.bucket_mb is not None:
        sizes["bucket_cap_bytes"] = _bytes_option("--bucket-mb", args.bucket_mb, MiB, "MiB")
    if args.first_bucket_mb is not None:
        sizes["first_bucket_bytes"] = _bytes_option("--first-bucket-mb", args.first_bucket_mb,
                                                    MiB, "MiB")
    if node is not None:
        sizes.update(nodes=args.nodes, node=node)
    return IterationConfig(n_gpus=args.gpus, algo=args.algo, bucketing=args.bucketing,
                           overlap=not args.no_overlap, grad_accum=args.grad_accum,
                           precision=args.precision, speed=_straggler_speeds(args),
                           channels=args.channels, **sizes)


def _node(args):
    """The node preset when ``--nodes`` > 1 or ``--algo sharp`` (checked by
    sim/cli/multinode.py), else None after checking ``--algo`` for one node."""
    if args.nodes > 1 or args.algo == "sharp":
        from sim.cli import multinode
        node = multinode.check_nodes(args)
        if args.channels is not None:
            raise UsageError("--channels applies to one node only (NCCL sets the multi-node "
                             "channels from the NICs)")
        return node
    _check_algo(args.algo)
    return None


def _cmd_iteration(args):
    from sim.gpu.iteration import simulate_iteration
    gpu = _gpu(args.gpu)
    node = _node(args)
    workload = _workload(args.model, args.batch, args)
    result = simulate_iteration(workload, gpu, _iteration_config(args, node), record=False)
    payload = {"model": workload.name, "batch_per_gpu": workload.batch, "gpu": gpu.name,
               "nodes": args.nodes, "gpus_per_node": args.gpus,
               **result.summary(), "units": "seconds; slowdowns as fractions"}
    attr = result.slowdown_attribution
    where = (f"{args.nodes} x {node.name}, {args.gpus} GPUs each" if node else
             f"{args.gpus} x {gpu.name}")
    _print(args, payload, [
        f"{workload.name} (batch {workload.batch}/GPU) on {where}, "
        f"{args.algo}, {result.buckets} buckets:",
        f"  forward            {result.forward_s * 1e3:8.2f} ms",
        f"  backward alone     {result.backward_alone_s * 1e3:8.2f} ms",
        f"  backward overlapped{result.backward_s * 1e3:8.2f} ms  "
        f"({result.backprop_slowdown * 100:+.1f} %: SM {attr['sm'] * 100:.1f}, "
        f"HBM {attr['hbm'] * 100:.1f}, L2 {attr.get('l2', 0.0) * 100:.1f}, "
        f"link {attr['link'] * 100:.1f})",
        f"  all-reduce total   {result.allreduce_s * 1e3:8.2f} ms "
        f"(alone {result.allreduce_alone_s * 1e3:.2f} ms)",
        f"  exposed comm       {result.exposed_comm_s * 1e3:8.2f} ms",
        f"  iteration          {result.iteration_s * 1e3:8.2f} ms"])


# -- model calibrate -----------------------------------------------------------------------

def _cmd_calibrate(args):
    from sim.gpu.calibration import calibration_rows, calibration_markdown
    rows = calibration_rows()
    if args.write:
        from sim.files import atomic_writes
        with atomic_writes([Path(args.write)]) as (tmp,):
            tmp.write_text(calibration_markdown(rows))
    failed = [r for r in rows if not r["within"]]
    _print(args, {"rows": rows, "all_within": not failed},
           [f"{r['quantity']}: model {r['model']:.4g} vs published {r['published']} "
            f"({r['error']}) {'ok' if r['within'] else 'MISSED ' + r['tolerance']}"
            for r in rows] + ([f"wrote {args.write}"] if args.write else []))
    return 0   # a miss is a finding the table shows (tests/test_calibration.py holds them)


def _cmd_validate(args):
    """Every published figure innet is compared with: fitted or predicted, within or missed.
    Exit 0 (a miss is a finding the table shows, not an error)."""
    from sim.gpu.validation import validation_rows
    rows = validation_rows()
    missed = [r for r in rows if not r["within"]]
    fitted = sum(r["role"] == "fitted" for r in rows)
    _print(args, {"rows": rows, "fitted": fitted, "predicted": len(rows) - fitted,
                  "missed": len(missed)},
           [f"{r['quantity']}: model {r['model']:.4g} {r['unit']} vs published "
            f"{r['published']} {r['unit']} {r['tolerance']} ({r['error']}, {r['role']}) "
            f"{'within' if r['within'] else 'MISSED'}" for r in rows] +
           [f"{len(rows)} rows: {fitted} fitted, {len(rows) - fitted} predicted, "
            f"{len(missed)} missed"])
    return 0


# -- trace ---------------------------------------------------------------------------------

def _cmd_trace_gen(args):
    from sim.trace.format import write_trace
    from sim.trace.generate import generate_trace
    gpu = _gpu(args.gpu)
    node = _node(args)
    if args.algo == "nvls":   # the trace format records ring, tree, direct, inswitch
        raise UsageError("--algo nvls has no trace form (a trace records ring, tree, direct or "
                         "inswitch); use --algo inswitch for an in-switch reduction")
    if args.algo == "direct" and args.gpus > 64:
        raise UsageError("--algo direct expands to n^2 messages; use at most 64 GPUs")
    if args.gpus < 2:
        raise UsageError(f"--gpus must be at least 2, not {args.gpus}")
    workload = _workload(args.model, args.batch, args)
    out = Path(args.output)
    if not out.parent.is_dir() and str(out.parent):
        raise UsageError(f"{out}: directory {out.parent} does not exist")
    if args.p2p_mb < 0:
        raise UsageError(f"--p2p-mb must not be negative, not {args.p2p_mb}")
    meta, records, result = generate_trace(
        workload, gpu, args.gpus, args.algo,
        chunk_bytes=_bytes_option("--chunk-kb", args.chunk_kb, 1024, "KiB"),
        config=_iteration_config(args, node),
        p2p_bytes=_bytes_option("--p2p-mb", args.p2p_mb, MiB, "MiB"),
        max_records=MAX_TRACE_RECORDS, traffic=tuple(dict.fromkeys(args.traffic)))
    # The model's options as given (null: the model's own default).
    meta.update({"seq_tokens": args.seq, "hidden_features": args.hidden,
                 "layers": args.layers})
    count = write_trace(out, meta, records, args.format)
    where = f"{args.nodes} x {args.gpus} GPUs" if node else f"{args.gpus} GPUs"
    _print(args, {"file": str(out), "records": count, **meta},
           [f"wrote {out}: {count} records, {where}, {workload.name}, {args.algo}, "
            f"iteration {result.iteration_s * 1e3:.2f} ms"])


def _cmd_trace_info(args):
    from sim.trace.format import trace_summary
    summary = trace_summary(args.file)
    meta = summary["metadata"]
    _print(args, summary, [
        f"{args.file}: innet trace v{summary['version']} ({summary['form']}), "
        f"{meta['gpus']} GPUs",
        f"  checksums: {summary['checksums']}",
        "  metadata: " + ", ".join(f"{k}={v}" for k, v in sorted(meta.items())
                                     if k not in ("gpus",)),
        f"  records: {summary['records']} ("
        + ", ".join(f"{k} {v}" for k, v in summary["by_type"].items()) + ")",
        f"  gradient bytes {summary['grad_bytes']}, memory bytes {summary['mem_bytes']}, "
        f"span {summary['span_ns'] / 1e6:.3f} ms",
        *_route_lines(summary)])


def _route_lines(summary):
    """The bytes by route and by kind of link of a trace summary (``innet trace info``)."""
    meta = summary["metadata"]
    lines = []
    if meta.get("nodes", 1) > 1:
        lines.append(f"  nodes: {meta['nodes']} x {meta.get('gpus_per_node')} GPUs "
                     f"({meta.get('node_preset', 'unnamed node')}), ranks numbered node by node")
    lines.append("  bytes by route: " + (", ".join(f"{route} {nbytes}" for route, nbytes
                                                   in summary["route_bytes"].items()) or "none"))
    lines.append("  bytes by link (each message once per kind of link it crosses): "
                 + (", ".join(f"{link} {nbytes}" for link, nbytes
                              in summary["link_bytes"].items()) or "none"))
    return lines


def _cmd_trace_validate(args):
    from sim.trace.format import trace_summary
    summary = trace_summary(args.file)   # reads, and so validates, every record
    meta, count = summary["metadata"], summary["records"]
    nodes = meta.get("nodes", 1)
    _print(args, {"file": args.file, "valid": True, "records": count, "gpus": meta["gpus"],
                  "nodes": nodes, "route_bytes": summary["route_bytes"],
                  "link_bytes": summary["link_bytes"]},
           [f"{args.file}: valid ({count} records, {meta['gpus']} GPUs"
            f"{f' on {nodes} nodes' if nodes > 1 else ''}; bytes by link: "
            + (", ".join(f"{k} {v}" for k, v in summary["link_bytes"].items()) or "none")
            + ")"])


# -- registration --------------------------------------------------------------------------

def register(sub, parser_class, positive):
    model = sub.add_parser("model", help="GPU model queries")
    msub = model.add_subparsers(dest="query", required=True, parser_class=parser_class)

    col = msub.add_parser("collective", help="one collective: time, algbw, busbw, SMs, HBM")
    col.add_argument("--gpu", default="a100")
    col.add_argument("--gpus", type=positive("--gpus", 2), default=8)
    col.add_argument("--algo", default="ring")
    col.add_argument("--op", default="allreduce",
                     choices=["allreduce", "reducescatter", "allgather", "reduce", "broadcast",
                              "p2p"])
    col.add_argument("--size", default="1GiB", help="bytes, with an optional unit (25MiB, 1GB)")
    col.add_argument("--channels", type=positive("--channels"), help="override the SM count")
    col.add_argument("--nodes", type=positive("--nodes", 1), default=1,
                     help="nodes (DGX presets: a100, h100); --gpus is then per node")
    _switch_arguments(col, positive)
    col.add_argument("--json", action="store_true")
    col.set_defaults(func=_cmd_collective)

    cur = msub.add_parser("curve", help="one collective over message sizes: time, algbw, busbw, "
                                        "protocol (as nccl-tests prints)")
    cur.add_argument("--gpu", default="h100")
    cur.add_argument("--gpus", type=positive("--gpus", 2), default=8)
    cur.add_argument("--algo", default="ring")
    cur.add_argument("--op", default="allreduce",
                     choices=["allreduce", "reducescatter", "allgather", "reduce", "broadcast"])
    cur.add_argument("--min-size", default="1KiB", help="smallest size (default 1KiB)")
    cur.add_argument("--max-size", default="4GiB", help="largest size (default 4GiB); sizes "
                                                        "double from the smallest")
    cur.add_argument("--channels", type=positive("--channels"), help="override the SM count")
    _switch_arguments(cur, positive)
    cur.add_argument("--plot", metavar="FILE.png", help="also plot busbw vs size into FILE.png")
    cur.add_argument("--json", action="store_true")
    cur.set_defaults(func=_cmd_curve)

    ov = msub.add_parser("overlap", help="a compute kernel and an all-reduce at the same time")
    ov.add_argument("--gpu", default="a100")
    ov.add_argument("--gpus", type=positive("--gpus", 2), default=8)
    ov.add_argument("--compute", default="gemm:8192,8192,8192",
                    help="gemm:M,N,K or stream:BYTES (a memory-bound kernel)")
    ov.add_argument("--comm", default="allreduce:256MiB",
                    help="OP:SIZE, OP one of allreduce, allgather, reducescatter, broadcast, "
                         "reduce")
    ov.add_argument("--algo", default="ring")
    ov.add_argument("--nodes", type=positive("--nodes", 1), default=1,
                    help="nodes (DGX presets: a100, h100); --gpus is then per node")
    _switch_arguments(ov, positive)
    ov.add_argument("--json", action="store_true")
    ov.set_defaults(func=_cmd_overlap)

    it = msub.add_parser("iteration", help="one data-parallel training iteration")
    _iteration_arguments(it, positive)
    it.add_argument("--nodes", type=positive("--nodes", 1), default=1,
                    help="nodes (DGX presets: a100, h100); --gpus is then per node, --algo "
                         "ring, tree or sharp")
    it.add_argument("--json", action="store_true")
    it.set_defaults(func=_cmd_iteration)

    cal = msub.add_parser("calibrate", help="model vs published figures (docs/calibration.md)")
    cal.add_argument("--write", metavar="FILE", help="write the Markdown table to FILE")
    cal.add_argument("--json", action="store_true")
    cal.set_defaults(func=_cmd_calibrate)

    val = msub.add_parser("validate", help="every published figure: model, band, fitted or "
                                           "predicted, within or missed")
    val.add_argument("--json", action="store_true")
    val.set_defaults(func=_cmd_validate)

    trace = sub.add_parser("trace", help="GPU traces: generate, inspect, validate")
    tsub = trace.add_subparsers(dest="action", required=True, parser_class=parser_class)
    gen = tsub.add_parser("gen", help="simulate an iteration and write its trace")
    _iteration_arguments(gen, positive, gpus_min=2)
    gen.add_argument("--nodes", type=positive("--nodes", 1), default=1,
                     help="nodes (DGX presets: a100, h100); --gpus is then per node, --algo "
                          "ring, tree or sharp; every message records its route")
    gen.add_argument("--chunk-kb", type=real_number("--chunk-kb", 0, exclusive=True),
                     default=64.0,
                     help="largest gradient message piece, KiB (default 64)")
    gen.add_argument("--p2p-mb", type=real_number("--p2p-mb", 0), default=0.0,
                     help="activation gradients (MiB) each GPU writes to the next at the "
                          "pipeline-stage boundary, as memory-traffic records (default 0)")
    gen.add_argument("--traffic", action="append", default=[],
                     choices=("pp", "tp", "fsdp", "offload"),
                     help="contending traffic to lay over the iteration as memory-traffic "
                          "records, critical ones marked (repeatable; docs/metrics.md, "
                          "\"Contending traffic\")")
    gen.add_argument("--format", choices=["binary", "text"],
                     help="default: text for .txt, else binary")
    gen.add_argument("-o", "--output", required=True)
    gen.add_argument("--json", action="store_true")
    gen.set_defaults(func=_cmd_trace_gen)
    info = tsub.add_parser("info", help="summarise a trace")
    info.add_argument("file")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=_cmd_trace_info)
    val = tsub.add_parser("validate", help="check every record of a trace")
    val.add_argument("file")
    val.add_argument("--json", action="store_true")
    val.set_defaults(func=_cmd_trace_validate)


def _switch_arguments(p, positive):
    """innet's switch, for ``--algo inswitch`` (default: sized for the GPU's round trip)."""
    p.add_argument("--slots", type=positive("--slots"),
                   help="inswitch: the switch's slot pool (default: covers the round trip)")
    p.add_argument("--chunk-flits", type=positive("--chunk-flits"),
                   help="inswitch: flits per chunk (default 8)")
    p.add_argument("--lanes", type=positive("--lanes"),
                   help="inswitch: 32-bit lanes per flit (default 8)")
    p.add_argument("--ports", type=positive("--ports", 2),
                   help="inswitch: switch ports (default: one per GPU)")


def _iteration_arguments(p, positive, gpus_min=1):
    p.add_argument("--model", default="resnet50",
                   help="resnet50, vgg16, bert_large, gpt2_xl or transformer")
    p.add_argument("--batch", type=positive("--batch"), help="micro-batch per GPU")
    p.add_argument("--gpu", default="a100")
    p.add_argument("--gpus", type=positive("--gpus", gpus_min), default=8)
    p.add_argument("--algo", default="ring")
    p.add_argument("--bucketing", choices=["ddp", "horovod"], default="ddp")
    p.add_argument("--bucket-mb", type=real_number("--bucket-mb", 0, exclusive=True),
                   help="DDP bucket_cap_mb (MiB, default 25)")
    p.add_argument("--first-bucket-mb",
                   type=real_number("--first-bucket-mb", 0, exclusive=True),
                   help="DDP first bucket (MiB, default 1)")
    p.add_argument("--no-overlap", action="store_true",
                   help="all-reduce after backward instead of during it")
    p.add_argument("--grad-accum", type=positive("--grad-accum"), default=1)
    p.add_argument("--precision", choices=["amp", "o2", "fp32"], default="amp",
                   help="amp (torch.cuda.amp, the default), o2 (apex O2: FP16 weights and "
                        "gradients) or fp32")
    p.add_argument("--straggler", action="append", metavar="GPU:FACTOR",
                   help="compute speed factor of one GPU (repeatable), e.g. 3:0.8")
    p.add_argument("--channels", type=positive("--channels"),
                   help="SMs (channels) the collective kernels use (default: NCCL's)")
    p.add_argument("--hidden", type=positive("--hidden"), help="transformer: hidden size")
    p.add_argument("--layers", type=positive("--layers"), help="transformer: layers")
    p.add_argument("--seq", type=positive("--seq"), help="transformer/BERT/GPT: sequence length")
