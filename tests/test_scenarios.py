"""Scenarios (docs/scenarios.md): every shipped file validates, a reduced version of every kind
runs through ``innet run`` and meets a hand-derived golden, bad files are one line."""

import json
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.experiment.config import load_config
from sim.gpu.collectives import collective_cost
from sim.gpu.iteration import IterationConfig, simulate_iteration
from sim.gpu.presets import gpu_preset
from sim.gpu.workloads import build_workload
from sim.scenarios import KINDS
from sim.scenarios.config import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))


def _run(tmp_path, text, name="s"):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    assert main(["run", str(path), "-o", str(tmp_path / "out"), "--name", name, "--quiet",
                 "--json"]) == 0
    out = tmp_path / "out" / name
    assert (out / "report.md").is_file()
    return json.loads((out / "results.json").read_text()), out


def test_every_shipped_scenario_validates():
    kinds = set()
    for path in SHIPPED:
        text = path.read_text()
        if "[scenario]" in text:
            kinds.add(load_scenario(text, str(path)).kind)
        else:   # the KAIST 2021 file is the default experiment itself
            assert load_config(text, str(path)).as_dict() | {"source": ""} == \
                load_config().as_dict() | {"source": ""}
    assert kinds == set(KINDS)


@pytest.mark.parametrize("path", [p for p in SHIPPED if "[scenario]" in p.read_text()],
                         ids=lambda p: p.stem)
def test_print_config_of_a_scenario_reloads_to_the_same_scenario(path, capsys):
    """``innet run X.toml --print-config`` prints every key, defaults filled in; read back it
    is the same scenario (and ``--no-rtl`` turns its RTL window off)."""
    assert main(["run", str(path), "--print-config", "--no-rtl"]) == 0
    printed = capsys.readouterr().out
    again = load_scenario(printed, "printed.toml")
    original = load_scenario(path.read_text(), str(path))
    assert again.as_dict() | {"source": ""} == original.as_dict() | {"rtl": False, "source": ""}
    assert f"[{original.kind}]" in printed and "[switch]" in printed


@pytest.mark.parametrize("args, message", [
    (["sweep", "scenarios/easgd.toml"], "a scenario file runs in seconds with `innet run"),
    (["run", "scenarios/easgd.toml", "--rtl-windows"], "--rtl-windows: scenarios/easgd.toml is a"),
    (["run", "scenarios/easgd.toml", "--rtl-windows", "--print-config"], "--rtl-windows: "),
])
def test_what_a_scenario_cannot_do_is_one_line(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(args + ["-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, message", [
    ('[scenario]\nkind = "easgdd"\n', "[scenario] kind: 'easgdd' is not one of"),
    ('[scenario]\nkind = "easgd"\n[easgd]\ntau = [0]\n', "[easgd] tau: must be 1..100000"),
    ('[scenario]\nkind = "easgd"\n[easgd]\ntaus = [1]\n', "[easgd] taus: unknown key; did you"),
    ('[scenario]\nkind = "elastic"\n[elastic]\nphases = [4, 4]\n', "[elastic] phases: two"),
    ('[scenario]\nkind = "easgd"\nalgorithms = ["nvls"]\n', "[scenario] algorithms: nvls"),
    ('[scenario]\nkind = "easgd"\n[swich]\n', "[swich]: unknown section"),
    ('[scenario]\nkind = "pipeline"\n[pipeline]\nstages = 8\nreplicas = 9\n',
     "[pipeline] replicas: stages x replicas must be at most 64"),
    ('[scenario]\nkind = "pipeline"\nbatch = 4\n[pipeline]\nmicro_batches = 8\n',
     "[pipeline] micro_batches: must be at most the batch (4)"),
    ('[scenario]\nkind = "pipeline"\n[pipeline]\nschedules = ["pipedream"]\n',
     "[pipeline] schedules: 'pipedream' is not one of"),
    ('[scenario]\nkind = "offload"\nworkload = "resnet50"\n',
     "[scenario] workload: needs a transformer"),
    ('[scenario]\nkind = "offload"\nworkload = "gpt2_xl"\n[offload]\noffload = ["zero"]\n',
     "[offload] offload: 'zero' is not one of"),
])
def test_bad_scenario_is_one_line(tmp_path, capsys, text, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    assert main(["run", str(bad), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_easgd_share_and_serialised_holder(tmp_path):
    """Share = comm / (comm + τ · step) from the GPU model's own times; async round-robin
    through the switch: worker k finishes after k + 1 push/pull pairs, each 2 S at line rate."""
    payload, out = _run(tmp_path, """
[scenario]
kind = "easgd"
workload = "resnet50"
batch = 32
algorithms = ["ring", "inswitch"]
rtl = false
[easgd]
tau = [1, 8]
workers = [3]
""")
    gpu, wl = gpu_preset("a100"), build_workload("resnet50", batch=32)
    step = simulate_iteration(wl, gpu, IterationConfig(n_gpus=1), record=False).iteration_s
    size = wl.params * 4
    points = {(p["centre"], p["tau"]): p
              for p in payload["sections"]["Share of time spent communicating"]["points"]}
    for algo in ("ring", "inswitch"):
        comm = collective_cost(gpu, 3, size, "allreduce", algo).time_s
        for tau in (1, 8):
            assert points[(algo, tau)]["share_model"] == pytest.approx(comm / (comm + tau * step))
    line = 2 * size / (gpu.link_gbps * 1e9)   # one push + one pull at line rate
    assert points[("async", 1)]["comm_switch_ms"] / 1e3 == pytest.approx(2 * line, rel=0.05)
    assert (out / "easgd_share.png").is_file()
    assert len(list((out / "traces").glob("*.itr"))) == 4   # ring, inswitch, ps, async


def test_elastic_scales_and_changes(tmp_path):
    """Throughput scales with the device set; NCCL's change costs ncclCommInitRank plus the
    model's broadcast; shrinking in the switch costs one cycle."""
    payload, _ = _run(tmp_path, """
[scenario]
kind = "elastic"
workload = "resnet50"
batch = 32
algorithms = ["ring", "inswitch"]
rtl = false
[elastic]
phases = [2, 4, 3]
comm_init_s = 0.5
grad_accum = 2
""")
    phases = payload["sections"]["Elastic device sets"]["phases"]
    gpu, wl = gpu_preset("a100"), build_workload("resnet50", batch=32)
    for algo in ("ring", "inswitch"):
        it = {n: simulate_iteration(wl, gpu, IterationConfig(n_gpus=n, algo=algo),
                                    record=False).iteration_s for n in (2, 4)}
        rate = {n: phases[algo][str(n)]["samples_per_s"] for n in (2, 4)}
        assert rate[4] / rate[2] == pytest.approx(2 * it[2] / it[4], rel=1e-9)
        assert 1.9 < rate[4] / rate[2] < 2.05   # near-linear: the all-reduce is mostly hidden
    ring_grow = phases["ring"]["change_2_4_s"]
    assert ring_grow == pytest.approx(
        0.5 + collective_cost(gpu, 4, wl.params * 4, "broadcast", "tree").time_s)
    assert phases["inswitch"]["change_4_3_s"] == pytest.approx(8 / gpu.link_gbps * 1e-9)
    big = payload["sections"]["Large batches and stragglers"]
    assert big["straggler_slowdown"] == pytest.approx(0.25, abs=0.05)


@pytest.mark.slow
def test_elastic_device_set_changes_in_the_rtl(tmp_path):
    """The one RTL run of this file: job A's group 2 -> 4 -> 3 on one switch without a reset;
    each phase's results are checked against numpy by the scoreboard and are cycle-exact with
    the model's cold replay, and the job-table write takes one cycle. (The switch is the
    smallest holding 4 GPUs, with the scenario's first policy: here the 4-port prio build of
    tests/test_backends.py, 8 slots of 4-flit chunks.)"""
    from sim.cosim.runner import available_simulators
    if "verilator" not in available_simulators():
        pytest.skip("verilator not installed")
    payload, _ = _run(tmp_path, """
[scenario]
kind = "elastic"
workload = "resnet50"
batch = 32
algorithms = ["inswitch"]
policies = ["prio"]
rtl = true
[switch]
slots = 8
chunk_flits = 4
[elastic]
phases = [2, 4, 3]
rtl_chunks = 4
other_job = false
""")
    windows = payload["rtl_windows"]
    assert [w["members"] for w in windows] == [2, 4, 3]
    assert {w["rtl_switch"] for w in windows} == {"4-port prio build"}
    for w in windows:
        assert w["exact"] == w["deliveries"] > 0 and w["mismatches"] == 0
        assert not any(w["errors"].values())
    assert [w["job_table_write_cycles"] for w in windows] == [0, 1, 1]


def test_schedules_meet_the_bubble_formula():
    """Equal stages, no messages: GPipe and 1F1B idle (p − 1)/(m + p − 1) of the time, async
    (no flush over k steps) (p − 1)/(k·m + p − 1); one shared reduction unit serialises the
    stages' reductions in the order their last backwards end."""
    from sim.scenarios.schedule import simulate
    for p, m in ((4, 2), (4, 8), (3, 5)):
        for sch in ("gpipe", "1f1b"):
            t = simulate([1.0] * p, [2.0] * p, m, sch)
            assert t.bubble == pytest.approx((p - 1) / (m + p - 1))
            assert t.makespan == pytest.approx((m + p - 1) * 3.0)
        t = simulate([1.0] * p, [2.0] * p, m, "async", steps=3)
        assert t.bubble == pytest.approx((p - 1) / (3 * m + p - 1))
    # 1F1B, 4 stages, 2 micro-batches: stage s's last backward ends at 15 - 2s; reductions of 5
    t = simulate([1.0] * 4, [2.0] * 4, 2, "1f1b", reduce_s=lambda s, k: 5.0)
    assert t.stage_end == pytest.approx([20.0, 18.0, 16.0, 14.0])
    t = simulate([1.0] * 4, [2.0] * 4, 2, "1f1b", reduce_s=lambda s, k: 5.0,
                 shared_reducer=True)
    assert t.stage_end == pytest.approx([29.0, 24.0, 19.0, 14.0])
    # message-driven against lock-step, 2 stages, 2 micro-batches, F = 1, B = 2 (by hand):
    # stage 1's F1 waits for a round to start at 4 instead of running at 2 -> 10 against 9
    assert simulate([1.0] * 2, [2.0] * 2, 2, "1f1b").makespan == pytest.approx(9.0)
    assert simulate([1.0] * 2, [2.0] * 2, 2, "1f1b", lockstep=True).makespan == \
        pytest.approx(10.0)


def test_pipeline_bubble_and_stage_reductions(tmp_path):
    """A reduced PP × DP run (2 stages × 2 replicas): with one micro-batch every schedule idles
    (p − 1)/p whatever the stages' times; the stages' gradients are the model's; a 2-GPU
    all-reduce, ring or in the switch, moves each GPU's gradients once each way: the larger
    stage's (thousands of flits) takes its bytes over the link rate, never less, and at most
    8 % more: the fixed costs (a kernel start, two hops, the switch's pipeline at the flit
    scale's grain) came to 0.2–5.1 % at this size (the in-switch async point 4.94 % before
    the register on the switch's egress links, 5.06 % with it)."""
    payload, out = _run(tmp_path, """
[scenario]
kind = "pipeline"
workload = "resnet50"
batch = 16
algorithms = ["ring", "inswitch"]
rtl = false
[pipeline]
stages = 2
replicas = 2
micro_batches = 2
schedules = ["1f1b", "async"]
steps = 2
bubble_sweep = [1, 4]
""")
    sec = payload["sections"]["Pipeline × data parallelism"]
    wl, gpu = build_workload("resnet50", batch=16), gpu_preset("a100")
    assert sec["bubble"]["1f1b@1"] == pytest.approx(0.5)
    assert sum(s["grad_bytes"] for s in sec["stages"]) == wl.params * wl.grad_bytes
    big = max(range(2), key=lambda s: sec["stages"][s]["grad_bytes"])   # many flits: line rate
    line_ms = sec["stages"][big]["grad_bytes"] / (gpu.link_gbps * 1e9) * 1e3
    for point in sec["points"]:
        assert line_ms * (1 - 1e-9) <= point["reduce_alone_ms"][str(big)] <= line_ms * 1.08
        assert point["step_shared_ms"] >= point["step_alone_ms"] * (1 - 1e-9)
    assert (out / "pipeline_bubble.png").is_file() and (out / "pipeline_schedule.png").is_file()


def test_offload_saves_what_it_moves(tmp_path):
    """Optimizer offload moves 12 of 16 bytes per parameter to the host (the model state 4x
    smaller) and streams 24 bytes per parameter over PCIe each step; the GPU memory saved is
    exactly the bytes offloaded."""
    payload, out = _run(tmp_path, """
[scenario]
kind = "offload"
workload = "bert_large"
batch = 4
gpu = "v100"
algorithms = ["ring", "inswitch"]
rtl = false
[offload]
tensor = 2
stages = 2
micro_batches = 2
""")
    sec = payload["sections"]["Offload"]
    points = {(p["algo"], p["offload"]): p for p in sec["points"]}
    wl = build_workload("bert_large", batch=4)
    from sim.scenarios.pipeline import split_stages
    ranges = split_stages(wl, gpu_preset("v100"), 2)
    params = [sum(layer.params for layer in wl.layers[a:b]) / 2 for a, b in ranges]
    for algo in ("ring", "inswitch"):
        none, opt, act = (points[(algo, m)] for m in ("none", "optimizer", "activations"))
        for stage, n in enumerate(params):
            saved = none["per_stage"][stage]["gpu_bytes"] - opt["per_stage"][stage]["gpu_bytes"]
            assert saved == pytest.approx(12 * n) == opt["per_stage"][stage]["offloaded_bytes"]
            assert none["per_stage"][stage]["gpu_bytes"] - act["per_stage"][stage]["gpu_bytes"] \
                == pytest.approx(act["per_stage"][stage]["offloaded_bytes"])
        assert opt["pcie_bytes"] == pytest.approx(24 * max(params))
        assert opt["state_ratio"] == 4.0
        assert opt["slowdown"] >= 0 and act["slowdown"] >= 0
        assert none["lockstep_ms"] >= none["step_ms"]
    nv = sec["nvlink_host"]
    assert all(nv[a]["with"] >= nv[a]["alone"] for a in ("ring", "inswitch"))
    assert (out / "offload_memory.png").is_file()
