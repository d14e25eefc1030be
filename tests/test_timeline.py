"""The Chrome trace-event timeline of a point (timeline.json, issue 18 item 5)."""

import json
from dataclasses import replace

import pytest

from sim.experiment.config import load_config
from sim.experiment.point import run_point
from sim.experiment.timeline import COMM_TID, COMPUTE_TID, SWITCH_BINS, chrome_trace


@pytest.fixture(scope="module")
def point():
    config = replace(load_config(), rtl=False, workloads=("bert_large",), gpus=4,
                     algorithms=("ring",), policies=("rr",))
    return run_point(config, "bert_large", 25.0, "ring", "rr")


@pytest.fixture(scope="module")
def trace(point):
    # Through JSON and back, as timeline.json is written and read.
    text = json.dumps(chrome_trace([("p", point.timeline)]), default=float)
    return json.loads(text)


def _by_pid(trace):
    names, events = {}, {}
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e["ph"] != "M":
            events.setdefault(e["pid"], []).append(e)
    return names, events


def test_every_gpu_has_both_streams_and_the_switch_its_ports(trace):
    names, events = _by_pid(trace)
    gpus = sorted(n for n in names.values() if " GPU " in n)
    assert gpus == [f"p GPU {g}" for g in range(4)]
    for pid, name in names.items():
        if " GPU " in name:
            assert {e["tid"] for e in events[pid]} == {COMPUTE_TID, COMM_TID}
        else:
            counters = {e["name"] for e in events[pid]}
            assert counters == {f"port {d} egress utilization" for d in range(4)}
            assert len(events[pid]) <= 4 * SWITCH_BINS
            assert all(0 <= e["args"]["utilization"] <= 1 for e in events[pid])


def test_events_are_well_formed_and_do_not_overlap_per_stream(trace):
    _, events = _by_pid(trace)
    for evs in events.values():
        for e in evs:
            assert e["ph"] in ("X", "C", "b", "e") and e["ts"] >= 0
            if e["ph"] == "X":
                assert e["dur"] > 0 and e["name"]
        for tid in (COMPUTE_TID, COMM_TID):
            spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs
                           if e["ph"] == "X" and e["tid"] == tid)
            assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:]))


def test_durations_are_the_models(point, trace):
    _, events = _by_pid(trace)
    gpu0 = events[min(events)]
    bwd = [e for e in gpu0 if e["ph"] == "X" and e["tid"] == COMPUTE_TID
           and e["args"]["phase"] in ("bwd", "ddp")]
    # The backward pass (its layers' kernels and DDP's bucket kernels between and after them)
    # from its first kernel's start to its last kernel's end is the GPU
    # model's backward time (backprop_ms less the replay's link delay, 0 here: no p2p
    # message of dp traffic was delayed at this point).
    span_ms = (max(e["ts"] + e["dur"] for e in bwd) - min(e["ts"] for e in bwd)) / 1e3
    link_ms = point.metrics["slowdown_link"] * point.metrics["backprop_alone_ms"]
    assert span_ms == pytest.approx(point.metrics["backprop_ms"] - link_ms, rel=1e-9)
    # A slowed kernel says by how much and why; its alone time is the roofline's.
    slowed = [e for e in bwd if "slowdown" in e["args"]]
    assert slowed and all(e["args"]["cause"].startswith("SM and HBM shared with allreduce")
                          for e in slowed)
    for e in slowed:
        assert e["dur"] == pytest.approx(e["args"]["alone_us"] * (1 + e["args"]["slowdown"]))
    # Every collective is on the communication stream with its bucket's bytes.
    comm = [e for e in gpu0 if e["ph"] == "X" and e["tid"] == COMM_TID]
    assert len(comm) == len({e["args"]["bucket"] for e in comm})
    assert all(e["args"]["bytes"] > 0 for e in comm)


def test_critical_waits_add_up_to_the_link_delay():
    # FSDP with in-switch reduction: the all-gathers are delayed (docs/metrics.md).
    config = replace(load_config(), rtl=False)
    point = run_point(config, "bert_large", 25.0, "inswitch", "rr", "fsdp")
    _, events = _by_pid(json.loads(json.dumps(chrome_trace([("p", point.timeline)]),
                                              default=float)))
    delays = []
    for evs in events.values():
        begins = {e["id"]: e for e in evs if e["ph"] == "b"}
        ends = {e["id"]: e for e in evs if e["ph"] == "e"}
        assert begins.keys() == ends.keys()
        for i, b in begins.items():
            assert b["cat"] == "critical" and b["args"]["traffic"] == "fsdp"
            assert ends[i]["ts"] - b["ts"] == pytest.approx(b["args"]["wait_us"])
        if begins:
            delays.append(sum(b["args"].get("delay_us", 0) for b in begins.values()))
    assert len(delays) == 8
    link_us = point.metrics["slowdown_link"] * point.metrics["backprop_alone_ms"] * 1e3
    assert link_us > 0 and max(delays) == pytest.approx(link_us)
