"""Cycle-level reference model of the link arbiter (:mod:`hw.arbiter`), in plain Python.

It is written from the policy descriptions, not from the RTL, and is the golden model the RTL
tests compare against cycle by cycle. The fast switch model reuses it.
"""

from hw.arbiter import DEFICIT_BITS
from hw.spec import Policy

__all__ = ["ArbiterModel"]


def _first_after(mask, ptr):
    n = len(mask)
    for offset in range(1, n + 1):
        k = (ptr + offset) % n
        if mask[k]:
            return k
    return None


class ArbiterModel:
    """One arbiter. Call :meth:`step` once per clock cycle.

    Parameters
    ----------
    ports : int
    policy : Policy or str
    priority, weight : list of int, optional
        Run-time inputs of the ``prio`` and ``wrr`` policies (may be reassigned between steps).
    quantum : int, optional
        Run-time input of the ``drr`` policy.
    """

    def __init__(self, ports, policy, *, priority=None, weight=None, quantum=None):
        self.ports = ports
        self.policy = Policy.parse(policy)
        self.priority = list(priority) if priority is not None else [0] * ports
        self.weight = list(weight) if weight is not None else [1] * ports
        self.quantum = quantum if quantum is not None else 1
        self.ptr = 0
        self.busy = False
        self.held = 0
        self.count = 0
        self.deficit = [0] * ports
        # the choice registered for the next cycle: (index or None, starts a new turn)
        self.choice, self.choice_new_turn = None, True

    def choose(self, valid):
        """The choice for the next cycle, from this cycle's ``valid`` and the state after this
        cycle: ``(index or None, new_turn)``. No side effects (the fast model peeks)."""
        n, ptr = self.ports, self.ptr
        if self.policy == Policy.RR:
            return _first_after(valid, ptr), True
        if self.policy == Policy.PRIO:
            top = max((self.priority[k] for k in range(n) if valid[k]), default=None)
            eligible = [valid[k] and self.priority[k] == top for k in range(n)]
            return _first_after(eligible, ptr), True
        if self.policy == Policy.WRR:
            enabled = [valid[k] and self.weight[k] != 0 for k in range(n)]
            if enabled[ptr] and self.count < self.weight[ptr]:
                return ptr, False
            return _first_after(enabled, ptr), True
        # DRR
        if valid[ptr] and self.deficit[ptr] > 0:
            return ptr, False
        eligible = [valid[k] and self.deficit[k] + self.quantum > 0 for k in range(n)]
        choice = _first_after(eligible, ptr)
        if choice is None:
            choice = _first_after(valid, ptr)
        return choice, True

    def step(self, valid, last, ready):
        """Advance one cycle.

        The requester presented when not mid-packet is the one chosen in the previous cycle
        (the RTL registers its choice): from that cycle's ``valid`` and the state as it was
        after that cycle. Every cycle ends by choosing for the next.

        Parameters
        ----------
        valid : sequence of bool
            Each requester's ``valid`` this cycle.
        last : sequence of bool
            The ``last`` bit of each requester's presented flit.
        ready : bool
            The output's ``ready`` this cycle.

        Returns
        -------
        (int or None, bool)
            The requester shown on the output (``None`` when the output is not valid) and whether
            its flit was accepted.
        """
        if self.busy:
            sel, new_turn = self.held, False
        else:
            sel, new_turn = self.choice, self.choice_new_turn
        out_valid = sel is not None and valid[sel]
        accepted = out_valid and bool(ready)
        if out_valid:
            self.start(valid, sel, new_turn, accepted)
            self.busy = not (accepted and last[sel])
        self.choice, self.choice_new_turn = self.choose(valid)
        return (sel, accepted) if out_valid else (None, False)

    def start(self, valid, sel, new_turn, accepted):
        """Present requester ``sel`` this cycle (a packet's first flit unless ``busy``): the
        policy state's update. The fast switch model calls it once per packet."""
        if not self.busy:
            if self.policy == Policy.WRR:
                self.count = 1 if new_turn else self.count + 1
            if self.policy == Policy.DRR:
                self._drr_start(valid, sel, new_turn, accepted)
            self.ptr = sel
        elif self.policy == Policy.DRR and accepted:
            self._set_deficit(sel, self.deficit[sel] - 1)
        self.held = sel

    def _set_deficit(self, k, value):
        lo, hi = -(1 << (DEFICIT_BITS - 1)), (1 << (DEFICIT_BITS - 1)) - 1
        self.deficit[k] = min(max(value, lo), hi)

    def _drr_start(self, valid, sel, new_turn, accepted):
        n, ptr = self.ports, self.ptr
        if not new_turn:
            self._set_deficit(sel, self.deficit[sel] - int(accepted))
            return
        new = list(self.deficit)
        if new[ptr] > 0:
            new[ptr] = 0
        # Requesters passed over between the old holder and the new one bank the quantum.
        k = (ptr + 1) % n
        while k != sel:
            if valid[k]:
                new[k] = self.deficit[k] + self.quantum
            k = (k + 1) % n
        new[sel] = self.deficit[sel] + self.quantum - int(accepted)
        for k in range(n):
            self._set_deficit(k, new[k])
