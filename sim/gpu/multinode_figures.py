"""Published multi-node figures next to what :mod:`sim.gpu.multinode` predicts for them.

One row is fitted (it sets :data:`sim.gpu.multinode.NET_EFFICIENCY`); the others are
predictions. A row's band is the published band, or the precision the figure was stated with
("~24 GB/s" is 23.5–24.5), never wider. Rows in :data:`KNOWN_MISSES` fall outside their band
and say why.
"""

from sim.gpu.multinode import multinode_cost, multinode_links
from sim.gpu.nodes import node_preset

__all__ = ["KNOWN_MISSES", "multinode_rows"]

GiB = 1 << 30

#: quantity → why the model misses the published band.
KNOWN_MISSES = {
    "DGX A100 x K, SHARP (CollNet chain) all-reduce algbw": (
        "the estimate counts the intra-node chain as ~2x the data; the chain actually sends "
        "2(G-1)/G = 1.75 S per GPU over NVLink (the two ends of each chain skip one "
        "direction), so the model's NVLink bound is 228 / 1.75 = 130 GB/s, 18 % above the "
        "rounded estimate; no measured CollNet figure on DGX A100 was found to settle it"),
}


def _busbw(gpu, nodes, size, algo="ring", **node_changes):
    node = node_preset(gpu).with_(**node_changes) if node_changes else node_preset(gpu)
    return multinode_cost(node, nodes, node.gpus, size, "allreduce", algo)


def _row(quantity, model, published, low, high, unit, source, command, role, fits=None):
    row = {"quantity": quantity, "model": float(model), "published": published, "low": low,
           "high": high, "unit": unit, "source": source, "command": command, "role": role}
    if fits:
        row["fits"] = fits
    row["within"] = low <= row["model"] <= high
    row["known_miss"] = KNOWN_MISSES.get(quantity)
    return row


def multinode_rows():
    """The multi-node rows: ``quantity, model, published, low, high, unit, source, command,
    role`` ("fitted" / "predicted"), ``fits`` (the constant a fitted row sets), ``within`` and
    ``known_miss`` (the reason, for a row listed in :data:`KNOWN_MISSES`)."""
    rows = []
    cmd = "innet model collective --gpu {gpu} --gpus 8 --nodes {k} --algo {algo} --size 8GiB"
    a100_ring = _busbw("a100", 2, 8 * GiB)
    rows.append(_row(
        "DGX A100 x 2, ring all-reduce busbw (8 x HDR 200 Gb/s)", a100_ring.busbw_gbps,
        192, 191.5, 192.5, "GB/s",
        "NVIDIA/nccl#812 (AddyLaddy: 'On an Nvidia DGX-A100 system we have 8x200Gbit/s IB "
        "cards and we measure 192GB/s AllReduce BusBW'); band = stated precision",
        cmd.format(gpu="a100", k=2, algo="ring"), "fitted", fits="NET_EFFICIENCY"))
    h100_ring = _busbw("h100", 2, 8 * GiB)
    rows.append(_row(
        "DGX H100 x 2, ring all-reduce busbw per NDR NIC", h100_ring.busbw_gbps / 8,
        "46–48", 46.0, 48.0, "GB/s",
        "NVIDIA/nccl-tests#290 (AddyLaddy: 'For NDR @ 400Gbps you should see 46-48GB/s per "
        "NIC', NCCL_ALGO=RING on two nodes); model = busbw / 8 NICs",
        cmd.format(gpu="h100", k=2, algo="ring"), "predicted"))
    node = node_preset("h100")
    sent = 2 * 15 / 16 * 8 * GiB / node.nics   # one NIC's share of a 16-rank ring all-reduce
    nic_rate = sent / multinode_links(node, 2, 8, 8 * GiB)["nic"] / 1e9
    rows.append(_row(
        "ConnectX-7 NDR NIC rate through NCCL", nic_rate, "48–49", 48.0, 49.0, "GB/s",
        "NVIDIA/nccl-tests#267 (AddyLaddy: 'CX-7 NICs at NDR rate (400Gbps) should achieve "
        "up to 48-49GB/s per NIC'); model = a NIC's bytes / its busy time",
        cmd.format(gpu="h100", k=2, algo="ring") + " --json  (link_busy_us.nic)", "predicted"))
    h100_4 = _busbw("h100", 4, 8 * GiB)
    rows.append(_row(
        "DGX H100 x 4, ring all-reduce busbw (no SHARP)", h100_4.busbw_gbps,
        "~380", 375.0, 385.0, "GB/s",
        "GTC 2024 NCCL talk slide quoted in NVIDIA/nccl#1649 ('the multi-node Allreduce busBW "
        "is approximately 380GB/s even without using SHARP'; node count not stated, the model "
        "is read at 4 nodes: 382.8 at 2, 374.0 at 16); band = stated precision",
        cmd.format(gpu="h100", k=4, algo="ring"), "predicted"))
    a800 = _busbw("a100", 12, 8 * GiB, nics=1)
    rows.append(_row(
        "A800 x 12 nodes, 1 HDR NIC each, ring all-reduce busbw", a800.busbw_gbps,
        "~24", 23.5, 24.5, "GB/s",
        "NVIDIA/nccl#412 (sjeaugey: at 8G 'you should get ... 24GB/s inter-node' with one "
        "200G HDR NIC per node, GPU Direct RDMA through a PCI switch); band = stated precision",
        "python -c 'from sim.gpu.multinode import multinode_cost; from sim.gpu.nodes import "
        "node_preset; print(multinode_cost(node_preset(\"a100\").with_(nics=1), 12, 8, "
        "8<<30).busbw_gbps)'", "predicted"))
    collnet = _busbw("a100", 2, 8 * GiB, algo="sharp")
    rows.append(_row(
        "DGX A100 x K, SHARP (CollNet chain) all-reduce algbw", collnet.algbw_gbps,
        "~110", 105.0, 115.0, "GB/s",
        "NVIDIA/nccl#320 (sjeaugey: 'with 8 NICs we're limited to ~110GB/s AlgBw' by NVLink "
        "in CollNet on DGX A100); an estimate, band = stated precision",
        cmd.format(gpu="a100", k=2, algo="sharp"), "predicted"))
    return rows
