"""innet run / sweep / replay from the command line: outputs, bad input, Dask."""

import json

import pytest

from sim.cli.main import main
from sim.errors import ConfigError
from sim.experiment.config import load_config
from sim.trace.format import trace_summary

from .conftest import TINY


def test_run_writes_the_report(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "--name", "r", "--quiet",
                 "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    out = tmp_path / "out" / "r"
    for name in ("results.json", "results.csv", "report.md", "slowdown.png", "timeline.png",
                 "timeline.json", "allreduce_vs_bucket.png"):
        assert (out / name).stat().st_size > 0, name
    points = payload["points"]
    assert len(points) == 4
    by = {(p["algo"], p["bucket_mb"]): p for p in points}
    # In-switch reduction sends each gradient once instead of twice: less all-reduce time and
    # less SM/HBM slowdown than the ring.
    for bucket in (25, 100):
        ring, ins = by[("ring", bucket)], by[("inswitch", bucket)]
        assert ins["allreduce_ms"] < ring["allreduce_ms"]
        assert ins["slowdown_sm"] < ring["slowdown_sm"]
        total = ring["slowdown_sm"] + ring["slowdown_hbm"] + ring["slowdown_l2"] + \
            ring["slowdown_link"]
        assert ring["backprop_slowdown"] == pytest.approx(total, abs=1e-9)
    assert "| bert_large | 25 | ring | rr |" in (out / "report.md").read_text()


@pytest.mark.parametrize("text, message", [
    ("[experiment]\ngpus = 1\n", "[experiment] gpus: must be 2..64"),
    ("[experiment]\nfoo = 1\n", "[experiment] foo: unknown key"),
    ("[nope]\n", "[nope]: unknown section"),
    ("[experiment]\nalgorithms = ['ring', 'magic']\n", "'magic' is not one of"),
    ("[experiment]\ngpus = 'eight'\n", "[experiment] gpus: expected int"),
    ("[switch]\nlanes = 0\n", "[switch] lanes: must be 1..64"),
    ("[switch]\nmem_weight = 0\n", "[switch] mem_weight: must be 1..255, not 0"),
    ("[switch]\nresult_weight = 256\n", "[switch] result_weight: must be 1..255, not 256"),
    ("[switch]\nquantum_flits = 65536\n", "[switch] quantum_flits: must be 0..65535"),
    ("[experiment\n", "bad.toml:"),
])
def test_bad_config_is_one_line(tmp_path, capsys, text, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    assert main(["run", str(bad), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_default_config_is_valid():
    config = load_config()
    assert config.workloads == ("bert_large",) and config.gpus == 8
    with pytest.raises(ConfigError):
        load_config("[experiment]\ngpu = 'tpu'\n", "x.toml")


@pytest.mark.parametrize("text, hint", [
    ("[experiment]\nworklods = ['resnet50']\n", "worklods: unknown key; did you mean 'workloads'?"),
    ("[switch]\nslot = 4\n", "slot: unknown key; did you mean 'slots'?"),
    ("[experiment]\nlanes = 2\n", "lanes: unknown key; it belongs in [switch]"),
    ("[experiment]\nlane = 2\n", "lane: unknown key; did you mean [switch] lanes?"),
    ("[swich]\n", ("[swich]: unknown section (expected [experiment], [switch]); did you mean "
                   "[switch]?")),
    ("[experiment]\nworkloads = ['bert-large']\n", "did you mean 'bert_large'?"),
    ("[experiment]\npolicies = ['pri']\n", "did you mean 'prio'?"),
    ("[switch]\nresult_weights = 2\n", "result_weights: unknown key; did you mean "
                                        "'result_weight'?"),
    ("[experiment]\nquantum_flits = 8\n", "quantum_flits: unknown key; it belongs in [switch]"),
])
def test_misspelt_config_says_did_you_mean(tmp_path, capsys, text, hint):
    bad = tmp_path / "typo.toml"
    bad.write_text(text)
    assert main(["run", str(bad), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and hint in err and str(bad) in err, err


def test_unknown_key_far_from_any_has_no_guess():
    with pytest.raises(ConfigError) as info:
        load_config("[experiment]\nzzz = 1\n", "x.toml")
    assert str(info.value) == "x.toml: [experiment] zzz: unknown key"


ODD = '[experiment]\nname = "q\\"uote\\\\ \\u00e9"\ngpus = 16\nbucket_mb = [1, 2.5]\n'


@pytest.mark.parametrize("user", [None, TINY, ODD])
def test_print_config_reloads_to_the_same_configuration(tmp_path, capsys, user):
    """``--print-config`` prints the default, or the user's file over the defaults, as TOML
    that loads back to the same configuration; it runs nothing and writes nothing."""
    args = ["run", "--print-config", "-o", str(tmp_path / "out")]
    if user is not None:
        (tmp_path / "user.toml").write_text(user)
        args.insert(1, str(tmp_path / "user.toml"))
    assert main(args) == 0
    printed = capsys.readouterr().out
    expected = load_config() if user is None else load_config(user, "user.toml")
    again = load_config(printed, "printed.toml")
    assert {**again.as_dict(), "source": None} == {**expected.as_dict(), "source": None}
    assert "[experiment]" in printed and "[switch]" in printed
    assert not (tmp_path / "out").exists()


def test_print_config_applies_no_rtl(capsys):
    assert main(["run", "--print-config", "--no-rtl"]) == 0
    assert load_config(capsys.readouterr().out).rtl is False


def test_replay_model_cli(capsys, tmp_path):
    timeline = tmp_path / "t.json"
    assert main(["replay", "traces/resnet50_a100x4_inswitch.itr", "--flit-scale", "256",
                 "--timeline", str(timeline), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "model" and out["results_delivered"] > 0
    assert out["mismatches"] == 0
    # The timeline: each GPU's kernels of the trace on its two streams, each port's counter.
    assert out["timeline"] == str(timeline)
    events = json.loads(timeline.read_text())["traceEvents"]
    kernels = [e for e in events if e["ph"] == "X"]
    assert len(kernels) == trace_summary("traces/resnet50_a100x4_inswitch.itr")["by_type"][
        "kernel"]
    assert {e["tid"] for e in kernels} == {0, 1}
    assert {e["name"] for e in events if e["ph"] == "C"} == {
        f"port {d} egress utilization" for d in range(4)}


def test_replay_writes_its_timeline_beside_the_trace(tmp_path, capsys):
    import shutil
    trace = tmp_path / "r.itr"
    shutil.copy("traces/resnet50_a100x4_ring.itr", trace)
    assert main(["replay", str(trace), "--flit-scale", "256", "--json"]) == 0
    assert json.loads((tmp_path / "r.timeline.json").read_text())["traceEvents"]


def test_replay_bad_input(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.itr")]) == 2
    assert "no such trace file" in capsys.readouterr().err
    assert main(["replay", "traces/resnet50_a100x4_ring.itr", "--ports", "2"]) == 2
    assert "4 GPUs but the switch has 2 ports" in capsys.readouterr().err


@pytest.mark.slow
def test_sweep_on_dask(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert main(["sweep", str(config), "--dask", cluster.scheduler_address, "-o",
                     str(tmp_path / "d"), "--name", "s", "--quiet", "--json"]) == 0
    on_dask = json.loads(capsys.readouterr().out)["points"]
    assert main(["sweep", str(config), "--jobs", "2", "-o", str(tmp_path / "d"), "--name",
                 "p", "--quiet", "--json"]) == 0
    on_pool = json.loads(capsys.readouterr().out)["points"]
    key = lambda p: (p["workload"], p["bucket_mb"], p["algo"], p["policy"])  # noqa: E731
    assert [key(p) for p in on_dask] == [key(p) for p in on_pool]
    for a, b in zip(on_dask, on_pool):
        assert a["iteration_ms"] == b["iteration_ms"]


@pytest.mark.slow
def test_run_rtl_windows_share_one_build(tmp_path, capsys):
    """With rr and prio points, the rr windows replay on the prio build with equal priorities
    (round-robin by the arbiter's definition): every delivery still equals the rr model's."""
    config = tmp_path / "rtl.toml"
    config.write_text(TINY.replace('policies = ["rr"]', 'policies = ["rr", "prio"]')
                      .replace("rtl = false", "rtl = true")
                      .replace('algorithms = ["ring", "inswitch"]', 'algorithms = ["inswitch"]')
                      .replace("bucket_mb = [25, 100]", "bucket_mb = [25]")
                      # A small switch: the default 8 x 256 one takes minutes to compile,
                      # and the window checks the shared build, not the switch's size. This
                      # one is the 4-port prio switch tests/test_cosim.py replays, so its
                      # build comes from the shared build cache.
                      .replace("target_flits = 4000",
                               "target_flits = 40000\nlanes = 2\nslots = 8\nchunk_flits = 4"))
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "--name", "r", "--quiet",
                 "--json"]) == 0
    points = {p["policy"]: p for p in json.loads(capsys.readouterr().out)["points"]}
    rr, prio = points["rr"]["validation"], points["prio"]["validation"]
    assert rr["rtl_switch"] == "prio build, equal priorities (= rr)"
    assert prio["rtl_switch"] == "prio build"
    for v in (rr, prio):
        assert v["deliveries"] > 10 and v["missing"] == 0
        assert v["exact"] == v["deliveries"], v
        assert sum(v["errors"].values()) == 0
