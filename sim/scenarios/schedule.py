"""Pipeline schedules driven by message arrival: an operation starts when its GPU is free and
its input message has arrived, never at a global step (the scenarios ``pipeline`` and
``offload``).

A pipeline of ``p`` stages runs micro-batches through forward (``F``) and backward (``B``)
operations; stage ``s`` runs its operations in the order the schedule gives it:

``gpipe``
    every forward of the step, then every backward in reverse order; the pipeline is flushed
    at the end of the step (Huang et al., GPipe, arXiv 1811.06965).
``1f1b``
    ``p - s - 1`` forwards to fill the pipeline, then one forward and one backward in turn,
    then the remaining backwards; flushed at the end of the step (Narayanan et al., PipeDream
    -Flush, arXiv 2006.09503). With a flush both have the bubble ``(p - 1) / (m + p - 1)``.
``async``
    1F1B without a flush over ``steps`` consecutive steps: the forward of one micro-batch and
    the backward of another are in flight on every stage at once, and the next step does not
    wait for the gradient all-reduce (the weights it needs are predicted, as SpecTrain does:
    Chen, Yang, Cheng, arXiv 1809.02839). The pipeline fills once: bubble
    ``(p - 1) / (steps · m + p - 1)``.

Forward ``F(s, i)`` of ``s > 0`` waits for the activations of micro-batch ``i`` from stage
``s - 1``; backward ``B(s, i)`` of ``s < p - 1`` for the activation gradients from stage
``s + 1``. A message leaves when the operation that made it ends and takes ``send_s``.
Each stage's gradients are reduced across its replicas after its last backward of a step
(``reduce_s``), on the stage's communication stream: one reduction at a time per stage, or,
``shared_reducer``, one at a time for the whole switch (innet's switch has one reduction
unit; see docs/scenarios.md)."""

from dataclasses import dataclass, field

__all__ = ["SCHEDULES", "Timeline", "gpipe_bubble", "simulate", "stage_order"]

SCHEDULES = ("gpipe", "1f1b", "async")


def gpipe_bubble(p, m):
    """The bubble of a flushed pipeline of ``p`` equal stages and ``m`` micro-batches."""
    return (p - 1) / (m + p - 1)


def stage_order(schedule, p, s, n):
    """Stage ``s``'s operations, ``(phase, micro-batch)``, for ``n`` micro-batches."""
    if schedule == "gpipe":
        return [("F", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]
    warm = min(p - s - 1, n)
    order = [("F", i) for i in range(warm)]
    for i in range(n - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(n - warm, n)]


@dataclass
class Timeline:
    """One run of a schedule. Times in seconds from the step's start.

    ``ops``: ``(stage, phase, micro-batch) → (start, end)``; ``messages``: ``(direction,
    stage, micro-batch) → (issue, arrival)`` (``fwd``: stage → stage + 1, ``bwd``: stage →
    stage − 1); ``reduces``: ``(stage, step) → (start, end)``; ``stage_end``: when each stage
    is done (its last reduction, or its last backward); ``compute_end``: the last operation's
    end; ``makespan``: everything done; ``step_s``: ``makespan / steps``."""

    p: int
    micro_batches: int
    steps: int
    ops: dict = field(default_factory=dict)
    messages: dict = field(default_factory=dict)
    reduces: dict = field(default_factory=dict)
    stage_end: list = field(default_factory=list)
    compute_end: float = 0.0
    makespan: float = 0.0

    @property
    def step_s(self):
        return self.makespan / self.steps

    @property
    def busy_s(self):
        return sum(e - s for s, e in self.ops.values())

    @property
    def bubble(self):
        """Share of the stages' time idle while the pipeline computes: 1 − busy / (p ·
        compute span)."""
        return 1.0 - self.busy_s / (self.p * self.compute_end) if self.compute_end else 0.0

    @property
    def critical_stage(self):
        """The stage that finishes last (it sets the step time)."""
        return max(range(self.p), key=lambda s: (self.stage_end[s], s))


def simulate(fwd_s, bwd_s, micro_batches, schedule="1f1b", steps=1, send_s=None,
             reduce_s=None, shared_reducer=False, lockstep=False):
    """Run ``schedule`` (one of :data:`SCHEDULES`) on ``len(fwd_s)`` stages.

    ``fwd_s[s]``, ``bwd_s[s]``: one micro-batch's forward and backward on stage ``s``;
    ``send_s(direction, s, i)``: seconds for stage ``s``'s message of micro-batch ``i``
    (default 0); ``reduce_s(s, step)``: seconds of stage ``s``'s gradient reduction after
    ``step`` (default none). Flushed schedules run one step (``steps`` must be 1).

    ``lockstep``: the same schedule in global rounds instead of on message arrival: a round
    starts when every operation of the previous round has ended, and each stage runs its next
    operation in it if that operation's input arrived by the round's start."""
    p = len(fwd_s)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if schedule != "async" and steps != 1:
        raise ValueError("a flushed schedule runs one step")
    n = steps * micro_batches
    send_s = send_s or (lambda direction, s, i: 0.0)
    order = [stage_order("1f1b" if schedule == "async" else schedule, p, s, n)
             for s in range(p)]
    t = Timeline(p, micro_batches, steps)
    free, pos = [0.0] * p, [0] * p
    last_b = {}   # (stage, step) -> end of its last backward of that step
    progress, round_start = True, 0.0
    while progress:
        progress = False
        round_end = round_start
        for s in range(p):
            while pos[s] < len(order[s]):
                phase, i = order[s][pos[s]]
                if phase == "F":
                    ready = 0.0 if s == 0 else t.messages.get(("fwd", s - 1, i), (0, None))[1]
                else:
                    ready = t.ops[(s, "F", i)][1] if s == p - 1 else \
                        t.messages.get(("bwd", s + 1, i), (0, None))[1]
                if ready is None or (lockstep and ready > round_start):
                    break
                start = round_start if lockstep else max(free[s], ready)
                end = start + (fwd_s[s] if phase == "F" else bwd_s[s])
                t.ops[(s, phase, i)] = (start, end)
                free[s] = end
                pos[s] += 1
                progress = True
                if phase == "F" and s < p - 1:
                    t.messages[("fwd", s, i)] = (end, end + send_s("fwd", s, i))
                if phase == "B" and s > 0:
                    t.messages[("bwd", s, i)] = (end, end + send_s("bwd", s, i))
                if phase == "B":
                    k = i // micro_batches
                    last_b[(s, k)] = max(last_b.get((s, k), 0.0), end)
                round_end = max(round_end, end)
                if lockstep:
                    break   # one operation per stage and round
        if lockstep:
            pending = [t.messages[key][1] for key in t.messages if t.messages[key][1] >
                       round_end]
            if not progress and pending:   # only messages in flight: wait for the next
                progress, round_end = True, min(pending)
            round_start = round_end
    if any(pos[s] < len(order[s]) for s in range(p)):   # cannot happen for these orders
        raise RuntimeError(f"schedule {schedule} deadlocked")
    t.compute_end = max(e for _, e in t.ops.values())
    stage_end = [max(e for (st, _, _), (_, e) in t.ops.items() if st == s) for s in range(p)]
    if reduce_s is not None:
        comm_free = [0.0] * p
        engine_free = 0.0
        for (s, k) in sorted(last_b, key=lambda key: (last_b[key], key)):
            d = reduce_s(s, k)
            if not d:
                continue
            start = max(last_b[(s, k)], engine_free if shared_reducer else comm_free[s])
            t.reduces[(s, k)] = (start, start + d)
            comm_free[s] = start + d
            if shared_reducer:
                engine_free = start + d
            stage_end[s] = max(stage_end[s], start + d)
    t.stage_end = stage_end
    t.makespan = max(stage_end)
    return t
