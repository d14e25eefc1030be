"""One node of a multi-node trace (``innet replay --node k``).

innet's switch stands for one node's NVSwitch, so a replay of a multi-node trace replays one
node: its GPUs' kernel records and the messages that stay inside it (route ``nvlink``),
renumbered as a one-node trace of ``gpus_per_node`` GPUs. What leaves the node (the NIC
routes and the contributions to the InfiniBand switch) and everything the other nodes' GPUs do
is left out and counted. A kept record whose dependencies were left out keeps its issue time (the
model's, which already includes the wait) and waits for nothing in the replay.
"""

from dataclasses import replace

from sim.errors import InputError
from sim.trace.format import KERNEL

__all__ = ["NodeSliceError", "node_slice"]


class NodeSliceError(InputError, ValueError):
    """The node asked for is not one of the trace's."""


def node_slice(meta, records, node):
    """``(metadata, records, left_out)``: node ``node``'s part of a trace (see the module).

    ``left_out`` counts what was dropped: ``records``, ``bytes`` (of mem and grad records),
    ``leaving_bytes`` (bytes node ``node``'s GPUs send out of the node) by route in
    ``leaving_by_route``, and ``other_nodes_bytes`` (what the other nodes' GPUs send). A trace
    of one node is returned whole (``node`` must be 0).

    Raises
    ------
    NodeSliceError
        For ``node`` outside [0, nodes − 1].
    """
    nodes = int(meta.get("nodes", 1))
    if not 0 <= node < nodes:
        raise NodeSliceError(f"--node must be in [0, {nodes - 1}] (the trace has {nodes} "
                             f"node{'s' if nodes > 1 else ''}), not {node}")
    left_out = {"records": 0, "bytes": 0, "leaving_bytes": 0, "leaving_by_route": {},
                "other_nodes_bytes": 0}
    if nodes == 1:
        return meta, list(records), left_out
    per_node = int(meta["gpus_per_node"])
    first = node * per_node
    kept, renumber = [], {}
    for rec in records:
        mine = first <= rec.gpu < first + per_node
        inside = rec.rtype == KERNEL or rec.route == "nvlink"
        if mine and inside:
            renumber[rec.id] = len(kept)
            new = replace(rec, gpu=rec.gpu - first, id=len(kept))
            if rec.rtype != KERNEL:
                if rec.peer < meta["gpus"]:   # a GPU of this node (the NVSwitch keeps its id)
                    new = replace(new, peer=rec.peer - first)
                new = new.with_dependencies(renumber[d] for d in rec.dependencies
                                            if d in renumber)
            kept.append(new)
            continue
        left_out["records"] += 1
        if rec.rtype == KERNEL:
            continue
        left_out["bytes"] += rec.bytes
        if mine:
            left_out["leaving_bytes"] += rec.bytes
            by_route = left_out["leaving_by_route"]
            by_route[rec.route] = by_route.get(rec.route, 0) + rec.bytes
        else:
            left_out["other_nodes_bytes"] += rec.bytes
    sliced = {key: value for key, value in meta.items()
              if key not in ("nodes", "gpus_per_node", "nodes_per_leaf")}
    sliced.update(gpus=per_node, node_of_trace=node, nodes_of_trace=nodes)
    return sliced, kept, left_out
