"""Issue 18: a tree all-reduce's messages carry every dependency they have.

The golden is independent of how the expansion writes its dependencies: the data itself. Each
rank holds numpy vectors; messages are delivered one at a time in random orders that honour
the messages' dependencies (a message may be sent once every message it depends on was
received), an up-message adding the sender's partial sum into the receiver and a down-message
overwriting it; at the end every rank must hold the numpy sum. A message sent before one of
its inputs arrived leaves that input out of the sum (at n = 8, with one dependency per message,
3 -> 1 could leave before 7 -> 3 arrived). The replay backends are checked the same way on the
cycles they report: no piece is injected before every piece it must wait for was delivered.
"""

import numpy as np
import pytest

from sim.gpu.collectives import SWITCH, double_trees, expand_collective
from sim.gpu.multinode_messages import multinode_messages
from sim.gpu.nodes import node_preset
from sim.model.switch import replay_model
from sim.replay.allreduce import allreduce_trace
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.trace.format import read_trace, write_trace


def deliver_in_random_order(msgs, data, reduces, rng):
    """Deliver ``msgs`` one at a time in a random order allowed by their dependencies;
    ``data[rank]`` maps a message's ``chunk`` to the rank's vector for it; ``reduces(m)``:
    whether ``m`` adds into the receiver (else it overwrites). Returns the send order."""
    buf = {r: {c: v.copy() for c, v in chunks.items()} for r, chunks in data.items()}
    delivered, order = set(), []
    pending = set(range(len(msgs)))
    while pending:
        ready = sorted(i for i in pending if all(d in delivered for d in msgs[i].deps))
        assert ready, "a message never became ready"
        i = int(rng.choice(ready))
        m = msgs[i]
        payload = buf[m.src][m.chunk].copy()
        if reduces(m):
            buf[m.dst][m.chunk] += payload
        else:
            buf[m.dst][m.chunk] = payload
        delivered.add(i)
        pending.discard(i)
        order.append(i)
    return buf, order


def subtree(n, p):
    """Heap positions of the subtree under ``p`` (``p`` excluded)."""
    out, todo = [], [2 * p + 1, 2 * p + 2]
    while todo:
        c = todo.pop()
        if c < n:
            out.append(c)
            todo += [2 * c + 1, 2 * c + 2]
    return out


@pytest.mark.parametrize("n", range(2, 17))
def test_tree_allreduce_sums_in_any_valid_order(n):
    rng = np.random.default_rng(1800 + n)
    msgs = expand_collective("tree", n, 2 * 11)
    data = {r: {c: rng.integers(-1000, 1000, size=11) for c in (0, 1)} for r in range(n)}
    expected = {c: sum(data[r][c] for r in range(n)) for c in (0, 1)}
    for _ in range(30):
        buf, _ = deliver_in_random_order(msgs, data, lambda m: m.step == 0, rng)
        for r in range(n):
            for c in (0, 1):
                np.testing.assert_array_equal(buf[r][c], expected[c], err_msg=f"rank {r}")


@pytest.mark.parametrize("n", range(2, 17))
def test_an_up_message_waits_for_its_whole_subtree(n):
    """Structural golden from the heap layout: the up-message from position p depends,
    directly or through others, on the up-message of every position under p; every
    down-message on the up-messages of every position (the root has the total)."""
    msgs = expand_collective("tree", n, 2 * 64)
    closure = []
    for m in msgs:
        closure.append(set(m.deps).union(*(closure[d] for d in m.deps)))
    for tree, mapping in enumerate(double_trees(n)):
        position = {rank: p for p, rank in enumerate(mapping)}
        up = {position[m.src]: i for i, m in enumerate(msgs) if m.chunk == tree and m.step == 0}
        assert sorted(up) == list(range(1, n))
        for p, i in up.items():
            assert {up[c] for c in subtree(n, p)} <= closure[i], f"tree {tree} position {p}"
        for i, m in enumerate(msgs):
            if m.chunk == tree and m.step == 1:
                assert set(up.values()) <= closure[i]


@pytest.mark.parametrize("nodes, per_node", [(2, 2), (3, 2), (4, 2), (5, 1), (8, 2)])
def test_multinode_tree_sums_in_any_valid_order(nodes, per_node):
    """The multi-node tree (chains in the nodes, the double binary tree over their heads):
    every rank ends with the sum; a message of a step before the broadcast adds."""
    node = node_preset("a100").with_(nics=2)
    g = per_node
    msgs = [m for m, _ in multinode_messages(node, nodes, g, "tree", 4 << 10)]
    chunks = sorted({m.chunk for m in msgs})
    rng = np.random.default_rng(nodes * 100 + g)
    ranks = nodes * g
    data = {r: {c: rng.integers(-1000, 1000, size=5) for c in chunks} for r in range(ranks)}
    expected = {c: sum(data[r][c] for r in range(ranks)) for c in chunks}
    for _ in range(20):
        buf, _ = deliver_in_random_order(msgs, data, lambda m: m.step <= g - 1, rng)
        for r in range(ranks):
            for c in chunks:
                np.testing.assert_array_equal(buf[r][c], expected[c], err_msg=f"rank {r}")


@pytest.mark.parametrize("core", ["python", "c"])
def test_replay_injects_a_piece_only_after_its_inputs_arrived(core):
    """A tree all-reduce through the fast model: every piece is injected after every piece
    its message depends on (read from the trace) was delivered, a link round trip later."""
    cfg = ReplayConfig(ports=8, lanes=2, chunk_flits=8, mtu_flits=16, flit_scale=1,
                       link_gbps=32.0, link_latency_ns=20.0)
    meta, records = allreduce_trace("tree", 8, 4096, 512)
    assert any(len(r.dependencies) == 2 for r in records)
    plan = build_plan(meta, records, cfg)
    result = replay_model(plan, core=core)
    by_record = {m.record: m for m in plan.messages}
    deliver = {m.record: max(int(result.deliver[p]) for p in m.packets) for m in plan.messages}
    for r in records:
        first = min(int(result.inject[p]) for p in by_record[r.id].packets)
        for d in r.dependencies:
            assert first > deliver[d] + 2 * cfg.link_cycles, (r.id, d)


def test_tree_trace_round_trips_its_dependencies(tmp_path):
    """A tree all-reduce's trace is version 4 (its wait records) and reads back with every
    dependency; a ring's stays version 3."""
    meta, records = allreduce_trace("tree", 8, 4096, 512)
    for name in ("tree.itr", "tree.txt"):
        write_trace(tmp_path / name, meta, records)
        back_meta, back = read_trace(tmp_path / name)
        assert back_meta["format_version"] == 4
        assert [r.dependencies for r in back] == [r.dependencies for r in records]
    meta, records = allreduce_trace("ring", 8, 4096, 512)
    write_trace(tmp_path / "ring.itr", meta, records)
    assert read_trace(tmp_path / "ring.itr")[0]["format_version"] == 3


def test_results_of_the_switch_make_no_dependencies_of_their_own():
    """The in-switch expansion keeps one dependency per result (the last contribution)."""
    msgs = expand_collective("inswitch", 4, 100)
    assert [len(m.deps) for m in msgs if m.src == SWITCH] == [1] * 4


@pytest.mark.parametrize("n", range(2, 9))
def test_direct_allreduce_sums_in_any_valid_order(n):
    """The direct all-reduce: an owner's all-gather messages wait for every contribution to
    its chunk, not only the last one listed."""
    rng = np.random.default_rng(1900 + n)
    msgs = expand_collective("direct", n, n * 7)
    data = {r: {c: rng.integers(-1000, 1000, size=7) for c in range(n)} for r in range(n)}
    expected = {c: sum(data[r][c] for r in range(n)) for c in range(n)}
    for _ in range(30):
        buf, _ = deliver_in_random_order(msgs, data, lambda m: m.step == 0, rng)
        for r in range(n):
            for c in range(n):
                np.testing.assert_array_equal(buf[r][c], expected[c], err_msg=f"rank {r}")
