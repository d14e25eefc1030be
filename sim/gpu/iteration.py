"""One data-parallel training iteration on N GPUs: forward, backward in reverse layer order,
gradient buckets all-reduced on a communication stream as they become ready, optimizer step
after the last bucket.

The simulation is event driven with piecewise-constant rates. Between two events every running
kernel progresses at a rate set by :mod:`sim.gpu.contention` from what else runs on its GPU: a
compute kernel slows while a collective holds SMs and HBM bandwidth; a collective streams at
the rate of its slowest member GPU (ring and tree are lock-step; the switch waits for every
contribution). A collective kernel that has launched but waits for its peers already holds its
SMs (NCCL kernels spin), which is how a straggler slows everyone else's backprop.

GPUs with the same speed factor behave identically (the collectives are symmetric), so they
are simulated once per distinct speed factor: the cost grows with the number of distinct
speeds, not with N, and as K log K for K distinct speeds: an event touches only the streams it
concerns (see :class:`_Streams`).
"""

import heapq
import math
from dataclasses import dataclass, field

from sim.gpu.collectives import ALGORITHMS, collective_cost
from sim.gpu.multinode import MULTINODE_ALGORITHMS, multinode_cost
from sim.gpu.nodes import NODE_PRESETS
from sim.gpu.contention import KERNEL_GAP_S, KernelSpec, kernel_time, rates_during, sm_share_during
from sim.gpu.presets import MAX_BYTES, MAX_GPUS, ModelInputError, check_count, check_real

__all__ = ["IterationConfig", "Bucket", "make_buckets", "simulate_iteration", "simulate_streams",
           "IterationResult", "optimizer_bytes", "overhead_kernels", "framework_costs", "OPTIMIZER_BYTES",
           "PRECISIONS", "OP_CPU_S", "BUCKET_CPU_S"]

MiB = 1 << 20

#: Range of a GPU's speed factor (1.0 nominal): a GPU 1000 times slower than its peers is
#: broken, not a straggler, and its kernels would outlast a trace record's duration field.
MIN_SPEED, MAX_SPEED = 1e-3, 1e3
#: Most compute kernels one simulation steps through (kernels per GPU x distinct speed
#: factors): about half a minute and a gigabyte at most.
MAX_KERNELS = 1_000_000

#: CPU time to issue one eager operator, seconds. The dispatch chain costs about 5–25 µs per op
#: before the kernel runs (Python, pybind11, autograd, ATen dispatcher, cudaLaunchKernel:
#: jiahuanglin.xyz "From PyTorch op to kernel launch", table of layer costs); PyTorch's own
#: operator micro-benchmark measures 3.3 µs for a trivial CUDA op's forward alone
#: (pytorch/pytorch#32194). 10 µs: an op with its autograd record, within that range.
OP_CPU_S = 10e-6
#: CPU time DDP's reducer spends per bucket: the bucket's autograd hook, ProcessGroupNCCL's
#: work object and event record/wait, and the NCCL launch: a few operators' worth (assumed
#: 3 x OP_CPU_S, not measured here).
BUCKET_CPU_S = 3 * OP_CPU_S

#: HBM bytes per parameter of one optimizer step (read + written), FP32 state: SGD with
#: momentum reads the parameter, its gradient and momentum and writes parameter and momentum
#: (5 x 4); Adam reads parameter, gradient, m, v and writes parameter, m, v (7 x 4). torch's
#: foreach implementations (the default on CUDA since PyTorch 2.0) touch each once.
OPTIMIZER_BYTES = {"sgd": 20.0, "adam": 28.0}
#: precision → (bytes per gradient element DDP holds and all-reduces, extra optimizer bytes per
#: parameter, unscale bytes per parameter). ``amp`` (torch.cuda.amp): parameters and grads
#: stay FP32 (PyTorch AMP docs: "model parameters are FP32"), GradScaler's
#: ``_amp_foreach_non_finite_check_and_unscale_`` reads and writes every gradient (8 bytes).
#: ``o2`` (apex O2): FP16 model weights and grads; the optimizer reads the FP16 grad into the
#: FP32 master (2) and writes the FP16 weight copy (2), unscaling on the way (apex
#: multi_tensor_scale: read 2, write 4). ``fp32``: no scaler.
PRECISIONS = {"amp": (4, 0.0, 8.0), "o2": (2, 4.0, 6.0), "fp32": (4, 0.0, 0.0)}


@dataclass
class IterationConfig:
    """Parameters of a data-parallel iteration.

    Attributes
    ----------
    n_gpus : int
        GPUs per node (all of them when ``nodes`` is 1).
    nodes : int
        Nodes (default 1: one NVLink domain). With more, the all-reduces run across the nodes'
        network (:func:`sim.gpu.multinode.multinode_cost`) over ``n_gpus × nodes`` ranks.
    node : sim.gpu.nodes.NodeSpec, optional
        The node, for ``nodes`` > 1; default the preset whose GPU is the one simulated.
    algo : str
        ``ring``, ``tree``, ``direct``, ``nvls`` or ``inswitch`` in one node; ``ring``,
        ``tree`` or ``sharp`` across nodes.
    bucketing : str
        ``ddp`` (first bucket ``first_bucket_bytes``, then ``bucket_cap_bytes``) or ``horovod``
        (tensor fusion: ready gradients fused up to ``fusion_bytes`` every ``cycle_s``).
    overlap : bool
        Launch each bucket's all-reduce as soon as it is ready (True) or after backward (False).
    grad_accum : int
        All-reduce every ``grad_accum`` micro-batches (DDP ``no_sync`` on the others).
    speed : list of float, optional
        Per-GPU compute speed factors, one per rank (``n_gpus × nodes``): 1.0 nominal, 0.8 =
        a straggler 25 % slower.
    channels : int, optional
        Override the collective's channel (SM) count.
    optimizer : str
        ``sgd`` (SGD with momentum), ``adam``, or ``auto`` (the reference recipes: SGD-momentum
        for a CNN, NVIDIA DeepLearningExamples ResNet-50; Adam otherwise).
    optimizer_bytes_per_param : float, optional
        HBM bytes the optimizer step moves per parameter; by default from ``optimizer`` and
        ``precision`` (:func:`optimizer_bytes`).
    precision : str
        ``amp`` (torch.cuda.amp: FP16 kernels, FP32 parameters and gradients, a GradScaler
        unscale pass), ``o2`` (apex O2: FP16 parameters and gradients, FP32 master weights
        the optimizer updates and copies back) or ``fp32`` (no tensor cores, 4-byte
        activations).
    allreduce_bytes : int, optional
        Bytes per gradient element all-reduced: by default what the framework holds (4 under
        ``amp`` and ``fp32``: torch DDP all-reduces the FP32 ``.grad``; 2 under ``o2`` or with
        an FP16 compression comm hook).
    gradient_as_bucket_view : bool
        torch DDP's flag (default False): without it DDP copies each gradient into its bucket
        and the reduced bucket back (:func:`overhead_kernels`).
    op_cpu_s : float
        CPU time PyTorch eager spends issuing one operator (Python, autograd, dispatcher,
        ``cudaLaunchKernel``); a kernel cannot start before the CPU has issued it.
    bucket_cpu_s : float
        CPU time DDP's reducer spends per bucket (its hook, the ``ProcessGroupNCCL`` call and
        the NCCL launch).
    switch : hw.spec.SwitchSpec, optional
        ``inswitch`` in one node: innet's switch the collectives are timed on (its lanes,
        slots and chunk set the slot pool's rate against the round trip); default
        :func:`sim.gpu.in_switch.default_switch`, a pool that covers the round trip.
    """

    n_gpus: int = 8
    algo: str = "ring"
    nodes: int = 1
    node: object = None
    bucketing: str = "ddp"
    first_bucket_bytes: int = 1 * MiB
    bucket_cap_bytes: int = 25 * MiB
    fusion_bytes: int = 64 * 10**6
    cycle_s: float = 5e-3
    overlap: bool = True
    grad_accum: int = 1
    speed: list = None
    channels: int = None
    optimizer_bytes_per_param: float = None
    optimizer: str = "auto"
    precision: str = "amp"
    allreduce_bytes: int = None
    gradient_as_bucket_view: bool = False
    op_cpu_s: float = OP_CPU_S
    bucket_cpu_s: float = BUCKET_CPU_S
    switch: object = None

    def validate(self):
        """Check every parameter against its range.

        Raises
        ------
        ModelInputError
            (a ValueError) Naming the parameter, its range and why: ``n_gpus`` in [1,
            :data:`~sim.gpu.presets.MAX_GPUS`]; ``nodes`` at least 1 (its upper bound, what
            the node's network holds, and ``n_gpus`` per node are checked by
            :meth:`validate_for`, which knows the node); ``algo`` one of the node's algorithms
            or, across nodes, ring, tree or sharp; the bucket sizes whole bytes in [1,
            :data:`~sim.gpu.presets.MAX_BYTES`]; ``cycle_s`` in (0, 1000]; ``grad_accum`` at
            least 1; one speed factor per GPU, each finite in [:data:`MIN_SPEED`,
            :data:`MAX_SPEED`]; ``channels`` at least 1; ``optimizer_bytes_per_param``
            finite in [0, 1000].
        """
        check_count("n_gpus", self.n_gpus, 1, MAX_GPUS, f"one switch of {MAX_GPUS} ports as an "
                    f"NVSwitch gen3, each GPU on a port of its own")
        check_count("nodes", self.nodes, 1, None, "nodes of n_gpus GPUs each")
        if self.nodes > 1:
            if self.algo not in MULTINODE_ALGORITHMS:
                raise ModelInputError(f"algo across nodes must be one of "
                                      f"{', '.join(MULTINODE_ALGORITHMS)}, not {self.algo!r}")
            if self.channels is not None:
                raise ModelInputError("channels applies to one node only (NCCL sets the "
                                      "multi-node channels from the NICs)")
        elif self.algo not in ALGORITHMS:
            raise ModelInputError(f"algo must be one of {', '.join(ALGORITHMS)}, "
                                  f"not {self.algo!r}")
        if self.bucketing not in ("ddp", "horovod"):
            raise ModelInputError(f"bucketing must be ddp or horovod, not {self.bucketing!r}")
        for name in ("first_bucket_bytes", "bucket_cap_bytes", "fusion_bytes"):
            check_count(name, getattr(self, name), 1, MAX_BYTES, "whole bytes, at most 2^50")
        check_real("cycle_s", self.cycle_s, 0, 1000.0, "seconds")
        if self.cycle_s == 0:
            raise ModelInputError("cycle_s must be positive, not 0")
        if not isinstance(self.overlap, bool):
            raise ModelInputError(f"overlap must be True or False, not {self.overlap!r}")
        check_count("grad_accum", self.grad_accum, 1, MAX_KERNELS // 2,
                    "micro-batches per all-reduce")
        if self.speed is not None:
            if len(self.speed) != self.ranks:
                raise ModelInputError(f"speed has {len(self.speed)} factors for {self.ranks} "
                                      f"GPUs")
            for g, factor in enumerate(self.speed):
                check_real(f"the speed factor of GPU {g}", factor, MIN_SPEED, MAX_SPEED,
                           f"a GPU at most {MAX_SPEED:g} times slower or faster than nominal")
        if self.channels is not None:
            check_count("channels", self.channels, 1, None, "SMs of the collective kernels")
        if self.optimizer_bytes_per_param is not None:
            check_real("optimizer_bytes_per_param", self.optimizer_bytes_per_param, 0, 1000.0)
        if self.optimizer not in OPTIMIZER_BYTES and self.optimizer != "auto":
            raise ModelInputError(f"optimizer must be auto, {', '.join(OPTIMIZER_BYTES)}, "
                                  f"not {self.optimizer!r}")
        if self.precision not in PRECISIONS:
            raise ModelInputError(f"precision must be one of {', '.join(PRECISIONS)}, "
                                  f"not {self.precision!r}")
        if self.allreduce_bytes is not None and self.allreduce_bytes not in (2, 4):
            raise ModelInputError(f"allreduce_bytes must be 2 or 4, not "
                                  f"{self.allreduce_bytes!r}")
        if not isinstance(self.gradient_as_bucket_view, bool):
            raise ModelInputError(f"gradient_as_bucket_view must be True or False, not "
                                  f"{self.gradient_as_bucket_view!r}")
        check_real("op_cpu_s", self.op_cpu_s, 0, 1.0, "seconds per operator")
        check_real("bucket_cpu_s", self.bucket_cpu_s, 0, 1.0, "seconds per bucket")

    @property
    def ranks(self):
        """GPUs taking part: ``n_gpus`` per node times ``nodes``."""
        return self.n_gpus * self.nodes

    def node_for(self, gpu):
        """The node of a multi-node run: ``node``, or the preset whose GPU is ``gpu``.

        Raises
        ------
        ModelInputError
            For a GPU no node preset holds."""
        if self.node is not None:
            return self.node
        for key, node in sorted(NODE_PRESETS.items()):
            if node.gpu_preset == gpu:
                return node
        names = sorted({n.gpu_preset.name for n in NODE_PRESETS.values()})
        raise ModelInputError(f"no multi-node preset holds {gpu.name}; nodes > 1 needs one "
                              f"of {', '.join(names)}")

    def comm_cost(self, gpu):
        """The cost function of this run's collectives, ``(nbytes, op) → CollectiveCost``: one
        NVLink domain of ``n_gpus`` (:func:`sim.gpu.collectives.collective_cost`), or for
        ``nodes`` > 1 the nodes' network (:func:`sim.gpu.multinode.multinode_cost`)."""
        if self.nodes > 1:
            node, nodes, per_node, algo = self.node_for(gpu), self.nodes, self.n_gpus, self.algo
            return lambda nbytes, op: multinode_cost(node, nodes, per_node, nbytes, op, algo)
        n, algo, channels, switch = self.n_gpus, self.algo, self.channels, self.switch
        return lambda nbytes, op: collective_cost(gpu, n, nbytes, op, algo, channels,
                                                  switch=switch)

    def validate_for(self, workload, gpu):
        """:meth:`validate`, then what depends on the workload and the GPU.

        Raises
        ------
        ModelInputError
            Also for ``channels`` above the GPU's SMs; gradients (all of them live on every
            GPU) or one layer's activations larger than the GPU's HBM; or more than
            :data:`MAX_KERNELS` compute kernels to simulate (per micro-batch a forward and a
            backward kernel per layer, for every GPU class of one speed factor).
        """
        self.validate()
        if self.nodes > 1:
            node = self.node_for(gpu)
            if node.gpu_preset != gpu:
                raise ModelInputError(f"the node {node.name} holds {node.gpu_preset.name}, "
                                      f"not {gpu.name}")
            check_count("n_gpus", self.n_gpus, 1, node.gpus,
                        f"GPUs per node: a {node.name} has {node.gpus}")
            check_count("nodes", self.nodes, 2, node.max_nodes,
                        f"a two-level fabric of {node.fabric.radix}-port switches holds "
                        f"{node.fabric.end_ports} NIC ports, {node.nics} per {node.name}")
        if self.channels is not None:
            check_count("channels", self.channels, 1, gpu.sms,
                        f"a channel is one CTA on an SM of its own; {gpu.name} has {gpu.sms} "
                        f"SMs")
        if workload.gradient_bytes > gpu.hbm_bytes:
            raise ModelInputError(
                f"{workload.name}'s gradients, {workload.gradient_bytes} bytes, do not fit in "
                f"the HBM of one {gpu.name}, {gpu.hbm_bytes} bytes (data parallelism keeps all "
                f"of them on every GPU)")
        biggest = max(workload.layers, key=lambda layer: layer.activation_bytes, default=None)
        if biggest is not None and biggest.activation_bytes > gpu.hbm_bytes:
            raise ModelInputError(
                f"layer {biggest.name} of {workload.name} outputs {biggest.activation_bytes} "
                f"bytes of activations, more than the HBM of one {gpu.name}, {gpu.hbm_bytes} "
                f"bytes: use a smaller batch or sequence")
        classes = len(set(self.speed)) if self.speed is not None else 1
        kernels = (2 * len(workload.layers) * self.grad_accum + 1) * classes
        if kernels > MAX_KERNELS:
            raise ModelInputError(
                f"the iteration has {kernels} compute kernels to simulate ({len(workload.layers)}"
                f" layers x 2 x {self.grad_accum} micro-batches + the optimizer, x {classes} "
                f"speed factors); at most {MAX_KERNELS} (about half a minute)")


def grad_element_bytes(workload, config):
    """Bytes per gradient element DDP buckets and all-reduces."""
    if config.allreduce_bytes is not None:
        return config.allreduce_bytes
    return PRECISIONS[config.precision][0]


def resolved_optimizer(workload, config):
    """``sgd`` or ``adam``: ``auto`` picks SGD-momentum for a CNN, Adam otherwise."""
    if config.optimizer != "auto":
        return config.optimizer
    return "sgd" if any(layer.kind == "conv" for layer in workload.layers) else "adam"


def optimizer_bytes(workload, config):
    """HBM bytes per parameter of the optimizer step (the override, or the optimizer's own
    traffic plus the master-weight traffic of the precision)."""
    if config.optimizer_bytes_per_param is not None:
        return config.optimizer_bytes_per_param
    return OPTIMIZER_BYTES[resolved_optimizer(workload, config)] + \
        PRECISIONS[config.precision][1]


def overhead_kernels(workload, config, bucket):
    """The memory-bound kernels DDP and the mixed-precision scaler add, as
    ``(name, KernelSpec, phase)``: per ``bucket`` (or, for ``bucket=None``, once after the
    last all-reduce).

    Per bucket, before its all-reduce (torch DDP ``reducer.cpp``): without
    ``gradient_as_bucket_view`` the gradients are copied into the bucket (read + write), and
    the bucket is divided by the world size (read + write). After the last all-reduce: without
    ``gradient_as_bucket_view`` the bucket is copied back into the ``.grad`` tensors (read +
    write); with a scaler, the unscale pass."""
    kernels = []
    elem = grad_element_bytes(workload, config)
    if bucket is not None:
        if config.ranks > 1:
            copy = 0 if config.gradient_as_bucket_view else 2 * bucket.nbytes
            kernels.append((f"ddp:bucket{bucket.index}", KernelSpec(
                f"ddp bucket {bucket.index}", bucket.nbytes / elem, copy + 2 * bucket.nbytes,
                False), "ddp"))
        return kernels
    if config.ranks > 1 and not config.gradient_as_bucket_view:
        kernels.append(("ddp:copy_back", KernelSpec("ddp copy back", 0.0,
                                                    2.0 * workload.params * elem, False),
                        "ddp"))
    unscale = PRECISIONS[config.precision][2]
    if unscale:
        kernels.append(("amp:unscale", KernelSpec("amp unscale", 2.0 * workload.params,
                                                  unscale * workload.params, False), "amp"))
    return kernels


@dataclass
class Bucket:
    """A gradient bucket: the layers (indices, backward order) whose gradients it holds."""

    index: int
    layers: list
    nbytes: int


def make_buckets(workload, config):
    """Gradient buckets in gradient-ready order (reverse layer order).

    DDP: the first closes at ``first_bucket_bytes``, the rest at ``bucket_cap_bytes``; a tensor
    larger than the cap gets a bucket of its own (DDP never splits a tensor). Horovod: fusion
    buffers of up to ``fusion_bytes`` (the launch waits for the next fusion cycle, see
    :func:`simulate_iteration`)."""
    buckets, current, size = [], [], 0
    horovod = config.bucketing == "horovod"
    cap = config.fusion_bytes if horovod else config.first_bucket_bytes
    for index in reversed(range(len(workload.layers))):
        layer = workload.layers[index]
        if layer.params == 0:
            continue
        nbytes = layer.params * grad_element_bytes(workload, config)
        if current and size + nbytes > cap:
            buckets.append(Bucket(len(buckets), current, size))
            current, size = [], 0
            cap = config.fusion_bytes if horovod else config.bucket_cap_bytes
        current.append(index)
        size += nbytes
    if current:
        buckets.append(Bucket(len(buckets), current, size))
    return buckets


@dataclass
class IterationResult:
    """Times in seconds. ``timeline`` lists ``(gpu_class, stream, name, start, end, tag,
    hbm_bytes)``: ``tag`` is the phase of a compute kernel or the index of a collective;
    ``classes`` maps each speed factor to its GPUs; ``engine_ops`` counts the engine's work
    (events, compute-stream updates, heap operations), for complexity tests; ``framework``
    what the framework adds (:func:`framework_costs`)."""

    n_gpus: int
    algo: str
    forward_s: float
    backward_alone_s: float
    backward_s: float
    backprop_slowdown: float
    slowdown_attribution: dict
    allreduce_s: float
    allreduce_alone_s: float
    exposed_comm_s: float
    optimizer_s: float
    iteration_s: float
    buckets: int
    bucket_bytes: list
    link_utilization: float
    timeline: list = field(default_factory=list)
    classes: dict = field(default_factory=dict)
    comm_sms: list = field(default_factory=list)
    engine_ops: dict = field(default_factory=dict)
    framework: dict = field(default_factory=dict)

    def summary(self):
        return {k: v for k, v in self.__dict__.items()
                if k not in ("timeline", "comm_sms", "engine_ops")}


class _Class:
    """The GPUs sharing one speed factor: their compute stream, and what it has done so far
    (times in seconds of simulated time).

    The stream's progress is brought up to date lazily: ``progress`` is the fraction of the
    current kernel done at time ``t0``, and the kernel has run at ``rates`` since."""

    __slots__ = ("bwd_alone_s", "bwd_end", "bwd_start", "comm", "comm_pos", "comm_ver", "compute",
                 "done_at", "extra", "fwd_end", "gap_end", "gpus", "kernel_start", "opt_end",
                 "opt_start", "pos", "prev_phase", "progress", "queue_end", "rates", "speed", "t0",
                 "ver")

    def __init__(self, speed, gpus, queue):
        self.speed = speed
        self.gpus = gpus
        self.compute = list(queue)   # (name, KernelSpec, phase); the optimizer is appended
        self.pos = 0                 # the current compute kernel
        self.progress = 0.0          # fraction of the current compute kernel done at t0
        self.t0 = 0.0
        self.rates = None            # (rate, alone_s, sm_s, hbm_s, l2_s) since t0
        self.gap_end = None          # end of the launch gap before the current kernel, if in one
        self.kernel_start = None
        self.ver = 0                 # version of the stream's event in the event heap
        self.comm = None             # its rate for the streaming collective (fraction per s)
        self.comm_ver = 0            # version of that rate in the slowest-member heap
        self.comm_pos = 0            # next collective to launch on this class
        self.extra = {"sm": 0.0, "hbm": 0.0, "l2": 0.0}   # backward time lost to each cause
        self.done_at = None
        # What the metrics are read from.
        self.fwd_end = None
        self.bwd_start = None        # the last backward pass (the one reported) ...
        self.bwd_end = None
        self.bwd_alone_s = 0.0       # ... and its length alone: kernels and launch gaps
        self.prev_phase = None
        self.queue_end = 0.0         # the last queued kernel (before the optimizer) ended
        self.opt_start = None
        self.opt_end = None


class _Collective:
    """One collective of ``launches``; they run one at a time on the communication stream."""

    __slots__ = ("after", "begin", "cost", "end", "index", "latency_end", "latency_left",
                 "launched", "name", "progress")

    def __init__(self, index, after, name, cost):
        self.index = index
        self.after = after           # the compute kernel after which a GPU launches it
        self.name = name
        self.cost = cost             # a CollectiveCost: alone, per GPU
        self.launched = set()        # classes that launched it (their SMs are held)
        self.latency_left = cost.latency_s   # 0 once the latency has passed
        self.latency_end = None      # when it passes, once every class has launched it
        self.progress = 0.0          # fraction streamed (at _Streams.coll_t0)
        self.begin = None            # every class has launched it and the stream is free
        self.end = None


def simulate_iteration(workload, gpu, config=None, record=True):
    """Simulate one iteration; returns an :class:`IterationResult`."""
    config = config or IterationConfig()
    config.validate_for(workload, gpu)
    buckets = make_buckets(workload, config)

    queue, launches, final = _kernel_queue(workload, config, buckets)
    issue = _issue_times(queue, config, len(buckets))
    result = simulate_streams(gpu, config.ranks, queue, launches, algo=config.algo,
                              speed=config.speed, channels=config.channels,
                              cost=config.comm_cost(gpu),
                              overlap=config.overlap, final=final, record=record,
                              cycle_s=config.cycle_s if config.bucketing == "horovod" else None,
                              issue_s=issue)
    result.buckets = len(buckets)
    result.bucket_bytes = [b.nbytes for b in buckets]
    result.framework = framework_costs(workload, gpu, config, queue, final, issue)
    return result


def _layer_kernel(layer, phase, precision):
    """A layer's forward or backward kernel; under ``fp32`` on the FP32 pipes with 4-byte
    activations (the workloads count 2)."""
    flops = layer.fwd_flops if phase == "fwd" else layer.bwd_flops
    nbytes = layer.fwd_bytes if phase == "fwd" else layer.bwd_bytes
    tensor_core = layer.tensor_core
    if precision == "fp32":
        nbytes, tensor_core = 2 * nbytes, False
    return (f"{phase}:{layer.name}", KernelSpec(layer.name, flops, nbytes, tensor_core,
                                                layer.kind == "conv"), phase)


def _kernel_queue(workload, config, buckets):
    """The compute stream of one GPU: forward and backward per micro-batch; in the last
    backward each bucket's DDP kernels right after its last gradient (its all-reduce launches
    after them); then, as the ``final`` kernel after the last all-reduce, the copy-back, the
    unscale pass and the optimizer step (memory-bound kernels run back to back: one kernel of
    their summed work). Returns ``(queue, launches, final)``."""
    layers = workload.layers
    closes = {max(b.layers): b for b in buckets} if config.ranks > 1 else {}
    queue, launches = [], []
    for micro in range(config.grad_accum):
        last_micro = micro == config.grad_accum - 1
        for layer in layers:
            queue.append(_layer_kernel(layer, "fwd", config.precision))
        for i in reversed(range(len(layers))):
            queue.append(_layer_kernel(layers[i], "bwd", config.precision))
            bucket = closes.get(i) if last_micro else None
            if bucket is not None:
                queue.extend(overhead_kernels(workload, config, bucket))
                launches.append((len(queue) - 1, bucket.nbytes, f"allreduce:bucket{bucket.index}"))
    launches.sort(key=lambda launch: launch[0])
    post = overhead_kernels(workload, config, None)
    params = workload.params
    opt_bytes = params * optimizer_bytes(workload, config) + sum(k.hbm_bytes for _, k, _ in post)
    opt_flops = 10.0 * params + sum(k.flops for _, k, _ in post)
    final = ("optimizer", KernelSpec("optimizer", opt_flops, opt_bytes, False), "opt")
    return queue, launches, final


def framework_costs(workload, gpu, config, queue, final, issue):
    """What the framework adds, alone (seconds, no contention): DDP's bucket kernels, the
    final step (copy-back, unscale and optimizer), and the CPU's issue time for the
    iteration's kernels; with the choices that set them."""
    ddp = sum(kernel_time(gpu, spec) + KERNEL_GAP_S for _, spec, phase in queue
              if phase == "ddp")
    return {"optimizer": resolved_optimizer(workload, config), "precision": config.precision,
            "allreduce_bytes_per_element": grad_element_bytes(workload, config),
            "optimizer_bytes_per_param": optimizer_bytes(workload, config),
            "ddp_bucket_kernels_s": ddp, "final_step_alone_s": kernel_time(gpu, final[1]),
            "cpu_issue_s": issue[-1]}


def _issue_times(queue, config, n_buckets):
    """When the CPU has issued each kernel of ``queue`` and the final one (seconds from the
    start): one operator each (``op_cpu_s``), the DDP kernels a bucket's reducer work
    (``bucket_cpu_s``) each; the CPU runs ahead of the GPU (it never waits for it within an
    iteration). The final step issues the optimizer's foreach kernels (one operator per
    kernel it stands for)."""
    times, t = [], 0.0
    for _, _, phase in queue:
        times.append(t)
        t += config.bucket_cpu_s if phase == "ddp" else config.op_cpu_s
    times.append(t)
    return times


def simulate_streams(gpu, n, queue, launches, *, algo="ring", speed=None, channels=None,
                     overlap=True, final=None, record=True, op="allreduce", cycle_s=None,
                     issue_s=None, cost=None):
    """The simulation core: every GPU runs ``queue`` on its compute stream; collective ``b`` of
    ``launches`` (``(after_index, nbytes, name)``) is launched on a GPU's communication stream
    once compute kernel ``after_index`` has finished there (or, without ``overlap``, once the
    whole queue has), in order; ``final`` runs after the last collective completes. With
    ``cycle_s`` (Horovod), a ready collective launches at the next multiple of ``cycle_s``.
    ``issue_s`` (one per kernel of ``queue``, then one for ``final``) is when the CPU has
    issued each kernel: none starts before. ``cost`` (``(nbytes, op) → CollectiveCost``)
    times the collectives; default one NVLink domain of ``n`` GPUs
    (:func:`sim.gpu.collectives.collective_cost` with ``algo`` and ``channels``);
    :meth:`IterationConfig.comm_cost` gives the multi-node one.

    Returns an :class:`IterationResult` (``buckets``/``bucket_bytes`` left empty).
    """
    streams = _Streams(gpu, n, queue, launches, algo=algo, speed=speed, channels=channels,
                       overlap=overlap, final=final, record=record, op=op, cycle_s=cycle_s,
                       issue_s=issue_s, cost=cost)
    streams.run()
    return streams.result()


_MAX_STEPS = 50_000_000

# What an entry of the event heap is about: a class's compute stream (a launch gap or a kernel
# ends), the collective on the stream (its latency or transfer ends), a fusion-cycle tick.
_STREAM, _COLL, _TICK = 0, 1, 2
#: phases of the backward pass: its layers' kernels and DDP's bucket kernels between them
_BACKWARD = ("bwd", "ddp")

# An event is due once what it waits for is within these of its end (as the stepping engine
# this replaced judged it): a kernel or transfer 1e-12 of a whole, a gap or latency 1e-15 s, a
# fusion tick 1e-12 s.
_FRACTION_EPS = 1e-12
_SECONDS_EPS = 1e-15
_TICK_EPS = 1e-12


class _Streams:
    """The event loop of :func:`simulate_streams`.

    Each step takes the events due next from a heap, retires what finished (compute streams in
    class order, then the collective), launches the collectives whose data is ready, starts
    the collective on the stream once every member has launched it, and gives a new rate to
    the streams whose rate changed. When nothing can progress, the classes whose collectives
    are all done start the optimizer (``final``), or the iteration is over.

    Cost. A class's compute stream is advanced lazily, from its own rate, only when that rate
    changes or its kernel ends; its next event waits in the heap. A collective streams at its
    slowest member's rate, kept in a second heap of the members' rates. So an event costs
    O(log K) for K classes, and the only steps that touch every class are the few each
    collective makes (it starts streaming, it ends): O((kernels + collectives) K log K) per
    iteration, not O(events × K). ``ops`` counts the work (the complexity test reads it).
    """

    def __init__(self, gpu, n, queue, launches, *, algo, speed, channels, overlap, final,
                 record, op, cycle_s, issue_s=None, cost=None):
        groups = {}
        for g, s in enumerate(speed or [1.0] * n):
            groups.setdefault(float(s), []).append(g)
        self.classes = [_Class(s, gpus, queue) for s, gpus in sorted(groups.items())]
        if cost is None:
            def cost(nbytes, op_):
                return collective_cost(gpu, n, nbytes, op_, algo, channels)
        self.colls = [_Collective(b, after, name, cost(nbytes, op))
                      for b, (after, nbytes, name) in enumerate(launches)]
        self.gpu = gpu
        self.n = n
        self.algo = algo
        self.overlap = overlap
        self.final = final
        self.record = record
        self.cycle_s = cycle_s
        self.queue_len = len(queue)
        self.issue_s = issue_s
        self.t = 0.0
        self.current = 0        # the collective on the stream; len(colls) once all are done
        self.ready_tick = {}    # (class, collective) -> time of the fusion cycle launching it
        self.timeline = []
        self.heap = []          # events: (due, end, kind, index, version); see _live
        self.streaming = False  # the current collective's latency has passed: it streams
        self.coll_rate = None   # its rate (fraction per second) since coll_t0, while streaming
        self.coll_t0 = 0.0
        self.coll_ver = 0
        self.slowest = []       # (rate, class, comm_ver): the members' rates, slowest first
        self.ops = {"events": 0, "stream_updates": 0, "heap_ops": 0}

    def run(self):
        """Run from event to event until every GPU is done.

        Raises
        ------
        RuntimeError
            On a deadlock (a GPU waits for a collective that cannot start), or after
            ``_MAX_STEPS`` steps.
        """
        everyone = range(len(self.classes))
        for c in self.classes:
            if c.compute:
                c.kernel_start = 0.0
        for ci in everyone:
            self._launch(ci, set())
        self._begin()
        self._update(everyone)
        for _ in range(_MAX_STEPS):
            due = self._next_due()
            if due is None:
                if self._start_optimizer():
                    continue
                self._check_finished()
                return
            self._step(due)
        raise RuntimeError("iteration simulation did not converge")

    # -- the event heap -------------------------------------------------------------------------

    def _push(self, due, end, kind, index, version):
        """Schedule an event ending at ``end`` and due (close enough to end) from ``due``."""
        heapq.heappush(self.heap, (due, end, kind, index, version))
        self.ops["heap_ops"] += 1

    def _live(self, entry):
        """Whether a heap entry still stands (later changes make earlier entries stale)."""
        _, _, kind, index, version = entry
        if kind == _STREAM:
            return self.classes[index].ver == version
        if kind == _COLL:
            return index == self.current and version == self.coll_ver
        return self.classes[index].comm_pos == version   # a tick for collective ``version``

    def _next_due(self):
        """Move to the next event; returns the entries due then (None: nothing can progress).

        The next event is the earliest end; everything within its tolerance of its own end is
        due too. An entry ending before the one due first is due no later than that end, so
        only the entries due by then need looking at."""
        heap, live, ops = self.heap, self._live, self.ops
        while heap and not live(heap[0]):
            heapq.heappop(heap)
            ops["heap_ops"] += 1
        if not heap:
            return None
        horizon = heap[0][1]
        popped = []
        while heap and heap[0][0] <= horizon:
            entry = heapq.heappop(heap)
            ops["heap_ops"] += 1
            if live(entry):
                popped.append(entry)
        t = min(entry[1] for entry in popped)
        due = []
        for entry in popped:
            if entry[0] <= t:
                due.append(entry)
            else:
                self._push(*entry)
        ops["events"] += 1
        self.t = t
        return due

    # -- the stages of a step -----------------------------------------------------------------

    def _step(self, due):
        """Handle the events due now: the compute streams (in class order), the collective,
        the fusion ticks; then launches, the start of the next collective, and new rates."""
        t = self.t
        classes = self.classes
        dirty, launch, coll_entry, streams = set(), set(), None, []
        for entry in due:
            if entry[2] == _STREAM:
                streams.append(entry)
            elif entry[2] == _COLL:
                coll_entry = entry
            else:
                launch.add(entry[3])
        streams.sort(key=lambda entry: entry[3])
        for _, end, _, ci, _ in streams:
            c = classes[ci]
            if c.gap_end is not None:
                if c.gap_end - t <= _SECONDS_EPS:     # the launch gap is over: the kernel runs
                    c.gap_end = None
                    c.kernel_start = t
                    c.t0 = t
                    dirty.add(ci)
                else:
                    self._schedule(ci)
                continue
            self._advance(c)
            if end <= t or c.progress >= 1.0 - _FRACTION_EPS:
                self._retire_kernel(ci, c)
                dirty.add(ci)
                launch.add(ci)
            else:
                self._schedule(ci)
        everyone = False
        if coll_entry is not None:
            everyone = self._collective_event(coll_entry[1])
        for ci in sorted(launch):
            self._launch(ci, dirty)
        everyone = self._begin() or everyone
        self._update(range(len(classes)) if everyone else dirty)

    def _collective_event(self, end):
        """The collective on the stream passed its latency or streamed its last byte (its
        event ``end`` is now, or near enough). Returns whether every class's rates change."""
        t = self.t
        coll = self.colls[self.current]
        if not self.streaming:
            if end <= t or coll.latency_end - t <= _SECONDS_EPS:
                coll.latency_left = 0.0
                self.streaming = True
                self.slowest = []
                return True
            self._schedule_collective()
            return False
        self._advance_collective()
        if end <= t or coll.progress >= 1.0 - _FRACTION_EPS:
            self._retire_collective(coll)
            return True
        self._schedule_collective()
        return False

    def _launchable(self, ci, b):
        """Whether class ``ci`` launches collective ``b`` now (its data is ready and, with
        Horovod's fusion cycle, the cycle has ticked). The first time the data is ready, a
        fusion tick still to come is scheduled."""
        after = self.colls[b].after if self.overlap else self.queue_len - 1
        if self.classes[ci].pos <= after:
            return False
        if self.cycle_s is None:
            return True
        tick = self.ready_tick.get((ci, b))
        if tick is None:
            tick = self.ready_tick[(ci, b)] = \
                math.ceil(self.t / self.cycle_s - 1e-9) * self.cycle_s
            if self.t < tick - _TICK_EPS:
                self._push(tick - _TICK_EPS, tick, _TICK, ci, b)
        return self.t >= tick - _TICK_EPS

    def _launch(self, ci, dirty):
        """Launch class ``ci``'s collectives whose data is ready (in order, one stream per
        GPU); ``dirty`` gains the class if it launched the collective on the stream."""
        c, colls = self.classes[ci], self.colls
        while c.comm_pos < len(colls) and self._launchable(ci, c.comm_pos):
            colls[c.comm_pos].launched.add(ci)
            if c.comm_pos == self.current:
                dirty.add(ci)
            c.comm_pos += 1

    def _begin(self):
        """Once every class has launched the collective on the stream, it begins: its latency,
        then its transfer. Returns whether it streams at once (every class's rates change)."""
        if self.current == len(self.colls):
            return False
        coll = self.colls[self.current]
        if coll.begin is not None or len(coll.launched) < len(self.classes):
            return False
        coll.begin = self.t
        if coll.latency_left <= 0:
            self.streaming = True
            self.slowest = []
            return True
        coll.latency_end = self.t + coll.latency_left
        self._schedule_collective()
        return False

    def _rates(self, ci, c, coll):
        """Class ``ci``'s rates from what runs on its GPU now.

        Returns ``(rates, comm)``: ``rates`` is ``None`` (no kernel running) or
        ``(rate, alone_s, sm_s, hbm_s, l2_s)`` — the fraction of the kernel done per second,
        its time alone, and its time slowed by the collective's SMs, HBM traffic or L2
        pollution only (for the attribution); ``comm`` is the fraction of the streaming collective this GPU could
        stream per second (None while it does not stream).
        """
        gpu = self.gpu
        kernel = None
        if c.pos < len(c.compute) and c.gap_end is None:
            kernel = c.compute[c.pos][1]
        holds = coll is not None and ci in coll.launched
        streaming = holds and self.streaming
        if kernel is None:
            if not streaming:
                return None, None
            comm_s = rates_during(gpu, None, coll.cost).comm_s
            return None, (1.0 / comm_s if comm_s else math.inf)
        alone = kernel_time(gpu, kernel) / c.speed
        if streaming:
            r = rates_during(gpu, kernel, coll.cost)
            comp_s = r.compute_s / c.speed
            # single-mechanism times for attribution
            return ((1.0 / comp_s if comp_s else math.inf, alone, r.sm_s / c.speed,
                     r.hbm_s / c.speed, r.l2_s / c.speed),
                    1.0 / r.comm_s if r.comm_s else math.inf)
        if holds:
            # launched and spinning, waiting for its peers: it holds its SMs, moves no bytes
            share = sm_share_during(gpu, coll.cost, kernel)
            comp_s = kernel_time(gpu, kernel, share) / c.speed
            return (1.0 / comp_s if comp_s else math.inf, alone, comp_s, alone, alone), None
        return (1.0 / alone if alone else math.inf, alone, alone, alone, alone), None

    def _update(self, cis):
        """New rates for classes ``cis`` (what runs on their GPUs changed); the streaming
        collective's rate follows its slowest member."""
        coll = self.colls[self.current] if self.current < len(self.colls) else None
        classes, ops = self.classes, self.ops
        for ci in cis:
            c = classes[ci]
            rates, comm = self._rates(ci, c, coll)
            ops["stream_updates"] += 1
            if rates != c.rates:
                self._advance(c)   # up to now at the old rate
                c.rates = rates
                if rates is not None:
                    self._schedule(ci)
            if comm is not None and comm != c.comm:
                c.comm_ver += 1
                heapq.heappush(self.slowest, (comm, ci, c.comm_ver))
                ops["heap_ops"] += 1
            c.comm = comm
        if self.streaming:
            slowest = self.slowest
            while slowest[0][2] != classes[slowest[0][1]].comm_ver:
                heapq.heappop(slowest)
                ops["heap_ops"] += 1
            rate = slowest[0][0]
            if rate != self.coll_rate:
                self._advance_collective()
                self.coll_rate = rate
                self._schedule_collective()

    def _advance(self, c):
        """Bring class ``c``'s kernel up to now at its rate since ``t0``, charging backward
        time lost to contention to its causes."""
        dt = self.t - c.t0
        c.t0 = self.t
        rates = c.rates
        if rates is None:
            return
        rate, alone, sm_s, hbm_s, l2_s = rates
        if rate == math.inf:
            c.progress = 1.0
            return
        if dt <= 0:
            return
        self.ops["stream_updates"] += 1
        c.progress += rate * dt
        if alone:
            actual_s = 1.0 / rate
            extra = dt * (1.0 - alone / actual_s) if actual_s > alone else 0.0
            if extra > 0 and c.compute[c.pos][2] in _BACKWARD:
                parts = {"sm": max(0.0, sm_s - alone), "hbm": max(0.0, hbm_s - alone),
                         "l2": max(0.0, l2_s - alone)}
                weight = sum(parts.values())
                for key, part in parts.items():
                    c.extra[key] += extra * (part / weight if weight else 1 / len(parts))

    def _schedule(self, ci):
        """Put class ``ci``'s next event (its gap or kernel ends) on the heap; its progress is
        up to date."""
        c = self.classes[ci]
        c.ver += 1
        if c.gap_end is not None:
            self._push(c.gap_end - _SECONDS_EPS, c.gap_end, _STREAM, ci, c.ver)
            return
        t, rate = self.t, c.rates[0]
        if rate == math.inf:
            self._push(t, t, _STREAM, ci, c.ver)
        else:
            self._push(t + (1.0 - _FRACTION_EPS - c.progress) / rate,
                       t + (1.0 - c.progress) / rate, _STREAM, ci, c.ver)

    def _advance_collective(self):
        """Bring the streaming collective's progress up to now."""
        coll = self.colls[self.current]
        rate, dt = self.coll_rate, self.t - self.coll_t0
        self.coll_t0 = self.t
        if rate is None:
            return
        if rate == math.inf:
            coll.progress += 1.0
        elif dt > 0:
            coll.progress += rate * dt

    def _schedule_collective(self):
        """Put the collective's next event (its latency or transfer ends) on the heap."""
        coll = self.colls[self.current]
        self.coll_ver += 1
        if not self.streaming:
            end = coll.latency_end
            self._push(end - _SECONDS_EPS, end, _COLL, self.current, self.coll_ver)
            return
        t, rate = self.t, self.coll_rate
        if rate == math.inf:
            self._push(t, t, _COLL, self.current, self.coll_ver)
        else:
            self._push(t + (1.0 - _FRACTION_EPS - coll.progress) / rate,
                       t + (1.0 - coll.progress) / rate, _COLL, self.current, self.coll_ver)

    def _start_optimizer(self):
        """With nothing able to progress: a class whose queue is done and whose collectives
        are all done starts ``final`` (or, without one, is done). Returns whether any did."""
        if self.current < len(self.colls):
            return False
        progressed = False
        for ci, c in enumerate(self.classes):
            if c.pos == len(c.compute) and c.done_at is None:
                if self.final is None:
                    c.done_at = self.t
                    progressed = True
                elif len(c.compute) == self.queue_len:
                    c.compute.append(self.final)
                    c.opt_start = self.t
                    c.gap_end = self._gap_end(self.t, self.queue_len)
                    c.kernel_start = None
                    self._schedule(ci)
                    progressed = True
        return progressed

    def _check_finished(self):
        """Nothing can progress and nothing starts: every class is done, or it is a deadlock."""
        if all(c.done_at is not None for c in self.classes):
            return
        if any(c.pos == len(c.compute) and c.done_at is None for c in self.classes) and \
                self.current < len(self.colls):
            raise RuntimeError("deadlock: a collective cannot start")

    def _retire_kernel(self, ci, c):
        """Class ``ci``'s compute kernel finished: note what the metrics need; a launch gap
        precedes its next kernel."""
        t = self.t
        name, spec, phase = c.compute[c.pos]
        if self.record:
            self.timeline.append((ci, "compute", name, c.kernel_start, t, phase,
                                  spec.hbm_bytes))
        if phase in _BACKWARD:
            alone_s = kernel_time(self.gpu, spec) / c.speed
            if c.bwd_start is None or c.prev_phase not in _BACKWARD:
                # a new backward pass (the last one is the one reported)
                c.bwd_start = c.kernel_start
                c.bwd_alone_s = alone_s
            else:
                c.bwd_alone_s += KERNEL_GAP_S + alone_s
            c.bwd_end = t
        c.prev_phase = phase
        if phase == "fwd":
            c.fwd_end = t
        if c.pos == self.queue_len - 1:
            c.queue_end = t
        if phase == "opt":
            c.opt_end = t
            c.done_at = t
        c.pos += 1
        c.progress = 0.0
        c.kernel_start = None
        c.rates = None
        if c.pos < len(c.compute):
            c.gap_end = self._gap_end(t, c.pos)
            self._schedule(ci)

    def _gap_end(self, t, pos):
        """When kernel ``pos`` may start after the stream's previous kernel ended at ``t``: a
        launch gap later, and not before the CPU has issued it."""
        end = t + KERNEL_GAP_S
        if self.issue_s is not None:
            end = max(end, self.issue_s[pos])
        return end

    def _retire_collective(self, coll):
        """The collective on the stream finished: the next one may take the stream."""
        coll.end = self.t
        if self.record:
            for ci in range(len(self.classes)):
                self.timeline.append((ci, "comm", coll.name, coll.begin, self.t, coll.index,
                                      coll.cost.hbm_bytes))
        self.current += 1
        self.streaming = False
        self.coll_rate = None
        self.slowest = []
        for c in self.classes:
            c.comm = None

    # -- the metrics ----------------------------------------------------------------------------

    def result(self):
        """The :class:`IterationResult`, read from the slowest class (the iteration ends when
        every GPU is done)."""
        gpu, classes, colls = self.gpu, self.classes, self.colls
        iteration = max(c.done_at for c in classes)
        c = max(classes, key=lambda c: c.done_at)
        bwd_alone = c.bwd_alone_s
        bwd_actual = (c.bwd_end - c.bwd_start) if c.bwd_start is not None else 0.0
        slowdown = bwd_actual / bwd_alone - 1 if bwd_alone else 0.0
        total_extra = sum(c.extra.values())
        attribution = {k: (slowdown * v / total_extra if total_extra else 0.0)
                       for k, v in c.extra.items()}
        attribution["link"] = 0.0
        # Exposed communication: the compute stream idles between its last queued kernel and
        # the optimizer (or the end), waiting for collectives.
        exposed_s = max(0.0, (c.opt_start if c.opt_start is not None else c.done_at) -
                        c.queue_end)
        allreduce = sum((x.end - x.begin) for x in colls if x.end is not None)
        alone_comm = sum(x.cost.time_s for x in colls)
        return IterationResult(
            n_gpus=self.n, algo=self.algo,
            forward_s=c.fwd_end or 0.0,
            backward_alone_s=bwd_alone, backward_s=bwd_actual,
            backprop_slowdown=slowdown, slowdown_attribution=attribution,
            allreduce_s=allreduce, allreduce_alone_s=alone_comm,
            exposed_comm_s=exposed_s,
            optimizer_s=(c.opt_end - c.opt_start) if c.opt_start else 0.0,
            iteration_s=iteration, buckets=0, bucket_bytes=[],
            link_utilization=(sum(x.cost.link_bytes for x in colls) /
                              (gpu.link_effective_gbps * 1e9 * iteration)) if iteration else 0.0,
            timeline=self.timeline,
            classes={str(cl.speed): list(cl.gpus) for cl in classes},
            comm_sms=[x.cost.sms for x in colls],
            engine_ops=dict(self.ops),
        )
