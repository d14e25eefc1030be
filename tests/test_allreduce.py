"""One all-reduce through the switch (sim/replay/allreduce.py, ``innet allreduce``): the slot
pool's bandwidth-delay product against its closed form, the link hop in the closed loop, ring
against in-switch, the RTL on a small point, and the benchmark and command lines."""

import json

import pytest

from sim.cli.main import main
from sim.model.switch import replay_model
from sim.replay.allreduce import measure, slot_bound, sweep
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.trace.format import TraceRecord

from .conftest import one_simulator, require_simulator

#: The real switch: 8 ports, 32 B flits, an A100's 300 GB/s and 350 ns hop.
REAL = dict(ports=8, lanes=8, link_gbps=300.0, link_latency_ns=350.0)


@pytest.mark.parametrize("slots, chunk_flits", [(16, 8), (64, 8), (4, 32)])
def test_slot_pool_round_trip_is_the_closed_form(slots, chunk_flits):
    """Below line rate a slot is reused exactly once per round trip R: wave w of S chunks
    starts at w·R, so K chunks take (⌈K/S⌉−1)·R + (S−1)·P + the switch's own chunk time, and
    the bandwidth tends to S·C/R. R and the switch time come from the specification and the
    hop alone (slot_bound), not from a replay."""
    cfg = ReplayConfig(slots=slots, chunk_flits=chunk_flits, **REAL)
    bound = slot_bound(cfg)
    assert bound["round_trip_cycles"] == bound["switch_cycles"] + 1 + 2 * 3281
    assert bound["bound_gbps"] < cfg.link_gbps
    nbytes = 64 * slots * cfg.chunk_bytes
    r = measure(cfg, "inswitch", nbytes)
    waves = nbytes // cfg.chunk_bytes // slots
    want = ((waves - 1) * bound["round_trip_cycles"] + (slots - 1) * chunk_flits
            + bound["switch_cycles"] + 1 + 2 * cfg.link_cycles)
    assert r["cycles"] == want
    assert r["algbw_gbps"] == pytest.approx(bound["bound_gbps"], rel=0.02)
    assert r["algbw_gbps"] <= bound["bound_gbps"]


def test_large_pool_reaches_line_rate_not_more():
    """S·C/R above the line rate: the reduction runs at line rate (the engine reads one flit
    a cycle), within the start-up of one round trip."""
    cfg = ReplayConfig(slots=1024, chunk_flits=8, **REAL)
    assert slot_bound(cfg)["bound_gbps"] > cfg.link_gbps
    nbytes = 4 << 20
    r = measure(cfg, "inswitch", nbytes)
    ideal_us = nbytes / cfg.link_gbps / 1e3 + slot_bound(cfg)["round_trip_ns"] / 1e3
    assert r["algbw_gbps"] <= cfg.link_gbps
    assert r["time_us"] == pytest.approx(ideal_us, rel=0.01)


def test_ring_is_latency_bound_small_and_bandwidth_bound_large():
    """Ring: 2(N−1) dependent steps, each at least a round trip (two hops) — the floor for a
    tiny message; for a large one the bandwidth tends to line / (2(N−1)/N)."""
    cfg = ReplayConfig(slots=64, chunk_flits=8, **REAL)
    n = cfg.ports
    tiny = measure(cfg, "ring", 4096)
    assert tiny["cycles"] > 2 * (n - 1) * 2 * cfg.link_cycles
    big = measure(cfg, "ring", 16 << 20)
    assert big["algbw_gbps"] == pytest.approx(cfg.link_gbps * n / (2 * (n - 1)), rel=0.02)


def test_sweep_finds_the_limited_size_effect():
    """64 slots × 256 B (S·C/R = 23 GB/s, under ring's 171 GB/s): in-switch wins small
    messages and loses large ones; 1,024 slots win at every size."""
    cfg = ReplayConfig(**REAL)
    out = sweep(cfg, slots=(64, 1024), chunk_flits=(8,), sizes=(4096, 65536, 4 << 20))
    by = {(f["slots"]): f for f in out["findings"]}
    assert by[64]["faster_than_ring_bytes"] == [4096, 65536]
    assert by[1024]["faster_than_ring_bytes"] == [4096, 65536, 4 << 20]


def test_link_hop_delays_dependants_by_a_round_trip():
    """A message waiting for another starts a round trip (two hops) after that one was
    delivered, and every issue is one hop later (the first flit crossing the link)."""
    cfg = ReplayConfig(ports=3, lanes=2, slots=8, chunk_flits=4, link_gbps=8.0,
                       link_latency_ns=10.0)
    assert cfg.link_cycles == 10
    records = [TraceRecord.mem(gpu=0, peer=1, id=0, time_ns=0, bytes=64, op="write"),
               TraceRecord.mem(gpu=1, peer=2, id=1, time_ns=0, bytes=64, op="write",
                               dependency=0)]
    result = replay_model(build_plan({"gpus": 3}, records, cfg))
    assert result.inject[0] == 10
    assert result.inject[1] == result.deliver[0] + 1 + 2 * 10


def test_link_latency_is_validated():
    from hw.errors import ParameterError
    with pytest.raises(ParameterError, match="link_latency_ns"):
        ReplayConfig(link_latency_ns=-1.0)


@pytest.mark.slow
@pytest.mark.parametrize("sim", one_simulator("icarus"))
def test_allreduce_model_matches_rtl(sim, build_dir):
    """The curve's small points on the RTL: ring and in-switch with a 40-cycle hop, every
    delivery cycle equal to the model's (credits gated by the round trip in both)."""
    require_simulator(sim)
    from sim.cli.allreduce import rtl_config
    from sim.cosim.replay import RtlPlayer
    from sim.replay.result import compare

    cfg = rtl_config()
    for algo in ("inswitch", "ring"):
        rtl = measure(cfg, algo, 1024, backend=RtlPlayer(sim, build_dir=build_dir))
        model = measure(cfg, algo, 1024)
        assert rtl["replay"].mismatches == 0
        agree = compare(rtl["replay"], model["replay"])
        assert agree["missing"] == 0 and agree["exact"] == agree["deliveries"] > 0, agree
        assert rtl["cycles"] == model["cycles"]


def test_allreduce_cli(tmp_path, capsys):
    png = tmp_path / "ar.png"
    assert main(["allreduce", "--slots", "4,64", "--chunk-flits", "8", "--sizes",
                 "4096,262144", "-o", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert png.stat().st_size > 10_000
    assert out["flit_scale"] == 1 and out["link_latency_cycles"] == 3281
    assert len(out["rows"]) == 2 + 2 * 2
    assert "latency-bound" in out["answer"]


@pytest.mark.parametrize("argv, message", [
    (["--slots", "0"], "--slots"),
    (["--link-latency-ns", "-3"], "--link-latency-ns"),
    (["--slots", "70000"], "slots"),
    (["-o", "x.svg"], "-o"),
])
def test_allreduce_cli_bad_input(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["allreduce", "--sizes", "4096", *argv])
    except SystemExit as exc:   # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not list(tmp_path.iterdir())


def test_bench_replay_cli(capsys):
    """ResNet-50 at flit scale 64 (fast): the row states its scale and sizes."""
    assert main(["bench", "replay", "--workload", "resnet50", "--flit-scale", "64",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out["rows"][0]
    assert row["flit_scale"] == 64 and row["flit_bytes"] == 32 * 64
    assert row["flits"] > 0 and row["seconds"] > 0 and row["seconds_ratio"] == 1.0
    # CPU seconds: plan + replay, each part measured (not derived from the wall clock)
    assert row["plan_cpu_s"] > 0 and row["replay_cpu_s"] > 0
    assert row["cpu_s"] == pytest.approx(row["plan_cpu_s"] + row["replay_cpu_s"])


def test_bench_replay_cli_tree(capsys):
    """``--algo tree``: the double binary tree's iteration, whose parents wait for both
    children (a version-4 trace). Both move 2(n − 1) · S bytes in all (the ring: n GPUs,
    2(n − 1)/n · S each; the tree: two trees of S/2, up and down n − 1 edges each), so their
    flits differ only by the rounding of pieces to flits and packets."""
    args = ["bench", "replay", "--workload", "resnet50", "--flit-scale", "64", "--json"]
    assert main(args + ["--algo", "tree"]) == 0
    tree = json.loads(capsys.readouterr().out)["rows"][0]
    assert main(args) == 0
    ring = json.loads(capsys.readouterr().out)["rows"][0]
    assert tree["algo"] == "tree" and tree["cycles"] > 0
    assert tree["flits"] == pytest.approx(ring["flits"], rel=0.01)


def test_bench_replay_cli_both_algorithms(capsys):
    """``--algo both``: ring then in-switch rows, each algorithm's ratios to its own first row;
    the target is judged only at flit scale 1 with BERT-large first."""
    assert main(["bench", "replay", "--workload", "resnet50", "--flit-scale", "64",
                 "--algo", "both", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["algo"] for r in out["rows"]] == ["ring", "inswitch"]
    assert all(r["seconds_ratio"] == 1.0 for r in out["rows"])
    ring, inswitch = out["rows"]
    assert inswitch["packets"] > ring["packets"]   # 256 B chunks against 2 KiB packets
    assert "within_target" not in out and "bert_large_within_target" not in out
