"""Contending traffic (issue 18, item 3): critical messages in the trace, the link delay
they see, and what arbitration does to it."""

from dataclasses import replace

import pytest

from sim.errors import ConfigError
from sim.experiment import metrics
from sim.experiment.answer import traffic_paragraphs
from sim.experiment.config import load_config
from sim.experiment.point import run_point
from sim.experiment.tables import markdown_table, point_row
from sim.model.switch import replay_model
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.trace.format import MEM, SWITCH_PORT, TraceRecord

CHUNK_FLITS, MTU, PACKETS = 4, 16, 6


def _replay(policy, **arbitration):
    """Members 0, 1, 2 reduce 96 chunks in the switch from cycle 0 (results stream to egress
    0); GPU 3, no member, writes PACKETS critical MTU packets to GPU 0 at cycle 60.
    ``arbitration``: the replay's weights or quantum."""
    cfg = ReplayConfig(ports=4, lanes=2, slots=8, chunk_flits=CHUNK_FLITS, policy=policy,
                       mtu_flits=MTU, link_gbps=8.0,        # 8-byte flits: 1 ns per cycle
                       **arbitration)
    records, rid = [], 0
    for k in range(96):
        for g in range(3):
            records.append(TraceRecord.grad(gpu=g, peer=SWITCH_PORT, id=rid, time_ns=0,
                                            bytes=cfg.chunk_bytes, algo="inswitch",
                                            chunk=k))
            rid += 1
    records.append(TraceRecord.mem(gpu=3, peer=0, id=rid, time_ns=60,
                                   bytes=PACKETS * MTU * cfg.flit_bytes, traffic="pp",
                                   critical=True))
    meta = {"gpus": 4}
    by_id = {r.id: r for r in records}
    shared = replay_model(build_plan(meta, records, cfg))
    alone = replay_model(build_plan(meta, [r for r in records if r.rtype == MEM], cfg))
    return metrics.critical_link_delay_ns(shared, alone, by_id, cfg.cycle_ns)


def test_priority_for_critical_traffic_beats_round_robin():
    rr, prio = _replay("rr"), _replay("prio")
    # Golden, by hand: under prio a critical packet waits at most for the result chunk the
    # packet-atomic arbiter is sending (CHUNK_FLITS cycles), once, as the write's packets
    # follow each other; under rr every packet may wait for one result chunk, and it does
    # while results stream: more than prio's bound, at most PACKETS chunks.
    assert prio <= CHUNK_FLITS
    assert rr > prio
    assert rr <= PACKETS * CHUNK_FLITS
    assert rr >= (PACKETS - 1) * CHUNK_FLITS    # results stream the whole time


@pytest.mark.parametrize("mem_weight", [1, 2, 3, PACKETS])
def test_wrr_memory_weight_is_turns_the_critical_write_keeps(mem_weight):
    # Golden, by hand: the write's PACKETS packets follow each other from one requester, so
    # with mem_weight w they go in ceil(PACKETS / w) turns, and between two turns the
    # streaming results send one chunk (result_weight 1): the write waits that many chunks,
    # besides what every policy waits once, the rest of the result chunk on the link when it
    # arrives (prio's whole delay; the reduction unit's judge shifts the results' phase).
    # w = 1 is round-robin, w = PACKETS is as good as strict priority.
    turns = -(-PACKETS // mem_weight)
    in_flight = _replay("prio")
    assert in_flight < CHUNK_FLITS
    assert _replay("wrr", mem_weight=mem_weight) == (turns - 1) * CHUNK_FLITS + in_flight
    if mem_weight == 1:
        assert _replay("wrr", mem_weight=1) == _replay("rr")
    if mem_weight == PACKETS:
        assert _replay("wrr", mem_weight=mem_weight) == _replay("prio")


@pytest.mark.parametrize("result_weight", [2, 4])
def test_wrr_result_weight_delays_the_critical_write(result_weight):
    # Golden, by hand: with result_weight w the results send up to w chunks per turn, so each
    # of the write's PACKETS − 1 later packets waits w chunks, and its first at most the rest
    # of the turn the results are in when it arrives (up to w − 1 chunks) and the rest of the
    # result chunk on the link (prio's whole delay).
    delay = _replay("wrr", result_weight=result_weight)
    low = (PACKETS - 1) * result_weight * CHUNK_FLITS
    assert low <= delay <= low + (result_weight - 1) * CHUNK_FLITS + _replay("prio")
    assert delay > _replay("rr")


def test_critical_flag_round_trips_and_defaults_off():
    r = TraceRecord.mem(gpu=0, peer=1, id=0, time_ns=0, bytes=8, traffic="tp", critical=True)
    assert (r.traffic, r.critical) == ("tp", True)
    assert "traffic=tp critical=1" in r.to_text()
    plain = TraceRecord.mem(gpu=0, peer=1, id=0, time_ns=0, bytes=8)
    assert (plain.traffic, plain.critical, plain.aux) == ("other", False, 0)
    assert "traffic" not in plain.to_text()


def test_traffic_key_is_validated_in_one_line():
    with pytest.raises(ConfigError) as err:
        load_config('[experiment]\ntraffic = ["dp", "fdsp"]\n', path="x.toml")
    assert str(err.value) == ("x.toml: [experiment] traffic: 'fdsp' is not one of dp, pp, tp, "
                              "fsdp, offload; did you mean 'fsdp'?")


def test_policies_that_cannot_differ_are_said_once():
    # Ring all-reduce: every packet is memory traffic at one priority level, so prio is
    # round-robin; the FSDP all-gathers are delayed (a link component) the same either way.
    config = replace(load_config(), rtl=False, workloads=("bert_large",), algorithms=("ring",),
                     policies=("rr", "prio"), traffic=("fsdp",))
    points = [run_point(config, "bert_large", 25.0, "ring", p, "fsdp") for p in ("rr", "prio")]
    rows = [point_row(p) for p in points]
    assert rows[0]["slowdown_link"] > 0
    assert rows[0]["backprop_ms"] == rows[1]["backprop_ms"]
    table = markdown_table(rows)
    assert table.count("| bert_large |") == 1 and "| rr=prio |" in table
    text = " ".join(traffic_paragraphs(config, rows))
    assert text.count("rr and prio give the same backward pass") == 1
    assert "at bert_large ring: with ring and tree all-reduce every packet is memory" in text
    assert "wins" not in text


def test_a_mem_record_naming_no_traffic_class_is_refused(tmp_path):
    from sim.trace.format import TraceError, read_trace
    path = tmp_path / "t.txt"
    path.write_text('innet-trace 2 {"gpus": 2}\n'
                    "mem gpu=0 peer=1 id=0 time_ns=0 bytes=8 op=write traffic=nvme\n")
    with pytest.raises(TraceError, match=r"t.txt:2: traffic: 'nvme' is not one of other, pp, "
                                         r"tp, fsdp, offload$"):
        list(read_trace(path)[1])


def test_trace_gen_lays_the_traffic_over_the_iteration(tmp_path, capsys):
    from sim.cli.main import main
    from sim.trace.format import read_trace
    out = tmp_path / "t.itr"
    assert main(["trace", "gen", "--model", "resnet50", "--batch", "8", "--gpus", "4",
                 "--traffic", "fsdp", "--traffic", "offload", "-o", str(out)]) == 0
    meta, records = read_trace(out)
    mem = [r for r in records if r.rtype == MEM]
    assert meta["traffic"] == ["fsdp", "offload"]
    assert {r.traffic for r in mem} == {"fsdp", "offload"}
    # FSDP: every layer's shard to each of the 3 other GPUs, before forward (not critical)
    # and backward (critical) kernels: as many critical records as not; offload: a critical
    # read per write.
    fsdp = [r for r in mem if r.traffic == "fsdp"]
    assert sum(r.critical for r in fsdp) * 2 == len(fsdp)
    offload = [r for r in mem if r.traffic == "offload"]
    assert all(r.critical == (r.mem_op == "read") for r in offload)
    assert sum(r.mem_op == "read" for r in offload) > 0
    assert main(["trace", "gen", "--model", "resnet50", "--gpus", "4", "--traffic", "nvme",
                 "-o", str(tmp_path / "u.itr")]) == 2
    assert not (tmp_path / "u.itr").exists()


def test_report_names_each_policy_with_its_settings_and_the_margin():
    # Hand-made rows: one load where prio wins and wrr and drr give rr's backward pass, one
    # where drr is the worst. The paragraph names the winner, every other policy with its
    # weights or quantum and its margin (of the 40 ms backward pass alone), and why wrr and
    # drr could not do what priority did.
    config = replace(load_config(), policies=("rr", "prio", "wrr", "drr"), traffic=("fsdp",),
                     mem_weight=4, result_weight=1, quantum_flits=64)
    base = {"workload": "bert_large", "algo": "inswitch", "traffic": "fsdp",
            "backprop_alone_ms": 40.0, "critical_wait_alone_ms": 4.0, "link_utilization": 0.3,
            "allreduce_ms": 10.0, "slowdown_link": 0.1}
    backprop = {5: {"rr": 53.0, "prio": 49.0, "wrr": 53.0, "drr": 53.0},
                25: {"rr": 44.0, "prio": 44.0, "wrr": 44.0, "drr": 44.4}}
    rows = [dict(base, bucket_mb=b, policy=p, backprop_ms=ms)
            for b, by in backprop.items() for p, ms in by.items()]
    text = " ".join(traffic_paragraphs(config, rows))
    assert ("bert_large inswitch 5 MiB: prio (memory first) wins, backprop 49.00 ms against "
            "rr, wrr (results 1 : memory 4) and drr (quantum 64 flits) 53.00 ms (+10.0 %)"
            in text)
    assert ("bert_large inswitch 25 MiB: rr, prio (memory first) and wrr (results 1 : memory "
            "4) win, backprop 44.00 ms against drr (quantum 64 flits) 44.40 ms (+1.0 %)" in text)
    assert "wrr (results 1 : memory 4) gives round-robin's backward pass at every point" in text
    assert "drr (quantum 64 flits) gives round-robin's backward pass at every point" in text
