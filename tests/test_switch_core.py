"""The fast model's C core (sim/model/switch_core.c) against the Python model it was written
from: identical results on random traces, every policy, reads, reductions and dependency chains;
the entry point's argument struct as the library describes it against its ctypes mirror."""

import ctypes
import json
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hw.spec import Policy
from sim.cli.main import main
from sim.model import switch_core
from sim.model.switch import replay_model
from sim.replay.config import ReplayConfig
from sim.replay.plan import build_plan
from sim.trace.format import write_trace
from sim.trace.synthetic import stress_trace


def assert_identical(ref, core):
    """Every quantity a replay reports, equal."""
    assert ref.extra["core"] == "python" and core.extra["core"] == "c"
    assert core.plan.packets == ref.plan.packets
    for name in ("src", "dst", "kind", "flits", "msg", "seq"):
        assert np.array_equal(getattr(core.plan, name), getattr(ref.plan, name)), name
    assert [(m.mid, m.src, m.dst, m.kind, m.issue, m.record, m.packets, m.response_to)
            for m in core.plan.messages] == \
           [(m.mid, m.src, m.dst, m.kind, m.issue, m.record, m.packets, m.response_to)
            for m in ref.plan.messages]
    assert np.array_equal(core.inject, ref.inject)
    assert np.array_equal(core.deliver, ref.deliver)
    assert core.results == ref.results
    assert core.message_done == ref.message_done
    assert list(core.stall_cycles) == list(ref.stall_cycles)
    assert list(core.egress_flits) == list(ref.egress_flits)
    assert list(core.ingress_flits) == list(ref.ingress_flits)
    assert core.summary() | {"wall_s": 0} == ref.summary() | {"wall_s": 0}
    assert core.extra["events"] == ref.extra["events"]   # the same events, superseded included


def replay_both(ports, policy, seed, slots, chunk_flits, mtu, span_ns, reads=True,
                messages=30, link_ns=0.0, **arbitration):
    """The Python model's and the C core's replays of one stress trace; ``arbitration``: the
    ReplayConfig's priorities, weights and quantum."""
    cfg = ReplayConfig(ports=ports, lanes=2, slots=slots, chunk_flits=chunk_flits,
                       policy=policy, flit_scale=1, link_gbps=32.0, mtu_flits=mtu,
                       link_latency_ns=link_ns, **arbitration)
    meta, records = stress_trace(gpus=ports, seed=seed, messages=messages, pieces=5,
                                 max_bytes=4096, piece_bytes=2048, span_ns=span_ns,
                                 reads=reads)
    plan = build_plan(meta, records, cfg)
    return replay_model(plan, core="python"), replay_model(plan, core="c")


@pytest.mark.parametrize("policy", list(Policy.names()))
@pytest.mark.parametrize("ports, slots, chunk_flits, mtu, span_ns, stalls", [
    (2, 1, 1, 1, 2_000, False),     # one slot: every chunk waits for the previous result
    (4, 4, 4, 8, 2_000, True),      # contended: ingress FIFOs fill, sources stall
    (8, 8, 8, 32, 30_000, False),   # sparse, long packets, many members
])
def test_core_matches_python_model(policy, ports, slots, chunk_flits, mtu, span_ns, stalls):
    ref, core = replay_both(ports, policy, 3, slots, chunk_flits, mtu, span_ns)
    assert ref.plan.packets > ref.plan.chunks > 0
    assert any(m.response_to >= 0 for m in ref.plan.messages), "reads should be answered"
    if stalls:
        assert sum(ref.stall_cycles) > 0
    assert_identical(ref, core)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ports=st.integers(2, 6), policy=st.sampled_from(list(Policy.names())),
       seed=st.integers(0, 10_000), slots=st.integers(1, 9), chunk_flits=st.integers(1, 9),
       mtu=st.integers(1, 40), span_ns=st.sampled_from([500, 5_000, 50_000]),
       reads=st.booleans(), link_ns=st.sampled_from([0.0, 1.0, 40.0]),
       mem_weight=st.integers(1, 4), result_weight=st.integers(1, 4),
       quantum=st.one_of(st.none(), st.integers(1, 24)), priorities=st.sampled_from(
           [(1, 0), (0, 1), (3, 3)]))
def test_core_matches_python_model_random(ports, policy, seed, slots, chunk_flits, mtu,
                                          span_ns, reads, link_ns, mem_weight, result_weight,
                                          quantum, priorities):
    assert_identical(*replay_both(ports, policy, seed, slots, chunk_flits, mtu, span_ns,
                                  reads=reads, messages=12, link_ns=link_ns,
                                  mem_weight=mem_weight, result_weight=result_weight,
                                  quantum_flits=quantum, mem_priority=priorities[0],
                                  result_priority=priorities[1]))


@pytest.mark.parametrize("policy, arbitration", [
    ("wrr", {"mem_weight": 1, "result_weight": 6}),   # results 6 packets per turn
    ("wrr", {"mem_weight": 5, "result_weight": 2}),   # memory 5 per ingress per turn
    ("drr", {"quantum_flits": 1}),                    # shorter than any packet
    ("drr", {"quantum_flits": 40}),                   # five chunks, longer than the MTU
])
def test_core_matches_python_model_with_chosen_weights(policy, arbitration):
    """wrr's per-class weights and drr's quantum reach both cores: on a contended trace (sources
    stall) the chosen weights change the deliveries against weights of one / a one-chunk
    quantum, and the C core still matches the Python model delivery for delivery."""
    ref, core = replay_both(4, policy, 5, 4, 4, 8, 2_000, **arbitration)
    assert sum(ref.stall_cycles) > 0 and ref.plan.chunks > 0
    assert_identical(ref, core)
    plain, plain_core = replay_both(4, policy, 5, 4, 4, 8, 2_000)
    assert_identical(plain, plain_core)
    assert not np.array_equal(ref.deliver, plain.deliver), "the weights changed nothing"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ports=st.integers(2, 6), seed=st.integers(0, 10_000), slots=st.integers(1, 6),
       chunk_flits=st.integers(1, 3), pieces=st.integers(4, 24),
       link_ns=st.sampled_from([0.0, 10.0, 60.0]))
def test_core_matches_python_model_inswitch_heavy(ports, seed, slots, chunk_flits, pieces,
                                                  link_ns):
    """Mostly contributions: many pieces of 1-3-flit chunks per port (an ingress holds more
    live packets than its ring's first size, so the ring grows), few slots held a round trip
    (results find the next chunk's message across message boundaries, out of chunk order when
    the engine picks by slot)."""
    cfg = ReplayConfig(ports=ports, lanes=2, slots=slots, chunk_flits=chunk_flits,
                       flit_scale=1, link_gbps=32.0, mtu_flits=8, link_latency_ns=link_ns)
    meta, records = stress_trace(gpus=ports, seed=seed, messages=4, pieces=pieces,
                                 max_bytes=512, piece_bytes=256, span_ns=2_000, reads=False)
    plan = build_plan(meta, records, cfg)
    assert plan.chunks > 0
    assert_identical(replay_model(plan, core="python"), replay_model(plan, core="c"))


@pytest.mark.parametrize("policy", ["rr", "drr"])
def test_core_matches_python_model_with_link_latency(policy):
    """A 100 ns hop (400 cycles here): credits, dependants and read responses all wait a
    round trip, in both cores alike."""
    ref, core = replay_both(4, policy, 5, 2, 4, 8, 5_000, link_ns=100.0)
    assert ref.plan.config.link_cycles == 400
    assert_identical(ref, core)
    quick, _ = replay_both(4, policy, 5, 2, 4, 8, 5_000)
    assert ref.cycles > quick.cycles + 2 * 400


def test_core_source_compiles_without_warnings(tmp_path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    done = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-c",
                           "-o", str(tmp_path / "core.o"), str(switch_core.SOURCE)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_core_args_match_library():
    """The ctypes mirror of the entry point's argument struct is the compiled library's own
    description of it: the same names in the same order, as many, int64 and pointer alike,
    the same size."""
    fields, size = switch_core.library_args(switch_core.library())
    ours = switch_core.SwitchArgs._fields_
    assert [name for name, _ in fields] == [name for name, _ in ours]
    assert len(fields) == len(ours) == len(switch_core.PARAMS) + len(switch_core.ARRAYS)
    assert [name for name, kind in fields if kind == "i64"] == list(switch_core.PARAMS)
    assert [name for name, kind in fields if kind == "pointer"] == list(switch_core.ARRAYS)
    assert fields[:len(switch_core.PARAMS)] == [(name, "i64") for name in switch_core.PARAMS]
    assert size == ctypes.sizeof(switch_core.SwitchArgs)


def test_core_policy_codes_are_the_spec_policies():
    """The policy codes the core switches on are hw.spec.Policy's, in order (the code passed is
    the policy's index), and check_args refuses a library that names others."""
    lib = switch_core.library()
    lib.innet_switch_policies.restype = ctypes.c_char_p
    assert tuple(lib.innet_switch_policies().decode().split()) == Policy.names()

    class Renamed:
        def __getattr__(self, name):
            if name == "innet_switch_policies":
                fake = lambda: b"rr wrr prio drr "   # noqa: E731
                fake.restype = fake.argtypes = None
                return fake
            return getattr(lib, name)

    with pytest.raises(switch_core.CoreUnavailable, match="policy codes"):
        switch_core.check_args(Renamed())


def _mirror(fields):
    return type("Mirror", (ctypes.Structure,), {"_fields_": fields})


def test_core_args_mismatch():
    """A mirror that differs from the library, by order, count or type, is named exactly."""
    lib = switch_core.library()
    fields = list(switch_core.SwitchArgs._fields_)
    switch_core.check_args(lib, _mirror(fields))
    swapped = fields[:2] + [fields[3], fields[2]] + fields[4:]
    with pytest.raises(switch_core.CoreUnavailable,
                       match="differ at field 2: result_lag i64 in C, result_depth i64 in "
                             "Python"):
        switch_core.check_args(lib, _mirror(swapped))
    with pytest.raises(switch_core.CoreUnavailable,
                       match=f"differ in length: {len(fields)} fields in C, "
                             f"{len(fields) - 1} in Python"):
        switch_core.check_args(lib, _mirror(fields[:-1]))
    narrow = [(name, ctypes.c_int32 if name == "slots" else ctype) for name, ctype in fields]
    with pytest.raises(switch_core.CoreUnavailable,
                       match="differ at field 5: slots i64 in C, slots c_int in Python"):
        switch_core.check_args(lib, _mirror(narrow))


def test_core_args_mismatch_is_unavailable(monkeypatch):
    """A library whose argument struct is not the mirror is not used: ``core="c"`` raises,
    ``"auto"`` falls back to the Python model and says why."""
    fields = list(switch_core.SwitchArgs._fields_)
    monkeypatch.setattr(switch_core, "SwitchArgs", _mirror(fields[1:] + fields[:1]))
    switch_core.library.cache_clear()
    cfg = ReplayConfig(ports=2, lanes=2, slots=2, chunk_flits=2, link_gbps=32.0)
    meta, records = stress_trace(gpus=2, seed=1, messages=5, pieces=2, span_ns=2_000)
    plan = build_plan(meta, records, cfg)
    try:
        with pytest.raises(switch_core.CoreUnavailable,
                           match="SwitchArgs and switch_core.py's Mirror differ at field 0: "
                                 "ports i64 in C, depth i64 in Python"):
            replay_model(plan, core="c")
        with pytest.warns(RuntimeWarning, match="Mirror differ at field 0"):
            assert replay_model(plan).extra["core"] == "python"
    finally:
        switch_core.library.cache_clear()


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    """A fresh cache and a compiler that fails: the core cannot be built."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    switch_core.library.cache_clear()
    yield
    switch_core.library.cache_clear()


def test_core_builds_without_tuned_flags(monkeypatch, tmp_path):
    """A compiler that refuses the CPU-tuning flags still builds the core (without them), and
    the library it makes replays like the Python model."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    seen = tmp_path / "calls"
    wrapper = tmp_path / "plain-cc"
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {seen}\n"
                       f"case \"$*\" in *-march=*) exit 1;; esac\nexec {cc} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(wrapper))
    switch_core.library.cache_clear()
    try:
        cfg = ReplayConfig(ports=2, lanes=2, slots=2, chunk_flits=2, link_gbps=32.0)
        meta, records = stress_trace(gpus=2, seed=1, messages=5, pieces=2, span_ns=2_000)
        plan = build_plan(meta, records, cfg)
        assert_identical(replay_model(plan, core="python"), replay_model(plan, core="c"))
    finally:
        switch_core.library.cache_clear()
    calls = seen.read_text().splitlines()
    assert len(calls) == 2 and "-march=native" in calls[0] and "-march" not in calls[1]
    assert len(list(switch_core._cache_dir().glob("*.so"))) == 1


def test_core_unavailable(no_compiler):
    cfg = ReplayConfig(ports=2, lanes=2, slots=2, chunk_flits=2, link_gbps=32.0)
    meta, records = stress_trace(gpus=2, seed=1, messages=5, pieces=2, span_ns=2_000)
    plan = build_plan(meta, records, cfg)
    with pytest.raises(switch_core.CoreUnavailable, match="false failed on switch_core.c"):
        replay_model(plan, core="c")
    with pytest.warns(RuntimeWarning, match="using the Python model"):
        ref = replay_model(plan)   # auto: falls back, and says so
    assert ref.extra["core"] == "python" and ref.deliver.max() > 0
    assert not list((switch_core._cache_dir()).glob("*.so")), "no library may be left behind"
    with pytest.raises(ValueError, match="core must be"):
        replay_model(plan, core="fast")


def test_replay_cli_model_cores(tmp_path, capsys):
    meta, records = stress_trace(gpus=4, seed=2, messages=10, pieces=3, span_ns=5_000)
    path = tmp_path / "t.itr"
    write_trace(path, meta, records)
    out = {}
    for core in ("c", "python"):
        assert main(["replay", str(path), "--model-core", core, "--lanes", "2", "--slots",
                     "4", "--chunk-flits", "2", "--link-gbps", "32", "--json"]) == 0
        out[core] = json.loads(capsys.readouterr().out)
        assert out[core].pop("model_core") == core
        out[core].pop("wall_s")
    assert out["c"] == out["python"]


def test_replay_cli_takes_the_weights(tmp_path, capsys):
    """innet replay --policy wrr --result-weight 6 replays what ReplayConfig(result_weight=6)
    does through the Python model; an out-of-range weight or quantum is one line naming the
    parameter and its range (the RTL's widths), exit 2."""
    meta, records = stress_trace(gpus=4, seed=5, messages=30, pieces=5, max_bytes=4096,
                                 piece_bytes=2048, span_ns=2_000)
    path = tmp_path / "t.itr"
    write_trace(path, meta, records)
    switch = ["--lanes", "2", "--slots", "4", "--chunk-flits", "4", "--mtu-flits", "8",
              "--link-gbps", "32", "--link-latency-ns", "0", "--json"]
    assert main(["replay", str(path), "--policy", "wrr", "--result-weight", "6",
                 "--model-core", "c", *switch]) == 0
    cycles = json.loads(capsys.readouterr().out)["cycles"]
    cfg = ReplayConfig(ports=4, lanes=2, slots=4, chunk_flits=4, mtu_flits=8, link_gbps=32.0,
                       policy="wrr", result_weight=6)
    assert cycles == replay_model(build_plan(meta, records, cfg), core="python").cycles
    plain = replay_model(build_plan(meta, records, replace(cfg, result_weight=1)), core="c")
    assert cycles != plain.cycles, "the weight should matter on this trace"
    for flag, value, words in (("--result-weight", "0", "result_weight: Reduction results' "
                                "weight must be between 1 and 255, not 0"),
                               ("--mem-weight", "256", "mem_weight: Memory traffic's weight "
                                "must be between 1 and 255"),
                               ("--quantum-flits", "65536", "quantum_flits: DRR quantum must "
                                "be between 1 and 65535"),
                               ("--mem-priority", "8", "mem_priority: Memory traffic's "
                                "priority must be between 0 and 7")):
        assert main(["replay", str(path), flag, value, *switch]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, err


def test_replay_cli_core_unavailable(no_compiler, tmp_path, capsys):
    meta, records = stress_trace(gpus=2, seed=2, messages=4, pieces=1, span_ns=5_000)
    path = tmp_path / "t.itr"
    write_trace(path, meta, records)
    assert main(["replay", str(path), "--model-core", "c"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("innet: error: fast model C core: false failed") and err.count("\n") == 1


@pytest.mark.parametrize("algo", ["inswitch", "ring"])
def test_core_matches_python_model_on_a_long_allreduce(algo):
    """Thousands of chunks per port with a link hop: the C core forgets old result packets as
    it goes (its per-egress tables slide), and still matches the Python model exactly."""
    from sim.replay.allreduce import allreduce_trace

    cfg = ReplayConfig(ports=4, lanes=2, slots=4, chunk_flits=4, mtu_flits=16,
                       link_gbps=8.0, link_latency_ns=40.0)
    meta, records = allreduce_trace(algo, 4, 64 << 10, cfg.flit_bytes * cfg.mtu_flits)
    plan = build_plan(meta, records, cfg)
    if algo == "inswitch":
        assert plan.chunks == (64 << 10) // cfg.chunk_bytes
    core = replay_model(plan, core="c")
    assert_identical(replay_model(plan, core="python"), core)
    # nothing to deliver: the C core's deliveries are a view of -1s, no array of its own
    assert core.deliver.flags.writeable == (algo != "inswitch")


def _dependent_inswitch_trace(gpus, seed, pieces, piece_bytes):
    """In-switch pieces that wait for messages: each GPU's piece p depends on its piece p - 1
    (a message done when every result came back) or on a memory write it received (done when
    delivered), with memory writes between GPUs, some of which wait for a piece."""
    import random

    from sim.trace.format import SWITCH_PORT, TraceRecord

    rng = random.Random(seed)
    records, last_piece, received = [], {}, {g: [] for g in range(gpus)}
    for piece in range(pieces):
        t0 = piece * 150
        for g in range(gpus):
            peer = (g + 1 + rng.randrange(gpus - 1)) % gpus
            dep = last_piece.get(g) if rng.random() < 0.5 else None
            rid = len(records)
            records.append(TraceRecord.mem(gpu=g, peer=peer, id=rid, time_ns=t0, op="write",
                                           bytes=rng.randrange(1, 600), dependency=dep))
            received[peer].append(rid)
        for g in range(gpus):
            dep = rng.choice([last_piece.get(g), rng.choice(received[g] or [None]), None])
            last_piece[g] = len(records)
            records.append(TraceRecord.grad(gpu=g, peer=SWITCH_PORT, id=len(records),
                                            time_ns=t0 + rng.randrange(100), bytes=piece_bytes,
                                            algo="inswitch", bucket=piece, chunk=0,
                                            dependency=dep))
    return {"gpus": gpus, "generator": "tests.test_switch_core"}, records


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ports=st.integers(2, 8), seed=st.integers(0, 10_000), slots=st.integers(1, 8),
       policy=st.sampled_from(list(Policy.names())), link_ns=st.sampled_from([10.0, 60.0]))
def test_core_matches_python_model_inswitch_credits_and_dependencies(ports, seed, slots,
                                                                     policy, link_ns):
    """In-switch traffic the way an iteration sends it, at the bench's chunk and packet sizes:
    pieces of many chunks held back by a few slots' credits a link round trip away, pieces
    waiting for earlier pieces (their results) and for memory writes, writes waiting for
    pieces. Each port has many source events pending at once (a credit's, a dependant's, its
    own next start), arriving out of cycle order; both cores handle them alike."""
    cfg = ReplayConfig(ports=ports, lanes=2, slots=slots, chunk_flits=8, mtu_flits=64,
                       policy=policy, flit_scale=1, link_gbps=32.0, link_latency_ns=link_ns)
    meta, records = _dependent_inswitch_trace(ports, seed, pieces=6, piece_bytes=1024)
    plan = build_plan(meta, records, cfg)
    assert plan.chunks == 6 * 1024 // cfg.chunk_bytes
    assert any(m.deps and m.dst < 0 for m in plan.messages)
    ref = replay_model(plan, core="python")
    assert ref.slot_peak >= slots   # the pool fills: the credits bind
    assert_identical(ref, replay_model(plan, core="c"))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ports=st.integers(2, 8), policy=st.sampled_from(list(Policy.names())),
       link_ns=st.sampled_from([10.0, 60.0]), pieces=st.integers(1, 4))
def test_core_matches_python_model_on_tree_dependencies(ports, policy, link_ns, pieces):
    """A tree all-reduce: parents wait for several children (wait records in the trace,
    several dependencies per message); both cores count them down alike."""
    from sim.replay.allreduce import allreduce_trace

    cfg = ReplayConfig(ports=ports, lanes=2, chunk_flits=8, mtu_flits=16, policy=policy,
                       flit_scale=1, link_gbps=32.0, link_latency_ns=link_ns)
    meta, records = allreduce_trace("tree", ports, 2 * pieces * 512, 512)
    plan = build_plan(meta, records, cfg)
    assert ports < 3 or any(len(m.deps) == 2 for m in plan.messages)
    assert_identical(replay_model(plan, core="python"), replay_model(plan, core="c"))


def test_small_pages_switches_numpy_huge_page_advice_off_and_back():
    """Plans and C-core outputs are allocated without numpy's huge-page advice, and numpy's
    own setting comes back afterwards, on an exception too."""
    from sim.replay import pages

    switch = pages._hugepage_switch()
    assert switch is not None, "this numpy has no huge-page switch"
    was = switch(True)
    try:
        with pages.small_pages():
            assert switch(False) is False   # inside: off (the call returns the setting)
        assert switch(True) is True         # restored
        with pytest.raises(RuntimeError), pages.small_pages():
            raise RuntimeError
        assert switch(True) is True
    finally:
        switch(was)
