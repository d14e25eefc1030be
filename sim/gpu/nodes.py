"""Nodes and the network between them: DGX presets, the GPU → PCIe switch → NIC path, and a
two-level leaf/spine InfiniBand fabric with in-network reduction (SHARP).

Units: bandwidths in GB/s (10^9 bytes/s) unless a name says Gb/s (10^9 bits/s); latencies in
seconds. Sources are on each field and in ``docs/gpu-model.md`` (section "Multi-node").
"""

from dataclasses import dataclass, replace

from sim.gpu.presets import PRESETS, ModelInputError, check_count

__all__ = [
    "LINKS",
    "NODE_PRESETS",
    "FabricSpec",
    "NodeSpec",
    "SharpSpec",
    "ib_data_gbps",
    "message_path",
    "node_preset",
    "pcie_effective_gbps",
]

#: The links a message can use, in the order a GPU-to-GPU message meets them.
LINKS = ("nvlink", "pcie", "nic", "leaf", "spine")

# -- PCIe ---------------------------------------------------------------------------------

#: PCIe transfer rate per lane (GT/s) and line encoding by generation (PCI-SIG base
#: specifications: gen3 8 GT/s, gen4 16 GT/s, gen5 32 GT/s, all 128b/130b).
PCIE_GT_S = {3: 8.0, 4: 16.0, 5: 32.0}
PCIE_ENCODING = 128 / 130
#: Bytes a TLP carries beyond its payload: 16-byte header (64-bit address), 2-byte sequence
#: number, 4-byte LCRC, 4-byte framing token (gen3+). With a 256-byte max payload (what the
#: DGX root ports and switches negotiate for GPUDirect RDMA) that is 256 / 282 = 90.8 %.
PCIE_TLP_OVERHEAD_BYTES = 26
PCIE_MAX_PAYLOAD_BYTES = 256


def pcie_effective_gbps(gen, lanes=16):
    """Payload bandwidth of one PCIe link per direction, GB/s: lanes × rate × 128/130 / 8 ×
    payload / (payload + TLP overhead). Gen4 x16: 28.6 GB/s; gen5 x16: 57.2 GB/s."""
    raw = lanes * PCIE_GT_S[gen] * PCIE_ENCODING / 8
    return raw * PCIE_MAX_PAYLOAD_BYTES / (PCIE_MAX_PAYLOAD_BYTES + PCIE_TLP_OVERHEAD_BYTES)


# -- InfiniBand ---------------------------------------------------------------------------

#: InfiniBand MTU used by NCCL over IB (4096 bytes) and the per-packet headers an RDMA write
#: carries on the wire: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 bytes (InfiniBand Architecture
#: Specification vol. 1, ch. 5 and 7; the RETH of the first packet is negligible at NCCL's
#: chunk sizes).
IB_MTU_BYTES = 4096
IB_HEADER_BYTES = 26


def ib_data_gbps(port_gbits):
    """Payload bandwidth of one InfiniBand port per direction, GB/s. HDR's 200 Gb/s and NDR's
    400 Gb/s are data rates (after 64b/66b and FEC); packets then carry 4096 bytes of payload in
    4122 on the wire (99.4 %)."""
    return port_gbits / 8 * IB_MTU_BYTES / (IB_MTU_BYTES + IB_HEADER_BYTES)


@dataclass(frozen=True)
class SharpSpec:
    """In-network reduction (SHARP) of one switch generation.

    Attributes
    ----------
    name : str
    streaming_trees : int
        Streaming aggregation trees (SATs, the large-message mode NCCL's CollNet uses) the
        subnet holds: 63 on Quantum, 511 on Quantum-2 (NVIDIA SHARP Rev 3.13.0, "General
        Information").
    sat_per_port : bool
        Quantum runs ONE active streaming tree per switch (two only on request: NVIDIA SHARP
        v2.6.1, "Reducing the Number of Operational VLs"); Quantum-2 one per port (Rev 3.13.0).
    max_message_bytes : int
        Largest message one SAT operation takes: 1073741792 bytes (2^30 − 32; NVIDIA SHARP
        v2.6.1, "NVIDIA SHARP Collective Library", SHARP_COLL_ENABLE_SAT). A larger reduction
        is issued as several operations, each paying the network latency again.
    """

    name: str
    streaming_trees: int
    sat_per_port: bool
    max_message_bytes: int = 1073741792


@dataclass(frozen=True)
class FabricSpec:
    """A two-level non-blocking leaf/spine (folded Clos) InfiniBand fabric, rail-optimized:
    NIC r of every node goes to a leaf of rail r, so same-rail traffic between nodes on one leaf
    crosses one switch and otherwise leaf → spine → leaf.

    Attributes
    ----------
    name : str
    radix : int
        Ports per switch. A leaf uses radix/2 ports down and radix/2 up; a spine all radix down.
        The fabric holds radix²/2 end ports.
    port_gbits : float
        Data rate of one port, Gb/s.
    switch_latency_s : float
        Port-to-port latency of one switch, seconds (an assumption: NVIDIA's switch manuals in
        the sources read for this model do not state it; InfiniBand cut-through switches are
        quoted at 100–200 ns). Used for message timing in traces; the collectives' latency comes
        from NCCL's own NET figures, which include the fabric.
    sharp : SharpSpec
    """

    name: str
    radix: int
    port_gbits: float
    switch_latency_s: float
    sharp: SharpSpec

    @property
    def leaf_down_ports(self):
        return self.radix // 2

    @property
    def end_ports(self):
        """End ports (NICs) a two-level non-blocking fabric of these switches holds."""
        return self.radix * self.radix // 2


QUANTUM = SharpSpec("SHARPv2 (Quantum)", streaming_trees=63, sat_per_port=False)
QUANTUM2 = SharpSpec("SHARPv3 (Quantum-2)", streaming_trees=511, sat_per_port=True)

#: NVIDIA Quantum QM8700: 40 ports of HDR 200 Gb/s (QM87xx user manual). Quantum-2 QM9700:
#: 64 ports of NDR 400 Gb/s (32 OSFP cages of two ports; QM97xx user manual, "Interfaces").
HDR_FABRIC = FabricSpec("HDR InfiniBand, Quantum QM8700 leaf/spine", radix=40,
                        port_gbits=200.0, switch_latency_s=130e-9, sharp=QUANTUM)
NDR_FABRIC = FabricSpec("NDR InfiniBand, Quantum-2 QM9700 leaf/spine", radix=64,
                        port_gbits=400.0, switch_latency_s=130e-9, sharp=QUANTUM2)


@dataclass(frozen=True)
class NodeSpec:
    """One node: its GPUs, NICs and the PCIe path between them.

    Attributes
    ----------
    name : str
    gpu : str
        Key of the GPU preset (:data:`sim.gpu.presets.PRESETS`).
    gpus : int
        GPUs in the node (one NVLink/NVSwitch domain).
    nics : int
        Compute-fabric NICs (one port each).
    nic_gbits : float
        Data rate of one NIC port, Gb/s.
    pcie_gen : int
        PCIe generation of the GPU → PCIe switch → NIC path (GPUDirect RDMA).
    fabric : FabricSpec
    """

    name: str
    gpu: str
    gpus: int
    nics: int
    nic_gbits: float
    pcie_gen: int
    fabric: FabricSpec

    @property
    def gpu_preset(self):
        return PRESETS[self.gpu]

    @property
    def nic_gbps(self):
        """Payload bandwidth of one NIC per direction, GB/s (packet headers removed)."""
        return ib_data_gbps(self.nic_gbits)

    @property
    def pcie_gbps(self):
        """Payload bandwidth of one x16 link of the GPU → switch → NIC path, GB/s."""
        return pcie_effective_gbps(self.pcie_gen)

    @property
    def max_nodes(self):
        """Most nodes the two-level fabric holds: radix²/2 NIC ports, ``nics`` per node."""
        return self.fabric.end_ports // self.nics

    def with_(self, **changes):
        return replace(self, **changes)


#: GPU preset key → node. DGX A100 (NVIDIA DGX A100 System User Guide DU-09821-001,
#: "Hardware Overview" and "Network Connections"): 8 × A100 SXM4, 8 single-port ConnectX-6
#: HDR 200 Gb/s InfiniBand compute NICs behind PCIe gen4 switches shared with the GPUs (a DGX
#: A100 topology dump, NVIDIA/nccl#1505, shows the NICs at 16 GT/s x16, 200000 Mb/s). DGX H100
#: (NVIDIA DGX H100 User Guide, 1.2.3 "Network Modules", table 6: eight ConnectX-7 ports on
#: four OSFP cages, each listed with the GPU it serves; DGX BasePOD deployment guide: "Eight
#: ports in four OSFP connections are used for the InfiniBand compute fabric"): 8 × H100 SXM5,
#: 8 × NDR 400 Gb/s, PCIe gen5. Every GPU has a NIC of its own, each on its own x16 link.
NODE_PRESETS = {
    "a100": NodeSpec("DGX A100 (8 x A100, 8 x HDR 200 Gb/s)", "a100", gpus=8, nics=8,
                     nic_gbits=200.0, pcie_gen=4, fabric=HDR_FABRIC),
    "h100": NodeSpec("DGX H100 (8 x H100, 8 x NDR 400 Gb/s)", "h100", gpus=8, nics=8,
                     nic_gbits=400.0, pcie_gen=5, fabric=NDR_FABRIC),
}
NODE_PRESETS["a100-40"] = NODE_PRESETS["a100"]
NODE_PRESETS["a100-80"] = NODE_PRESETS["a100"].with_(gpu="a100-80")


def node_preset(gpu_name):
    """The node preset for a GPU preset name (case-insensitive).

    Raises
    ------
    ModelInputError
        For a GPU with no node preset, listing those that have one.
    """
    key = str(gpu_name).lower()
    if key not in NODE_PRESETS:
        raise ModelInputError(f"no multi-node preset for GPU {gpu_name!r}; multi-node runs "
                              f"need one of {', '.join(sorted(NODE_PRESETS))}")
    return NODE_PRESETS[key]


def message_path(node, nodes, gpus_per_node, src, dst):
    """The links a message from rank ``src`` to rank ``dst`` crosses, in order.

    Ranks are numbered node by node (rank = node · gpus_per_node + local). Inside a node a
    message takes NVLink through the NVSwitch (``("nvlink",)``). Between nodes it stays on one
    rail (NCCL's rings and trees connect same-index NICs; PXN first moves data over NVLink to
    the GPU next to the right rail): GPU → PCIe switch → NIC → leaf → (spine → leaf when the
    two nodes hang off different leaves of that rail) → NIC → PCIe switch → GPU.

    Raises
    ------
    ModelInputError
        For a rank outside [0, nodes · gpus_per_node).
    """
    total = nodes * gpus_per_node
    check_count("src", src, 0, total - 1)
    check_count("dst", dst, 0, total - 1)
    a, b = src // gpus_per_node, dst // gpus_per_node
    if a == b:
        return ("nvlink",) if src != dst else ()
    per_leaf = node.fabric.leaf_down_ports
    same_leaf = a // per_leaf == b // per_leaf
    switches = ("leaf",) if same_leaf else ("leaf", "spine", "leaf")
    return ("pcie", "nic") + switches + ("nic", "pcie")
