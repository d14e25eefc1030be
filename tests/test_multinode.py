"""Multi-node collectives (sim/gpu/multinode.py, sim/gpu/nodes.py), their published rows and
``innet model collective --nodes``."""

import json
import math
import subprocess
import sys

import pytest

from sim.gpu.collectives import collective_cost
from sim.gpu.multinode import NET_EFFICIENCY, multinode_cost, multinode_links, ring_messages
from sim.gpu.multinode_figures import KNOWN_MISSES, multinode_rows
from sim.gpu.nodes import NODE_PRESETS, message_path, node_preset
from sim.gpu.presets import ModelInputError

GiB = 1 << 30


def test_node_presets_from_the_datasheets():
    a100, h100 = node_preset("a100"), node_preset("h100")
    assert (a100.gpus, a100.nics, a100.nic_gbits, a100.pcie_gen) == (8, 8, 200.0, 4)
    assert (h100.gpus, h100.nics, h100.nic_gbits, h100.pcie_gen) == (8, 8, 400.0, 5)
    # HDR payload: 25 GB/s x 4096/4122; PCIe gen4 x16: 16 GT/s x 16 x 128/130 / 8 x 256/282
    assert a100.nic_gbps == pytest.approx(25 * 4096 / 4122)
    assert a100.pcie_gbps == pytest.approx(16 * 16 * 128 / 130 / 8 * 256 / 282)
    assert h100.pcie_gbps == pytest.approx(2 * a100.pcie_gbps)
    # a two-level fabric of radix-r switches holds r^2/2 NIC ports, 8 per node
    assert a100.max_nodes == 40 * 40 // 2 // 8 == 100
    assert h100.max_nodes == 64 * 64 // 2 // 8 == 256
    with pytest.raises(ModelInputError, match="no multi-node preset"):
        node_preset("v100")


def test_message_path_names_every_link():
    node = node_preset("a100")   # 20 nodes per leaf of a rail (40-port leaves, half down)
    assert message_path(node, 2, 8, 0, 7) == ("nvlink",)
    assert message_path(node, 2, 8, 3, 11) == ("pcie", "nic", "leaf", "nic", "pcie")
    assert message_path(node, 30, 8, 0, 8 * 25) == ("pcie", "nic", "leaf", "spine", "leaf",
                                                    "nic", "pcie")
    assert message_path(node, 30, 8, 8 * 19, 8 * 20)[2:5] == ("leaf", "spine", "leaf")
    with pytest.raises(ModelInputError):
        message_path(node, 2, 8, 0, 16)


def test_ring_messages_cross_the_network_once_per_node():
    """16 ranks on 2 nodes: each of the 30 steps has 16 messages, 2 of them between nodes
    (7 -> 8 and 15 -> 0), both on one leaf."""
    msgs = ring_messages(node_preset("h100"), 2, 8, GiB)
    assert len(msgs) == 30 * 16
    inter = [(m.src, m.dst) for m, path in msgs if path != ("nvlink",)]
    assert len(inter) == 60 and set(inter) == {(7, 8), (15, 0)}
    assert {path for _, path in msgs} == {("nvlink",), ("pcie", "nic", "leaf", "nic", "pcie")}


def test_ring_golden_nic_bound():
    """Two DGX A100, 1 GiB: the NIC is the bottleneck; time = NCCL's ring latency + one NIC's
    share of the ring's bytes at the NIC's payload rate x NET_EFFICIENCY (by hand)."""
    node = node_preset("a100")
    size = GiB
    n = 16
    sent = 2 * (n - 1) / n * size
    nic_rate = 200 / 8 * 4096 / 4122 * NET_EFFICIENCY * 1e9
    # tuning.cc Ring/Simple: base 8.4 + (2(N-1) - 2(K-1)) x max(3.4 NVLink, 3 x 1.0 net
    # overhead) + 2(K-1) x 14 NET, microseconds
    latency = (8.4 + (30 - 2) * 3.4 + 2 * 14.0) * 1e-6
    cost = multinode_cost(node, 2, 8, size)
    assert cost.protocol == "Simple"
    assert cost.latency_s == pytest.approx(latency)
    assert cost.time_s == pytest.approx(latency + sent / 8 / nic_rate, rel=1e-12)
    assert cost.busbw_gbps == pytest.approx(cost.algbw_gbps * 2 * 15 / 16)
    assert cost.n == 16 and cost.link_bytes == pytest.approx(sent)
    links = multinode_links(node, 2, 8, size)
    assert max(links, key=links.get) == "nic"
    # NVLink carries 7/8 of what a rank sends, at the single-node ring's streaming rate
    nvlink = collective_cost(node.gpu_preset, 8, GiB, "allreduce", "ring").link_rate_gbps
    assert links["nvlink"] == pytest.approx(7 / 8 * sent / (nvlink * 1e9))


def test_ring_busbw_bounded_by_the_nics():
    """Large messages: busbw -> nics x the NIC's rate, whatever the node count; halving the
    NICs halves it; reduce-scatter moves half of all-reduce's bytes."""
    node = node_preset("h100")
    bound = 8 * node.nic_gbps * NET_EFFICIENCY
    for k in (2, 8):
        busbw = multinode_cost(node, k, 8, 16 * GiB).busbw_gbps
        assert 0.95 * bound < busbw < bound
    # the ring's latency grows with 2(N-1) steps: it degrades at scale (NVIDIA/nccl#1649)
    assert multinode_cost(node, 64, 8, 16 * GiB).busbw_gbps < 0.95 * bound
    four = multinode_cost(node.with_(nics=4), 2, 8, 16 * GiB).busbw_gbps
    assert four == pytest.approx(0.5 * multinode_cost(node, 2, 8, 16 * GiB).busbw_gbps,
                                 rel=0.01)
    ar = multinode_links(node, 4, 8, GiB, "allreduce")
    rs = multinode_links(node, 4, 8, GiB, "reducescatter")
    assert rs["nic"] == pytest.approx(ar["nic"] / 2)


def test_tree_network_bytes_from_the_double_binary_tree():
    """Per node, the double binary tree sends S at 2 nodes (root of one tree, leaf of the
    other, S/2 each) and 1.5 S at 4 nodes (inner node of one tree: S/2 up, S/2 down; leaf of
    the other: S/2), counted by hand."""
    node = node_preset("a100")
    rate = node.nic_gbps * NET_EFFICIENCY * 1e9
    for k, per_node in ((2, 1.0), (4, 1.5)):
        links = multinode_links(node, k, 8, GiB, algo="tree")
        assert links["nic"] == pytest.approx(per_node * GiB / 8 / rate)
        # intra-node chain up and down: 2(G-1)/G of the buffer on each GPU's NVLink
        nvlink = collective_cost(node.gpu_preset, 8, GiB).link_rate_gbps
        assert links["nvlink"] == pytest.approx(2 * 7 / 8 * GiB / (nvlink * 1e9))
    # on 2 nodes the tree's busbw goes beyond what the NICs allow a ring (NVIDIA/nccl#812,
    # nccl-tests#196: "can indeed go beyond the network bottleneck"); not from 4 nodes on
    nic_bound = 8 * node.nic_gbps * NET_EFFICIENCY
    assert multinode_cost(node, 2, 8, 8 * GiB, algo="tree").busbw_gbps > 1.2 * nic_bound
    assert multinode_cost(node, 16, 8, 8 * GiB, algo="tree").busbw_gbps < nic_bound
    # tree latency (tuning.cc, Simple): 8.4 + 2 ((G-1) 4.0 + log2(K) 14) us
    assert multinode_cost(node, 4, 8, GiB, algo="tree").latency_s == pytest.approx(
        (8.4 + 2 * (7 * 4.0 + 2 * 14.0)) * 1e-6)


def test_sharp_sends_the_node_sum_once():
    """SHARP: each NIC sends 1/nics of the buffer whatever the node count (the switches add),
    so algbw stays flat as nodes grow while ring's busbw cannot beat the NICs. On DGX A100
    (CollNet chain) NVLink binds: algbw = NVLink rate x G / (2(G-1))."""
    node = node_preset("a100")
    nvlink = collective_cost(node.gpu_preset, 8, GiB).link_rate_gbps
    costs = [multinode_cost(node, k, 8, GiB, algo="sharp") for k in (2, 16, 100)]
    for cost in costs:
        assert cost.algbw_gbps == pytest.approx(nvlink * 8 / 14, rel=0.01)
    assert costs[0].busbw_gbps < costs[1].busbw_gbps < costs[2].busbw_gbps
    ring = multinode_cost(node, 16, 8, GiB)
    assert costs[1].busbw_gbps > 1.2 * ring.busbw_gbps
    for k in (2, 16):
        links = multinode_links(node, k, 8, GiB, algo="sharp")
        assert links["nic"] == pytest.approx(GiB / 8 / (node.nic_gbps * NET_EFFICIENCY * 1e9))
    # CollNet chain latency: 2 (G-1) 2.8 + 30 us
    assert costs[0].latency_s == pytest.approx((2 * 7 * 2.8 + 30.0) * 1e-6)
    # H100: NVLink SHARP inside the node, NCCL's NVLS latency 25 + 18 us
    assert multinode_cost(node_preset("h100"), 2, 8, GiB, algo="sharp").latency_s == \
        pytest.approx(43e-6)


def test_sharp_published_limits():
    node = node_preset("a100")
    # a SAT operation takes at most 2^30 - 32 bytes: 8 GiB over 8 NICs is 1 GiB a tree, one
    # byte over, so the plugin issues two operations and pays the network latency twice
    one = multinode_cost(node, 2, 8, 8 * GiB - 256, algo="sharp").latency_s
    two = multinode_cost(node, 2, 8, 8 * GiB, algo="sharp").latency_s
    assert two - one == pytest.approx(30e-6)
    # Quantum (HDR) runs one streaming tree per switch: 32 rails spanning spines need 32 of the
    # 20 spines; Quantum-2 runs one per port
    wide = node.with_(gpus=32, nics=32)
    multinode_cost(wide, 2, 32, GiB, algo="sharp")   # one leaf per rail: fine
    with pytest.raises(ModelInputError, match="one streaming tree per switch"):
        multinode_cost(wide, 21, 32, GiB, algo="sharp")
    multinode_cost(wide.with_(fabric=node_preset("h100").fabric), 21, 32, GiB, algo="sharp")


def test_small_messages_take_ll():
    cost = multinode_cost(node_preset("h100"), 2, 8, 1024)
    assert cost.protocol == "LL"
    # LL latency: 6.6 + 28 x max(0.6, 1.0) + 2 x 2.7 us
    assert cost.latency_s == pytest.approx((6.6 + 28 * 1.0 + 2 * 2.7) * 1e-6)


@pytest.mark.parametrize("args, match", [
    ((1, 8, GiB), "nodes must be an integer in \\[2, 100\\]"),
    ((101, 8, GiB), "nodes must be an integer in \\[2, 100\\]"),
    ((2.0, 8, GiB), "nodes must be an integer"),
    ((2, 9, GiB), "GPUs per node must be an integer in \\[1, 8\\]"),
    ((2, 8, math.nan), "size_bytes must be a finite number"),
])
def test_input_errors(args, match):
    with pytest.raises(ModelInputError, match=match):
        multinode_cost(node_preset("a100"), *args)


def test_op_and_algo_errors():
    node = node_preset("h100")
    with pytest.raises(ModelInputError, match="unknown multi-node algorithm"):
        multinode_cost(node, 2, 8, GiB, algo="inswitch")
    with pytest.raises(ModelInputError, match="not 'reduce'"):
        multinode_cost(node, 2, 8, GiB, op="reduce")
    with pytest.raises(ModelInputError, match="all-reduce algorithm"):
        multinode_cost(node, 2, 8, GiB, op="allgather", algo="sharp")


def test_cost_streams_its_link_bytes_at_its_link_rate():
    """The contention model reads link_bytes / link_rate as the streaming time: it must equal
    time - latency (Simple and LL)."""
    for size, algo in ((GiB, "ring"), (GiB, "sharp"), (GiB, "tree"), (4096, "ring")):
        cost = multinode_cost(node_preset("h100"), 4, 8, size, algo=algo)
        assert cost.link_bytes / (cost.link_rate_gbps * 1e9) == pytest.approx(
            cost.time_s - cost.latency_s)


def test_one_gpu_per_node_uses_no_nvlink():
    links = multinode_links(node_preset("a100"), 4, 1, GiB)
    assert links["nvlink"] == 0.0 and links["nic"] > 0


# -- published rows ------------------------------------------------------------------------

def test_published_rows_inside_their_bands():
    rows = multinode_rows()
    keys = {"quantity", "model", "published", "low", "high", "unit", "source", "command",
            "role"}
    for row in rows:
        assert keys <= set(row)
        assert row["low"] <= row["high"]
        if row["quantity"] in KNOWN_MISSES:
            assert not row["within"], f"{row['quantity']} is listed as a miss but is inside"
        else:
            assert row["low"] <= row["model"] <= row["high"], row
    fitted = [r for r in rows if r["role"] == "fitted"]
    assert all(r.get("fits") for r in fitted)
    assert 2 * len(fitted) <= len(rows)
    assert set(KNOWN_MISSES) <= {r["quantity"] for r in rows}


# -- command line --------------------------------------------------------------------------

def run(*args):
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "model", "collective", *args],
                          check=False, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("gpu, algo", [("h100", "ring"), ("h100", "sharp"), ("a100", "tree")])
def test_cli_nodes_json(gpu, algo):
    status, out, err = run("--gpu", gpu, "--gpus", "8", "--nodes", "2", "--algo", algo,
                           "--size", "1GiB", "--json")
    assert status == 0, err
    data = json.loads(out)
    cost = multinode_cost(node_preset(gpu), 2, 8, GiB, algo=algo)
    assert data["busbw_GBps"] == pytest.approx(cost.busbw_gbps)
    assert data["algbw_GBps"] == pytest.approx(data["busbw_GBps"] * 16 / 30)
    assert data["time_us"] == pytest.approx(cost.time_s * 1e6)
    assert data["gpus"] == 16 and data["bottleneck"] in ("nvlink", "pcie", "nic")


@pytest.mark.parametrize("args, message", [
    (("--nodes", "1", "--algo", "sharp"), "--algo sharp"),
    (("--nodes", "0"), "--nodes must be at least 1"),
    (("--nodes", "-1"), "--nodes must be at least 1"),
    (("--nodes", "1e9"), "--nodes must be an integer"),
    (("--nodes", "nan"), "--nodes must be an integer"),
    (("--nodes", "1000000000"), "--nodes must be at most 100"),
    (("--nodes", "2", "--gpu", "v100"), "no multi-node preset"),
])
def test_cli_nodes_errors(args, message):
    status, out, err = run(*args)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_presets_cover_every_a100_alias():
    assert {"a100", "a100-40", "a100-80", "h100"} <= set(NODE_PRESETS)


def test_cli_overlap_nodes():
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "model", "overlap", "--gpu", "h100",
                           "--nodes", "4", "--algo", "sharp", "--comm", "allreduce:256MiB",
                           "--json"], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    cost = multinode_cost(node_preset("h100"), 4, 8, 256 << 20, algo="sharp")
    assert data["nodes"] == 4 and data["comm_alone_s"] == pytest.approx(cost.time_s)
