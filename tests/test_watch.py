"""nextpnr watched as it runs (sim.flow.watch): progress lines from its log, and the routing
budget of ``innet synth --congestion``. The log lines are nextpnr 0.7's, as it prints them."""

import subprocess
import sys

import pytest

from sim.flow.watch import ROUTER2_START, NextpnrProgress, run_nextpnr

PLACED = "Info: Max frequency for clock 'clk': 164.83 MHz (FAIL at 200.00 MHz)\n"
ROUTER1 = ("Info:            |   (re-)routed arcs  |   delta    | remaining|"
           "       time spent     |\n"
           "Info:    IterCnt |  w/ripup   wo/ripup |  w/r  wo/r |      arcs|"
           " batch(sec) total(sec)|\n"
           "Info:       1000 |      165        807 |  165   807 |      3518|"
           "       0.53       0.53|\n"
           "Info:       2000 |      178       1791 |   13   984 |      2532|"
           "       0.44       0.96|\n")
ROUTER2 = ("Info: Running router2...\n"
           "Info:     iter=1 wires=617032 overused=71681 overuse=98034 archfail=NA\n"
           "Info:     iter=2 wires=611871 overused=48379 overuse=60211 archfail=NA\n")


def test_progress_names_the_estimate_once_then_the_router():
    watch = NextpnrProgress(every_s=60)
    # A line cut by a read waits for its end.
    assert watch.feed(PLACED[:30], now=0) == []
    assert watch.feed(PLACED[30:], now=1) == ["placed: estimate 164.83 MHz"]
    assert watch.feed(ROUTER1, now=2) == ["router1: 2,532 arcs still to route"]
    # Within a minute of the last report: nothing; after it, the newest state.
    assert watch.feed(ROUTER1.splitlines(keepends=True)[2], now=30) == []
    assert watch.feed(PLACED + ROUTER1.splitlines(keepends=True)[3], now=70) == [
        "router1: 2,532 arcs still to route"]
    assert watch.routing_since is None


def test_progress_follows_router2_and_marks_its_start():
    watch = NextpnrProgress(every_s=0)
    assert watch.feed(PLACED + ROUTER2, now=5) == [
        "placed: estimate 164.83 MHz", "router2 iteration 2: 48,379 overused wires"]
    assert watch.routing_since == 5
    assert watch.feed("Info:     iter=3 wires=1 overused=34868 overuse=1 archfail=NA\n",
                      now=9) == ["router2 iteration 3: 34,868 overused wires"]
    assert watch.routing_since == 5


def _child(lines_before, before_s, after_s, status):
    """A stand-in for nextpnr: prints ``lines_before``, sleeps, announces router2, sleeps,
    exits with ``status``."""
    return [sys.executable, "-c",
            f"import time; print({lines_before!r}, flush=True); time.sleep({before_s}); "
            f"print({ROUTER2_START!r}, flush=True); time.sleep({after_s}); "
            f"raise SystemExit({status})"]


def test_route_budget_counts_from_router2_start(tmp_path):
    """The budget stops a run that has been routing too long, counting from router2's start
    (not from launch), and lets a run that ends in time end with its own status."""
    # 3 s of placement, then routing that would go on for a minute: stopped ~1 s into routing.
    rc, stopped = run_nextpnr(_child("", 3, 60, 0), tmp_path, tmp_path / "a.log", 120,
                              route_budget_s=1.0, poll_s=0.1)
    assert (rc, stopped) == (None, True)
    assert ROUTER2_START in (tmp_path / "a.log").read_text()
    # A longer placement than the budget does not count against it.
    assert run_nextpnr(_child("", 2, 0.2, 3), tmp_path, tmp_path / "b.log", 120,
                       route_budget_s=1.0, poll_s=0.1) == (3, False)
    # Without a budget, routing runs to the end.
    assert run_nextpnr(_child("", 0, 1.5, 0), tmp_path, tmp_path / "c.log", 120,
                       poll_s=0.1) == (0, False)
    with pytest.raises(subprocess.TimeoutExpired):
        run_nextpnr(_child("", 60, 0, 0), tmp_path, tmp_path / "d.log", 1.0,
                    route_budget_s=1.0, poll_s=0.1)


def test_run_reports_progress_as_the_log_grows(tmp_path):
    messages = []
    rc, stopped = run_nextpnr(_child(PLACED + ROUTER2, 0.5, 0.5, 0), tmp_path,
                              tmp_path / "a.log", 120, progress=messages.append, poll_s=0.1,
                              every_s=0)
    assert (rc, stopped) == (0, False)
    assert messages == ["placed: estimate 164.83 MHz",
                        "router2 iteration 2: 48,379 overused wires"]
