"""One data-parallel training iteration on N GPUs: forward, backward in reverse layer order,
gradient buckets all-reduced on a communication stream as they become ready, optimizer step
after the last bucket.

The simulation is event driven with piecewise-constant rates. Between two events every running
kernel progresses at a rate set by :mod:`sim.contention` from what else runs on its GPU: a
compute kernel slows while a collective holds SMs and HBM bandwidth; a collective streams at
the rate of its slowest member GPU (ring and tree are lock-step; the switch waits for every
contribution). A collective kernel that has launched but waits for its peers already holds its
SMs (NCCL kernels spin), which is how a straggler slows everyone else's backprop.

GPUs with the same speed factor behave identically (the collectives are symmetric), so they
are simulated once per distinct speed factor: the cost grows with the number of distinct
speeds, not with N.
"""

import math
from dataclasses import dataclass, field

from sim.gpu.collectives import collective_cost
from sim.gpu.contention import KERNEL_GAP_S, KernelSpec, kernel_time, rates_during, sm_share_during

__all__ = ["IterationConfig", "Bucket", "make_buckets", "simulate_iteration", "simulate_streams",
           "IterationResult"]

MiB = 1 << 20


@dataclass
class IterationConfig:
    """Parameters of a data-parallel iteration.

    Attributes
    ----------
    n_gpus : int
    algo : str
        ``ring``, ``tree``, ``direct`` or ``inswitch``.
    bucketing : str
        ``ddp`` (first bucket ``first_bucket_bytes``, then ``bucket_cap_bytes``) or ``horovod``
        (tensor fusion: ready gradients fused up to ``fusion_bytes`` every ``cycle_s``).
    overlap : bool
        Launch each bucket's all-reduce as soon as it is ready (True) or after backward (False).
    grad_accum : int
        All-reduce every ``grad_accum`` micro-batches (DDP ``no_sync`` on the others).
    speed : list of float, optional
        Per-GPU compute speed factors (1.0 nominal, 0.8 = a straggler 25 % slower).
    channels : int, optional
        Override the collective's channel (SM) count.
    optimizer_bytes_per_param : float
        HBM bytes the optimizer step moves per parameter (Adam, mixed precision: 16).
    """

    n_gpus: int = 8
    algo: str = "ring"
    bucketing: str = "ddp"
    first_bucket_bytes: int = 1 * MiB
    bucket_cap_bytes: int = 25 * MiB
    fusion_bytes: int = 64 * 10**6
    cycle_s: float = 5e-3
    overlap: bool = True
    grad_accum: int = 1
    speed: list = None
    channels: int = None
    optimizer_bytes_per_param: float = 16.0

    def validate(self):
        if self.n_gpus < 1:
            raise ValueError(f"n_gpus must be at least 1, not {self.n_gpus}")
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum must be at least 1, not {self.grad_accum}")
        if self.bucketing not in ("ddp", "horovod"):
            raise ValueError(f"bucketing must be ddp or horovod, not {self.bucketing!r}")
        if self.bucket_cap_bytes <= 0 or self.first_bucket_bytes <= 0:
            raise ValueError("bucket sizes must be positive")
        if self.speed is not None:
            if len(self.speed) != self.n_gpus:
                raise ValueError(f"speed has {len(self.speed)} factors for {self.n_gpus} GPUs")
            if any(s <= 0 for s in self.speed):
                raise ValueError("speed factors must be positive")


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
        nbytes = layer.params * workload.grad_bytes
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
    ``classes`` maps each speed factor to its GPUs."""

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

    def summary(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("timeline", "comm_sms")}


class _Class:
    """The GPUs sharing one speed factor."""

    def __init__(self, speed, gpus):
        self.speed = speed
        self.gpus = gpus
        self.compute = []        # queue of (name, KernelSpec, phase)
        self.pos = 0
        self.progress = 0.0      # fraction of the current compute kernel done
        self.gap = 0.0           # remaining launch gap before the current kernel
        self.kernel_start = None
        self.comm_pos = 0        # next collective to launch on this class
        self.extra = {"sm": 0.0, "hbm": 0.0}
        self.done_at = None


def simulate_iteration(workload, gpu, config=None, record=True):
    """Simulate one iteration; returns an :class:`IterationResult`."""
    config = config or IterationConfig()
    config.validate()
    layers = workload.layers
    buckets = make_buckets(workload, config)

    # Kernel queue per GPU: (name, spec, phase)
    queue, bwd_position = [], {}
    for micro in range(config.grad_accum):
        last_micro = micro == config.grad_accum - 1
        for layer in layers:
            queue.append((f"fwd:{layer.name}", KernelSpec(layer.name, layer.fwd_flops,
                                                           layer.fwd_bytes, layer.tensor_core,
                                                           layer.kind == "conv"), "fwd"))
        for i in reversed(range(len(layers))):
            layer = layers[i]
            if last_micro:
                bwd_position[i] = len(queue)
            queue.append((f"bwd:{layer.name}", KernelSpec(layer.name, layer.bwd_flops,
                                                           layer.bwd_bytes, layer.tensor_core,
                                                           layer.kind == "conv"), "bwd"))
    optimizer = ("optimizer", KernelSpec("optimizer", 10.0 * workload.params,
                                         workload.params * config.optimizer_bytes_per_param,
                                         False), "opt")
    launches = [(max(bwd_position[i] for i in b.layers), b.nbytes, f"allreduce:bucket{b.index}")
                for b in buckets] if config.n_gpus > 1 else []
    result = simulate_streams(gpu, config.n_gpus, queue, launches, algo=config.algo,
                              speed=config.speed, channels=config.channels,
                              overlap=config.overlap, final=optimizer, record=record,
                              cycle_s=config.cycle_s if config.bucketing == "horovod" else None)
    result.buckets = len(buckets)
    result.bucket_bytes = [b.nbytes for b in buckets]
    return result


def simulate_streams(gpu, n, queue, launches, *, algo="ring", speed=None, channels=None,
                     overlap=True, final=None, record=True, op="allreduce", cycle_s=None):
    """The simulation core: every GPU runs ``queue`` on its compute stream; collective ``b`` of
    ``launches`` (``(after_index, nbytes, name)``) is launched on a GPU's communication stream
    once compute kernel ``after_index`` has finished there (or, without ``overlap``, once the
    whole queue has), in order; ``final`` runs after the last collective completes. With
    ``cycle_s`` (Horovod), a ready collective launches at the next multiple of ``cycle_s``.

    Returns an :class:`IterationResult` (``buckets``/``bucket_bytes`` left empty).
    """
    speeds = speed or [1.0] * n
    groups = {}
    for g, s in enumerate(speeds):
        groups.setdefault(float(s), []).append(g)
    classes = [_Class(s, gpus) for s, gpus in sorted(groups.items())]
    for c in classes:
        c.compute = list(queue)

    comm_costs = [collective_cost(gpu, n, nbytes, op, algo, channels)
                  for _, nbytes, _ in launches]
    coll = [{"launched": set(), "latency_left": c.latency_s, "progress": 0.0, "start": None,
             "begin": None, "stream_start": None, "end": None} for c in comm_costs]
    timeline = []
    t = 0.0
    current_coll = 0   # collectives run one at a time on the communication stream
    bwd_span = {c: [None, None] for c in range(len(classes))}
    fwd_end = {c: None for c in range(len(classes))}
    opt_span = {c: [None, None] for c in range(len(classes))}
    queue_end = {c: 0.0 for c in range(len(classes))}
    prev_phase = {c: None for c in range(len(classes))}
    bwd_alone_acc = {c: 0.0 for c in range(len(classes))}
    queue_len = len(queue)

    ready_tick = {}   # (class, collective) -> time of the fusion cycle that launches it

    def launchable(ci, b):
        after = launches[b][0] if overlap else queue_len - 1
        if classes[ci].pos <= after:
            return False
        if cycle_s is None:
            return True
        if (ci, b) not in ready_tick:
            ready_tick[(ci, b)] = math.ceil(t / cycle_s - 1e-9) * cycle_s
        return t >= ready_tick[(ci, b)] - 1e-12

    guard = 0
    while True:
        guard += 1
        if guard > 50_000_000:
            raise RuntimeError("iteration simulation did not converge")
        # Launch collectives whose data is ready (in order, one stream per GPU).
        for ci, c in enumerate(classes):
            while c.comm_pos < len(coll) and launchable(ci, c.comm_pos):
                b = c.comm_pos
                coll[b]["launched"].add(ci)
                if coll[b]["start"] is None:
                    coll[b]["start"] = t
                c.comm_pos += 1
        active = None
        if current_coll < len(coll):
            active = current_coll

        # Rates on each class.
        all_launched = active is not None and len(coll[active]["launched"]) == len(classes)
        if all_launched and coll[active]["begin"] is None:
            coll[active]["begin"] = t   # every member has launched and the stream is free
        streaming = all_launched and coll[active]["latency_left"] <= 0
        comm_rates = []
        compute_rates = []
        for ci, c in enumerate(classes):
            kernel = None
            if c.pos < len(c.compute) and c.gap <= 0:
                kernel = c.compute[c.pos][1]
            holds = active is not None and ci in coll[active]["launched"]
            alone = kernel_time(gpu, kernel) / c.speed if kernel is not None else None
            if kernel is not None and holds and streaming:
                comp_s, comm_s, share, k_hbm, _ = rates_during(gpu, kernel, comm_costs[active])
                comp_s /= c.speed
                comm_rates.append(1.0 / comm_s if comm_s else float("inf"))
                # single-cause slowdowns for attribution
                sm_s = kernel_time(gpu, kernel, share) / c.speed
                hbm_s = kernel_time(gpu, kernel, 1.0, k_hbm) / c.speed if k_hbm else alone
                compute_rates.append((1.0 / comp_s if comp_s else float("inf"), alone,
                                      sm_s, hbm_s))
            elif kernel is not None and holds:
                share = sm_share_during(gpu, comm_costs[active].sms)
                comp_s = kernel_time(gpu, kernel, share) / c.speed
                compute_rates.append((1.0 / comp_s if comp_s else float("inf"), alone, comp_s,
                                      alone))
                if streaming:
                    comm_rates.append(float("inf"))
            else:
                if kernel is not None:
                    compute_rates.append((1.0 / alone if alone else float("inf"), alone, alone,
                                          alone))
                else:
                    compute_rates.append(None)
                if holds and streaming:
                    _, comm_s, _, _, _ = rates_during(gpu, None, comm_costs[active])
                    comm_rates.append(1.0 / comm_s if comm_s else float("inf"))
        coll_rate = min(comm_rates) if streaming and comm_rates else 0.0

        # Next event.
        dt = float("inf")
        for (ci, b), tick in ready_tick.items():
            if tick > t and classes[ci].comm_pos == b:
                dt = min(dt, tick - t)
        for ci, c in enumerate(classes):
            if c.gap > 0:
                dt = min(dt, c.gap)
            elif compute_rates[ci] is not None:
                rate = compute_rates[ci][0]
                dt = min(dt, (1.0 - c.progress) / rate if rate != float("inf") else 0.0)
        if active is not None and all_launched:
            if coll[active]["latency_left"] > 0:
                dt = min(dt, coll[active]["latency_left"])
            elif coll_rate > 0:
                dt = min(dt, (1.0 - coll[active]["progress"]) / coll_rate
                         if coll_rate != float("inf") else 0.0)
        if dt == float("inf"):
            # Nothing can progress: either done, or waiting for the optimizer precondition.
            progressed = False
            for ci, c in enumerate(classes):
                if c.pos == len(c.compute) and c.done_at is None:
                    if current_coll >= len(coll) and final is None:
                        c.done_at = t
                        progressed = True
                    elif current_coll >= len(coll) and len(c.compute) == queue_len:
                        c.compute.append(final)
                        opt_span[ci][0] = t
                        c.gap = KERNEL_GAP_S
                        c.kernel_start = None
                        progressed = True
            if not progressed:
                if all(c.done_at is not None for c in classes):
                    break
                if any(c.pos == len(c.compute) and c.done_at is None for c in classes) and \
                        current_coll < len(coll):
                    raise RuntimeError("deadlock: a collective cannot start")
                break
            continue

        # Advance.
        for ci, c in enumerate(classes):
            if c.gap > 0:
                c.gap -= dt
                continue
            rates = compute_rates[ci]
            if rates is None:
                continue
            rate, alone, sm_s, hbm_s = rates
            if c.kernel_start is None:
                c.kernel_start = t
            if rate != float("inf"):
                c.progress += rate * dt
            else:
                c.progress = 1.0
            if alone and rate != float("inf"):
                actual_s = 1.0 / rate
                extra = dt * (1.0 - alone / actual_s) if actual_s > alone else 0.0
                if extra > 0 and c.compute[c.pos][2] == "bwd":
                    parts = {"sm": max(0.0, sm_s - alone), "hbm": max(0.0, hbm_s - alone)}
                    weight = sum(parts.values())
                    for key in parts:
                        c.extra[key] += extra * (parts[key] / weight if weight else 0.5)
        if active is not None and all_launched:
            if coll[active]["latency_left"] > 0:
                coll[active]["latency_left"] -= dt
                if coll[active]["latency_left"] <= 1e-15:
                    coll[active]["latency_left"] = 0.0
                    coll[active]["stream_start"] = t + dt
            elif coll_rate > 0:
                coll[active]["progress"] += coll_rate * dt if coll_rate != float("inf") else 1.0
        t += dt

        # Completions.
        for ci, c in enumerate(classes):
            if c.gap <= 1e-15 and c.gap != 0:
                c.gap = 0.0
            if c.gap == 0 and c.pos < len(c.compute) and c.progress >= 1.0 - 1e-12:
                name, spec, phase = c.compute[c.pos]
                if record:
                    timeline.append((ci, "compute", name, c.kernel_start, t, phase,
                                     spec.hbm_bytes))
                if phase == "bwd":
                    alone_s = kernel_time(gpu, spec) / c.speed
                    if bwd_span[ci][0] is None or prev_phase[ci] != "bwd":
                        # a new backward pass (the last one is the one reported)
                        bwd_span[ci][0] = c.kernel_start
                        bwd_alone_acc[ci] = alone_s
                    else:
                        bwd_alone_acc[ci] += KERNEL_GAP_S + alone_s
                    bwd_span[ci][1] = t
                prev_phase[ci] = phase
                if phase == "fwd":
                    fwd_end[ci] = t
                if c.pos == queue_len - 1:
                    queue_end[ci] = t
                if phase == "opt":
                    opt_span[ci][1] = t
                    c.done_at = t
                c.pos += 1
                c.progress = 0.0
                c.kernel_start = None
                if c.pos < len(c.compute):
                    c.gap = KERNEL_GAP_S
        if active is not None and coll[active]["progress"] >= 1.0 - 1e-12:
            coll[active]["end"] = t
            if record:
                for ci in range(len(classes)):
                    timeline.append((ci, "comm", launches[active][2], coll[active]["begin"],
                                     t, active, comm_costs[active].hbm_bytes))
            current_coll += 1
        # A GPU whose compute stream is empty and whose collectives are done runs the
        # optimizer (handled when nothing else can progress).

    # Metrics from the slowest class (the iteration ends when every GPU is done).
    iteration = max(c.done_at for c in classes)
    worst = max(range(len(classes)), key=lambda ci: classes[ci].done_at)
    c = classes[worst]
    bwd_alone = bwd_alone_acc[worst]
    bwd_actual = (bwd_span[worst][1] - bwd_span[worst][0]) if bwd_span[worst][0] is not None \
        else 0.0
    slowdown = bwd_actual / bwd_alone - 1 if bwd_alone else 0.0
    total_extra = sum(c.extra.values())
    attribution = {k: (slowdown * v / total_extra if total_extra else 0.0)
                   for k, v in c.extra.items()}
    attribution["link"] = 0.0
    # Exposed communication: the compute stream idles between its last queued kernel and the
    # optimizer (or the end), waiting for collectives.
    exposed_s = max(0.0, (opt_span[worst][0] if opt_span[worst][0] is not None else
                          c.done_at) - queue_end[worst])
    allreduce = sum((x["end"] - x["begin"]) for x in coll if x["end"] is not None)
    alone_comm = sum(cost.time_s for cost in comm_costs)
    return IterationResult(
        n_gpus=n, algo=algo,
        forward_s=fwd_end[worst] or 0.0,
        backward_alone_s=bwd_alone, backward_s=bwd_actual,
        backprop_slowdown=slowdown, slowdown_attribution=attribution,
        allreduce_s=allreduce, allreduce_alone_s=alone_comm,
        exposed_comm_s=exposed_s,
        optimizer_s=(opt_span[worst][1] - opt_span[worst][0]) if opt_span[worst][0] else 0.0,
        iteration_s=iteration, buckets=0, bucket_bytes=[],
        link_utilization=(sum(cost.link_bytes for cost in comm_costs) /
                          (gpu.link_effective_gbps * 1e9 * iteration)) if iteration else 0.0,
        timeline=timeline,
        classes={str(cl.speed): list(cl.gpus) for cl in classes},
        comm_sms=[cost.sms for cost in comm_costs],
    )
