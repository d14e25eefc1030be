"""nextpnr run and watched: its log read as it grows, for progress lines on a long place and
route (the 8 × 8 × 64 switch routes for an hour or more) and for a routing budget that counts
from the router's start (``innet synth --congestion``)."""

import re
import subprocess
import time
from pathlib import Path

from sim.flow.tools import tool_env

__all__ = ["ROUTER2_START", "FMAX_LINE", "NextpnrProgress", "run_nextpnr"]

#: What nextpnr prints when router2 starts: a routing budget counts from here.
ROUTER2_START = "Running router2"

#: nextpnr's frequency report, after placement (the estimate) and again after routing.
FMAX_LINE = re.compile(r"Max frequency for clock '[^']*': ([0-9.]+) MHz")
#: router2's line per iteration: ``iter=N wires=W overused=O overuse=... archfail=...``.
_ROUTER2_ITER = re.compile(r"iter=(\d+) wires=(\d+) overused=(\d+)")
#: router1's line per thousand arcs: ``IterCnt | ripup ... | remaining arcs | time spent``.
_ROUTER1_ROW = re.compile(r"^Info:\s+(\d+) \|\s+\d+\s+\d+ \|\s+\d+\s+\d+ \|\s+(\d+)\|")


class NextpnrProgress:
    """Progress lines from a nextpnr log fed as it grows: the placement's estimate once, then
    the router's state (router2's overused wires per iteration, router1's arcs still queued)
    at most once every ``every_s`` seconds, so a small design says only that it placed.
    ``routing_since`` is when :data:`ROUTER2_START` was read (None before)."""

    def __init__(self, every_s=60.0):
        self.every_s = every_s
        self.routing_since = None
        self._carry = ""
        self._placed = False
        self._last_report = None

    def feed(self, text, now):
        """The messages the log's new ``text`` (read at time ``now``) gives; a line cut at the
        end of a read waits for the rest."""
        lines = (self._carry + text).split("\n")
        self._carry = lines.pop()
        messages = []
        router_state = None
        for line in lines:
            if self.routing_since is None and ROUTER2_START in line:
                self.routing_since = now
            if not self._placed and (found := FMAX_LINE.search(line)):
                self._placed = True
                messages.append(f"placed: estimate {float(found.group(1)):.2f} MHz")
            elif found := _ROUTER2_ITER.search(line):
                router_state = (f"router2 iteration {found.group(1)}: "
                                f"{int(found.group(3)):,} overused wires")
            elif found := _ROUTER1_ROW.match(line):
                router_state = f"router1: {int(found.group(2)):,} arcs still to route"
        if router_state and (self._last_report is None
                             or now - self._last_report >= self.every_s):
            self._last_report = now
            messages.append(router_state)
        return messages


def run_nextpnr(cmd, cwd, log, timeout, route_budget_s=None, progress=None, poll_s=1.0,
                every_s=60.0):
    """Run ``cmd`` (nextpnr) with its output in ``log``, reading the log as it grows: each
    :class:`NextpnrProgress` message goes to ``progress`` (if given), and with
    ``route_budget_s`` the run is stopped once router2 has been routing that long (counted
    from :data:`ROUTER2_START`, so placement does not eat the budget). Returns ``(exit status,
    stopped)``; a stopped run's status is None.

    Raises
    ------
    subprocess.TimeoutExpired
        If the whole run outlasts ``timeout`` seconds (the process is killed)."""
    log = Path(log)
    watch = NextpnrProgress(every_s)
    began, offset = time.monotonic(), 0
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=tool_env(), stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                time.sleep(poll_s)
                now = time.monotonic()
                if now - began > timeout:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                with open(log, errors="replace") as text:
                    text.seek(offset)
                    new = text.read()
                    offset = text.tell()
                for message in watch.feed(new, now):
                    if progress:
                        progress(message)
                if (route_budget_s is not None and watch.routing_since is not None
                        and now - watch.routing_since > route_budget_s):
                    proc.terminate()
                    proc.wait()
                    return None, True
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, False
