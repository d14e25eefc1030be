"""The messages of a multi-node all-reduce, each with the links it crosses (for ``innet trace
gen --nodes``): NCCL's ring and tree across nodes and in-network reduction in the InfiniBand
switches (SHARP), over ``nodes`` × ``gpus_per_node`` ranks numbered node by node.

The buffer is split over ``C = min(nics, G)`` channels (one per NIC rail, as NCCL runs one or
more channels per NIC), so that every GPU's NIC carries its share, as
:func:`sim.gpu.multinode.multinode_cost` counts it. Per channel ``c``:

ring
    :func:`sim.gpu.multinode.ring_messages` of the channel's share, with each node's local
    ranks rotated by ``c``: the ring leaves node k from local GPU (c − 1) mod G and enters the
    next node at local GPU c, so each GPU is its node's exit in one channel.
tree
    NCCL's tree: inside each node a chain through the local GPUs from the head, local GPU c;
    between nodes the double binary tree over the heads (:func:`expand_collective` over
    ``nodes``), each of its two trees carrying half the channel's share. Per tree half: reduce
    up the chain (tail → … → head), up and down the inter-node tree, broadcast down the chain.
sharp
    Ring reduce-scatter inside the node, every GPU's reduced chunk to the InfiniBand switch
    (:data:`IB_SWITCH`; reduced at the leaf when every node hangs off one leaf of the rail,
    else at a spine), ring all-gather inside the node. The switch's sum comes back over the
    same links; it is not a message of its own here (as the NVSwitch's multicast results of
    ``inswitch``): a message that depends on a GPU's contribution waits for its sum.
    Inside the node this is the CollNet-chain form (ring reduce-scatter and all-gather,
    2(G−1)/G · S per GPU on NVLink); on Hopper :func:`multinode_cost` times the intra-node
    part as NVLink SHARP ((1 + 1/G) · S), which the messages here do not show.

Message ``step`` orders the phases for issue times; ``deps`` are the indices of the messages
the sender must have received (or, for :data:`IB_SWITCH`, sent and had summed) first.
"""

from dataclasses import replace

from sim.gpu.collectives import Message, expand_collective
from sim.gpu.multinode import _check as _check_multinode
from sim.gpu.multinode import ring_messages
from sim.gpu.nodes import message_path

__all__ = ["IB_SWITCH", "channel_sizes", "multinode_messages", "sharp_path"]

#: destination of a contribution to the InfiniBand switches' reduction (SHARP)
IB_SWITCH = -2


def sharp_path(node, nodes):
    """The links from a GPU up to the InfiniBand switch that reduces: its PCIe path, NIC and
    leaf, and a spine when the nodes hang off more than one leaf of the rail."""
    up = ("pcie", "nic", "leaf")
    return up if nodes <= node.fabric.leaf_down_ports else up + ("spine",)


def channel_sizes(size, channels):
    """The buffer cut into ``channels`` shares (the first ``size mod channels`` one byte
    larger)."""
    base, extra = divmod(int(size), channels)
    return [base + (1 if c < extra else 0) for c in range(channels)]


def multinode_messages(node, nodes, gpus_per_node, algo, size_bytes):
    """``[(Message, links), ...]``: every message of an all-reduce of ``size_bytes`` across
    ``nodes`` nodes of ``gpus_per_node`` GPUs with ``algo`` (``ring``, ``tree`` or ``sharp``),
    in a valid issue order (a message's ``deps`` are earlier indices), with the links it
    crosses (:func:`sim.gpu.nodes.message_path`, or :func:`sharp_path` to the InfiniBand
    switch). Message ``chunk`` numbers the channel's chunk, channel ``c`` adding ``c`` × 4096.

    Raises
    ------
    ModelInputError
        As :func:`sim.gpu.multinode.multinode_cost`.
    """
    _check_multinode(node, nodes, gpus_per_node, size_bytes, "allreduce", algo)
    g = gpus_per_node
    channels = min(node.nics, g)
    out = []
    for c, share in enumerate(channel_sizes(size_bytes, channels)):
        if algo == "ring":
            msgs = [m for m, _ in ring_messages(node, nodes, g, share)]
            rank = lambda r, c=c: r // g * g + (r % g + c) % g   # noqa: E731
            msgs = [replace(m, src=rank(m.src), dst=rank(m.dst)) for m in msgs]
        elif algo == "tree":
            msgs = _tree_channel(nodes, g, c, share)
        else:
            msgs = _sharp_channel(g, c, share, nodes)
        base = len(out)
        for m in msgs:
            m = replace(m, chunk=c * 4096 + m.chunk, deps=_shifted(m.deps, base))
            links = (sharp_path(node, nodes) if m.dst == IB_SWITCH else
                     message_path(node, nodes, g, m.src, m.dst))
            out.append((m, links))
    return out


def _tree_channel(nodes, g, c, share):
    """Channel ``c`` of the tree: per half of the double binary tree, up the chains, the
    inter-node tree over the heads (local GPU ``c``), down the chains."""
    msgs = []
    chain = [[k * g + (c + j) % g for j in range(g)] for k in range(nodes)]   # head first
    inter = expand_collective("tree", nodes, share)
    for half in (0, 1):
        where = [i for i, m in enumerate(inter) if m.chunk == half]   # contiguous
        if not where:
            continue
        tree = inter[where[0]:where[-1] + 1]
        nbytes = tree[0].nbytes
        have = {}   # rank → the messages it must have received to hold its data (deps)
        # reduce up each node's chain: tail → … → head (steps 0 .. g−2)
        for k in range(nodes):
            for j in range(g - 1, 0, -1):
                src, dst = chain[k][j], chain[k][j - 1]
                msgs.append(Message(src, dst, nbytes, half, g - 1 - j, have.get(src, ())))
                have[dst] = (len(msgs) - 1,)
        # the inter-node tree over the heads (up: step g−1, down: step g): a head's up message,
        # and the root's down messages, wait for its own chain's sum as well as the tree's
        first = len(msgs)
        up_srcs = {m.src for m in tree if m.step == 0}
        chained = dict(have)
        for m in tree:
            src, dst = chain[m.src][0], chain[m.dst][0]
            deps = _shifted(m.deps, first - where[0])
            if m.step == 0 or m.src not in up_srcs:
                deps += chained.get(src, ())
            msgs.append(Message(src, dst, nbytes, half, g - 1 + m.step, deps))
            if m.step == 1:   # the root holds the total once it may send it down
                if m.src not in up_srcs:
                    have[src] = deps
                have[dst] = (len(msgs) - 1,)
        # broadcast down each chain: head → … → tail (steps g+1 ..)
        for k in range(nodes):
            for j in range(g - 1):
                src, dst = chain[k][j], chain[k][j + 1]
                msgs.append(Message(src, dst, nbytes, half, g + 1 + j, have.get(src, ())))
                have[dst] = (len(msgs) - 1,)
    return msgs


def _sharp_channel(g, c, share, nodes):
    """Channel ``c`` of sharp: per node, ring reduce-scatter of the share over its GPUs, each
    GPU's reduced chunk to the InfiniBand switch, ring all-gather of the sums."""
    msgs = []
    if g == 1:
        for k in range(nodes):
            msgs.append(Message(k, IB_SWITCH, share, 0, 0))
        return msgs
    rs = expand_collective("ring", g, share, "reducescatter")
    ag = expand_collective("ring", g, share, "allgather")
    chunk = -(-share // g)
    for k in range(nodes):
        rank = lambda local, k=k: k * g + local   # noqa: E731
        base = len(msgs)
        into = {}
        for m in rs:
            msgs.append(Message(rank(m.src), rank(m.dst), m.nbytes, m.chunk, m.step,
                                _shifted(m.deps, base)))
            into[m.dst] = len(msgs) - 1
        contribution = {}
        for local in range(g):
            owned = (local + 1) % g   # after the ring reduce-scatter GPU g owns chunk g+1
            nbytes = min(chunk, max(0, share - owned * chunk))
            msgs.append(Message(rank(local), IB_SWITCH, nbytes, owned, g - 1,
                                _into(into, local)))
            contribution[local] = (len(msgs) - 1,)
        base = len(msgs)
        for m in ag:
            deps = _shifted(m.deps, base) or contribution[m.src]
            msgs.append(Message(rank(m.src), rank(m.dst), m.nbytes, m.chunk, g + m.step, deps))
    return msgs


def _shifted(deps, base):
    """Dependencies ``deps`` of messages moved ``base`` places on in a longer list."""
    return tuple(d + base for d in deps)


def _into(into, rank):
    """The dependencies of a message that waits for the last message ``rank`` received."""
    return (into[rank],) if rank in into else ()
