"""What every scenario shares: building its trace (records of the one trace format,
:mod:`sim.trace.format`), replaying it through the fast switch model, timing its messages, and
the RTL window (the default experiment's, :func:`sim.experiment.point.validate_window`).

A scenario module describes its pattern as GPU-model times (``collective_cost``,
``kernel_time``, ``simulate_iteration``) and as a trace of the messages those times stand
for; :class:`Context` turns the trace into the switch's answer."""

from dataclasses import dataclass, field

from sim.gpu.collectives import SWITCH, expand_collective, piece_dependencies
from sim.trace.format import SWITCH_PORT, TraceRecord

__all__ = ["Context", "Section", "TraceBuilder", "MiB", "figure", "table"]

MiB = 1 << 20


class TraceBuilder:
    """Trace records of one scenario run, numbered in the order they are made (a record's
    dependency is always an earlier record, as the format requires).

    Collectives are expanded by :func:`sim.gpu.collectives.expand_collective` over ``ranks``
    (rank i of the collective is GPU ``ranks[i]``), every message cut into pieces of at most
    ``chunk_bytes``; piece k depends on piece k of each message it waits for, as
    :func:`sim.trace.generate.generate_trace` does. ``nvls`` has the in-switch message pattern
    (contributions up, the sum multicast down) and is written as ``inswitch`` records."""

    def __init__(self, gpus, chunk_bytes, job=0):
        self.gpus, self.chunk_bytes, self.job = gpus, chunk_bytes, job
        self.records = []

    def _next(self):
        return len(self.records)

    def _pieces(self, nbytes):
        return [min(self.chunk_bytes, nbytes - k * self.chunk_bytes)
                for k in range(max(1, -(-nbytes // self.chunk_bytes)))]

    def collective(self, algo, op, ranks, nbytes, time_ns, bucket, after=None):
        """The records of one collective; ``after`` maps a rank's GPU to a record its first
        message waits for. Returns ``{gpu: last record id it sent}``; :attr:`received` then
        maps each GPU to the last record sent to it (a GPU waiting for the collective's end
        waits on it)."""
        algo = "inswitch" if algo == "nvls" else algo
        messages = expand_collective(algo, len(ranks), int(nbytes), op=op)
        pieces, last = [], dict(after or {})
        self.received = {}
        for m in messages:
            if m.src == SWITCH:   # the switch's multicast: the replay produces it
                pieces.append([])
                continue
            src = ranks[m.src]
            peer = SWITCH_PORT if m.dst == SWITCH else ranks[m.dst]
            ids = []
            for k, size in enumerate(self._pieces(m.nbytes)):
                deps = piece_dependencies(m, k, pieces)
                if not deps and src in (after or {}):
                    deps = (after[src],)
                rid = self._next()
                self.records.append(TraceRecord.grad(
                    gpu=src, peer=peer, id=rid, time_ns=int(time_ns), bytes=size, algo=algo,
                    bucket=bucket & 0xFFFF, chunk=(m.chunk * 4096 + k) & 0xFFFF,
                    job=self.job).with_dependencies(deps))
                ids.append(rid)
            pieces.append(ids)
            if ids:
                last[src] = ids[-1]
                if peer != SWITCH_PORT:
                    self.received[peer] = ids[-1]
        return last

    def write(self, gpu, peer, nbytes, time_ns, traffic="other", critical=False, after=None,
              op="write"):
        """A remote write (or a ``read``: one record, the switch sends the response) of
        ``nbytes`` from ``gpu`` to ``peer``; returns the last record's id."""
        sizes = [nbytes] if op == "read" else self._pieces(int(nbytes))
        rid = None
        for k, size in enumerate(sizes):
            rid = self._next()
            self.records.append(TraceRecord.mem(
                gpu=gpu, peer=peer, id=rid, time_ns=int(time_ns), bytes=int(size), op=op,
                tag=k & 0xFFFF, dependency=after, job=self.job,
                traffic=traffic, critical=critical))
        return rid

    def kernel(self, gpu, start_ns, duration_ns, phase, sms=0, hbm_bytes=0):
        rid = self._next()
        self.records.append(TraceRecord.kernel(
            gpu=gpu, id=rid, start_ns=int(start_ns), duration_ns=max(1, int(duration_ns)),
            phase=phase, sms=min(sms, 0xFFFF), hbm_kib=int(hbm_bytes // 1024), job=self.job))
        return rid


@dataclass
class Section:
    """One part of a scenario's report: a heading, Markdown lines, the numbers behind them
    (into results.json) and figures (``(file name, matplotlib figure)``)."""

    title: str
    lines: list
    metrics: dict = field(default_factory=dict)
    figures: list = field(default_factory=list)


@dataclass
class Replayed:
    """A trace replayed through the fast model: its switch configuration, result, and the
    time each record's message was complete (``done_ns``, record id → ns)."""

    name: str
    rcfg: object
    replay: object
    meta: dict
    records: list
    done_ns: dict
    issue_ns: dict

    def span_ns(self, ids=None):
        """From the earliest issue to the last completion of the messages of records ``ids``
        (default: all)."""
        keys = self.done_ns.keys() if ids is None else [i for i in ids if i in self.done_ns]
        if not keys:
            return 0.0
        return max(self.done_ns[i] for i in keys) - min(self.issue_ns[i] for i in keys)


class Context:
    """A scenario's run: its configuration, GPU and workload, where its files go, and the
    replays and RTL windows it made (for the report)."""

    def __init__(self, config, out_dir, progress=None):
        from sim.gpu.presets import gpu_preset
        from sim.gpu.workloads import build_workload
        self.config = config
        self.gpu = gpu_preset(config.gpu)
        self.workload = build_workload(config.workload, batch=config.batch or None)
        self.out_dir = out_dir
        self.progress = progress or (lambda text: None)
        self.traces = []       # (file name, meta, records), written with the report
        self.windows = []      # RTL windows: dicts of point.validate_window
        self.replays = {}

    def step_alone_s(self, workload=None, grad_accum=1):
        """One training step of one GPU alone (forward, backward, optimizer; no
        communication): the GPU model's iteration on one GPU."""
        from sim.gpu.iteration import IterationConfig, simulate_iteration
        result = simulate_iteration(workload or self.workload, self.gpu,
                                    IterationConfig(n_gpus=1, grad_accum=grad_accum),
                                    record=False)
        return result.iteration_s

    def replay_config(self, ports, bytes_per_port, policy="rr"):
        """The switch of this scenario with a flit scale that brings ``bytes_per_port``
        under ``[switch] target_flits``."""
        from sim.replay.config import ReplayConfig
        from sim.replay.plan import scale_for
        c = self.config
        # A switch's radix is a power of two, as NVSwitch's and the RTL's tests are; its unused
        # ports keep the judge's turns of a chunk a multiple of the ports (line rate).
        radix = max(2, 1 << (ports - 1).bit_length())
        return ReplayConfig(ports=radix, lanes=c.lanes, slots=c.slots,
                            chunk_flits=c.chunk_flits, policy=policy, mtu_flits=c.mtu_flits,
                            link_gbps=self.gpu.link_gbps,
                            flit_scale=scale_for(bytes_per_port, c.lanes, c.target_flits),
                            dtype="fp32")

    def piece_bytes(self, rcfg):
        """Trace pieces of one MTU (no piece rounds up to a mostly empty packet)."""
        return rcfg.flit_bytes * self.config.mtu_flits

    def replay(self, name, builder, rcfg, meta=None):
        """Validate ``builder``'s records as a trace (kept for the run directory) and replay
        them through the fast model."""
        from sim.model.switch import replay_model
        from sim.replay.plan import build_plan
        meta = {"gpus": builder.gpus, "gpu": self.gpu.name, "model": self.workload.name,
                "generator": f"innet scenario {self.config.kind}", "scenario": name,
                "flit_scale": rcfg.flit_scale, **(meta or {})}
        records = builder.records
        self.traces.append((f"{name}.itr", meta, records))
        plan = build_plan(meta, records, rcfg, path=name)
        result = replay_model(plan)
        cycle_ns = rcfg.cycle_ns
        done = {}   # a read's response is a message of the replay's plan, of its record
        for mid, cycle in result.message_done.items():
            record = result.plan.messages[mid].record
            done[record] = max(done.get(record, 0.0), cycle * cycle_ns)
        issue = {m.record: m.issue * cycle_ns for m in plan.messages}
        replayed = Replayed(name, rcfg, result, meta, records, done, issue)
        self.replays[name] = replayed
        return replayed

    def rtl_window(self, replayed):
        """Replay the trace's bucket-0 window through the RTL switch and the model, as the
        default experiment does (``[scenario] rtl = false``: nothing)."""
        if not self.config.rtl:
            return None
        from sim.experiment.point import validate_window
        self.progress(f"RTL window of {replayed.name} ({self.config.sim})")
        window = validate_window(self.config, replayed.meta, replayed.records, replayed.rcfg,
                                 None, None)
        if window:
            window["trace"] = replayed.name
            self.windows.append(window)
        return window


def figure(width=6.4, height=3.6, ncols=1):
    """A matplotlib figure and its axes (the Agg backend: no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(1, ncols, figsize=(width, height))


def table(header, rows):
    """A Markdown table: ``header`` a list of column names, ``rows`` lists of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines
