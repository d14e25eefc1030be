"""GPU presets: the resources the contention model shares out, and the limits of the model
(how many GPUs one switch holds, the largest byte count it takes) with the exception it raises
for a parameter outside them.

Units: bandwidths in GB/s with GB = 10^9 bytes; throughput in TFLOP/s (10^12); clocks in MHz;
memory in bytes. Sources are in ``docs/calibration.md`` and on each field below.
"""

import math
import numbers
from dataclasses import dataclass, replace

from sim.errors import InputError

__all__ = ["GPU", "PRESETS", "gpu_preset", "NCCL_NVLINK_GBPS", "ModelInputError", "MAX_GPUS",
           "MAX_BYTES", "NVLINK_HOP_LATENCY_S", "check_count", "check_real", "shown"]


class ModelInputError(InputError, ValueError):
    """A parameter of the GPU model outside its range (a GPU count, a size, a speed factor):
    one line naming the parameter, its range and the reason for the range."""


#: Most GPUs the model puts in one NVLink domain. The collectives assume every GPU reaches
#: every other at its full NVLink bandwidth through one layer of switches, each GPU on a port
#: of each switch: a layer of NVSwitch gen3 chips (64 NVLink ports each) holds 64 GPUs. The
#: in-network switch the model drives has the same port count (hw/packet.py ``PORT_BITS`` = 6).
MAX_GPUS = 64

#: Largest byte count the model takes (a bucket cap, a message piece, a streamed kernel):
#: 2^50 bytes (1024 TiB), far beyond any GPU's memory, and small enough that every time and
#: rate computed from it stays finite.
MAX_BYTES = 1 << 50


def shown(value):
    """``value`` for an error message; an integer of more than 15 digits in scientific notation
    (``1.00e+300``), not its hundreds of digits (and with no float, which could overflow)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and \
            abs(value) >= 10**15:
        digits = str(abs(int(value)))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    return repr(value)


def _bound(value):
    """A range's bound for an error message: integers in full, other numbers as ``%g``."""
    return str(value) if isinstance(value, numbers.Integral) else f"{value:g}"


def check_count(name, value, minimum, maximum=None, why=""):
    """``value`` if it is an integer (not a bool; numpy integers count) in [minimum, maximum].

    Raises
    ------
    ModelInputError
        ``name must be an integer in [minimum, maximum] (why), not value``.
    """
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum or \
            (maximum is not None and value > maximum):
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f"at least {minimum}"
        raise ModelInputError(f"{name} must be an integer {bound}"
                              f"{f' ({why})' if why else ''}, not {shown(value)}")
    return value


def check_real(name, value, minimum, maximum, why=""):
    """``value`` if it is a finite real number (not a bool) in [minimum, maximum].

    Raises
    ------
    ModelInputError
        ``name must be a finite number in [minimum, maximum] (why), not value``.
    """
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or \
            not (isinstance(value, numbers.Integral) or math.isfinite(value)) or \
            not minimum <= value <= maximum:
        raise ModelInputError(f"{name} must be a finite number in [{_bound(minimum)}, "
                              f"{_bound(maximum)}]"
                              f"{f' ({why})' if why else ''}, not {shown(value)}")
    return value


#: Effective bandwidth of one NVLink per direction in NCCL's own topology model (GB/s):
#: NCCL ``src/graph/topo.h`` ``SM70_NVLINK_BW`` 20.0, ``SM80_NVLINK_BW`` 20.0,
#: ``SM90_NVLINK_BW`` 20.6, against a raw 25 GB/s per link.
NCCL_NVLINK_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6}

#: One-way latency of one NVLink hop between a GPU and an NVSwitch, seconds. NVIDIA does not
#: publish it (astra-sim/astra-sim#59: "NVLink latency parameters are confidential"); the
#: estimates in use are 500 ns per NVLink step (ASTRA-sim's DGX-2 configuration, same thread)
#: and 700 ns per GPU-to-GPU step (arXiv 2111.04867, p. 3). A GPU-to-GPU step crosses two
#: hops, so 700 ns / 2 = 350 ns per hop. cuda-samples#230 measures 1.8–2.3 µs for a P2P write
#: through NVLink end to end, which includes the kernel and its completion, not only the wire.
NVLINK_HOP_LATENCY_S = 350e-9


@dataclass(frozen=True)
class GPU:
    """One GPU's resources.

    Attributes
    ----------
    name : str
    arch : str
        ``volta``, ``ampere`` or ``hopper``.
    sms : int
        Streaming multiprocessors.
    clock_mhz : int
        Boost clock.
    tensor_tflops : float
        Dense FP16/BF16 tensor-core peak, TFLOP/s.
    fp32_tflops : float
        FP32 (non-tensor) peak, TFLOP/s.
    hbm_gbps : float
        HBM bandwidth, GB/s.
    hbm_bytes : int
        HBM capacity, bytes.
    l2_bytes : int
        L2 cache, bytes.
    nvlinks : int
        NVLink links.
    nvlink_gbps : float
        Raw bandwidth of one link per direction, GB/s.
    pcie_gbps : float
        PCIe bandwidth per direction, GB/s.
    compute_efficiency : float
        Fraction of tensor peak a large GEMM reaches (achievable-efficiency factor; an
        assumption, not fitted).
    conv_efficiency : float
        Fraction of tensor peak a convolution reaches. Fitted on ONE figure: ResNet-50 v1.5
        AMP training, batch 256, on one A100 80GB, 2470 img/s (NVIDIA DeepLearningExamples
        PyTorch README, DGX A100 80GB table), with the ``a100-80`` preset, the part it was
        measured on (0.38 had been fitted with the 40GB preset, whose lower HBM bandwidth
        made the memory-bound layers slower than on the measured part). The V100 rows are
        predictions (docs/calibration.md).
    memory_efficiency : float
        Fraction of HBM peak a streaming kernel reaches.
    ring_channels : int
        NCCL ring channels (one CTA, one SM each) for large all-reduces.
    nvls_channels : int
        Channels an in-switch (NVLS-style) all-reduce uses.
    link_latency_s : float
        One-way latency of a GPU↔switch NVLink hop, seconds (see :data:`NVLINK_HOP_LATENCY_S`).
        A GPU-to-GPU message crosses two hops; an in-switch reduction's slot is held for a
        round trip of two hops plus the switch's own pipeline.
    nvlink_sharp : bool
        Whether the GPU's NVSwitch reduces in the switch (NVLink SHARP, NVSwitch gen3 on HGX
        H100/H800): the ``nvls`` collective runs only then.
    """

    name: str
    arch: str
    sms: int
    clock_mhz: int
    tensor_tflops: float
    fp32_tflops: float
    hbm_gbps: float
    hbm_bytes: int
    l2_bytes: int
    nvlinks: int
    nvlink_gbps: float
    pcie_gbps: float
    compute_efficiency: float = 0.70
    conv_efficiency: float = 0.305
    memory_efficiency: float = 0.85
    ring_channels: int = 24
    nvls_channels: int = 16
    link_latency_s: float = NVLINK_HOP_LATENCY_S
    nvlink_sharp: bool = False

    @property
    def link_gbps(self):
        """Raw NVLink bandwidth per direction, all links, GB/s."""
        return self.nvlinks * self.nvlink_gbps

    @property
    def link_effective_gbps(self):
        """Effective NVLink bandwidth per direction, all links, GB/s (NCCL's per-link figure)."""
        return self.nvlinks * NCCL_NVLINK_GBPS[self.arch]

    def with_(self, **changes):
        """A copy with some fields changed (e.g. ``ring_channels``)."""
        return replace(self, **changes)


GiB = 1 << 30
MB = 10**6

#: name → preset. Figures from the vendors' datasheets/whitepapers (see docs/calibration.md).
PRESETS = {
    "v100": GPU("V100 SXM2 32GB", "volta", sms=80, clock_mhz=1530, tensor_tflops=125.0,
                fp32_tflops=15.7, hbm_gbps=900.0, hbm_bytes=32 * GiB, l2_bytes=6 * MB,
                nvlinks=6, nvlink_gbps=25.0, pcie_gbps=16.0, ring_channels=12,
                nvls_channels=12),
    "a100": GPU("A100 SXM4 40GB", "ampere", sms=108, clock_mhz=1410, tensor_tflops=312.0,
                fp32_tflops=19.5, hbm_gbps=1555.0, hbm_bytes=40 * GiB, l2_bytes=40 * MB,
                nvlinks=12, nvlink_gbps=25.0, pcie_gbps=32.0, ring_channels=24,
                nvls_channels=16),
    "a100-80": GPU("A100 SXM4 80GB", "ampere", sms=108, clock_mhz=1410, tensor_tflops=312.0,
                   fp32_tflops=19.5, hbm_gbps=2039.0, hbm_bytes=80 * GiB, l2_bytes=40 * MB,
                   nvlinks=12, nvlink_gbps=25.0, pcie_gbps=32.0, ring_channels=24,
                   nvls_channels=16),
    "h100": GPU("H100 SXM5 80GB", "hopper", sms=132, clock_mhz=1980, tensor_tflops=989.0,
                fp32_tflops=66.9, hbm_gbps=3350.0, hbm_bytes=80 * GiB, l2_bytes=50 * MB,
                nvlinks=18, nvlink_gbps=25.0, pcie_gbps=64.0, ring_channels=32,
                nvls_channels=16, nvlink_sharp=True),
    # The export H100: the same GPU with 8 of its 18 NVLinks (200 GB/s per direction), on the
    # same NVSwitch gen3 (NVIDIA/nccl #1374 measures its NVLS all-reduce). Ring channels: two
    # per NVLink, as V100 (12 for 6), A100 (24 for 12) — an assumption, not a measured count.
    "h800": GPU("H800 SXM5 80GB", "hopper", sms=132, clock_mhz=1980, tensor_tflops=989.0,
                fp32_tflops=66.9, hbm_gbps=3350.0, hbm_bytes=80 * GiB, l2_bytes=50 * MB,
                nvlinks=8, nvlink_gbps=25.0, pcie_gbps=64.0, ring_channels=16,
                nvls_channels=16, nvlink_sharp=True),
}
PRESETS["a100-40"] = PRESETS["a100"]


def gpu_preset(name):
    """The preset called ``name`` (case-insensitive).

    Raises
    ------
    ValueError
        For an unknown name, listing the known ones.
    """
    key = str(name).lower()
    if key not in PRESETS:
        raise ValueError(f"unknown GPU {name!r}; choose from {', '.join(sorted(PRESETS))}")
    return PRESETS[key]
