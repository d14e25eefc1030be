"""Multi-node traces (issue 16 item 4): format version 3's routes, the InfiniBand switch and
node metadata; ``innet trace gen --nodes`` against the multi-node model (every message's
route is ``message_path``'s, the bytes per link kind are ``multinode_cost``'s, the collective
windows are ``innet model iteration --nodes``'s); ``innet replay --node``."""

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import replace

import pytest

from sim.gpu.iteration import IterationConfig
from sim.gpu.multinode import NET_EFFICIENCY, multinode_cost, multinode_links
from sim.gpu.multinode_messages import IB_SWITCH, multinode_messages, sharp_path
from sim.gpu.nodes import message_path, node_preset
from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import resnet50
from sim.trace.format import (
    IB_SWITCH_PORT,
    ROUTES,
    SWITCH_PORT,
    TraceError,
    TraceRecord,
    read_trace,
    route_of,
    trace_summary,
    write_trace,
)
from sim.trace.generate import generate_trace
from sim.trace.nodes import NodeSliceError, node_slice

A100, H100 = node_preset("a100"), node_preset("h100")
#: two NICs a node on a fabric of 4-port switches: 2 nodes per leaf, so 3 nodes need the spine
SMALL = A100.with_(nics=2, fabric=replace(A100.fabric, radix=4))
META = {"gpus": 4, "nodes": 2, "gpus_per_node": 2, "nodes_per_leaf": 1}


def multinode_records():
    return [
        TraceRecord.kernel(gpu=3, id=0, start_ns=0, duration_ns=9, phase="comm"),
        TraceRecord.grad(gpu=0, peer=1, id=1, time_ns=5, bytes=64, algo="sharp"),
        TraceRecord.grad(gpu=1, peer=IB_SWITCH_PORT, id=2, time_ns=6, bytes=32, algo="sharp",
                         dependency=1, route="pcie-nic-leaf-spine"),
        TraceRecord.grad(gpu=1, peer=2, id=3, time_ns=7, bytes=16, algo="ring",
                         route="pcie-nic-leaf-spine-leaf-nic-pcie", bucket=3, chunk=9),
        TraceRecord.mem(gpu=3, peer=0, id=4, time_ns=8, bytes=8, op="read", traffic="tp",
                        critical=True, route="pcie-nic-leaf-spine-leaf-nic-pcie"),
        TraceRecord.grad(gpu=2, peer=SWITCH_PORT, id=5, time_ns=9, bytes=4, algo="inswitch"),
    ]


@pytest.mark.parametrize("suffix", [".itr", ".txt"])
def test_round_trip_of_routes_and_the_ib_switch(tmp_path, suffix):
    path = tmp_path / f"m{suffix}"
    write_trace(path, META, multinode_records())
    meta, records = read_trace(path)
    records = list(records)
    assert records == multinode_records() and meta["nodes"] == 2
    assert [r.route for r in records[1:]] == ["nvlink", ROUTES[4], ROUTES[2], ROUTES[2],
                                              "nvlink"]
    assert records[2].to_ib_switch and records[2].links == ("pcie", "nic", "leaf", "spine")
    assert (records[4].mem_op, records[4].traffic, records[4].critical) == ("read", "tp", True)
    if suffix == ".txt":
        text = path.read_text()
        assert "peer=ibswitch" in text and "route=pcie-nic-leaf-spine\n" in text
    summary = trace_summary(path)
    assert summary["route_bytes"] == {"nvlink": 68, ROUTES[2]: 24, ROUTES[4]: 32}
    assert summary["link_bytes"] == {"nvlink": 68, "pcie": 56, "nic": 56, "leaf": 56,
                                     "spine": 56}


@pytest.mark.parametrize("record, meta, message", [
    (TraceRecord.grad(gpu=0, peer=1, id=0, time_ns=0, bytes=1, algo="ring",
                      route="pcie-nic-leaf-nic-pcie"), META,
     "route: pcie-nic-leaf-nic-pcie is not the route from GPU 0 (node 0) to GPU 1 (node 0): "
     "nvlink"),
    (TraceRecord.grad(gpu=0, peer=2, id=0, time_ns=0, bytes=1, algo="ring",
                      route="pcie-nic-leaf-nic-pcie"), META,
     "route: pcie-nic-leaf-nic-pcie is not the route from GPU 0 (node 0) to GPU 2 (node 1): "
     "pcie-nic-leaf-spine-leaf-nic-pcie"),
    (TraceRecord.grad(gpu=0, peer=IB_SWITCH_PORT, id=0, time_ns=0, bytes=1, algo="sharp",
                      route="pcie-nic-leaf"), META,
     "route: pcie-nic-leaf is not the route from GPU 0 (node 0) to the InfiniBand switch: "
     "pcie-nic-leaf-spine"),
    (TraceRecord.grad(gpu=0, peer=IB_SWITCH_PORT, id=0, time_ns=0, bytes=1, algo="ring",
                      route="pcie-nic-leaf-spine"), META,
     "peer: only sharp sends to the InfiniBand switch"),
    (TraceRecord.grad(gpu=0, peer=IB_SWITCH_PORT, id=0, time_ns=0, bytes=1, algo="sharp"),
     {"gpus": 4}, "peer: 65534 is out of range (trace has 4 GPUs, or the switch)"),
    (TraceRecord.grad(gpu=0, peer=1, id=0, time_ns=0, bytes=1, algo="ring"),
     {**META, "gpus_per_node": 3}, "gpus_per_node: must be gpus / nodes = 4 / 2, not 3"),
    (TraceRecord.grad(gpu=0, peer=1, id=0, time_ns=0, bytes=1, algo="ring"),
     {**META, "nodes_per_leaf": 0}, "nodes_per_leaf: must be a positive integer, not 0"),
    (replace(TraceRecord.grad(gpu=0, peer=1, id=0, time_ns=0, bytes=1, algo="ring"),
             op=0x70), META, "route: 7 is not one of " + ", ".join(ROUTES)),
])
def test_bad_routes_and_nodes_are_refused(tmp_path, record, meta, message):
    with pytest.raises(TraceError, match=f"^{re.escape(str(tmp_path))}/b.itr:[01]: "
                                         f"{re.escape(message)}$"):
        write_trace(tmp_path / "b.itr", meta, [record])
    assert not list(tmp_path.iterdir())


def test_version_2_knows_no_route(tmp_path):
    """A version-2 file has no route bits, no sharp and no InfiniBand switch: its reader
    rules refuse them (a version-3 writer never writes version 2)."""
    path = tmp_path / "old.txt"
    path.write_text('innet-trace 2 {"gpus": 2}\n'
                    "grad gpu=0 peer=1 id=0 time_ns=0 bytes=4 algo=ring route=nvlink\n"
                    "grad gpu=0 peer=1 id=1 time_ns=0 bytes=4 algo=sharp\n")
    with pytest.raises(TraceError, match=r"old.txt:3: op: 5 is not one of ring, tree, direct, "
                                         r"inswitch, p2p$"):
        list(read_trace(path)[1])
    path.write_text('innet-trace 2 {"gpus": 8, "nodes": 2, "gpus_per_node": 4}\n'
                    "grad gpu=0 peer=4 id=0 time_ns=0 bytes=4 algo=ring "
                    "route=pcie-nic-leaf-nic-pcie\n")
    with pytest.raises(TraceError, match=r"old.txt:2: op: 16 is not one of ring"):
        list(read_trace(path)[1])


@pytest.mark.parametrize("node, nodes, per_node", [(A100, 2, 8), (SMALL, 3, 2), (H100, 3, 4)])
@pytest.mark.parametrize("algo", ["ring", "tree", "sharp"])
def test_every_message_takes_message_paths_links(node, nodes, per_node, algo):
    """Golden: each message's links are sim.gpu.nodes.message_path's (to the InfiniBand
    switch: the PCIe path, NIC, leaf, and the spine when the nodes span leaves), and each
    route name is the one of its links."""
    messages = multinode_messages(node, nodes, per_node, algo, 3 << 20)
    ib = [m for m, _ in messages if m.dst == IB_SWITCH]
    assert bool(ib) == (algo == "sharp")
    for index, (m, links) in enumerate(messages):
        assert all(d < index for d in m.deps)
        if m.dst == IB_SWITCH:
            spans = nodes > node.fabric.leaf_down_ports
            assert links == ("pcie", "nic", "leaf") + (("spine",) if spans else ())
        else:
            assert links == message_path(node, nodes, per_node, m.src, m.dst)
        assert route_of(links) in ROUTES
    kinds = {route_of(links) for _, links in messages}
    if node is SMALL and algo != "sharp":
        assert ROUTES[2] in kinds   # node 2 hangs off the second leaf
    assert sharp_path(SMALL, 3) == ("pcie", "nic", "leaf", "spine")


@pytest.mark.parametrize("node, nodes, per_node", [(A100, 2, 8), (A100, 3, 4), (H100, 4, 2),
                                                    (H100, 2, 1)])
@pytest.mark.parametrize("algo", ["ring", "tree", "sharp"])
def test_bytes_per_link_kind_are_the_models(node, nodes, per_node, algo):
    """Golden: per GPU, the NIC (and PCIe) bytes of the messages are multinode_links' busy
    time x the link's rate (the busiest GPU for tree, whose nodes differ), and NVLink + NIC
    bytes are multinode_cost's link_bytes (except sharp on Hopper, whose NVLink part the model
    times as NVLink SHARP and the messages show as ring reduce-scatter and all-gather)."""
    size = nodes * per_node * per_node * 4096
    nvlink, nic = Counter(), Counter()
    for m, links in multinode_messages(node, nodes, per_node, algo, size):
        (nvlink if links == ("nvlink",) else nic)[m.src] += m.nbytes
    busy = multinode_links(node, nodes, per_node, size, "allreduce", algo)
    cost = multinode_cost(node, nodes, per_node, size, "allreduce", algo)
    nic_bytes = busy["nic"] * node.nic_gbps * NET_EFFICIENCY * 1e9
    assert busy["pcie"] * node.pcie_gbps * 1e9 == pytest.approx(nic_bytes, rel=1e-12)
    assert max(nic.values()) == pytest.approx(nic_bytes, rel=1e-12)
    if algo != "tree":
        assert min(nic[g] for g in range(nodes * per_node)) == max(nic.values())
    nvlink_model = cost.link_bytes - nic_bytes
    if algo == "sharp" and node is H100 and per_node > 1:
        assert nvlink_model == pytest.approx((1 + 1 / per_node) * size)
        assert max(nvlink.values()) == 2 * (per_node - 1) / per_node * size
    else:
        assert max(nvlink.values(), default=0) == pytest.approx(nvlink_model, rel=1e-12)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True,
                          text=True, check=False)


@pytest.mark.parametrize("algo", ["ring", "tree", "sharp"])
def test_trace_gen_nodes_is_the_iteration(tmp_path, algo):
    """``innet trace gen --nodes 2``: the metadata names the nodes; the collective windows
    (comm kernels) add up to ``innet model iteration --nodes 2``'s all-reduce time, its
    iteration time is the trace's; every grad record goes out in its bucket's window, on the
    route of its ends; a GPU's NIC bytes are multinode_cost's, summed over the buckets."""
    common = ["--model", "resnet50", "--batch", "8", "--gpu", "a100", "--gpus", "4",
              "--nodes", "2", "--algo", algo]
    out = tmp_path / "m.itr"
    gen = run_cli("trace", "gen", *common, "--chunk-kb", "4096", "-o", str(out), "--json")
    model = run_cli("model", "iteration", *common, "--json")
    assert gen.returncode == model.returncode == 0, gen.stderr + model.stderr
    it = json.loads(model.stdout)
    meta, records = read_trace(out)
    records = list(records)
    assert (meta["gpus"], meta["nodes"], meta["gpus_per_node"]) == (8, 2, 4)
    assert meta["node_preset"] == A100.name and meta["iteration_s"] == it["iteration_s"]
    windows = [(r.start_ns, r.end_ns) for r in records
               if r.rtype == 1 and r.phase == "comm" and r.gpu == 0]
    assert len(windows) == it["buckets"]
    assert sum(e - s for s, e in windows) * 1e-9 == pytest.approx(it["allreduce_s"],
                                                                  abs=len(windows) * 1e-9)
    nic = Counter()
    for r in records:
        if r.rtype != 3:
            continue
        start, end = windows[r.bucket]
        assert start <= r.time_ns <= end + 1
        if r.to_ib_switch:
            assert r.links == sharp_path(A100, 2)
        else:
            assert r.links == message_path(A100, 2, 4, r.gpu, r.peer)
        if r.route != "nvlink":
            nic[r.gpu] += r.bytes
    cfg = IterationConfig(n_gpus=4, nodes=2, algo=algo)
    _, _, result = generate_trace(resnet50(8), gpu_preset("a100"), 4, config=cfg,
                                  chunk_bytes=4 << 20)
    want = sum(multinode_links(A100, 2, 4, b, "allreduce", algo)["nic"]
               for b in result.bucket_bytes) * A100.nic_gbps * NET_EFFICIENCY * 1e9
    assert max(nic.values()) == pytest.approx(want, rel=1e-6)
    info = json.loads(run_cli("trace", "info", str(out), "--json").stdout)
    assert info["link_bytes"]["nic"] == sum(nic.values())
    assert set(info["link_bytes"]) == {"nvlink", "pcie", "nic", "leaf"}


@pytest.mark.parametrize("args, message", [
    (["--gpu", "v100", "--nodes", "2"], "innet: error: --gpu: no multi-node preset for GPU "
                                        "'v100'; multi-node runs need one of a100, a100-40, "
                                        "a100-80, h100"),
    (["--nodes", "0"], "innet trace gen: error: argument --nodes: --nodes must be at least 1, "
                       "not 0"),
    (["--nodes", "2", "--algo", "inswitch"], "innet: error: --algo across nodes must be one "
                                             "of ring, tree, sharp, not 'inswitch'"),
    (["--nodes", "2", "--gpus", "9"], "innet: error: --gpus (per node) must be at most 8 on "
                                      "DGX A100 (8 x A100, 8 x HDR 200 Gb/s), not 9"),
])
def test_bad_node_options_are_one_line(tmp_path, args, message):
    out = tmp_path / "x.itr"
    proc = run_cli("trace", "gen", "--model", "resnet50", "--batch", "8", *args, "-o",
                   str(out))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [message]
    assert not list(tmp_path.iterdir())


def test_replay_takes_one_node(tmp_path):
    """Node k's slice: its GPUs renumbered 0..G-1, only NVLink messages, dependencies on what
    was left out dropped; the bytes kept and left out add up to the trace's."""
    cfg = IterationConfig(n_gpus=2, nodes=2, algo="sharp")
    meta, records, _ = generate_trace(resnet50(8), gpu_preset("a100"), 2, config=cfg,
                                      chunk_bytes=8 << 20)
    total = sum(r.bytes for r in records if r.rtype != 1)
    sliced, kept, left = node_slice(meta, records, 1)
    assert sliced["gpus"] == 2 and "nodes" not in sliced and sliced["node_of_trace"] == 1
    write_trace(tmp_path / "n.itr", sliced, kept)   # a valid one-node trace
    grads = [r for r in kept if r.rtype == 3]
    assert grads and all(r.route == "nvlink" and r.gpu < 2 and r.peer < 2 for r in grads)
    assert sum(r.bytes for r in kept if r.rtype != 1) + left["bytes"] == total
    leaving = sum(r.bytes for r in records if r.rtype == 3 and r.gpu >= 2 and r.to_ib_switch)
    assert left["leaving_bytes"] == leaving == left["leaving_by_route"]["pcie-nic-leaf"]
    # AG messages waited for the InfiniBand switch's sum: in the slice they wait for nothing
    assert any(r.rtype == 3 and r.dependency is None for r in kept)
    with pytest.raises(NodeSliceError, match=r"--node must be in \[0, 1\] \(the trace has 2 "
                                              r"nodes\), not 2"):
        node_slice(meta, records, 2)
    proc = run_cli("replay", str(tmp_path / "n.itr"), "--node", "1")
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "innet: error: --node must be in [0, 0] (the trace has 1 node), not 1"


def test_replay_cli_says_what_it_left_out(tmp_path):
    out = tmp_path / "s.itr"
    assert run_cli("trace", "gen", "--model", "resnet50", "--batch", "8", "--gpu", "a100",
                   "--gpus", "2", "--nodes", "2", "--algo", "sharp", "--chunk-kb", "16384",
                   "-o", str(out)).returncode == 0
    _, records = read_trace(out)
    leaving = sum(r.bytes for r in records if r.rtype == 3 and r.gpu >= 2 and r.to_ib_switch)
    proc = run_cli("replay", str(out), "--node", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    node = json.loads(proc.stdout)["node"]
    assert (node["node"], node["nodes"], node["left_out"]["leaving_bytes"]) == (1, 2, leaving)
    text = run_cli("replay", str(out), "--node", "1").stdout.splitlines()
    assert text[1] == (f"  node 1 of 2 (2 GPUs, its NVLink messages); left out: {leaving} bytes "
                       f"leaving the node (pcie-nic-leaf {leaving}) and "
                       f"{node['left_out']['other_nodes_bytes']} bytes of the other nodes")
    proc = run_cli("replay", str(out), "--node", "2")
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "innet: error: --node must be in [0, 1] (the trace has 2 nodes), not 2"
