"""``innet model collective --nodes K``: a collective across K nodes (``sim.gpu.multinode``).

Kept apart from :mod:`sim.cli.model`, which only adds the option and dispatches here.
"""

from sim.cli.output import UsageError, emit

__all__ = ["check_nodes", "collective", "collective_cost"]


def _node(gpu_name):
    from sim.gpu.nodes import node_preset
    from sim.gpu.presets import ModelInputError
    try:
        return node_preset(gpu_name)
    except ModelInputError as exc:
        raise UsageError(f"--gpu: {exc}") from None


def check_nodes(args):
    """The node preset of ``--gpu`` once ``--nodes``, ``--gpus`` (per node) and ``--algo`` fit
    it: sharp needs two nodes or more; the fabric holds radix²/2 NIC ports.

    Raises
    ------
    UsageError
    """
    from sim.gpu.multinode import MULTINODE_ALGORITHMS
    if args.algo == "sharp" and args.nodes < 2:
        raise UsageError(f"--algo sharp reduces in the InfiniBand switches between nodes: it "
                         f"needs --nodes 2 or more, not {args.nodes}")
    node = _node(args.gpu)
    if args.algo not in MULTINODE_ALGORITHMS:
        raise UsageError(f"--algo across nodes must be one of {', '.join(MULTINODE_ALGORITHMS)}, "
                         f"not {args.algo!r}")
    fabric = node.fabric
    if args.nodes > node.max_nodes:
        raise UsageError(f"--nodes must be at most {node.max_nodes} for {node.name}: a two-level "
                         f"leaf/spine fabric of {fabric.radix}-port switches holds "
                         f"{fabric.radix}^2/2 = {fabric.end_ports} NIC ports, {node.nics} per "
                         f"node, not {args.nodes}")
    if args.gpus > node.gpus:
        raise UsageError(f"--gpus (per node) must be at most {node.gpus} on {node.name}, "
                         f"not {args.gpus}")
    return node


def collective(args, size):
    """Print one multi-node collective (``size`` bytes, already parsed)."""
    from sim.gpu.multinode import multinode_cost, multinode_links
    node = check_nodes(args)
    if args.channels is not None:
        raise UsageError("--channels applies to one node only (NCCL sets the multi-node "
                         "channels from the NICs)")
    cost = multinode_cost(node, args.nodes, args.gpus, size, args.op, args.algo)
    links = multinode_links(node, args.nodes, args.gpus, size, args.op, args.algo)
    bottleneck = max(links, key=links.get)
    payload = {"gpu": node.gpu_preset.name, "node": node.name, "nodes": args.nodes,
               "gpus_per_node": args.gpus, "gpus": cost.n, "op": args.op, "algo": args.algo,
               "size_bytes": size, "time_us": cost.time_s * 1e6, "algbw_GBps": cost.algbw_gbps,
               "busbw_GBps": cost.busbw_gbps, "protocol": cost.protocol, "sms": cost.sms,
               "latency_us": cost.latency_s * 1e6, "bottleneck": bottleneck,
               "link_busy_us": {k: v * 1e6 for k, v in links.items()},
               "link_bytes_per_gpu": cost.link_bytes, "hbm_bytes_per_gpu": cost.hbm_bytes,
               "units": "GB/s = 1e9 bytes/s"}
    emit(args, payload, [
        f"{args.op} {args.algo} on {args.nodes} x {node.name}, {args.gpus} GPUs each "
        f"({cost.n} ranks), {size} bytes:",
        f"  time {cost.time_s * 1e6:.1f} us ({cost.protocol}, latency "
        f"{cost.latency_s * 1e6:.1f} us), algbw {cost.algbw_gbps:.1f} GB/s, busbw "
        f"{cost.busbw_gbps:.1f} GB/s (GB = 1e9 bytes)",
        "  links busy: " + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in links.items())
        + f"; bottleneck {bottleneck}"])


def collective_cost(args, size, op="allreduce"):
    """The :class:`CollectiveCost` of a ``size``-byte collective ``op`` across ``--nodes`` (for
    ``innet model overlap --nodes``)."""
    from sim.gpu.multinode import multinode_cost
    return multinode_cost(check_nodes(args), args.nodes, args.gpus, size, op, args.algo)
